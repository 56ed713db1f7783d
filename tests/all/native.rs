//! Native PTC through the control API: the native tool lists (`GET /v1/tools?ptc=native`) and
//! a runtime's one call (`POST /v1/tools/call`) against the real sidecar, the real demo MCP
//! server and a host tool server of the test's own (the callback protocol): each call takes a
//! run's path (the schema check, approvals, limits, events, metrics), with PTC on or off. The
//! examples that use them run in `native_agents`.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, names, tool};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const KEY: &str = "native-key";
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

/// The example's host tools (`examples/agent-tools.json`) answered by a host tool server.
pub async fn host_tools() -> HostServer {
    HostServer::start(vec![
        (
            "get_weather",
            tool(|input| match input["city"].as_str() {
                Some("Paris") => json!({"result": {"city": "Paris", "temp_c": 21, "sky": "sunny"}}),
                other => json!({"error": format!("no weather for {other:?}")}),
            }),
        ),
        (
            "list_orders",
            tool(|input| json!({"result": [{"id": "A-1", "customer": input["customer"], "total": 89.0}]})),
        ),
        ("complete", tool(|input| json!({"result": {"done": input["answer"]}}))),
        ("fail", tool(|input| json!({"result": {"failed": input["reason"]}}))),
    ])
    .await
}

/// A sidecar with the example's manifest (its callback `host`) and the demo MCP server, the
/// API key [`KEY`], and `extra`.
pub async fn sidecar(
    dir: &TempDir,
    host: &HostServer,
    enabled: bool,
    extra: &[(&str, &str)],
) -> TestSidecar {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/agent-tools.json")).unwrap();
    let mut manifest: Value = serde_json::from_str(&text).unwrap();
    manifest["callback"] = json!({"url": host.url()});
    let tools = dir.write("tools.json", &manifest.to_string());
    let mcp = json!({"mcpServers": {"demo": {"command": DEMO, "args": []}}});
    let mcp = dir.write("mcp.json", &mcp.to_string());
    let mut vars = vec![
        ("PTC_ENABLED", if enabled { "true" } else { "false" }),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", tools.to_str().unwrap()),
        ("PTC_MCP_CONFIG", mcp.to_str().unwrap()),
        ("PTC_API_KEY", KEY),
    ];
    vars.extend_from_slice(extra);
    TestSidecar::start(&vars).await
}

/// `POST /v1/tools/call` with the key: (status, body).
pub async fn call(s: &TestSidecar, body: Value) -> (u16, Value) {
    let r = s
        .http
        .post(s.url("/v1/tools/call"))
        .header("x-api-key", KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn tools(s: &TestSidecar, query: &str) -> (u16, Value, String) {
    let r = s
        .http
        .get(s.url(&format!("/v1/tools?{query}")))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    let etag = r
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_string());
    (
        r.status().as_u16(),
        r.json().await.unwrap(),
        etag.unwrap_or_default(),
    )
}

/// The events of type `kind` seen so far on `events`, waiting up to 5 s for `n` of them.
async fn events_of(
    events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<str>>,
    kind: &str,
    n: usize,
) -> Vec<Value> {
    let mut found = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while found.len() < n {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("{n} {kind} events never came: {found:#?}"))
            .unwrap();
        let e: Value = serde_json::from_str(&e).unwrap();
        if e["type"] == kind {
            found.push(e);
        }
    }
    found
}

const DEMO_TOOLS: [&str; 9] = [
    "demo__add",
    "demo__fail",
    "demo__lookup_country",
    "demo__multiply",
    "demo__noop",
    "demo__slow",
    "demo__stats",
    "demo__toggle_extra",
    "demo__trace_context",
];

#[tokio::test]
async fn native_lists_offer_the_providers_code_tool_and_every_ptc_tool_with_its_schema() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (dir, host) = (TempDir::new("native"), host_tools().await);
        let s = sidecar(&dir, &host, true, &[]).await;
        let (status, plain, plain_etag) = tools(&s, "format=anthropic").await;
        assert_eq!(status, 200);
        let (status, a, etag) = tools(&s, "format=anthropic&ptc=native").await;
        assert_eq!(status, 200, "{a}");
        // One catalog, one ETag, whatever its shape.
        assert_eq!(etag, plain_etag);
        assert_eq!(a["etag"], plain["etag"]);
        let list = a["tools"].as_array().unwrap();
        assert_eq!(list[0]["name"], "complete");
        assert_eq!(list[1]["name"], "fail");
        assert_eq!(list[0].get("allowed_callers"), None);
        assert_eq!(
            list[2],
            json!({"type": "code_execution_20260120", "name": "code_execution"})
        );
        let ptc: Vec<&Value> = list[3..].iter().collect();
        let mut expected = vec!["get_weather", "list_orders"];
        expected.extend(DEMO_TOOLS);
        assert_eq!(
            ptc.iter().map(|t| t["name"].as_str().unwrap()).collect::<Vec<_>>(),
            expected
        );
        for t in &ptc {
            assert_eq!(t["allowed_callers"], json!(["code_execution_20260120"]), "{t}");
            assert_eq!(t["input_schema"]["type"], "object", "{t}");
            assert!(t["description"].is_string(), "{t}");
        }
        assert_eq!(
            ptc[0]["input_schema"],
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
        );
        assert!(list.iter().all(|t| t["name"] != "exec_code"));

        let (status, o, _) = tools(&s, "format=openai&ptc=native").await;
        assert_eq!(status, 200, "{o}");
        let list = o["tools"].as_array().unwrap();
        assert_eq!(list[2], json!({"type": "programmatic_tool_calling"}));
        assert_eq!(
            list[0],
            json!({"type": "function", "name": "complete",
                   "description": "Finish the task: give the final answer to the user.",
                   "parameters": {"type": "object", "properties": {"answer": {"type": "string", "description": "The final answer."}}, "required": ["answer"]},
                   "strict": false})
        );
        for t in &list[3..] {
            assert_eq!(t["type"], "function", "{t}");
            assert_eq!(t["allowed_callers"], json!(["programmatic"]), "{t}");
            assert_eq!(t["parameters"]["type"], "object", "{t}");
        }
        assert_eq!(list.len(), 3 + expected.len());

        // The cached list comes back as a 304.
        let r = s
            .http
            .get(s.url("/v1/tools?format=openai&ptc=native"))
            .header("x-api-key", KEY)
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 304);
        for (query, message) in [
            ("format=mcp&ptc=native", "ptc=native is for format=anthropic or format=openai"),
            ("format=anthropic&ptc=yes", "unknown ptc \"yes\""),
        ] {
            let (status, body, _) = tools(&s, query).await;
            assert_eq!(status, 400, "{query}: {body}");
            assert_eq!(body["error"]["type"], "bad_request");
            let said = body["error"]["message"].as_str().unwrap();
            assert!(said.starts_with(message), "{query}: {said}");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_runtime_call_reaches_mcp_and_host_tools_with_its_caller_on_the_events_and_metrics() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (dir, host) = (TempDir::new("native"), host_tools().await);
        let s = sidecar(&dir, &host, true, &[]).await;
        let mut events = s.sidecar.state.events.subscribe();
        let program = json!({"type": "code_execution_20260120", "tool_id": "srvtoolu_1"});
        let (status, body) = call(
            &s,
            json!({"tool": "demo__lookup_country", "input": {"code": "FR"}, "caller": program, "session_id": "conv-1"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["capital"], "Paris", "{body}");
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let r = s
            .http
            .post(s.url("/v1/tools/call"))
            .header("x-api-key", KEY)
            .header("traceparent", traceparent)
            .json(&json!({"tool": "get_weather", "input": {"city": "Paris"}, "caller": program, "session_id": "conv-1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body, json!({"result": {"city": "Paris", "temp_c": 21, "sky": "sunny"}}));
        // The host's callback got the call's own span, a child of the runtime's.
        let tp = host.traceparents.lock().unwrap()[0].clone().unwrap();
        assert!(tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"), "{tp}");
        // A direct call: the runtime's own, a run of its own.
        let (status, body) = call(&s, json!({"tool": "demo__add", "input": {"a": 2, "b": 3}})).await;
        assert_eq!((status, body), (200, json!({"result": "5"})));

        let finished = events_of(&mut events, "tool_call.finished", 3).await;
        let (a, b, c) = (&finished[0], &finished[1], &finished[2]);
        for e in [a, b] {
            assert_eq!(e["caller"], "code_execution_20260120", "{e}");
            assert_eq!(e["caller_id"], "srvtoolu_1", "{e}");
            assert_eq!(e["session_id"], "conv-1", "{e}");
            assert_eq!(e["ok"], true, "{e}");
        }
        // One program, one run: its calls nest under one exec_id.
        assert_eq!(a["exec_id"], b["exec_id"]);
        assert_eq!(a["source"], "mcp");
        assert_eq!(b["source"], "host");
        assert_eq!(b["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(b["parent_span_id"], "b7ad6b7169203331");
        assert_eq!(c["caller"], "runtime", "{c}");
        assert_eq!(c.get("caller_id"), None, "{c}");
        assert_ne!(c["exec_id"], a["exec_id"]);
        assert!(a["exec_id"].as_str().unwrap().starts_with('n'), "{a}");

        let metrics = s.metrics(Some(KEY)).await;
        for line in [
            "ptc_tool_calls_total{tool=\"demo__lookup_country\",backend=\"mcp\",outcome=\"ok\"} 1",
            "ptc_tool_calls_total{tool=\"get_weather\",backend=\"host\",outcome=\"ok\"} 1",
            "ptc_tool_calls_total{tool=\"demo__add\",backend=\"mcp\",outcome=\"ok\"} 1",
        ] {
            assert!(metrics.contains(line), "{line} not in:\n{metrics}");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_runtime_call_is_refused_as_a_runs_call_would_be() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (dir, host) = (TempDir::new("native"), host_tools().await);
        let limits = r#"{"list_orders": {"max_per_run": 1}, "demo__noop": {"per_second": 1}}"#;
        let s = sidecar(
            &dir,
            &host,
            true,
            &[("PTC_TOOL_LIMITS", limits), ("PTC_TOOL_TIMEOUT", "1")],
        )
        .await;
        let mut events = s.sidecar.state.events.subscribe();

        // Without the key: 401, nothing called.
        let r = s
            .http
            .post(s.url("/v1/tools/call"))
            .json(&json!({"tool": "get_weather", "input": {"city": "Paris"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "unauthorized");

        // A bad argument: refused before dispatch, with the run's message.
        let (status, body) = call(&s, json!({"tool": "get_weather", "input": {"town": "Paris"}})).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "input");
        let said = body["error"]["message"].as_str().unwrap();
        assert!(said.starts_with("get_weather(): "), "{said}");
        assert!(said.contains("\"city\" is a required property"), "{said}");
        let (status, body) = call(&s, json!({"tool": "get_weather", "input": "Paris"})).await;
        assert_eq!((status, body["error"]["type"].as_str()), (400, Some("input")), "{body}");
        assert_eq!(host.calls.load(std::sync::atomic::Ordering::Relaxed), 0);

        // An unknown tool: the closest names offered.
        let (status, body) = call(&s, json!({"tool": "get_wether", "input": {}})).await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(
            body["error"],
            json!({"type": "unknown_tool", "message": "no tool named \"get_wether\"; closest: get_weather"})
        );
        let (status, body) = call(&s, json!({"tool": "lookup_country", "input": {}})).await;
        assert_eq!(status, 404, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().ends_with("closest: demo__lookup_country"),
            "{body}"
        );

        // max_per_run: a program's second call of the tool is past it; another program's
        // first is not.
        let by = |id: &str| json!({"type": "program", "caller_id": id});
        let orders = |id: &str| json!({"tool": "list_orders", "input": {"customer": "ada"}, "caller": by(id)});
        assert_eq!(call(&s, orders("prog_1")).await.0, 200);
        let (status, body) = call(&s, orders("prog_1")).await;
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["error"]["type"], "limit", "{body}");
        assert_eq!(call(&s, orders("prog_2")).await.0, 200);

        // per_second 1 within PTC_TOOL_TIMEOUT=1: of three calls at once, the third has no
        // turn before its deadline.
        let noop = json!({"tool": "demo__noop", "input": {}});
        let (x, y, z) = tokio::join!(call(&s, noop.clone()), call(&s, noop.clone()), call(&s, noop));
        // (The second's turn is at its deadline: admitted or not, it cannot answer in time.)
        let statuses = [x.0, y.0, z.0];
        assert!(statuses.contains(&200), "{x:?} {y:?} {z:?}");
        let refused = [&x, &y, &z].into_iter().find(|r| r.0 == 429);
        let refused = refused.unwrap_or_else(|| panic!("none refused: {x:?} {y:?} {z:?}"));
        assert_eq!(refused.1["error"]["type"], "rate_limited", "{refused:?}");

        // PTC_TOOL_TIMEOUT=1: a call of 3 s ends at 1 s with the run's timeout.
        let started = Instant::now();
        let (status, body) = call(&s, json!({"tool": "demo__slow", "input": {"ms": 3000}})).await;
        assert_eq!(status, 504, "{body}");
        assert_eq!(
            body["error"],
            json!({"type": "timeout", "message": "demo__slow did not answer within 1 s (PTC_TOOL_TIMEOUT)"})
        );
        assert!(started.elapsed() < Duration::from_millis(2500), "{:?}", started.elapsed());

        // A tool error is the tool's, as a run's code would see it.
        let (status, body) = call(&s, json!({"tool": "demo__fail", "input": {"message": "it broke"}})).await;
        assert_eq!((status, &body["error"]), (502, &json!({"type": "tool", "message": "it broke"})));

        // Body errors are the API's own.
        for bad in [json!({"input": {}}), json!({"tool": "x", "input": {}, "extra": 1})] {
            let (status, body) = call(&s, bad).await;
            assert_eq!((status, body["error"]["type"].as_str()), (400, Some("bad_request")), "{body}");
        }
        let (status, body) = call(&s, json!({"tool": "get_weather", "input": {}, "session_id": "s".repeat(300)})).await;
        assert_eq!(status, 400, "{body}");

        // Every refusal is one tool_call.finished with its error type, as for a run.
        let finished = events_of(&mut events, "tool_call.finished", 5).await;
        let kinds: Vec<&str> = finished
            .iter()
            .map(|e| e["error"]["type"].as_str().unwrap_or("ok"))
            .collect();
        assert_eq!(kinds, ["input", "input", "unknown_tool", "unknown_tool", "ok"]);
        let metrics = s.metrics(Some(KEY)).await;
        assert!(
            metrics.contains("ptc_tool_calls_total{tool=\"list_orders\",backend=\"host\",outcome=\"limit\"} 1"),
            "{metrics}"
        );
    })
    .await
    .unwrap();
}

/// Waits until one approval waits, and returns it.
async fn one_waiting(s: &TestSidecar) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s
            .http
            .get(s.url("/v1/approvals"))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        let listed: Value = r.json().await.unwrap();
        if let Some(a) = listed["approvals"].as_array().and_then(|a| a.first()) {
            return a.clone();
        }
        assert!(Instant::now() < deadline, "no approval waited: {listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_gated_runtime_call_waits_for_a_person_and_is_denied_or_timed_out_with_ptc_off() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (dir, host) = (TempDir::new("native"), host_tools().await);
        // PTC off: no runner, and still the approvals of PTC_APPROVE_* hold a runtime's calls.
        let extra = [
            ("PTC_APPROVE_TOOLS", "list_orders"),
            ("PTC_APPROVE_DESTRUCTIVE", "true"),
            ("PTC_APPROVAL_TIMEOUT", "1"),
        ];
        let s = sidecar(&dir, &host, false, &extra).await;
        assert!(s.sidecar.state.runner.is_none());
        let caller = json!({"type": "code_execution_20260120", "tool_id": "srvtoolu_9"});
        let asked = {
            let s_http = s.http.clone();
            let url = s.url("/v1/tools/call");
            let body =
                json!({"tool": "list_orders", "input": {"customer": "ada"}, "caller": caller});
            tokio::spawn(async move {
                let r = s_http
                    .post(url)
                    .header("x-api-key", KEY)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            })
        };
        let approval = one_waiting(&s).await;
        assert_eq!(approval["tool"], "list_orders", "{approval}");
        let r = s
            .http
            .post(s.url(&format!(
                "/v1/approvals/{}",
                approval["id"].as_str().unwrap()
            )))
            .header("x-api-key", KEY)
            .json(&json!({"approved": false, "reason": "not today", "by": "test"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let (status, body) = asked.await.unwrap();
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["type"], "denied");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not today"),
            "{body}"
        );
        assert_eq!(host.calls.load(std::sync::atomic::Ordering::Relaxed), 0);

        // No one answers: denied after PTC_APPROVAL_TIMEOUT. A destructive MCP tool too.
        let started = Instant::now();
        let (status, body) = call(&s, json!({"tool": "demo__toggle_extra", "input": {}})).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["type"], "denied");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    })
    .await
    .unwrap();
}

/// The tools of a sidecar with PTC off, each with an input it takes.
fn input_for(name: &str) -> Value {
    match name {
        "complete" => json!({"answer": "done"}),
        "fail" => json!({"reason": "no"}),
        "get_weather" => json!({"city": "Paris"}),
        "list_orders" => json!({"customer": "ada"}),
        "demo__add" | "demo__multiply" => json!({"a": 2, "b": 3}),
        "demo__fail" => json!({"message": "as asked"}),
        "demo__lookup_country" => json!({"code": "FR"}),
        "demo__slow" => json!({"ms": 1}),
        "demo__stats" => json!({"numbers": [1, 2, 3]}),
        _ => json!({}),
    }
}

#[tokio::test]
async fn with_ptc_off_every_tool_offered_is_called_through_the_sidecar() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (dir, host) = (TempDir::new("native"), host_tools().await);
        let s = sidecar(&dir, &host, false, &[]).await;
        let (status, listed, _) = tools(&s, "format=anthropic").await;
        assert_eq!(status, 200);
        assert_eq!(listed["ptc_enabled"], false);
        let offered: BTreeSet<String> = names(&listed["tools"])
            .iter()
            .map(|n| n.to_string())
            .collect();
        // The native list of a catalog without PTC tools is the direct list.
        let (_, native, _) = tools(&s, "format=anthropic&ptc=native").await;
        assert_eq!(native["tools"], listed["tools"]);
        let mut expected: BTreeSet<String> = ["complete", "fail", "get_weather", "list_orders"]
            .into_iter()
            .map(String::from)
            .collect();
        expected.extend(DEMO_TOOLS.iter().map(|t| t.to_string()));
        assert_eq!(offered, expected);
        // toggle_extra last: it changes the demo server's tools.
        let mut order: Vec<&String> = offered
            .iter()
            .filter(|t| *t != "demo__toggle_extra")
            .collect();
        let toggle = "demo__toggle_extra".to_string();
        order.push(&toggle);
        for name in order {
            let (status, body) = call(&s, json!({"tool": name, "input": input_for(name)})).await;
            if name == "demo__fail" {
                // Reached the tool, which failed as asked.
                assert_eq!(
                    (status, &body["error"]["type"]),
                    (502, &json!("tool")),
                    "{name}: {body}"
                );
            } else {
                assert_eq!(status, 200, "{name}: {body}");
                assert!(body.get("result").is_some(), "{name}: {body}");
            }
        }
        assert_eq!(host.calls.load(std::sync::atomic::Ordering::Relaxed), 4);
    })
    .await
    .unwrap();
}
