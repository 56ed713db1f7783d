//! Workload 14, `javascript_vs_python` (issue 39): JavaScript runs beside Python ones on one
//! sidecar and its no-op host tool: `console.log(1)` against `print(1)`, p50, back to back and
//! with a pause between runs (as an agent's runs come: the warm pool refills meanwhile); the
//! per-call cost of K sequential calls; G calls under one `Promise.all` against one
//! `asyncio.gather`, calls/s. Each less the p50 of an empty run of its language; medians of
//! `repeats` runs. Target: JavaScript's p50 within 2x of Python's.

use crate::{Params, exec_lang, median, round};
use serde_json::{Value, json};
use std::time::Duration;

/// The pause between the runs of the spaced measurement: longer than node's start, so a
/// pre-started worker is ready for each run.
const PAUSE: Duration = Duration::from_millis(300);

pub async fn javascript_vs_python(http: &reqwest::Client, url: &str, p: &Params) -> Value {
    let (k, g) = (p.seq_k / 5, p.gather_g);
    let workloads = [
        (
            "python",
            "print(1)".to_string(),
            format!("for _ in range({k}):\n    await noop()\n"),
            format!("await asyncio.gather(*[noop() for _ in range({g})])\n"),
        ),
        (
            "javascript",
            "console.log(1)".to_string(),
            format!("for (let i = 0; i < {k}; i++) await noop();"),
            format!("await Promise.all(Array.from({{length: {g}}}, () => noop()));"),
        ),
    ];
    let mut out = serde_json::Map::new();
    for (lang, empty, seq, gather) in workloads {
        let lat = |code: String, n: usize, pause: Duration| async move {
            let mut v = Vec::new();
            for _ in 0..n {
                tokio::time::sleep(pause).await;
                v.push(exec_lang(http, url, &code, lang).await.0.as_secs_f64() * 1e3);
            }
            median(&mut v)
        };
        // The first run of a language starts what its runs are made from.
        lat(empty.clone(), 3, PAUSE).await;
        let spaced_ms = lat(empty.clone(), p.exec_n / 10, PAUSE).await;
        let empty_ms = lat(empty, p.exec_n / 3, Duration::ZERO).await;
        let seq_ms = lat(seq, p.repeats, Duration::ZERO).await;
        let gather_ms = lat(gather, p.repeats, Duration::ZERO).await;
        out.insert(
            lang.into(),
            json!({
                "spaced_p50_ms": round(spaced_ms),
                "back_to_back_p50_ms": round(empty_ms),
                "seq_per_call_ms": round((seq_ms - empty_ms) / k as f64),
                "gather_calls_per_s": round(g as f64 / ((gather_ms - empty_ms) / 1e3)),
            }),
        );
    }
    let ratio = |key: &str| {
        let of = |lang: &str| out[lang][key].as_f64().unwrap_or(f64::NAN);
        round(of("javascript") / of("python"))
    };
    let ratios = json!({"spaced_p50": ratio("spaced_p50_ms"), "back_to_back_p50": ratio("back_to_back_p50_ms")});
    out.insert("javascript_over_python".into(), ratios);
    out.insert("k".into(), json!(k));
    out.insert("g".into(), json!(g));
    out.insert("target_ratio".into(), json!(2.0));
    Value::Object(out)
}
