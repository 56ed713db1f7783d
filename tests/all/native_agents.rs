//! The native PTC examples (`examples/anthropic_native_agent.py`,
//! `examples/openai_native_agent.py`) end to end: each runs as a subprocess with its real SDK,
//! against the real sidecar (in-process on port 0, `examples/native-tools.json` with its host
//! tools served by `examples/native_host_tools.py`, the demo MCP server) and a scripted model
//! that speaks the provider's native wire: Anthropic's code execution (`server_tool_use`,
//! `tool_use` blocks whose `caller` names the code, `container`, `code_execution_tool_result`)
//! or OpenAI's programmatic tool calling in the Responses API (`program` with its
//! `fingerprint`, `function_call`s whose `caller` names the program, `program_output`). The
//! scripted model plays the provider's container too: its "code" calls the tools the script
//! says, and reads their results. A script's last turn puts what the code read into
//! `complete`, so the final line proves the data went provider → runtime → sidecar → tools →
//! runtime → provider. Scenarios, for each example (`native_agents::<scenario>::<example>`):
//! an MCP tool and a host tool gathered, a bad argument the code then corrects, a call a person
//! denies.

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, serve};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

/// One example's run, start to final line, is bounded by this (inside [`TEST_TIMEOUT`]).
const EXAMPLE_TIMEOUT: Duration = Duration::from_secs(45);
/// The key the examples' SDKs send the scripted model (a dummy: no real key is used).
const MODEL_KEY: &str = "test-model-key";
const SIDECAR_KEY: &str = "native-agents-key";
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");
/// The id of the scripted provider's one code run, on each wire.
const ANTHROPIC_CODE_ID: &str = "srvtoolu_1";
const OPENAI_PROGRAM_ID: &str = "call_prog_1";
const CONTAINER: &str = "container_1";
const FINGERPRINT: &str = "fp_opaque_1";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    fn script(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic_native_agent.py",
            Wire::OpenAi => "openai_native_agent.py",
        }
    }

    /// The caller the code's calls carry, as the sidecar's events name it.
    fn caller(self) -> (&'static str, &'static str) {
        match self {
            Wire::Anthropic => ("code_execution_20260120", ANTHROPIC_CODE_ID),
            Wire::OpenAi => ("program", OPENAI_PROGRAM_ID),
        }
    }
}

/// One result of the code's calls the runtime sent back.
#[derive(Clone, Debug)]
struct Answered {
    text: String,
    /// Anthropic's `is_error`; the Responses API has no such flag (`None`).
    is_error: Option<bool>,
}

/// What the model was sent in one request.
#[derive(Clone, Debug)]
struct Seen {
    tools: Vec<Value>,
    results: Vec<Answered>,
}

impl Seen {
    fn ok(&self, i: usize) -> Result<Value, String> {
        match self.results.get(i) {
            Some(r) if r.is_error != Some(true) => serde_json::from_str(&r.text)
                .map_err(|e| format!("result {i} is not JSON ({e}): {:?}", r.text)),
            other => Err(format!("expected a successful result {i}: {other:?}")),
        }
    }

    fn error(&self, i: usize, starts: &str) -> Result<String, String> {
        match self.results.get(i) {
            Some(r) if r.is_error != Some(false) && r.text.starts_with(starts) => {
                Ok(r.text.clone())
            }
            other => Err(format!(
                "expected an error result {i} saying {starts:?}: {other:?}"
            )),
        }
    }
}

/// The model's turn: the code calls tools (the first time its run starts), or the code ends
/// printing `stdout` and the model calls `complete` with it.
enum Reply {
    Calls(Vec<(&'static str, Value)>),
    Complete(String),
}

type Step = Box<dyn FnOnce(&Seen) -> Result<Reply, String> + Send>;

fn step(f: impl FnOnce(&Seen) -> Result<Reply, String> + Send + 'static) -> Step {
    Box::new(f)
}

#[derive(Default)]
struct Script {
    steps: VecDeque<Step>,
    /// The ids of the calls of the last answer: the next request must answer exactly them.
    open_ids: Vec<String>,
    /// Whether the code's run started (the program item or the container exists).
    started: bool,
    turns: usize,
    failures: Vec<String>,
}

type ModelState = (Wire, Arc<Mutex<Script>>);

struct ScriptedModel {
    url: String,
    script: Arc<Mutex<Script>>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl ScriptedModel {
    async fn start(wire: Wire, steps: Vec<Step>) -> ScriptedModel {
        let script = Arc::new(Mutex::new(Script {
            steps: steps.into(),
            ..Script::default()
        }));
        let path = match wire {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi => "/v1/responses",
        };
        let router = Router::new().route(path, post(turn).with_state((wire, script.clone())));
        let (addr, shutdown) = serve(router).await;
        ScriptedModel {
            url: format!("http://{addr}"),
            script,
            shutdown,
        }
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn turn(
    State((wire, script)): State<ModelState>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut script = script.lock().unwrap();
    match answer(wire, &headers, &body, &mut script) {
        Ok(reply) => Json(reply).into_response(),
        Err(message) => {
            script.failures.push(message.clone());
            let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            (StatusCode::BAD_REQUEST, Json(error)).into_response()
        }
    }
}

/// Reads and checks one request, runs the script's next step, and makes the provider's reply.
fn answer(
    wire: Wire,
    headers: &HeaderMap,
    body: &Value,
    script: &mut Script,
) -> Result<Value, String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = format!("Bearer {MODEL_KEY}");
    if header("x-api-key") != Some(MODEL_KEY) && header("authorization") != Some(&bearer) {
        return Err(format!("the dummy key did not arrive: {headers:?}"));
    }
    script.turns += 1;
    let n = script.turns;
    let tools = body["tools"].as_array().ok_or("no tools")?.clone();
    let (answered, results) = match wire {
        Wire::Anthropic => read_anthropic(body, script.started)?,
        Wire::OpenAi => read_openai(body, script.started)?,
    };
    if answered != script.open_ids {
        return Err(format!(
            "turn {n}: the results answer {answered:?}, the open calls were {:?}",
            script.open_ids
        ));
    }
    let step = script
        .steps
        .pop_front()
        .ok_or(format!("the script has no turn {n}"))?;
    let reply = step(&Seen { tools, results })?;
    let (output, open) = match wire {
        Wire::Anthropic => anthropic_reply(n, &reply),
        Wire::OpenAi => openai_reply(n, &reply),
    };
    script.started = matches!(reply, Reply::Calls(_));
    script.open_ids = open;
    let model = &body["model"];
    Ok(match wire {
        Wire::Anthropic => {
            let stop = "tool_use";
            let mut reply = json!({
                "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
                "content": output, "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": 100, "output_tokens": 20}
            });
            if script.started {
                reply["container"] = json!({"id": CONTAINER, "expires_at": "2026-12-01T00:00:00Z"});
            }
            reply
        }
        Wire::OpenAi => json!({
            "id": format!("resp_{n}"), "object": "response", "created_at": 1_764_000_000,
            "model": model, "status": "completed", "output": output, "error": null,
            "incomplete_details": null, "instructions": null, "metadata": {},
            "parallel_tool_calls": true, "temperature": 1.0, "top_p": 1.0,
            "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}
        }),
    })
}

/// The tool results of an Anthropic request: the last user message's `tool_result` blocks,
/// each a string (a programmatic call's result must be text), and the container named while
/// the code's run is open.
fn read_anthropic(body: &Value, started: bool) -> Result<(Vec<String>, Vec<Answered>), String> {
    if started && body["container"] != CONTAINER {
        return Err(format!(
            "the container was not passed back: {}",
            body["container"]
        ));
    }
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .ok_or("no messages")?;
    let mut ids = Vec::new();
    let mut results = Vec::new();
    for block in last["content"].as_array().into_iter().flatten() {
        if block["type"] != "tool_result" {
            if started {
                return Err(format!("a continuation holds only tool results: {block}"));
            }
            continue;
        }
        let text = block["content"].as_str().ok_or(format!(
            "a programmatic call's result must be text: {block}"
        ))?;
        ids.push(
            block["tool_use_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        results.push(Answered {
            text: text.to_string(),
            is_error: Some(block["is_error"].as_bool().unwrap_or(false)),
        });
    }
    Ok((ids, results))
}

/// The tool results of a Responses request: the trailing `function_call_output` items, each
/// naming the program as its `caller`; while the program is open, its item must be replayed
/// with its fingerprint (`store: false`).
fn read_openai(body: &Value, started: bool) -> Result<(Vec<String>, Vec<Answered>), String> {
    if body["store"] != false {
        return Err(format!("expected store: false, got {}", body["store"]));
    }
    let input = body["input"].as_array().ok_or("no input list")?;
    if started {
        let replayed = input.iter().any(|i| {
            i["type"] == "program"
                && i["call_id"] == OPENAI_PROGRAM_ID
                && i["fingerprint"] == FINGERPRINT
                && i["code"].is_string()
        });
        if !replayed {
            return Err(format!("the program item was not round-tripped: {input:?}"));
        }
    }
    let trailing: Vec<&Value> = input
        .iter()
        .rev()
        .take_while(|i| i["type"] == "function_call_output")
        .collect();
    let mut ids = Vec::new();
    let mut results = Vec::new();
    for item in trailing.into_iter().rev() {
        let caller = json!({"type": "program", "caller_id": OPENAI_PROGRAM_ID});
        if item["caller"] != caller {
            return Err(format!("an output must name its program as caller: {item}"));
        }
        ids.push(item["call_id"].as_str().unwrap_or_default().to_string());
        results.push(Answered {
            text: item["output"].as_str().unwrap_or_default().to_string(),
            is_error: None,
        });
    }
    Ok((ids, results))
}

const CODE: &str = "# the scripted provider's code\nresults = await asyncio.gather(...)";

fn anthropic_reply(n: usize, reply: &Reply) -> (Value, Vec<String>) {
    let code_caller = json!({"type": "code_execution_20260120", "tool_id": ANTHROPIC_CODE_ID});
    match reply {
        Reply::Calls(calls) => {
            let mut content = Vec::new();
            if n == 1 {
                content.push(json!({"type": "server_tool_use", "id": ANTHROPIC_CODE_ID,
                                    "name": "code_execution", "input": {"code": CODE}}));
            }
            let mut ids = Vec::new();
            for (i, (name, input)) in calls.iter().enumerate() {
                let id = format!("toolu_{n}_{i}");
                content.push(json!({"type": "tool_use", "id": id, "name": name,
                                    "input": input, "caller": code_caller}));
                ids.push(id);
            }
            (Value::Array(content), ids)
        }
        Reply::Complete(stdout) => (
            json!([
                {"type": "code_execution_tool_result", "tool_use_id": ANTHROPIC_CODE_ID,
                 "content": {"type": "code_execution_result", "stdout": stdout, "stderr": "",
                             "return_code": 0, "content": []}},
                {"type": "tool_use", "id": format!("toolu_{n}"), "name": "complete",
                 "input": {"answer": stdout}, "caller": {"type": "direct"}}
            ]),
            Vec::new(),
        ),
    }
}

fn openai_reply(n: usize, reply: &Reply) -> (Value, Vec<String>) {
    match reply {
        Reply::Calls(calls) => {
            let mut output = Vec::new();
            if n == 1 {
                output.push(
                    json!({"type": "program", "id": "prog_1", "call_id": OPENAI_PROGRAM_ID,
                                   "code": CODE, "fingerprint": FINGERPRINT}),
                );
            }
            let mut ids = Vec::new();
            for (i, (name, input)) in calls.iter().enumerate() {
                let id = format!("call_{n}_{i}");
                output.push(json!({"type": "function_call", "id": format!("fc_{n}_{i}"),
                                   "call_id": id, "name": name, "arguments": input.to_string(),
                                   "status": "completed",
                                   "caller": {"type": "program", "caller_id": OPENAI_PROGRAM_ID}}));
                ids.push(id);
            }
            (Value::Array(output), ids)
        }
        Reply::Complete(stdout) => (
            json!([
                {"type": "program_output", "id": "po_1", "call_id": OPENAI_PROGRAM_ID,
                 "result": stdout, "status": "completed"},
                {"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
                 "name": "complete", "arguments": json!({"answer": stdout}).to_string(),
                 "status": "completed", "caller": {"type": "direct"}}
            ]),
            Vec::new(),
        ),
    }
}

/// `examples/native_host_tools.py` on a free port, and its callback URL.
async fn host_tools() -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new("python3")
        .arg(root().join("examples/native_host_tools.py"))
        .arg("0")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("native_host_tools.py says where it listens")
        .unwrap()
        .unwrap();
    let url = line.strip_prefix("listening on ").unwrap().to_string();
    (child, url)
}

/// The example's manifest with `url` as its callback, the demo MCP server, the key, `extra`.
async fn sidecar(dir: &TempDir, url: &str, extra: &[(&str, &str)]) -> TestSidecar {
    let text = std::fs::read_to_string(root().join("examples/native-tools.json")).unwrap();
    let mut manifest: Value = serde_json::from_str(&text).unwrap();
    manifest["callback"]["url"] = json!(url);
    let tools = dir.write("native-tools.json", &manifest.to_string());
    let mcp = json!({"mcpServers": {"demo": {"command": DEMO, "args": []}}});
    let mcp = dir.write("mcp.json", &mcp.to_string());
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", tools.to_str().unwrap()),
        ("PTC_MCP_CONFIG", mcp.to_str().unwrap()),
        ("PTC_API_KEY", SIDECAR_KEY),
    ];
    vars.extend_from_slice(extra);
    TestSidecar::start(&vars).await
}

struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

/// Runs the example of `wire` on `task` to its end and checks that the script found nothing
/// wrong and played all its `turns`.
async fn run(
    wire: Wire,
    task: &str,
    model: &ScriptedModel,
    s: &TestSidecar,
    turns: usize,
) -> Finished {
    let mut c = tokio::process::Command::new("python3");
    c.arg(root().join("examples").join(wire.script()))
        .arg(task)
        .env("PTC_URL", s.url(""))
        .env("PTC_API_KEY", SIDECAR_KEY)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .kill_on_drop(true);
    for var in ["ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL", "OPENAI_MODEL"] {
        c.env_remove(var);
    }
    match wire {
        Wire::Anthropic => c
            .env("ANTHROPIC_BASE_URL", &model.url)
            .env("ANTHROPIC_API_KEY", MODEL_KEY),
        Wire::OpenAi => c
            .env("OPENAI_BASE_URL", format!("{}/v1", model.url))
            .env("OPENAI_API_KEY", MODEL_KEY),
    };
    let output = tokio::time::timeout(EXAMPLE_TIMEOUT, c.output())
        .await
        .unwrap_or_else(|_| panic!("{wire:?} did not finish in {EXAMPLE_TIMEOUT:?}"))
        .unwrap();
    let done = Finished {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    let context = format!(
        "{wire:?}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        done.code, done.stdout, done.stderr
    );
    let script = model.script.lock().unwrap();
    assert_eq!(script.failures, Vec::<String>::new(), "{context}");
    assert_eq!(script.turns, turns, "turns played: {context}");
    assert_eq!(done.code, Some(0), "{context}");
    drop(script);
    done
}

/// The `tool_call.finished` events of `events` so far.
fn finished_calls(events: &mut tokio::sync::broadcast::Receiver<Arc<str>>) -> Vec<Value> {
    let mut found = Vec::new();
    while let Ok(e) = events.try_recv() {
        let e: Value = serde_json::from_str(&e).unwrap();
        if e["type"] == "tool_call.finished" {
            found.push(e);
        }
    }
    found
}

/// The first turn's checks: the provider's code tool and the tools its code may call, no
/// `exec_code`.
fn offers_native_tools(wire: Wire, seen: &Seen) -> Result<(), String> {
    let code_tool = match wire {
        Wire::Anthropic => json!({"type": "code_execution_20260120", "name": "code_execution"}),
        Wire::OpenAi => json!({"type": "programmatic_tool_calling"}),
    };
    let callers = match wire {
        Wire::Anthropic => json!(["code_execution_20260120"]),
        Wire::OpenAi => json!(["programmatic"]),
    };
    let named = |n: &str| seen.tools.iter().find(|t| t["name"] == n);
    let ok = seen.tools.contains(&code_tool)
        && named("exec_code").is_none()
        && named("complete").is_some_and(|t| t.get("allowed_callers").is_none())
        && ["get_weather", "demo__lookup_country"]
            .iter()
            .all(|n| named(n).is_some_and(|t| t["allowed_callers"] == callers));
    match ok {
        true => Ok(()),
        false => Err(format!("not the native tools: {:?}", seen.tools)),
    }
}

/// The code gathers an MCP tool and a host tool, then prints a line made of both results.
async fn mcp_and_host_tools(wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("native-agents");
        let (_host, url) = host_tools().await;
        let s = sidecar(&dir, &url, &[]).await;
        let mut events = s.sidecar.state.events.subscribe();
        let model = ScriptedModel::start(
            wire,
            vec![
                step(move |seen| {
                    offers_native_tools(wire, seen)?;
                    Ok(Reply::Calls(vec![
                        ("demo__lookup_country", json!({"code": "FR"})),
                        ("get_weather", json!({"city": "Paris"})),
                    ]))
                }),
                step(|seen| {
                    let (country, weather) = (seen.ok(0)?, seen.ok(1)?);
                    Ok(Reply::Complete(format!(
                        "{} of {} is {} C and {}",
                        country["capital"].as_str().unwrap_or("?"),
                        country["name"].as_str().unwrap_or("?"),
                        weather["temp_c"],
                        weather["sky"].as_str().unwrap_or("?")
                    )))
                }),
            ],
        )
        .await;
        let done = run(wire, "The weather in France's capital?", &model, &s, 2).await;
        assert_eq!(done.last_line(), "Paris of France is 21 C and sunny");

        let calls = finished_calls(&mut events);
        assert_eq!(calls.len(), 2, "{calls:#?}");
        let (caller, caller_id) = wire.caller();
        for e in &calls {
            assert_eq!(e["ok"], true, "{e}");
            assert_eq!(e["caller"], caller, "{e}");
            assert_eq!(e["caller_id"], caller_id, "{e}");
            assert_eq!(
                e["exec_id"], calls[0]["exec_id"],
                "one program, one run: {e}"
            );
        }
        let mut sources: Vec<&str> = calls
            .iter()
            .map(|e| e["source"].as_str().unwrap())
            .collect();
        sources.sort();
        assert_eq!(sources, ["host", "mcp"]);
        let metrics = s.metrics(Some(SIDECAR_KEY)).await;
        for line in [
            "ptc_tool_calls_total{tool=\"demo__lookup_country\",backend=\"mcp\",outcome=\"ok\"} 1",
            "ptc_tool_calls_total{tool=\"get_weather\",backend=\"host\",outcome=\"ok\"} 1",
        ] {
            assert!(metrics.contains(line), "{line} not in:\n{metrics}");
        }
    })
    .await
    .unwrap();
}

/// A bad argument comes back to the code as the run's `input` error, and the code's corrected
/// call goes through.
async fn bad_argument(wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("native-agents");
        let (_host, url) = host_tools().await;
        let s = sidecar(&dir, &url, &[]).await;
        let mut events = s.sidecar.state.events.subscribe();
        let model = ScriptedModel::start(
            wire,
            vec![
                step(|_| Ok(Reply::Calls(vec![("get_weather", json!({"town": "Oslo"}))]))),
                step(|seen| {
                    let said = seen.error(0, "input: get_weather(): ")?;
                    if !said.contains("\"city\" is a required property") {
                        return Err(format!("not the schema's message: {said}"));
                    }
                    Ok(Reply::Calls(vec![("get_weather", json!({"city": "Oslo"}))]))
                }),
                step(|seen| {
                    let w = seen.ok(0)?;
                    Ok(Reply::Complete(format!(
                        "{} after a retry",
                        w["sky"].as_str().unwrap_or("?")
                    )))
                }),
            ],
        )
        .await;
        let done = run(wire, "Oslo?", &model, &s, 3).await;
        assert_eq!(done.last_line(), "rain after a retry");
        let calls = finished_calls(&mut events);
        let kinds: Vec<&str> = calls
            .iter()
            .map(|e| e["error"]["type"].as_str().unwrap_or("ok"))
            .collect();
        assert_eq!(kinds, ["input", "ok"], "{calls:#?}");
        assert_eq!(calls[0]["exec_id"], calls[1]["exec_id"]);
        let metrics = s.metrics(Some(SIDECAR_KEY)).await;
        for line in [
            "ptc_tool_calls_total{tool=\"get_weather\",backend=\"none\",outcome=\"input\"} 1",
            "ptc_tool_calls_total{tool=\"get_weather\",backend=\"host\",outcome=\"ok\"} 1",
        ] {
            assert!(metrics.contains(line), "{line} not in:\n{metrics}");
        }
    })
    .await
    .unwrap();
}

/// A call that needs a person (`PTC_APPROVE_TOOLS`) waits while the runtime's request is open;
/// the person denies it and the code reads why.
async fn denied_approval(wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("native-agents");
        let (_host, url) = host_tools().await;
        let s = sidecar(&dir, &url, &[("PTC_APPROVE_TOOLS", "list_orders")]).await;
        let model = ScriptedModel::start(
            wire,
            vec![
                step(|_| Ok(Reply::Calls(vec![("list_orders", json!({"customer": "ada"}))]))),
                step(|seen| Ok(Reply::Complete(seen.error(0, "denied: ")?))),
            ],
        )
        .await;
        // The person: waits for the approval and denies it.
        let (http, base) = (s.http.clone(), s.url(""));
        let person = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let listed: Value = http
                    .get(format!("{base}/v1/approvals"))
                    .header("x-api-key", SIDECAR_KEY)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if let Some(a) = listed["approvals"].as_array().and_then(|a| a.first()) {
                    let id = a["id"].as_str().unwrap().to_string();
                    let r = http
                        .post(format!("{base}/v1/approvals/{id}"))
                        .header("x-api-key", SIDECAR_KEY)
                        .json(&json!({"approved": false, "reason": "orders are private", "by": "test"}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                    return a.clone();
                }
                assert!(Instant::now() < deadline, "no approval waited");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let done = run(wire, "ada's orders?", &model, &s, 2).await;
        let approval = person.await.unwrap();
        assert_eq!(approval["tool"], "list_orders", "{approval}");
        let last = done.last_line();
        assert!(last.starts_with("denied: "), "{last}");
        assert!(last.contains("orders are private"), "{last}");
    })
    .await
    .unwrap();
}

macro_rules! for_each_wire {
    ($($scenario:ident),*) => {$(
        mod $scenario {
            use super::Wire;

            #[tokio::test]
            async fn anthropic() {
                super::$scenario(Wire::Anthropic).await
            }

            #[tokio::test]
            async fn openai() {
                super::$scenario(Wire::OpenAi).await
            }
        }
    )*};
}

for_each_wire!(mcp_and_host_tools, bad_argument, denied_approval);
