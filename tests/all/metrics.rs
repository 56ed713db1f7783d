//! Observability: `GET /metrics` after a known workload through real HTTP, real python3 and a
//! real host tool server (the counters and histograms hold exactly its counts; the gauges show
//! the state; the route needs the API key unless `PTC_METRICS_PUBLIC=true`), and W3C trace
//! context from the caller's `traceparent` into the events and on to the host callback.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, tool};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

pub async fn sidecar(extra: &[(&str, &str)]) -> (TestSidecar, HostServer, TempDir) {
    let host = HostServer::start(vec![
        (
            "get-weather",
            tool(|input| json!({"result": {"city": input["city"]}})),
        ),
        (
            "explode",
            tool(|_| json!({"error": "the weather service is down"})),
        ),
        (
            "sleepy",
            std::sync::Arc::new(|_: Value| {
                Box::pin(async {
                    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
                    json!({"result": "slept"})
                })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = Value> + Send>>
            }),
        ),
    ])
    .await;
    let dir = TempDir::new("metrics");
    let manifest = json!({
        "callback": {"url": host.url()},
        "tools": [
            {"name": "get-weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            {"name": "explode", "input_schema": {"type": "object", "properties": {}}},
            {"name": "sleepy", "input_schema": {"type": "object", "properties": {}}}
        ]
    });
    let m = dir.write("tools.json", &manifest.to_string());
    let m = m.to_str().unwrap().to_string();
    let mut vars = vec![("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", m.as_str())];
    vars.extend_from_slice(extra);
    (TestSidecar::start(&vars).await, host, dir)
}

/// The lines of the exposition that start with `prefix`, sorted.
fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut v: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
    v.sort();
    v
}

async fn scrape(s: &TestSidecar, key: Option<&str>) -> (u16, String) {
    let mut r = s.http.get(s.url("/metrics"));
    if let Some(key) = key {
        r = r.header("X-API-Key", key);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn after_a_known_workload_the_counters_hold_its_exact_counts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, _dir) = sidecar(&[]).await;
        // 3 ok runs with 2 calls each; 1 run with a failing call and a refused unknown tool and
        // a bad argument (exit 0: each is caught); 1 error run; 1 timeout.
        for city in ["Oslo", "Rome", "Lima"] {
            let r = s
                .exec(&format!("await get_weather(city='{city}')\nawait get_weather(city='x')"))
                .await;
            assert_eq!(r["status"], "ok", "{r}");
        }
        let r = s
            .exec(
                "for f in (lambda: explode(), lambda: call_tool('no-such-tool'), lambda: get_weather(city=3)):\n    try:\n        await f()\n    except ToolError:\n        pass",
            )
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(s.exec("raise ValueError('x')").await["status"], "error");
        let r = s
            .exec_body(json!({"code": "import time\ntime.sleep(10)", "timeout_ms": 300}))
            .await;
        assert_eq!(r["status"], "timeout");

        let (status, text) = scrape(&s, None).await;
        assert_eq!(status, 200);
        assert_eq!(
            lines(&text, "ptc_runs_total"),
            [
                "ptc_runs_total{status=\"error\"} 1",
                "ptc_runs_total{status=\"ok\"} 4",
                "ptc_runs_total{status=\"timeout\"} 1",
            ]
        );
        assert_eq!(lines(&text, "ptc_run_duration_seconds_count"), ["ptc_run_duration_seconds_count 6"]);
        assert_eq!(
            lines(&text, "ptc_tool_calls_total"),
            [
                "ptc_tool_calls_total{tool=\"(unknown)\",backend=\"none\",outcome=\"unknown_tool\"} 1",
                "ptc_tool_calls_total{tool=\"explode\",backend=\"host\",outcome=\"tool\"} 1",
                "ptc_tool_calls_total{tool=\"get-weather\",backend=\"host\",outcome=\"ok\"} 6",
                "ptc_tool_calls_total{tool=\"get-weather\",backend=\"none\",outcome=\"input\"} 1",
            ]
        );
        // Refusals never reach a backend, so they have no latency.
        assert_eq!(
            lines(&text, "ptc_tool_call_duration_seconds_count"),
            [
                "ptc_tool_call_duration_seconds_count{backend=\"host\"} 7",
                "ptc_tool_call_duration_seconds_count{backend=\"mcp\"} 0",
            ]
        );
        // The slowest bucket holds every run; the +Inf bucket equals the count.
        assert!(text.contains("ptc_run_duration_seconds_bucket{le=\"+Inf\"} 6"), "{text}");
        assert!(text.contains("ptc_runs_in_flight 0\n"), "{text}");
        assert!(text.contains("ptc_runs_queued 0\n"), "{text}");
        assert!(text.contains("ptc_catalog_version 1\n"), "{text}");
        assert!(text.contains("ptc_sandbox_info{mode=\"best-effort\""), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn metrics_need_the_key_unless_made_public() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, _dir) = sidecar(&[("PTC_API_KEY", "k-metrics")]).await;
        assert_eq!(scrape(&s, None).await.0, 401);
        let (status, text) = scrape(&s, Some("k-metrics")).await;
        assert_eq!((status, text.contains("ptc_runs_in_flight")), (200, true));
        let (s, _host, _dir) =
            sidecar(&[("PTC_API_KEY", "k-metrics"), ("PTC_METRICS_PUBLIC", "true")]).await;
        let (status, text) = scrape(&s, None).await;
        assert_eq!((status, text.contains("ptc_runs_in_flight")), (200, true));
        // Only /metrics: the rest still needs the key.
        let r = s.http.get(s.url("/v1/tools")).send().await.unwrap();
        assert_eq!(r.status(), 401);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_traceparent_in_is_the_runs_trace_in_the_events_and_at_the_host_callback() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, host, _dir) = sidecar(&[]).await;
        let mut events = s.sidecar.state.events.subscribe();
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let parent = "00f067aa0ba902b7";
        let r = s
            .http
            .post(s.url("/v1/exec_code"))
            .header("traceparent", format!("00-{trace}-{parent}-01"))
            .json(&json!({"code": "await asyncio.gather(get_weather(city='a'), get_weather(city='b'))"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut seen: Vec<Value> = Vec::new();
        while seen.len() < 6 {
            seen.push(serde_json::from_str(&events.recv().await.unwrap()).unwrap());
        }
        let of = |kind: &str| -> Vec<&Value> { seen.iter().filter(|e| e["type"] == kind).collect() };
        assert!(seen.iter().all(|e| e["trace_id"] == trace), "{seen:#?}");
        // The run is a child of the caller's span; each call a child of the run.
        let run_span = of("exec.started")[0]["span_id"].as_str().unwrap().to_string();
        assert_eq!(of("exec.started")[0]["parent_span_id"], parent);
        assert_eq!(of("exec.finished")[0]["span_id"], run_span.as_str());
        let calls = of("tool_call.finished");
        assert_eq!(calls.len(), 2);
        let mut call_spans: Vec<&str> = calls.iter().map(|e| e["span_id"].as_str().unwrap()).collect();
        for e in &calls {
            assert_eq!(e["parent_span_id"], run_span.as_str(), "{e}");
        }
        for e in of("tool_call.started") {
            assert!(call_spans.contains(&e["span_id"].as_str().unwrap()), "{e}");
        }
        // The host got each call's own span as its traceparent.
        let mut at_host: Vec<String> = host.traceparents.lock().unwrap().iter().flatten().cloned().collect();
        at_host.sort();
        call_spans.sort();
        let expected: Vec<String> = call_spans.iter().map(|s| format!("00-{trace}-{s}-01")).collect();
        assert_eq!(at_host, expected);

        // Without a traceparent (or with a broken one) the run starts a trace of its own.
        let r = s
            .http
            .post(s.url("/v1/exec_code"))
            .header("traceparent", "not-a-trace")
            .json(&json!({"code": "pass"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let started: Value = loop {
            let e: Value = serde_json::from_str(&events.recv().await.unwrap()).unwrap();
            if e["type"] == "exec.started" {
                break e;
            }
        };
        assert_eq!(started["trace_id"].as_str().unwrap().len(), 32);
        assert_ne!(started["trace_id"], trace);
        assert_eq!(started.get("parent_span_id"), None);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn ptc_log_format_json_writes_one_object_per_line_and_a_bad_value_is_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("logjson");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PTC_LOG_FORMAT", "json")
            .env("PTC_LISTEN", "127.0.0.1:0")
            .env("PTC_RUNTIME_DIR", dir.0.join("rt"))
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
        let first = lines.next_line().await.unwrap().unwrap();
        let line: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
        assert_eq!(
            (line["level"].as_str(), line["fields"]["message"].as_str()),
            (Some("INFO"), Some("ptc-sidecar serving")),
            "{line}"
        );
        child.kill().await.unwrap();

        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
            .arg("tools")
            .env_clear()
            .env("PTC_LOG_FORMAT", "xml")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("ptc-sidecar: PTC_LOG_FORMAT=\"xml\" is not valid: text"),
            "{err}"
        );
    })
    .await
    .unwrap();
}

/// A small OTLP/HTTP receiver: every span of every `POST /v1/traces` (JSON), flattened.
async fn otlp_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use axum::{Json, Router, extract::State, routing::post};
    let spans = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let router = Router::new()
        .route(
            "/v1/traces",
            post(
                |State(spans): State<std::sync::Arc<std::sync::Mutex<Vec<Value>>>>,
                 Json(body): Json<Value>| async move {
                    for rs in body["resourceSpans"].as_array().into_iter().flatten() {
                        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                            for span in ss["spans"].as_array().into_iter().flatten() {
                                let mut span = span.clone();
                                span["service"] = rs["resource"]["attributes"].clone();
                                spans.lock().unwrap().push(span);
                            }
                        }
                    }
                    Json(json!({}))
                },
            ),
        )
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, spans)
}

// Multi-threaded: the exporter's thread hands its requests to the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_collector_with_the_callers_trace() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (collector, spans) = otlp_receiver().await;
        let (s, _host, _dir) = sidecar(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
            ("OTEL_SERVICE_NAME", "ptc-test"),
        ])
        .await;
        let trace = "0af7651916cd43dd8448eb211c80319c";
        let parent = "b7ad6b7169203331";
        let r = s
            .http
            .post(s.url("/v1/exec_code"))
            .header("traceparent", format!("00-{trace}-{parent}-01"))
            .json(&json!({"code": "await asyncio.gather(get_weather(city='a'), explode(), return_exceptions=True)"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let result: Value = r.json().await.unwrap();
        // Both calls finish (gather waits for both): three spans.
        assert_eq!(result["tool_calls"].as_array().map(Vec::len), Some(2), "{result}");
        let arrived = async {
            while spans.lock().unwrap().len() < 3 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(15), arrived)
            .await
            .is_err()
        {
            let names: Vec<Value> = spans.lock().unwrap().iter().map(|s| s["name"].clone()).collect();
            panic!("three spans did not reach the collector: {names:?}; the run: {result}");
        }
        let spans = spans.lock().unwrap().clone();
        assert!(spans.iter().all(|sp| sp["traceId"] == trace), "{spans:#?}");
        let run: Vec<&Value> = spans
            .iter()
            .filter(|sp| sp["name"] == "exec_code")
            .collect();
        assert_eq!(run.len(), 1, "{spans:#?}");
        assert_eq!(run[0]["parentSpanId"], parent);
        let run_span = run[0]["spanId"].as_str().unwrap();
        let mut calls: Vec<(&str, &Value)> = spans
            .iter()
            .filter(|sp| sp["parentSpanId"] == run_span)
            .map(|sp| (sp["name"].as_str().unwrap(), &sp["status"]))
            .collect();
        calls.sort_by_key(|(name, _)| *name);
        assert_eq!(calls.len(), 2, "{spans:#?}");
        assert_eq!(calls[0].0, "tool_call explode");
        // The failed call is an error span with the tool's message.
        assert_eq!(
            calls[0].1["message"], "the weather service is down",
            "{spans:#?}"
        );
        assert_eq!(calls[1].0, "tool_call get-weather");
        assert!(
            spans[0]["service"].to_string().contains("ptc-test"),
            "{}",
            spans[0]["service"]
        );
        s.sidecar.flush().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_dashboard_state_shows_a_run_its_parallel_calls_and_the_error() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (s, _host, _dir) = sidecar(&[("PTC_AGENT_ID", "dash-agent")]).await;
        // The first look starts the board; it shows what happens from then on.
        let empty = s.get_json("/v1/dashboard/state").await;
        assert_eq!(empty["runs"], json!([]), "{empty}");
        let r = s
            .exec("await asyncio.gather(sleepy(), sleepy(), explode(), return_exceptions=True)")
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        let view = loop {
            let v = s.get_json("/v1/dashboard/state").await;
            if v["runs"][0]["status"] == "ok" {
                break v;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let run = &view["runs"][0];
        assert_eq!(run["agent"], "dash-agent");
        let calls = run["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 3, "{run}");
        // Started together, the two 150 ms calls overlap in the waterfall.
        let spans: Vec<(f64, f64)> = calls
            .iter()
            .filter(|c| c["tool"] == "sleepy")
            .map(|c| {
                let start = c["offset_ms"].as_f64().unwrap();
                (start, start + c["duration_ms"].as_f64().unwrap())
            })
            .collect();
        assert_eq!(spans.len(), 2, "{run}");
        assert!(
            spans[0].0.max(spans[1].0) < spans[0].1.min(spans[1].1),
            "{run}"
        );
        let failed: Vec<(&str, &str)> = calls
            .iter()
            .filter(|c| c["ok"] == false)
            .map(|c| (c["tool"].as_str().unwrap(), c["error"].as_str().unwrap()))
            .collect();
        assert_eq!(failed, [("explode", "the weather service is down")]);
        let tools: Vec<(&str, u64, u64)> = view["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["tool"].as_str().unwrap(),
                    t["calls"].as_u64().unwrap(),
                    t["errors"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(tools, [("sleepy", 2, 0), ("explode", 1, 1)]);
        assert!(view["agents"]["dash-agent"].is_object(), "{view}");
        // Filters: a status that no run has shows none.
        let none = s.get_json("/v1/dashboard/state?status=timeout").await;
        assert_eq!(none["runs"], json!([]));
    })
    .await
    .unwrap();
}

/// `ptc-sidecar dashboard` on a port of the system's choosing: the process and its address.
pub async fn start_dashboard(
    redis_url: &str,
    extra: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
        .args(["dashboard", "--listen", "127.0.0.1:0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REDIS_URL", redis_url)
        .envs(extra.iter().copied())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let line = lines.next_line().await.unwrap().unwrap();
    let url = line
        .rsplit(' ')
        .next()
        .filter(|u| u.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (child, url)
}

#[tokio::test]
async fn the_dashboard_command_shows_every_agents_runs_from_history_and_live() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = crate::common::TestRedis::any();
        let (a1, a2) = (
            crate::common::unique("dash-a"),
            crate::common::unique("dash-b"),
        );
        let (s1, _h1, _d1) = sidecar(&[
            ("REDIS_URL", redis.url.as_str()),
            ("PTC_AGENT_ID", a1.as_str()),
        ])
        .await;
        let (s2, _h2, _d2) = sidecar(&[
            ("REDIS_URL", redis.url.as_str()),
            ("PTC_AGENT_ID", a2.as_str()),
        ])
        .await;
        // Before the dashboard starts: it must find this run in a1's stream.
        let r = s1.exec("await get_weather(city='x')").await;
        assert_eq!(r["status"], "ok", "{r}");
        let published = async {
            while s1.health().await["events"]["published"]
                .as_u64()
                .unwrap_or(0)
                < 4
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), published)
            .await
            .expect("published");
        let (_dash, url) = start_dashboard(&redis.url, &[]).await;
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let state = |agent: String| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                http.get(format!("{url}/v1/dashboard/state?agent={agent}"))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            }
        };
        // After it started: a2's failing run comes live.
        let r = s2.exec("await explode()").await;
        assert_eq!(r["status"], "error", "{r}");
        let live = async {
            loop {
                let v = state(a2.clone()).await;
                if v["runs"][0]["status"] == "error" {
                    return v;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        let v2 = tokio::time::timeout(std::time::Duration::from_secs(10), live)
            .await
            .expect("live run");
        assert_eq!(v2["runs"][0]["status"], "error", "{v2}");
        assert_eq!(
            v2["runs"][0]["calls"][0]["error"],
            "the weather service is down"
        );
        let v1 = state(a1.clone()).await;
        let runs = v1["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{v1}");
        assert_eq!(runs[0]["status"], "ok");
        assert_eq!(runs[0]["calls"][0]["tool"], "get-weather");
        assert!(
            v1["agents"][&a1].is_object() && v1["agents"][&a2].is_object(),
            "{v1}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_dashboard_command_requires_the_key_it_is_given_for_its_data_only() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = crate::common::TestRedis::any();
        let (_dash, url) = start_dashboard(&redis.url, &[("PTC_API_KEY", "k-dash")]).await;
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let status = |path: &str, key: Option<&str>| {
            let mut r = http.get(format!("{url}{path}"));
            if let Some(key) = key {
                r = r.header("Authorization", format!("Bearer {key}"));
            }
            async move { r.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status("/v1/dashboard/state", None).await, 401);
        assert_eq!(
            status("/v1/dashboard/state", Some("k-dash-wrong")).await,
            401
        );
        assert_eq!(status("/v1/dashboard/state", Some("k-dash")).await, 200);
        // The page holds no data: it loads without the key, and asks for it.
        assert_eq!(status("/dashboard", None).await, 200);
    })
    .await
    .unwrap();
}
