//! Configured MCP servers that are not running, as the model and the operator learn of them:
//! named in the `exec_code` description with what failed and when it is tried again, in
//! `/healthz` and in a `catalog.reloaded` event; and the example config, whose relative command
//! is its own directory's, started from another working directory. Real processes throughout:
//! the sidecar (in-process, and its binary for the example), the demo MCP server, a shell
//! script that serves once, Redis for the event at start.

use crate::common::{TEST_TIMEOUT, TempDir, TestRedis, TestSidecar, processes_with, unique};
use crate::mcp::{marked, wait_for_state};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

/// How long a test waits for a restart, a rebuild or an event.
const SETTLE: Duration = Duration::from_secs(20);

/// What the description says before the servers that are not running.
const NOTE: &str = "MCP servers not running now, so their tools are missing or raise ToolError \
                    (each is tried again within 60 s):";

/// The `exec_code` description as `/v1/tools` gives it to the model.
async fn description(s: &TestSidecar) -> String {
    let body = s.get_json("/v1/tools").await;
    let tools = body["tools"].as_array().unwrap();
    let exec = tools.iter().find(|t| t["name"] == "exec_code").unwrap();
    exec["description"].as_str().unwrap().to_string()
}

/// Waits until the description satisfies `check`, and returns it.
async fn description_until(s: &TestSidecar, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + SETTLE;
    loop {
        let d = description(s).await;
        if check(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "never came: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts a sidecar with PTC on and `servers` in an MCP config file in `dir`.
async fn start(dir: &TempDir, servers: Value, extra: &[(&str, &str)]) -> TestSidecar {
    let path = dir.write("mcp.json", &json!({"mcpServers": servers}).to_string());
    let path = path.to_str().unwrap().to_string();
    let mut vars = vec![("PTC_ENABLED", "true"), ("PTC_MCP_CONFIG", path.as_str())];
    vars.extend_from_slice(extra);
    TestSidecar::start(&vars).await
}

#[tokio::test]
async fn a_server_that_cannot_start_is_named_in_the_description_healthz_and_an_event() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = TestRedis::any();
        let agent = unique("mcp-failed");
        let (mark, ghost_mark) = (unique("failed-demo"), unique("failed-ghost"));
        let dir = TempDir::new("mcp-failed");
        // Relative, so the file's directory: not there yet.
        let servers = json!({
            "demo": {"command": DEMO, "env": {"PTC_TEST_MARK": mark}},
            "ghost": {"command": "bin/ghost-server", "env": {"PTC_TEST_MARK": ghost_mark}},
        });
        let s = start(
            &dir,
            servers,
            &[
                ("REDIS_URL", redis.url.as_str()),
                ("PTC_AGENT_ID", agent.as_str()),
            ],
        )
        .await;
        let command = dir.0.join("bin/ghost-server");
        let error = format!(
            "cannot start {:?}: No such file or directory (os error 2)",
            command.to_str().unwrap()
        );

        // The model reads which server is missing, what failed and when it is tried again,
        // before the tools it does have.
        let d = description(&s).await;
        let said = format!("{NOTE}\n- ghost: {error}\n\n");
        assert!(d.contains(&said), "{d}");
        assert!(d.find(&said) < d.find("## demo__"), "{d}");
        assert!(!d.contains("ghost__"), "{d}");

        let h = s.health().await;
        let ghost = &h["mcp_servers"]["ghost"];
        assert_eq!(ghost["unavailable"], true, "{h}");
        assert_eq!(ghost["error"], error.as_str(), "{h}");
        assert!(ghost["down_since_ms"].as_u64().unwrap() > 0, "{h}");
        assert!(ghost["died"].is_null(), "it never ran: {h}");
        assert!(["failed", "restarting"].contains(&ghost["state"].as_str().unwrap()));
        let demo = &h["mcp_servers"]["demo"];
        assert_eq!(
            demo,
            &json!({"state": "ready", "tools": 9, "restarts": 0}),
            "{h}"
        );

        // At the start, one catalog.reloaded for the first catalog names it.
        let mut conn = redis.connection().await;
        let deadline = Instant::now() + SETTLE;
        let first = loop {
            let events = redis.stream_events(&mut conn, &agent).await;
            if let Some(e) = events.into_iter().find(|e| e["type"] == "catalog.reloaded") {
                break e;
            }
            assert!(
                Instant::now() < deadline,
                "no catalog.reloaded at the start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!((&first["ok"], &first["version"]), (&json!(true), &json!(1)));
        assert_eq!(first["added"], json!([]), "{first}");
        let down = first["unavailable"].as_array().unwrap();
        assert_eq!(down.len(), 1, "{first}");
        assert_eq!(
            (&down[0]["server"], &down[0]["error"]),
            (&json!("ghost"), &json!(error))
        );
        assert!(down[0]["down_since_ms"].as_u64().unwrap() > 0, "{first}");

        // The command appears: the next attempt starts it, the note goes, its tools come, and
        // the event says no server is down.
        let mut events = s.sidecar.state.events.subscribe();
        std::fs::create_dir(dir.0.join("bin")).unwrap();
        std::os::unix::fs::symlink(DEMO, &command).unwrap();
        let d = description_until(&s, |d| d.contains("## ghost__")).await;
        assert!(!d.contains(NOTE), "{d}");
        let reloaded = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "catalog.reloaded" && e["unavailable"] == json!([]) {
                break e;
            }
        };
        assert_eq!(reloaded["ok"], true, "{reloaded}");
        assert!(
            reloaded["added"]
                .as_array()
                .unwrap()
                .contains(&json!("ghost__add"))
        );
        let h = wait_for_state(&s, "ghost", "ready").await;
        let ghost = &h["mcp_servers"]["ghost"];
        assert!(
            ghost["unavailable"].is_null() && ghost["down_since_ms"].is_null(),
            "{h}"
        );
        assert_eq!(marked(&ghost_mark).len(), 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_server_that_dies_and_cannot_start_again_is_named_after_it_dies() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mark = unique("dies");
        let dir = TempDir::new("mcp-dies");
        // Serves once: a second start exits 3 before it speaks MCP.
        let script = dir.write(
            "once.sh",
            "#!/bin/sh\n\
             if [ -e \"$ONCE_MARKER\" ]; then echo 'refusing a second start' >&2; exit 3; fi\n\
             : > \"$ONCE_MARKER\"\n\
             exec \"$DEMO\"\n",
        );
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let env = json!({
            "PTC_TEST_MARK": mark,
            "ONCE_MARKER": dir.0.join("started"),
            "DEMO": DEMO,
        });
        let s = start(
            &dir,
            json!({"demo": {"command": "./once.sh", "env": env}}),
            &[],
        )
        .await;
        let d = description(&s).await;
        assert!(d.contains("## demo__") && !d.contains(NOTE), "{d}");
        let h = s.health().await;
        assert!(h["mcp_servers"]["demo"]["unavailable"].is_null(), "{h}");
        let version = s.sidecar.state.current().catalog.version;

        let mut events = s.sidecar.state.events.subscribe();
        let pids = marked(&mark);
        assert_eq!(pids.len(), 1, "{pids:?}");
        // SAFETY: a plain kill of the demo process this test started.
        unsafe { libc::kill(pids[0], libc::SIGKILL) };

        let reloaded = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "catalog.reloaded" {
                break e;
            }
        };
        assert_eq!(reloaded["ok"], true, "{reloaded}");
        assert_eq!(reloaded["version"], version + 1, "{reloaded}");
        // Its tools are kept (a later start may bring it back): only the note changed.
        assert_eq!(
            (
                &reloaded["added"],
                &reloaded["removed"],
                &reloaded["changed"]
            ),
            (&json!([]), &json!([]), &json!([]))
        );
        let down = reloaded["unavailable"].as_array().unwrap();
        assert_eq!(
            (down.len(), &down[0]["server"]),
            (1, &json!("demo")),
            "{reloaded}"
        );
        let error = down[0]["error"].as_str().unwrap();
        let died = down[0]["died"].as_str().unwrap();
        assert!(
            error.starts_with(&format!("died ({died}); restart failed: initialize failed")),
            "{reloaded}"
        );
        assert!(down[0]["down_since_ms"].as_u64().unwrap() > 0, "{reloaded}");

        let d = description(&s).await;
        assert!(d.contains(&format!("{NOTE}\n- demo: {error}\n\n")), "{d}");
        assert!(d.contains("## demo__"), "{d}");
        let h = s.health().await;
        let demo = &h["mcp_servers"]["demo"];
        assert_eq!(
            (&demo["unavailable"], &demo["died"]),
            (&json!(true), &json!(died)),
            "{h}"
        );
        // The whole reason of the failed restart: the script's exit.
        let reason = demo["error"].as_str().unwrap();
        assert!(reason.starts_with("initialize failed"), "{h}");
        assert!(reason.ends_with("(exit status 3)"), "{h}");
        assert!(demo["restarts"].as_u64().unwrap() >= 2, "{h}");

        // Retries that fail the same way change nothing the model sees.
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert_eq!(s.sidecar.state.current().catalog.version, version + 1);
        assert!(
            s.health().await["mcp_servers"]["demo"]["restarts"]
                .as_u64()
                .unwrap()
                >= 3
        );
    })
    .await
    .unwrap();
}

/// `examples/mcp.json` as the repository has it, in the layout it is written for (the demo
/// server at `target/release/` beside `examples/`), used by the sidecar's binary started in
/// another directory: its command is the file's directory's, not the working directory's.
#[tokio::test]
async fn the_example_config_works_from_another_directory() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let tree = TempDir::new("example-tree");
        let config = tree.0.join("examples/mcp.json");
        std::fs::create_dir_all(tree.0.join("examples")).unwrap();
        std::fs::create_dir_all(tree.0.join("target/release")).unwrap();
        std::fs::copy(repo.join("examples/mcp.json"), &config).unwrap();
        std::os::unix::fs::symlink(DEMO, tree.0.join("target/release/ptc-demo-mcp")).unwrap();
        let elsewhere = TempDir::new("elsewhere");
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
            .arg("exec")
            .arg(repo.join("examples/demo.py"))
            .current_dir(&elsewhere.0)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PTC_MCP_CONFIG", &config)
            .env("PTC_RUNTIME_DIR", elsewhere.0.join("rt"))
            .env("RUST_LOG", "error")
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.starts_with("France: capital Paris"), "{stdout}");
        assert!(stdout.contains("caught: "), "{stdout}");
        let needle = tree.0.to_str().unwrap();
        let deadline = Instant::now() + SETTLE;
        while !processes_with(needle).is_empty() {
            assert!(Instant::now() < deadline, "{:?}", processes_with(needle));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
}
