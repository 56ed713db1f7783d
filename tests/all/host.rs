//! Host tool protocols 2 (attached: SSE on `POST /v1/exec_code`, answers on
//! `POST /v1/exec/{id}/results`) and direct posting (`POST /tool_call` on the IPC bridge),
//! through real HTTP with real python3 children.

use crate::common::{
    HostServer, Sse, TEST_TIMEOUT, TempDir, TestSidecar, assert_nothing_left, tool,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// A sidecar whose host tools have no callback URL: only an attached caller can run them.
async fn attached_sidecar(extra: &[(&str, &str)]) -> (TestSidecar, TempDir) {
    let dir = TempDir::new("host");
    let manifest = json!({"tools": [
        {"name": "get-weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"name": "boom", "input_schema": {"type": "object", "properties": {}}}
    ]});
    let path = dir.write("tools.json", &manifest.to_string());
    let path = path.to_str().unwrap().to_string();
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", path.as_str()),
    ];
    vars.extend_from_slice(extra);
    (TestSidecar::start(&vars).await, dir)
}

async fn post_results(s: &TestSidecar, exec_id: &str, results: Value) -> (u16, Value) {
    let response = s
        .http
        .post(s.url(&format!("/v1/exec/{exec_id}/results")))
        .json(&json!({"results": results}))
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn attached_stream_answers_tool_calls() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = attached_sidecar(&[]).await;
        let code = r#"
print("start", flush=True)
w = await get_weather(city="Paris")
a, b = await asyncio.gather(get_weather(city="A"), get_weather(city="B"))
try:
    await boom()
except ToolError as e:
    print("caught", e)
print(w["temp_c"], a["city"], b["city"])
"#;
        let mut sse = Sse::open(&s, code).await;
        let (name, started) = sse.next().await.unwrap();
        assert_eq!(name, "started");
        let exec_id = started["exec_id"].as_str().unwrap().to_string();

        let (status, _) = post_results(&s, "no-such-exec", json!([])).await;
        assert_eq!(status, 404);

        let (mut stdout, mut calls, mut done) = (String::new(), Vec::new(), None);
        while let Some((name, data)) = sse.next().await {
            match name.as_str() {
                "stdout" => stdout.push_str(data["text"].as_str().unwrap()),
                "tool_call" => {
                    calls.push(data["tool"].as_str().unwrap().to_string());
                    let id = data["id"].clone();
                    let answer = match data["tool"].as_str().unwrap() {
                        "get-weather" => {
                            json!([{"id": id, "result": {"city": data["input"]["city"], "temp_c": 21}}])
                        }
                        // An unknown id next to a real one: listed as rejected, the rest applied.
                        _ => json!([{"id": "nope", "result": 1}, {"id": id, "error": "boom failed"}]),
                    };
                    let (status, r) = post_results(&s, &exec_id, answer).await;
                    assert_eq!(status, 200, "{r}");
                    assert_eq!(r["applied"], json!([id]), "{r}");
                    if data["tool"] == "boom" {
                        assert_eq!(r["rejected"][0]["id"], "nope", "{r}");
                    }
                }
                "done" => done = Some(data),
                "stderr" => {}
                other => panic!("unexpected event {other}: {data}"),
            }
        }
        let done = done.expect("a done event");
        assert_eq!(done["status"], "ok", "{done}");
        assert_eq!(done["stdout"], "start\ncaught boom failed\n21 A B\n");
        assert_eq!(stdout, done["stdout"].as_str().unwrap(), "streamed stdout");
        assert_eq!(calls, ["get-weather", "get-weather", "get-weather", "boom"]);
        assert_eq!(done["tool_calls"].as_array().unwrap().len(), 4);
        // The run is over: its id is gone.
        let (status, _) = post_results(&s, &exec_id, json!([])).await;
        assert_eq!(status, 404);
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// An attached run of `body` to its end, every `get-weather` call answered and every `boom`
/// failed on `/results`: the tools called, in order, and the `done` event's data.
async fn attached_run(s: &TestSidecar, body: Value) -> (Vec<String>, Value) {
    let mut sse = Sse::open_body(s, body).await;
    let (name, started) = sse.next().await.unwrap();
    assert_eq!(name, "started");
    let exec_id = started["exec_id"].as_str().unwrap().to_string();
    let (mut calls, mut done) = (Vec::new(), None);
    while let Some((name, data)) = sse.next().await {
        match name.as_str() {
            "tool_call" => {
                let (id, tool) = (data["id"].clone(), data["tool"].as_str().unwrap());
                calls.push(tool.to_string());
                let answer = match tool {
                    "get-weather" => {
                        json!({"id": id, "result": {"city": data["input"]["city"], "temp_c": 21}})
                    }
                    _ => json!({"id": id, "error": "boom failed"}),
                };
                let (status, r) = post_results(s, &exec_id, json!([answer])).await;
                assert_eq!((status, &r["applied"]), (200, &json!([id])), "{r}");
            }
            "done" => done = Some(data),
            _ => {}
        }
    }
    (calls, done.expect("a done event"))
}

/// The attached stream takes `lang` as the JSON answer does: JavaScript and TypeScript whose
/// host tool calls (one, a `Promise.all` of two, a failing one) the caller answers.
#[tokio::test]
async fn attached_stream_runs_javascript_and_typescript() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = attached_sidecar(&[]).await;
        let code = r#"
console.log("start");
const w = await get_weather({city: "Paris"});
const [a, b] = await Promise.all([get_weather({city: "A"}), tools.get_weather({city: "B"})]);
try { await boom({}); } catch (e) { console.log("caught", e.name, e.type, e.message); }
console.log(w.temp_c, a.city, b.city);
"#;
        let (calls, done) =
            attached_run(&s, json!({"code": code, "lang": "javascript", "timeout_ms": 20000})).await;
        assert_eq!(done["status"], "ok", "{done}");
        assert_eq!(done["stdout"], "start\ncaught ToolError tool boom failed\n21 A B\n");
        assert_eq!(calls, ["get-weather", "get-weather", "get-weather", "boom"]);

        let code = "const w: {temp_c: number} = await get_weather({city: \"Rome\"});\nconsole.log(w.temp_c * 2);\n";
        let (calls, done) =
            attached_run(&s, json!({"code": code, "lang": "ts", "timeout_ms": 20000})).await;
        assert_eq!(done["stdout"], "42\n", "{done}");
        assert_eq!(calls, ["get-weather"]);
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn results_need_the_api_key_when_one_is_set() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = attached_sidecar(&[("PTC_API_KEY", "k")]).await;
        let (status, _) = post_results(&s, "any", json!([])).await;
        assert_eq!(status, 401);
        let response = s
            .http
            .post(s.url("/v1/exec/any/results"))
            .header("X-API-Key", "k")
            .json(&json!({"results": []}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "past auth: no such run");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_caller_that_disconnects_stops_the_run() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = attached_sidecar(&[]).await;
        let mut sse = Sse::open(&s, "print(await get_weather(city='x'))").await;
        loop {
            let (name, _) = sse.next().await.unwrap();
            if name == "tool_call" {
                break;
            }
        }
        assert_eq!(s.sidecar.state.runner.clone().unwrap().live_runs(), 1);
        drop(sse);
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_result_that_never_comes_times_out() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = attached_sidecar(&[("PTC_TOOL_TIMEOUT", "1")]).await;
        let code =
            "try:\n    await get_weather(city='x')\nexcept ToolError as e:\n    print(e.type)";
        let mut sse = Sse::open(&s, code).await;
        let mut done = None;
        while let Some((name, data)) = sse.next().await {
            if name == "done" {
                done = Some(data);
            }
        }
        assert_eq!(done.unwrap()["stdout"], "timeout\n");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn json_answer_without_stream_is_unchanged() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _dir) = attached_sidecar(&[]).await;
        // No stream, no callback: the host tool cannot run, and says why.
        let r = s
            .exec(
                "try:\n    await get_weather(city='x')\nexcept ToolError as e:\n    print(e.type)",
            )
            .await;
        assert_eq!(r["stdout"], "unavailable\n", "{r}");
    })
    .await
    .unwrap();
}

/// Python that posts to `/tool_call` itself, with the run's own token and address.
const DIRECT: &str = r#"
import sys, json, http.client
c = sys.modules["ptc_sdk"]._client
token = c._prefix.decode().split("Bearer ")[1].split("\r\n")[0]
def post(body, tok=token):
    conn = http.client.HTTPConnection(c.host, c.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if tok:
        headers["Authorization"] = "Bearer " + tok
    conn.request("POST", "/tool_call", json.dumps(body), headers)
    r = conn.getresponse()
    return [r.status, json.loads(r.read())]
print(json.dumps(post({"tool": "get-weather", "input": {"city": "Rome"}})))
print(json.dumps(post({"tool": "get_weather", "input": {"city": "Oslo"}})))
print(json.dumps(post({"tool": "no-such-tool", "input": {}})))
print(json.dumps(post({"tool": "get-weather", "input": {"city": 5}})))
print(json.dumps(post({"tool": "get-weather", "input": {"city": "x"}}, tok="forged")))
print(json.dumps(post({"tool": "complete", "input": {}})))
"#;

#[tokio::test]
async fn direct_posting_to_tool_call() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = HostServer::start(vec![(
            "get-weather",
            tool(|input| json!({"result": {"city": input["city"], "temp_c": 21}})),
        )])
        .await;
        let dir = TempDir::new("direct");
        let manifest = json!({
            "callback": {"url": host.url()},
            "tools": [
                {"name": "complete", "input_schema": {"type": "object", "properties": {}}},
                {"name": "get-weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
            ]
        });
        let path = dir.write("tools.json", &manifest.to_string());
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_WARM_WORKERS", "0"),
            ("PTC_TOOLS_FILE", path.to_str().unwrap()),
        ])
        .await;
        let r = s.exec(DIRECT).await;
        assert_eq!(r["status"], "ok", "{r}");
        let lines: Vec<Value> = r["stdout"]
            .as_str()
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0], json!([200, {"result": {"city": "Rome", "temp_c": 21}}]));
        assert_eq!(lines[1][1]["result"]["city"], "Oslo", "the Python name works too");
        assert_eq!(lines[2][0], 404);
        assert_eq!(lines[2][1]["error"]["type"], "unknown_tool");
        assert!(
            lines[2][1]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no tool named \"no-such-tool\""),
            "{}",
            lines[2]
        );
        assert_eq!(lines[3][0], 400, "schema checked: {}", lines[3]);
        assert_eq!(lines[3][1]["error"]["type"], "input");
        assert_eq!(lines[4][0], 401);
        assert_eq!(lines[5][0], 404, "a direct tool is not callable: {}", lines[5]);
        // Calls made through /tool_call are the run's calls (refused ones never started).
        assert_eq!(r["tool_calls"].as_array().unwrap().len(), 2, "{r}");
    })
    .await
    .unwrap();
}
