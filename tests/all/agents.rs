//! The example agent loops (`examples/anthropic_agent.py`, `examples/openai_agent.py`,
//! `examples/ts/agent.ts`) end to end: each runs as a subprocess with its real SDK, against the
//! real sidecar (in-process on port 0, `examples/agent-tools.json`, real python3) and a
//! scripted model: a local HTTP server speaking the provider's wire (Anthropic Messages or
//! OpenAI Chat Completions, non-streaming) that answers with a fixed script and checks what it
//! is sent. A script's last turn takes the `complete` answer from the tool result it received,
//! so the final line proves the data went model → runtime → sidecar → tools → runtime → model.
//! Every scenario runs for each example (`agents::<scenario>::<example>`): the happy path, an
//! unknown tool, a failing run, a catalog reload between turns, a direct host tool, `fail`, and
//! the bound on turns. And the TypeScript example type-checks (`tsc --strict`).
//!
//! The model server is the one stand-in here: no real model runs in a test. The SDKs are
//! installed by scripts/test (`examples/requirements.txt`, `npm ci --prefix examples/ts`); a
//! missing install fails these tests, it does not skip them.

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, assert_nothing_left};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One example's run, start to final line, is bounded by this (inside [`TEST_TIMEOUT`]); the
/// subprocess is killed when it is over.
const EXAMPLE_TIMEOUT: Duration = Duration::from_secs(45);
/// A manifest rewrite is picked up by the sidecar's reload within this (250 ms of quiet, then
/// a rebuild); a reload that never comes fails the test instead of hanging it.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The examples' `MAX_TURNS`: a model that never calls `complete` or `fail` gets this many.
const EXAMPLE_MAX_TURNS: usize = 12;
/// What the examples tell a model that answered without calling a tool.
const NUDGE: &str = "Call complete with your answer, or fail.";
/// The key the examples' SDKs send the scripted model (a dummy: no real key is used).
const MODEL_KEY: &str = "test-model-key";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    Anthropic,
    OpenAi,
}

#[derive(Clone, Copy, Debug)]
enum Example {
    AnthropicPy,
    OpenAiPy,
    Ts,
}

impl Example {
    fn wire(self) -> Wire {
        match self {
            Example::AnthropicPy | Example::Ts => Wire::Anthropic,
            Example::OpenAiPy => Wire::OpenAi,
        }
    }

    /// The documented command, with the model and the sidecar given by the environment.
    fn command(self, task: &str, model: &ScriptedModel, sidecar: &str) -> tokio::process::Command {
        let examples = root().join("examples");
        let mut c = match self {
            Example::AnthropicPy | Example::OpenAiPy => {
                let script = match self {
                    Example::AnthropicPy => "anthropic_agent.py",
                    _ => "openai_agent.py",
                };
                let mut c = tokio::process::Command::new("python3");
                c.arg(examples.join(script));
                c
            }
            Example::Ts => {
                let ts = examples.join("ts");
                let tsx = ts.join("node_modules/.bin/tsx");
                assert!(
                    tsx.exists(),
                    "{} is missing: run `npm ci --prefix examples/ts` (scripts/test does)",
                    tsx.display()
                );
                let mut c = tokio::process::Command::new(tsx);
                c.arg("agent.ts").current_dir(ts);
                c
            }
        };
        c.arg(task)
            .env("PTC_URL", sidecar)
            .env("NO_PROXY", "127.0.0.1,localhost");
        // Only the dummy key and the scripted model's address reach the SDKs.
        for var in [
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_MODEL",
            "OPENAI_MODEL",
            "PTC_API_KEY",
        ] {
            c.env_remove(var);
        }
        match self.wire() {
            Wire::Anthropic => c
                .env("ANTHROPIC_BASE_URL", model.url())
                .env("ANTHROPIC_API_KEY", MODEL_KEY),
            Wire::OpenAi => c
                .env("OPENAI_BASE_URL", format!("{}/v1", model.url()))
                .env("OPENAI_API_KEY", MODEL_KEY),
        };
        c.kill_on_drop(true);
        c
    }
}

/// What the model was sent in one request, read from either wire.
#[derive(Clone, Debug)]
struct Seen {
    /// The names of the tools offered, in order.
    tools: Vec<String>,
    /// The `exec_code` tool's description (the PTC tools as Python signatures).
    exec_description: String,
    /// The results of the model's previous tool calls.
    results: Vec<ToolResult>,
    /// The last message when it is the user's plain text (the task, or a nudge).
    user_text: Option<String>,
}

#[derive(Clone, Debug)]
struct ToolResult {
    id: String,
    text: String,
    /// Anthropic's `is_error`; Chat Completions has no such flag (`None`).
    is_error: Option<bool>,
}

/// The model's answer for one turn: one tool call, or text alone (no tool called).
enum Reply {
    Call { name: &'static str, input: Value },
    Text(&'static str),
}

fn call(name: &'static str, input: Value) -> Result<Reply, String> {
    Ok(Reply::Call { name, input })
}

type StepFuture = Pin<Box<dyn Future<Output = Result<Reply, String>> + Send>>;
/// One turn of a script: checks what the model was sent, answers with a tool call, or says
/// what was wrong (the model then answers 400, and the test fails with it).
type Step = Box<dyn FnOnce(Seen) -> StepFuture + Send>;

fn step(f: impl FnOnce(&Seen) -> Result<Reply, String> + Send + 'static) -> Step {
    Box::new(move |seen| {
        let answer = f(&seen);
        Box::pin(async move { answer })
    })
}

#[derive(Default)]
struct Script {
    steps: VecDeque<Step>,
    /// The ids of the tool calls of the last answer: the next request must answer them.
    open_ids: Vec<String>,
    seen: Vec<Seen>,
    /// What the script found wrong, for the test's failure message.
    failures: Vec<String>,
}

/// A model that follows a script, on 127.0.0.1:0, for both wires.
struct ScriptedModel {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    shutdown: tokio_util::sync::CancellationToken,
}

type ModelState = (Wire, Arc<Mutex<Script>>);

impl ScriptedModel {
    async fn start(steps: Vec<Step>) -> ScriptedModel {
        let script = Arc::new(Mutex::new(Script {
            steps: steps.into(),
            ..Script::default()
        }));
        let router = Router::new()
            .route(
                "/v1/messages",
                post(turn).with_state((Wire::Anthropic, script.clone())),
            )
            .route(
                "/v1/chat/completions",
                post(turn).with_state((Wire::OpenAi, script.clone())),
            );
        let (addr, shutdown) = crate::common::serve(router).await;
        ScriptedModel {
            addr,
            script,
            shutdown,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }

    fn failures(&self) -> Vec<String> {
        self.script.lock().unwrap().failures.clone()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// One request to the model: read it, check it, run the script's next step, answer.
async fn turn(
    State((wire, script)): State<ModelState>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let checked = check_request(wire, &headers, &body, &script);
    let (n, next) = match checked {
        Ok((seen, n, step)) => (n, step(seen).await),
        Err(e) => (0, Err(e)),
    };
    let mut script = script.lock().unwrap();
    match next {
        Ok(answer) => {
            let id = match wire {
                Wire::Anthropic => format!("toolu_{n}"),
                Wire::OpenAi => format!("call_{n}"),
            };
            script.open_ids = match answer {
                Reply::Call { .. } => vec![id.clone()],
                Reply::Text(_) => Vec::new(),
            };
            Json(reply(wire, &body["model"], n, &id, &answer)).into_response()
        }
        Err(message) => {
            script.failures.push(message.clone());
            let error = match wire {
                Wire::Anthropic => {
                    json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
                }
                Wire::OpenAi => {
                    json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
                }
            };
            (StatusCode::BAD_REQUEST, Json(error)).into_response()
        }
    }
}

/// The request read as [`Seen`], its key and tool result ids checked, and the step to run.
fn check_request(
    wire: Wire,
    headers: &HeaderMap,
    body: &Value,
    script: &Mutex<Script>,
) -> Result<(Seen, usize, Step), String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = format!("Bearer {MODEL_KEY}");
    let key_ok = match wire {
        // The Anthropic SDKs send the key as `x-api-key` or (newer ones) as a bearer token.
        Wire::Anthropic => {
            header("x-api-key") == Some(MODEL_KEY) || header("authorization") == Some(&bearer)
        }
        Wire::OpenAi => header("authorization") == Some(&bearer),
    };
    if !key_ok {
        return Err(format!(
            "{wire:?}: the dummy key did not arrive: {headers:?}"
        ));
    }
    let seen = read_request(wire, body)?;
    // Every turn offers the whole list, the one from the ETag cache included.
    if !["complete", "fail", "exec_code"]
        .iter()
        .all(|t| seen.tools.iter().any(|s| s == t))
    {
        return Err(format!(
            "the tools offered lack complete, fail or exec_code: {seen:?}"
        ));
    }
    let mut script = script.lock().unwrap();
    script.seen.push(seen.clone());
    let n = script.seen.len();
    let answered: Vec<&str> = seen.results.iter().map(|r| r.id.as_str()).collect();
    if answered != script.open_ids {
        return Err(format!(
            "turn {n}: the tool results answer {answered:?}, the model's calls were {:?}",
            script.open_ids
        ));
    }
    let step = script
        .steps
        .pop_front()
        .ok_or_else(|| format!("the script has no turn {n}: the runtime should have stopped"))?;
    Ok((seen, n, step))
}

fn read_request(wire: Wire, body: &Value) -> Result<Seen, String> {
    let tools = body["tools"].as_array().ok_or("no tools in the request")?;
    let (mut names, mut exec_description) = (Vec::new(), String::new());
    for t in tools {
        let t = if wire == Wire::OpenAi {
            &t["function"]
        } else {
            t
        };
        let name = t["name"]
            .as_str()
            .ok_or(format!("a tool without a name: {t}"))?;
        if name == "exec_code" {
            exec_description = t["description"].as_str().unwrap_or_default().to_string();
        }
        names.push(name.to_string());
    }
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let results = match wire {
        Wire::Anthropic => messages
            .last()
            .and_then(|m| m["content"].as_array())
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| ToolResult {
                id: b["tool_use_id"].as_str().unwrap_or_default().to_string(),
                text: text_of(&b["content"]),
                is_error: Some(b["is_error"].as_bool().unwrap_or(false)),
            })
            .collect(),
        Wire::OpenAi => {
            let trailing = messages.iter().rev().take_while(|m| m["role"] == "tool");
            let mut results: Vec<ToolResult> = trailing
                .map(|m| ToolResult {
                    id: m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                    text: text_of(&m["content"]),
                    is_error: None,
                })
                .collect();
            results.reverse();
            results
        }
    };
    let last = messages.last().ok_or("no messages")?;
    let user_text = (last["role"] == "user")
        .then(|| last["content"].as_str().map(str::to_string))
        .flatten();
    Ok(Seen {
        tools: names,
        exec_description,
        results,
        user_text,
    })
}

/// A tool result's content as text: a string, or the text of its text blocks.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn reply(wire: Wire, model: &Value, n: usize, id: &str, answer: &Reply) -> Value {
    match (wire, answer) {
        (Wire::Anthropic, answer) => {
            let (block, stop) = match answer {
                Reply::Call { name, input } => (
                    json!({"type": "tool_use", "id": id, "name": name, "input": input}),
                    "tool_use",
                ),
                Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
            };
            json!({
                "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
                "content": [block], "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": 100, "output_tokens": 20}
            })
        }
        (Wire::OpenAi, answer) => {
            let (message, finish) = match answer {
                Reply::Call { name, input } => (
                    json!({"role": "assistant", "content": null, "refusal": null,
                           "tool_calls": [{"id": id, "type": "function",
                                           "function": {"name": name, "arguments": input.to_string()}}]}),
                    "tool_calls",
                ),
                Reply::Text(text) => (
                    json!({"role": "assistant", "content": text, "refusal": null}),
                    "stop",
                ),
            };
            json!({
                "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 1_764_000_000,
                "model": model,
                "choices": [{"index": 0, "finish_reason": finish, "logprobs": null, "message": message}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
            })
        }
    }
}

/// The one result of the previous turn, which must not be an error (when the wire says).
fn ok_result(seen: &Seen) -> Result<&ToolResult, String> {
    match seen.results.as_slice() {
        [r] if r.is_error != Some(true) => Ok(r),
        other => Err(format!(
            "expected one successful tool result, got {other:?}"
        )),
    }
}

/// The one result of the previous turn, which must be an error: flagged on Anthropic's wire,
/// and in both it says `marker`.
fn error_result<'a>(seen: &'a Seen, marker: &str) -> Result<&'a ToolResult, String> {
    match seen.results.as_slice() {
        [r] if r.is_error != Some(false) && r.text.contains(marker) => Ok(r),
        other => Err(format!(
            "expected one error result saying {marker:?}, got {other:?}"
        )),
    }
}

/// The text after `ANSWER: ` in a tool result: what the script's code printed.
fn answer_in(result: &ToolResult) -> Result<String, String> {
    result
        .text
        .lines()
        .find_map(|l| l.strip_prefix("ANSWER: "))
        .map(str::to_string)
        .ok_or(format!("no ANSWER line in {:?}", result.text))
}

/// The example's manifest in a directory of the test's own (the reload test rewrites it).
fn manifest(dir: &TempDir, without: Option<&str>) -> PathBuf {
    let text = std::fs::read_to_string(root().join("examples/agent-tools.json")).unwrap();
    let mut m: Value = serde_json::from_str(&text).unwrap();
    if let Some(name) = without {
        m["tools"]
            .as_array_mut()
            .unwrap()
            .retain(|t| t["name"] != name);
    }
    dir.write("agent-tools.json", &m.to_string())
}

async fn sidecar(manifest: &Path, extra: &[(&str, &str)]) -> TestSidecar {
    let path = manifest.to_str().unwrap();
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        // No warm interpreters: after a run, any process left would be the run's own.
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", path),
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

    /// Checks the exit code, showing the whole run when it is not `code`.
    fn exited(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// Runs `example` on `task` to its end (killed at [`EXAMPLE_TIMEOUT`]) and checks that the
/// script found nothing wrong and that the model was asked `turns` times.
async fn run(
    example: Example,
    task: &str,
    model: &ScriptedModel,
    sidecar: &TestSidecar,
    key: Option<&str>,
    turns: usize,
) -> Finished {
    let mut command = example.command(task, model, &sidecar.url(""));
    if let Some(key) = key {
        command.env("PTC_API_KEY", key);
    }
    let output = tokio::time::timeout(EXAMPLE_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{example:?} did not finish in {EXAMPLE_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("{example:?} did not start: {e}"));
    let done = Finished {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    let context = format!(
        "{example:?}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        done.code, done.stdout, done.stderr
    );
    assert_eq!(model.failures(), Vec::<String>::new(), "{context}");
    assert_eq!(model.seen().len(), turns, "turns played: {context}");
    done
}

/// The happy path's code: two host tool calls at once, and a line made of both results.
const GATHER: &str = r#"w, orders = await asyncio.gather(get_weather(city="Oslo"), list_orders(customer="ada"))
total = sum(o["total"] for o in orders)
print(f"ANSWER: {w['city']} is {w['temp_c']} C; ada has {len(orders)} orders worth {total:.2f}")
"#;

/// Two host tool calls gathered in one `exec_code`, then `complete` with what the code printed.
async fn happy_path(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let s = sidecar(&manifest(&dir, None), &[("PTC_API_KEY", "sidecar-key")]).await;
        let model = ScriptedModel::start(vec![
            step(|seen| {
                if seen.tools != ["complete", "fail", "exec_code"] || !seen.results.is_empty() {
                    return Err(format!("first turn: {seen:?}"));
                }
                for signature in ["get_weather(city)", "list_orders(customer"] {
                    if !seen.exec_description.contains(signature) {
                        return Err(format!("{signature} not in {:?}", seen.exec_description));
                    }
                }
                call("exec_code", json!({"code": GATHER}))
            }),
            step(|seen| call("complete", json!({"answer": answer_in(ok_result(seen)?)?}))),
        ])
        .await;
        let done = run(
            example,
            "Weather in Oslo and ada's orders?",
            &model,
            &s,
            Some("sidecar-key"),
            2,
        )
        .await;
        done.exited(0);
        assert_eq!(
            done.last_line(),
            "Oslo is 4 C; ada has 2 orders worth 338.50"
        );
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// A tool the runtime does not have: the model is told which tools there are, and goes on.
async fn unknown_tool(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let s = sidecar(&manifest(&dir, None), &[]).await;
        let model = ScriptedModel::start(vec![
            step(|_| call("get_stock_price", json!({"symbol": "ACME"}))),
            step(|seen| {
                let r = error_result(seen, "unknown tool 'get_stock_price'")?;
                call("complete", json!({"answer": format!("told: {}", r.text)}))
            }),
        ])
        .await;
        let done = run(example, "ACME's price?", &model, &s, None, 2).await;
        done.exited(0);
        let last = done.last_line();
        assert!(last.starts_with("told: "), "{last}");
        assert!(
            last.contains(
                "unknown tool 'get_stock_price'; the tools are: complete, fail, exec_code"
            ),
            "{last}"
        );
    })
    .await
    .unwrap();
}

/// Code whose host tool fails and is not caught: the traceback and the status reach the model.
async fn exec_fails(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let s = sidecar(&manifest(&dir, None), &[]).await;
        let model = ScriptedModel::start(vec![
            step(|_| {
                call(
                    "exec_code",
                    json!({"code": "orders = await list_orders(customer='nobody')\nprint(len(orders))"}),
                )
            }),
            step(|seen| {
                let r = error_result(seen, "status: error (exit code 1)")?;
                let line = r.text.lines().find(|l| l.starts_with("ToolError: "));
                let line = line.ok_or(format!("no ToolError line in {:?}", r.text))?;
                call("complete", json!({"answer": line}))
            }),
        ])
        .await;
        let done = run(example, "nobody's orders?", &model, &s, None, 2).await;
        done.exited(0);
        let last = done.last_line();
        // The host tool's own message, raised in the runtime, through the code's traceback.
        assert!(last.starts_with("ToolError: "), "{last}");
        assert!(last.ends_with("no customer 'nobody'"), "{last}");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// Rewrites the manifest at `path` to the example's whole one, and waits (at most
/// [`RELOAD_TIMEOUT`]) until the sidecar at `tools_url` serves a catalog past version 1.
async fn reload(path: PathBuf, http: reqwest::Client, tools_url: String) -> Result<(), String> {
    let full = std::fs::read_to_string(root().join("examples/agent-tools.json")).unwrap();
    std::fs::write(&path, full).unwrap();
    let reloaded = async {
        loop {
            let response = http.get(&tools_url).send().await.unwrap();
            let body: Value = response.json().await.unwrap();
            if body["version"] != 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(RELOAD_TIMEOUT, reloaded)
        .await
        .map_err(|_| "the sidecar did not reload the manifest".to_string())
}

/// The manifest gains `list_orders` between two turns: the example's next request (after an
/// ETag refetch) offers it, the code calls it, and the example answers it.
async fn catalog_reload(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let path = manifest(&dir, Some("list_orders"));
        let s = sidecar(&path, &[]).await;
        let (http, tools_url) = (s.http.clone(), s.url("/v1/tools"));
        let first: Step = Box::new(move |seen: Seen| -> StepFuture {
            Box::pin(async move {
                if seen.exec_description.contains("list_orders") {
                    return Err("list_orders offered before the reload".into());
                }
                reload(path, http, tools_url).await?;
                let code = "print('ANSWER:', (await get_weather(city='Tokyo'))['sky'])";
                call("exec_code", json!({"code": code}))
            })
        });
        let model = ScriptedModel::start(vec![
            first,
            step(|seen| {
                let sky = answer_in(ok_result(seen)?)?;
                if !seen.exec_description.contains("list_orders(customer") {
                    let description = &seen.exec_description;
                    return Err(format!("no list_orders after the reload: {description:?}"));
                }
                let code = format!(
                    "o = await list_orders(customer='grace')\nprint('ANSWER: {sky},', o[0]['item'])"
                );
                call("exec_code", json!({"code": code}))
            }),
            step(|seen| call("complete", json!({"answer": answer_in(ok_result(seen)?)?}))),
        ])
        .await;
        let task = "Tokyo's sky, then grace's first order";
        let done = run(example, task, &model, &s, None, 3).await;
        done.exited(0);
        assert_eq!(done.last_line(), "cloudy, compiler");
        // Three turns, two catalogs: the unchanged one came back as a 304 and was not re-read.
        let fetched: Vec<&str> = done
            .stderr
            .lines()
            .filter(|l| l.starts_with("[tools] catalog version"))
            .collect();
        assert_eq!(fetched.len(), 2, "{}", done.stderr);
        assert!(
            fetched[0].starts_with("[tools] catalog version 1: "),
            "{fetched:?}"
        );
        assert!(
            fetched[1].starts_with("[tools] catalog version 2: "),
            "{fetched:?}"
        );
    })
    .await
    .unwrap();
}

/// A host tool the sidecar offers directly (`PTC_DIRECT_TOOLS`): the model calls it as a tool of
/// its own, and the example answers it without the sidecar.
async fn direct_host_tool(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let direct = [("PTC_DIRECT_TOOLS", "complete,fail,get_weather")];
        let s = sidecar(&manifest(&dir, None), &direct).await;
        let model = ScriptedModel::start(vec![
            step(|seen| {
                if !seen.tools.iter().any(|t| t == "get_weather")
                    || seen.exec_description.contains("get_weather(")
                {
                    return Err(format!("get_weather is not a direct tool: {seen:?}"));
                }
                call("get_weather", json!({"city": "Paris"}))
            }),
            step(|seen| {
                let w: Value = serde_json::from_str(&ok_result(seen)?.text)
                    .map_err(|e| format!("not JSON: {e}: {seen:?}"))?;
                call(
                    "complete",
                    json!({"answer": format!("{} {}", w["sky"].as_str().unwrap_or("?"), w["temp_c"])}),
                )
            }),
        ])
        .await;
        let done = run(example, "Paris?", &model, &s, None, 2).await;
        assert_eq!(done.exited(0).last_line(), "sunny 21");
    })
    .await
    .unwrap();
}

/// `fail` ends the loop at once: its reason on the last line, exit code 1.
async fn fail_ends_the_loop(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let s = sidecar(&manifest(&dir, None), &[]).await;
        let model = ScriptedModel::start(vec![step(|_| {
            call(
                "fail",
                json!({"reason": "there is no weather service for Atlantis"}),
            )
        })])
        .await;
        let done = run(example, "Atlantis?", &model, &s, None, 1).await;
        assert_eq!(
            done.exited(1).last_line(),
            "FAILED: there is no weather service for Atlantis"
        );
    })
    .await
    .unwrap();
}

/// A model that only talks is asked to call `complete` after each turn, and stopped after
/// the examples' `MAX_TURNS`.
async fn turns_are_bounded(example: Example) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("agents");
        let s = sidecar(&manifest(&dir, None), &[]).await;
        let steps = (0..EXAMPLE_MAX_TURNS)
            .map(|turn| {
                step(move |seen| {
                    let expected = if turn == 0 { "chat" } else { NUDGE };
                    if seen.user_text.as_deref() != Some(expected) {
                        return Err(format!(
                            "turn {}: expected {expected:?}: {seen:?}",
                            turn + 1
                        ));
                    }
                    Ok(Reply::Text("Let me think about it."))
                })
            })
            .collect();
        let model = ScriptedModel::start(steps).await;
        let done = run(example, "chat", &model, &s, None, EXAMPLE_MAX_TURNS).await;
        let expected = format!("FAILED: no answer after {EXAMPLE_MAX_TURNS} turns");
        assert_eq!(done.exited(1).last_line(), expected);
    })
    .await
    .unwrap();
}

/// The TypeScript example compiles under `tsc --strict` (tsx, which runs it, strips the types
/// without checking them; people copy it into projects that do check).
#[tokio::test]
async fn typescript_example_type_checks() {
    let ts = root().join("examples/ts");
    let tsc = ts.join("node_modules/.bin/tsc");
    assert!(
        tsc.exists(),
        "{} is missing: run `npm ci --prefix examples/ts` (scripts/test does)",
        tsc.display()
    );
    let output = tokio::time::timeout(
        EXAMPLE_TIMEOUT,
        tokio::process::Command::new(tsc)
            .current_dir(&ts)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("tsc finishes")
    .unwrap();
    assert!(
        output.status.success(),
        "tsc (examples/ts/tsconfig.json):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Each scenario for each example, as `agents::<scenario>::<example>`.
macro_rules! for_each_example {
    ($($scenario:ident),*) => {$(
        mod $scenario {
            use super::Example;

            #[tokio::test]
            async fn anthropic_py() {
                super::$scenario(Example::AnthropicPy).await
            }

            #[tokio::test]
            async fn openai_py() {
                super::$scenario(Example::OpenAiPy).await
            }

            #[tokio::test]
            async fn typescript() {
                super::$scenario(Example::Ts).await
            }
        }
    )*};
}

for_each_example!(
    happy_path,
    unknown_tool,
    exec_fails,
    catalog_reload,
    direct_host_tool,
    fail_ends_the_loop,
    turns_are_bounded
);
