//! Events benchmark: sustained events/s into Redis, and what `emit()` costs the caller.
//!
//! Emits N tool_call.finished events through the real publisher into a `redis-server` of its
//! own (or `REDIS_URL`), pacing only when the queue is half full so that nothing is dropped,
//! and measures the time until every event is published (PUBLISH + XADD, pipelined).
//!
//! Run: `cargo bench --bench events` (`-- --quick` for fewer events). The events-on/off ratio
//! of the sequential-call workload is in `cargo bench --bench exec`.

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ptc_sidecar::events::{Event, Events, EventsConfig, QUEUE_CAPACITY};
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::TestRedis;
use tokio_util::sync::CancellationToken;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: u64 = if quick { 20_000 } else { 200_000 };
    let redis = redis();
    let url = redis.url.clone();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let shutdown = CancellationToken::new();
        let agent = format!("bench-{}", std::process::id());
        let events = Events::start(
            EventsConfig {
                agent_id: agent.clone(),
                redis_url: Some(url.clone()),
                stream_maxlen: 10_000,
                bodies: false,
                hold: n as usize,
            },
            shutdown.clone(),
        )
        .expect("publisher starts");
        let stats = events.stats();
        // Warm the connection.
        events.emit(Event::new("exec.started"));
        while stats.published.load(Ordering::Relaxed) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        let start = Instant::now();
        let mut emit_time = Duration::ZERO;
        for i in 0..n {
            let mut e = Event::new("tool_call.finished");
            e.exec_id = Some("r1".into());
            e.call_id = Some(format!("r1-{i}"));
            e.tool = Some("github__list_issues".into());
            e.source = Some("mcp");
            e.ok = Some(true);
            e.duration_ms = Some(1.25);
            e.result_bytes = Some(512);
            let t = Instant::now();
            events.emit(e);
            emit_time += t.elapsed();
            if i % 256 == 0 {
                // Pace the producer (not the publisher): keep the queue under half full.
                loop {
                    let done = stats.published.load(Ordering::Relaxed) + stats.held.load(Ordering::Relaxed);
                    let queued = stats.emitted.load(Ordering::Relaxed).saturating_sub(done);
                    if queued < QUEUE_CAPACITY as u64 / 2 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            }
        }
        while stats.published.load(Ordering::Relaxed) < n + 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        let dropped = stats.dropped.load(Ordering::Relaxed);
        let mut conn = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let len: u64 = redis::cmd("XLEN").arg(format!("ptc:stream:{agent}")).query_async(&mut conn).await.unwrap();
        let _: () = redis::cmd("DEL").arg(format!("ptc:stream:{agent}")).query_async(&mut conn).await.unwrap();
        println!("events published: {n} in {secs:.3} s = {:.0} events/s (PUBLISH + XADD each), dropped {dropped}", n as f64 / secs);
        println!("emit() cost to the caller: {:.2} µs per event (median of the run's mean)", emit_time.as_secs_f64() * 1e6 / n as f64);
        println!("stream length after MAXLEN ~ 10000: {len}");
        shutdown.cancel();
    });
}

/// Our own redis-server when the binary is there (a shared Redis would measure its other
/// clients too), else `REDIS_URL`.
fn redis() -> TestRedis {
    TestRedis::try_own().unwrap_or_else(TestRedis::any)
}
