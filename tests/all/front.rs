//! The MCP front door (`ptc-sidecar mcp` on stdio, `/mcp` on `serve`) with the official SDK
//! clients as the hosts: the Python `mcp` SDK 2.3 in its `auto` mode (which speaks 2026-07-28,
//! no MCP sessions) and its `legacy` mode (the `initialize` handshake), and the TypeScript
//! `@modelcontextprotocol/sdk` 1.32 (the handshake), each over stdio (the real binary, started
//! by the SDK) and streamable HTTP (an in-process sidecar). The clients are
//! tests/mcp_hosts/client.{py,mjs}, installed by scripts/test; they print what they saw and the
//! judging is here. A missing install fails these tests, it does not skip them.
//!
//! Every scenario runs for each host on each wire (`front::<scenario>::<host>_<wire>`): a tour
//! (listing, a gathered run of MCP and callback tools, a failing run, state across calls,
//! progress before the end, images and files read back, bad arguments, a megabyte of output
//! and a stray write to fd 1), cancellation (the run's process gone, the session usable, the
//! partial output in events) and a reload (`list_changed`, the new description). Then the API
//! key and Origin checks, and stdout byte by byte.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, processes_with, tool, unique};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One client's whole scenario is bounded by this (inside [`TEST_TIMEOUT`]); the subprocess is
/// killed when it is over.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
const KEY: &str = "front-door-test-key";
/// The PNG the tour's run saves (client.py's and client.mjs's `PNG`).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Host {
    PyAuto,
    PyLegacy,
    Ts,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wire {
    Stdio,
    Http,
}

fn hosts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_hosts")
}

/// A door's surroundings: a callback host tool (`double`), the demo MCP server, a manifest a
/// scenario may rewrite, and an in-process sidecar with the same configuration.
pub struct Door {
    host: HostServer,
    _dir: TempDir,
    manifest: PathBuf,
    mcp_config: PathBuf,
    /// The in-process sidecar: the `/mcp` of the HTTP wire, the reference `GET /v1/tools` of
    /// both.
    sidecar: TestSidecar,
}

impl Door {
    pub async fn open() -> Door {
        let host = HostServer::start(vec![(
            "double",
            tool(|input| json!({"result": input["x"].as_i64().unwrap_or(0) * 2})),
        )])
        .await;
        let dir = TempDir::new("front");
        let manifest = dir.write(
            "tools.json",
            &json!({
                "callback": {"url": host.url()},
                "tools": [{"name": "double", "description": "Double x.",
                           "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}]
            })
            .to_string(),
        );
        let demo = json!({"mcpServers": {"demo": {"command": env!("CARGO_BIN_EXE_ptc-demo-mcp"), "args": []}}});
        let mcp_config = dir.write("mcp.json", &demo.to_string());
        let vars = Self::vars_of(&manifest, &mcp_config);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let sidecar = TestSidecar::start(&vars).await;
        Door {
            host,
            _dir: dir,
            manifest,
            mcp_config,
            sidecar,
        }
    }

    fn vars_of(manifest: &Path, mcp_config: &Path) -> Vec<(&'static str, String)> {
        vec![
            ("PTC_ENABLED", "true".into()),
            ("PTC_API_KEY", KEY.into()),
            // The cancel scenario's run starts a process of its own, to find it gone after.
            ("PTC_ALLOW_SUBPROCESS", "true".into()),
            ("PTC_TOOLS_FILE", manifest.display().to_string()),
            ("PTC_MCP_CONFIG", mcp_config.display().to_string()),
            // The approve scenario's demo__toggle_extra (destructiveHint) needs a person.
            ("PTC_APPROVE_DESTRUCTIVE", "true".into()),
        ]
    }

    /// The spec a client connects with: the binary on stdio (its own runtime directory), or
    /// the in-process sidecar's `/mcp` with the key.
    pub fn spec(&self, wire: Wire, scenario: &str) -> Value {
        match wire {
            Wire::Stdio => {
                let mut env: serde_json::Map<String, Value> =
                    Self::vars_of(&self.manifest, &self.mcp_config)
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), Value::String(v)))
                        .collect();
                env.insert("PTC_RUNTIME_DIR".into(), json!(self.stdio_runtime()));
                env.insert(
                    "PATH".into(),
                    json!(std::env::var("PATH").unwrap_or_default()),
                );
                env.insert("RUST_LOG".into(), json!("warn"));
                json!({"transport": "stdio", "scenario": scenario,
                       "command": env!("CARGO_BIN_EXE_ptc-sidecar"), "args": ["mcp"], "env": env})
            }
            Wire::Http => json!({"transport": "http", "scenario": scenario,
                                 "url": self.sidecar.url("/mcp"),
                                 "headers": {"Authorization": format!("Bearer {KEY}")}}),
        }
    }

    fn stdio_runtime(&self) -> String {
        // Inside the in-process sidecar's: its processes are found by this path too.
        self.sidecar.runtime.0.join("stdio").display().to_string()
    }

    /// `GET /v1/tools`'s `exec_code` description: what the door must offer.
    async fn exec_code_description(&self) -> String {
        let tools: Value = self
            .sidecar
            .http
            .get(self.sidecar.url("/v1/tools"))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let exec = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "exec_code")
            .unwrap();
        exec["description"].as_str().unwrap().to_string()
    }

    /// Nothing of either sidecar's runs left: the stdio binary's processes gone (its fork
    /// server and runs are in its runtime directory), no run and no live interpreter of the
    /// in-process one (its fork server stays: it is the sidecar's own).
    pub async fn assert_nothing_left(&self) {
        let runner = self.sidecar.sidecar.state.runner.clone().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let procs = processes_with(&self.stdio_runtime());
            let (runs, live) = (runner.live_runs(), runner.sessions().live());
            if procs.is_empty() && runs == 0 && live == 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "left behind: {runs} runs, {live} live interpreters, {procs:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Runs a host's client with `spec` and returns what it printed (its last line, JSON),
/// failing the test when the client says it failed.
pub async fn client(host: Host, spec: Value) -> Value {
    let (seen, stderr) = run_client(host, spec).await;
    assert!(
        seen.get("error").is_none(),
        "{host:?}'s client failed: {}\nstderr: {stderr}",
        seen["error"]
    );
    seen
}

/// Like [`client`], but what failed is the result.
async fn client_raw(host: Host, spec: Value) -> Value {
    run_client(host, spec).await.0
}

/// A host's client run to its end: what it printed (its last line, JSON) and its stderr.
async fn run_client(host: Host, mut spec: Value) -> (Value, String) {
    let mut cmd = match host {
        Host::PyAuto | Host::PyLegacy => {
            spec["mode"] = json!(if host == Host::PyAuto {
                "auto"
            } else {
                "legacy"
            });
            let mut cmd = tokio::process::Command::new("python3");
            cmd.arg(hosts_dir().join("client.py"));
            cmd
        }
        Host::Ts => {
            let mut cmd = tokio::process::Command::new("node");
            cmd.arg(hosts_dir().join("client.mjs"));
            cmd
        }
    };
    cmd.arg(spec.to_string())
        .current_dir(hosts_dir())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(CLIENT_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{host:?}'s client did not finish in {CLIENT_TIMEOUT:?}"))
        .unwrap_or_else(|e| {
            panic!("cannot start {host:?}'s client (scripts/test installs it): {e}")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = stdout.lines().last().unwrap_or_default();
    let seen: Value = serde_json::from_str(line).unwrap_or_else(|e| {
        panic!("{host:?}'s client printed no JSON ({e}): {stdout}\nstderr: {stderr}")
    });
    (seen, stderr)
}

pub fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Ends the sessions a 2026-07-28 host was given over HTTP: it has no MCP session to end
/// them with (they would live on until PTC_SESSION_IDLE_TTL, for the host to pass back).
pub async fn end_sessions(door: &Door, host: Host, wire: Wire, seen: &Value) {
    fn ids(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(id) = map.get("session").and_then(|s| s["id"].as_str()) {
                    out.push(id.to_string());
                }
                map.values().for_each(|v| ids(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| ids(v, out)),
            _ => {}
        }
    }
    if (host, wire) != (Host::PyAuto, Wire::Http) {
        return;
    }
    let mut sessions = Vec::new();
    ids(seen, &mut sessions);
    sessions.sort();
    sessions.dedup();
    for id in sessions {
        let r = door
            .sidecar
            .http
            .delete(door.sidecar.url(&format!("/v1/sessions/{id}")))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success() || r.status() == 404,
            "{}",
            r.status()
        );
    }
}

async fn tour(host: Host, wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        let mut spec = door.spec(wire, "tour");
        spec["host_tool"] = json!("double");
        let trace = format!("{:032x}", u128::from(std::process::id()) << 64 | 0xfeed);
        spec["traceparent"] = json!(format!("00-{trace}-00f067aa0ba902b7-01"));
        let seen = client(host, spec).await;

        // Listing: exec_code alone, with the description GET /v1/tools gives.
        let tools = seen["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1, "{tools:?}");
        assert_eq!(tools[0]["name"], "exec_code");
        assert_eq!(
            tools[0]["description"].as_str().unwrap(),
            door.exec_code_description().await
        );
        let schema = &tools[0]["inputSchema"];
        assert_eq!(schema["required"], json!(["code"]), "{schema}");
        for key in ["code", "lang", "timeout", "session_id"] {
            assert!(schema["properties"].get(key).is_some(), "{key}: {schema}");
        }
        assert_eq!(
            schema["properties"]["lang"]["enum"],
            json!(["python", "bash", "javascript", "typescript"])
        );
        if host == Host::PyAuto {
            assert_eq!(seen["protocol"], "2026-07-28");
            assert!(
                seen["state_session"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("mcp-"))
            );
        } else if seen["protocol"].is_string() {
            assert!(
                seen["protocol"].as_str().unwrap().starts_with("2025-"),
                "{seen}"
            );
        }

        // A gathered run of 20 MCP calls and a callback host tool.
        assert_eq!(text(&seen["gather"]), "210 42", "{}", seen["gather"]);
        assert_eq!(seen["gather"]["isError"], false);
        assert_eq!(
            seen["gather"]["structured"]["tool_calls"]
                .as_array()
                .unwrap()
                .len(),
            21
        );
        assert!(door.host.calls.load(std::sync::atomic::Ordering::Relaxed) >= 1);

        // _meta.traceparent: the run is a span of the host's trace (its callback calls say so).
        assert_eq!(text(&seen["traced"]), "4", "{}", seen["traced"]);
        let traced = door.host.traceparents.lock().unwrap().clone();
        assert!(
            traced
                .iter()
                .flatten()
                .any(|tp| tp.starts_with(&format!("00-{trace}-"))),
            "no callback call in trace {trace}: {traced:?}"
        );

        // A failing run: isError, what it printed, the traceback and the status.
        let failing = &seen["failing"];
        assert_eq!(failing["isError"], true, "{failing}");
        let t = text(failing);
        assert!(t.starts_with("before\nstderr:\n"), "{t}");
        assert!(t.contains("ValueError: boom-marker"), "{t}");
        assert!(t.ends_with("status: error (exit code 1)"), "{t}");
        assert_eq!(failing["structured"]["status"], "error");

        // State across calls (the MCP session's live session, or the id passed back).
        assert_eq!(text(&seen["state"]), "42", "{}", seen["state"]);

        // Progress before the end: the first line came while the run slept 1.5 s.
        let progress = &seen["progress"];
        let first = &progress["seen"][0];
        assert!(
            first["message"].as_str().unwrap().starts_with("first"),
            "{progress}"
        );
        let ended = progress["ended_at"].as_f64().unwrap();
        assert!(first["at"].as_f64().unwrap() < ended - 1.0, "{progress}");
        assert_eq!(text(&progress["result"]), "first\nlast");

        // Images as image content, every file a link the host reads back.
        let files = seen["files"]["content"].as_array().unwrap();
        let image = files
            .iter()
            .find(|b| b["type"] == "image")
            .expect("an image block");
        assert_eq!(image["mimeType"], "image/png");
        assert_eq!(image["data_len"], PNG.len());
        let links: Vec<&str> = files
            .iter()
            .filter(|b| b["type"] == "resource_link")
            .map(|b| b["name"].as_str().unwrap())
            .collect();
        assert_eq!(links, ["dot.png", "notes.txt"], "{files:?}");
        assert!(
            files.iter().all(|b| b["type"] != "resource_link"
                || b["uri"].as_str().unwrap().starts_with("ptc://"))
        );
        assert_eq!(
            seen["reads"]["notes.txt"][0]["text"], "hello from the run",
            "{}",
            seen["reads"]
        );
        assert_eq!(
            seen["reads"]["dot.png"][0]["blob"], PNG,
            "{}",
            seen["reads"]
        );

        // Bad arguments: an error that says what to fix.
        let bad = &seen["bad"];
        for (case, says) in [
            ("not_a_string", "code must be a string"),
            ("missing_code", "code is missing"),
            ("unknown_key", "\"cod\" is not one of its arguments"),
        ] {
            let error = bad[case]["error"]
                .as_str()
                .unwrap_or_else(|| panic!("{case}: {bad}"));
            assert!(
                error.contains("exec_code takes {\"code\": str"),
                "{case}: {error}"
            );
            assert!(error.contains(says), "{case}: {error}");
        }

        // A megabyte printed and a forged message written to fd 1: the stream held (the
        // client went on), the output came back cut to PTC_MAX_OUTPUT_BYTES.
        assert_eq!(seen["noisy"]["isError"], false, "{}", seen["noisy"]);
        assert!(
            seen["noisy"]["x_count"].as_u64().unwrap() > 60_000,
            "{}",
            seen["noisy"]
        );
        assert_eq!(text(&seen["after_noise"]), "still here");

        end_sessions(&door, host, wire, &seen).await;
        door.assert_nothing_left().await;
    })
    .await
    .unwrap();
}

async fn cancel(host: Host, wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        let mut events = door.sidecar.sidecar.state.events.subscribe();
        let mut spec = door.spec(wire, "cancel");
        let marker = format!("987.{}", crate::procs::marker());
        spec["marker"] = json!(marker);
        let seen = client(host, spec).await;
        assert_eq!(seen["started"], true, "{seen}");
        assert_eq!(seen["before"], 1, "the run's process was there: {seen}");
        assert_eq!(seen["after"], 0, "the run's process is gone: {seen}");
        assert_eq!(seen["ended_by_itself"], false, "{seen}");
        assert!(seen["gone_in"].as_f64().unwrap() < 2.0, "{seen}");
        // The session goes on, its state reset (the interpreter went with the run).
        assert_eq!(
            text(&seen["next"]).lines().next(),
            Some("next run"),
            "{seen}"
        );
        // (A 2026-07-28 host over HTTP has no MCP session: its next call is in a new one.)
        if !(host == Host::PyAuto && wire == Wire::Http) {
            assert_eq!(
                seen["next"]["structured"]["session"]["reason"], "cancelled",
                "{seen}"
            );
        }
        assert!(processes_with(&format!("{marker}9")).is_empty());

        if wire == Wire::Http {
            // The cancelled run's end is in events: status error, with what it printed.
            let finished = loop {
                let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
                if e["type"] == "exec.finished" {
                    break e;
                }
            };
            assert_eq!(finished["status"], "error", "{finished}");
            assert_eq!(finished["stdout_bytes"], "started\n".len(), "{finished}");
            assert!(
                finished["session_id"].as_str().unwrap().starts_with("mcp-"),
                "{finished}"
            );
        }
        end_sessions(&door, host, wire, &seen).await;
        door.assert_nothing_left().await;
    })
    .await
    .unwrap();
}

async fn reload(host: Host, wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        let mut spec = door.spec(wire, "reload");
        spec["manifest"] = json!(door.manifest);
        let seen = client(host, spec).await;
        assert_eq!(seen["notified"], true, "no tools/list_changed: {seen}");
        assert!(!seen["before"].as_str().unwrap().contains("freshly_added"));
        assert!(
            seen["after"].as_str().unwrap().contains("freshly_added()"),
            "{seen}"
        );
        // The in-process sidecar reads the same manifest: once it has reloaded too, the
        // descriptions are the same.
        let after = seen["after"].as_str().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while door.exec_code_description().await != after {
            assert!(std::time::Instant::now() < deadline, "{after}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        door.assert_nothing_left().await;
    })
    .await
    .unwrap();
}

macro_rules! every_host {
    ($scenario:ident) => {
        mod $scenario {
            use super::{Host, Wire};
            #[tokio::test]
            async fn py_auto_stdio() {
                super::$scenario(Host::PyAuto, Wire::Stdio).await
            }
            #[tokio::test]
            async fn py_auto_http() {
                super::$scenario(Host::PyAuto, Wire::Http).await
            }
            #[tokio::test]
            async fn py_legacy_stdio() {
                super::$scenario(Host::PyLegacy, Wire::Stdio).await
            }
            #[tokio::test]
            async fn py_legacy_http() {
                super::$scenario(Host::PyLegacy, Wire::Http).await
            }
            #[tokio::test]
            async fn ts_stdio() {
                super::$scenario(Host::Ts, Wire::Stdio).await
            }
            #[tokio::test]
            async fn ts_http() {
                super::$scenario(Host::Ts, Wire::Http).await
            }
        }
    };
}

/// Two calls that need a person in one run: a host that can ask its user (the Python SDK:
/// elicitation on a handshake revision, an input-required result on 2026-07-28, whose retry
/// carries the answers) gets both questions, and its user's yes and no decide them; a host that
/// cannot (the TypeScript client declares no elicitation) is asked nothing, and each call is
/// denied saying why.
async fn approve(host: Host, wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        let seen = client(host, door.spec(wire, "approve")).await;
        let said = text(&seen["run"]);
        let asked = seen["asked"].as_array().unwrap();
        match host {
            Host::PyAuto | Host::PyLegacy => {
                assert_eq!(asked.len(), 2, "{seen}");
                assert!(asked[0].as_str().unwrap().contains("wants to call demo__toggle_extra with {}"), "{seen}");
                assert!(
                    said.starts_with("extra_echo added\ndenied: demo__toggle_extra: a person denied this call: not now"),
                    "{seen}"
                );
            }
            Host::Ts => {
                assert!(asked.is_empty(), "{seen}");
                let denied = said
                    .lines()
                    .filter(|l| l.starts_with("denied: demo__toggle_extra: not approved: this MCP host cannot ask its user"))
                    .count();
                assert_eq!(denied, 2, "{seen}");
            }
        }
        assert!(door.sidecar.sidecar.state.runner.as_ref().unwrap().approvals().list().is_empty());
        end_sessions(&door, host, wire, &seen).await;
        door.assert_nothing_left().await;
    })
    .await
    .unwrap();
}

/// `every_host!(scenario)` in another module: its tests of one scenario, for every host.
pub(crate) use every_host;

every_host!(tour);
every_host!(approve);
every_host!(cancel);
every_host!(reload);

/// `/mcp` takes the control API's key (Bearer or X-API-Key) and refuses a non-loopback
/// `Origin`: through the SDKs (their connect fails) and on the wire (what the refusal says).
#[tokio::test]
async fn the_key_and_the_origin_are_checked() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        for (headers, refused) in [
            (json!({"Authorization": format!("Bearer {KEY}")}), None),
            (json!({"X-API-Key": KEY}), None),
            (
                json!({"Authorization": "Bearer wrong"}),
                Some("unauthorized"),
            ),
            (json!({}), Some("unauthorized")),
            (
                json!({"X-API-Key": KEY, "Origin": "https://evil.example"}),
                Some("is not a local one"),
            ),
        ] {
            for host in [Host::PyLegacy, Host::Ts] {
                let mut spec = door.spec(Wire::Http, "list");
                spec["headers"] = headers.clone();
                let seen = client_raw(host, spec).await;
                match refused {
                    None => assert_eq!(
                        seen["tools"],
                        json!(["exec_code"]),
                        "{host:?} {headers}: {seen}"
                    ),
                    Some(says) => {
                        let error = seen["error"]
                            .as_str()
                            .unwrap_or_else(|| panic!("{host:?} {headers} was let in: {seen}"));
                        // The Python SDK says only "Server returned an error response"; the
                        // TypeScript one passes the refusal on; the wire checks below show all.
                        if host == Host::Ts {
                            assert!(error.contains(says), "{host:?} {headers}: {error}");
                        }
                    }
                }
            }
        }
        // What the refusals say.
        let post = |origin: Option<&str>, key: Option<&str>| {
            let mut r = door
                .sidecar
                .http
                .post(door.sidecar.url("/mcp"))
                .header("accept", "application/json, text/event-stream")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
            if let Some(origin) = origin {
                r = r.header("origin", origin);
            }
            if let Some(key) = key {
                r = r.header("x-api-key", key);
            }
            r.send()
        };
        let r = post(Some("http://localhost:3000"), None).await.unwrap();
        assert_eq!(r.status(), 401);
        let r = post(Some("https://evil.example"), Some(KEY)).await.unwrap();
        assert_eq!(r.status(), 403);
        let body: Value = r.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"https://evil.example\" is not a local one"),
            "{message}"
        );
        // A loopback origin is let through to the MCP server.
        let r = post(Some("http://127.0.0.1:5173"), Some(KEY))
            .await
            .unwrap();
        assert_ne!(r.status(), 403);
        assert_ne!(r.status(), 401);
    })
    .await
    .unwrap();
}

/// `ptc-sidecar mcp`'s stdout, byte by byte, carries JSON-RPC and nothing else: a run that
/// prints a megabyte and writes a forged message to fd 1 directly does not reach it.
#[tokio::test]
async fn stdout_carries_the_protocol_and_nothing_else() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        let runtime = door.stdio_runtime();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
            .arg("mcp")
            .envs(Door::vars_of(&door.manifest, &door.mcp_config))
            .env("PTC_RUNTIME_DIR", &runtime)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let forged = unique("forged");
        let code = format!(
            "import os, sys\nprint('x' * 1_000_000)\nsys.stdout.flush()\n\
             os.write(1, b'\\n{{\"jsonrpc\":\"2.0\",\"method\":\"{forged}\"}}\\n')\nprint('done')\n"
        );
        let messages = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "exec_code", "arguments": {"code": code}}}),
        ];
        for m in &messages {
            stdin.write_all(format!("{m}\n").as_bytes()).await.unwrap();
        }
        let mut answered = None;
        let mut seen = 0;
        while answered.is_none() {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("stdout ended early");
            seen += 1;
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("a stray line on stdout ({e}): {:.200}", line));
            assert_eq!(message["jsonrpc"], "2.0", "{:.200}", line);
            assert_ne!(message["method"], forged.as_str());
            if message["id"] == 2 {
                answered = Some(message);
            }
        }
        let result = answered.unwrap();
        let stdout = result["result"]["structuredContent"]["stdout"]
            .as_str()
            .unwrap();
        assert!(stdout.starts_with("xxxx"), "{:.200}", stdout);
        assert!(
            result["result"]["structuredContent"]["truncated"] == true || stdout.contains("done")
        );
        assert_eq!(seen, 2, "one answer to initialize, one to the call");
        drop(stdin);
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("the stdio server ends with its stdin")
            .unwrap();
        assert!(status.success(), "{status}");
        door.assert_nothing_left().await;
    })
    .await
    .unwrap();
}
