//! Tool search: `search_tools(query)` ranked over the catalog's PTC tools, BM25 over weighted
//! fields (BM25F): the Python name, the title, the parameter names, the description.
//!
//! Built once per snapshot (a pure function of the catalog and its rendering) and read by the
//! IPC bridge, so code finds the tools the budgeted description leaves out. Words are folded
//! to a light stem and a few verbs tools are named by to one word (`remove` finds `delete_*`),
//! since a model asks the way a user would, not in the tool's words. It must not know what a
//! tool's results look like (the run layer adds the learned shapes to each hit).

use super::description::Rendered;
pub use super::query::typed_query;
use crate::catalog::Catalog;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Most hits one search returns: enough to choose from, few enough to print.
pub const MAX_LIMIT: usize = 20;
/// Longest query read, in characters: a query is a phrase, not a document.
pub const MAX_QUERY_CHARS: usize = 500;
/// Longest summary a hit carries: the first sentence, whole up to here.
pub const HIT_SUMMARY_CHARS: usize = 240;

/// BM25's term-frequency saturation and length normalisation (the usual values).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Weight of each field: a word of the name says more than a word of the prose.
const NAME_WEIGHT: f64 = 3.0;
const TITLE_WEIGHT: f64 = 2.0;
const PARAM_WEIGHT: f64 = 1.5;
const DESCRIPTION_WEIGHT: f64 = 1.0;

/// One tool found.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The index into [`Rendered::lines`] (catalog order of the PTC tools).
    pub tool: usize,
    pub score: f64,
}

/// The search index of one catalog.
#[derive(Debug, Default)]
pub struct Index {
    /// Term → (tool, weighted term frequency).
    postings: HashMap<String, Vec<(u32, f64)>>,
    /// Weighted length of each tool's document.
    lengths: Vec<f64>,
    average: f64,
}

impl Index {
    /// Indexes the PTC tools of `catalog` in the order of `rendered.lines`.
    pub fn build(catalog: &Catalog, rendered: &Rendered) -> Index {
        let mut postings: HashMap<String, Vec<(u32, f64)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(rendered.lines.len());
        for (i, (name, _)) in rendered.lines.iter().enumerate() {
            let Some(tool) = catalog.get(name) else {
                lengths.push(0.0);
                continue;
            };
            let mut tf: HashMap<String, f64> = HashMap::new();
            let mut length = 0.0;
            let mut add = |text: &str, weight: f64| {
                for term in terms(text) {
                    *tf.entry(term).or_default() += weight;
                    length += weight;
                }
            };
            add(&tool.python_name, NAME_WEIGHT);
            add(tool.title.as_deref().unwrap_or(""), TITLE_WEIGHT);
            add(&param_names(&tool.input_schema).join(" "), PARAM_WEIGHT);
            add(&tool.description, DESCRIPTION_WEIGHT);
            let mut tf: Vec<(String, f64)> = tf.into_iter().collect();
            tf.sort_by(|a, b| a.0.cmp(&b.0));
            for (term, f) in tf {
                postings.entry(term).or_default().push((i as u32, f));
            }
            lengths.push(length);
        }
        let average = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().sum::<f64>() / lengths.len() as f64).max(1.0)
        };
        Index {
            postings,
            lengths,
            average,
        }
    }

    /// The best `limit` tools for `query` (at most [`MAX_LIMIT`]), best first; ties in catalog
    /// order. Tools that share no word with the query are not returned. The query is read
    /// [`typed_query`]: a value's kind counts as a word of it.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let hits: Vec<Hit> = self
            .scores(&typed_query(query))
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .map(|(tool, score)| Hit { tool, score })
            .collect();
        best(hits, limit)
    }

    /// The best `limit` tools for `query`: with the search model's `cosines` (one per tool,
    /// in index order), BM25F and the cosines [`blend`]ed by [`BM25_WEIGHT`]; without them
    /// (no model, or the catalog's vectors not ready yet), BM25F alone. Both read the query
    /// [`typed_query`] (the model's vector is of that text too: `embed::catalog`).
    pub fn rank(&self, query: &str, cosines: Option<&[f32]>, limit: usize) -> Vec<Hit> {
        match cosines {
            Some(cosines) if cosines.len() == self.lengths.len() => blend(
                &self.scores(&typed_query(query)),
                cosines,
                BM25_WEIGHT,
                limit,
            ),
            _ => self.search(query, limit),
        }
    }

    /// Every tool's BM25F score for the words of `query` as given (not typed), in index order
    /// (0 for a tool that shares no word with it).
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let query: String = query.chars().take(MAX_QUERY_CHARS).collect();
        let mut words = terms(&query);
        words.sort();
        words.dedup();
        let n = self.lengths.len() as f64;
        let mut scores = vec![0.0f64; self.lengths.len()];
        for word in &words {
            let Some(list) = self.postings.get(word) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(tool, f) in list {
                let norm = K1 * (1.0 - B + B * self.lengths[tool as usize] / self.average);
                scores[tool as usize] += idf * f * (K1 + 1.0) / (f + norm);
            }
        }
        scores
    }
}

/// The best `limit` of `hits` (at most [`MAX_LIMIT`]), best first; ties in index order.
fn best(mut hits: Vec<Hit>, limit: usize) -> Vec<Hit> {
    let limit = limit.clamp(1, MAX_LIMIT);
    let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.tool.cmp(&b.tool));
    if hits.len() > limit {
        hits.select_nth_unstable_by(limit - 1, order);
        hits.truncate(limit);
    }
    hits.sort_by(order);
    hits
}

/// What of a tool an embedding model reads: its server (`github: `), its name as words
/// (`browser_fill_form` → `browser fill form`), its title, the first sentence of its
/// description and its parameter names. The whole description would drown a short tool's
/// purpose in its usage notes. Chosen on the tuning half (`cargo bench --bench search`): the
/// server before the rest ranked best there (top-3 69.4% blended, against 67.3% without it,
/// 63.3% for the name with 500 characters of description, and 63-68% for each field on a
/// vector of its own, combined by max or mean).
pub fn embedded_text(tool: &crate::catalog::Tool) -> String {
    let name = tool
        .python_name
        .split(['_', '-'])
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let summary = super::signature::summary(&tool.description, HIT_SUMMARY_CHARS);
    let params = param_names(&tool.input_schema);
    let params = match params.is_empty() {
        true => String::new(),
        false => format!("Parameters: {}", params.join(", ")),
    };
    let server = tool.server().map_or_else(String::new, |s| format!("{s}: "));
    server
        + &[
            name.as_str(),
            tool.title.as_deref().unwrap_or(""),
            &summary,
            &params,
        ]
        .iter()
        .map(|part| part.trim().trim_end_matches('.'))
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(". ")
}

/// BM25F's share of a tool's score beside the model's cosine ([`blend`]). Chosen on the
/// tuning half of `benches/search-queries-users.json` (`cargo bench --bench search`): 0.1
/// ranked best there (top-1 48.0%, top-3 69.4%) among linear blends of 0.05-0.45, blends of
/// z-scores and reciprocal-rank fusion ([`fuse`], 0.2: 62-63%); the words still break the
/// model's near ties (`gitlab` in a query), the meaning ranks the rest.
pub const BM25_WEIGHT: f64 = 0.1;

/// The best `limit` tools by a linear blend: `bm25_weight` × BM25F over the best BM25F score
/// of the query, plus the rest × the cosine (both then in 0..1).
pub fn blend(bm25: &[f64], cosine: &[f32], bm25_weight: f64, limit: usize) -> Vec<Hit> {
    let top = bm25.iter().copied().fold(0.0f64, f64::max).max(1e-9);
    let hits = bm25
        .iter()
        .zip(cosine)
        .enumerate()
        .map(|(tool, (b, c))| Hit {
            tool,
            score: bm25_weight * b / top + (1.0 - bm25_weight) * f64::from(*c),
        })
        .collect();
    best(hits, limit)
}

/// Reciprocal-rank fusion's constant: how much the first places count over the later ones
/// (60 is the value of the paper that introduced it, Cormack et al. 2009).
pub const RRF_K: f64 = 60.0;

/// The best `limit` tools by reciprocal-rank fusion of two rankings of every tool: BM25F's
/// `bm25` scores (a tool sharing no word with the query takes no part in that ranking) and
/// the cosine similarities `cosine` of the query's and each tool's embeddings, weighted
/// `bm25_weight` and `1 - bm25_weight`.
pub fn fuse(bm25: &[f64], cosine: &[f32], bm25_weight: f64, limit: usize) -> Vec<Hit> {
    let ranks = |scores: Vec<(usize, f64)>| -> Vec<Option<usize>> {
        let mut order = scores;
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut rank = vec![None; bm25.len()];
        for (place, (tool, _)) in order.into_iter().enumerate() {
            rank[tool] = Some(place);
        }
        rank
    };
    let lexical = ranks(
        bm25.iter()
            .copied()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect(),
    );
    let semantic = ranks(cosine.iter().map(|c| f64::from(*c)).enumerate().collect());
    let rrf = |rank: Option<usize>| rank.map_or(0.0, |r| 1.0 / (RRF_K + r as f64 + 1.0));
    let hits = (0..bm25.len())
        .map(|tool| Hit {
            tool,
            score: bm25_weight * rrf(lexical[tool]) + (1.0 - bm25_weight) * rrf(semantic[tool]),
        })
        .collect();
    best(hits, limit)
}

/// The top-level parameter names of an input schema.
fn param_names(schema: &Value) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// The search terms of a text: words split at non-alphanumerics and `_`, lower case, stop
/// words dropped, each folded to its stem and synonyms to one word. A camelCase word gives
/// itself and its parts (`GitHub`: `github`, `git`, `hub`).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        push(&mut out, &raw.to_lowercase());
        let mut parts = Vec::new();
        let mut part = String::new();
        let mut prev_lower = false;
        for c in raw.chars() {
            if c.is_uppercase() && prev_lower {
                parts.push(std::mem::take(&mut part));
            }
            prev_lower = c.is_lowercase() || c.is_numeric();
            part.extend(c.to_lowercase());
        }
        if !parts.is_empty() {
            parts.push(part);
            for p in &parts {
                push(&mut out, p);
            }
        }
    }
    out
}

fn push(out: &mut Vec<String>, word: &str) {
    if word.is_empty() || STOP_WORDS.contains(&word) {
        return;
    }
    if let Some((_, words)) = EXPANSIONS.iter().find(|(short, _)| *short == word) {
        words.iter().for_each(|w| push(out, w));
        return;
    }
    let stem = stem(word);
    out.push(synonym(word, &stem).map_or(stem, self::stem));
}

/// Words too common to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "it", "its",
    "this", "that", "with", "by", "as", "at", "from", "me", "my", "i", "you", "your", "we", "our",
    "can", "do", "does", "how", "what", "which", "some", "all", "any", "if", "into", "will",
    "would", "should", "please", "want", "need", "using", "use", "tool", "tools", "then", "there",
];

/// A light stem: plural and verb endings off and a final `e`, so `issues`, `listing`, `listed`,
/// `removing` and `remove` meet at `issu`, `list`, `remov`. Only ever compared with stems.
fn stem(word: &str) -> String {
    if word.len() <= 3 || !word.is_ascii() {
        return word.to_string();
    }
    let mut w = word.to_string();
    if let Some(base) = w.strip_suffix("ies").filter(|b| b.len() >= 2) {
        w = format!("{base}y");
    } else if w.ends_with("sses") {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !(w.ends_with("ss") || w.ends_with("us") || w.ends_with("is")) {
        w.pop();
    }
    if let Some(base) = w.strip_suffix("ing").filter(|b| b.len() >= 3) {
        w = base.to_string();
    } else if let Some(base) = w.strip_suffix("ed").filter(|b| b.len() >= 3) {
        w = base.to_string();
    }
    if w.len() > 3 && w.ends_with('e') {
        w.pop();
    }
    w
}

/// The verbs (and a few nouns) tools are named by, each with the words a user says instead.
const SYNONYMS: &[(&str, &[&str])] = &[
    (
        "delete",
        &[
            "remove", "erase", "drop", "destroy", "rm", "forget", "discard",
        ],
    ),
    ("create", &["make", "new", "add"]),
    (
        "get",
        &[
            "fetch", "retrieve", "obtain", "show", "view", "display", "lookup", "download",
        ],
    ),
    ("list", &["enumerate", "ls"]),
    ("search", &["find", "query", "look", "locate", "grep"]),
    ("update", &["edit", "modify", "change", "alter"]),
    ("write", &["save", "store"]),
    ("read", &["load", "cat", "inside"]),
    ("move", &["rename", "mv"]),
    ("log", &["history"]),
    ("multiple", &["several", "many", "batch", "bulk"]),
    ("relation", &["relationship", "link", "connection"]),
    ("entity", &["person", "people", "thing"]),
    ("memory", &["remember", "memorize", "recall", "knowledge"]),
    ("url", &["web", "webpage", "website", "page", "internet"]),
    ("image", &["png", "jpg", "jpeg", "picture", "photo"]),
    ("directory", &["folder", "dir"]),
    ("repository", &["repo"]),
    ("issue", &["ticket", "bug"]),
    ("size", &["large", "big", "bytes"]),
];

/// Abbreviations that stand for several words.
const EXPANSIONS: &[(&str, &[&str])] = &[
    ("pr", &["pull", "request"]),
    ("prs", &["pull", "request"]),
    ("mr", &["pull", "request"]),
];

/// The canonical word of `word` (or of its stem: `removing` is `remov`, as is `remove`).
fn synonym(word: &str, stemmed: &str) -> Option<&'static str> {
    static TABLE: OnceLock<HashMap<String, &'static str>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = HashMap::new();
        for (canonical, others) in SYNONYMS {
            for other in *others {
                table.insert(other.to_string(), *canonical);
                table.entry(stem(other)).or_insert(*canonical);
            }
        }
        table
    });
    table.get(word).or_else(|| table.get(stemmed)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::ToolDef;
    use crate::catalog::{CatalogInput, Policy, ServerTools};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn def(name: &str, description: &str, params: &[&str]) -> ToolDef {
        let properties: serde_json::Map<String, Value> = params
            .iter()
            .map(|p| (p.to_string(), json!({"type": "string"})))
            .collect();
        ToolDef {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema: json!({"type": "object", "properties": properties}),
            output_schema: None,
            annotations: None,
        }
    }

    fn catalog() -> Catalog {
        let input = CatalogInput {
            servers: vec![
                ServerTools {
                    server: "fs".into(),
                    tools: vec![
                        def(
                            "read_file",
                            "Read the complete contents of a file.",
                            &["path"],
                        ),
                        def(
                            "write_file",
                            "Create a new file or overwrite one.",
                            &["path", "content"],
                        ),
                        def(
                            "list_directory",
                            "List the entries of a directory.",
                            &["path"],
                        ),
                        def(
                            "move_file",
                            "Move or rename files and directories.",
                            &["source", "destination"],
                        ),
                    ],
                },
                ServerTools {
                    server: "github".into(),
                    tools: vec![
                        def(
                            "create_issue",
                            "Create a new issue in a GitHub repository.",
                            &["owner", "repo", "title"],
                        ),
                        def(
                            "list_issues",
                            "List issues in a GitHub repository with filtering options.",
                            &["owner", "repo", "state"],
                        ),
                        def(
                            "delete_file",
                            "Delete a file from a repository.",
                            &["owner", "repo", "path"],
                        ),
                    ],
                },
            ],
            ..CatalogInput::default()
        };
        Catalog::build(
            input,
            &Policy {
                ptc_enabled: true,
                ..Policy::default()
            },
            1,
        )
    }

    fn ranked(query: &str, limit: usize) -> Vec<String> {
        let c = catalog();
        let r = super::super::render(&c);
        let index = Index::build(&c, &r);
        index
            .search(query, limit)
            .into_iter()
            .map(|h| r.lines[h.tool].0.clone())
            .collect()
    }

    #[test]
    fn terms_split_fold_and_drop() {
        assert_eq!(
            terms("listIssues of the GitHub repos; removing FILES, directories"),
            [
                "listissu",
                "list",
                "issu",
                "github",
                "git",
                "hub",
                "repository",
                "delet",
                "fil",
                "directory"
            ]
        );
    }

    #[test]
    fn rankings() {
        assert_eq!(
            ranked("open a new ticket on my GitHub repo", 3),
            [
                "github__create_issue",
                "github__list_issues",
                "github__delete_file"
            ]
        );
        assert_eq!(
            ranked("remove a file", 2),
            ["github__delete_file", "fs__read_file"]
        );
        assert_eq!(
            ranked("what is in this folder", 5),
            ["fs__list_directory", "fs__move_file"]
        );
        assert_eq!(ranked("rename report.txt", 1), ["fs__move_file"]);
        assert_eq!(ranked("zebra", 5), Vec::<String>::new());
    }

    #[test]
    fn fusion_ranks_by_both_and_weights_them() {
        // Tool 0 leads BM25F, tool 2 leads the cosines, tool 1 is second in both.
        let bm25 = [3.0, 2.0, 0.0, 1.0];
        let cosine = [0.1, 0.6, 0.9, 0.2];
        let order =
            |w: f64| -> Vec<usize> { fuse(&bm25, &cosine, w, 4).iter().map(|h| h.tool).collect() };
        assert_eq!(
            order(0.5),
            [1, 0, 3, 2],
            "second in both beats first in one"
        );
        assert_eq!(order(0.0), [2, 1, 3, 0], "the cosines alone");
        assert_eq!(
            order(1.0)[..3],
            [0, 1, 3],
            "BM25F alone (tool 2 shares no word)"
        );
        assert_eq!(fuse(&bm25, &cosine, 0.5, 2).len(), 2);
    }

    #[test]
    fn the_blend_lets_meaning_lead_and_words_break_ties() {
        let bm25 = [3.0, 0.0, 1.5, 0.0];
        let order = |cosine: &[f32], w: f64| -> Vec<usize> {
            blend(&bm25, cosine, w, 4).iter().map(|h| h.tool).collect()
        };
        // The model sees tool 1 as the meaning: a small BM25F share does not overturn it.
        assert_eq!(order(&[0.30, 0.62, 0.35, 0.10], BM25_WEIGHT), [1, 0, 2, 3]);
        // Near twins for the model (0 and 2): the words decide.
        assert_eq!(order(&[0.50, 0.20, 0.51, 0.10], BM25_WEIGHT), [0, 2, 1, 3]);
        assert_eq!(
            order(&[0.50, 0.20, 0.51, 0.10], 0.0),
            [2, 0, 1, 3],
            "the cosines alone"
        );
        assert_eq!(order(&[0.0; 4], 1.0)[..2], [0, 2], "BM25F alone");
        // A query no word of which is in the catalog: the cosines alone, no division by 0.
        let none = blend(&[0.0; 3], &[0.1, 0.3, 0.2], BM25_WEIGHT, 2);
        assert_eq!(none.iter().map(|h| h.tool).collect::<Vec<_>>(), [1, 2]);
        assert!(none.iter().all(|h| h.score.is_finite()));
    }

    #[test]
    fn rank_blends_only_with_a_cosine_for_every_tool() {
        let c = catalog();
        let snap = crate::render::Snapshot::new(c);
        let n = snap.rendered.lines.len();
        let query = "what is in this folder";
        let alone = snap.search.search(query, 3);
        assert_eq!(snap.search.rank(query, None, 3), alone);
        assert_eq!(
            snap.search.rank(query, Some(&vec![0.5; n - 1]), 3),
            alone,
            "a short list is not used"
        );
        // The model's favourite, sharing no word with the query, comes first with cosines.
        let mut cosines = vec![0.1f32; n];
        let favourite = n - 1;
        cosines[favourite] = 0.9;
        let hits = snap.search.rank(query, Some(&cosines), 3);
        assert_eq!(hits[0].tool, favourite);
        assert!(!alone.iter().any(|h| h.tool == favourite));
    }

    #[test]
    fn the_embedded_text_is_the_name_title_summary_and_parameters() {
        let c = catalog();
        let tool = c
            .tools()
            .iter()
            .find(|t| t.name == "github__list_issues")
            .unwrap();
        let text = embedded_text(tool);
        assert_eq!(
            text,
            "github: github list issues. List issues in a GitHub repository with filtering \
             options. Parameters: owner, repo, state"
        );
    }

    #[test]
    fn limits_are_kept() {
        assert_eq!(ranked("file", 2).len(), 2);
        assert_eq!(ranked("file", 0).len(), 1);
        assert!(ranked(&"file ".repeat(10_000), 100).len() <= MAX_LIMIT);
    }
}
