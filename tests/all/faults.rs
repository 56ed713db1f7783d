//! Faults, each with the real part: Redis killed under load, an MCP server that crashes, a host
//! callback that is slow or refuses connections, a full scratch disk, a manifest rewritten in a
//! storm, an interpreter killed mid-run. Each test makes the fault happen for real, asserts that
//! it did, and then asserts what must hold; each prints its figures (`-- --nocapture`).
//!
//! `cargo test --test all faults::` runs them all in about ten seconds.

use crate::common::{
    HostServer, HostTool, Sse, TEST_TIMEOUT, TempDir, TestRedis, TestSidecar, tool, unique,
};
use crate::mcp::{marked, wait_for_state};
use crate::procs;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
            if let Some(said) = lines.find_map(|l| l.strip_prefix("pid ")?.strip_suffix('\n')) {
                // `pid INNER DIR`: its own pid and working directory, which find its pid as
                // we see it (inside its own PID namespace it is 1).
                let (inner, dir) = said.split_once(' ').unwrap();
                break procs::outer_pid(dir, inner.parse().unwrap())
                    .unwrap_or_else(|| panic!("no process of the run in {dir}"));
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
const PRINT_THEN_SLEEP: &str = "import os, time\nprint('partial', flush=True)\nprint('pid', os.getpid(), os.getcwd(), flush=True)\ntime.sleep(30)\nprint('never')\n";

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

        let body = json!({"code": PRINT_THEN_SLEEP, "session_id": unique("killed")});
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

/// A manifest of host tools, each `{name, input_schema}` with no parameters, answered at `url`.
fn host_manifest(url: &str, tools: &[&str]) -> String {
    let tools: Vec<Value> = tools
        .iter()
        .map(|name| json!({"name": name, "input_schema": {"type": "object", "properties": {}}}))
        .collect();
    json!({"callback": {"url": url}, "tools": tools}).to_string()
}

/// How long the slow host tool takes: well past the test's `PTC_TOOL_TIMEOUT` of 1 s.
const SLOW_HOST_TOOL: Duration = Duration::from_secs(4);

/// A host callback slower than `PTC_TOOL_TIMEOUT`: the call fails with a `timeout` ToolError at
/// the timeout (not when the host answers), the code catches it and goes on, the run ends ok.
#[tokio::test]
async fn a_slow_host_callback_times_out_one_call_and_the_run_goes_on() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let slow_started = Arc::new(AtomicUsize::new(0));
        let slow: HostTool = {
            let started = slow_started.clone();
            Arc::new(move |_| {
                started.fetch_add(1, Ordering::SeqCst);
                Box::pin(async {
                    tokio::time::sleep(SLOW_HOST_TOOL).await;
                    json!({"result": "too late"})
                })
            })
        };
        let host = HostServer::start(vec![
            ("slow", slow),
            ("fast", tool(|_| json!({"result": "fast"}))),
        ])
        .await;
        let dir = TempDir::new("faults-slow");
        let manifest = dir.write("tools.json", &host_manifest(&host.url(), &["slow", "fast"]));
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", manifest.to_str().unwrap()),
            ("PTC_TOOL_TIMEOUT", "1"),
        ])
        .await;
        let code = r#"
import time
t = time.monotonic()
try:
    print("answered", await slow())
except ToolError as e:
    print(e.type, round(time.monotonic() - t, 2), e)
print(await fast())
"#;
        let r = s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let stdout = r["stdout"].as_str().unwrap();
        let (first, rest) = stdout.split_once('\n').unwrap();
        let mut words = first.splitn(3, ' ');
        assert_eq!(words.next(), Some("timeout"), "{r}");
        let waited: f64 = words.next().unwrap().parse().unwrap();
        assert!(
            (0.9..2.5).contains(&waited),
            "the call ended at the timeout, not the answer: {r}"
        );
        assert_eq!(
            words.next(),
            Some("slow did not answer within 1 s (PTC_TOOL_TIMEOUT)")
        );
        assert_eq!(rest, "fast\n", "{r}");
        assert_eq!(
            slow_started.load(Ordering::SeqCst),
            1,
            "the slow call reached the host"
        );
        let calls: Vec<(&str, bool)> = r["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["tool"].as_str().unwrap(), c["ok"].as_bool().unwrap()))
            .collect();
        assert_eq!(calls, [("slow", false), ("fast", true)]);
        println!(
            "a {SLOW_HOST_TOOL:?} host call ended as timeout after {waited:.2} s (PTC_TOOL_TIMEOUT=1)"
        );
    })
    .await
    .unwrap();
}

/// A host callback that refuses connections: the call fails at once as `unavailable`, naming the
/// callback, and the run goes on. The port is held for the whole test by a socket bound and
/// never listening, so nothing else can take it meanwhile.
#[tokio::test]
async fn a_refusing_host_callback_is_unavailable_at_once() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let refusing = tokio::net::TcpSocket::new_v4().unwrap();
        refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = refusing.local_addr().unwrap().port();
        let refused = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

        let url = format!("http://127.0.0.1:{port}/tools");
        let dir = TempDir::new("faults-refusing");
        let manifest = dir.write("tools.json", &host_manifest(&url, &["lookup"]));
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", manifest.to_str().unwrap()),
        ])
        .await;
        let code = r#"
import time
t = time.monotonic()
try:
    await lookup()
except ToolError as e:
    print(e.type, time.monotonic() - t)
    print(e)
print("went on")
"#;
        let r = s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let stdout = r["stdout"].as_str().unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        let (kind, took) = lines[0].split_once(' ').unwrap();
        assert_eq!(kind, "unavailable", "{r}");
        let took: f64 = took.parse().unwrap();
        assert!(
            took < 1.0,
            "a refused connection fails at once, not at a timeout: {r}"
        );
        assert_eq!(
            lines[1..],
            [
                format!("host callback {url} is unreachable: Connection refused (os error 111)")
                    .as_str(),
                "went on",
            ],
            "{r}"
        );
        println!(
            "a refused host call was unavailable after {:.1} ms",
            took * 1000.0
        );
        drop(refusing);
    })
    .await
    .unwrap();
}

const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

/// The demo server's `--crash-every`: each of its processes exits on this call.
const CRASH_EVERY: usize = 50;
/// Runs of [`CRASH_EVERY`] sequential calls each: every run's last call is a crash. Eight
/// crashes within a minute: with a backoff that grew on each, the eighth restart came 32 s
/// later, past a call's 30 s `PTC_TOOL_TIMEOUT`.
const CRASH_RUNS: usize = 8;

/// An MCP server that crashes on every 50th call: 400 sequential calls over eight runs; exactly
/// the crashing calls fail, as `unavailable`, and every other call succeeds, the first call
/// after each crash included (it waits for the restart instead of failing, and the restart
/// comes after the shortest backoff, since the server answered calls between crashes);
/// `/healthz` counts the eight restarts, and a new process serves at the end.
#[tokio::test]
async fn an_mcp_server_crashing_every_50th_call_fails_only_those_calls() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mark = unique("crash");
        let dir = TempDir::new("faults-crash");
        let server = json!({"command": DEMO, "args": ["--crash-every", CRASH_EVERY.to_string()], "env": {"PTC_TEST_MARK": mark}});
        let config = dir.write("mcp.json", &json!({"mcpServers": {"demo": server}}).to_string());
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_MCP_CONFIG", config.to_str().unwrap()),
        ])
        .await;
        wait_for_state(&s, "demo", "ready").await;
        let first = marked(&mark);
        assert_eq!(first.len(), 1, "{first:?}");

        let code = format!(
            r#"
import json
out = []
for i in range({CRASH_EVERY}):
    try:
        out.append(await demo__add(a=i, b=1000))
    except ToolError as e:
        out.append(e.type + ": " + str(e))
print(json.dumps(out))
"#
        );
        let started = std::time::Instant::now();
        let mut got = Vec::new();
        for _ in 0..CRASH_RUNS {
            let r = s.exec(&code).await;
            assert_eq!(r["status"], "ok", "{r}");
            let out: Vec<String> = serde_json::from_str(r["stdout"].as_str().unwrap()).unwrap();
            got.extend(out);
        }
        // A crash's message names the server and the call, however the sidecar noticed first
        // (the call's connection closing, or the process exiting).
        let crashed = "unavailable: MCP server \"demo\" went away during the call to demo__add";
        let got: Vec<String> = got
            .into_iter()
            .map(|line| match line.strip_prefix(crashed) {
                Some(rest) if rest.ends_with("it is being restarted") => "crashed".into(),
                _ => line,
            })
            .collect();
        let want: Vec<String> = (1..=CRASH_EVERY * CRASH_RUNS)
            .map(|n| match n % CRASH_EVERY {
                0 => "crashed".into(),
                i => (i - 1 + 1000).to_string(),
            })
            .collect();
        pretty_assertions::assert_eq!(got, want);

        let h = wait_for_state(&s, "demo", "ready").await;
        assert_eq!(h["mcp_servers"]["demo"]["restarts"], CRASH_RUNS, "{h}");
        let last = marked(&mark);
        assert_eq!(last.len(), 1, "{last:?}");
        assert_ne!(first, last, "a new process serves");
        println!(
            "{} calls with a crash every {CRASH_EVERY}: {CRASH_RUNS} unavailable, the rest ok, \
             {CRASH_RUNS} restarts, in {:?}",
            CRASH_EVERY * CRASH_RUNS,
            started.elapsed()
        );
        assert!(procs::wait_dead(&first).await.is_empty(), "the first process is gone");
    })
    .await
    .unwrap();
}

/// Manifest versions written in the storm, after the one the sidecar starts with.
const STORM_WRITES: usize = 100;
/// How long the storm lasts.
const STORM: Duration = Duration::from_secs(1);
/// Tools in each manifest version.
const STORM_TOOLS: usize = 40;

/// Manifest version `v`: [`STORM_TOOLS`] tools `v{v}_tool{j}`, each with a long description, so
/// a file is large (about 100 KB) and a reader can catch it half-written.
fn storm_manifest(v: usize) -> String {
    let tools: Vec<Value> = (0..STORM_TOOLS)
        .map(|j| {
            json!({
                "name": format!("v{v}_tool{j}"),
                "description": format!("Tool {j} of manifest version {v}. ").repeat(60),
                "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            })
        })
        .collect();
    json!({"callback": {"url": "http://127.0.0.1:9/tools"}, "tools": tools}).to_string()
}

/// The manifest versions whose tools an answer of `GET /v1/tools` shows, and how many tools of
/// each: a complete catalog shows one version with all its tools.
fn versions_shown(answer: &Value) -> std::collections::BTreeMap<usize, usize> {
    let text = answer["tools"].to_string();
    let mut seen = std::collections::BTreeMap::new();
    let mut names = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("_tool") {
        let before = &text[..at];
        let digits = before.len() - before.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let after = &text[at + "_tool".len()..];
        let tool_digits =
            after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || tool_digits == 0 || !before[..before.len() - digits].ends_with('v') {
            continue;
        }
        let v: usize = before[before.len() - digits..].parse().unwrap();
        let j: usize = after[..tool_digits].parse().unwrap();
        if names.insert((v, j)) {
            *seen.entry(v).or_insert(0) += 1;
        }
    }
    seen
}

/// The manifest rewritten 100 times in a second, half the writes in place (truncate, then the
/// text in two parts: a reader can find it empty or half-written) and half by rename: while it
/// happens, every answer of `GET /v1/tools` is one whole version; afterwards the last version is
/// served; the reloader rebuilt a few times at most (`reload::DEBOUNCE`, 250 ms of quiet) and
/// never swapped in a broken catalog.
#[tokio::test]
async fn a_manifest_rewritten_100_times_in_a_second_reloads_a_few_times_and_never_breaks() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("faults-storm");
        let path = dir.write("tools.json", &storm_manifest(0));
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", path.to_str().unwrap()),
        ])
        .await;
        let first: Value = s.get_json("/v1/tools").await;
        assert_eq!(versions_shown(&first), [(0, STORM_TOOLS)].into());

        let mut events = s.sidecar.state.events.subscribe();
        // Polls /v1/tools until told to stop: each answer's versions.
        let stop = tokio_util::sync::CancellationToken::new();
        let poller = {
            let (http, url, stop) = (s.http.clone(), s.url("/v1/tools"), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                while !stop.is_cancelled() {
                    let answer: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
                    answers.push((answer["version"].as_u64().unwrap(), versions_shown(&answer)));
                }
                answers
            })
        };

        let started = std::time::Instant::now();
        for v in 1..=STORM_WRITES {
            let text = storm_manifest(v);
            if v % 2 == 0 {
                use std::io::Write;
                let mut file = std::fs::File::create(&path).unwrap();
                let (head, tail) = text.split_at(text.len() / 2);
                file.write_all(head.as_bytes()).unwrap();
                let half = std::fs::read(&path).unwrap();
                assert!(serde_json::from_slice::<Value>(&half).is_err(), "half-written");
                tokio::time::sleep(Duration::from_millis(1)).await;
                file.write_all(tail.as_bytes()).unwrap();
            } else {
                let tmp = dir.0.join(format!(".tools.json.{v}"));
                std::fs::write(&tmp, &text).unwrap();
                std::fs::rename(&tmp, &path).unwrap();
            }
            let due = STORM * v as u32 / STORM_WRITES as u32;
            tokio::time::sleep(due.saturating_sub(started.elapsed())).await;
        }
        let storm = started.elapsed();
        assert!(storm < STORM * 2, "the storm took {storm:?}");

        // Settled on the last version.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = s.get_json("/v1/tools").await;
            if versions_shown(&answer) == [(STORM_WRITES, STORM_TOOLS)].into() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the last version never came");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.cancel();
        let answers = poller.await.unwrap();
        let last = s.get_json("/v1/tools").await;
        assert_eq!(versions_shown(&last), [(STORM_WRITES, STORM_TOOLS)].into());

        let broken: Vec<_> = answers
            .iter()
            .filter(|(_, shown)| shown.len() != 1 || shown.values().next() != Some(&STORM_TOOLS))
            .collect();
        assert!(broken.is_empty(), "{} of {} answers were not one whole version: {broken:?}", broken.len(), answers.len());
        assert!(answers.len() > 20, "the poller saw the storm: {} answers", answers.len());

        let h = s.health().await;
        let reloads = h["reload"]["reloads"].as_u64().unwrap();
        let failures = s.sidecar.state.reload.lock().unwrap().failures;
        assert!((1..=10).contains(&reloads), "{reloads} reloads: {h}");
        assert!(h["reload"]["last_error"].is_null(), "{h}");
        assert_eq!(last["version"], 1 + reloads, "{h}");
        let mut reloaded = Vec::new();
        while let Ok(e) = events.try_recv() {
            let e: Value = serde_json::from_str(&e).unwrap();
            if e["type"] == "catalog.reloaded" {
                reloaded.push((e["ok"].as_bool().unwrap(), e["version"].as_u64().unwrap()));
            }
        }
        // A rebuild that read a half-written file keeps the catalog and says so (`ok: false`):
        // allowed, if a stalled writer let the quiet time pass mid-write; a swap is `ok: true`.
        let swapped: Vec<u64> = reloaded.iter().filter(|(ok, _)| *ok).map(|(_, v)| *v).collect();
        assert_eq!(swapped, (2..=1 + reloads).collect::<Vec<_>>(), "{reloaded:?}");
        let versions: std::collections::BTreeSet<u64> = answers.iter().map(|(v, _)| *v).collect();
        println!(
            "storm of {STORM_WRITES} writes in {storm:?}: {} answers, catalog versions {versions:?}, \
             {reloads} reloads, {failures} failed reloads",
            answers.len()
        );
    })
    .await
    .unwrap();
}

/// A tmpfs mounted on a directory of its own for one test, unmounted and the directory removed
/// when dropped, however the test ends (passed, failed or timed out).
struct Tmpfs {
    dir: std::path::PathBuf,
}

impl Tmpfs {
    /// `Err` says why when this process may not mount (not root, no `CAP_SYS_ADMIN`).
    fn mount(label: &str, size: &str) -> Result<Tmpfs, String> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let dir = std::env::temp_dir().join(unique(label));
        std::fs::create_dir(&dir).unwrap();
        let target = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let options = CString::new(format!("size={size},mode=0755")).unwrap();
        // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            let why = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("cannot mount a tmpfs on {}: {why}", dir.display()));
        }
        Ok(Tmpfs { dir })
    }

    /// Bytes free for an unprivileged writer.
    fn free(&self) -> u64 {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: statvfs(2) into a zeroed struct of the right type.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
        st.f_bavail * st.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        let target = std::ffi::CString::new(self.dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: umount2(2) of the mount this guard made; lazily, if a process still uses it.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The scratch disk's size: room for the runtime directory's own files (the prepared SDK, about
/// 170 KB), little for a run.
const SCRATCH_DISK: &str = "4m";

/// The scratch disk full: the sidecar's runtime directory (so every run's scratch directory and
/// prepared SDK) on a small tmpfs, and code that writes until the kernel says no. The code gets
/// an `OSError` with errno ENOSPC, "No space left on device", with the disk really full, and goes
/// on. While it holds the disk full (waiting on a host tool the test answers): a run starts cold
/// and succeeds; the manifest changes, and a run of the new catalog, whose SDK cannot be written,
/// fails with that reason. Once the space is back, the new catalog's next run succeeds and
/// `/healthz` is fine. Needs root (`CAP_SYS_ADMIN`) to mount: without it the test says so and
/// returns.
#[tokio::test]
async fn a_full_scratch_disk_is_an_oserror_for_the_code_and_nothing_for_the_sidecar() {
    let disk = match Tmpfs::mount("faults-disk", SCRATCH_DISK) {
        Ok(disk) => disk,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        // `release()` answers once the test says so.
        let go = Arc::new(tokio::sync::Notify::new());
        let release: HostTool = {
            let go = go.clone();
            Arc::new(move |_| {
                let go = go.clone();
                Box::pin(async move {
                    go.notified().await;
                    json!({"result": "released"})
                })
            })
        };
        let host = HostServer::start(vec![("release", release), ("extra", tool(|_| json!({"result": 1})))]).await;
        let dir = TempDir::new("faults-disk-manifest");
        let manifest = dir.write("tools.json", &host_manifest(&host.url(), &["release"]));
        let runtime = TempDir(disk.dir.clone());
        let s = TestSidecar::start_in(
            runtime,
            &[
                ("PTC_ENABLED", "true"),
                ("PTC_TOOLS_FILE", manifest.to_str().unwrap()),
                ("PTC_WARM_WORKERS", "0"),
            ],
            &[],
        )
        .await;
        let free_before = disk.free();
        let code = r#"
import errno, os
written = 0
try:
    with open("fill.bin", "wb", buffering=0) as f:
        while True:
            written += f.write(b"x" * 65536)
except OSError as e:
    st = os.statvfs(".")
    print(type(e).__name__, e.errno == errno.ENOSPC, e.strerror)
    print(written, st.f_bavail * st.f_frsize, flush=True)
    print(await release())
print("went on")
"#;
        let mut sse = Sse::open(&s, code).await;
        let mut printed = String::new();
        while printed.matches('\n').count() < 2 {
            let (name, data) = sse.next().await.expect("the run prints");
            if name == "stdout" {
                printed.push_str(data["text"].as_str().unwrap());
            }
        }
        assert_eq!(disk.free(), 0, "the disk is full: {printed}");

        // A run while the disk is full: cold, its scratch directory and interpreter on it.
        let r = s.exec("print('meanwhile')").await;
        assert_eq!(r["stdout"], "meanwhile\n", "{r}");
        // A new catalog while the disk is full: its SDK cannot be written, and the run says so.
        let text = host_manifest(&host.url(), &["release", "extra"]);
        std::fs::write(dir.0.join(".tools.json.new"), text).unwrap();
        std::fs::rename(dir.0.join(".tools.json.new"), &manifest).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.health().await["catalog"]["version"] != 2 {
            assert!(std::time::Instant::now() < deadline, "the new catalog never came");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = s.exec("print(await extra())").await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["stderr"], "ptc-sidecar could not prepare the SDK: No space left on device (os error 28)", "{r}");

        go.notify_one();
        let r = loop {
            match sse.next().await.expect("the run ends with done") {
                (name, data) if name == "done" => break data,
                _ => {}
            }
        };
        assert_eq!(r["status"], "ok", "{r}");
        let stdout = r["stdout"].as_str().unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[0], "OSError True No space left on device", "{r}");
        assert_eq!(lines[2..], ["released", "went on"], "{r}");
        let (written, free): (u64, u64) = {
            let mut n = lines[1].split(' ').map(|n| n.parse().unwrap());
            (n.next().unwrap(), n.next().unwrap())
        };
        assert_eq!(free, 0, "the disk was full when the code was told: {r}");
        assert!(written > 0 && written <= free_before, "{written} bytes of {free_before}");

        // The run's scratch directory is gone, and its space with it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while disk.free() < free_before / 2 {
            assert!(std::time::Instant::now() < deadline, "the space never came back: {} free", disk.free());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let next = "open('small.txt', 'w').write('ok' * 1000)\nprint(len(open('small.txt').read()), await extra())";
        let r = s.exec(next).await;
        assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("2000 1\n")), "{r}");
        let h = s.health().await;
        assert_eq!(h["status"], "ok", "{h}");
        println!("{written} bytes written before ENOSPC on a {SCRATCH_DISK} tmpfs");
    })
    .await
    .unwrap();
}

/// Loops of runs going on at once while Redis is killed.
const REDIS_LOOPS: usize = 4;
/// Tool calls in each run (sequential: a run's events have one order).
const REDIS_RUN_CALLS: usize = 5;
/// Load before the kill, and after the publisher is back.
const REDIS_LOAD: Duration = Duration::from_secs(1);
/// How long Redis stays down.
const REDIS_DOWN: Duration = Duration::from_secs(2);

/// The publisher's counters in `/healthz`.
#[derive(Debug, Clone, Copy)]
struct Counters {
    connected: bool,
    emitted: u64,
    published: u64,
    held: u64,
    dropped: u64,
}

async fn event_counters(s: &TestSidecar) -> Counters {
    let e = &s.health().await["events"];
    let n = |k: &str| e[k].as_u64().unwrap();
    Counters {
        connected: e["connected"].as_bool().unwrap(),
        emitted: n("emitted"),
        published: n("published"),
        held: n("held"),
        dropped: n("dropped"),
    }
}

/// Waits (at most 20 s) until `check` holds for the publisher's counters; returns them.
async fn until_counters(s: &TestSidecar, what: &str, check: impl Fn(Counters) -> bool) -> Counters {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let c = event_counters(s).await;
        if check(c) {
            return c;
        }
        assert!(std::time::Instant::now() < deadline, "never {what}: {c:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redis SIGKILLed under load and restarted on the same port after two seconds (a durable one:
/// what it acknowledged survives, so the stream can be checked whole). No run fails; the events
/// emitted meanwhile are held and flushed once Redis is back; the stream then holds every
/// event the sidecar emitted, each run's in order, and the counters say published == emitted
/// with none dropped.
#[tokio::test]
async fn redis_killed_under_load_fails_no_run_and_loses_no_event() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut redis = TestRedis::own_durable();
        let agent = unique("faults-redis");
        let host = HostServer::start(vec![("ping", tool(|input| json!({"result": input["n"]})))]).await;
        let dir = TempDir::new("faults-redis");
        let manifest = json!({"callback": {"url": host.url()}, "tools": [
            {"name": "ping", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
        ]});
        let manifest = dir.write("tools.json", &manifest.to_string());
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", manifest.to_str().unwrap()),
            ("REDIS_URL", &redis.url),
            ("PTC_AGENT_ID", &agent),
            // Every event stays in the stream, so the test can look for each.
            ("PTC_EVENTS_STREAM_MAXLEN", "1000000"),
        ])
        .await;

        // The load: loops of runs until told to stop, each run's result kept.
        let stop = tokio_util::sync::CancellationToken::new();
        let done = Arc::new(AtomicUsize::new(0));
        let code = format!("total = 0\nfor i in range({REDIS_RUN_CALLS}):\n    total += await ping(n=i)\nprint(total)\n");
        let want_stdout = format!("{}\n", (0..REDIS_RUN_CALLS).sum::<usize>());
        let loops: Vec<_> = (0..REDIS_LOOPS)
            .map(|_| {
                let (http, url, stop, done) = (s.http.clone(), s.url("/v1/exec_code"), stop.clone(), done.clone());
                let body = json!({"code": code});
                tokio::spawn(async move {
                    let mut results = Vec::new();
                    while !stop.is_cancelled() {
                        let r: Value = http.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
                        results.push(r);
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    results
                })
            })
            .collect();
        tokio::time::sleep(REDIS_LOAD).await;
        let before = event_counters(&s).await;
        assert!(before.connected && before.published > 0, "events reached Redis before the kill: {before:?}");

        // Kill it.
        let pid = redis.pid().unwrap() as i32;
        redis.stop();
        let down_at = std::time::Instant::now();
        assert!(!procs::is_alive(pid), "redis-server {pid} is dead");
        let port: u16 = redis.url.rsplit(':').next().unwrap().trim_end_matches("/0").parse().unwrap();
        let refused = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        let runs_at_kill = done.load(Ordering::SeqCst);
        until_counters(&s, "noticed Redis is down", |c| !c.connected).await;
        let mut most_held = 0;
        while down_at.elapsed() < REDIS_DOWN {
            let c = event_counters(&s).await;
            assert!(!c.connected, "Redis is down: {c:?}");
            most_held = most_held.max(c.held);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let runs_while_down = done.load(Ordering::SeqCst) - runs_at_kill;
        assert!(runs_while_down > 0, "runs went on while Redis was down");
        assert!(most_held > 0, "events were held while Redis was down");

        // Back, on the same port and with the same files.
        redis.start();
        assert_ne!(redis.pid().unwrap() as i32, pid, "a new redis-server");
        until_counters(&s, "flushed the held events", |c| c.connected && c.held == 0).await;
        let reconnected_after = down_at.elapsed();
        let runs_before_back = done.load(Ordering::SeqCst);
        tokio::time::sleep(REDIS_LOAD).await;
        stop.cancel();
        let mut results = Vec::new();
        for l in loops {
            results.extend(l.await.unwrap());
        }
        assert!(results.len() > runs_before_back, "runs went on after Redis was back");
        let failed: Vec<&Value> = results
            .iter()
            .filter(|r| r["status"] != "ok" || r["stdout"] != want_stdout.as_str())
            .collect();
        assert!(failed.is_empty(), "{} of {} runs failed: {failed:?}", failed.len(), results.len());

        let end = until_counters(&s, "published all", |c| c.published == c.emitted).await;
        assert_eq!((end.held, end.dropped), (0, 0), "{end:?}");
        let (emitted, published) = (end.emitted, end.published);

        // The stream: every event once at least, first copies in emission order, each run whole.
        let mut conn = redis.connection().await;
        let entries = redis.stream_events(&mut conn, &agent).await;
        let mut seen = std::collections::BTreeSet::new();
        let mut first_copies = Vec::new();
        for e in &entries {
            if seen.insert(e["seq"].as_u64().unwrap()) {
                first_copies.push(e);
            }
        }
        let seqs: Vec<u64> = first_copies.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (0..emitted).collect::<Vec<_>>(), "every event, in order");
        let mut runs: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for e in &first_copies {
            if let Some(exec) = e["exec_id"].as_str() {
                runs.entry(exec).or_default().push(e["type"].as_str().unwrap());
            }
        }
        let mut want_run = vec!["exec.started"];
        for _ in 0..REDIS_RUN_CALLS {
            want_run.extend(["tool_call.started", "tool_call.finished"]);
        }
        want_run.push("exec.finished");
        assert_eq!(runs.len(), results.len(), "one run in the stream per run made");
        for (exec, types) in &runs {
            assert_eq!(types, &want_run, "run {exec}");
        }
        println!(
            "{} runs ({runs_while_down} while Redis was down {REDIS_DOWN:?}), {emitted} events \
             emitted = {published} published, 0 dropped, at most {most_held} held, writer back \
             {reconnected_after:?} after the kill, {} duplicates in the stream (at least once)",
            results.len(),
            entries.len() - first_copies.len(),
        );
    })
    .await
    .unwrap();
}
