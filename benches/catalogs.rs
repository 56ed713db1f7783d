//! Catalogs of any size: the `exec_code` description within `PTC_DESCRIPTION_BUDGET`, the
//! speed and quality of `search_tools`, and what each summary choice costs in tokens.
//!
//! 1. For the corpus (76 tools) and synthetic catalogs of 1,000 and 5,000 tools
//!    (`tests/support/synthetic.rs`): o200k_base tokens of the full description and of the
//!    budgeted one (default budget), how many signatures it shows, and the p50 and p95 of one
//!    search (each labelled query, many times) with the time to build the index.
//! 2. Search quality over the corpus: top-1 and top-3 hit rates of the labelled queries in
//!    `benches/search-queries.json` (phrased as a user asks, each with the tool that answers),
//!    the set the synonyms were tuned on and a held-out set that was not.
//! 3. Summary choices on the corpus: tokens of the whole description with no summaries, with
//!    the summaries cut at `MAX_SUMMARY_CHARS` (the compact level), with whole first sentences
//!    (up to `MAX_RICH_SUMMARY_CHARS`), and with whole first sentences and parameter notes (the
//!    rich level, what `render` gives when it fits the budget).
//!
//! 4. The search model (`PTC_SEARCH_MODEL`, `catalogs/model.rs`): where embedding's time goes
//!    (tokens per text, batchings, threads), embedding the real catalogs (255 tools) and 330,
//!    1,000 and 5,000 tools cold and from the state directory, one search in process, and
//!    `search_tools` inside a run at 5,000 tools with the model and with BM25F alone.
//!
//! Exits non-zero when a budgeted description is over its budget, the corpus's rich description
//! is over the default budget, search p50 at 5,000 tools is
//! over 1 ms, the top-3 rate is under 90%, or `search_tools` inside a run with the model takes
//! over 50 ms at the median.
//!
//! Run: `cargo bench --bench catalogs` (`cargo test --bench catalogs` runs it unoptimised:
//! the same counts and hit rates, slower searches).

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "catalogs/model.rs"]
mod model;

use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy, ServerTools};
use ptc_sidecar::config::DEFAULT_DESCRIPTION_BUDGET;
use ptc_sidecar::render::notes;
use ptc_sidecar::render::parse::parse_signature;
use ptc_sidecar::render::signature::{MAX_RICH_SUMMARY_CHARS, MAX_SUMMARY_CHARS, summary};
use ptc_sidecar::render::{Snapshot, search, tokens};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The targets.
const TARGET_SEARCH_P50: Duration = Duration::from_millis(1);
const TARGET_TOP3: f64 = 0.90;
/// Rounds over the query set when timing searches.
const ROUNDS: usize = 50;

fn snapshot(servers: Vec<ServerTools>, budget: Option<usize>) -> Snapshot {
    let input = CatalogInput {
        servers,
        ..CatalogInput::default()
    };
    let policy = Policy {
        ptc_enabled: true,
        description_budget: budget,
        ..Policy::default()
    };
    Snapshot::new(Catalog::build(input, &policy, 1))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> ExitCode {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let corpus = support::saved_catalogs_in(&root.join("tests/corpus"));
    let queries: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("benches/search-queries.json")).unwrap(),
    )
    .unwrap();
    let labelled = |set: &str| -> Vec<(String, String)> {
        queries[set]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                (
                    q["query"].as_str().unwrap().to_string(),
                    q["tool"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (held_out, queries) = (labelled("held_out"), labelled("queries"));
    let budget = DEFAULT_DESCRIPTION_BUDGET as usize;
    let mut ok = true;
    // No warm-up: a sidecar loads the vocabulary for each rendering that must count (and drops
    // it after, src/render/tokens.rs), so a snapshot's build time includes that load.

    println!("o200k_base tokens; budget {budget} (PTC_DESCRIPTION_BUDGET's default)");
    println!(
        "{:<9} {:>6} {:>8} {:>9} {:>7} {:>10} {:>9} {:>10} {:>10}",
        "catalog",
        "tools",
        "full",
        "budgeted",
        "listed",
        "snapshot ms",
        "index ms",
        "search p50",
        "search p95"
    );
    for size in [76, 1_000, 5_000] {
        let servers = if size == 76 {
            support::synthetic::originals(&corpus)
        } else {
            support::synthetic::catalog(&corpus, size)
        };
        let full = snapshot(servers.clone(), None);
        // What a start or a reload pays: the catalog, the budgeted description, the index.
        let started = Instant::now();
        let budgeted = snapshot(servers, Some(budget));
        let snapshot_ms = started.elapsed().as_secs_f64() * 1e3;
        let index_started = Instant::now();
        let index = search::Index::build(&budgeted.catalog, &budgeted.rendered);
        let index_ms = index_started.elapsed().as_secs_f64() * 1e3;
        let mut times = Vec::with_capacity(ROUNDS * queries.len());
        for _ in 0..ROUNDS {
            for (query, _) in &queries {
                let t = Instant::now();
                std::hint::black_box(index.search(query, 5));
                times.push(t.elapsed());
            }
        }
        times.sort();
        let (p50, p95) = (percentile(&times, 0.5), percentile(&times, 0.95));
        let (f, b) = (
            tokens::count(&full.rendered.description),
            tokens::count(&budgeted.rendered.description),
        );
        println!(
            "{:<9} {:>6} {:>8} {:>9} {:>7} {:>10.1} {:>9.1} {:>8.3}ms {:>8.3}ms",
            if size == 76 { "corpus" } else { "synthetic" },
            budgeted.catalog.ptc().count(),
            f,
            b,
            budgeted.rendered.listed,
            snapshot_ms,
            index_ms,
            p50.as_secs_f64() * 1e3,
            p95.as_secs_f64() * 1e3,
        );
        if b > budget {
            println!("    the budgeted description is over the budget");
            ok = false;
        }
        if size == 5_000 && p50 > TARGET_SEARCH_P50 {
            println!("    search p50 over the {TARGET_SEARCH_P50:?} target");
            ok = false;
        }
    }

    // Quality over the corpus itself (the queries name its tools).
    let corpus_snapshot = snapshot(support::synthetic::originals(&corpus), None);
    for (label, set) in [("tuning", &queries), ("held out", &held_out)] {
        let (mut top1, mut top3) = (0, 0);
        let mut misses = Vec::new();
        for (query, want) in set {
            let hits: Vec<&str> = corpus_snapshot
                .search
                .search(query, 3)
                .iter()
                .map(|h| corpus_snapshot.rendered.lines[h.tool].0.as_str())
                .collect();
            top1 += usize::from(hits.first() == Some(&want.as_str()));
            if hits.contains(&want.as_str()) {
                top3 += 1;
            } else {
                misses.push(format!("    miss: {query:?} wants {want}, got {hits:?}"));
            }
        }
        let n = set.len() as f64;
        println!(
            "\nsearch quality over the corpus, {} {label} queries: top-1 {:.1}%, top-3 {:.1}%",
            set.len(),
            top1 as f64 / n * 100.0,
            top3 as f64 / n * 100.0
        );
        misses.iter().for_each(|m| println!("{m}"));
        if (top3 as f64 / n) < TARGET_TOP3 {
            println!("    top-3 under the {:.0}% target", TARGET_TOP3 * 100.0);
            // The target holds the tuned set; the held-out set is reported, not gated.
            ok &= label != "tuning";
        }
    }

    // What each summary choice costs over the whole corpus.
    let rendered = &corpus_snapshot.rendered;
    let variant = |f: &dyn Fn(&str, &str) -> String| -> usize {
        let mut text = rendered.description.clone();
        for (name, line) in &rendered.lines {
            let tool = corpus_snapshot.catalog.get(name).unwrap();
            let bare = line.split(" — ").next().unwrap();
            let with = f(bare, &tool.description);
            // Lines appear without their section prefix; replace by the unprefixed tail.
            let cut = line.find("__").map_or(0, |i| i + 2);
            let cut = if rendered
                .description
                .contains(&format!("\n{}", &line[cut..]))
            {
                cut
            } else {
                0
            };
            text = text.replacen(&line[cut..], &with[cut.min(with.len())..], 1);
        }
        tokens::count(&text)
    };
    let none = variant(&|bare, _| bare.to_string());
    let cut = tokens::count(&rendered.description);
    let whole = variant(&|bare, d| {
        let s = summary(d, MAX_RICH_SUMMARY_CHARS);
        if s.is_empty() {
            bare.to_string()
        } else {
            format!("{bare} — {s}")
        }
    });
    let uncapped = variant(&|bare, d| {
        let s = summary(d, usize::MAX);
        if s.is_empty() {
            bare.to_string()
        } else {
            format!("{bare} — {s}")
        }
    });
    // The rich level as `render` gives it when it fits: whole first sentences and notes.
    let rich_snapshot = snapshot(support::synthetic::originals(&corpus), Some(usize::MAX));
    let rich = tokens::count(&rich_snapshot.rendered.description);
    let noted = rendered
        .lines
        .iter()
        .filter(|(name, line)| {
            let tool = corpus_snapshot.catalog.get(name).unwrap();
            let sig = parse_signature(line).unwrap();
            !notes::notes(&tool.input_schema, &sig.params).is_empty()
        })
        .count();
    println!(
        "\nsummaries over the corpus description (76 tools): none {none} tokens; first sentence \
         cut at {MAX_SUMMARY_CHARS} chars (at a word; compact, what renders without a budget or \
         when the rich level does not fit) {cut} (+{}); whole first sentence (up to \
         {MAX_RICH_SUMMARY_CHARS} chars) {whole} (+{}; uncapped {uncapped}); whole first \
         sentence + parameter notes (rich, what the default budget gives) {rich} (+{}; notes on \
         {noted} tools)",
        cut - none,
        whole - none,
        rich - none
    );
    if rich > budget {
        println!("    the rich corpus description is over the default budget");
        ok = false;
    }

    ok &= model::run(&corpus, &queries, |servers| snapshot(servers, Some(budget)));

    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
