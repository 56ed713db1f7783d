//! Dashboard benchmark: `ptc-sidecar dashboard` (the release binary) against a `redis-server`
//! of its own, fed by this program as 50 agents.
//!
//! 1. History: 100,000 events already in the agents' streams (2,000 each, runs of one call,
//!    one call in ten failing). Figures: the time from start until the dashboard serves (it
//!    reads the history first), and the p50/p99 of `GET /v1/dashboard/state` while it is full.
//! 2. Live: 1,000 events/s published (PUBLISH + XADD, as sidecars do) for `SECONDS` seconds.
//!    Figures: events the board holds against events sent (nothing missed), the dashboard
//!    process's CPU (user + system time over the wall time) and its peak RSS.
//!
//! Run: `cargo bench --bench dashboard` (`-- --quick`: 3 s live instead of 20).

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::TestRedis;

const AGENTS: usize = 50;
const HISTORY_PER_AGENT: usize = 2000;
const LIVE_RATE: usize = 1000;

/// One run's events: started, a call started and finished, finished (four events).
fn run_events(agent: &str, run: usize, seq: &mut u64, ts: u64) -> Vec<String> {
    let exec_id = format!("r{run}");
    let call_id = format!("{exec_id}-0");
    let failed = run.is_multiple_of(10);
    let mut out = Vec::new();
    let mut event = |v: Value| {
        let mut v = v;
        v["v"] = json!(1);
        v["agent_id"] = json!(agent);
        v["exec_id"] = json!(exec_id);
        v["seq"] = json!(*seq);
        *seq += 1;
        out.push(v.to_string());
    };
    event(json!({"type": "exec.started", "ts": ts}));
    event(
        json!({"type": "tool_call.started", "ts": ts + 1, "call_id": call_id, "tool": format!("tool_{}", run % 20), "source": "host"}),
    );
    event(
        json!({"type": "tool_call.finished", "ts": ts + 3, "call_id": call_id, "tool": format!("tool_{}", run % 20),
        "source": "host", "ok": !failed, "duration_ms": 2.0,
        "error": if failed { json!({"type": "tool", "message": "upstream failed"}) } else { Value::Null }}),
    );
    event(
        json!({"type": "exec.finished", "ts": ts + 5, "status": if failed { "error" } else { "ok" }, "duration_ms": 5.0}),
    );
    out
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// User + system CPU seconds of a process, and its peak RSS in MB.
fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf only reads a system value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0;
    (cpu, hwm)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let seconds: u64 = if quick { 3 } else { 20 };
    let redis = TestRedis::own();
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let tag = std::process::id();
    let agents: Vec<String> = (0..AGENTS)
        .map(|i| format!("dash-bench-{tag}-{i}"))
        .collect();
    let mut seqs = vec![0u64; AGENTS];

    // 1. History.
    let start_ts = now_ms() - 3_600_000;
    for (i, agent) in agents.iter().enumerate() {
        let mut pipe = redis::pipe();
        for run in 0..HISTORY_PER_AGENT / 4 {
            for e in run_events(agent, run, &mut seqs[i], start_ts + run as u64 * 10) {
                pipe.cmd("XADD")
                    .arg(format!("ptc:stream:{agent}"))
                    .arg("*")
                    .arg("event")
                    .arg(e)
                    .ignore();
            }
        }
        pipe.query::<()>(&mut conn).unwrap();
    }
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
        .args(["dashboard", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", &redis.url)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let history_ms = started.elapsed().as_secs_f64() * 1e3;
    let url = line.trim().rsplit(' ').next().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let state = |q: &str| -> (f64, Value) {
        let t = Instant::now();
        let v: Value = rt.block_on(async {
            http.get(format!("{url}/v1/dashboard/state{q}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        (t.elapsed().as_secs_f64() * 1e3, v)
    };
    let mut lat = Vec::new();
    for i in 0..50 {
        let q = if i % 2 == 0 {
            "?limit=100".to_string()
        } else {
            format!("?agent={}", agents[i % AGENTS])
        };
        lat.push(state(&q).0);
    }
    let (_, full) = state("");
    let history_events = full["events"].as_u64().unwrap();

    // 2. Live: LIVE_RATE events/s, in batches every 10 ms.
    let (cpu0, _) = usage(pid);
    let live_started = Instant::now();
    let mut sent = 0u64;
    let mut run = HISTORY_PER_AGENT / 4;
    while live_started.elapsed() < Duration::from_secs(seconds) {
        let due = (live_started.elapsed().as_secs_f64() * LIVE_RATE as f64) as u64;
        let mut pipe = redis::pipe();
        while sent < due {
            let i = run % AGENTS;
            for e in run_events(&agents[i], run, &mut seqs[i], now_ms()) {
                pipe.cmd("PUBLISH")
                    .arg(format!("ptc:events:{}", agents[i]))
                    .arg(&e)
                    .ignore();
                pipe.cmd("XADD")
                    .arg(format!("ptc:stream:{}", agents[i]))
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(10_000)
                    .arg("*")
                    .arg("event")
                    .arg(&e)
                    .ignore();
                sent += 1;
            }
            run += 1;
        }
        if pipe.cmd_iter().next().is_some() {
            pipe.query::<()>(&mut conn).unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let wall = live_started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    let (cpu1, rss) = usage(pid);
    let (_, after) = state("");
    let folded = after["events"].as_u64().unwrap() - history_events;
    let agents_seen = after["agents"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|a| a.starts_with(&format!("dash-bench-{tag}-")))
        .count();
    let _ = child.kill();
    let _ = child.wait();
    let out = json!({
        "history": {
            "events_in_streams": AGENTS * HISTORY_PER_AGENT,
            "read_and_serving_ms": history_ms.round(),
            "events_folded": history_events,
            "state_p50_ms": (percentile(&mut lat.clone(), 50.0) * 100.0).round() / 100.0,
            "state_p99_ms": (percentile(&mut lat, 99.0) * 100.0).round() / 100.0,
        },
        "live": {
            "agents": agents_seen,
            "seconds": wall,
            "events_sent": sent,
            "events_per_s": (sent as f64 / wall).round(),
            "events_folded": folded,
            "missed": after["missed"],
            "cpu_percent_of_one_core": ((cpu1 - cpu0) / wall * 1000.0).round() / 10.0,
            "peak_rss_mb": (rss * 10.0).round() / 10.0,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
