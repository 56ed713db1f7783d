//! The continuation protocol (LibreChat `@librechat/agents` 3.9.x) through real HTTP, with
//! real python3 children: every round, every bad input of the issue, and at the end the real
//! client (`tests/librechat/drive.mjs`) where node and its install are present.

use crate::common::{TEST_TIMEOUT, TestSidecar, assert_nothing_left};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::Duration;

pub const PROGRAMMATIC: &str = "/exec/programmatic";
/// The timeout (ms) of runs whose deadline a test waits out. A request's run starts cold (its
/// own catalog), and on a loaded machine a cold start has taken over a second, so the 1 s
/// minimum timed the run out before its first tool call.
const SHORT_RUN_MS: u64 = 3000;

pub fn tools() -> Value {
    json!([
        {"name": "get-weather", "description": "Weather for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
         "allowed_callers": ["code_execution"]},
        {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
        {"name": "flaky", "parameters": {"type": "object", "properties": {}}}
    ])
}

pub async fn sidecar(extra: &[(&str, &str)]) -> TestSidecar {
    let mut vars = vec![("PTC_ENABLED", "true"), ("PTC_WARM_WORKERS", "0")];
    vars.extend_from_slice(extra);
    TestSidecar::start(&vars).await
}

pub async fn post(s: &TestSidecar, path: &str, body: &Value) -> (u16, Value) {
    post_with(s, path, body, &[]).await
}

async fn post_with(
    s: &TestSidecar,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = s.http.post(s.url(path)).json(body);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn first(code: &str) -> Value {
    json!({"code": code, "tools": tools(), "timeout": 20000, "session_id": "sess-1"})
}

pub fn cont(token: &Value, results: Value) -> Value {
    json!({"continuation_token": token, "tool_results": results})
}

/// Answers every call of a `tool_call_required` the way the LibreChat client would.
pub fn answer_all(r: &Value) -> Value {
    let results: Vec<Value> = r["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match c["name"].as_str().unwrap() {
            "get-weather" => json!({"call_id": c["id"], "result": {"city": c["input"]["city"], "temp_c": 21}, "is_error": false}),
            "add" => json!({"call_id": c["id"], "result": c["input"]["a"].as_f64().unwrap() + c["input"]["b"].as_f64().unwrap(), "is_error": false}),
            _ => json!({"call_id": c["id"], "result": null, "is_error": true, "error_message": "flaky failed: boom"}),
        })
        .collect();
    Value::Array(results)
}

/// Runs code to the end, answering every round; returns the last answer and the rounds.
async fn drive(s: &TestSidecar, code: &str) -> (Value, Vec<Value>) {
    drive_body(s, &first(code)).await
}

/// [`drive`] from a first request of the caller's making.
pub async fn drive_body(s: &TestSidecar, body: &Value) -> (Value, Vec<Value>) {
    let (status, mut r) = post(s, PROGRAMMATIC, body).await;
    assert_eq!(status, 200, "{r}");
    let mut rounds = Vec::new();
    while r["status"] == "tool_call_required" {
        rounds.push(r.clone());
        let (status, next) = post(
            s,
            PROGRAMMATIC,
            &cont(&r["continuation_token"], answer_all(&r)),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        r = next;
    }
    (r, rounds)
}

#[tokio::test]
async fn one_call_loop_and_original_names() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let (r, rounds) = drive(
            &s,
            "w = await get_weather(city='Paris')\nprint(w['city'], w['temp_c'])",
        )
        .await;
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["stdout"], "Paris 21\n");
        assert_eq!(r["session_id"], "sess-1");
        assert_eq!(r["files"], json!([]));
        assert_eq!(rounds.len(), 1);
        let call = &rounds[0]["tool_calls"][0];
        assert_eq!(call["name"], "get-weather", "the original name goes back");
        assert_eq!(call["input"], json!({"city": "Paris"}));
        assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()));

        let (r, rounds) = drive(
            &s,
            "t = 0\nfor i in range(5):\n    t = await add(a=t, b=i)\nprint(t)",
        )
        .await;
        assert_eq!(r["stdout"], "10.0\n", "{r}");
        assert_eq!(rounds.len(), 5);

        // No session given: one is made up and returned.
        let (_, r) = post(
            &s,
            PROGRAMMATIC,
            &json!({"code": "print(2)", "tools": [], "timeout": 5000}),
        )
        .await;
        assert_eq!(r["status"], "completed");
        assert!(r["session_id"].as_str().is_some_and(|id| !id.is_empty()));
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn gathered_calls_come_back_in_one_round() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let code = "rs = await asyncio.gather(get_weather(city='A'), get_weather(city='B'), add(a=1, b=2))\nprint([r if isinstance(r, float) else r['city'] for r in rs])";
        let (r, rounds) = drive(&s, code).await;
        assert_eq!(r["stdout"], "['A', 'B', 3.0]\n", "{r}");
        assert_eq!(rounds.len(), 1, "{rounds:#?}");
        assert_eq!(rounds[0]["tool_calls"].as_array().unwrap().len(), 3);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn tool_errors_missing_results_and_unknown_ids() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let code = "try:\n    await flaky()\nexcept ToolError as e:\n    print('caught', e)";
        let (r, _) = drive(&s, code).await;
        assert_eq!(r["stdout"], "caught flaky failed: boom\n", "{r}");

        // A round answered with an unknown id: 400, and the same token still works after.
        let code = "a, b = await asyncio.gather(get_weather(city='A'), get_weather(city='B'), return_exceptions=True)\nprint(a['city'], type(b).__name__, b)";
        let (_, r) = post(&s, PROGRAMMATIC, &first(code)).await;
        assert_eq!(r["status"], "tool_call_required", "{r}");
        let calls = r["tool_calls"].as_array().unwrap().clone();
        assert_eq!(calls.len(), 2);
        let token = r["continuation_token"].clone();
        let (status, e) = post(&s, PROGRAMMATIC, &cont(&token, json!([{"call_id": "nope", "result": 1, "is_error": false}]))).await;
        assert_eq!(status, 400, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("nope"), "{e}");
        // Only the first call answered: the second fails with a ToolError naming it.
        let (status, r) = post(&s, PROGRAMMATIC, &cont(&token, json!([{"call_id": calls[0]["id"], "result": {"city": "A"}, "is_error": false}]))).await;
        assert_eq!(status, 200);
        assert_eq!(r["status"], "completed", "{r}");
        let out = r["stdout"].as_str().unwrap();
        assert!(out.starts_with("A ToolError get-weather: the client sent no result for call"), "{out}");
        assert!(out.contains(calls[1]["id"].as_str().unwrap()), "{out}");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn errors_go_to_stderr() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let (_, r) = post(&s, PROGRAMMATIC, &first("print('before')\nx = (")).await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["error"], "Sandbox exited with code 1");
        assert!(r["stderr"].as_str().unwrap().contains("SyntaxError"), "{r}");

        let (_, r) = post(
            &s,
            PROGRAMMATIC,
            &first("print('before')\nraise ValueError('bad')"),
        )
        .await;
        assert_eq!(r["status"], "error", "{r}");
        let stderr = r["stderr"].as_str().unwrap();
        assert!(
            stderr.contains("ValueError: bad") && stderr.contains("before"),
            "{stderr}"
        );

        let (_, r) = post(
            &s,
            PROGRAMMATIC,
            &json!({"code": "import time\ntime.sleep(5)", "tools": [], "timeout": 1000}),
        )
        .await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["error"], "Time limit exceeded");

        // A language this sidecar does not run: a permanent capability mismatch.
        let (status, r) = post(
            &s,
            PROGRAMMATIC,
            &json!({"code": "puts 1", "lang": "ruby", "tools": []}),
        )
        .await;
        assert_eq!(status, 422);
        assert_eq!(r["error"], "unsupported_capability");

        let (status, _) = post(&s, PROGRAMMATIC, &json!({"tools": []})).await;
        assert_eq!(status, 400);
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bad_tokens() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let code = "a = await get_weather(city='A')\nb = await get_weather(city='B')\nprint(a['city'], b['city'])";
        let (_, r1) = post(&s, PROGRAMMATIC, &first(code)).await;
        let token = r1["continuation_token"].as_str().unwrap().to_string();

        // Forged: garbage, and a real token with its claims changed.
        let (status, e) = post(&s, PROGRAMMATIC, &cont(&json!("not-a-token"), json!([]))).await;
        assert_eq!(status, 403, "{e}");
        let (payload, tag) = token.split_once('.').unwrap();
        let claims = String::from_utf8(
            (0..payload.len()).step_by(2).map(|i| u8::from_str_radix(&payload[i..i + 2], 16).unwrap()).collect(),
        )
        .unwrap();
        let forged_claims = claims.replace("\"round\":1", "\"round\":2");
        assert_ne!(forged_claims, claims);
        let forged: String = forged_claims.bytes().map(|b| format!("{b:02x}")).collect::<String>() + "." + tag;
        let (status, _) = post(&s, PROGRAMMATIC, &cont(&json!(forged), json!([]))).await;
        assert_eq!(status, 403);

        // Cross-session: the token with another session's id.
        let mut body = cont(&json!(token), answer_all(&r1));
        body["session_id"] = json!("someone-else");
        let (status, e) = post(&s, PROGRAMMATIC, &body).await;
        assert_eq!(status, 403, "{e}");

        // Used once, then reused: 409, and the run goes on with the new token.
        let (_, r2) = post(&s, PROGRAMMATIC, &cont(&json!(token), answer_all(&r1))).await;
        assert_eq!(r2["status"], "tool_call_required", "{r2}");
        let (status, e) = post(&s, PROGRAMMATIC, &cont(&json!(token), answer_all(&r1))).await;
        assert_eq!(status, 409, "{e}");
        let (_, r3) = post(&s, PROGRAMMATIC, &cont(&r2["continuation_token"], answer_all(&r2))).await;
        assert_eq!(r3["stdout"], "A B\n", "{r3}");
        // Reused after the run is over.
        let (status, e) = post(&s, PROGRAMMATIC, &cont(&r2["continuation_token"], answer_all(&r2))).await;
        assert_eq!(status, 200);
        assert_eq!(e["status"], "error", "{e}");

        // Expired: the run's deadline passed while the client held the token. The deadline
        // leaves a cold start room (SHORT_RUN_MS), so the call itself comes before it.
        let (_, r) = post(&s, PROGRAMMATIC, &json!({"code": "print(await add(a=1, b=2))", "tools": tools(), "timeout": SHORT_RUN_MS})).await;
        assert_eq!(r["status"], "tool_call_required", "{r}");
        tokio::time::sleep(Duration::from_millis(SHORT_RUN_MS + 200)).await;
        let (status, e) = post(&s, PROGRAMMATIC, &cont(&r["continuation_token"], answer_all(&r))).await;
        assert_eq!(status, 200);
        assert_eq!(e["status"], "error");
        assert_eq!(e["error"], "Time limit exceeded");
        assert!(e["stderr"].as_str().unwrap().contains("expired"), "{e}");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_client_that_never_continues_is_reaped() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let (_, r) = post(
            &s,
            PROGRAMMATIC,
            &json!({"code": "print(await add(a=1, b=2))", "tools": tools(), "timeout": SHORT_RUN_MS}),
        )
        .await;
        assert_eq!(r["status"], "tool_call_required", "{r}");
        let runner = s.sidecar.state.runner.clone().unwrap();
        assert_eq!(runner.live_runs(), 1, "the run is paused, alive");
        // The runner kills the child at the deadline; the protocol state goes with it.
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn cancel_by_request_id() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let id = "6f1c9b2e-0000-4000-8000-000000000001";
        let (_, r) = post_with(
            &s,
            PROGRAMMATIC,
            &first("print(await add(a=1, b=2))"),
            &[("X-LibreChat-Code-Request-ID", id)],
        )
        .await;
        assert_eq!(r["status"], "tool_call_required");
        let (status, c) = post(&s, "/exec/programmatic/cancel", &json!({"request_id": id})).await;
        assert_eq!(status, 200, "{c}");
        assert_nothing_left(&s).await;
        let (_, e) = post(
            &s,
            PROGRAMMATIC,
            &cont(&r["continuation_token"], answer_all(&r)),
        )
        .await;
        assert_eq!(e["status"], "error");
        let (status, _) = post(&s, "/exec/programmatic/cancel", &json!({"request_id": id})).await;
        assert_eq!(status, 404);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn more_than_twenty_rounds_stop_the_run() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let (r, rounds) = drive(
            &s,
            "for i in range(25):\n    await add(a=i, b=0)\nprint('done')",
        )
        .await;
        assert_eq!(rounds.len(), 20);
        assert_eq!(r["status"], "error", "{r}");
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("more than 20 round trips"),
            "{r}"
        );
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn plain_exec_unwraps_the_client_wrapper() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let wrapped = "async def __user_main__():\n    \"\"\"Auto-generated wrapper for user code to support top-level await\"\"\"\n    await asyncio.sleep(0)\n    print('plain', 1 + 1)\n\nif __name__ == \"__main__\":\n    import asyncio\n    asyncio.run(__user_main__())\n";
        let (status, r) = post(&s, "/exec", &json!({"lang": "py", "code": wrapped, "timeout": 5000, "session_id": "s9"})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["stdout"], "plain 2\n", "{r}");
        assert_eq!(r["session_id"], "s9");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn api_key_is_required_when_set() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_API_KEY", "sekret")]).await;
        let body = json!({"code": "print(3)", "tools": [], "timeout": 5000});
        let (status, _) = post(&s, PROGRAMMATIC, &body).await;
        assert_eq!(status, 401);
        let (status, _) = post_with(
            &s,
            "/exec/programmatic/cancel",
            &json!({"request_id": "x"}),
            &[],
        )
        .await;
        assert_eq!(status, 401);
        let (status, r) = post_with(&s, PROGRAMMATIC, &body, &[("X-API-Key", "sekret")]).await;
        assert_eq!((status, r["stdout"].clone()), (200, json!("3\n")));
        let (status, _) = post_with(
            &s,
            "/exec",
            &json!({"code": "print(3)"}),
            &[("Authorization", "Bearer sekret")],
        )
        .await;
        assert_eq!(status, 200);
    })
    .await
    .unwrap();
}

/// Where the real LibreChat client is installed (`tests/librechat`), or `None`, with the reason
/// printed, where node or the npm install (`npm install --prefix tests/librechat`, done by
/// scripts/test) is missing.
pub fn real_client() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/librechat");
    if !dir
        .join("node_modules/@librechat/agents/package.json")
        .exists()
    {
        println!(
            "skipped: @librechat/agents is not installed (npm install --prefix tests/librechat)"
        );
        return None;
    }
    let node_ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node_ok {
        println!("skipped: node is not on PATH");
        return None;
    }
    Some(dir)
}

/// Runs the client's `script` of `dir` against `s` with `args` after the address and `env`;
/// asserts it exited 0 with `scenarios` scenarios passed, and gives its stdout.
pub async fn drive_client(
    dir: &std::path::Path,
    script: &str,
    s: &TestSidecar,
    args: &[&str],
    env: &[(&str, String)],
    scenarios: usize,
) -> String {
    let output = tokio::process::Command::new("node")
        .arg(dir.join(script))
        .arg(format!("http://{}", s.addr))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    println!("{script}:\n{stdout}");
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.matches("ok - ").count(), scenarios, "{stdout}");
    stdout.into_owned()
}

/// The real LibreChat client (`tests/librechat/drive.mjs` and `drive-bash.mjs`, its own
/// programmatic tool runners for Python and bash; `drive-js.mjs`, its `execute_code` tool with
/// `js` and `ts` and its wire functions driving JavaScript through continuations) against this
/// sidecar. Skipped where [`real_client`] is missing.
#[tokio::test]
async fn the_real_librechat_client() {
    let Some(dir) = real_client() else { return };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_API_KEY", "drive-key")]).await;
        // The Python runner, the bash runner, then JavaScript, each with its own scenarios.
        for (script, scenarios) in [("drive.mjs", 9), ("drive-bash.mjs", 8), ("drive-js.mjs", 6)] {
            drive_client(&dir, script, &s, &["drive-key"], &[], scenarios).await;
        }
        // The aborted run (it would sleep 30 s) was stopped by the client's /cancel; the bash
        // run that never ended, at its timeout.
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}
