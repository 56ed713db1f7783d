//! Live sessions over `POST /v1/exec_code` with `session_id`: real python3 interpreters that
//! keep their globals between runs, real HTTP, a real host tool server. State persists, two
//! sessions are apart, runs of one session take turns, the least recently used interpreter and
//! an idle one are stopped (files kept, the next run told), a run that kills or outlasts its
//! interpreter ends the state and keeps the files, and bad ids get clear errors.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, processes_with, tool};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::Duration;

struct Fixture {
    s: TestSidecar,
    _host: HostServer,
    dir: TempDir,
}

async fn fixture(extra: &[(&str, &str)]) -> Fixture {
    let host = HostServer::start(vec![
        (
            "get-weather",
            tool(|input| json!({"result": {"city": input["city"], "temp_c": 21}})),
        ),
        ("get-time", tool(|_| json!({"result": "12:00"}))),
    ])
    .await;
    let dir = TempDir::new("sessions");
    let manifest = json!({
        "callback": {"url": host.url()},
        "tools": [{"name": "get-weather", "description": "Weather for a city.",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}]
    });
    let m = dir.write("tools.json", &manifest.to_string());
    let sessions = dir.0.join("sessions");
    let (m, sessions) = (
        m.to_str().unwrap().to_string(),
        sessions.to_str().unwrap().to_string(),
    );
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_TOOLS_FILE", m.as_str()),
        ("PTC_SESSION_DIR", sessions.as_str()),
    ];
    vars.extend_from_slice(extra);
    Fixture {
        s: TestSidecar::start(&vars).await,
        _host: host,
        dir,
    }
}

/// One run in session `id`: the JSON result.
async fn run(s: &TestSidecar, id: &str, code: &str) -> Value {
    s.exec_body(json!({"code": code, "session_id": id})).await
}

fn state(r: &Value) -> (&str, u64) {
    (
        r["session"]["state"].as_str().unwrap_or("?"),
        r["session"]["run"].as_u64().unwrap_or(0),
    )
}

#[tokio::test]
async fn globals_imports_functions_and_tool_results_persist() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let r = run(
            &f.s,
            "conv-1",
            "import statistics\nx = 41\ndef twice(v):\n    return 2 * v\nw = await get_weather(city='Oslo')",
        )
        .await;
        assert_eq!((r["status"].as_str(), r["stderr"].as_str()), (Some("ok"), Some("")));
        assert_eq!(state(&r), ("new", 1));
        let r = run(
            &f.s,
            "conv-1",
            "print(x + 1, twice(x), statistics.mean([1, 3]), w['city'], w['temp_c'])",
        )
        .await;
        assert_eq!(r["stdout"], "42 82 2 Oslo 21\n", "{r}");
        assert_eq!(state(&r), ("kept", 2));
        // A failure does not lose the state: the traceback names the run's own code.
        let r = run(&f.s, "conv-1", "x += 1\ntwice(undefined_name)").await;
        assert_eq!(r["status"], "error");
        assert!(
            r["stderr"].as_str().unwrap().contains("File \"<code #3>\", line 2"),
            "{r}"
        );
        let r = run(&f.s, "conv-1", "print(x)").await;
        assert_eq!((r["stdout"].as_str(), state(&r)), (Some("42\n"), ("kept", 4)));
        // sys.exit ends the run, not the interpreter.
        let r = run(&f.s, "conv-1", "import sys\nsys.exit(3)").await;
        assert_eq!((r["status"].as_str(), r["exit_code"].as_i64()), (Some("error"), Some(3)));
        let r = run(&f.s, "conv-1", "print(x)").await;
        assert_eq!((r["stdout"].as_str(), state(&r)), (Some("42\n"), ("kept", 6)));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn two_sessions_see_neither_globals_nor_files_of_the_other() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let a = run(
            &f.s,
            "sess-a",
            "import os\nsecret = 'alpha'\nopen('mine.txt', 'w').write('a only')\nprint(os.getcwd().replace('/', '|'))",
        )
        .await;
        assert_eq!(a["status"], "ok", "{a}");
        // Printed with '|' for '/': the output would name the data directory /mnt/data.
        let a_dir = a["stdout"].as_str().unwrap().trim().to_string();
        assert!(a_dir.ends_with("|sess-a"), "{a}");
        let b = run(
            &f.s,
            "sess-b",
            &format!(
                "import os\na_dir = {a_dir:?}.replace('|', '/')\nprint('secret' in globals())\n\
                 try:\n    print(open(a_dir + '/mine.txt').read())\nexcept OSError as e:\n    print('refused', e.errno)\n\
                 try:\n    print(os.listdir(a_dir))\nexcept OSError as e:\n    print('refused', e.errno)"
            ),
        )
        .await;
        assert_eq!(b["status"], "ok", "{b}");
        let lines: Vec<&str> = b["stdout"].as_str().unwrap().lines().collect();
        assert_eq!(lines[0], "False");
        // EACCES (13) from Landlock: the path is there, the run may not go in.
        assert_eq!(&lines[1..], ["refused 13", "refused 13"], "{b}");
        let a = run(&f.s, "sess-a", "print(secret, open('mine.txt').read())").await;
        assert_eq!(a["stdout"], "alpha a only\n");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn runs_of_one_session_take_turns() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        run(&f.s, "turns", "log = []").await;
        // Each run appends, sleeps and appends again: interleaved runs would mix the pairs.
        let code = |n: u32| {
            format!("import time\nlog.append('start {n}')\ntime.sleep(0.2)\nlog.append('end {n}')")
        };
        let codes = [code(1), code(2), code(3)];
        let (a, b, c) = tokio::join!(
            run(&f.s, "turns", &codes[0]),
            run(&f.s, "turns", &codes[1]),
            run(&f.s, "turns", &codes[2]),
        );
        for r in [&a, &b, &c] {
            assert_eq!(r["status"], "ok", "{r}");
        }
        let r = run(&f.s, "turns", "print(log)").await;
        let log: Vec<String> =
            serde_json::from_str(&r["stdout"].as_str().unwrap().replace('\'', "\"")).unwrap();
        assert_eq!(log.len(), 6);
        for pair in log.chunks(2) {
            assert_eq!(pair[0].replace("start", "end"), pair[1], "{log:?}");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_least_recently_used_session_is_stopped_and_its_next_run_is_told() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_MAX_SESSIONS", "2"), ("PTC_MAX_RUNS", "2")]).await;
        for id in ["lru-1", "lru-2"] {
            let r = run(
                &f.s,
                id,
                "v = 'kept'\nopen('f.txt', 'w').write('file kept')",
            )
            .await;
            assert_eq!(r["status"], "ok", "{r}");
        }
        run(&f.s, "lru-2", "print(v)").await; // lru-1 is now the least recently used
        let r = run(&f.s, "lru-3", "v = 3").await;
        assert_eq!(state(&r), ("new", 1));
        let listed = f.s.get_json("/v1/sessions").await;
        let mut live: Vec<&str> = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["live"] == true)
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        live.sort();
        assert_eq!(live, ["lru-2", "lru-3"], "{listed}");
        let r = run(
            &f.s,
            "lru-1",
            "print('v' in globals(), open('f.txt').read())",
        )
        .await;
        assert_eq!(r["stdout"], "False file kept\n", "{r}");
        assert_eq!(state(&r), ("reset", 1));
        assert_eq!(r["session"]["reason"], "evicted");
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("state was reset: more than PTC_MAX_SESSIONS (2) sessions were live"),
            "{r}"
        );
        // lru-1 took the place of lru-2, now the least recently used; lru-3 is kept.
        let r = run(&f.s, "lru-3", "print(v)").await;
        assert_eq!(
            (r["stdout"].as_str(), state(&r)),
            (Some("3\n"), ("kept", 2)),
            "{r}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_idle_session_is_stopped_and_keeps_its_files() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_SESSION_IDLE_TTL", "1")]).await;
        let r = run(
            &f.s,
            "idle",
            "import os\nv = 1\nopen('f.txt', 'w').write('x')\nprint(os.getpid())",
        )
        .await;
        assert!(r["stdout"].as_str().is_some_and(|o| !o.is_empty()), "{r}");
        let pid = interpreter_pid(&f.s, "idle").await;
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        let gone = async {
            while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("the idle interpreter is stopped");
        let r = run(
            &f.s,
            "idle",
            "print('v' in globals(), open('f.txt').read())",
        )
        .await;
        assert_eq!(r["stdout"], "False x\n", "{r}");
        assert_eq!(
            (state(&r), &r["session"]["reason"]),
            (("reset", 1), &json!("expired"))
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_run_that_kills_or_outlasts_its_interpreter_ends_the_state_and_keeps_the_files() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        run(&f.s, "crash", "v = 1\nopen('before.txt', 'w').write('b')").await;
        let r = run(&f.s, "crash", "import os\nprint('bye', flush=True)\nos._exit(1)").await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["exit_code"], 1);
        assert_eq!(r["stdout"], "bye\n");
        assert_eq!((state(&r), &r["session"]["reason"]), (("ended", 2), &json!("crashed")));
        assert!(
            r["stderr"].as_str().unwrap().contains("the session's state ended with it"),
            "{r}"
        );
        let r = run(&f.s, "crash", "print('v' in globals(), open('before.txt').read())").await;
        assert_eq!(r["stdout"], "False b\n", "{r}");
        assert_eq!(state(&r), ("reset", 1));

        let r = f
            .s
            .exec_body(json!({"code": "w = 2\nimport time\ntime.sleep(30)", "session_id": "crash", "timeout_ms": 500}))
            .await;
        assert_eq!(r["status"], "timeout", "{r}");
        assert_eq!(r["session"]["state"], "ended");
        assert_eq!(r["session"]["reason"], "timeout");
        let r = run(&f.s, "crash", "print('w' in globals(), open('before.txt').read())").await;
        assert_eq!(r["stdout"], "False b\n", "{r}");
        assert_eq!((state(&r), &r["session"]["reason"]), (("reset", 1), &json!("timeout")));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn deleting_a_session_stops_its_interpreter_and_removes_its_files() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let r = run(
            &f.s,
            "del-me",
            "import os\nopen('f.txt', 'w').write('x')\nprint(os.getpid())",
        )
        .await;
        assert!(r["stdout"].as_str().is_some_and(|o| !o.is_empty()), "{r}");
        let pid = interpreter_pid(&f.s, "del-me").await;
        let listed = f.s.get_json("/v1/sessions").await;
        let entry = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "del-me")
            .cloned()
            .unwrap();
        assert_eq!(
            (
                entry["live"].as_bool(),
                entry["runs"].as_u64(),
                entry["files"].as_u64()
            ),
            (Some(true), Some(1), Some(1)),
            "{entry}"
        );
        assert!(entry["memory_bytes"].as_u64().unwrap() > 1 << 20, "{entry}");
        let health = f.s.health().await;
        assert_eq!(health["sessions"]["live"], 1, "{health}");
        let r =
            f.s.http
                .delete(f.s.url("/v1/sessions/del-me"))
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 204);
        let r =
            f.s.http
                .delete(f.s.url("/v1/sessions/del-me"))
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 404);
        let gone = async {
            while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("interpreter stopped");
        let r = run(&f.s, "del-me", "import os\nprint(os.listdir('.'))").await;
        assert_eq!(
            (r["stdout"].as_str(), state(&r)),
            (Some("[]\n"), ("new", 1)),
            "{r}"
        );
        let r =
            f.s.http
                .delete(f.s.url("/v1/sessions/del-me"))
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 204);
        assert!(
            processes_with(f.s.runtime.0.to_str().unwrap())
                .iter()
                .all(|p| !p.contains("del-me"))
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bad_session_ids_are_refused_with_what_is_wrong() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        for (id, says) in [
            ("../etc", "session id"),
            ("", "session id"),
            ("a/b", "session id"),
            (&"x".repeat(65) as &str, "session id"),
        ] {
            let r =
                f.s.http
                    .post(f.s.url("/v1/exec_code"))
                    .json(&json!({"code": "print(1)", "session_id": id}))
                    .send()
                    .await
                    .unwrap();
            assert_eq!(r.status(), 400, "{id:?}");
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"]["type"], "bad_request");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(says),
                "{id:?}: {body}"
            );
        }
        let r =
            f.s.http
                .delete(f.s.url("/v1/sessions/bad.id"))
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 400);
    })
    .await
    .unwrap();
}

/// Code printing `n` numbered lines to stdout (about 10 bytes each), and the same text.
fn numbered(n: usize) -> (String, String) {
    let code = format!("for i in range({n}):\n    print('line', i)");
    let text: String = (0..n).map(|i| format!("line {i}\n")).collect();
    (code, text)
}

fn sha(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    ptc_sidecar::util::hex(&Sha256::digest(bytes))
}

async fn download(s: &TestSidecar, url: &str) -> (u16, String, Vec<u8>) {
    let r = s.http.get(s.url(url)).send().await.unwrap();
    let status = r.status().as_u16();
    let mime = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, mime, r.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn output_past_the_cap_is_saved_whole_and_the_marker_names_it() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_MAX_OUTPUT_BYTES", "4096")]).await;
        let (code, text) = numbered(20_000);
        // Without a session: an artifact of the run's own.
        let r = f.s.exec(&code).await;
        assert_eq!(
            (r["status"].as_str(), r["truncated"].as_bool()),
            (Some("ok"), Some(true)),
            "{r}"
        );
        let files = r["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{r}");
        let url = files[0]["url"].as_str().unwrap();
        assert!(url.starts_with("/v1/artifacts/"), "{url}");
        assert_eq!(files[0]["size"], text.len());
        let stdout = r["stdout"].as_str().unwrap();
        assert!(stdout.starts_with("line 0\nline 1\n"), "{stdout}");
        assert!(stdout.ends_with("line 19999\n"), "{stdout}");
        assert!(
            stdout.contains(&format!("cut; full output: GET {url} ...]")),
            "{stdout}"
        );
        let (status, mime, body) = download(&f.s, url).await;
        assert_eq!((status, mime.as_str()), (200, "text/plain; charset=utf-8"));
        assert_eq!(sha(&body), sha(text.as_bytes()));

        // In a session: a file of the session, which the next run can read.
        let r = run(&f.s, "big", &code).await;
        let name = r["files"][0]["name"].as_str().unwrap().to_string();
        assert!(name.starts_with("out-r") && name.ends_with(".txt"), "{r}");
        assert!(
            r["stdout"].as_str().unwrap().contains(&format!(
                "cut; full output: {name} in the session's working directory ...]"
            )),
            "{r}"
        );
        let r = run(
            &f.s,
            "big",
            &format!(
                "import hashlib\nprint(hashlib.sha256(open({name:?}, 'rb').read()).hexdigest())"
            ),
        )
        .await;
        assert_eq!(
            r["stdout"].as_str().unwrap().trim(),
            sha(text.as_bytes()),
            "{r}"
        );
        let r =
            f.s.get_json("/v1/artifacts/nosuchrun0000000000000/x.txt")
                .await;
        assert_eq!(r["error"]["type"], "not_found");
    })
    .await
    .unwrap();
}

/// A valid 1x1 PNG, made by Python's zlib and struct (no imaging library needed).
const PNG_CODE: &str = "import struct, zlib\n\
def chunk(kind, data):\n    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))\n\
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)) \
+ chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b'')\n";

#[tokio::test]
async fn save_file_returns_a_png_with_its_type_and_as_an_image_block() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = format!(
            "{PNG_CODE}info = save_file('charts/dot.png', png)\nprint(info['name'], info['size'], info['mime'])\n\
             import base64\nprint(base64.b64encode(png).decode())\nsave_file('notes.txt', 'héllo')"
        );
        for session in [None, Some("pics")] {
            let body = match session {
                None => json!({"code": code}),
                Some(id) => json!({"code": code, "session_id": id}),
            };
            let r = f.s.exec_body(body).await;
            assert_eq!(r["status"], "ok", "{r}");
            let lines: Vec<&str> = r["stdout"].as_str().unwrap().lines().collect();
            let png_b64 = lines[1];
            let png_len = base64_len(png_b64);
            assert_eq!(lines[0], format!("charts/dot.png {png_len} image/png"));
            let files: Vec<(&str, u64, &str)> = r["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f["name"].as_str().unwrap(), f["size"].as_u64().unwrap(), f["mime"].as_str().unwrap()))
                .collect();
            assert_eq!(
                files,
                [("charts/dot.png", png_len, "image/png"), ("notes.txt", 6, "text/plain; charset=utf-8")],
                "{r}"
            );
            assert_eq!(
                r["content"],
                json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64}}])
            );
            let (status, mime, body) = download(&f.s, r["files"][0]["url"].as_str().unwrap()).await;
            assert_eq!((status, mime.as_str(), body.len() as u64), (200, "image/png", png_len));
        }
        // In the session, the files are in its working directory for the next run.
        let r = run(&f.s, "pics", "import os\nprint(sorted(os.listdir('charts')), open('notes.txt').read())").await;
        assert_eq!(r["stdout"], "['dot.png'] héllo\n", "{r}");
        // Bad names and data are refused with what is wrong; the run goes on.
        let r = run(
            &f.s,
            "pics",
            "for name, data in [('../up.txt', 'x'), ('', 'x'), ('a.txt', 42)]:\n    try:\n        save_file(name, data)\n    except (ToolError, TypeError) as e:\n        print(type(e).__name__, e)",
        )
        .await;
        let out = r["stdout"].as_str().unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{r}");
        assert!(lines[0].starts_with("ToolError") && lines[0].contains(".."), "{out}");
        assert!(lines[1].starts_with("TypeError") && lines[1].contains("name"), "{out}");
        assert!(lines[2].starts_with("TypeError") && lines[2].contains("bytes or str"), "{out}");
    })
    .await
    .unwrap();
}

fn base64_len(b64: &str) -> u64 {
    let pad = b64.bytes().rev().take_while(|&b| b == b'=').count();
    (b64.len() / 4 * 3 - pad) as u64
}

#[tokio::test]
async fn between_runs_a_session_is_stopped_and_what_it_left_running_does_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        // A thread that would keep calling a tool and ticking after the run ended.
        let r = run(
            &f.s,
            "ticker",
            "import threading, time\nticks = []\ncalls = []\n\
             def tick():\n    while True:\n        ticks.append(time.monotonic())\n        time.sleep(0.01)\n\
             threading.Thread(target=tick, daemon=True).start()\ntime.sleep(0.05)",
        )
        .await;
        assert_eq!(r["status"], "ok", "{r}");
        let idle = Duration::from_millis(600);
        tokio::time::sleep(idle).await;
        let r = run(
            &f.s,
            "ticker",
            "import time\ntime.sleep(0.05)\ngaps = [b - a for a, b in zip(ticks, ticks[1:])]\nprint(round(max(gaps), 2))",
        )
        .await;
        let gap: f64 = r["stdout"].as_str().unwrap().trim().parse().unwrap();
        // The thread ticks every 10 ms while a run is on; between runs it did not tick at all.
        assert!(gap >= idle.as_secs_f64() * 0.8, "largest gap {gap} s: {r}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn events_carry_the_session_id() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let mut events = f.s.sidecar.state.events.subscribe();
        let r = run(&f.s, "evented", "await get_weather(city='Rome')").await;
        assert_eq!(r["status"], "ok", "{r}");
        let mut seen = Vec::new();
        while seen.len() < 4 {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            seen.push((
                e["type"].as_str().unwrap().to_string(),
                e["session_id"].clone(),
            ));
        }
        let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "exec.started",
                "tool_call.started",
                "tool_call.finished",
                "exec.finished"
            ]
        );
        assert!(seen.iter().all(|(_, s)| s == "evented"), "{seen:?}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_attached_stream_runs_in_the_session_too() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        run(&f.s, "streamed", "greeting = 'hello from before'").await;
        let body =
            f.s.http
                .post(f.s.url("/v1/exec_code"))
                .header("accept", "text/event-stream")
                .json(&json!({"code": "print(greeting)", "session_id": "streamed"}))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
        // One print may come as more than one stdout event (the text, then the newline).
        let streamed: String = body
            .split("event: stdout\ndata: ")
            .skip(1)
            .filter_map(|rest| rest.lines().next())
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter_map(|e| e["text"].as_str().map(str::to_string))
            .collect();
        assert_eq!(streamed, "hello from before\n", "{body}");
        let done = body
            .split("event: done\ndata: ")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap();
        let done: Value = serde_json::from_str(done).unwrap();
        assert_eq!(
            (done["status"].as_str(), state(&done)),
            (Some("ok"), ("kept", 2)),
            "{done}"
        );
    })
    .await
    .unwrap();
}

async fn put(s: &TestSidecar, path: &str, body: Vec<u8>) -> (u16, Value) {
    let r = s.http.put(s.url(path)).body(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn session_files_go_in_and_out_byte_for_byte_and_bad_names_are_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_SESSION_MAX_MB", "1")]).await;
        let bytes: Vec<u8> = (0..1024u32).map(|i| (i % 256) as u8).collect();
        // A session that does not exist yet is made by its first file.
        let (status, r) = put(&f.s, "/v1/sessions/seeded/files/data/all bytes.bin", bytes.clone()).await;
        assert_eq!(status, 201, "{r}");
        assert_eq!(
            (&r["name"], &r["size"], &r["mime"], &r["url"]),
            (
                &json!("data/all bytes.bin"),
                &json!(1024),
                &json!("application/octet-stream"),
                &json!("/v1/sessions/seeded/files/data/all%20bytes.bin")
            )
        );
        let (status, _, body) = download(&f.s, r["url"].as_str().unwrap()).await;
        assert_eq!((status, body == bytes), (200, true));
        // The session's first run finds it, and what the run writes is listed and served.
        let r = run(
            &f.s,
            "seeded",
            "import os\nprint(len(open('data/all bytes.bin', 'rb').read()))\nopen('out.csv', 'w').write('a,b\\n1,2\\n')",
        )
        .await;
        assert_eq!(r["stdout"], "1024\n", "{r}");
        let listed = f.s.get_json("/v1/sessions/seeded/files").await;
        let names: Vec<(&str, u64, &str)> = listed["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["name"].as_str().unwrap(), f["size"].as_u64().unwrap(), f["mime"].as_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            [("data/all bytes.bin", 1024, "application/octet-stream"), ("out.csv", 8, "text/csv; charset=utf-8")]
        );
        let (status, mime, body) = download(&f.s, "/v1/sessions/seeded/files/out.csv").await;
        assert_eq!((status, mime.as_str(), body.as_slice()), (200, "text/csv; charset=utf-8", &b"a,b\n1,2\n"[..]));

        // Bad ids and names: 400 saying what is wrong; missing: 404.
        for (path, says) in [
            ("/v1/sessions/bad.id/files/x.txt", "session id"),
            // (a literal `..` segment never leaves the client: URLs are normalized)
            ("/v1/sessions/seeded/files/a%5C..%5Cb.txt", "backslash"),
            ("/v1/sessions/seeded/files/%2Fetc%2Fpasswd", "absolute"),
            ("/v1/sessions/seeded/files/x%01y.txt", "control character"),
            ("/v1/sessions/seeded/files/dir/", "folder"),
        ] {
            let (status, r) = put(&f.s, path, b"x".to_vec()).await;
            assert_eq!(status, 400, "{path}: {r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(says), "{path}: {r}");
        }
        for path in ["/v1/sessions/seeded/files/none.txt", "/v1/sessions/nosuch/files/x.txt", "/v1/sessions/nosuch/files"] {
            let r = f.s.http.get(f.s.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 404, "{path}");
        }
        // Over the quota (1 MiB): 413, and nothing of it kept.
        let (status, r) = put(&f.s, "/v1/sessions/seeded/files/big.bin", vec![7u8; 1 << 20]).await;
        assert_eq!((status, r["error"]["type"].as_str()), (413, Some("quota")), "{r}");
        let listed = f.s.get_json("/v1/sessions/seeded/files").await;
        assert_eq!(listed["files"].as_array().unwrap().len(), 2, "{listed}");
        // DELETE removes one file.
        let r = f.s.http.delete(f.s.url("/v1/sessions/seeded/files/out.csv")).send().await.unwrap();
        assert_eq!(r.status(), 204);
        let r = f.s.http.delete(f.s.url("/v1/sessions/seeded/files/out.csv")).send().await.unwrap();
        assert_eq!(r.status(), 404);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn session_routes_need_the_api_key() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_API_KEY", "k-sessions")]).await;
        for (method, path) in [
            ("GET", "/v1/sessions"),
            ("DELETE", "/v1/sessions/a"),
            ("GET", "/v1/sessions/a/files"),
            ("PUT", "/v1/sessions/a/files/x.txt"),
            ("GET", "/v1/artifacts/a/x.txt"),
        ] {
            let r =
                f.s.http
                    .request(method.parse().unwrap(), f.s.url(path))
                    .send()
                    .await
                    .unwrap();
            assert_eq!(r.status(), 401, "{method} {path}");
        }
        let r =
            f.s.http
                .get(f.s.url("/v1/sessions"))
                .header("X-API-Key", "k-sessions")
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 200);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_reload_gives_a_live_session_the_new_tools_and_keeps_its_state() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let r = run(
            &f.s,
            "reloaded",
            "v = 'kept'\nw = await get_weather(city='Oslo')",
        )
        .await;
        assert_eq!(r["status"], "ok", "{r}");
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(f.dir.0.join("tools.json")).unwrap())
                .unwrap();
        let mut changed = manifest.clone();
        changed["tools"].as_array_mut().unwrap().push(
            json!({"name": "get-time", "input_schema": {"type": "object", "properties": {}}}),
        );
        f.dir.write("tools.json", &changed.to_string());
        reloads(&f.s, 1).await;
        let r = run(
            &f.s,
            "reloaded",
            "print(v, w['city'], await get_time(), 'get_time' in dir(tools))",
        )
        .await;
        assert_eq!(r["stdout"], "kept Oslo 12:00 True\n", "{r}");
        assert_eq!(state(&r), ("kept", 2));
        // A tool taken away is gone from the globals too.
        f.dir.write("tools.json", &manifest.to_string());
        reloads(&f.s, 2).await;
        let r = run(
            &f.s,
            "reloaded",
            "print(v, 'get_time' in globals(), 'get_weather' in globals())",
        )
        .await;
        assert_eq!(r["stdout"], "kept False True\n", "{r}");
        assert_eq!(state(&r), ("kept", 3));
    })
    .await
    .unwrap();
}

/// Waits (at most 10 s) until the sidecar has swapped in `n` catalogs since it started.
async fn reloads(s: &TestSidecar, n: u64) {
    let reloaded = async {
        while s.health().await["reload"]["reloads"].as_u64().unwrap_or(0) < n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reloaded)
        .await
        .expect("the catalog was reloaded");
}

/// The pid of session `id`'s live interpreter, as `GET /v1/sessions` names it (the one we see:
/// inside its own PID namespace the interpreter is PID 1).
async fn interpreter_pid(s: &TestSidecar, id: &str) -> i32 {
    let listed = s.get_json("/v1/sessions").await;
    let entry = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no session {id}: {listed}"));
    let pid = entry["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pid: {entry}"));
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "{entry}"
    );
    pid as i32
}

/// A live session is one trust domain: a run can leave code running (here a thread) that acts
/// in the session's later runs. `reset: true` on a run gives it a fresh interpreter: the
/// earlier state and what was left running are gone, the files stay, and the run says why.
#[tokio::test]
async fn a_reset_run_gets_a_fresh_interpreter_and_nothing_left_running() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let left = "import threading, time\nx = 41\nopen('kept.txt', 'w').write('k')\n\
                    def spy():\n    while True:\n        print('spy', flush=True)\n        time.sleep(0.05)\n\
                    threading.Thread(target=spy, daemon=True).start()";
        let r = run(&f.s, "trust", left).await;
        assert_eq!(r["status"], "ok", "{r}");
        // Without a reset the thread acts in the next run of the session.
        let r = run(&f.s, "trust", "import time\ntime.sleep(0.3)\nprint('x' in globals())").await;
        assert!(r["stdout"].as_str().unwrap().contains("spy"), "{r}");
        assert_eq!(state(&r), ("kept", 2), "{r}");
        let r =
            f.s.exec_body(json!({"code": "import time\ntime.sleep(0.3)\nprint('x' in globals(), open('kept.txt').read())",
                                 "session_id": "trust", "reset": true}))
                .await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["stdout"], "False k\n", "nothing of the earlier runs but the files: {r}");
        assert_eq!(
            (state(&r), r["session"]["reason"].as_str()),
            (("reset", 1), Some("reset")),
            "{r}"
        );
        assert!(
            r["stderr"].as_str().unwrap().starts_with(
                "ptc-sidecar: state was reset: the run asked for a fresh interpreter (reset: true)"
            ),
            "{r}"
        );
    })
    .await
    .unwrap();
}

/// A session's runs each gather many calls, each run on an event loop of its own: the SDK's
/// connections of earlier runs are closed (they once piled up to the run's descriptor limit,
/// `Too many open files`, and held the bridge's count of the run), and every run's calls go.
#[tokio::test]
async fn a_sessions_runs_do_not_pile_up_connections() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = "rs = await asyncio.gather(*[get_weather(city=str(i)) for i in range(64)])\n\
                    import os\n\
                    def is_open(fd):\n\
                    \x20   try:\n\
                    \x20       os.fstat(fd)\n\
                    \x20       return True\n\
                    \x20   except OSError:\n\
                    \x20       return False\n\
                    print(len(rs), sum(map(is_open, range(4096))))";
        let mut fds = Vec::new();
        for i in 0..24 {
            let r = run(&f.s, "gathering", code).await;
            assert_eq!(r["status"], "ok", "run {i}: {r}");
            let out = r["stdout"].as_str().unwrap();
            let (calls, open) = out.trim().split_once(' ').unwrap();
            assert_eq!(calls, "64", "{r}");
            fds.push(open.parse::<usize>().unwrap());
        }
        // Open descriptors do not grow with the runs (the last run holds its own, at most 32).
        assert!(
            fds[23] <= fds[1] + 8,
            "descriptors grew run by run: {fds:?}"
        );
    })
    .await
    .unwrap();
}

/// Five files of 15 MiB written as fast as Python can, each in one `os.write`: faster than the
/// quota's watch may look (issue 34 once found a session at 76 MiB under a 16 MiB quota).
const FLOOD: &str = "import os\nbuf = b'q' * (15 << 20)\nfor i in range(5):\n    \
    fd = os.open(f'flood{i}.bin', os.O_WRONLY | os.O_CREAT, 0o600)\n    os.write(fd, buf)\n    \
    os.close(fd)\nprint('wrote', sum(os.path.getsize(f'flood{i}.bin') for i in range(5)))";

/// A run that leaves its session past `PTC_SESSION_MAX_MB`, however fast it wrote (the watch
/// may or may not have seen it), ends with an error saying so, and what it wrote is removed:
/// read from outside (`du`, the entries), the session holds what it held before the run. The
/// same for a live interpreter (ended with it) and a bash run in the session; `exec.finished`
/// says so; a run within the quota keeps its files.
#[tokio::test]
async fn a_run_that_leaves_its_session_past_its_quota_loses_what_it_wrote() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_SESSION_MAX_MB", "16")]).await;
        let dir = f.dir.0.join("sessions/quota-1");
        let mut events = f.s.sidecar.state.events.subscribe();
        let r = run(
            &f.s,
            "quota-1",
            "kept = 1\nopen('before.bin', 'wb').write(b'b' * (1 << 20))",
        )
        .await;
        assert_eq!(r["status"], "ok", "{r}");
        let before = crate::common::held(&dir);
        assert_eq!(before.1, [("before.bin".to_string(), 1 << 20)]);

        let r = run(&f.s, "quota-1", FLOOD).await;
        let after = crate::common::held(&dir);
        assert_eq!(after, before, "the session after the flood: {r}");
        assert!(after.0 <= 16 << 20);
        assert_eq!(r["status"], "error", "{r}");
        let stderr = r["stderr"].as_str().unwrap();
        for said in [
            "ptc-sidecar: the run left the session's data directory past its quota of 16 MiB \
             (PTC_SESSION_MAX_MB): it held ",
            "What the run wrote there was removed (",
            "and it holds at most what it held before the run: 1.0 MiB in 1 file or folder",
            "or raise PTC_SESSION_MAX_MB",
        ] {
            assert!(stderr.contains(said), "{said:?} not in {r}");
        }
        assert_eq!(
            (&r["quota"]["setting"], &r["quota"]["removed"]),
            (&json!("PTC_SESSION_MAX_MB"), &json!(true)),
            "{r}"
        );
        assert_eq!(
            (state(&r).0, &r["session"]["reason"]),
            ("ended", &json!("quota")),
            "{r}"
        );
        assert_eq!(r["files"], Value::Null, "{r}");

        // exec.finished says so: an error of type quota with the same words.
        let mut finished = Vec::new();
        while finished.len() < 2 {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "exec.finished" {
                finished.push(e);
            }
        }
        assert_eq!(finished[0]["error"], Value::Null, "{}", finished[0]);
        assert_eq!(finished[1]["error"]["type"], "quota", "{}", finished[1]);
        let message = finished[1]["error"]["message"].as_str().unwrap();
        assert!(stderr.contains(message), "{message}");

        // One write past the quota, the run over before the watch first looks (most often):
        // held to the quota at its end all the same.
        let r = run(
            &f.s,
            "quota-1",
            "open('quick.bin', 'wb').write(b'q' * (20 << 20))",
        )
        .await;
        assert_eq!(
            (&r["status"], &r["quota"]["removed"]),
            (&json!("error"), &json!(true)),
            "{r}"
        );
        assert_eq!(
            crate::common::held(&dir),
            before,
            "the session after one quick write"
        );

        // The next run: a new interpreter, the files from before; within the quota, what it
        // writes is kept.
        let r = run(
            &f.s,
            "quota-1",
            "import os\nopen('more.bin', 'wb').write(b'm' * (4 << 20))\n\
             print('kept' in globals(), sorted(os.listdir()))",
        )
        .await;
        assert_eq!(r["stdout"], "False ['before.bin', 'more.bin']\n", "{r}");
        assert_eq!(
            (state(&r), &r["session"]["reason"]),
            (("reset", 1), &json!("quota"))
        );
        assert_eq!(
            (&r["status"], &r["quota"]),
            (&json!("ok"), &Value::Null),
            "{r}"
        );
        let before = crate::common::held(&dir);
        assert_eq!(
            before.1,
            [
                ("before.bin".to_string(), 1 << 20),
                ("more.bin".to_string(), 4 << 20)
            ]
        );

        // A bash run in the session: the same.
        let code = "mkdir -p out/deeper\n\
                    for i in 1 2 3 4 5; do head -c 15728640 /dev/zero > out/deeper/b$i; done\n\
                    echo wrote";
        let r =
            f.s.exec_body(json!({"lang": "bash", "session_id": "quota-1", "code": code}))
                .await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["quota"]["removed"], true, "{r}");
        let said = "it holds at most what it held before the run: 5.0 MiB";
        assert!(r["stderr"].as_str().unwrap().contains(said), "{r}");
        assert_eq!(
            crate::common::held(&dir),
            before,
            "the session after the bash run"
        );
        // The live interpreter was not the bash run's: it kept its state.
        let r = run(&f.s, "quota-1", "print('ok')").await;
        assert_eq!(
            (r["stdout"].as_str(), state(&r)),
            (Some("ok\n"), ("kept", 2)),
            "{r}"
        );
    })
    .await
    .unwrap();
}
