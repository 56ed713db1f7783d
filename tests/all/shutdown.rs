//! Stopping the real `ptc-sidecar serve` binary. SIGTERM: new runs get 503 `shutting_down`,
//! the running one finishes (within `PTC_SHUTDOWN_GRACE`, else it is stopped and says why), the
//! MCP server, fork server and warm children stop, the last events reach Redis, the runtime
//! directory goes, and the exit code is 0. SIGKILL: no fork server, run or MCP server outlives
//! the sidecar (`PR_SET_PDEATHSIG` from the spawning thread, the fork server's socket).

use super::common::{TEST_TIMEOUT, TempDir, TestRedis, unique};
use super::procs;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

const SIDECAR: &str = env!("CARGO_BIN_EXE_ptc-sidecar");
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");
/// How long the sidecar gets to say it is serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a sidecar told to stop may take to exit: the grace of the test, the stopped runs'
/// wait, the requests' grace and the last flush, with room for a loaded machine.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// A `ptc-sidecar serve` of our own, killed (with its process group) when dropped.
struct Serving {
    child: tokio::process::Child,
    pid: i32,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    http: reqwest::Client,
    agent: String,
    /// Where the default runtime directory is made (`TMPDIR`).
    tmp: std::path::PathBuf,
}

impl Serving {
    async fn start(dir: &TempDir, redis: &TestRedis, vars: &[(&str, &str)]) -> Serving {
        let mcp = dir.write(
            "mcp.json",
            &json!({"mcpServers": {"demo": {"command": DEMO}}}).to_string(),
        );
        let tmp = dir.0.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let agent = unique("shutdown");
        let mut cmd = tokio::process::Command::new(SIDECAR);
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &dir.0)
            .env("TMPDIR", &tmp)
            .env("RUST_LOG", "info,rmcp=warn")
            .env("PTC_ENABLED", "true")
            .env("PTC_LISTEN", "127.0.0.1:0")
            .env("PTC_PYTHON", "/usr/bin/python3")
            .env("PTC_MCP_CONFIG", &mcp)
            .env("REDIS_URL", &redis.url)
            .env("PTC_AGENT_ID", &agent)
            .envs(vars.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id().unwrap() as i32;
        let log = Arc::new(Mutex::new(String::new()));
        let (serving_tx, serving_rx) = tokio::sync::oneshot::channel();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log_w = log.clone();
        tokio::spawn(async move {
            let mut serving = Some(serving_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("ptc-sidecar serving")
                    && let Some(tx) = serving.take()
                {
                    let _ = tx.send(line.clone());
                }
                let mut log = log_w.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let line = match tokio::time::timeout(START_TIMEOUT, serving_rx).await {
            Ok(Ok(line)) => line,
            _ => panic!("the sidecar did not serve: {}", log.lock().unwrap()),
        };
        let addr = line
            .split("listen=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no listen= in {line}"));
        Serving {
            child,
            pid,
            addr,
            log,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            agent,
            tmp,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `POST /v1/exec_code` as its own task: its status code and body.
    fn exec(&self, code: &str) -> tokio::task::JoinHandle<reqwest::Result<(u16, Value)>> {
        let request = self
            .http
            .post(self.url("/v1/exec_code"))
            .json(&json!({ "code": code }));
        tokio::spawn(async move {
            let response = request.send().await?;
            let status = response.status().as_u16();
            Ok((status, response.json().await?))
        })
    }

    /// Waits until a run is going on (the gauge of `/metrics`).
    async fn until_running(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = self
                .http
                .get(self.url("/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if text.lines().any(|l| l == "ptc_runs_in_flight 1") {
                return;
            }
            assert!(Instant::now() < deadline, "no run started: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The sidecar's descendants once they include a process of each of `expect` (a run counts
    /// as in flight before its child is started, so the child may not be there yet).
    async fn family_with(&self, expect: &[&str]) -> Vec<(i32, String)> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let family = self.family();
            if expect
                .iter()
                .all(|what| family.iter().any(|(_, cmd)| cmd.contains(what)))
            {
                return family;
            }
            assert!(
                Instant::now() < deadline,
                "not all of {expect:?} among the sidecar's processes: {family:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The sidecar's descendants now, with their command lines.
    fn family(&self) -> Vec<(i32, String)> {
        let table = procs::processes();
        procs::descendants(&table, self.pid)
            .into_iter()
            .map(|p| {
                (
                    p,
                    table.get(&p).map_or(String::new(), |p| p.cmdline.clone()),
                )
            })
            .collect()
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) sends a signal to our own child; no memory is involved.
        assert_eq!(unsafe { libc::kill(self.pid, signal) }, 0);
    }

    async fn exit_code(&mut self) -> Option<i32> {
        match tokio::time::timeout(EXIT_TIMEOUT, self.child.wait()).await {
            Ok(status) => status.unwrap().code(),
            Err(_) => panic!(
                "the sidecar did not exit within {EXIT_TIMEOUT:?}: {}",
                self.log.lock().unwrap()
            ),
        }
    }

    /// The runtime directories left under `TMPDIR`.
    fn runtime_dirs(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ptc-sidecar"))
            .collect()
    }
}

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
            ("0", &["ptc-demo-mcp", "ptc_bootstrap.py"][..]),
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
