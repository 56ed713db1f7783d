//! MCP servers as tool backends, end to end: the real sidecar (POST /v1/exec_code, /healthz)
//! with the demo MCP server over stdio, the npm reference servers where npm installed them, and
//! one fake server for the single failure the demo cannot produce (malformed results).
//!
//! Servers started here carry a unique `PTC_TEST_MARK` in their env (given through the config),
//! which both proves the config's env reaches them and lets a test find their processes.

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, config};
use pretty_assertions::assert_eq;
use ptc_sidecar::app::{Sidecar, StartError};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

/// How long a test waits for a restart or for processes to go away.
const SETTLE: Duration = Duration::from_secs(15);

/// A unique mark for the servers of one test.
fn mark(label: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{label}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Pids of processes whose environment holds `PTC_TEST_MARK=<mark>`.
pub(crate) fn marked(mark: &str) -> Vec<i32> {
    let needle = format!("PTC_TEST_MARK={mark}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(env) = std::fs::read(entry.path().join("environ"))
            && env.split(|&b| b == 0).any(|var| var == needle.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

async fn wait_until_gone(mark: &str) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let left = marked(mark);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The demo server's config entry, marked.
fn demo(mark: &str) -> Value {
    json!({"command": DEMO, "env": {"PTC_TEST_MARK": mark}})
}

struct Mcp {
    s: TestSidecar,
    _dir: TempDir,
}

/// A sidecar with PTC on and these MCP servers.
async fn start(servers: Value, extra: &[(&str, &str)]) -> Mcp {
    let dir = TempDir::new("mcp");
    let path = dir.write("mcp.json", &json!({"mcpServers": servers}).to_string());
    let path = path.to_str().unwrap().to_string();
    let mut vars = vec![("PTC_ENABLED", "true"), ("PTC_MCP_CONFIG", path.as_str())];
    vars.extend_from_slice(extra);
    let s = TestSidecar::start(&vars).await;
    Mcp { s, _dir: dir }
}

/// Waits until `/healthz` shows `server` in `state`.
pub(crate) async fn wait_for_state(s: &TestSidecar, server: &str, state: &str) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let h = s.health().await;
        if h["mcp_servers"][server]["state"] == state {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "{server} never became {state}: {h}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stdout(r: &Value) -> &str {
    r["stdout"].as_str().unwrap()
}

/// The `NAME=value` variables of a process.
fn environ(pid: i32) -> Vec<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    env.split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[tokio::test]
async fn a_stdio_server_gets_the_configured_path_and_home_and_its_own_env_only() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("env");
        let home = TempDir::new("home");
        let home = home.0.to_str().unwrap().to_string();
        let path = format!(
            "/nonexistent/ptc-test-bin:{}",
            std::env::var("PATH").unwrap()
        );
        let t = start(
            json!({"demo": demo(&m)}),
            &[("PATH", path.as_str()), ("HOME", home.as_str())],
        )
        .await;
        wait_for_state(&t.s, "demo", "ready").await;
        let pids = marked(&m);
        assert_eq!(pids.len(), 1, "{pids:?}");
        let mut env = environ(pids[0]);
        env.sort();
        assert_eq!(
            env,
            [
                format!("HOME={home}"),
                format!("PATH={path}"),
                format!("PTC_TEST_MARK={m}"),
            ]
        );
        drop(t);
        wait_until_gone(&m).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_start_that_fails_after_the_servers_started_stops_them() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("failed-start");
        let dir = TempDir::new("mcp");
        let servers = json!({"mcpServers": {"demo": demo(&m)}});
        let path = dir.write("mcp.json", &servers.to_string());
        let c = config(&[
            ("PTC_ENABLED", "true"),
            ("PTC_MCP_CONFIG", path.to_str().unwrap()),
            // Resolved after the MCP servers are up.
            ("PTC_PYTHON", "/nonexistent/python3"),
        ]);
        let err = match Sidecar::start(c, &[]).await {
            Ok(_) => panic!("a missing interpreter must stop startup"),
            Err(e) => e,
        };
        assert!(matches!(err, StartError::Python(_)), "{err:?}");
        assert!(
            err.to_string()
                .starts_with(r#"PTC_PYTHON="/nonexistent/python3" cannot be started"#),
            "{err}"
        );
        wait_until_gone(&m).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn secrets_in_a_server_url_stay_out_of_healthz() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Nothing listens on port 9 (discard): the connection is refused at once.
        let url = "http://agent:hunter2@127.0.0.1:9/mcp?api_key=k-0123";
        let t = start(
            json!({"remote": {"url": url}}),
            &[("PTC_MCP_START_TIMEOUT", "2")],
        )
        .await;
        let h = t.s.health().await;
        let remote = &h["mcp_servers"]["remote"];
        assert!(
            ["failed", "restarting"].contains(&remote["state"].as_str().unwrap()),
            "{h}"
        );
        let error = remote["error"].as_str().unwrap();
        assert!(!error.is_empty(), "{h}");
        for secret in ["hunter2", "agent:", "k-0123", "api_key"] {
            assert!(!error.contains(secret), "{secret} in {error}");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn results_map_to_python_values() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("map");
        let t = start(json!({"demo": demo(&m)}), &[]).await;
        let code = r#"
def show(v):
    print(type(v).__name__, json.dumps(v, sort_keys=True))
show(await demo__add(a=1, b=2))            # text content -> str
show(await demo__noop())                   # empty text -> ''
show(await demo__lookup_country(code="fr"))  # structuredContent (outputSchema) -> dict
show(await demo__stats(numbers=[1, 2, 6]))   # outputSchema -> dict
for call in (demo__fail(message="the disk is full"), demo__lookup_country(code="XX")):
    try:
        await call
    except ToolError as e:
        print("ToolError", type(e).__name__, e)
"#;
        let r = t.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let lines: Vec<&str> = stdout(&r).lines().collect();
        assert_eq!(lines[..4], [
            r#"str "3""#,
            r#"str """#,
            r#"dict {"capital": "Paris", "code": "FR", "continent": "Europe", "name": "France", "population": 68400000}"#,
            r#"dict {"count": 3, "max": 6.0, "mean": 3.0, "min": 1.0, "sum": 9.0}"#,
        ]);
        assert_eq!(lines[4], "ToolError ToolError the disk is full");
        assert!(lines[5].starts_with("ToolError ToolError unknown country code"), "{}", lines[5]);
        let calls = r["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 6);
        assert_eq!(calls[0]["tool"], "demo__add");
        assert_eq!(calls.iter().filter(|c| c["ok"] == false).count(), 2);

        // Arguments are checked against the server's schema before anything is sent.
        let r = t.s.exec("await demo__add(a=\"one\", b=1)").await;
        assert_eq!(r["status"], "error");
        assert!(r["stderr"].as_str().unwrap().contains("ToolInputError"), "{r}");

        let h = t.s.health().await;
        assert_eq!(
            h["mcp_servers"],
            json!({"demo": {"state": "ready", "tools": 9, "restarts": 0}})
        );
        assert!(!marked(&m).is_empty(), "the config's env reaches the server");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn gathered_mcp_calls_run_together() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = start(json!({"demo": demo(&mark("gather"))}), &[]).await;
        let code = r#"
import time
t = time.monotonic()
sums = await asyncio.gather(*[demo__add(a=i, b=1) for i in range(200)])
slept = await asyncio.gather(*[demo__slow(ms=300) for _ in range(20)])
print(sums[:3], sums[-1], len(set(slept)), slept[0], time.monotonic() - t < 5)
"#;
        let r = t.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        // Twenty 300 ms calls finishing well inside 5 s ran concurrently.
        assert_eq!(stdout(&r), "['1', '2', '3'] 200 1 slept 300 ms True\n");
        assert_eq!(r["tool_calls"].as_array().unwrap().len(), 220);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_server_that_hangs_at_start_holds_up_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("hang");
        let started = Instant::now();
        let t = start(
            json!({
                "demo": demo(&m),
                "stuck": {"command": "sleep", "args": ["1000"], "env": {"PTC_TEST_MARK": m}},
                "off": {"command": "sleep", "args": ["1000"], "disabled": true},
            }),
            &[("PTC_MCP_START_TIMEOUT", "1")],
        )
        .await;
        // Startup waits for the first round, bounded by the start timeout.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let r = t.s.exec("print(await demo__multiply(a=6, b=7))").await;
        assert_eq!(stdout(&r), "42\n", "{r}");

        let h = t.s.health().await;
        let stuck = &h["mcp_servers"]["stuck"];
        assert!(
            ["failed", "restarting"].contains(&stuck["state"].as_str().unwrap()),
            "{h}"
        );
        assert!(
            stuck["error"]
                .as_str()
                .unwrap()
                .contains("did not start within 1 s"),
            "{h}"
        );
        assert_eq!(h["mcp_servers"]["demo"]["state"], "ready");
        assert!(
            h["mcp_servers"].get("off").is_none(),
            "disabled servers are skipped"
        );

        // Its tools are absent, and the model's code gets a clear answer.
        let r = t.s.exec("await call_tool('stuck__x')").await;
        assert!(
            r["stderr"].as_str().unwrap().contains("no tool named"),
            "{r}"
        );
        drop(t);
        wait_until_gone(&m).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_server_that_exits_mid_call_is_restarted() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("exit");
        let t = start(json!({"demo": demo(&m)}), &[]).await;
        let before = marked(&m);
        assert_eq!(before.len(), 1, "{before:?}");
        let killer = {
            let m = m.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(700)).await;
                for pid in marked(&m) {
                    // SAFETY: a plain kill of the demo process this test started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            })
        };
        let code = r#"
try:
    await demo__slow(ms=20000)
except ToolError as e:
    print(type(e).__name__, e)
"#;
        let r = t.s.exec(code).await;
        killer.await.unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        let out = stdout(&r);
        assert!(
            out.starts_with(
                "ToolError MCP server \"demo\" went away during the call to demo__slow"
            ),
            "{out}"
        );
        assert!(out.contains("it is being restarted"), "{out}");

        let h = wait_for_state(&t.s, "demo", "ready").await;
        assert_eq!(h["mcp_servers"]["demo"]["restarts"], 1, "{h}");
        let r = t.s.exec("print(await demo__add(a=2, b=2))").await;
        assert_eq!(stdout(&r), "4\n", "{r}");
        let after = marked(&m);
        assert_eq!(after.len(), 1);
        assert_ne!(after, before, "a new process serves the calls");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_tool_timeout_cancels_the_call_and_the_server_keeps_serving() {
    // The demo logs "slow call cancelled" to its stderr when notifications/cancelled reaches
    // it; a shell in front of it sends that stderr to a file this test reads (a log captured
    // through a thread's tracing subscriber missed it once in CI).
    let dir = TempDir::new("cancel");
    let stderr_file = dir.0.join("demo.stderr");
    let server = json!({
        "command": "/bin/sh",
        "args": ["-c", "exec \"$0\" 2>>\"$1\"", DEMO, stderr_file.to_str().unwrap()],
        "env": {"PTC_TEST_MARK": mark("timeout")},
    });
    let demo_log = || std::fs::read_to_string(&stderr_file).unwrap_or_default();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = start(json!({"demo": server}), &[("PTC_TOOL_TIMEOUT", "1")]).await;
        let code = r#"
try:
    await demo__slow(ms=30000)
except ToolError as e:
    print(type(e).__name__, e)
print(await demo__add(a=1, b=1))
"#;
        let started = Instant::now();
        let r = t.s.exec(code).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            stdout(&r),
            "ToolError demo__slow did not answer within 1 s (PTC_TOOL_TIMEOUT)\n2\n"
        );
        assert_eq!(t.s.health().await["mcp_servers"]["demo"]["restarts"], 0);
        let deadline = Instant::now() + SETTLE;
        while !demo_log().contains("slow call cancelled") {
            assert!(
                Instant::now() < deadline,
                "the server never saw the cancel: {}",
                demo_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
}

/// A fake MCP server written for this test only, because the demo (a correct rmcp server)
/// cannot send malformed results: it speaks just enough JSON-RPC to initialize, list two tools
/// and answer each call with a result that is not a valid `tools/call` result.
const MALFORMED_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "malformed", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "oops", "inputSchema": {"type": "object"}},
                            {"name": "hologram", "inputSchema": {"type": "object"}},
                            {"name": "fine", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        name = msg["params"]["name"]
        result = {"oops": {"content": "oops"},
                  "hologram": {"content": [{"type": "hologram", "beam": 1}]},
                  "fine": {"content": [{"type": "text", "text": "fine"}]}}[name]
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                          "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

#[tokio::test]
async fn malformed_results_get_a_clear_error() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("malformed");
        let script = dir.write("malformed_mcp.py", MALFORMED_SERVER);
        let t = start(
            json!({"bad": {"command": "python3", "args": ["-u", script]}}),
            &[],
        )
        .await;
        let code = r#"
for call in (bad__oops(), bad__hologram()):
    try:
        await call
    except ToolError as e:
        print(type(e).__name__, e)
print(await bad__fine())
"#;
        let r = t.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            stdout(&r),
            "ToolError MCP server \"bad\" answered bad__oops with a malformed result (not a valid tools/call result)\n\
             ToolError MCP server \"bad\" answered bad__hologram with a malformed result (not a valid tools/call result)\n\
             fine\n"
        );
        assert_eq!(t.s.health().await["mcp_servers"]["bad"]["state"], "ready");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn no_server_process_outlives_the_sidecar() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("drop");
        // A shell that leaves a grandchild behind, the shape of `npx` servers: only killing the
        // whole process group removes the `sleep`.
        let wrapped = format!("sleep 300 & exec {DEMO}");
        let t = start(
            json!({
                "demo": demo(&m),
                "wrapped": {"command": "sh", "args": ["-c", wrapped], "env": {"PTC_TEST_MARK": m}},
            }),
            &[],
        )
        .await;
        let r = t.s.exec("print(await wrapped__add(a=1, b=1))").await;
        assert_eq!(stdout(&r), "2\n", "{r}");
        assert_eq!(marked(&m).len(), 3, "demo, wrapped demo and its sleep");
        drop(t);
        wait_until_gone(&m).await;
    })
    .await
    .unwrap();
}

/// The npm reference servers, installed by scripts/test into tests/npm.
fn npm_server(bin: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/npm/node_modules/.bin")
        .join(bin);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipped: {} is not installed (scripts/test installs it with npm: \
             npm install --prefix tests/npm)",
            path.display()
        );
        None
    }
}

#[tokio::test]
async fn npm_filesystem_server_reads_a_file() {
    let Some(bin) = npm_server("mcp-server-filesystem") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let files = TempDir::new("npm-fs");
        let file = files.write("hello.txt", "hello from the filesystem server\n");
        let t = start(
            json!({"fs": {"command": bin, "args": [files.0]}}),
            &[],
        )
        .await;
        let code = format!(
            "print(await fs__read_text_file(path={:?}))\nprint(await fs__list_directory(path={:?}))",
            file.to_str().unwrap(),
            files.0.to_str().unwrap()
        );
        let r = t.s.exec(&code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let out = stdout(&r);
        assert!(out.contains("hello from the filesystem server"), "{out}");
        assert!(out.contains("[FILE] hello.txt"), "{out}");
        // A path outside the allowed directory is the server's error, raised in Python.
        let r = t.s.exec("await fs__read_text_file(path='/etc/hostname')").await;
        assert!(r["stderr"].as_str().unwrap().contains("ToolError"), "{r}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn npm_memory_server_keeps_a_graph() {
    let Some(bin) = npm_server("mcp-server-memory") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("npm-memory");
        let memory = dir.0.join("memory.jsonl");
        let t = start(
            json!({"memory": {"command": bin, "env": {"MEMORY_FILE_PATH": memory}}}),
            &[],
        )
        .await;
        let code = r#"
await memory__create_entities(entities=[
    {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]},
    {"name": "Engine", "entityType": "machine", "observations": []},
])
await memory__create_relations(relations=[{"from": "Ada", "to": "Engine", "relationType": "programmed"}])
graph = await memory__read_graph()
if isinstance(graph, str):
    graph = json.loads(graph)
print(sorted(e["name"] for e in graph["entities"]), [r["relationType"] for r in graph["relations"]])
"#;
        let r = t.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(stdout(&r), "['Ada', 'Engine'] ['programmed']\n");
        assert!(memory.exists(), "the server's env (MEMORY_FILE_PATH) was passed");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn tools_list_changed_relists_the_server() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = start(json!({"demo": demo(&mark("changed"))}), &[]).await;
        let hub = t.s.sidecar.state.mcp.clone().unwrap();
        let mut changed = hub.tools_changed();
        changed.borrow_and_update();
        let r = t.s.exec("print(await demo__toggle_extra())").await;
        assert_eq!(stdout(&r), "extra_echo added\n", "{r}");
        // The notification makes the actor list the tools again; the new list is observable.
        tokio::time::timeout(SETTLE, changed.changed())
            .await
            .expect("tools_changed moves")
            .unwrap();
        let (servers, _) = hub.catalog_servers();
        let names: Vec<&str> = servers[0].tools.iter().map(|t| t.name.as_str()).collect();
        assert!(names.contains(&"extra_echo"), "{names:?}");
        assert_eq!(t.s.health().await["mcp_servers"]["demo"]["tools"], 10);
    })
    .await
    .unwrap();
}

/// `ptc-sidecar tools` and `ptc-sidecar exec` as a person runs them.
#[tokio::test]
async fn the_command_line_shows_states_and_calls_mcp_tools() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("cli");
        let dir = TempDir::new("mcp-cli");
        let config = json!({"mcpServers": {
            "demo": demo(&m),
            "broken": {"command": "/nonexistent/mcp-server"},
        }});
        let path = dir.write("mcp.json", &config.to_string());
        let run = |args: &[&str]| {
            let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"));
            cmd.args(args)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("PTC_ENABLED", "true")
                .env("PTC_MCP_CONFIG", &path)
                .env("PTC_RUNTIME_DIR", dir.0.join("rt"))
                .env("RUST_LOG", "error")
                .kill_on_drop(true);
            cmd.output()
        };
        let out = run(&["tools", "--format", "description"]).await.unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("mcp server demo: ready (9 tools)"),
            "{stderr}"
        );
        assert!(
            stderr.contains("mcp server broken: failed: cannot start \"/nonexistent/mcp-server\""),
            "{stderr}"
        );
        assert!(stdout.contains("## demo__"), "{stdout}");

        let script = dir.write("s.py", "print(await demo__multiply(a=3, b=5))\n");
        let out = run(&["exec", script.to_str().unwrap()]).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "15\n");
        assert!(out.status.success());
        wait_until_gone(&m).await;
    })
    .await
    .unwrap();
}

/// `mcp-server-everything streamableHttp` on a free port, killed when dropped.
async fn everything_over_http(bin: &Path, port: u16) -> tokio::process::Child {
    let child = tokio::process::Command::new(bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + SETTLE;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

#[tokio::test]
async fn npm_everything_server_over_streamable_http() {
    let Some(bin) = npm_server("mcp-server-everything") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = everything_over_http(&bin, port).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let t = start(
            json!({"everything": {"url": url, "headers": {"X-Ptc-Test": "1"}}}),
            &[],
        )
        .await;
        let code = r#"
print(await everything__echo(message="over http"))
print(await everything__get_sum(a=2, b=3))
blocks = await everything__get_tiny_image()
print([b["type"] for b in blocks], blocks[1]["mimeType"])
"#;
        let r = t.s.exec(code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let lines: Vec<&str> = stdout(&r).lines().collect();
        assert_eq!(lines[0], "Echo: over http");
        assert!(lines[1].contains('5'), "{}", lines[1]);
        // Text, image, text: other content stays a dict per block, with its type.
        assert_eq!(lines[2], "['text', 'image', 'text'] image/png");

        // The server goes away: the next call says so, and the hub reconnects once it is back.
        server.kill().await.unwrap();
        let r = t.s.exec("await everything__echo(message='x')").await;
        let err = r["stderr"].as_str().unwrap();
        assert!(
            err.contains("ToolError: MCP server \"everything\" went away during the call to everything__echo (cannot reach it:"),
            "{r}"
        );
        let h = t.s.health().await;
        assert!(
            ["failed", "restarting"].contains(&h["mcp_servers"]["everything"]["state"].as_str().unwrap()),
            "{h}"
        );
        let _server = everything_over_http(&bin, port).await;
        wait_for_state(&t.s, "everything", "ready").await;
        let r =
            t.s.exec("print(await everything__echo(message='back'))")
                .await;
        assert_eq!(stdout(&r), "Echo: back\n", "{r}");
    })
    .await
    .unwrap();
}

/// `ptc-demo-mcp --http 127.0.0.1:0`, killed when dropped, and the URL it serves.
async fn demo_over_http(mark: &str) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(DEMO)
        .args(["--http", "127.0.0.1:0"])
        .env("PTC_TEST_MARK", mark)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut line = String::new();
    tokio::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the demo server printed {line:?}"))
        .to_string();
    (child, url)
}

/// A call's span reaches the MCP server it calls: in `params._meta.traceparent` (MCP's SEP-414)
/// over stdio, and over streamable HTTP also as the `traceparent` header. The demo server's
/// `trace_context` tool reports what it received.
#[tokio::test]
async fn a_calls_span_reaches_mcp_servers_in_meta_and_over_http_as_a_header() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let m = mark("trace");
        let (_http, url) = demo_over_http(&m).await;
        let t = start(json!({"demo": demo(&m), "remote": {"url": url}}), &[]).await;
        wait_for_state(&t.s, "remote", "ready").await;
        let mut events = t.s.sidecar.state.events.subscribe();
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let code = r#"
import json
for tool in (demo__trace_context, remote__trace_context):
    got = await tool()
    print(json.dumps(got if isinstance(got, dict) else json.loads(got), sort_keys=True))
"#;
        let r: Value = t
            .s
            .http
            .post(t.s.url("/v1/exec_code"))
            .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
            .json(&json!({"code": code}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        let mut spans = std::collections::HashMap::new();
        while spans.len() < 2 {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "tool_call.finished" {
                spans.insert(e["tool"].as_str().unwrap().to_string(), e["span_id"].as_str().unwrap().to_string());
            }
        }
        let parent = |tool: &str| format!("00-{trace}-{}-01", spans[tool]);
        let seen: Vec<Value> = stdout(&r).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(
            seen,
            [
                json!({"meta": parent("demo__trace_context"), "header": null}),
                json!({"meta": parent("remote__trace_context"), "header": parent("remote__trace_context")}),
            ]
        );
    })
    .await
    .unwrap();
}
