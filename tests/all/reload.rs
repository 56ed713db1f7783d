//! Hot reload through the real sidecar: a manifest rewritten (by rename, as editors save) while
//! a run is in flight, broken manifests that keep the last good catalog, and an MCP server's
//! tools/list_changed.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, processes_with, tool};
use ptc_sidecar::mcp::{Hub, HubOptions, Reconfigured, ServerSpec, Transport};
use ptc_sidecar::run::CallError;
use ptc_sidecar::run::dispatch::McpCaller;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn manifest(host: &HostServer, tools: &[(&str, &str)]) -> String {
    let tools: Vec<Value> = tools
        .iter()
        .map(|(name, description)| json!({"name": name, "description": description, "input_schema": {"type": "object", "properties": {}}}))
        .collect();
    json!({"callback": {"url": host.url()}, "tools": tools}).to_string()
}

/// Saves like an editor: write a temporary file, then rename it over the old one.
fn save(dir: &TempDir, name: &str, text: &str) {
    let tmp = dir.0.join(format!(".{name}.swp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.0.join(name)).unwrap();
}

async fn wait_until(s: &TestSidecar, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let h = s.health().await;
        if check(&h) {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {h}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A call's span, for calls made straight on the hub (the W3C example id).
const A_SPAN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// When a call made straight on the hub gives up (dispatch's `PTC_TOOL_TIMEOUT` default).
fn a_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn a_rewritten_manifest_swaps_in_while_runs_keep_their_snapshot() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = HostServer::start(vec![
            ("old_tool", tool(|_| json!({"result": "old"}))),
            ("new_tool", tool(|_| json!({"result": "new"}))),
            ("kept", tool(|_| json!({"result": "kept"}))),
        ])
        .await;
        let dir = TempDir::new("reload");
        save(&dir, "tools.json", &manifest(&host, &[("old_tool", "Old."), ("kept", "Kept.")]));
        let path = dir.0.join("tools.json");
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", path.to_str().unwrap())]).await;
        let mut events = s.sidecar.state.events.subscribe();
        let before: Value = s.http.get(s.url("/v1/tools")).send().await.unwrap().json().await.unwrap();
        assert_eq!(before["version"], 1);

        // A run that calls old_tool after the swap.
        let http = s.http.clone();
        let url = s.url("/v1/exec_code");
        let in_flight = tokio::spawn(async move {
            let body = json!({"code": "import asyncio\nawait asyncio.sleep(1.5)\nprint(await old_tool())"});
            http.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        save(&dir, "tools.json", &manifest(&host, &[("kept", "Kept, now described differently."), ("new_tool", "New.")]));
        wait_until(&s, "version 2", |h| h["catalog"]["version"] == 2).await;

        let after: Value = s.http.get(s.url("/v1/tools")).send().await.unwrap().json().await.unwrap();
        assert_eq!(after["version"], 2);
        assert_ne!(after["etag"], before["etag"]);
        let description = after["tools"].as_array().unwrap().iter().find(|t| t["name"] == "exec_code").unwrap()["description"].as_str().unwrap().to_string();
        assert!(description.contains("new_tool()") && !description.contains("old_tool"), "{description}");

        let r = in_flight.await.unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["stdout"], "old\n", "the run kept the snapshot it started with");

        let r = s.exec("print(await new_tool())\ntry:\n    await call_tool('old_tool')\nexcept ToolError as e:\n    print(e.type)\n").await;
        assert_eq!(r["stdout"], "new\nunknown_tool\n", "{r}");

        let reloaded = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "catalog.reloaded" {
                break e;
            }
        };
        assert_eq!(reloaded["ok"], true);
        assert_eq!(reloaded["version"], 2);
        assert_eq!(reloaded["added"], json!(["new_tool"]));
        assert_eq!(reloaded["removed"], json!(["old_tool"]));
        assert_eq!(reloaded["changed"], json!(["kept"]));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_broken_manifest_keeps_the_last_good_catalog_and_says_why() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = HostServer::start(vec![("a", tool(|_| json!({"result": 1})))]).await;
        let dir = TempDir::new("reload-broken");
        save(&dir, "tools.json", &manifest(&host, &[("a", "A.")]));
        let path = dir.0.join("tools.json");
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", path.to_str().unwrap()),
        ])
        .await;
        let mut events = s.sidecar.state.events.subscribe();

        // Half-written.
        std::fs::write(&path, "{\"tools\": [{\"name\": \"a\",").unwrap();
        let h = wait_until(&s, "the reload error", |h| {
            h["reload"]["last_error"].is_string()
        })
        .await;
        let why = h["reload"]["last_error"].as_str().unwrap();
        assert!(
            why.starts_with("PTC_TOOLS_FILE: ")
                && why.contains("tools.json is not valid JSON: EOF while parsing"),
            "{h}"
        );
        assert!(why.ends_with("; keeping catalog version 1"), "{h}");
        assert_eq!(h["catalog"]["version"], 1);
        let r = s.exec("print(await a())").await;
        assert_eq!(
            r["stdout"], "1\n",
            "the last good catalog still serves: {r}"
        );
        let e: Value = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "catalog.reloaded" {
                break e;
            }
        };
        assert_eq!(e["ok"], false);
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not valid JSON")
        );

        // Deleted, then replaced by a directory.
        std::fs::remove_file(&path).unwrap();
        wait_until(&s, "the missing-file error", |h| {
            h["reload"]["last_error"]
                .as_str()
                .is_some_and(|m| m.starts_with("PTC_TOOLS_FILE: cannot read"))
        })
        .await;
        std::fs::create_dir(&path).unwrap();
        wait_until(&s, "the directory error", |h| {
            h["reload"]["last_error"]
                .as_str()
                .is_some_and(|m| m.contains("is a directory"))
        })
        .await;
        std::fs::remove_dir(&path).unwrap();

        // Fixed: the new catalog swaps in and the error clears.
        save(&dir, "tools.json", &manifest(&host, &[("a", "A, fixed.")]));
        let h = wait_until(&s, "version 2", |h| h["catalog"]["version"] == 2).await;
        assert!(h["reload"]["last_error"].is_null(), "{h}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_mcp_servers_list_changed_rebuilds_the_catalog() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("reload-mcp");
        let config = json!({"mcpServers": {"demo": {"command": env!("CARGO_BIN_EXE_ptc-demo-mcp"), "args": []}}});
        let path = dir.write("mcp.json", &config.to_string());
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_MCP_CONFIG", path.to_str().unwrap())]).await;
        let r = s.exec("print(await demo__add(a=2, b=3))").await;
        assert_eq!(r["status"], "ok", "{r}");
        let version = s.health().await["catalog"]["version"].as_u64().unwrap();

        let r = s.exec("await demo__toggle_extra()\nprint('toggled')").await;
        assert_eq!(r["stdout"], "toggled\n", "{r}");
        wait_until(&s, "the new MCP tool", |h| h["catalog"]["version"].as_u64() > Some(version)).await;
        let r = s.exec("print(await demo__extra_echo(text='hi'))").await;
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["stdout"].as_str().unwrap().contains("hi"), "{r}");

        // A burst of list_changed: the sidecar keeps serving and settles on the last state.
        let r = s.exec("for _ in range(9):\n    await demo__toggle_extra()\nprint(await demo__add(a=1, b=1))").await;
        assert_eq!(r["status"], "ok", "{r}");
        let h = wait_until(&s, "the burst to settle", |h| {
            h["catalog"]["ptc_tools"].as_u64().is_some() && h["reload"]["last_error"].is_null()
        })
        .await;
        assert_eq!(h["status"], "ok");
    })
    .await
    .unwrap();
}

/// A link to the demo server under `dir`: its path, passed as the command, marks the process
/// in /proc (`processes_with`), so a test can tell its own server from other tests' servers.
fn demo_link(dir: &TempDir, name: &str) -> String {
    let link = dir.0.join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ptc-demo-mcp"), &link).unwrap();
    link.to_str().unwrap().to_string()
}

fn mcp_config(servers: &[(&str, &str)]) -> String {
    let servers: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, command)| (name.to_string(), json!({"command": command, "args": []})))
        .collect();
    json!({ "mcpServers": servers }).to_string()
}

/// Pids of the processes started from `command`, waiting up to a few seconds for the count
/// to be `want` (a stopped server gets a grace period before its group is killed).
async fn pids_of(command: &str, want: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = processes_with(command);
        if found.len() == want || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_added_mcp_server_starts_and_a_removed_one_stops() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("reload-mcp-servers");
        let demo = demo_link(&dir, "demo-server");
        let demo2 = demo_link(&dir, "demo2-server");
        save(&dir, "mcp.json", &mcp_config(&[("demo", &demo)]));
        let path = dir.0.join("mcp.json");
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_MCP_CONFIG", path.to_str().unwrap())]).await;
        let h = s.health().await;
        assert_eq!(h["mcp_servers"]["demo"]["state"], "ready", "{h}");
        let restarts = h["mcp_servers"]["demo"]["restarts"].clone();
        let version = h["catalog"]["version"].as_u64().unwrap();
        let demo_pid = pids_of(&demo, 1).await;
        assert_eq!(demo_pid.len(), 1, "{demo_pid:?}");

        // Added: demo2 starts and its tools appear; demo is left alone.
        save(&dir, "mcp.json", &mcp_config(&[("demo", &demo), ("demo2", &demo2)]));
        let h = wait_until(&s, "demo2 in the catalog", |h| {
            h["mcp_servers"]["demo2"]["state"] == "ready" && h["catalog"]["version"].as_u64() > Some(version)
        })
        .await;
        assert!(h["reload"]["last_error"].is_null(), "{h}");
        assert_eq!(h["mcp_servers"]["demo"]["restarts"], restarts, "demo was not restarted: {h}");
        assert_eq!(h["mcp_servers"]["demo"]["state"], "ready", "{h}");
        assert_eq!(pids_of(&demo, 1).await, demo_pid, "demo keeps the same process");
        assert_eq!(pids_of(&demo2, 1).await.len(), 1);
        let r = s.exec("print(await demo2__add(a=2, b=3))\nprint(await demo__add(a=1, b=1))").await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["stdout"], "5\n2\n", "{r}");
        let version = h["catalog"]["version"].as_u64().unwrap();

        // Changed spec (a new env): demo2 restarts with it; demo is left alone.
        let demo2_pid = pids_of(&demo2, 1).await;
        let mut changed: Value = serde_json::from_str(&mcp_config(&[("demo", &demo), ("demo2", &demo2)])).unwrap();
        changed["mcpServers"]["demo2"]["env"] = json!({"DEMO2_MARK": "1"});
        save(&dir, "mcp.json", &changed.to_string());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let now = processes_with(&demo2);
            if now.len() == 1 && now != demo2_pid && s.health().await["mcp_servers"]["demo2"]["state"] == "ready" {
                break;
            }
            assert!(Instant::now() < deadline, "demo2 was not restarted: {now:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(pids_of(&demo, 1).await, demo_pid, "demo keeps the same process");
        let r = s.exec("print(await demo2__add(a=3, b=4))").await;
        assert_eq!(r["stdout"], "7\n", "{r}");

        // Removed: demo2 stops, its tools go, and its process is gone.
        save(&dir, "mcp.json", &mcp_config(&[("demo", &demo)]));
        let h = wait_until(&s, "demo2 gone", |h| {
            h["mcp_servers"].get("demo2").is_none() && h["catalog"]["version"].as_u64() > Some(version)
        })
        .await;
        assert!(h["reload"]["last_error"].is_null(), "{h}");
        assert_eq!(h["mcp_servers"]["demo"]["restarts"], restarts, "{h}");
        let left = pids_of(&demo2, 0).await;
        assert!(left.is_empty(), "demo2 left processes behind: {left:?}");
        assert_eq!(pids_of(&demo, 1).await, demo_pid, "demo keeps the same process");
        let r = s
            .exec("try:\n    await call_tool('demo2__add', a=1, b=2)\nexcept ToolError as e:\n    print(e.type)\nprint(await demo__add(a=2, b=2))")
            .await;
        assert_eq!(r["stdout"], "unknown_tool\n4\n", "{r}");
        let tools: Value = s.http.get(s.url("/v1/tools")).send().await.unwrap().json().await.unwrap();
        let description = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "exec_code").unwrap()["description"].as_str().unwrap().to_string();
        assert!(description.contains("demo__") && !description.contains("demo2__"), "{description}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_broken_mcp_config_keeps_the_servers_running_and_says_why() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("reload-mcp-broken");
        let demo = demo_link(&dir, "demo-server");
        save(&dir, "mcp.json", &mcp_config(&[("demo", &demo)]));
        let path = dir.0.join("mcp.json");
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_MCP_CONFIG", path.to_str().unwrap()),
        ])
        .await;
        let mut events = s.sidecar.state.events.subscribe();
        let h = s.health().await;
        let restarts = h["mcp_servers"]["demo"]["restarts"].clone();
        let demo_pid = pids_of(&demo, 1).await;
        assert_eq!(demo_pid.len(), 1, "{demo_pid:?}");

        // Half-written: nothing stops, and /healthz says why.
        std::fs::write(&path, "{\"mcpServers\": {\"demo\": {\"comm").unwrap();
        let h = wait_until(&s, "the reload error", |h| {
            h["reload"]["last_error"].is_string()
        })
        .await;
        let why = h["reload"]["last_error"].as_str().unwrap();
        assert!(
            why.starts_with("PTC_MCP_CONFIG") && why.contains("not valid JSON"),
            "{h}"
        );
        assert!(why.ends_with("; keeping catalog version 1"), "{h}");
        assert_eq!(h["catalog"]["version"], 1);
        assert_eq!(h["mcp_servers"]["demo"]["state"], "ready", "{h}");
        assert_eq!(h["mcp_servers"]["demo"]["restarts"], restarts, "{h}");
        let e: Value = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "catalog.reloaded" {
                break e;
            }
        };
        assert_eq!(e["ok"], false, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("PTC_MCP_CONFIG"),
            "{e}"
        );

        // Valid JSON, bad server: still nothing stops.
        save(
            &dir,
            "mcp.json",
            &json!({"mcpServers": {"bad__name": {"command": "x"}}}).to_string(),
        );
        let h = wait_until(&s, "the server error", |h| {
            h["reload"]["last_error"]
                .as_str()
                .is_some_and(|m| m.contains("bad__name"))
        })
        .await;
        assert_eq!(h["mcp_servers"]["demo"]["state"], "ready", "{h}");
        assert!(h["mcp_servers"].get("bad__name").is_none(), "{h}");
        let r = s.exec("print(await demo__add(a=2, b=3))").await;
        assert_eq!(r["stdout"], "5\n", "the servers still serve: {r}");
        assert_eq!(
            pids_of(&demo, 1).await,
            demo_pid,
            "demo keeps the same process"
        );

        // Fixed (unchanged from the start): the error clears, demo was never restarted.
        save(&dir, "mcp.json", &mcp_config(&[("demo", &demo)]));
        let h = wait_until(&s, "the error to clear", |h| {
            h["reload"]["last_error"].is_null()
        })
        .await;
        assert_eq!(h["mcp_servers"]["demo"]["restarts"], restarts, "{h}");
        assert_eq!(
            pids_of(&demo, 1).await,
            demo_pid,
            "demo keeps the same process"
        );
    })
    .await
    .unwrap();
}

fn spec(name: &str, command: &str, env: &[(&str, &str)]) -> ServerSpec {
    ServerSpec {
        name: name.into(),
        transport: Transport::Stdio {
            command: command.into(),
            args: vec![],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
    }
}

#[tokio::test]
async fn the_hub_reconfigures_only_what_changed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("hub-reconfigure");
        let (a, b, c) = (
            demo_link(&dir, "a-server"),
            demo_link(&dir, "b-server"),
            demo_link(&dir, "c-server"),
        );
        let shutdown = CancellationToken::new();
        let _stop = shutdown.clone().drop_guard();
        let hub = Hub::start(
            vec![spec("a", &a, &[]), spec("b", &b, &[])],
            HubOptions::new(Duration::from_secs(20), shutdown),
        );
        // A clone made before the change (as dispatch and AppState hold) sees it too.
        let caller: Arc<dyn McpCaller> = Arc::new(hub.clone());
        hub.wait_started(Duration::from_secs(21)).await;
        let a_pid = pids_of(&a, 1).await;
        assert_eq!(pids_of(&b, 1).await.len(), 1);
        let mut changed = hub.tools_changed();
        changed.borrow_and_update();

        // The same set: nothing happens, and the catalog is not asked to rebuild.
        let same = hub.reconfigure(vec![spec("b", &b, &[]), spec("a", &a, &[])]);
        assert!(same.is_empty(), "{same:?}");
        assert!(!changed.has_changed().unwrap());

        // b removed, a's env changed, c new.
        let done = hub.reconfigure(vec![spec("a", &a, &[("X", "1")]), spec("c", &c, &[])]);
        assert_eq!(
            done,
            Reconfigured {
                started: vec!["c".into()],
                stopped: vec!["b".into()],
                restarted: vec!["a".into()]
            }
        );
        assert!(changed.has_changed().unwrap());
        assert_eq!(hub.status().keys().cloned().collect::<Vec<_>>(), ["a", "c"]);
        assert!(hub.health().get("b").is_none());
        match caller
            .call("b", "add", json!({"a": 1, "b": 2}), A_SPAN, a_deadline())
            .await
        {
            Err(CallError::Unavailable(m)) => assert!(m.contains("not in PTC_MCP_CONFIG"), "{m}"),
            other => panic!("a removed server answered {other:?}"),
        }
        hub.wait_started(Duration::from_secs(21)).await;
        assert!(hub.catalog_servers().0.iter().all(|s| s.server != "b"));
        assert_eq!(
            caller
                .call("c", "add", json!({"a": 1, "b": 2}), A_SPAN, a_deadline())
                .await
                .unwrap(),
            json!("3")
        );
        assert_eq!(
            caller
                .call("a", "add", json!({"a": 2, "b": 2}), A_SPAN, a_deadline())
                .await
                .unwrap(),
            json!("4")
        );
        assert!(pids_of(&b, 0).await.is_empty(), "b's process is gone");
        let a_now = pids_of(&a, 1).await;
        assert_eq!(a_now.len(), 1, "{a_now:?}");
        assert_ne!(a_now, a_pid, "a runs with its new spec");
        assert_eq!(hub.status()["a"].restarts, 0);
    })
    .await
    .unwrap();
}
