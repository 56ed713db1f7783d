//! exec_code benchmark: ptc-sidecar against the progtc peer, in one invocation.
//!
//! Workloads (the same for both, measured the same way, by the client):
//! 1. `print(1)` end to end through the control API, sequentially: p50 and p99.
//! 2. K sequential calls of a no-op host tool in one run: per-call overhead =
//!    (run time − p50 of an empty run) / K, median of 5 runs.
//! 3. G calls under one `asyncio.gather`: calls/s = G / (run time − p50 of an empty run),
//!    median of 5 runs.
//! 4. Peak RSS (VmHWM) of the sidecar process.
//! 5. Workloads 2 and 3 again with the demo MCP server's `noop` (`demo__noop`, stdio), measured
//!    the same way (ptc-sidecar only: the peer has no MCP backend).
//!
//! The sidecar runs as its own process (the release binary), its no-op host tool is served over
//! the callback protocol by this program. The peer's figures come from
//! `benches/peer/progtc_bench.py` in a venv made by `benches/peer/setup-progtc.sh`.
//!
//! 6. The sandbox's cost: workloads 1 and 2 with `PTC_SANDBOX=off` against the default
//!    (`sandbox_on_off`), three sidecars in turn.
//! 7. Bash runs beside Python ones (`bash_vs_python`): one call end to end, sequential calls
//!    and 100 calls started together, per call.
//!
//! 8. Sessions (`sessions`): a follow-up run in a live session (`print(x)`, no fork) beside a
//!    fresh run (`print(1)`), p50 and p99; the memory of one idle session's interpreter (Pss,
//!    from `GET /v1/sessions`: pages shared with the fork server counted in part), and its
//!    peak RSS beside a fresh run's (`getrusage`, read in the run).
//!
//! 9. Metrics and tracing (`observability_on_off`): the sequential-call workload with
//!    `/metrics` kept and spans exported over OTLP against both off, three sidecars in turn.
//!
//! 10. The MCP front door (`front_door`): `print(1)` p50 and a 100-call `gather` of the demo
//!     server's noop through `ptc-sidecar mcp` over stdio (rmcp's client, the MCP session's
//!     live session) against the same through `POST /v1/exec_code` with a `session_id`, in
//!     turn, same tools; the difference is what the door adds.
//!
//! 11. Approvals and limits (`control_on_off`): the sequential-call workload with approval rules
//!     and limits configured for other tools and a generous limit on the called one, against
//!     neither, three sidecars in turn; the difference per call (target: at most 20 µs).
//!
//! 12. LibreChat's per-request tokens (`librechat_jwt`, `exec/librechat_jwt.rs`): a token's
//!     verification in process and what it adds to a request over HTTP (target: at most 50 µs).
//!
//! 13. A runtime's call (`tools_call`, native PTC): `POST /v1/tools/call` of the demo server's
//!     noop, timed by this client, against the same call from inside a run, timed around each
//!     `await` in the run's code; p50 of N calls each way (1,000; 200 with `--quick`), in five
//!     alternating rounds; the difference is what the API adds (target: at most 0.2 ms).
//!
//! 14. JavaScript runs beside Python ones (`javascript_vs_python`, `exec/javascript.rs`):
//!     `console.log(1)` against `print(1)` p50, spaced and back to back, the sequential call
//!     overhead and a `Promise.all` of G calls against `asyncio.gather` (target: within 2x).
//!
//! Run: `cargo bench --bench exec` (`-- --no-peer` to skip progtc, `-- --quick` for a smoke run,
//! `-- --only front_door`, `sandbox_on_off`, `control_on_off`, `librechat_jwt`, `tools_call` or
//! `javascript_vs_python` for that workload alone).
//! The sidecars inherit this process's environment: `PTC_SANDBOX=off cargo bench --bench exec`
//! measures workloads 1–5 without the sandbox.

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "exec/javascript.rs"]
mod javascript;
#[path = "exec/librechat_jwt.rs"]
mod librechat_jwt;
#[path = "shared/mod.rs"]
mod shared;
#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use shared::{Sidecar, median, percentile, round, start_host, vm_hwm_mb};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::TestRedis;

struct Params {
    exec_n: usize,
    seq_k: usize,
    gather_g: usize,
    repeats: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let no_peer = args.iter().any(|a| a == "--no-peer");
    let p = if quick {
        Params {
            exec_n: 30,
            seq_k: 200,
            gather_g: 200,
            repeats: 3,
        }
    } else {
        Params {
            exec_n: 300,
            seq_k: 1000,
            gather_g: 1000,
            repeats: 5,
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // `--only front_door` (or `sandbox_on_off`): that workload alone, no peer.
    if let Some(name) = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
    {
        let one = rt.block_on(only(name, &p));
        println!(
            "\n{name}: {}",
            serde_json::to_string_pretty(&one).unwrap_or_default()
        );
        return;
    }
    let ours = rt.block_on(bench_sidecar(&p));
    println!(
        "\nptc-sidecar: {}",
        serde_json::to_string_pretty(&ours).unwrap_or_default()
    );
    println!(
        "\nMCP (the demo server's noop over stdio): per-call overhead {} ms (median of {} runs of {} sequential calls), {} calls/s under one gather of {}",
        ours.pointer("/mcp_seq_calls/per_call_ms")
            .unwrap_or(&Value::Null),
        p.repeats,
        p.seq_k,
        ours.pointer("/mcp_gather_calls/calls_per_s")
            .unwrap_or(&Value::Null),
        p.gather_g,
    );
    if no_peer {
        return;
    }
    let peer = run_peer(&p, quick);
    println!(
        "\nprogtc: {}",
        serde_json::to_string_pretty(&peer).unwrap_or_default()
    );
    print_table(&ours, &peer);
}

fn start_sidecar(host: std::net::SocketAddr, redis_url: Option<&str>) -> Sidecar {
    let redis = redis_url.map(|u| ("REDIS_URL", u.to_string()));
    start_sidecar_with(host, redis.as_slice())
}

/// A sidecar for this benchmark with `env` on top of its settings.
fn start_sidecar_with(host: std::net::SocketAddr, env: &[(&str, String)]) -> Sidecar {
    shared::start_sidecar_with(host, "bench", env)
}

async fn exec(http: &reqwest::Client, url: &str, code: &str) -> (Duration, Value) {
    exec_lang(http, url, code, "python").await
}

async fn exec_lang(http: &reqwest::Client, url: &str, code: &str, lang: &str) -> (Duration, Value) {
    exec_body(http, url, json!({"code": code, "lang": lang})).await
}

/// One `POST /v1/exec_code` with `body`, timed by the client; the run must succeed.
async fn exec_body(http: &reqwest::Client, url: &str, body: Value) -> (Duration, Value) {
    let t = Instant::now();
    let r: Value = http
        .post(format!("{url}/v1/exec_code"))
        .json(&body)
        .send()
        .await
        .expect("exec_code request")
        .json()
        .await
        .expect("exec_code answer");
    let elapsed = t.elapsed();
    assert_eq!(r["status"], "ok", "benchmark run failed: {r}");
    (elapsed, r)
}

async fn health(http: &reqwest::Client, sidecar: &Sidecar) -> Value {
    http.get(format!("{}/healthz", sidecar.url))
        .send()
        .await
        .expect("healthz")
        .json()
        .await
        .expect("healthz json")
}

async fn wait_up(http: &reqwest::Client, sidecar: &Sidecar) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while http
        .get(format!("{}/healthz", sidecar.url))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "ptc-sidecar did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// One workload of those that start their own sidecars, by its name in the JSON.
async fn only(name: &str, p: &Params) -> Value {
    let host = start_host().await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    match name {
        "front_door" => front_door(&http, host, p).await,
        "sandbox_on_off" => sandbox_on_off(&http, host, p).await,
        "control_on_off" => control_on_off(&http, host, p).await,
        "librechat_jwt" => librechat_jwt::librechat_jwt(&http, host).await,
        "tools_call" => tools_call(&http, host, p).await,
        "javascript_vs_python" => {
            let sidecar = start_sidecar(host, None);
            wait_up(&http, &sidecar).await;
            javascript::javascript_vs_python(&http, &sidecar.url, p).await
        }
        other => json!({"error": format!(
            "--only takes front_door, sandbox_on_off, control_on_off, librechat_jwt, \
             tools_call or javascript_vs_python, not {other}"
        )}),
    }
}

async fn bench_sidecar(p: &Params) -> Value {
    let host = start_host().await;
    let sidecar = start_sidecar(host, None);
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    wait_up(&http, &sidecar).await;

    for _ in 0..10 {
        exec(&http, &sidecar.url, "print(1)").await;
    }
    let mut lat = Vec::new();
    for _ in 0..p.exec_n {
        lat.push(exec(&http, &sidecar.url, "print(1)").await.0.as_secs_f64() * 1e3);
    }
    let empty_ms = percentile(&mut lat.clone(), 50.0);

    let (seq_calls, gather_calls) = call_workloads(&http, &sidecar.url, empty_ms, "noop", p).await;
    // Read before the MCP workloads, so the host figures stay comparable with the peer's.
    let rss = vm_hwm_mb(sidecar.pid);
    let (mcp_seq_calls, mcp_gather_calls) =
        call_workloads(&http, &sidecar.url, empty_ms, "demo__noop", p).await;
    let bash = bash_vs_python(&http, &sidecar.url, p).await;
    let js = javascript::javascript_vs_python(&http, &sidecar.url, p).await;
    let sessions = sessions(&http, &sidecar.url, p).await;
    drop(sidecar);
    let events = events_on_off(&http, host, p).await;
    let observability = observability_on_off(&http, host, p).await;
    let sandbox = sandbox_on_off(&http, host, p).await;
    let front = front_door(&http, host, p).await;
    let control = control_on_off(&http, host, p).await;
    let native = tools_call(&http, host, p).await;
    json!({
        "tools_call": native,
        "front_door": front,
        "control_on_off": control,
        "sessions": sessions,
        "bash_vs_python": bash,
        "javascript_vs_python": js,
        "sandbox_on_off": sandbox,
        "events_on_off": events,
        "observability_on_off": observability,
        "exec_print": {"n": p.exec_n, "p50_ms": round(percentile(&mut lat.clone(), 50.0)), "p99_ms": round(percentile(&mut lat, 99.0))},
        "seq_calls": seq_calls,
        "gather_calls": gather_calls,
        "mcp_seq_calls": mcp_seq_calls,
        "mcp_gather_calls": mcp_gather_calls,
        "peak_rss_mb": rss.map(round),
        "targets": {"exec_p50_ms": 3.0, "per_call_ms": 0.25, "gather_calls_per_s": 10000, "peak_rss_mb": 40},
    })
}

/// The sequential-call workload with events going to Redis (a `redis-server` of our own)
/// against the same without Redis: three sidecars (off, on, and a second off as a control for
/// the machine's noise) run in turn, 11 rounds; the median per-call overheads, the on/off ratio
/// The sequential-call workload on three sidecars in turn over `ROUNDS` rounds: one with
/// `off` set, one with `on`, and a second `off` as a control for the machine's noise. The
/// median per-call overheads (less each sidecar's empty run), and the `on` sidecar's health.
async fn on_off(
    http: &reqwest::Client,
    host: std::net::SocketAddr,
    p: &Params,
    off: &[(&str, String)],
    on: &[(&str, String)],
) -> ([f64; 3], Value) {
    /// Rounds of the three sidecars in turn.
    const ROUNDS: usize = 11;
    let sidecars = [
        start_sidecar_with(host, off),
        start_sidecar_with(host, on),
        start_sidecar_with(host, off),
    ];
    let mut empty_ms = Vec::new();
    for sidecar in &sidecars {
        wait_up(http, sidecar).await;
        let mut lat = Vec::new();
        for _ in 0..30 {
            lat.push(exec(http, &sidecar.url, "print(1)").await.0.as_secs_f64() * 1e3);
        }
        empty_ms.push(median(&mut lat));
    }
    let code = format!("for _ in range({}):\n    await noop()\n", p.seq_k);
    let mut per_call: [Vec<f64>; 3] = Default::default();
    for _ in 0..ROUNDS {
        for (i, sidecar) in sidecars.iter().enumerate() {
            let (t, _) = exec(http, &sidecar.url, &code).await;
            per_call[i].push((t.as_secs_f64() * 1e3 - empty_ms[i]) / p.seq_k as f64);
        }
    }
    let health = health(http, &sidecars[1]).await;
    (per_call.map(|mut v| median(&mut v)), health)
}

/// `on_off`'s figures: the per-call overheads, on/off (the target's ratio) and control/off
/// (how large noise alone is).
fn on_off_figures([off, on, control]: [f64; 3]) -> Value {
    json!({
        "rounds": 11,
        "off_per_call_ms": round(off),
        "on_per_call_ms": round(on),
        "ratio": round(on / off),
        "control_off_per_call_ms": round(control),
        "control_ratio": round(control / off),
    })
}

/// The sequential-call workload with events going to Redis (a `redis-server` of our own)
/// against the same without Redis (target: at most 1.05).
async fn events_on_off(http: &reqwest::Client, host: std::net::SocketAddr, p: &Params) -> Value {
    let Some(redis) = TestRedis::try_own() else {
        return json!({"error": "redis-server is not installed"});
    };
    let on = [("REDIS_URL", redis.url.clone())];
    let (figures, health) = on_off(http, host, p, &[], &on).await;
    drop(redis);
    let mut out = on_off_figures(figures);
    out["published"] = health["events"]["published"].clone();
    out["dropped"] = health["events"]["dropped"].clone();
    out
}

/// The sequential-call workload with approvals and limits configured (approval rules for other
/// tools and destructive ones, limits for others and a generous one on `noop` itself) against
/// neither: what the checks cost a call that no rule stops (target: at most 20 µs more).
async fn control_on_off(http: &reqwest::Client, host: std::net::SocketAddr, p: &Params) -> Value {
    let limits = json!({
        "other_*": {"max_concurrent": 2, "per_second": 5, "max_per_run": 10},
        "github__*": {"per_second": 5},
        "noop": {"max_concurrent": 1000, "per_second": 1_000_000, "max_per_run": 1_000_000},
    });
    let on = [
        (
            "PTC_APPROVE_TOOLS",
            "other_*,delete_*,github__merge_*".to_string(),
        ),
        ("PTC_APPROVE_DESTRUCTIVE", "true".to_string()),
        ("PTC_TOOL_LIMITS", limits.to_string()),
    ];
    let (figures, _) = on_off(http, host, p, &[], &on).await;
    let [off, on, control] = figures;
    let mut out = on_off_figures(figures);
    out["added_us_per_call"] = json!(round((on - off) * 1e3));
    out["control_added_us_per_call"] = json!(round((control - off) * 1e3));
    out["target_added_us_per_call"] = json!(20);
    out
}

/// The sequential-call workload with metrics and span export on (`/metrics` kept, spans sent
/// over OTLP to a receiver of this program's own) against both off (target: at most 1.03).
async fn observability_on_off(
    http: &reqwest::Client,
    host: std::net::SocketAddr,
    p: &Params,
) -> Value {
    let collector = start_otlp_sink().await;
    let off = [("PTC_METRICS", "false".to_string())];
    let on = [
        ("PTC_METRICS", "true".to_string()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}")),
    ];
    let (figures, _) = on_off(http, host, p, &off, &on).await;
    on_off_figures(figures)
}

/// An OTLP/HTTP endpoint that takes every export and answers `{}`.
async fn start_otlp_sink() -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|| async { axum::Json(json!({})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// What the sandbox costs (issue 9): `print(1)` end to end and the sequential-call workload on
/// a sidecar with `PTC_SANDBOX=off` against one with the default sandbox, and a second `off`
/// as a control for the machine's noise, in turn for 7 rounds; medians and on/off ratios.
async fn sandbox_on_off(http: &reqwest::Client, host: std::net::SocketAddr, p: &Params) -> Value {
    /// Rounds of the three sidecars in turn.
    const ROUNDS: usize = 7;
    /// `print(1)` runs per sidecar and round.
    const PRINTS: usize = 20;
    // An interpreter the run user can read (a python3 under root's home is closed to it, and
    // the sandbox would then run code as the sidecar's uid), the same for all three.
    let debian = Path::new("/usr/bin/python3");
    let python: Vec<(&str, String)> = if debian.exists() {
        vec![("PTC_PYTHON", debian.display().to_string())]
    } else {
        Vec::new()
    };
    let mode = |mode: &str| -> Vec<(&str, String)> {
        python
            .iter()
            .cloned()
            .chain([("PTC_SANDBOX", mode.to_string())])
            .collect()
    };
    let sidecars = [
        start_sidecar_with(host, &mode("off")),
        start_sidecar_with(host, &mode("best-effort")),
        start_sidecar_with(host, &mode("off")),
    ];
    let mut sandbox = Value::Null;
    for (i, sidecar) in sidecars.iter().enumerate() {
        wait_up(http, sidecar).await;
        for _ in 0..10 {
            exec(http, &sidecar.url, "print(1)").await;
        }
        if i == 1 {
            sandbox = health(http, sidecar).await["sandbox"].clone();
        }
    }
    let code = format!("for _ in range({}):\n    await noop()\n", p.seq_k);
    let mut print_ms: [Vec<f64>; 3] = Default::default();
    let mut per_call: [Vec<f64>; 3] = Default::default();
    for _ in 0..ROUNDS {
        for (i, sidecar) in sidecars.iter().enumerate() {
            let mut lat = Vec::new();
            for _ in 0..PRINTS {
                lat.push(exec(http, &sidecar.url, "print(1)").await.0.as_secs_f64() * 1e3);
            }
            let empty = median(&mut lat);
            print_ms[i].push(empty);
            let (t, _) = exec(http, &sidecar.url, &code).await;
            per_call[i].push((t.as_secs_f64() * 1e3 - empty) / p.seq_k as f64);
        }
    }
    drop(sidecars);
    let [print_off, print_on, print_control] = print_ms.map(|mut v| median(&mut v));
    let [call_off, call_on, call_control] = per_call.map(|mut v| median(&mut v));
    json!({
        "rounds": ROUNDS,
        "sandbox": sandbox,
        "print_p50_ms": {"off": round(print_off), "on": round(print_on), "control_off": round(print_control),
                         "ratio": round(print_on / print_off), "control_ratio": round(print_control / print_off)},
        "per_call_ms": {"off": round(call_off), "on": round(call_on), "control_off": round(call_control),
                        "ratio": round(call_on / call_off), "control_ratio": round(call_control / call_off)},
    })
}

/// Bash runs beside Python ones (issue 10), on the same sidecar and no-op host tool: a run
/// with one call, p50 end to end; the per-call cost of K sequential calls; 100 calls started
/// together (`&` … `wait` against one `asyncio.gather`), per call. Each less the p50 of an empty
/// run of its language; medians of `repeats` runs.
async fn bash_vs_python(http: &reqwest::Client, url: &str, p: &Params) -> Value {
    const PARALLEL: usize = 100;
    let k = p.seq_k / 5;
    let workloads = [
        (
            "python",
            "pass".to_string(),
            "await noop()".to_string(),
            format!("for _ in range({k}):\n    await noop()\n"),
            format!("await asyncio.gather(*[noop() for _ in range({PARALLEL})])\n"),
        ),
        (
            "bash",
            ":".to_string(),
            "noop >/dev/null".to_string(),
            format!("for i in $(seq {k}); do noop >/dev/null; done"),
            format!("for i in $(seq {PARALLEL}); do noop >/dev/null & done; wait"),
        ),
    ];
    let mut out = serde_json::Map::new();
    for (lang, empty, one, seq, parallel) in workloads {
        let lat = |code: String, n: usize| async move {
            let mut v = Vec::new();
            for _ in 0..n {
                v.push(exec_lang(http, url, &code, lang).await.0.as_secs_f64() * 1e3);
            }
            median(&mut v)
        };
        let empty_ms = lat(empty, p.exec_n / 3).await;
        let one_ms = lat(one, p.exec_n / 3).await;
        let seq_ms = lat(seq, p.repeats).await;
        let parallel_ms = lat(parallel, p.repeats).await;
        out.insert(
            lang.into(),
            json!({
                "empty_p50_ms": round(empty_ms),
                "one_call_p50_ms": round(one_ms),
                "seq_per_call_ms": round((seq_ms - empty_ms) / k as f64),
                "parallel_100_per_call_ms": round((parallel_ms - empty_ms) / PARALLEL as f64),
            }),
        );
    }
    out.insert("k".into(), json!(k));
    Value::Object(out)
}

/// Workload 8: runs in a live session against fresh runs, and what an idle session holds.
async fn sessions(http: &reqwest::Client, url: &str, p: &Params) -> Value {
    let post = |body: Value| async move {
        let (elapsed, r) = exec_body(http, url, body).await;
        (elapsed.as_secs_f64() * 1e3, r)
    };
    let in_session = |code: &str| json!({"code": code, "session_id": "bench-session"});
    post(in_session("x = 41")).await;
    let (mut follow, mut fresh) = (Vec::new(), Vec::new());
    for i in 0..p.exec_n + 10 {
        // Interleaved, so both see the same machine.
        let (a, _) = post(in_session("print(x)")).await;
        let (b, _) = post(json!({"code": "print(1)"})).await;
        if i >= 10 {
            follow.push(a);
            fresh.push(b);
        }
    }
    let sessions: Value = http
        .get(format!("{url}/v1/sessions"))
        .send()
        .await
        .expect("sessions")
        .json()
        .await
        .expect("sessions json");
    let idle_bytes = sessions["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["id"] == "bench-session"))
        .and_then(|s| s["memory_bytes"].as_f64());
    // Peak RSS as the process itself sees it (a run may not read /proc/self).
    let rss = "import resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)";
    let kb = |r: Value| {
        r["stdout"]
            .as_str()
            .and_then(|s| s.trim().parse::<f64>().ok())
    };
    let fresh_kb = kb(post(json!({"code": rss})).await.1);
    let session_kb = kb(post(in_session(rss)).await.1);
    json!({
        "follow_up_p50_ms": round(percentile(&mut follow.clone(), 50.0)),
        "follow_up_p99_ms": round(percentile(&mut follow, 99.0)),
        "fresh_p50_ms": round(percentile(&mut fresh.clone(), 50.0)),
        "fresh_p99_ms": round(percentile(&mut fresh, 99.0)),
        "idle_session_pss_mb": idle_bytes.map(|b| round(b / 1048576.0)),
        "session_peak_rss_mb": session_kb.map(|kb| round(kb / 1024.0)),
        "fresh_run_peak_rss_mb": fresh_kb.map(|kb| round(kb / 1024.0)),
        "target_follow_up_p50_ms": 1.5,
    })
}

/// Workloads 2 and 3 for one no-op tool (by its Python name): K sequential calls and G calls
/// under one gather, each run `repeats` times, less the p50 of an empty run.
async fn call_workloads(
    http: &reqwest::Client,
    url: &str,
    empty_ms: f64,
    tool: &str,
    p: &Params,
) -> (Value, Value) {
    let seq_code = format!("for _ in range({}):\n    await {tool}()\n", p.seq_k);
    let mut per_call = Vec::new();
    for _ in 0..p.repeats {
        let (t, _) = exec(http, url, &seq_code).await;
        per_call.push((t.as_secs_f64() * 1e3 - empty_ms) / p.seq_k as f64);
    }
    let gather_code = format!(
        "await asyncio.gather(*[{tool}() for _ in range({})])\n",
        p.gather_g
    );
    let mut rates = Vec::new();
    for _ in 0..p.repeats {
        let (t, r) = exec(http, url, &gather_code).await;
        assert_eq!(r["tool_calls"].as_array().map(Vec::len), Some(p.gather_g));
        rates.push(p.gather_g as f64 / ((t.as_secs_f64() * 1e3 - empty_ms) / 1e3));
    }
    (
        json!({"k": p.seq_k, "per_call_ms": round(median(&mut per_call)), "runs_per_call_ms": per_call.iter().map(|v| round(*v)).collect::<Vec<_>>()}),
        json!({"g": p.gather_g, "calls_per_s": median(&mut rates).round(), "runs_calls_per_s": rates.iter().map(|v| v.round()).collect::<Vec<_>>()}),
    )
}

fn run_peer(p: &Params, quick: bool) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join("target/bench-venv");
    let setup = Command::new("bash")
        .arg(root.join("benches/peer/setup-progtc.sh"))
        .env("PTC_BENCH_VENV", &venv)
        .status();
    if !matches!(setup, Ok(s) if s.success()) {
        return json!({"errors": ["benches/peer/setup-progtc.sh failed; see its output above"]});
    }
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg(root.join("benches/peer/progtc_bench.py"));
    if quick {
        cmd.arg("--quick");
    }
    let _ = p;
    match cmd.stderr(Stdio::inherit()).output() {
        Ok(out) if out.status.success() => serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| json!({"errors": [format!("progtc driver printed no JSON: {e}")]})),
        Ok(out) => {
            json!({"errors": [format!("progtc driver failed: {}", String::from_utf8_lossy(&out.stdout))]})
        }
        Err(e) => json!({"errors": [format!("cannot run the progtc driver: {e}")]}),
    }
}

/// Finds a number in the peer's JSON by trying a few likely paths.
fn peer_figure(peer: &Value, paths: &[&str]) -> Option<f64> {
    paths
        .iter()
        .find_map(|p| peer.pointer(p).and_then(Value::as_f64))
}

fn print_table(ours: &Value, peer: &Value) {
    println!(
        "\n{:<34} {:>14} {:>14} {:>10}",
        "workload", "ptc-sidecar", "progtc 0.2.0", "ratio"
    );
    let rows: [(&str, &str, &[&str], bool); 5] = [
        (
            "exec print(1) p50 (ms)",
            "/exec_print/p50_ms",
            &["/exec_print/p50_ms"],
            false,
        ),
        (
            "exec print(1) p99 (ms)",
            "/exec_print/p99_ms",
            &["/exec_print/p99_ms"],
            false,
        ),
        (
            "sequential call overhead (ms)",
            "/seq_calls/per_call_ms",
            &["/seq_calls/per_call_ms", "/seq_calls/per_call_overhead_ms"],
            false,
        ),
        (
            "gather calls/s",
            "/gather_calls/calls_per_s",
            &["/gather_calls/calls_per_s"],
            true,
        ),
        (
            "peak RSS of the server (MB)",
            "/peak_rss_mb",
            &[
                "/peak_rss_mb/server",
                "/peak_rss_mb",
                "/peak_rss_mb/server_mb",
            ],
            false,
        ),
    ];
    for (label, ours_path, peer_paths, higher_is_better) in rows {
        let a = ours.pointer(ours_path).and_then(Value::as_f64);
        let b = peer_figure(peer, peer_paths);
        let ratio = match (a, b) {
            (Some(a), Some(b)) if a > 0.0 && b > 0.0 => {
                if higher_is_better {
                    format!("{:.1}x", a / b)
                } else {
                    format!("{:.1}x", b / a)
                }
            }
            _ => "-".into(),
        };
        let show = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into());
        println!("{label:<34} {:>14} {:>14} {:>10}", show(a), show(b), ratio);
    }
    println!("(ratio: how many times better ptc-sidecar is; medians, this machine is shared)");
}

/// Workload 10: a run through the MCP front door on stdio against the same over HTTP.
async fn front_door(http: &reqwest::Client, host: std::net::SocketAddr, p: &Params) -> Value {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let sidecar = start_sidecar_with(host, &[]);
    wait_up(http, &sidecar).await;
    let (tools, mcp) = sidecar.tool_files();
    let rt = std::env::temp_dir().join(format!("ptc-front-{}", std::process::id()));
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"));
    cmd.arg("mcp")
        .env("PTC_TOOLS_FILE", &tools)
        .env("PTC_MCP_CONFIG", &mcp)
        .env("PTC_RUNTIME_DIR", &rt)
        .env("PTC_WARM_WORKERS", "2")
        .env("RUST_LOG", "error")
        .stderr(Stdio::null());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("ptc-sidecar mcp");
    let client = ().serve(transport).await.expect("MCP front door handshake");
    // Both ways in a session: a call of the front door runs in its MCP session's live session,
    // so the HTTP runs name one too. What differs is the door.
    let call = |code: &str| {
        let mut args = serde_json::Map::new();
        args.insert("code".into(), json!(code));
        CallToolRequestParams::new("exec_code").with_arguments(args)
    };
    let over_http = |code: &str| json!({"code": code, "session_id": "bench-front-http"});
    let gather = "import asyncio\nawait asyncio.gather(*[demo__noop() for _ in range(100)])";
    let (mut print_http, mut print_mcp) = (Vec::new(), Vec::new());
    let (mut gather_http, mut gather_mcp) = (Vec::new(), Vec::new());
    // In turn, a print each way, and every third time a gather each way.
    for i in 0..p.exec_n {
        let (took, _) = exec_body(http, &sidecar.url, over_http("print(1)")).await;
        print_http.push(took.as_secs_f64() * 1e3);
        let t = Instant::now();
        let r = client
            .call_tool(call("print(1)"))
            .await
            .expect("exec_code over MCP");
        print_mcp.push(t.elapsed().as_secs_f64() * 1e3);
        assert_ne!(r.is_error, Some(true), "{r:?}");
        if i % 3 != 0 {
            continue;
        }
        // Which goes first alternates: a gather is long enough for the order to show.
        for mcp_first in [i % 2 == 0, i % 2 != 0] {
            if mcp_first {
                let t = Instant::now();
                let r = client
                    .call_tool(call(gather))
                    .await
                    .expect("gather over MCP");
                gather_mcp.push(t.elapsed().as_secs_f64() * 1e3);
                assert_ne!(r.is_error, Some(true), "{r:?}");
            } else {
                let (took, _) = exec_body(http, &sidecar.url, over_http(gather)).await;
                gather_http.push(took.as_secs_f64() * 1e3);
            }
        }
    }
    let _ = client.cancel().await;
    let _ = std::fs::remove_dir_all(&rt);
    let (ph, pm) = (median(&mut print_http), median(&mut print_mcp));
    let (gh, gm) = (median(&mut gather_http), median(&mut gather_mcp));
    json!({
        "runs": {"print": print_http.len(), "gather": gather_http.len()},
        "print_p50_ms": {"http": round(ph), "mcp_stdio": round(pm), "added_ms": round(pm - ph)},
        "gather100_median_ms": {"http": round(gh), "mcp_stdio": round(gm), "added_ms": round(gm - gh)},
        "target_added_ms": 0.3,
    })
}

/// Workload 13: the demo server's noop called `seq_k` times through `POST /v1/tools/call` (each
/// request timed here) and `seq_k` times from inside runs (each `await` timed in the code), in
/// five alternating rounds; the p50 of each, and what the API adds.
async fn tools_call(http: &reqwest::Client, host: std::net::SocketAddr, p: &Params) -> Value {
    const ROUNDS: usize = 5;
    let sidecar = start_sidecar_with(host, &[]);
    wait_up(http, &sidecar).await;
    let per_round = p.seq_k.div_ceil(ROUNDS);
    let in_run = format!(
        "import json, time\nts = []\nfor _ in range({per_round}):\n    t = time.perf_counter()\n    \
         await demo__noop()\n    ts.append((time.perf_counter() - t) * 1e3)\nprint(json.dumps(ts))\n"
    );
    let url = format!("{}/v1/tools/call", sidecar.url);
    let body = json!({"tool": "demo__noop", "input": {}, "caller": "runtime"});
    let call = || async {
        let t = Instant::now();
        let r: Value = http
            .post(&url)
            .json(&body)
            .send()
            .await
            .expect("tools/call request")
            .json()
            .await
            .expect("tools/call answer");
        let took = t.elapsed().as_secs_f64() * 1e3;
        assert!(r.get("result").is_some(), "tools/call failed: {r}");
        took
    };
    for _ in 0..50 {
        call().await;
    }
    exec(http, &sidecar.url, &in_run).await;
    let (mut api, mut run) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for _ in 0..per_round {
            api.push(call().await);
        }
        let (_, r) = exec(http, &sidecar.url, &in_run).await;
        let times: Vec<f64> = serde_json::from_str(r["stdout"].as_str().unwrap_or("[]").trim())
            .expect("the run's times");
        assert_eq!(times.len(), per_round, "{r}");
        run.extend(times);
    }
    let (a, r) = (
        percentile(&mut api.clone(), 50.0),
        percentile(&mut run.clone(), 50.0),
    );
    json!({
        "calls": {"api": api.len(), "in_run": run.len()},
        "p50_ms": {"api": round(a), "in_run": round(r), "added_ms": round(a - r)},
        "p99_ms": {"api": round(percentile(&mut api, 99.0)), "in_run": round(percentile(&mut run, 99.0))},
        "target_added_ms": 0.2,
    })
}
