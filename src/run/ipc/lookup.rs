//! `POST /search` and `POST /search/bash` (the SDK's and bash's `search_tools`) and
//! `POST /describe` (what `describe()` adds to catalog.json): they read the run's catalog, the
//! search model's cosines when `PTC_SEARCH_MODEL` is set, and the learned shapes. The bridge's
//! own checks (the token, the body's bounds) are the parent's.

use super::MAX_LOOKUP_BYTES;
use super::auth::{authorized_within, plain, refuse, reply};
use crate::config::Lang;
use crate::embed::MODEL_WAIT;
use crate::render::description::code_name;
use crate::render::search::{HIT_SUMMARY_CHARS, MAX_QUERY_CHARS};
use crate::render::signature::summary;
use crate::run::bash::bash_name;
use crate::run::calls::{Calls, RunCtx};
use crate::run::dispatch::CallError;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Deserialize)]
pub(super) struct SearchBody {
    query: String,
    #[serde(default = "default_limit")]
    limit: usize,
    /// The language of the run asking (`"javascript"` from the JavaScript SDK): its names and
    /// signatures are what the results show. Python when absent.
    #[serde(default)]
    lang: Option<String>,
}

fn default_limit() -> usize {
    5
}

/// One tool found, as both doors show it.
struct Found {
    /// The name the run's language calls it by (Python's, or JavaScript's).
    name: String,
    tool: String,
    signature: String,
    summary: String,
    /// The learned result shape, for a tool without an output schema that calls taught.
    returns: Option<String>,
}

/// The query's refusal when it is too long to be a question.
fn too_long() -> String {
    format!(
        "the query is over {MAX_QUERY_CHARS} characters: say in a few words what the tool \
         should do"
    )
}

/// What a search found, and, when a search model is set but did not rank it, why (the
/// catalog's vectors were not ready within the wait).
struct Searched {
    found: Vec<Found>,
    words_alone: Option<String>,
}

/// The best `limit` tools of the run's catalog for `query`: fused with the search model's
/// cosines when there is a model, else BM25F alone. A catalog whose vectors are not ready is
/// waited for, up to `embed::MODEL_WAIT` and the run's time left less a second; past that,
/// BM25F answers and says why. A search is one of the run's calls (`max_calls`), and the model
/// takes the run's queries one at a time, in turn with other runs' (`Embeddings::cosines_for`):
/// a run that floods searches waits behind itself.
async fn found(
    calls: &Calls,
    run: &RunCtx,
    query: &str,
    limit: usize,
    lang: Lang,
) -> Result<Searched, CallError> {
    run.count_call("search_tools")?;
    let snapshot = &run.snapshot;
    let wait = run
        .clock
        .left()
        .saturating_sub(Duration::from_secs(1))
        .min(MODEL_WAIT);
    let (cosines, words_alone) = match calls.embeddings() {
        Some(model) => match model.cosines_for(&run.id, snapshot, query, wait).await {
            Ok(cosines) => (Some(cosines), None),
            Err(why) => (None, Some(why.0)),
        },
        None => (None, None),
    };
    let found = snapshot
        .search
        .rank(query, cosines.as_deref(), limit)
        .into_iter()
        .filter_map(|hit| {
            // The description's line in the run's language: both renderings list the tools in
            // the same order.
            let (name, line) = snapshot.rendered_in(lang).lines.get(hit.tool)?;
            let tool = snapshot.catalog.get(name)?;
            let returns = match tool.output_schema {
                None => calls
                    .shapes()
                    .get(&tool.name)
                    .map(|l| l.shape.show_in(lang)),
                Some(_) => None,
            };
            Some(Found {
                name: code_name(tool, lang),
                tool: tool.name.clone(),
                signature: line.clone(),
                summary: summary(&tool.description, HIT_SUMMARY_CHARS),
                returns,
            })
        })
        .collect();
    Ok(Searched { found, words_alone })
}

/// `POST /search {query, limit}` (the SDK's `search_tools`): `{ok, results}`, the best matches
/// in the run's catalog, each `{name, tool, signature, summary}` and, when calls taught it,
/// `returns` (the learned result shape).
pub(super) async fn search(State(calls): State<Calls>, request: Request) -> Response {
    let (run, body) = match authorized_within(&calls, request, MAX_LOOKUP_BYTES).await {
        Ok(authorized) => authorized,
        Err(refused) => return refused.json(),
    };
    let query = match serde_json::from_slice::<SearchBody>(&body) {
        Ok(query) if query.query.chars().count() <= MAX_QUERY_CHARS => query,
        Ok(_) => return refuse(StatusCode::BAD_REQUEST, "input", &too_long()),
        Err(e) => {
            let message = format!(r#"expected {{"query": str, "limit": int}}: {e}"#);
            return refuse(StatusCode::BAD_REQUEST, "input", &message);
        }
    };
    let lang = lang_of(query.lang.as_deref());
    let searched = match found(&calls, &run, &query.query, query.limit, lang).await {
        Ok(searched) => searched,
        Err(over) => return refuse(StatusCode::TOO_MANY_REQUESTS, "limit", &over.to_string()),
    };
    let results: Vec<Value> = searched
        .found
        .into_iter()
        .map(|f| {
            let mut result = json!({
                "name": f.name,
                "tool": f.tool,
                "signature": f.signature,
                "summary": f.summary,
            });
            if let Some(returns) = f.returns {
                result["returns"] = json!(returns);
            }
            result
        })
        .collect();
    let mut answer = json!({"ok": true, "results": results});
    if let Some(why) = searched.words_alone {
        answer["note"] = json!(why);
    }
    reply(StatusCode::OK, answer)
}

#[derive(Deserialize)]
pub(super) struct BashLimit {
    limit: Option<usize>,
}

/// `POST /search/bash?limit=N` (bash's `search_tools`), the body the query as plain text:
/// `200` with each hit as two lines, `NAME  # summary` (the bash function to call) and its
/// signature, or the error as one line of text.
pub(super) async fn bash_search(
    State(calls): State<Calls>,
    Query(limit): Query<BashLimit>,
    request: Request,
) -> Response {
    let (run, body) = match authorized_within(&calls, request, MAX_LOOKUP_BYTES).await {
        Ok(authorized) => authorized,
        Err(refused) => {
            return plain(
                refused.status,
                format!("search_tools: {}\n", refused.message),
            );
        }
    };
    let query = match std::str::from_utf8(&body) {
        Ok(q) if q.chars().count() <= MAX_QUERY_CHARS && !q.trim().is_empty() => q.trim(),
        Ok(q) if q.trim().is_empty() => {
            let usage = "search_tools: say what you need: search_tools \"what you need\" [limit]\n";
            return plain(StatusCode::BAD_REQUEST, usage.into());
        }
        Ok(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("search_tools: {}\n", too_long()),
            );
        }
        Err(_) => {
            let message = "search_tools: the query is not UTF-8 text\n";
            return plain(StatusCode::BAD_REQUEST, message.into());
        }
    };
    let limit = limit.limit.unwrap_or(default_limit());
    let searched = match found(&calls, &run, query, limit, Lang::Python).await {
        Ok(searched) => searched,
        Err(over) => return plain(StatusCode::TOO_MANY_REQUESTS, format!("{over}\n")),
    };
    let mut out = String::new();
    if let Some(why) = searched.words_alone {
        let _ = writeln!(out, "# {why}");
    }
    for f in searched.found {
        let _ = writeln!(out, "{}  # {}", bash_name(&f.tool), f.summary);
        let _ = writeln!(out, "    {}", f.signature);
        if let Some(returns) = f.returns {
            let _ = writeln!(out, "    returns {returns}");
        }
    }
    plain(StatusCode::OK, out)
}

#[derive(Deserialize)]
pub(super) struct DescribeBody {
    tool: String,
    /// The language of the run asking, as on `/search`.
    #[serde(default)]
    lang: Option<String>,
}

/// The language a lookup's `lang` names: Python when absent or not one of ours.
fn lang_of(lang: Option<&str>) -> Lang {
    lang.and_then(|l| l.parse().ok()).unwrap_or(Lang::Python)
}

/// `POST /describe {tool, lang?}`: `{ok, signature, returns, calls}`: the tool's line in the
/// description in `lang`, and the result shape learned from `calls` calls of a tool without
/// an output schema, in `lang`'s notation (`returns: null` when there is none).
pub(super) async fn describe(State(calls): State<Calls>, request: Request) -> Response {
    let (run, body) = match authorized_within(&calls, request, MAX_LOOKUP_BYTES).await {
        Ok(authorized) => authorized,
        Err(refused) => return refused.json(),
    };
    let (name, lang) = match serde_json::from_slice::<DescribeBody>(&body) {
        Ok(body) => (body.tool, lang_of(body.lang.as_deref())),
        Err(e) => {
            let message = format!(r#"expected {{"tool": name}}: {e}"#);
            return refuse(StatusCode::BAD_REQUEST, "input", &message);
        }
    };
    let catalog = &run.snapshot.catalog;
    let Some(tool) = catalog.get(&name).or_else(|| catalog.by_python_name(&name)) else {
        let message = format!("no tool named {name:?} in this run's catalog");
        return refuse(StatusCode::NOT_FOUND, "unknown_tool", &message);
    };
    let learned = tool
        .output_schema
        .is_none()
        .then(|| calls.shapes().get(&tool.name))
        .flatten();
    reply(
        StatusCode::OK,
        json!({
            "ok": true,
            "signature": run.snapshot.rendered_in(lang).line(&tool.name),
            "returns": learned.as_ref().map(|l| l.shape.show_in(lang)),
            "calls": learned.map_or(0, |l| l.calls),
        }),
    )
}
