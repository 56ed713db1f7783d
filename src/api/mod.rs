//! The control API the agent runtime talks to: `GET /v1/tools` and `GET /healthz` here;
//! `POST /v1/exec_code` with its attached stream in [`exec`], `POST /v1/tools/call` (a
//! runtime's one call, native PTC) in [`tools_call`], `GET /v1/events` in [`events`],
//! the LibreChat-compatible continuation protocol in [`librechat`].
//!
//! Owns HTTP concerns only (routes, auth, status codes, caching headers); what the body says
//! comes from `render` and the snapshot. Every refusal is an [`ApiError`], answered as JSON
//! `{"error": {"type", "message"}}`.
//!
//! Imports inside `api/` go one way: this module wires the others and nothing imports it;
//! `exec`, `events` and `librechat` use the leaves `error`, `state`, `auth` and `sse`.

mod approvals;
mod auth;
pub mod dashboard;
mod error;
mod events;
mod exec;
pub mod front;
mod librechat;
mod preview;
mod session_files;
mod sessions;
mod sse;
mod state;
mod tools_call;
mod workspace;

pub use auth::log_startup;
pub use dashboard::LazyBoard;
pub use error::{ApiError, ResultsError};
pub use state::AppState;

use crate::metrics::Gauges;
use crate::render::{Format, Lang, NativeError, llm_tools, native_tools, note_sessions};
use crate::util::lock;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

/// Header carrying the catalog version on `/v1/tools`.
pub const VERSION_HEADER: &str = "x-catalog-version";

pub fn router(state: AppState) -> Router {
    // Prometheus may scrape without the key when the operator says so.
    let metrics_route = match state.config.metrics {
        true => Router::new().route("/metrics", get(metrics)),
        false => Router::new(),
    };
    let (open, guarded) = match state.config.metrics_public {
        true => (metrics_route, Router::new()),
        false => (Router::new(), metrics_route),
    };
    let protected = Router::new()
        .route("/v1/tools", get(tools))
        .merge(guarded)
        .merge(exec::router(
            state.runner.clone(),
            state.sessions.clone(),
            state.artifacts.clone(),
            state.config.lang,
        ))
        .merge(preview::router(
            state.runner.clone(),
            state.snapshot.clone(),
        ))
        .merge(events::router())
        .merge(dashboard::router())
        .merge(match (&state.runner, &state.sessions, &state.artifacts) {
            (Some(runner), Some(sessions), Some(artifacts)) => {
                sessions::router(runner.clone(), sessions.clone(), artifacts.clone())
                    .merge(session_files::router(sessions.clone()))
            }
            _ => Router::new(),
        })
        .merge(match &state.runner {
            Some(_) => front::router(state.clone()),
            None => Router::new(),
        })
        // A runtime's calls (native PTC) wait for people too, with PTC on or off.
        .merge(approvals::router(state.native.approvals().clone()))
        .merge(tools_call::router(state.native.clone()))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    // LibreChat's routes: the key, or with PTC_LIBRECHAT_JWT_PUBLIC_KEY a user's token.
    let librechat = librechat::router(state.runner.clone(), state.sessions.clone()).layer(
        middleware::from_fn_with_state(state.clone(), auth::librechat),
    );
    Router::new()
        .route("/healthz", get(healthz))
        .merge(dashboard::page_router(false))
        .merge(open)
        .merge(protected)
        .merge(librechat)
        .fallback(not_found)
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint; see README.md for the API".into())
}

/// `GET /healthz?ready=search`: also 503 until the search model has the published catalog's
/// vectors (a readiness probe that keeps a fresh sidecar out of rotation until its first
/// searches rank with the model).
#[derive(serde::Deserialize)]
struct HealthQuery {
    ready: Option<String>,
}

async fn healthz(
    State(state): State<AppState>,
    axum::extract::Query(query): axum::extract::Query<HealthQuery>,
) -> Response {
    let snap = state.current();
    let reload = lock(&state.reload).clone();
    // Shutting down: a readiness probe takes the sidecar out of rotation while its runs finish.
    let closing = state
        .runner
        .as_ref()
        .is_some_and(|r| r.check_open().is_err());
    let search_ready = state.runner.as_ref().is_none_or(|r| r.search_ready(&snap));
    let unready = query.ready.as_deref() == Some("search") && !search_ready;
    let status = match closing || unready {
        true => StatusCode::SERVICE_UNAVAILABLE,
        false => StatusCode::OK,
    };
    let body = Json(json!({
        "status": if closing { "shutting_down" } else { "ok" },
        "ptc_enabled": snap.catalog.ptc_enabled,
        "catalog": {
            "version": snap.catalog.version,
            "tools": snap.catalog.tools().len(),
            "ptc_tools": snap.catalog.ptc().count(),
            "problems": snap.catalog.report().len(),
        },
        // Each MCP server: state (starting|ready|failed|restarting|stopped), tools, restarts,
        // and the error of a failed or restarting one.
        "mcp_servers": state.mcp.as_ref().map(|hub| hub.health()).unwrap_or_else(|| json!({})),
        // The event publisher: connected to Redis or not, what it holds and had to drop.
        "events": state.events.health(),
        // Hot reload: how many swaps, and why the last attempt kept the old catalog, if it did.
        "reload": {"reloads": reload.reloads, "last_error": reload.last_error},
        // Who may call: api_key, librechat_jwt, both, or none (loopback only).
        "auth": auth::describe(&state.config),
        // How runs are confined and what is missing (docs/SECURITY.md); null with PTC off.
        "sandbox": state.runner.as_ref().map(|r| r.sandbox_status()),
        // How search_tools ranks: bm25f, or bm25f+embeddings with PTC_SEARCH_MODEL (the
        // model, the vectors kept, the last catalog embedded); null with PTC off.
        "search": state.runner.as_ref().map(|r| {
            let mut health = r.search_health();
            health["ready"] = json!(search_ready);
            health
        }),
        // Live session interpreters (PTC_MAX_SESSIONS at most); null with PTC off.
        "sessions": state.runner.as_ref().map(|r| json!({
            "live": r.sessions().live(),
            "max_live": r.sessions().max,
            "stored": state.sessions.as_ref().map_or(0, |s| s.list().len()),
        })),
    }));
    (status, body).into_response()
}

/// `GET /metrics`: the Prometheus text format (docs/observability.md).
async fn metrics(State(state): State<AppState>) -> Response {
    let reload = lock(&state.reload).clone();
    let stats = state.events.stats();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let mut now = Gauges {
        events_published: load(&stats.published),
        events_held: load(&stats.held),
        events_dropped: load(&stats.dropped),
        catalog_version: state.current().catalog.version as i64,
        reloads_ok: reload.reloads,
        reloads_failed: reload.failures,
        ..Gauges::default()
    };
    if let Some(r) = &state.runner {
        now.runs_in_flight = r.live_runs() as i64;
        now.runs_queued = r.queued_runs() as i64;
        now.warm_workers = r.warm_workers() as i64;
        now.sessions_live = r.sessions().live() as i64;
        now.sessions_max = r.sessions().max as i64;
        now.approvals_waiting = r.approvals().waiting() as i64;
        now.share_refusals = crate::run::budget::refusals();
    }
    if let Some(sessions) = &state.sessions {
        now.session_records_unreadable = sessions.unreadable().len() as i64;
    }
    if let Some(hub) = &state.mcp {
        now.mcp_servers = hub
            .status()
            .into_iter()
            .map(|(name, s)| (name, s.state.name(), u64::from(s.restarts)))
            .collect();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(&now),
    )
        .into_response()
}

#[derive(Deserialize)]
struct ToolsQuery {
    format: Option<String>,
    /// The runtime sends `session_id`: the `exec_code` description says that state persists.
    #[serde(default)]
    sessions: bool,
    /// `native`: the provider runs the model's code (`render::native_tools`).
    ptc: Option<String>,
    /// The language of the `exec_code` description (`python`, `javascript`, `js`,
    /// `typescript`, `ts`); none: `PTC_LANG`.
    lang: Option<String>,
}

async fn tools(
    State(state): State<AppState>,
    Query(q): Query<ToolsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let format = q
        .format
        .as_deref()
        .unwrap_or("anthropic")
        .parse::<Format>()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let native = match q.ptc.as_deref() {
        None => false,
        Some("native") if format == Format::Mcp => {
            return Err(ApiError::BadRequest(NativeError::Mcp.to_string()));
        }
        Some("native") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(
                NativeError::Unknown(other.to_string()).to_string(),
            ));
        }
    };
    let lang = match q.lang.as_deref() {
        None => state.config.lang,
        Some(lang) => lang
            .parse::<Lang>()
            .map_err(|e| ApiError::BadRequest(e.to_string()))?,
    };
    let snap = state.current();
    // Another language is another description of the same catalog: another entity.
    let etag = match lang {
        Lang::Python => snap.catalog.etag(),
        Lang::JavaScript => format!("\"js-{:016x}\"", snap.catalog.fingerprint),
    };
    let mut response = if if_none_match(&headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let tools = if native {
            native_tools(&snap.catalog, format).map_err(|e| ApiError::BadRequest(e.to_string()))?
        } else {
            let rendered = snap.rendered_in(lang);
            let mut tools = llm_tools(&snap.catalog, rendered, format, state.config.timeout);
            if q.sessions {
                note_sessions(&mut tools);
            }
            tools
        };
        Json(json!({
            "version": snap.catalog.version,
            "etag": etag,
            "ptc_enabled": snap.catalog.ptc_enabled,
            "lang": lang.as_str(),
            "tools": tools,
        }))
        .into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(VERSION_HEADER, HeaderValue::from(snap.catalog.version));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}
