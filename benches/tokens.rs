//! Token benchmark: what the LLM pays for tool schemas with and without PTC.
//!
//! For each saved MCP catalog in the corpus, and for all of them as one catalog, counts
//! o200k_base tokens of (a) the Anthropic `tools` JSON with every tool direct and (b) our
//! `exec_code` description without a budget (the compact level: summaries cut at 44
//! characters), preamble included, and prints the reduction; (c) counts the description within
//! `PTC_DESCRIPTION_BUDGET`'s default (the rich level, whole first sentences and parameter
//! notes, while it fits; `cargo bench --bench catalogs` has catalogs that do not) and its
//! reduction. The lossless check runs on (b) and (c). Exits non-zero when a check fails or the
//! whole-corpus reduction of (b) is under the target.
//!
//! Run: `cargo bench --bench tokens [-- CORPUS_DIR]` (default: tests/corpus).

// A benchmark stops at the first broken step: unwrap/expect are its assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy, ServerTools, source};
use ptc_sidecar::config::DEFAULT_DESCRIPTION_BUDGET;
use ptc_sidecar::render::{self, Format, llm_tools, lossless};
use ptc_sidecar::sources::SavedCatalog;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The target: the description at least 75% smaller than the Anthropic tools JSON.
const TARGET_REDUCTION: f64 = 0.75;

fn main() -> ExitCode {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus"));
    let saved = support::saved_catalogs_in(&dir);
    let bpe = tiktoken_rs::o200k_base().expect("tiktoken-rs ships o200k_base");
    let count = |text: &str| bpe.encode_with_special_tokens(text).len();

    println!("o200k_base tokens, corpus {}", dir.display());
    println!(
        "{:<22} {:>6} {:>10} {:>12} {:>10} {:>9} {:>9} {:>10}",
        "catalog",
        "tools",
        "anthropic",
        "description",
        "reduction",
        "lossless",
        "budgeted",
        "reduction"
    );
    let mut ok = true;
    let mut groups: Vec<(String, Vec<&SavedCatalog>)> =
        saved.iter().map(|s| (s.server.clone(), vec![s])).collect();
    groups.push(("ALL (one catalog)".into(), saved.iter().collect()));
    for (label, members) in &groups {
        let servers = members
            .iter()
            .map(|s| {
                let (tools, problems) =
                    source::read_saved_tool_list(&s.path).expect("corpus file reads");
                assert!(problems.is_empty(), "{problems:?}");
                ServerTools {
                    server: s.server.clone(),
                    tools,
                }
            })
            .collect::<Vec<_>>();
        let input = CatalogInput {
            servers,
            ..CatalogInput::default()
        };
        // (a): every tool direct, as an agent without PTC sends them. Under the servers' own
        // names (as the corpus's published baseline counts them), not `server__tool`: the
        // smaller baseline, so the harder target.
        let unprefixed = CatalogInput {
            host_tools: input.servers.iter().flat_map(|s| s.tools.clone()).collect(),
            ..CatalogInput::default()
        };
        let direct = Catalog::build(unprefixed, &Policy::default(), 1);
        let direct_json = llm_tools(
            &direct,
            &render::render(&direct),
            Format::Anthropic,
            Duration::from_secs(120),
        );
        let a = count(&direct_json.to_string());
        // (b): the exec_code description of the same tools.
        let budgeted = Catalog::build(
            input.clone(),
            &Policy {
                ptc_enabled: true,
                description_budget: Some(DEFAULT_DESCRIPTION_BUDGET as usize),
                ..Policy::default()
            },
            1,
        );
        let within = render::render(&budgeted);
        let c = count(&within.description);
        let ptc = Catalog::build(
            input,
            &Policy {
                ptc_enabled: true,
                ..Policy::default()
            },
            1,
        );
        let rendered = render::render(&ptc);
        let b = count(&rendered.description);
        let mut problems = lossless::check_catalog(&ptc, &rendered.description);
        problems.extend(lossless::check_catalog(&budgeted, &within.description));
        let reduction = 1.0 - b as f64 / a as f64;
        println!(
            "{:<22} {:>6} {:>10} {:>12} {:>9.1}% {:>9} {:>9} {:>9.1}%",
            label,
            ptc.ptc().count(),
            a,
            b,
            reduction * 100.0,
            if problems.is_empty() { "pass" } else { "FAIL" },
            c,
            (1.0 - c as f64 / a as f64) * 100.0
        );
        for p in &problems {
            println!("    {p}");
        }
        ok &= problems.is_empty();
        if label.starts_with("ALL") && reduction < TARGET_REDUCTION {
            println!("    below the {:.0}% target", TARGET_REDUCTION * 100.0);
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
