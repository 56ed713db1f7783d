//! Tool events against a real Redis: delivery to the stream and the channel, order, a Redis
//! that goes away mid-run and comes back, a Redis that is never there.

use crate::common::{TEST_TIMEOUT, TestRedis, unique};
use ptc_sidecar::events::{Event, Events, EventsConfig};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn start(redis_url: &str, agent: &str, hold: usize) -> (Events, CancellationToken) {
    let shutdown = CancellationToken::new();
    let events = Events::start(
        EventsConfig {
            agent_id: agent.into(),
            redis_url: Some(redis_url.into()),
            stream_maxlen: 10_000,
            bodies: false,
            hold,
        },
        shutdown.clone(),
    )
    .unwrap();
    (events, shutdown)
}

fn emit_numbered(events: &Events, from: usize, to: usize) {
    for i in from..to {
        let mut e = Event::new("tool_call.finished");
        e.call_id = Some(format!("c{i}"));
        events.emit(e);
    }
}

/// The `call_id`s in the agent's stream, in stream order.
async fn stream_calls(redis: &TestRedis, agent: &str) -> Vec<String> {
    let mut conn = redis.connection().await;
    redis
        .stream_events(&mut conn, agent)
        .await
        .iter()
        .map(|v| v["call_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn wait_for(mut check: impl AsyncFnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn events_reach_the_stream_and_the_channel_in_order() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = TestRedis::any();
        let agent = unique("agent");
        let client = redis::Client::open(redis.url.as_str()).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub
            .subscribe(format!("ptc:events:{agent}"))
            .await
            .unwrap();
        let (events, _stop) = start(&redis.url, &agent, 1000);
        emit_numbered(&events, 0, 300);
        let want: Vec<String> = (0..300).map(|i| format!("c{i}")).collect();
        wait_for(
            async || stream_calls(&redis, &agent).await.len() >= 300,
            "300 events in the stream",
        )
        .await;
        assert_eq!(stream_calls(&redis, &agent).await, want);
        use futures_util::StreamExt;
        let mut messages = pubsub.on_message();
        for i in 0..300 {
            let msg = messages.next().await.unwrap();
            let v: Value = serde_json::from_str(&msg.get_payload::<String>().unwrap()).unwrap();
            assert_eq!(v["call_id"], format!("c{i}"));
            assert_eq!(v["agent_id"], agent.as_str());
            assert_eq!(v["v"], 1);
        }
        assert_eq!(events.stats().dropped.load(Ordering::Relaxed), 0);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn redis_going_away_mid_run_loses_nothing_within_the_bound() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut redis = TestRedis::own();
        let agent = unique("agent");
        let (events, _stop) = start(&redis.url, &agent, 1000);
        emit_numbered(&events, 0, 100);
        wait_for(
            async || stream_calls(&redis, &agent).await.len() >= 100,
            "the first 100",
        )
        .await;

        redis.stop();
        let t = Instant::now();
        emit_numbered(&events, 100, 600);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "emitting never waits on Redis"
        );
        wait_for(
            async || !events.stats().connected.load(Ordering::Relaxed),
            "the writer noticing",
        )
        .await;

        // A fresh Redis (it keeps nothing on disk): everything emitted while it was away arrives,
        // in order, once it is back.
        redis.start();
        wait_for(
            async || {
                stream_calls(&redis, &agent)
                    .await
                    .iter()
                    .any(|c| c == "c599")
            },
            "the held events",
        )
        .await;
        let got = stream_calls(&redis, &agent).await;
        let tail: Vec<&String> = got.iter().skip_while(|c| *c != "c100").collect();
        let want: Vec<String> = (100..600).map(|i| format!("c{i}")).collect();
        assert_eq!(tail, want.iter().collect::<Vec<_>>());
        assert_eq!(events.stats().dropped.load(Ordering::Relaxed), 0);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_redis_that_is_never_there_costs_nothing_but_counts_drops() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (events, _stop) = start(&format!("redis://127.0.0.1:{port}/0"), &unique("agent"), 50);
        let mut live = events.subscribe();
        let t = Instant::now();
        emit_numbered(&events, 0, 200);
        assert!(t.elapsed() < Duration::from_millis(500));
        wait_for(
            async || events.stats().dropped.load(Ordering::Relaxed) == 150,
            "150 dropped beyond the hold of 50",
        )
        .await;
        assert_eq!(events.stats().published.load(Ordering::Relaxed), 0);
        let health = events.health();
        assert_eq!(health["connected"], false);
        assert!(health["last_error"].as_str().unwrap().len() > 3, "{health}");
        // In-process subscribers get every event regardless.
        let first: Value = serde_json::from_str(&live.recv().await.unwrap()).unwrap();
        assert_eq!(first["call_id"], "c0");
    })
    .await
    .unwrap();
}

/// A run with tool calls, through the real sidecar: its events in Redis nest calls under the run,
/// the same events stream at `GET /v1/events`, and `ptc-sidecar events --json` prints them.
#[tokio::test]
async fn a_run_reports_itself_to_redis_sse_and_the_events_command() {
    use crate::common::{HostServer, TempDir, TestSidecar, tool};
    use serde_json::json;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = TestRedis::any();
        let agent = unique("agent");
        let host = HostServer::start(vec![
            ("ping", tool(|_| json!({"result": "pong"}))),
            ("boom", tool(|_| json!({"error": "it broke"}))),
        ])
        .await;
        let dir = TempDir::new("events");
        let manifest = json!({"callback": {"url": host.url()}, "tools": [
            {"name": "ping", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            {"name": "boom", "input_schema": {"type": "object", "properties": {}}}
        ]});
        let m = dir.write("tools.json", &manifest.to_string());
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", m.to_str().unwrap()),
            ("REDIS_URL", &redis.url),
            ("PTC_AGENT_ID", &agent),
            ("PTC_EVENTS_BODIES", "true"),
        ])
        .await;

        // The command-line watcher, subscribed before the run.
        let mut watcher = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
            .args(["events", "--json", "--agent", &agent])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("REDIS_URL", &redis.url)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // The SSE stream, opened before the run.
        let mut sse = s.http.get(s.url("/v1/events")).send().await.unwrap();
        assert_eq!(sse.headers()["content-type"], "text/event-stream");
        tokio::time::sleep(Duration::from_millis(300)).await;

        let r = s.exec("print(await ping(n=1))\ntry:\n    await boom()\nexcept ToolError:\n    pass\n").await;
        assert_eq!(r["status"], "ok", "{r}");

        let want_types = ["exec.started", "tool_call.started", "tool_call.finished", "tool_call.started", "tool_call.finished", "exec.finished"];
        let mut conn = redis.connection().await;
        let mut from_stream: Vec<Value> = Vec::new();
        wait_for(async || {
            from_stream = redis.stream_events(&mut conn, &agent).await;
            from_stream.len() >= want_types.len()
        }, "the run's events in Redis").await;
        let types: Vec<&str> = from_stream.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, want_types);
        let exec_id = from_stream[0]["exec_id"].as_str().unwrap().to_string();
        assert!(from_stream.iter().all(|e| e["exec_id"] == exec_id.as_str() && e["agent_id"] == agent.as_str()));
        let ping_done = &from_stream[2];
        assert_eq!((ping_done["tool"].as_str(), ping_done["source"].as_str(), ping_done["ok"].as_bool()), (Some("ping"), Some("host"), Some(true)));
        assert_eq!(ping_done["call_id"], from_stream[1]["call_id"]);
        assert_eq!(ping_done["result"], "pong", "bodies are on");
        assert_eq!(from_stream[1]["args"], json!({"n": 1}));
        assert_eq!(from_stream[1]["args_bytes"], 7);
        assert_eq!(from_stream[4]["error"]["message"], "it broke");
        let finished = &from_stream[5];
        assert_eq!((finished["status"].as_str(), finished["tool_calls"].as_u64(), finished["stdout_bytes"].as_u64()), (Some("ok"), Some(2), Some(5)));

        // SSE: the same events, in order.
        let mut text = String::new();
        while text.matches("data: ").count() < want_types.len() {
            let chunk = sse.chunk().await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let sse_types: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap()["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(&sse_types[..want_types.len()], want_types);

        // The watcher printed them too, one JSON object per line.
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(watcher.stdout.take().unwrap()).lines();
        for want in want_types {
            let line = lines.next_line().await.unwrap().unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["type"], want);
        }
        let _ = watcher.kill().await;
    })
    .await
    .unwrap();
}
