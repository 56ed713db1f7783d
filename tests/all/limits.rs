//! Limits per tool (`PTC_TOOL_LIMITS`) through the real sidecar and a host tool server that
//! measures what reached it: calls in flight at once, starts per second, calls per run, a wait
//! past the call's deadline, limits shared across runs, the file form's hot reload, and a bad
//! value stopping startup.

use super::common::{HostServer, HostTool, TEST_TIMEOUT, TempDir, TestSidecar, config};
use pretty_assertions::assert_eq;
use ptc_sidecar::app::Sidecar;
use ptc_sidecar::config::Config;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the host saw: calls in flight now and at most, and when each call started.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
    starts: Mutex<Vec<Instant>>,
}

/// A host tool that takes `ms` and records itself in `gauge`.
fn measured(gauge: &Arc<Gauge>, ms: u64) -> HostTool {
    let gauge = gauge.clone();
    Arc::new(move |_input| {
        let gauge = gauge.clone();
        Box::pin(async move {
            gauge.starts.lock().unwrap().push(Instant::now());
            let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
            gauge.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            gauge.now.fetch_sub(1, Ordering::SeqCst);
            json!({"result": "ok"})
        })
    })
}

struct Limited {
    s: TestSidecar,
    slow: Arc<Gauge>,
    tick: Arc<Gauge>,
    _host: HostServer,
    dir: TempDir,
}

/// `slow` (400 ms), `tick` (instant) and `free` (never limited), with `limits` as
/// `PTC_TOOL_LIMITS` (inline JSON, or a file's path).
async fn limited(limits: &str, extra: &[(&str, &str)]) -> Limited {
    let (slow, tick) = (Arc::new(Gauge::default()), Arc::new(Gauge::default()));
    let free = Arc::new(Gauge::default());
    let host = HostServer::start(vec![
        ("slow", measured(&slow, 400)),
        ("tick", measured(&tick, 0)),
        ("free", measured(&free, 0)),
    ])
    .await;
    let dir = TempDir::new("limits");
    let empty = json!({"type": "object", "properties": {}});
    let tools: Vec<Value> = ["slow", "tick", "free"]
        .iter()
        .map(|n| json!({"name": n, "description": n, "input_schema": empty}))
        .collect();
    let manifest = json!({"callback": {"url": host.url()}, "tools": tools});
    let path = dir.write("tools.json", &manifest.to_string());
    let path = path.to_str().unwrap().to_string();
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "2"),
        ("PTC_TOOLS_FILE", path.as_str()),
        ("PTC_TOOL_LIMITS", limits),
    ];
    vars.extend_from_slice(extra);
    Limited {
        s: TestSidecar::start(&vars).await,
        slow,
        tick,
        _host: host,
        dir,
    }
}

#[tokio::test]
async fn six_gathered_calls_at_max_concurrent_two_take_three_waves() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let l = limited(r#"{"slow": {"max_concurrent": 2}}"#, &[]).await;
        let mut events = l.s.sidecar.state.events.subscribe();
        let started = Instant::now();
        let result =
            l.s.exec("await asyncio.gather(*[slow() for _ in range(6)])\nprint('done')")
                .await;
        let took = started.elapsed();
        assert_eq!(result["stdout"], "done\n", "{result}");
        assert_eq!(l.slow.most.load(Ordering::SeqCst), 2);
        assert!(
            took >= Duration::from_millis(1200),
            "three waves of 400 ms: {took:?}"
        );
        assert!(took < Duration::from_millis(2400), "{took:?}");
        // The calls that waited say so in their events.
        let mut queued = 0;
        while let Ok(e) = events.try_recv() {
            let e: Value = serde_json::from_str(&e).unwrap();
            if e["type"] == "tool_call.finished"
                && e["queued_ms"].as_f64().is_some_and(|q| q > 300.0)
            {
                queued += 1;
            }
        }
        assert_eq!(queued, 4, "four calls waited for a turn");
        let metrics = l.s.metrics(None).await;
        assert!(
            metrics.contains("ptc_tool_call_queued_seconds_count "),
            "{metrics}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn max_concurrent_holds_across_concurrent_runs() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let l = limited(r#"{"sl*": {"max_concurrent": 2}}"#, &[]).await;
        let code = "await asyncio.gather(*[slow() for _ in range(3)])\nprint('ok')";
        let started = Instant::now();
        let (a, b) = tokio::join!(l.s.exec(code), l.s.exec(code));
        assert_eq!(
            (a["stdout"].clone(), b["stdout"].clone()),
            (json!("ok\n"), json!("ok\n"))
        );
        assert_eq!(l.slow.most.load(Ordering::SeqCst), 2, "two runs, one limit");
        assert!(started.elapsed() >= Duration::from_millis(1200));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn per_second_spaces_a_burst_and_refuses_a_turn_past_the_deadline() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let l = limited(
            r#"{"tick": {"per_second": 5}, "slow": {"per_second": 0.2}}"#,
            &[("PTC_TOOL_TIMEOUT", "2")],
        )
        .await;
        let result =
            l.s.exec("await asyncio.gather(*[tick() for _ in range(6)])\nprint(await free())")
                .await;
        assert_eq!(result["stdout"], "ok\n", "{result}");
        let starts = l.tick.starts.lock().unwrap().clone();
        assert_eq!(starts.len(), 6);
        let span = *starts.last().unwrap() - starts[0];
        assert!(span >= Duration::from_millis(950), "5 per second: {span:?}");
        for pair in starts.windows(2) {
            assert!(
                pair[1] - pair[0] >= Duration::from_millis(150),
                "{starts:?}"
            );
        }
        // One every 5 s: the second's turn is past its 2 s deadline, refused at once.
        let started = Instant::now();
        let result = l.s.exec(
            "await slow()\ntry:\n    await slow()\nexcept ToolError as e:\n    print(e.type, e)",
        ).await;
        let said = result["stdout"].as_str().unwrap();
        assert!(
            said.starts_with("rate_limited slow may start 0.2 calls per second"),
            "{result}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "it waited instead of refusing"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn max_per_run_refuses_the_call_past_it_and_the_next_run_starts_from_zero() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let l = limited(r#"{"tick": {"max_per_run": 3}}"#, &[]).await;
        let code = r#"
for i in range(4):
    try:
        await tick()
    except ToolError as e:
        print(i, e.type, e)
for i in range(5):
    await free()
print("free ok")
"#;
        for _ in 0..2 {
            let result = l.s.exec(code).await;
            assert_eq!(
                result["stdout"],
                "3 limit tick may be called 3 times per run (PTC_TOOL_LIMITS max_per_run) and this \
                 run already did; do the rest in a later run or with fewer calls\nfree ok\n",
                "{result}"
            );
        }
        assert_eq!(l.tick.starts.lock().unwrap().len(), 6);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_limits_file_reloads_and_a_broken_one_keeps_the_last_good() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("limits-file");
        let file = dir.write("limits.json", r#"{"tick": {"max_per_run": 1}}"#);
        let l = limited(file.to_str().unwrap(), &[]).await;
        let code = "n = 0\nfor i in range(3):\n    try:\n        await tick()\n        n += 1\n    except ToolError:\n        pass\nprint(n)";
        assert_eq!(l.s.exec(code).await["stdout"], "1\n");
        let tmp = dir.write(".limits.swp", r#"{"tick": {"max_per_run": 2}}"#);
        std::fs::rename(tmp, &file).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while l.s.exec(code).await["stdout"] != "2\n" {
            assert!(Instant::now() < deadline, "the new limit never held");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A broken file keeps the last good rules and says why.
        let tmp = dir.write(".limits.swp", r#"{"tick": {"max_per_run": 0}}"#);
        std::fs::rename(tmp, &file).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let health = l.s.health().await;
            if let Some(e) = health["reload"]["last_error"].as_str() {
                assert!(e.contains("PTC_TOOL_LIMITS") && e.contains("\"tick\".max_per_run is 0"), "{e}");
                break;
            }
            assert!(Instant::now() < deadline, "the broken file was not reported: {health}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(l.s.exec(code).await["stdout"], "2\n");
        drop(l.dir);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_bad_limit_stops_startup_naming_the_key_and_the_form() {
    let inline = Config::from_vars([(
        "PTC_TOOL_LIMITS".to_string(),
        r#"{"github__*": {"per_minute": 5}}"#.to_string(),
    )])
    .unwrap_err()
    .to_string();
    assert!(inline.starts_with("PTC_TOOL_LIMITS="), "{inline}");
    assert!(
        inline.contains("\"github__*\".per_minute is not a limit"),
        "{inline}"
    );
    assert!(
        inline.contains("{\"max_concurrent\": N, \"per_second\": R, \"max_per_run\": M}"),
        "{inline}"
    );

    let dir = TempDir::new("limits-bad");
    let file = dir.write("limits.json", r#"{"t": {"max_concurrent": -1}}"#);
    let mut c = config(&[("PTC_ENABLED", "true"), ("PTC_WARM_WORKERS", "0")]);
    c.runtime_dir = Some(dir.0.clone());
    c.control.tool_limits = Some(ptc_sidecar::config::LimitsSource::File(file.clone()));
    let err = match Sidecar::start(c, &[]).await {
        Ok(_) => panic!("a broken limits file let the sidecar start"),
        Err(e) => e.to_string(),
    };
    assert!(err.starts_with("PTC_TOOL_LIMITS: "), "{err}");
    assert!(err.contains("\"t\".max_concurrent is -1"), "{err}");
    std::fs::remove_file(&file).unwrap();
    let mut c = config(&[("PTC_ENABLED", "true"), ("PTC_WARM_WORKERS", "0")]);
    c.runtime_dir = Some(dir.0.clone());
    c.control.tool_limits = Some(ptc_sidecar::config::LimitsSource::File(file));
    let err = Sidecar::start(c, &[]).await.err().unwrap().to_string();
    assert!(err.contains("cannot read"), "{err}");
}
