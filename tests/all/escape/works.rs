//! What must keep working under the sandbox, and `/healthz`'s report of it.

use super::{
    Opts, SANDBOX_USER, Stage, Verdict, Who, against_both, attack, broken, expected_sandbox,
    user_ids,
};
use crate::procs::is_alive;
use serde_json::{Value, json};

const WORKS_STDOUT: &str = "\
sdk a b c d
gather 1225
mcp 5
json {\"k\": [1, 2]}
re a#b#
zoneinfo 2:00:00
sqlite3 6
tempfile temp True
scratch kept in scratch {'ok': True} ['notes.txt', 'scratch.db', 'sub']
";

async fn check_works(s: &Stage) -> Verdict {
    let mut zygote = s.fork_server();
    // Without a warm pool, a cold run's own fork server may still be leaving (STOP_GRACE).
    let gone_by = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while s.opts.warm == 0 && zygote.is_some() && std::time::Instant::now() < gone_by {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        zygote = s.fork_server();
    }
    if (s.opts.warm > 0) != zygote.is_some() {
        return Err(broken(format!(
            "warm workers {}, fork server {zygote:?}",
            s.opts.warm
        )));
    }
    let run = s.attack("works.py", json!({})).await?;
    run.ran_to_the_end()?;
    let out: String = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with("PID ") && !l.starts_with("SCRATCH "))
        .map(|l| format!("{l}\n"))
        .collect();
    if out != WORKS_STDOUT {
        return Err(broken(format!(
            "expected\n{WORKS_STDOUT}got\n{out}stderr: {}",
            run.stderr
        )));
    }
    if let Some(z) = zygote
        && !is_alive(z)
    {
        return Err(broken("the fork server died"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_stdlib_mcp_and_scratch_work_with_the_fork_server() {
    against_both("works_fork_server", Opts::default(), |s| async move {
        check_works(&s).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_stdlib_mcp_and_scratch_work_cold() {
    let opts = Opts {
        warm: 0,
        ..Opts::default()
    };
    against_both("works_cold", opts, |s| async move { check_works(&s).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_works_when_allowed_and_its_children_die_with_the_run() {
    against_both("works_subprocess", Opts::subprocess(), |s| async move {
        let run = s.attack("works_subprocess.py", json!({})).await?;
        run.ran_to_the_end()?;
        if !run.stdout.contains("ls 0 True\n")
            || !run.stdout.contains("left running True\n")
            || run.spawned.len() != 1
        {
            return Err(broken(format!(
                "stdout: {}\nstderr: {}",
                run.stdout, run.stderr
            )));
        }
        // The run's process and the `sleep` it left running, both seen, both gone (attack()).
        if run.seen.procs.len() < 2 {
            return Err(broken(format!(
                "the harness did not see the child: {:?}",
                run.seen.procs
            )));
        }
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_the_sandbox_and_code_runs_as_its_user() {
    against_both("healthz_sandbox", Opts::default(), |s| async move {
        let h: Value =
            serde_json::from_str(&s.health_text().await?).map_err(|e| broken(e.to_string()))?;
        let expected = expected_sandbox(&s.who);
        if h["sandbox"] != expected {
            return Err(attack(format!(
                "/healthz sandbox: expected {expected}, got {}",
                h["sandbox"]
            )));
        }
        // Root's runs each have a uid of their own from PTC_SANDBOX_UIDS (as seen from
        // outside too: the run's user namespace maps it alone); the unprivileged sidecar's
        // runs share its uid.
        let mut seen = Vec::new();
        for _ in 0..3 {
            let r = s
                .exec("import os; print(os.getuid(), os.geteuid(), os.getgid())")
                .await
                .map_err(broken)?;
            let ids: Vec<u32> = r["stdout"]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let [uid, euid, gid] = ids[..] else {
                return Err(broken(format!("no ids printed: {r}")));
            };
            let expected = match (&s.who, s.who.run_uids()) {
                (_, Some(range)) => (range.contains(&uid) && gid == uid).then_some(uid),
                (Who::User { uid, .. }, None) => Some(*uid),
                // SAFETY: getuid cannot fail.
                _ => Some(unsafe { libc::getuid() }),
            };
            if Some(uid) != expected || euid != uid {
                return Err(attack(format!(
                    "code runs as {uid} {euid} {gid}, not as {expected:?}"
                )));
            }
            seen.push(uid);
        }
        let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
        if s.who.run_uids().is_some() && distinct.len() != seen.len() {
            return Err(attack(format!("runs shared a uid: {seen:?}")));
        }
        let _ = user_ids(SANDBOX_USER)
            .ok_or_else(|| broken(format!("user {SANDBOX_USER} is missing: run scripts/test")))?;
        Ok(())
    })
    .await;
}
