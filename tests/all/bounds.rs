//! Bombs through the sidecar, each tried against a real sidecar with real python3 and shown
//! refused: a tool name of megabytes (answered at once, `/healthz` quick meanwhile), bad
//! arguments of megabytes (the events and the dashboard's state stay small), `save_file` past
//! the run's, the session's and the artifacts store's quotas (refused, nothing left on disk),
//! and folders nested past `PATH_MAX` or past the measurable depth (the run stopped by its
//! quota).

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, assert_nothing_left};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A sidecar with one PTC tool, `count(n: int)`, that is never reached: every call here is
/// refused before dispatch.
async fn sidecar(extra: &[(&str, &str)]) -> (TestSidecar, TempDir) {
    let dir = TempDir::new("bounds");
    let manifest = json!({"tools": [
        {"name": "count", "input_schema": {"type": "object",
            "properties": {"n": {"type": "integer"}}, "additionalProperties": false}}
    ]});
    let path = dir.write("tools.json", &manifest.to_string());
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", path.to_str().unwrap()),
    ];
    vars.extend_from_slice(extra);
    (TestSidecar::start(&vars).await, dir)
}

fn text<'v>(r: &'v Value, key: &str) -> &'v str {
    r[key].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_tool_name_of_six_megabytes_is_refused_at_once_and_health_stays_quick() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = sidecar(&[]).await;
        // Each call once cost 8 s of an async worker (the edit distance to every tool).
        let code = r#"
import time
name = "x" * (6 << 20)
started = time.monotonic()
for i in range(5):
    try:
        await call_tool(name, {})
    except ToolError as e:
        print(e.type, str(e)[:70])
print("took", time.monotonic() - started)
"#;
        let done = AtomicBool::new(false);
        let (r, slowest) = tokio::join!(
            async {
                let r = s.exec(code).await;
                done.store(true, Ordering::Relaxed);
                r
            },
            async {
                let mut slowest = Duration::ZERO;
                while !done.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    assert_eq!(s.health().await["status"], "ok");
                    slowest = slowest.max(asked.elapsed());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                slowest
            }
        );
        assert_eq!(r["status"], "ok", "{r}");
        let lines: Vec<&str> = text(&r, "stdout").lines().collect();
        let refused =
            "unknown_tool no tool has a name of 6291456 bytes: tool names are at most 256 bytes;";
        assert_eq!(lines[..5], [refused; 5], "{r}");
        let took: f64 = lines[5].strip_prefix("took ").unwrap().parse().unwrap();
        // Generous bounds for a loaded machine: the bomb took 40 s here, and health 6.8 s.
        assert!(took < 20.0, "5 refusals took {took} s");
        assert!(
            slowest < Duration::from_secs(2),
            "/healthz took {slowest:?}"
        );
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bad_arguments_of_four_mebibytes_leave_the_events_and_the_dashboard_small() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = sidecar(&[]).await;
        // The board feeds from the events from its first request on.
        let state = |s: &TestSidecar| {
            let url = s.url("/v1/dashboard/state");
            let http = s.http.clone();
            async move { http.get(url).send().await.unwrap().text().await.unwrap() }
        };
        state(&s).await;
        let mut events = s.sidecar.state.events.subscribe();
        let code = r#"
big = "a" * (4 << 20)
said = []
for i in range(20):
    try:
        await call_tool("count", {"n": big})
    except ToolError as e:
        said.append(len(str(e)))
print(len(said), max(said))
"#;
        let r = s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let (calls, longest) = text(&r, "stdout").trim().split_once(' ').unwrap();
        assert_eq!(calls, "20", "every call was refused: {r}");
        let longest: usize = longest.parse().unwrap();
        assert!(longest < 1024, "the code saw an error of {longest} bytes");

        let mut refused = 0;
        while let Ok(event) = events.try_recv() {
            assert!(event.len() < 4096, "an event of {} bytes", event.len());
            let event: Value = serde_json::from_str(&event).unwrap();
            if event["type"] == "tool_call.finished" {
                assert_eq!(event["error"]["type"], "input", "{event}");
                refused += 1;
            }
        }
        assert_eq!(refused, 20);
        // The board saw the same 20 calls (once 612 MB for 150 of them).
        let deadline = Instant::now() + Duration::from_secs(10);
        let board = loop {
            let board = state(&s).await;
            if board.contains("is not of type") || Instant::now() > deadline {
                break board;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(board.contains("is not of type"), "{board:.2000}");
        assert!(board.len() < 256 << 10, "a state of {} bytes", board.len());
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// What `save_file` answered for each of `n` files of `mib` MiB: `ok` or the error's type and
/// message, one JSON list per line.
fn save_code(n: usize, mib: usize) -> String {
    format!(
        r#"
import json
for i in range({n}):
    try:
        info = save_file("part%d.bin" % i, b"x" * ({mib} << 20))
        print(json.dumps(["ok", info["size"]]))
    except ToolError as e:
        print(json.dumps([e.type, str(e)]))
"#
    )
}

/// The answers of [`save_code`]'s run.
fn answers(r: &Value) -> Vec<Value> {
    text(r, "stdout")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Regular files under `dir` (not following links) and their bytes.
fn files_in(dir: &Path) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                let name = entry.file_name().to_string_lossy().into_owned();
                // The store's record of each folder (`<id>.owner`) is not a file of a run.
                if !name.ends_with(".owner") {
                    found.push((name, meta.len()));
                }
            }
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn save_file_past_a_quota_is_refused_and_leaves_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = sidecar(&[
            ("PTC_SCRATCH_MAX_MB", "16"),
            ("PTC_SESSION_MAX_MB", "8"),
            ("PTC_ARTIFACT_MAX_MB", "20"),
        ])
        .await;
        let artifacts = s.runtime.0.join("artifacts");
        let part = |i: usize| (format!("part{i}.bin"), 6u64 << 20);

        // A run without a session: its files together within PTC_SCRATCH_MAX_MB.
        let r = s.exec(&save_code(6, 6)).await;
        assert_eq!(r["status"], "ok", "{r}");
        let said = answers(&r);
        assert_eq!(said[..2], [json!(["ok", 6 << 20]), json!(["ok", 6 << 20])]);
        for refused in &said[2..] {
            assert_eq!(refused[0], "file", "{refused}");
            let message = refused[1].as_str().unwrap();
            assert!(
                message.contains("would pass 16 MiB together (PTC_SCRATCH_MAX_MB"),
                "{message}"
            );
        }
        let listed: Vec<&str> = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["part0.bin", "part1.bin"]);
        assert_eq!(files_in(&artifacts), [part(0), part(1)]);
        let url = r["files"][0]["url"]
            .as_str()
            .unwrap()
            .replace("part0", "part2");
        let gone = s.http.get(s.url(&url)).send().await.unwrap();
        assert_eq!(gone.status(), 404, "{url}");

        // The next run finds the artifacts store (20 MiB) holding 12: one more file fits.
        let r = s.exec(&save_code(2, 6)).await;
        let said = answers(&r);
        assert_eq!(said[0], json!(["ok", 6 << 20]), "{r}");
        let message = said[1][1].as_str().unwrap();
        assert!(
            message.contains("the store of run files is full")
                && message.contains("PTC_ARTIFACT_MAX_MB"),
            "{message}"
        );
        assert_eq!(files_in(&artifacts), [part(0), part(0), part(1)]);

        assert_nothing_left(&s).await;

        // A session run (its interpreter stays for the session's next run): within
        // PTC_SESSION_MAX_MB.
        let r = s
            .exec_body(json!({"code": save_code(2, 6), "session_id": "bounds-1"}))
            .await;
        let said = answers(&r);
        assert_eq!(said[0], json!(["ok", 6 << 20]), "{r}");
        let message = said[1][1].as_str().unwrap();
        assert!(message.contains("PTC_SESSION_MAX_MB"), "{message}");
        let session = s.runtime.0.join("sessions/bounds-1");
        assert_eq!(files_in(&session), [part(0)]);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn folders_nested_past_path_max_or_too_deep_are_stopped_by_the_quota() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = sidecar(&[("PTC_SCRATCH_MAX_MB", "32"), ("PTC_SESSION_MAX_MB", "8")]).await;
        // 40 MiB in folders of 250-byte names: past level 16 a path is longer than PATH_MAX,
        // and a path-based measure saw none of it (180 MiB once hid from a 16 MiB quota).
        let past_path_max = |levels: usize, top: &str| {
            format!(
                r#"
import os, tempfile, time
os.chdir({top})
for i in range({levels}):
    os.mkdir("d" * 250)
    os.chdir("d" * 250)
    with open("f", "wb") as f:
        f.write(b"x" * (1 << 20))
    print("level", i, flush=True)
time.sleep(20)
print("not stopped")
"#
            )
        };
        let r = s.exec(&past_path_max(40, "tempfile.gettempdir()")).await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(text(&r, "stdout").contains("level 31\n"), "{r}");
        assert!(!text(&r, "stdout").contains("not stopped"), "{r}");
        assert!(
            text(&r, "stderr")
                .contains("the scratch directory holds more than 32 MiB (PTC_SCRATCH_MAX_MB)"),
            "{r}"
        );

        // Deeper than any measure goes: counted as over the quota.
        let code = r#"
import os, tempfile, time
os.chdir(tempfile.gettempdir())
for i in range(4200):
    os.mkdir("d")
    os.chdir("d")
    if i % 1000 == 0:
        print("level", i, flush=True)
time.sleep(20)
print("not stopped")
"#;
        let r = s.exec(code).await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(text(&r, "stdout").contains("level 4000\n"), "{r}");
        assert!(!text(&r, "stdout").contains("not stopped"), "{r}");
        assert!(
            text(&r, "stderr").contains(
                "the scratch directory cannot be measured (its folders are nested more than \
                 4096 deep), and what cannot be measured counts as over its quota \
                 (PTC_SCRATCH_MAX_MB)"
            ),
            "{r}"
        );

        // A session's folder, the run's working directory, the same way.
        let code = past_path_max(12, "os.getcwd()");
        let r = s
            .exec_body(json!({"code": code, "session_id": "bounds-deep"}))
            .await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(text(&r, "stdout").contains("level 7\n"), "{r}");
        assert!(!text(&r, "stdout").contains("not stopped"), "{r}");
        assert!(
            text(&r, "stderr").contains(
                "the session's data directory holds more than 8 MiB (PTC_SESSION_MAX_MB)"
            ),
            "{r}"
        );
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}
