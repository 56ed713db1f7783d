//! exec_code end to end: real python3 children, the real IPC bridge, a real host tool server
//! for the callback protocol. Every bad input of the issue gets a clear result and leaves no
//! process behind.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, processes_with, tool};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A sidecar with host tools served over the callback protocol.
struct Fixture {
    s: TestSidecar,
    host: HostServer,
    _dir: TempDir,
}

async fn fixture(extra: &[(&str, &str)]) -> Fixture {
    let host = HostServer::start(vec![
        (
            "get-weather",
            tool(|input| json!({"result": {"city": input["city"], "temp_c": 21}})),
        ),
        ("noop", tool(|_| json!({"result": null}))),
        (
            "explode",
            tool(|_| json!({"error": "the weather service is down"})),
        ),
        ("garbage", tool(|_| json!({"neither": 1}))),
        (
            "sleepy",
            std::sync::Arc::new(|input: Value| {
                Box::pin(async move {
                    let ms = input["ms"].as_u64().unwrap_or(100);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    json!({"result": ms})
                })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = Value> + Send>>
            }),
        ),
    ])
    .await;
    let dir = TempDir::new("exec");
    let schema_city =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let open = json!({"type": "object", "properties": {}});
    let manifest = json!({
        // A secret in the query string, as some hosts authenticate: code must never see it.
        "callback": {"url": format!("{}?token={CALLBACK_SECRET}", host.url()), "headers": {"X-Test": "1"}},
        "tools": [
            {"name": "complete", "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}}},
            {"name": "get-weather", "description": "Weather for a city.", "input_schema": schema_city},
            {"name": "noop", "input_schema": open},
            {"name": "explode", "input_schema": open},
            {"name": "garbage", "input_schema": open},
            {"name": "sleepy", "input_schema": {"type": "object", "properties": {"ms": {"type": "integer", "default": 100}}}}
        ]
    });
    let m = dir.write("tools.json", &manifest.to_string());
    let m = m.to_str().unwrap().to_string();
    let mut vars = vec![("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", m.as_str())];
    vars.extend_from_slice(extra);
    let s = TestSidecar::start(&vars).await;
    Fixture { s, host, _dir: dir }
}

/// Children of this sidecar: their command lines name its runtime directory.
fn left_behind(s: &TestSidecar) -> Vec<String> {
    processes_with(s.runtime.0.to_str().unwrap())
}

/// Waits until no child of this sidecar is left but the idle warm workers (at most `warm`).
async fn assert_no_runs_left(s: &TestSidecar, warm: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = left_behind(s);
        // The fork server is one more process when there is a warm pool.
        if procs.len() <= warm + usize::from(warm > 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind: {procs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stdout(r: &Value) -> &str {
    r["stdout"].as_str().unwrap()
}

fn stderr(r: &Value) -> &str {
    r["stderr"].as_str().unwrap()
}

#[tokio::test]
async fn prints_and_calls_host_tools() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let r = f.s.exec("print(1)").await;
        assert_eq!(r["status"], "ok");
        assert_eq!(stdout(&r), "1\n");
        assert_eq!(r["exit_code"], 0);
        assert_eq!(r["truncated"], false);
        assert_eq!(r["tool_calls"], json!([]));

        let code = r#"
w = await get_weather("Paris")
from tools import get_weather as gw
import tools
w2 = await gw(city="Rome")
w3 = await tools.get_weather(city="Oslo")
w4 = await call_tool("get-weather", city="Lima")
print(w["city"], w["temp_c"], w2["city"], w3["city"], w4["city"])
"#;
        let r = f.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(stdout(&r), "Paris 21 Rome Oslo Lima\n");
        let calls = r["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 4);
        assert!(
            calls
                .iter()
                .all(|c| c["tool"] == "get-weather" && c["ok"] == true)
        );
        assert_eq!(f.host.calls.load(std::sync::atomic::Ordering::Relaxed), 4);
        assert_no_runs_left(&f.s, 2).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn gathered_calls_overlap() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"
import time
t = time.monotonic()
out = await asyncio.gather(*[sleepy(ms=100) for _ in range(100)])
print(len(out), sum(out), round(time.monotonic() - t, 2))
"#;
        let r = f.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let words: Vec<&str> = stdout(&r).split_whitespace().collect();
        assert_eq!(&words[..2], ["100", "10000"]);
        let secs: f64 = words[2].parse().unwrap();
        // Sequential would be 10 s; overlapping calls finish in a fraction of that.
        assert!(secs < 2.5, "100 x 100 ms took {secs} s");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn tool_errors_reach_python_with_their_type() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"
async def attempt(label, coro):
    try:
        await coro
        print(label, "no error")
    except ToolInputError as e:
        print(label, "ToolInputError", e.type, str(e))
    except ToolError as e:
        print(label, "ToolError", e.type, str(e))
await attempt("failed", explode())
await attempt("badarg", get_weather(city=5))
await attempt("missing", call_tool("get-weather"))
await attempt("unknown", call_tool("get-wether", city="x"))
await attempt("direct", call_tool("complete", answer="x"))
await attempt("garbage", garbage())
"#;
        let before = f.host.calls.load(std::sync::atomic::Ordering::Relaxed);
        let r = f.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let lines: Vec<&str> = stdout(&r).lines().collect();
        assert_eq!(
            lines[0],
            "failed ToolError tool the weather service is down"
        );
        assert!(
            lines[1].starts_with(
                "badarg ToolInputError input get_weather(): city: 5 is not of type \"string\""
            ),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with(
                "missing ToolInputError input get_weather(): \"city\" is a required property"
            ),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with(
                "unknown ToolError unknown_tool no tool named \"get-wether\"; closest: get_weather"
            ),
            "{}",
            lines[3]
        );
        assert!(
            lines[4].starts_with("direct ToolError unknown_tool \"complete\" is a direct tool"),
            "{}",
            lines[4]
        );
        assert!(
            lines[5].starts_with("garbage ToolError tool host callback answered neither"),
            "{}",
            lines[5]
        );
        // Only the two valid calls reached the host: bad arguments are stopped in the sidecar.
        assert_eq!(
            f.host.calls.load(std::sync::atomic::Ordering::Relaxed) - before,
            2
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn syntax_and_runtime_errors_point_at_the_users_lines() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let r = f.s.exec("x = 1\nprint(x\n").await;
        assert_eq!(r["status"], "error");
        assert_eq!(r["exit_code"], 1);
        let e = stderr(&r);
        assert!(e.contains("File \"<code>\", line 2"), "{e}");
        assert!(e.contains("SyntaxError"), "{e}");
        assert!(
            !e.contains("ptc_bootstrap") && !e.contains("ptc_sdk"),
            "{e}"
        );

        let r =
            f.s.exec("def f():\n    return 1 / 0\n\nprint('before')\nf()\n")
                .await;
        assert_eq!(r["status"], "error");
        assert_eq!(stdout(&r), "before\n");
        let e = stderr(&r);
        assert!(e.contains("File \"<code>\", line 5"), "{e}");
        assert!(e.contains("File \"<code>\", line 2, in f"), "{e}");
        assert!(
            e.trim_end()
                .ends_with("ZeroDivisionError: division by zero"),
            "{e}"
        );
        assert!(
            !e.contains("ptc_bootstrap") && !e.contains("ptc_sdk"),
            "{e}"
        );

        let r =
            f.s.exec("import os\nprint('x', flush=True)\nos._exit(3)\n")
                .await;
        assert_eq!(r["status"], "error");
        assert_eq!(r["exit_code"], 3);
        assert_eq!(stdout(&r), "x\n");

        let r = f.s.exec("import sys\nsys.exit(0)\n").await;
        assert_eq!(r["status"], "ok");

        let r = f.s.exec("get_weather('Paris')\nprint('done')\n").await;
        assert_eq!(r["status"], "ok");
        assert!(
            stderr(&r).contains("hint: get_weather(...) was never awaited"),
            "{r}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn runaway_code_is_stopped_and_leaves_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_TIMEOUT", "2")]).await;

        // A busy loop: killed at the deadline, output so far returned.
        let t = Instant::now();
        let r = f.s.exec("print('started')\nwhile True: pass\n").await;
        assert_eq!(r["status"], "timeout");
        assert_eq!(stdout(&r), "started\n");
        assert!(stderr(&r).contains("stopped after 2.0 s (timeout)"), "{r}");
        assert!(t.elapsed() < Duration::from_secs(5));

        // The request's own timeout is honoured below PTC_TIMEOUT.
        let r = f.s.exec_body(json!({"code": "import time\ntime.sleep(30)", "timeout_ms": 500})).await;
        assert_eq!(r["status"], "timeout");
        assert!(r["duration_ms"].as_f64().unwrap() < 1500.0, "{r}");

        // SIGTERM ignored: the group gets SIGKILL.
        let code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('armed')\ntime.sleep(60)\n";
        let r = f.s.exec(code).await;
        assert_eq!(r["status"], "timeout");
        assert_eq!(stdout(&r), "armed\n");

        // A fork loop: refused, the run ends cleanly.
        let r = f.s.exec("import os\nwhile True:\n    os.fork()\n").await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(stderr(&r).contains("PermissionError"), "{r}");
        let r = f.s.exec("import subprocess\nsubprocess.run(['sleep', '100'])\n").await;
        assert_eq!(r["status"], "error", "{r}");

        // Memory: a clear MemoryError, not a dead machine.
        let r = f.s.exec("b = bytearray(10**10)\n").await;
        assert_eq!(r["status"], "error");
        assert!(stderr(&r).contains("MemoryError"), "{r}");

        assert_no_runs_left(&f.s, 2).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn huge_output_is_capped_with_a_marker() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_MAX_OUTPUT_BYTES", "65536")]).await;
        let code = "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(50 * 1024):\n    sys.stdout.write(line)\nprint('THE END')\n";
        let r = f.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{}", stderr(&r));
        assert_eq!(r["truncated"], true);
        let out = stdout(&r);
        assert!(out.len() < 65536 + 100, "{}", out.len());
        assert!(out.starts_with("xxxx"));
        assert!(out.trim_end().ends_with("THE END"));
        // The whole stream is kept as the run's artifact, and the marker says where.
        let total = 50 * 1024 * 1024 + "THE END\n".len();
        let file = &r["files"][0];
        assert_eq!((&file["name"], &file["size"]), (&json!("out-r0.txt"), &json!(total)), "{r}");
        let marker = format!("[... 49.9 MB cut; full output: GET {} ...]", file["url"].as_str().unwrap());
        assert!(out.contains(&marker), "{}", &out[32700..32900]);
    })
    .await
    .unwrap();
}

/// The query-string secret of the fixture's callback URL.
const CALLBACK_SECRET: &str = "cb-secret-5e1f";

#[tokio::test]
async fn slow_hosts_dead_hosts_and_garbage() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_TOOL_TIMEOUT", "1")]).await;
        let code = r#"
try:
    await sleepy(ms=3000)
except ToolError as e:
    print(e.type, str(e))
"#;
        let r = f.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            stdout(&r),
            "timeout sleepy did not answer within 1 s (PTC_TOOL_TIMEOUT)\n"
        );
        assert_eq!(r["tool_calls"][0]["ok"], false);

        // The callback goes away: a clear `unavailable`, not a hang.
        drop(f.host);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r =
            f.s.exec("try:\n    await noop()\nexcept ToolError as e:\n    print(e.type, str(e))\n")
                .await;
        assert_eq!(r["status"], "ok", "{r}");
        assert!(
            stdout(&r).starts_with("unavailable host callback http://"),
            "{r}"
        );
        assert!(stdout(&r).contains("is unreachable"), "{r}");
        assert!(!r.to_string().contains(CALLBACK_SECRET), "{r}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_child_sees_no_sidecar_secrets() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_API_KEY", "top-secret"), ("REDIS_URL", "redis://127.0.0.1:1/0")]).await;
        let r = f
            .s
            .http
            .post(f.s.url("/v1/exec_code"))
            .header("x-api-key", "top-secret")
            .json(&json!({"code": "import os, sys\nprint(sorted(os.environ))\nprint(' '.join(sys.orig_argv).count('top-secret'))\nprint(sys.stdin.read())"}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        let lines: Vec<&str> = stdout(&r).lines().collect();
        assert_eq!(lines[0], "['HOME', 'LANG', 'PATH', 'TMPDIR']");
        assert_eq!(lines[1], "0");
        assert_eq!(lines.get(2).copied().unwrap_or(""), "", "stdin is closed");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_ipc_bridge_refuses_without_a_live_token() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let runner = f.s.sidecar.state.runner.clone().unwrap();
        let url = format!("http://{}/call", runner.ipc_addr());
        let body = json!({"tool": "noop", "args": {}});
        for auth in [None, Some("Bearer nope"), Some("Basic x")] {
            let mut r = f.s.http.post(&url).json(&body);
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 401, "{auth:?}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["type"], "unauthorized");
        }
        assert_eq!(f.host.calls.load(std::sync::atomic::Ordering::Relaxed), 0);

        // A body over the limit: 413, nothing dispatched, the run carries on.
        let code = "try:\n    await call_tool('get-weather', city='x' * 9_000_000)\nexcept ToolError as e:\n    print('refused', 'limited to' in str(e))\n";
        let r = f.s.exec(code).await;
        assert_eq!(stdout(&r), "refused True\n", "{r}");
        assert_eq!(f.host.calls.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(runner.live_runs(), 0, "tokens die with their runs");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn many_runs_at_once_all_finish() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let f = fixture(&[("PTC_MAX_RUNS", "16"), ("PTC_TIMEOUT", "60")]).await;
        let runs = (0..200).map(|i| {
            let s = &f.s;
            async move { s.exec(&format!("w = await noop()\nprint({i}, w)")).await }
        });
        let results = futures_join_all(runs).await;
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r["status"], "ok", "run {i}: {r}");
            assert_eq!(stdout(r), format!("{i} None\n"));
        }
        assert_no_runs_left(&f.s, 2).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn warm_and_cold_runs_give_the_same_result() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let code = "import sys\nw = await get_weather('Oslo')\nprint(w)\nprint('err', file=sys.stderr)\nraise ValueError('boom')\n";
        let cold = fixture(&[("PTC_WARM_WORKERS", "0")]).await;
        let warm = fixture(&[("PTC_WARM_WORKERS", "2")]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let a = cold.s.exec(code).await;
        let b = warm.s.exec(code).await;
        for key in ["status", "stdout", "stderr", "exit_code", "truncated"] {
            assert_eq!(a[key], b[key], "{key}");
        }
        assert_eq!(a["status"], "error");
    })
    .await
    .unwrap();
}

#[test]
fn the_exec_command_runs_a_script() {
    let dir = TempDir::new("cli-exec");
    let script = dir.write(
        "s.py",
        "import sys\nprint('hello', 6 * 7)\nprint('to stderr', file=sys.stderr)\nsys.exit(4)\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
        .args(["exec", script.to_str().unwrap()])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("PTC_RUNTIME_DIR", dir.0.join("rt"))
        // The script's stderr, without the sidecar's warnings (on a machine whose python3 the
        // run user cannot execute, the sandbox warns that it runs code as the sidecar's uid).
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello 42\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "to stderr\n");
    assert_eq!(out.status.code(), Some(4));

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
        .args(["exec", "-"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("PTC_RUNTIME_DIR", dir.0.join("rt2"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"print(await asyncio.sleep(0, 'awaited'))")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "awaited\n");
    assert_eq!(out.status.code(), Some(0));
}

/// All futures polled concurrently; outputs in input order (`futures::join_all` without the
/// dependency).
async fn futures_join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut pending: Vec<(usize, std::pin::Pin<Box<F>>)> =
        futures.into_iter().map(Box::pin).enumerate().collect();
    let mut done: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|(i, f)| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => {
                done[*i] = Some(v);
                false
            }
            std::task::Poll::Pending => true,
        });
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    done.into_iter()
        .map(|v| v.expect("every future finished"))
        .collect()
}

#[tokio::test]
async fn policy_leaves_tools_out_of_the_description_and_out_of_reach() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Denied host tools: not described, not callable by either name.
        let f = fixture(&[("PTC_DENY_TOOLS", "explode,garb*")]).await;
        let tools: Value = f.s.http.get(f.s.url("/v1/tools")).send().await.unwrap().json().await.unwrap();
        let description = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "exec_code").unwrap()["description"].as_str().unwrap().to_string();
        assert!(description.contains("get_weather(city)"), "{description}");
        assert!(!description.contains("explode") && !description.contains("garbage"), "{description}");
        let r = f.s.exec("for name in ['explode', 'garbage']:\n    try:\n        await call_tool(name)\n    except ToolError as e:\n        print(e.type)\nprint('explode' in dir(tools))\n").await;
        assert_eq!(stdout(&r), "unknown_tool\nunknown_tool\nFalse\n", "{r}");
        assert_eq!(f.host.calls.load(std::sync::atomic::Ordering::Relaxed), 0);

        // Read-only: only MCP tools annotated readOnlyHint are callable from code.
        let dir = TempDir::new("policy-mcp");
        let config = json!({"mcpServers": {"demo": {"command": env!("CARGO_BIN_EXE_ptc-demo-mcp"), "args": []}}});
        let path = dir.write("mcp.json", &config.to_string());
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_MCP_CONFIG", path.to_str().unwrap()), ("PTC_READ_ONLY_TOOLS", "true")]).await;
        let r = s.exec("print(await demo__add(a=1, b=2))\ntry:\n    await call_tool('demo__fail', message='x')\nexcept ToolError as e:\n    print(e.type)\n").await;
        assert_eq!(stdout(&r), "3\nunknown_tool\n", "{r}");
    })
    .await
    .unwrap();
}

/// A run over `PTC_MAX_RUNS` waits for a slot within its own deadline; one that gets none in
/// time ends `timeout`, saying it waited for a slot, and never started (its code did not run).
#[tokio::test]
async fn a_run_that_gets_no_slot_before_its_deadline_times_out_saying_so() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = std::sync::Arc::new(fixture(&[("PTC_MAX_RUNS", "1")]).await);
        let holder = {
            let f = f.clone();
            tokio::spawn(async move { f.s.exec("import time\ntime.sleep(3)\nprint('held')").await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let calls_before = f.host.calls.load(std::sync::atomic::Ordering::SeqCst);
        let r =
            f.s.exec_body(json!({"code": "await noop()\nprint('ran')", "timeout_ms": 700}))
                .await;
        assert_eq!(r["status"], "timeout", "{r}");
        assert!(
            stderr(&r)
                .contains("waited 0.7 s for one of the 1 run slots and timed out before starting"),
            "{r}"
        );
        assert_eq!(r["stdout"], "", "{r}");
        assert_eq!(
            f.host.calls.load(std::sync::atomic::Ordering::SeqCst),
            calls_before
        );
        // The run that held the slot was not disturbed, and the slot is free again after it.
        let held = holder.await.unwrap();
        assert_eq!(held["stdout"], "held\n", "{held}");
        let r =
            f.s.exec_body(json!({"code": "print('ran')", "timeout_ms": 5000}))
                .await;
        assert_eq!(r["stdout"], "ran\n", "{r}");
    })
    .await
    .unwrap();
}
