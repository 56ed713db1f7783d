//! Soak: N `exec_code` runs in sequence, then N more at 8 at a time (default 10,000 each),
//! against one sidecar (the release binary, started as the load bench starts it), each run
//! making one call of a no-op host tool (callback protocol, served here), one call of the demo
//! MCP server's `noop` (stdio) and a print, with events to a Redis of our own when
//! `redis-server` is installed.
//!
//! Prints, per phase: runs, failures (and the first messages), runs/s, the sidecar's RSS after
//! the phase's warm-up (its first W runs, default 500) and at its end, the growth against the
//! target (at most 5 MB), and the sidecar's open fds, scratch directories (its runtime
//! directory's `runs/`) and descendant processes before the phase and after it, once they
//! settle. The baseline is taken after a warm-up without host calls and once its idle
//! connections are gone, so every phase must come back to it exactly.
//!
//! Run: `cargo bench --bench soak` (10,000 + 10,000 runs), `-- --runs N` for N + N,
//! `-- --warm-up W` to take the RSS after W runs of each phase.

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "shared/mod.rs"]
mod shared;
#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use shared::{Sidecar, arg, exec, fd_kinds, fds, round, start_host, start_sidecar_with, vm_rss_mb};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{TestRedis, procs};

/// The code of every run: one host call, one MCP call, a print.
const CODE: &str = "r = await noop()\nawait demo__noop()\nprint('ok', r)\n";
/// The answer every run must give.
const STDOUT: &str = "ok None\n";
/// The warm-up's runs: no host call, so that no idle connection to the host is in the baseline.
const WARM_UP_CODE: &str = "await demo__noop()\nprint(1)\n";
/// Runs at once in the second phase.
const CONCURRENCY: usize = 8;
/// How much RSS may grow from a phase's warm-up to its end (issue 13).
const TARGET_GROWTH_MB: f64 = 5.0;
/// How long fds, scratch directories and processes get to come back after a phase: the
/// sidecar closes an idle connection to the host callback within `CALLBACK_POOL_IDLE` (30 s),
/// then 15 s more.
const SETTLE: Duration =
    Duration::from_secs(ptc_sidecar::run::dispatch::CALLBACK_POOL_IDLE.as_secs() + 15);
/// Failure messages kept for the report.
const KEEP_FAILURES: usize = 5;
/// A progress line on stderr every this many runs.
const PROGRESS_EVERY: usize = 1000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = arg(&args, "--runs", 10_000) as usize;
    let warm_up = arg(&args, "--warm-up", 500) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let figures = rt.block_on(soak(runs, warm_up.min(runs)));
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
}

/// What the sidecar holds that runs must give back.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    fds: usize,
    scratch_dirs: usize,
    processes: usize,
}

impl Held {
    fn of(sidecar: &Sidecar) -> Held {
        Held {
            fds: fds(sidecar.pid),
            scratch_dirs: std::fs::read_dir(sidecar.runtime_dir().join("runs"))
                .map_or(0, |d| d.count()),
            processes: procs::descendants(&procs::processes(), sidecar.pid as i32).len(),
        }
    }

    /// Waits until what `sidecar` holds is `baseline` again, at most [`SETTLE`]: what it holds
    /// then, and how long that took.
    async fn settled(sidecar: &Sidecar, baseline: Held) -> (Held, Duration) {
        let started = Instant::now();
        loop {
            let now = Held::of(sidecar);
            if now == baseline || started.elapsed() > SETTLE {
                return (now, started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn soak(runs: usize, warm_up: usize) -> Value {
    let host = start_host().await;
    let redis = TestRedis::try_own();
    let redis_url = redis.as_ref().map(|r| ("REDIS_URL", r.url.clone()));
    let sidecar = start_sidecar_with(host, "soak", redis_url.as_slice());
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for _ in 0..5 {
        let r = exec(&http, &sidecar.url, WARM_UP_CODE).await.unwrap();
        assert_eq!(r["status"], "ok", "{r}");
    }
    // Our connection goes (each phase's client goes at its end too) and the warm pool refills.
    drop(http);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = Held::of(&sidecar);
    let started = Instant::now();
    let mut phases = Vec::new();
    for concurrency in [1, CONCURRENCY] {
        phases.push(phase(&sidecar, baseline, runs, warm_up, concurrency).await);
    }
    json!({
        "runs_per_phase": runs,
        "code": CODE,
        "events_to_redis": redis.is_some(),
        "baseline": {
            "fds": baseline.fds,
            "scratch_dirs": baseline.scratch_dirs,
            "processes": baseline.processes,
        },
        "phases": phases,
        "fds_at_the_end_by_kind": fd_kinds(sidecar.pid),
        "minutes": round(started.elapsed().as_secs_f64() / 60.0),
    })
}

/// `runs` runs, `concurrency` at a time, and what the sidecar holds after them.
async fn phase(
    sidecar: &Sidecar,
    baseline: Held,
    runs: usize,
    warm_up: usize,
    concurrency: usize,
) -> Value {
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let (next, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(Mutex::new((0usize, Vec::new())));
    let warm_rss = Arc::new(Mutex::new(None));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, url, pid) = (http.clone(), sidecar.url.clone(), sidecar.pid);
            let (next, done) = (next.clone(), done.clone());
            let (failures, warm_rss) = (failures.clone(), warm_rss.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < runs {
                    match exec(&http, &url, CODE).await {
                        Ok(r) if r["status"] == "ok" && r["stdout"] == STDOUT => {}
                        other => {
                            let mut f = failures.lock().unwrap();
                            f.0 += 1;
                            if f.1.len() < KEEP_FAILURES {
                                f.1.push(format!("{other:?}"));
                            }
                        }
                    }
                    let done = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if done == warm_up {
                        *warm_rss.lock().unwrap() = vm_rss_mb(pid);
                    }
                    if done % PROGRESS_EVERY == 0 {
                        eprintln!(
                            "soak: {done}/{runs} runs at {concurrency}, {:.1} runs/s, RSS {:.1} MB",
                            done as f64 / started.elapsed().as_secs_f64(),
                            vm_rss_mb(pid).unwrap_or(f64::NAN)
                        );
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let end_rss = vm_rss_mb(sidecar.pid);
    drop(http);
    let (after, settled_in) = Held::settled(sidecar, baseline).await;
    let warm_rss = *warm_rss.lock().unwrap();
    let growth = warm_rss.zip(end_rss).map(|(w, e)| e - w);
    let (failed, first_failures) = failures.lock().unwrap().clone();
    json!({
        "concurrency": concurrency,
        "runs": runs,
        "failures": failed,
        "first_failures": first_failures,
        "seconds": round(elapsed),
        "runs_per_s": round(runs as f64 / elapsed),
        "rss_mb": {
            "after_warm_up": warm_rss.map(round),
            "warm_up_runs": warm_up,
            "end": end_rss.map(round),
            "growth": growth.map(round),
            "target_growth": TARGET_GROWTH_MB,
            "met": growth.map(|g| g <= TARGET_GROWTH_MB),
        },
        "fds": {"before": baseline.fds, "after": after.fds},
        "scratch_dirs": {"before": baseline.scratch_dirs, "after": after.scratch_dirs},
        "processes": {"before": baseline.processes, "after": after.processes},
        "back_to_baseline": after == baseline,
        "settled_in_s": round(settled_in.as_secs_f64()),
    })
}
