//! Resources: a thread flood against the process budget, the scratch quota, and a session's
//! quota at the end of a run.

use super::stage::StageInner;
use super::{
    FLOOD_USER, Failure, Opts, SCRATCH_MAX_FILES, SCRATCH_MAX_MB, SESSION_MAX_MB, Verdict,
    against_both, attack, broken,
};
use crate::common::held;
use serde_json::{Value, json};
use std::path::PathBuf;

/// A process's `Threads:` and its `Max processes` soft limit, read from outside.
pub(super) fn threads_and_budget(pid: i32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()?;
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let budget = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max processes"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((threads, budget))
}

/// Each run has a process budget of its own (`RLIMIT_NPROC` in a user namespace of its own):
/// a run that starts 3,000 threads is stopped at its budget (seen from outside: its thread
/// count), and holds it while the harness starts other runs of the same user, which all start
/// and finish meanwhile; none is taken over, and the fork server outlives the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_threads_are_refused_and_take_no_run_over() {
    let opts = Opts {
        user: Some(FLOOD_USER),
        ..Opts::default()
    };
    against_both("resources_threads", opts, |s| async move {
        let server = s.fork_server();
        let flood = s.start_victim("resources_threads.py", json!({})).await?;
        let pid = flood.outer.unwrap();
        // The flood holds its threads now, and takes every slot that frees up.
        let (threads, budget) = threads_and_budget(pid)
            .ok_or_else(|| broken(format!("cannot read the flooding run {pid} in /proc")))?;
        if threads >= 3000 || threads > budget + 1 {
            return Err(attack(format!(
                "the flooding run holds {threads} threads (its budget is {budget})"
            )));
        }
        runs_go_through(&s, &format!("{threads} threads held"), false).await?;
        let run = s.finish_victim(flood).await?;
        run.all_refused(1)?;
        if !run.stdout.contains("threads released") {
            return Err(broken(format!("the flood did not end: {}", run.stdout)));
        }
        s.check_a_run_works("after the flood").await?;
        if s.fork_server() != server {
            return Err(attack(format!(
                "the fork server did not outlive the flood ({server:?}, now {:?})",
                s.fork_server()
            )));
        }
        eprintln!(
            "resources_threads {}: the flood held {threads} threads (budget {budget}); 4 runs \
             went through meanwhile",
            s.who.label()
        );
        Ok(())
    })
    .await;
}

/// Starts session `id` with `body`, whose code prints its working directory with each `/` as
/// `|`: that directory.
pub(super) async fn session_dir(s: &StageInner, body: Value, id: &str) -> Result<PathBuf, Failure> {
    let r = s
        .exec_body(body)
        .await
        .map_err(|e| broken(format!("the session did not start: {e}")))?;
    let dir = r["stdout"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .replace('|', "/");
    if r["status"] != "ok" || !dir.ends_with(id) {
        return Err(broken(format!("the session did not start: {r}")));
    }
    Ok(PathBuf::from(dir))
}

/// Four runs of the same sidecar (and user) start and finish while a flood holds what it got
/// (`held`, for the message); with `javascript`, two of them JavaScript runs.
pub(super) async fn runs_go_through(s: &StageInner, held: &str, javascript: bool) -> Verdict {
    for i in 0..4 {
        let body = match javascript && i % 2 == 1 {
            true => json!({"code": "console.log('next run')", "lang": "javascript"}),
            false => json!({"code": "print('next run')"}),
        };
        let next = s
            .exec_body(body)
            .await
            .map_err(|e| attack(format!("the sidecar stopped answering: {e}")))?;
        if next["status"] != "ok" || next["stdout"] != "next run\n" {
            return Err(attack(format!(
                "run {i} during the flood ({held}) did not go through: {next}"
            )));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scratch_quota_holds() {
    against_both("resources_scratch", Opts::default(), |s| async move {
        let run = s
            .attack(
                "resources_scratch.py",
                json!({"scratch_max_mb": SCRATCH_MAX_MB, "scratch_max_files": SCRATCH_MAX_FILES}),
            )
            .await?;
        // One file past the size quota meets RLIMIT_FSIZE (EFBIG); the file flood meets the
        // sidecar's watch, which stops the run with PTC_SCRATCH_MAX_FILES in its error.
        let got: Vec<_> = run
            .attempts
            .iter()
            .filter(|(_, o)| o.starts_with("GOT "))
            .collect();
        if !got.is_empty() {
            return Err(attack(format!("{got:?}")));
        }
        let stopped = run.status() == "error" && run.stderr.contains("PTC_SCRATCH_MAX_FILES");
        match run.attempts.as_slice() {
            [(_, big), (_, many)] if big.starts_with("REFUSED ") && many.is_empty() && stopped => {
                Ok(())
            }
            _ if run.status() == "ok" => Err(attack(format!(
                "the run finished within its quota:\n{}",
                run.stdout
            ))),
            _ => Err(broken(format!(
                "expected the big file refused and the run stopped during the file flood \
                 (status {}):\nstdout: {}\nstderr: {}",
                run.status(),
                run.stdout,
                run.stderr
            ))),
        }
    })
    .await;
}

/// Issue 34: a session is held to `PTC_SESSION_MAX_MB` at the end of every run, whatever the
/// run wrote and however fast. The script (`resources_session.py`) writes past the quota in
/// every awkward way it can (folders made unreadable, an old file grown, a second name for an
/// old file, links out, a tree past `PATH_MAX`); judged from outside: the session holds what it
/// held before the run (`du -sb` and every entry), its old file has its old bytes, the file a
/// link pointed at is untouched, and the run ended with the quota's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_quota_holds_at_the_end_of_a_run() {
    against_both("resources_session", Opts::default(), |s| async move {
        let id = "quota-attack";
        let setup = "import os\nos.mkdir('olddir')\nopen('olddir/old.txt', 'w').write('old')\n\
                     open('before.bin', 'wb').write(b'b' * (1 << 20))\n\
                     print(os.getcwd().replace('/', '|'))";
        let dir = &session_dir(&s, json!({"code": setup, "session_id": id}), id).await?;
        let canary = s.open_dir.join("canary");
        std::fs::write(&canary, "canary").unwrap();
        let before = held(dir);

        let args = json!({"session_max_mb": SESSION_MAX_MB, "canary": canary});
        let run = s
            .attack_in_session("resources_session.py", args, id, dir)
            .await?;
        let after = held(dir);
        if after != before || after.0 > SESSION_MAX_MB << 20 {
            return Err(attack(format!(
                "the session holds {} bytes after the run ({} before, quota {SESSION_MAX_MB} \
                 MiB): {:?}\nstdout: {}\nstderr: {}",
                after.0, before.0, after.1, run.stdout, run.stderr
            )));
        }
        if std::fs::read(dir.join("before.bin")).ok() != Some(vec![b'b'; 1 << 20]) {
            return Err(attack("the old file does not hold its old bytes"));
        }
        if std::fs::read_to_string(&canary).ok().as_deref() != Some("canary") {
            return Err(attack(
                "the file a link in the session pointed at was changed",
            ));
        }
        // Past the quota, or (a folder made unreadable stops an unprivileged sidecar's watch)
        // impossible to measure, which counts as past it.
        let said = run.status() == "error"
            && run
                .stderr
                .contains("the run left the session's data directory ")
            && run.stderr.contains("(PTC_SESSION_MAX_MB)")
            && run.result["quota"]["removed"] == true;
        if !said {
            return Err(broken(format!(
                "the run did not end with the session quota's error: {}",
                run.result
            )));
        }
        eprintln!(
            "resources_session {}: {}",
            s.who.label(),
            run.stderr.lines().last().unwrap_or_default()
        );
        Ok(())
    })
    .await;
}
