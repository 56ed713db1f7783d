//! Faults, each with the real part: Redis killed under load, an MCP server that crashes, a host
//! callback that is slow or refuses connections, a full scratch disk, a manifest rewritten in a
//! storm, an interpreter killed mid-run. Each test makes the fault happen for real, asserts that
//! it did, and then asserts what must hold.

use crate::common::{Sse, TEST_TIMEOUT, TestSidecar};
use crate::procs;
use serde_json::{Value, json};

/// Starts an attached run of `body`, reads its stdout until the code prints `pid N`, and
/// SIGKILLs that process once it is sure it is the run's interpreter (a python3 descended from
/// this test process). The run's `done` result, after the process is seen gone.
async fn kill_interpreter_mid_run(s: &TestSidecar, body: Value) -> Value {
    let mut sse = Sse::open_body(s, body).await;
    let mut stdout = String::new();
    let pid: i32 = loop {
        let (name, data) = sse.next().await.expect("the run streams its output");
        if name == "stdout" {
            stdout.push_str(data["text"].as_str().unwrap());
            // Whole lines only: a chunk may end in the middle of the number.
            let mut lines = stdout.split_inclusive('\n');
            if let Some(pid) = lines.find_map(|l| l.strip_prefix("pid ")?.strip_suffix('\n')) {
                break pid.parse().unwrap();
            }
        }
    };
    let table = procs::processes();
    let ours = procs::descendants(&table, std::process::id() as i32);
    assert!(ours.contains(&pid), "{pid} is not a process of this test");
    assert!(
        table[&pid].cmdline.contains("python"),
        "{}",
        table[&pid].cmdline
    );
    // SAFETY: a plain kill(2) of the run's interpreter, a descendant of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let done = loop {
        match sse.next().await.expect("the run ends with done") {
            (name, data) if name == "done" => break data,
            _ => {}
        }
    };
    assert!(
        procs::wait_dead(&[pid]).await.is_empty(),
        "{pid} outlived the kill"
    );
    done
}

/// What the code of a killed run prints before it is killed, and after (which must not appear).
const PRINT_THEN_SLEEP: &str = "import os, time\nprint('partial', flush=True)\nprint('pid', os.getpid(), flush=True)\ntime.sleep(30)\nprint('never')\n";

/// A SIGKILLed interpreter: the run ends `error` and its stderr says the interpreter was killed
/// by signal 9 (SIGKILL), the output printed before the kill is kept, and the sidecar serves the
/// next run. Both kinds of run: one on a fresh interpreter, one on a session's live one.
#[tokio::test]
async fn an_interpreter_killed_mid_run_says_so_and_keeps_its_output() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = TestSidecar::start(&[("PTC_ENABLED", "true")]).await;
        let killed = "ptc-sidecar: the interpreter was killed by signal 9 (SIGKILL)";

        let r = kill_interpreter_mid_run(&s, json!({"code": PRINT_THEN_SLEEP})).await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["exit_code"], -9, "{r}");
        let stdout = r["stdout"].as_str().unwrap();
        assert!(
            stdout.starts_with("partial\npid ") && !stdout.contains("never"),
            "{r}"
        );
        assert!(r["stderr"].as_str().unwrap().starts_with(killed), "{r}");

        let body = json!({"code": PRINT_THEN_SLEEP, "session_id": crate::common::unique("killed")});
        let r = kill_interpreter_mid_run(&s, body).await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(
            r["stdout"].as_str().unwrap().starts_with("partial\npid "),
            "{r}"
        );
        let stderr = r["stderr"].as_str().unwrap();
        assert!(stderr.starts_with(killed), "{r}");
        assert!(stderr.contains("the session's state ended with it"), "{r}");
        assert_eq!(r["session"]["state"], "ended", "{r}");

        let r = s.exec("print('next')").await;
        assert_eq!(
            (r["status"].as_str(), r["stdout"].as_str()),
            (Some("ok"), Some("next\n")),
            "{r}"
        );
        assert_eq!(s.health().await["status"], "ok");
    })
    .await
    .unwrap();
}
