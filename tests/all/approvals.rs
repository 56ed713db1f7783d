//! Live approval of one call (`PTC_APPROVE_TOOLS`, `PTC_APPROVE_DESTRUCTIVE`), through the real
//! sidecar, real python3 children, a host tool server that counts what reached it, and the
//! control API a person answers through (`GET /v1/approvals`, `POST /v1/approvals/{id}`, the
//! attached stream's `approval_required`); SIGTERM with the real binary.

use super::common::{
    HostServer, HostTool, Sse, TEST_TIMEOUT, TempDir, TestRedis, TestSidecar, assert_nothing_left,
    tool,
};
use super::serving::Serving;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the host server was asked, by tool, in order.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

fn recording(name: &'static str, seen: &Seen) -> (&'static str, HostTool) {
    let seen = seen.clone();
    (
        name,
        tool(move |input| {
            seen.lock().unwrap().push((name.to_string(), input.clone()));
            json!({"result": {"done": name, "input": input}})
        }),
    )
}

/// A sidecar whose `delete_item` needs a person, with `list_items` beside it.
async fn sidecar(extra: &[(&str, &str)]) -> (TestSidecar, HostServer, Seen, TempDir) {
    let seen: Seen = Arc::default();
    let host = HostServer::start(vec![
        recording("delete_item", &seen),
        recording("list_items", &seen),
    ])
    .await;
    let dir = TempDir::new("approvals");
    let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
    let manifest = json!({"callback": {"url": host.url()}, "tools": [
        {"name": "delete_item", "description": "Delete one item.", "input_schema": schema},
        {"name": "list_items", "description": "List items.", "input_schema": schema},
    ]});
    let path = dir.write("tools.json", &manifest.to_string());
    let path = path.to_str().unwrap().to_string();
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", path.as_str()),
        ("PTC_APPROVE_TOOLS", "delete_*"),
    ];
    vars.extend_from_slice(extra);
    (TestSidecar::start(&vars).await, host, seen, dir)
}

fn calls_of(seen: &Seen, tool: &str) -> Vec<Value> {
    let seen = seen.lock().unwrap();
    seen.iter()
        .filter(|(t, _)| t == tool)
        .map(|(_, i)| i.clone())
        .collect()
}

/// Waits until `n` approvals wait, and returns them.
async fn waiting(s: &TestSidecar, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = s.get_json("/v1/approvals").await;
        let all = listed["approvals"].as_array().unwrap().clone();
        if all.len() >= n {
            assert_eq!(all.len(), n, "{listed}");
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "{n} approvals never waited: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn answer(s: &TestSidecar, id: &str, body: Value) -> (u16, Value) {
    let r = s
        .http
        .post(s.url(&format!("/v1/approvals/{id}")))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn run(s: &TestSidecar, code: &str) -> tokio::task::JoinHandle<Value> {
    let (http, url, code) = (s.http.clone(), s.url("/v1/exec_code"), code.to_string());
    tokio::spawn(async move {
        let r = http
            .post(url)
            .json(&json!({"code": code}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    })
}

#[tokio::test]
async fn a_person_approves_one_call_while_the_runs_other_calls_go_on() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, seen, _dir) = sidecar(&[]).await;
        let mut events = s.sidecar.state.events.subscribe();
        let code = r#"
async def others():
    n = 0
    for i in range(3):
        await list_items(id=i)
        n += 1
    return n
deleted, listed = await asyncio.gather(delete_item(id=7), others())
print(deleted["done"], deleted["input"], listed)
"#;
        let result = run(&s, code);
        let [approval] = waiting(&s, 1).await.try_into().unwrap();
        // Only the call that needs a person waits: the run's other calls went on.
        let deadline = Instant::now() + Duration::from_secs(10);
        while calls_of(&seen, "list_items").len() < 3 {
            assert!(Instant::now() < deadline, "the other calls waited too");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(calls_of(&seen, "delete_item").is_empty());
        assert_eq!(approval["tool"], "delete_item");
        assert_eq!(approval["args"], json!({"id": 7}));
        assert_eq!(approval["session"], Value::Null);
        assert!(
            approval["run"].as_str().unwrap().starts_with('r'),
            "{approval}"
        );
        assert!(approval["agent"].is_string() && approval["requested_at"].is_u64());
        let id = approval["id"].as_str().unwrap();

        let (status, body) = answer(
            &s,
            id,
            json!({"approved": true, "reason": "ok", "by": "ana"}),
        )
        .await;
        assert_eq!(
            (status, body["approved"].clone()),
            (200, json!(true)),
            "{body}"
        );
        // The first answer wins: a second is told nothing waits under that id.
        let (status, body) = answer(&s, id, json!({"approved": false})).await;
        assert_eq!(status, 404, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no approval")
        );

        let result = result.await.unwrap();
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(result["stdout"], "delete_item {'id': 7} 3\n");
        assert_eq!(calls_of(&seen, "delete_item"), [json!({"id": 7})]);
        assert_eq!(waiting(&s, 0).await.len(), 0);

        let mut kinds = Vec::new();
        while let Ok(e) = events.try_recv() {
            let e: Value = serde_json::from_str(&e).unwrap();
            if e["type"].as_str().unwrap().starts_with("approval.") {
                kinds.push(e);
            }
        }
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert_eq!(kinds[0]["type"], "approval.requested");
        assert_eq!(kinds[0]["approval_id"], id);
        let decided = &kinds[1];
        assert_eq!(decided["type"], "approval.decided");
        assert_eq!(
            (
                &decided["approved"],
                &decided["door"],
                &decided["by"],
                &decided["reason"]
            ),
            (&json!(true), &json!("http"), &json!("ana"), &json!("ok"))
        );
        assert!(decided["waited_ms"].as_f64().unwrap() > 0.0);
        let metrics = s.metrics(None).await;
        assert!(
            metrics.contains("ptc_approvals_total{outcome=\"approved\"} 1"),
            "{metrics}"
        );
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_denial_reaches_the_code_with_its_reason_and_the_code_goes_on() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, seen, _dir) = sidecar(&[]).await;
        let code = r#"
try:
    await delete_item(id=1)
except ToolDenied as e:
    print(type(e).__name__, isinstance(e, ToolError), e.type, str(e))
print(await list_items(id=2))
"#;
        let result = run(&s, code);
        let [approval] = waiting(&s, 1).await.try_into().unwrap();
        let id = approval["id"].as_str().unwrap();
        let (status, _) = answer(
            &s,
            id,
            json!({"approved": false, "reason": "not on Fridays"}),
        )
        .await;
        assert_eq!(status, 200);
        let result = result.await.unwrap();
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(
            result["stdout"],
            "ToolDenied True denied delete_item: a person denied this call: not on Fridays\n\
             {'done': 'list_items', 'input': {'id': 2}}\n"
        );
        assert!(
            calls_of(&seen, "delete_item").is_empty(),
            "a denied call reached the host"
        );
        // The run's record says the call failed.
        let calls = result["tool_calls"].as_array().unwrap();
        assert_eq!(
            (calls[0]["tool"].clone(), calls[0]["ok"].clone()),
            (json!("delete_item"), json!(false))
        );
        // Bad answers say what to send.
        let (status, body) = answer(&s, "ap-nope", json!({"approved": "yes"})).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("\"approved\": true|false")
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_unanswered_call_is_denied_at_the_approval_timeout_and_the_run_clock_stood_still() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // The run has 1 s; the call waits 2 s for a person who never comes.
        let (s, _host, seen, _dir) =
            sidecar(&[("PTC_APPROVAL_TIMEOUT", "2"), ("PTC_TIMEOUT", "1")]).await;
        let started = Instant::now();
        let result = s
            .exec("try:\n    await delete_item(id=1)\nexcept ToolDenied as e:\n    print(e)\nprint('after')\n")
            .await;
        let took = started.elapsed();
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(
            result["stdout"],
            "delete_item: not approved: no one answered within 2 s (PTC_APPROVAL_TIMEOUT)\nafter\n"
        );
        assert!(took >= Duration::from_secs(2), "{took:?}");
        assert!(calls_of(&seen, "delete_item").is_empty());
        // The clock stands still only while a call waits: code still has its 1 s.
        let result = s.exec("import time\ntime.sleep(3)\n").await;
        assert_eq!(result["status"], "timeout", "{result}");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn two_approvals_of_one_gathered_run_are_answered_in_either_order() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, seen, _dir) = sidecar(&[]).await;
        let code = r#"
async def attempt(i):
    try:
        return (await delete_item(id=i))["input"]["id"]
    except ToolDenied as e:
        return "denied %d: %s" % (i, e)
print(await asyncio.gather(attempt(1), attempt(2)))
"#;
        let result = run(&s, code);
        let both = waiting(&s, 2).await;
        let of = |i: i64| {
            both.iter()
                .find(|a| a["args"]["id"] == i)
                .map(|a| a["id"].as_str().unwrap().to_string())
                .unwrap()
        };
        // The later call first: denied; then the earlier one: approved.
        assert_eq!(
            answer(&s, &of(2), json!({"approved": false, "reason": "no"}))
                .await
                .0,
            200
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(calls_of(&seen, "delete_item").is_empty());
        assert_eq!(answer(&s, &of(1), json!({"approved": true})).await.0, 200);
        let result = result.await.unwrap();
        assert_eq!(
            result["stdout"], "[1, 'denied 2: delete_item: a person denied this call: no']\n",
            "{result}"
        );
        assert_eq!(calls_of(&seen, "delete_item"), [json!({"id": 1})]);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_answer_after_its_run_ended_finds_nothing_and_the_event_says_why() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, seen, _dir) = sidecar(&[]).await;
        let mut events = s.sidecar.state.events.subscribe();
        // The run ends without awaiting its call: the call, and its approval, go with it.
        let code =
            "t = asyncio.ensure_future(delete_item(id=3))\nawait asyncio.sleep(1)\nprint('bye')\n";
        let result = run(&s, code);
        let [approval] = waiting(&s, 1).await.try_into().unwrap();
        let result = result.await.unwrap();
        assert_eq!(result["stdout"], "bye\n", "{result}");
        let id = approval["id"].as_str().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let decided = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "approval.decided" {
                break e;
            }
            assert!(Instant::now() < deadline);
        };
        assert_eq!(
            (&decided["door"], &decided["approved"]),
            (&json!("run_ended"), &json!(false))
        );
        let (status, _) = answer(&s, id, json!({"approved": true})).await;
        assert_eq!(status, 404);
        assert!(calls_of(&seen, "delete_item").is_empty());
        assert_eq!(waiting(&s, 0).await.len(), 0);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_attached_stream_asks_with_approval_required() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, seen, _dir) = sidecar(&[]).await;
        let mut sse = Sse::open(&s, "print((await delete_item(id=5))['input'])").await;
        let mut asked = None;
        let mut done = None;
        while let Some((name, data)) = sse.next().await {
            match name.as_str() {
                "approval_required" => {
                    // The same object GET /v1/approvals lists.
                    let [listed] = waiting(&s, 1).await.try_into().unwrap();
                    assert_eq!(data, listed);
                    let id = data["id"].as_str().unwrap();
                    assert_eq!(answer(&s, id, json!({"approved": true})).await.0, 200);
                    asked = Some(data);
                }
                "done" => done = Some(data),
                _ => {}
            }
        }
        assert_eq!(asked.unwrap()["args"], json!({"id": 5}));
        assert_eq!(done.unwrap()["stdout"], "{'id': 5}\n");
        assert_eq!(calls_of(&seen, "delete_item").len(), 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn sigterm_denies_a_waiting_call_as_shutting_down_and_leaves_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("approvals-term");
        let redis = TestRedis::any();
        // The demo server's toggle_extra is annotated destructiveHint: it needs a person.
        let mut s = Serving::start(&dir, &redis, &[("PTC_APPROVE_DESTRUCTIVE", "true")]).await;
        let run = s.exec(
            "print(await demo__add(a=1, b=2))\ntry:\n    await demo__toggle_extra()\nexcept ToolDenied as e:\n    print(e)\n",
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let listed: Value = s.http.get(s.url("/v1/approvals")).send().await.unwrap().json().await.unwrap();
            if let Some(a) = listed["approvals"].as_array().and_then(|a| a.first()) {
                assert_eq!(a["tool"], "demo__toggle_extra");
                break;
            }
            assert!(Instant::now() < deadline, "no approval waited: {listed}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let family = s.family_with(&["ptc-demo-mcp"]).await;
        s.signal(libc::SIGTERM);
        let (status, result) = run.await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(
            result["stdout"],
            "3\ndemo__toggle_extra: not approved: the sidecar is shutting down, so no one can \
             approve this call now; try again in a later run\n"
        );
        assert_eq!(s.exit_code().await, Some(0));
        let pids: Vec<i32> = family.iter().map(|(p, _)| *p).collect();
        assert!(super::procs::wait_dead(&pids).await.is_empty(), "{family:?}");
    })
    .await
    .unwrap();
}
