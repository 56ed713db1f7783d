//! Synthetic catalogs of any size from the corpus, for the benchmark and the budget test: the
//! corpus's servers copied under other names (`acme_github`), their tools renamed
//! (`create_issue_acme`) and their descriptions varied (a sentence naming the copy's
//! workspace at the end), until there are as many tools as asked. Deterministic: the same corpus and
//! size give the same catalog.

use ptc_sidecar::catalog::{ServerTools, source};
use ptc_sidecar::sources::SavedCatalog;

/// The names copies are made under, in order; past them a number is added.
const WORKSPACES: &[&str] = &[
    "acme",
    "globex",
    "initech",
    "umbrella",
    "hooli",
    "stark",
    "wayne",
    "tyrell",
    "cyberdyne",
    "wonka",
    "soylent",
    "aperture",
    "massive",
    "vandelay",
    "dunder",
    "pied",
];

/// A catalog of exactly `tools` tools (the corpus has 76; copies are added whole, the last one
/// cut), as the MCP servers of a `CatalogInput`.
pub fn catalog(corpus: &[SavedCatalog], tools: usize) -> Vec<ServerTools> {
    let originals = originals(corpus);
    let mut out = Vec::new();
    let mut left = tools;
    for copy in 0.. {
        if left == 0 {
            break;
        }
        let workspace = match WORKSPACES.get(copy % WORKSPACES.len()) {
            Some(w) if copy < WORKSPACES.len() => w.to_string(),
            Some(w) => format!("{w}{}", copy / WORKSPACES.len() + 1),
            None => unreachable!("copy % len is in range"),
        };
        for original in &originals {
            if left == 0 {
                break;
            }
            let mut defs = original.tools.clone();
            defs.truncate(left);
            left -= defs.len();
            for def in &mut defs {
                def.name = format!("{}_{workspace}", def.name);
                def.description = format!(
                    "{} Works on the {workspace} workspace ({} copy {}).",
                    def.description.trim_end(),
                    original.server,
                    copy + 1
                );
            }
            out.push(ServerTools {
                server: format!("{workspace}_{}", original.server),
                tools: defs,
            });
        }
    }
    out
}

/// The corpus's servers as they are.
pub fn originals(corpus: &[SavedCatalog]) -> Vec<ServerTools> {
    corpus
        .iter()
        .map(|s| ServerTools {
            server: s.server.clone(),
            tools: source::read_saved_tool_list(&s.path)
                .expect("corpus file reads")
                .0,
        })
        .collect()
}
