//! Stopping the real `ptc-sidecar serve` binary. SIGTERM: new runs get 503 `shutting_down`,
//! the running one finishes (within `PTC_SHUTDOWN_GRACE`, else it is stopped and says why), the
//! MCP server, fork server and warm children stop, the last events reach Redis, the runtime
//! directory goes (a given one stays, without its scratch directories), and the exit code is 0.
//! SIGKILL: no fork server, run or MCP server outlives the sidecar (`PR_SET_PDEATHSIG` from the
//! spawning thread, the fork server's socket), and the next sidecar on the same runtime
//! directory removes the scratch directories it left.

use super::common::{TEST_TIMEOUT, TempDir, TestRedis};
use super::procs;
use super::serving::Serving;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Asserts the family has the processes the test is about, then that each is gone.
async fn assert_all_gone(family: &[(i32, String)], expect: &[&str]) {
    for what in expect {
        assert!(
            family.iter().any(|(_, cmd)| cmd.contains(what)),
            "no {what} among the sidecar's processes: {family:#?}"
        );
    }
    let pids: Vec<i32> = family.iter().map(|(p, _)| *p).collect();
    let left = procs::wait_dead(&pids).await;
    let left: Vec<_> = family.iter().filter(|(p, _)| left.contains(p)).collect();
    assert!(left.is_empty(), "outlived the sidecar: {left:#?}");
}

#[tokio::test]
async fn sigterm_lets_the_run_finish_refuses_new_ones_and_exits_clean() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("shutdown-term");
        let redis = TestRedis::any();
        let mut s = Serving::start(&dir, &redis, &[("PTC_WARM_WORKERS", "1")]).await;
        assert_eq!(s.runtime_dirs().len(), 1);
        // The MCP server still answers after the signal: the run's call comes after it.
        let run = s.exec("import time\ntime.sleep(1.5)\nprint(await demo__multiply(a=6, b=7))\n");
        s.until_running().await;
        let family = s.family_with(&["ptc-demo-mcp", "ptc_zygote.py"]).await;
        s.signal(libc::SIGTERM);

        // Until the signal is handled a run may still start; from then on, 503.
        let deadline = Instant::now() + Duration::from_secs(5);
        let refused = loop {
            let (status, body) = s.exec("print('late')").await.unwrap().unwrap();
            if status == 503 {
                break body;
            }
            assert_eq!(body["status"], "ok", "{body}");
            assert!(Instant::now() < deadline, "new runs were still taken");
        };
        assert_eq!(
            refused,
            json!({"error": {"type": "shutting_down", "message":
                "ptc-sidecar is shutting down and takes no new runs; send the run to another instance"}})
        );
        let health = s.http.get(s.url("/healthz")).send().await.unwrap();
        assert_eq!(health.status().as_u16(), 503);
        let health: Value = health.json().await.unwrap();
        assert_eq!(health["status"], "shutting_down");

        let (status, result) = run.await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(result["stdout"], "42\n");

        assert_eq!(s.exit_code().await, Some(0), "{}", s.log.lock().unwrap());
        assert_all_gone(&family, &["ptc-demo-mcp", "ptc_zygote.py"]).await;
        assert_eq!(s.runtime_dirs(), Vec::<String>::new());
        // The run's last event was sent before the exit.
        let mut redis_conn = redis.connection().await;
        let stream: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(format!("ptc:stream:{}", s.agent))
            .arg("-")
            .arg("+")
            .query_async(&mut redis_conn)
            .await
            .unwrap();
        let finished: Vec<Value> = stream
            .iter()
            .map(|(_, fields)| serde_json::from_str::<Value>(&fields[0].1).unwrap())
            .filter(|e| e["type"] == "exec.finished" && e["exec_id"] == "r0")
            .collect();
        assert_eq!(finished.len(), 1, "{stream:?}");
        assert_eq!(finished[0]["status"], "ok");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_run_past_the_grace_is_stopped_and_says_why() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("shutdown-grace");
        let redis = TestRedis::any();
        let mut s = Serving::start(&dir, &redis, &[("PTC_SHUTDOWN_GRACE", "1")]).await;
        let run = s.exec("import time\nprint('started', flush=True)\ntime.sleep(60)\n");
        s.until_running().await;
        let family = s.family_with(&["ptc-demo-mcp", "python3"]).await;
        let signalled = Instant::now();
        s.signal(libc::SIGTERM);
        let (status, result) = run.await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(result["status"], "error", "{result}");
        assert_eq!(result["stdout"], "started\n");
        let stderr = result["stderr"].as_str().unwrap();
        assert!(
            stderr.ends_with(
                "ptc-sidecar: stopped: the sidecar is shutting down and the run did not finish \
                 within PTC_SHUTDOWN_GRACE\n"
            ),
            "{stderr}"
        );
        assert!(signalled.elapsed() >= Duration::from_secs(1));
        assert_eq!(s.exit_code().await, Some(0), "{}", s.log.lock().unwrap());
        assert_all_gone(&family, &["ptc-demo-mcp", "python3"]).await;
        assert_eq!(s.runtime_dirs(), Vec::<String>::new());
    })
    .await
    .unwrap();
}

/// With warm workers (a fork server, a warm child, a forked run) and without (a cold run):
/// a sidecar killed with SIGKILL takes every child with it.
#[tokio::test]
async fn sigkill_leaves_no_process_behind() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        for (warm, expect) in [
            ("1", &["ptc-demo-mcp", "ptc_zygote.py"][..]),
            // A cold run without a warm pool: forked by a fork server of its own where runs
            // get namespaces (only a fork server's child makes them), else started directly.
            ("0", &["ptc-demo-mcp", "ptc_"][..]),
        ] {
            let dir = TempDir::new("shutdown-kill");
            let redis = TestRedis::any();
            let mut s = Serving::start(&dir, &redis, &[("PTC_WARM_WORKERS", warm)]).await;
            let run = s.exec("import time\ntime.sleep(60)\n");
            s.until_running().await;
            let family = s.family_with(expect).await;
            s.signal(libc::SIGKILL);
            assert_eq!(s.exit_code().await, None);
            assert!(
                run.await.unwrap().is_err(),
                "the run's request ends with it"
            );
            assert_all_gone(&family, expect).await;
        }
    })
    .await
    .unwrap();
}

/// The scratch directories in `runtime`, sorted (none when it has no `runs/`).
fn scratch_dirs(runtime: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(runtime.join("runs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs in `sessions` sessions of their own, so that each keeps a live interpreter.
async fn session_runs(s: &Serving, sessions: usize) {
    for session in 0..sessions {
        let r: Value = s
            .http
            .post(s.url("/v1/exec_code"))
            .json(&json!({"code": "x = 1\nprint(x)", "session_id": format!("s{session}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["stdout"], "1\n", "{r}");
    }
}

/// A runtime directory the operator chose (`PTC_RUNTIME_DIR`) stays, but the scratch
/// directories of the sidecar's children go with them, the warm children's and those of
/// sessions' live interpreters. A child removes its own on a blocking thread, which a runtime
/// shutting down no longer starts: 19 or 20 of these 22 stayed.
#[tokio::test]
async fn sigterm_leaves_no_scratch_directory_in_a_given_runtime_directory() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("shutdown-scratch");
        let redis = TestRedis::any();
        let runtime = dir.0.join("rt");
        let vars = [("PTC_RUNTIME_DIR", runtime.to_str().unwrap())];
        let mut s = Serving::start(&dir, &redis, &vars).await;
        session_runs(&s, 20).await;
        // 20 live interpreters and the warm children.
        assert!(
            scratch_dirs(&runtime).len() >= 20,
            "{:?}",
            scratch_dirs(&runtime)
        );
        s.signal(libc::SIGTERM);
        assert_eq!(s.exit_code().await, Some(0), "{}", s.log.lock().unwrap());
        assert_eq!(scratch_dirs(&runtime), Vec::<String>::new());
        assert!(
            runtime.exists(),
            "the operator's runtime directory was removed"
        );
    })
    .await
    .unwrap();
}

/// A sidecar killed with SIGKILL cannot remove its scratch directories; the next one on the
/// same `PTC_RUNTIME_DIR` does, before it makes its own.
#[tokio::test]
async fn scratch_directories_a_killed_sidecar_left_go_when_the_next_one_starts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("shutdown-restart");
        let redis = TestRedis::any();
        let runtime = dir.0.join("rt");
        let vars = [("PTC_RUNTIME_DIR", runtime.to_str().unwrap())];
        let mut killed = Serving::start(&dir, &redis, &vars).await;
        session_runs(&killed, 3).await;
        killed.signal(libc::SIGKILL);
        killed.exit_code().await;
        let left = scratch_dirs(&runtime);
        // Named by the run's id and a keyed hash of it.
        assert!(left.iter().any(|d| d.starts_with("r0-")), "{left:?}");

        let next = Serving::start(&dir, &redis, &vars).await;
        // Only the new warm children's (w0, w1, made as it starts, may still be on their way).
        let now = scratch_dirs(&runtime);
        assert!(
            now.iter().all(|d| d.starts_with('w')),
            "left from before: {now:?}"
        );
        drop(next);
    })
    .await
    .unwrap();
}

/// Issue 34: an unprivileged sidecar's runs could `chmod 000` its runtime dir and filter file,
/// and a sidecar restarted on that `PTC_RUNTIME_DIR` then exited at start ("writing
/// …/ptc_seccomp.json: Permission denied") until someone repaired the modes by hand. A run can
/// no longer do it (seccomp; `escape::metadata`), so the modes are changed here from outside,
/// standing for one that did: the next sidecar gives its tree its modes back, and serves.
#[tokio::test]
async fn a_restart_gives_the_runtime_dir_its_modes_back() {
    use std::os::unix::fs::PermissionsExt;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("shutdown-modes");
        let redis = TestRedis::any();
        let runtime = dir.0.join("rt");
        let vars = [("PTC_RUNTIME_DIR", runtime.to_str().unwrap())];
        let mode = |p: &std::path::Path| {
            std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
        };
        let set = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let filters = runtime.join("ptc_seccomp.json");
        let mut first = Serving::start(&dir, &redis, &vars).await;
        session_runs(&first, 1).await;
        let (dir_mode, filter_mode) = (mode(&runtime), mode(&filters));
        first.signal(libc::SIGTERM);
        first.exit_code().await;
        // The scratch root goes at exit; the filter file and the folder stay.
        assert!(filters.exists() && !runtime.join("runs").exists());
        set(&filters, 0);
        set(&runtime, 0);

        let next = Serving::start(&dir, &redis, &vars).await;
        assert_eq!(mode(&runtime), dir_mode);
        assert_eq!(mode(&filters), filter_mode);
        session_runs(&next, 1).await;
        // Changed while it serves: put back before the next new child (s1's), and said in
        // the log.
        set(&filters, 0);
        session_runs(&next, 2).await;
        assert_eq!(mode(&filters), filter_mode);
        assert!(
            next.log
                .lock()
                .unwrap()
                .contains("which the sidecar did not give it")
        );
        drop(next);
    })
    .await
    .unwrap();
}
