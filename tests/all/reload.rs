//! Hot reload through the real sidecar: a manifest rewritten (by rename, as editors save) while
//! a run is in flight, broken manifests that keep the last good catalog, and an MCP server's
//! tools/list_changed.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, tool};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

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

async fn health(s: &TestSidecar) -> Value {
    s.http
        .get(s.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn wait_until(s: &TestSidecar, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let h = health(s).await;
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
            why.contains("tools.json is not valid JSON: EOF while parsing"),
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
                .is_some_and(|m| m.starts_with("cannot read"))
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
        let version = health(&s).await["catalog"]["version"].as_u64().unwrap();

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
