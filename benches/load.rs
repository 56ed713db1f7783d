//! Load: C concurrent `exec_code` runs (default 100) against one sidecar for S seconds, each run
//! gathering 20 calls of a no-op host tool (callback protocol, served here) and making 5 calls
//! of the demo MCP server's `noop` (stdio), with events to a Redis of our own when
//! `redis-server` is installed. Runs beyond `PTC_MAX_RUNS` (32) wait for a slot.
//!
//! Prints: runs/s, p50/p99 run latency (client side), failures (and the first messages), the
//! sidecar's peak RSS (VmHWM), and its open fds and descendant processes before, and after the
//! load once they settle (they must come back to the baseline: the warm pool's children are in
//! both).
//!
//! Run: `cargo bench --bench load` (10 s), `cargo bench --bench load -- --secs 60` for the
//! README figure, `-- --concurrency N` to change C, `-- --settle S` to wait at most S seconds
//! for fds and processes to come back (`-- --settle 0` when only the load's figures matter).

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "shared/mod.rs"]
mod shared;
#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use shared::{
    Sidecar, arg, fd_kinds, fds, percentile, round, start_host, start_sidecar_with, vm_hwm_mb,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{TestRedis, procs};

/// The code of every run: 20 host calls gathered, then 5 MCP calls in sequence.
const CODE: &str = "r = await asyncio.gather(*[noop() for _ in range(20)])\n\
                    for _ in range(5):\n    await demo__noop()\n\
                    print(len(r))\n";
/// The warm-up's runs: without host calls, so the baseline holds no idle connection to the host
/// (the sidecar would close them up to `CALLBACK_POOL_IDLE` later).
const WARM_UP_CODE: &str = "await demo__noop()\nprint(1)\n";
/// How long fds and processes get to come back to the baseline after the load: the sidecar
/// closes idle connections to the host callback within `CALLBACK_POOL_IDLE` (30 s), then 15 s
/// more.
const SETTLE: Duration =
    Duration::from_secs(ptc_sidecar::run::dispatch::CALLBACK_POOL_IDLE.as_secs() + 15);
/// Failure messages kept for the report.
const KEEP_FAILURES: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs = arg(&args, "--secs", 10);
    let concurrency = arg(&args, "--concurrency", 100) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let settle = Duration::from_secs(arg(&args, "--settle", SETTLE.as_secs()));
    let figures = rt.block_on(load(Duration::from_secs(secs), concurrency, settle));
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
}

async fn load(duration: Duration, concurrency: usize, settle: Duration) -> Value {
    let host = start_host().await;
    let redis = TestRedis::try_own();
    let sidecar = start_sidecar(host, redis.as_ref().map(|r| r.url.as_str()));
    // Warm up: the fork server and the MCP server are ready, the first runs are done. Its
    // client goes with its connection before the baseline is taken, as the load's does after.
    let warm_up = reqwest::Client::builder().no_proxy().build().unwrap();
    for _ in 0..5 {
        let (_, r) = exec(&warm_up, &sidecar.url, WARM_UP_CODE).await;
        assert_eq!(r.map(|r| r["status"].clone()).ok(), Some(json!("ok")));
    }
    drop(warm_up);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = (fds(sidecar.pid), descendants(sidecar.pid));
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();

    let failures = Arc::new(AtomicUsize::new(0));
    let messages = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (http, url) = (http.clone(), sidecar.url.clone());
        let (failures, messages) = (failures.clone(), messages.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let (took, answer) = exec(&http, &url, CODE).await;
                match answer {
                    Ok(r) if r["status"] == "ok" && r["stdout"] == "20\n" => {
                        latencies.push(took.as_secs_f64() * 1e3);
                    }
                    other => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        let mut m = messages.lock().unwrap();
                        if m.len() < KEEP_FAILURES {
                            m.push(format!("{other:?}"));
                        }
                    }
                }
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak_rss = vm_hwm_mb(sidecar.pid);

    // Our keep-alive connections go, so the sidecar's side of them can close.
    drop(http);
    // fds and processes back to the baseline (the warm pool refills in the meantime).
    let settle_until = Instant::now() + settle;
    let after = loop {
        let now = (fds(sidecar.pid), descendants(sidecar.pid));
        if now == baseline || Instant::now() > settle_until {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let runs = latencies.len();
    json!({
        "concurrency": concurrency,
        "seconds": round(elapsed),
        "runs_ok": runs,
        "runs_per_s": round(runs as f64 / elapsed),
        "calls_per_run": {"host": 20, "mcp": 5},
        "p50_ms": round(percentile(&mut latencies, 50.0)),
        "p99_ms": round(percentile(&mut latencies, 99.0)),
        "failures": failures.load(Ordering::Relaxed),
        "first_failures": *messages.lock().unwrap(),
        "peak_rss_mb": peak_rss.map(round),
        "events_to_redis": redis.is_some(),
        "fds": {"before": baseline.0, "after": after.0, "after_by_kind": fd_kinds(sidecar.pid)},
        "processes": {"before": baseline.1, "after": after.1},
    })
}

/// One run, timed by the client: the answer, or what went wrong with the request.
async fn exec(http: &reqwest::Client, url: &str, code: &str) -> (Duration, Result<Value, String>) {
    let t = Instant::now();
    let answer = shared::exec(http, url, code).await;
    (t.elapsed(), answer)
}

/// The release sidecar with events to `redis_url` when there is one.
fn start_sidecar(host: std::net::SocketAddr, redis_url: Option<&str>) -> Sidecar {
    let redis = redis_url.map(|u| ("REDIS_URL", u.to_string()));
    start_sidecar_with(host, "load", redis.as_slice())
}

/// Live descendants of a process (zombies not counted).
fn descendants(root: u32) -> usize {
    procs::descendants(&procs::processes(), root as i32).len()
}
