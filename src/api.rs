//! The control API the agent runtime talks to: `GET /v1/tools`, `POST /v1/exec_code`,
//! `GET /healthz`; the attached protocol's stream is in [`attached`], the LibreChat-compatible
//! continuation protocol in [`librechat`].
//!
//! Owns HTTP concerns only (routes, auth, status codes, caching headers); what the body says
//! comes from `render` and the snapshot. Errors are JSON `{"error": {"type", "message"}}`.

pub mod attached;
pub mod events;
pub mod librechat;

use crate::app::AppState;
use crate::render::{Format, llm_tools};
use crate::run::ExecRequest;
use axum::body::to_bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// Header carrying the catalog version on `/v1/tools`.
pub const VERSION_HEADER: &str = "x-catalog-version";

pub fn router(state: AppState) -> Router {
    let attached = attached::Attached::default();
    let streams = attached.clone();
    let protected = Router::new()
        .route("/v1/tools", get(tools))
        .route(
            "/v1/exec_code",
            post(move |state, request| exec_code(state, streams.clone(), request)),
        )
        .merge(attached::router(attached))
        .merge(events::router())
        .layer(middleware::from_fn_with_state(state.clone(), require_key));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(protected)
        .merge(librechat::router(state.clone()))
        .fallback(not_found)
        .with_state(state)
}

/// An error as the API reports it.
pub fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"type": kind, "message": message.into()}});
    (status, Json(body)).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint; see README.md for the API",
    )
}

/// With `PTC_API_KEY` set, requires it as `X-API-Key` or `Authorization: Bearer`.
pub(crate) async fn require_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(key) = state.config.api_key.as_deref() else {
        return next.run(request).await;
    };
    if presented_key(request.headers())
        .is_some_and(|given| constant_time_eq(given.as_bytes(), key.as_bytes()))
    {
        next.run(request).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this sidecar requires its API key as X-API-Key or Authorization: Bearer",
        )
    }
}

pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key);
    }
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Compares without leaking where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn healthz(State(state): State<AppState>) -> Response {
    let snap = state.current();
    let reload = state
        .reload
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Json(json!({
        "status": "ok",
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
    }))
    .into_response()
}

#[derive(Deserialize)]
struct ToolsQuery {
    format: Option<String>,
}

async fn tools(
    State(state): State<AppState>,
    Query(q): Query<ToolsQuery>,
    headers: HeaderMap,
) -> Response {
    let format: Format = match q.format.as_deref().unwrap_or("anthropic").parse() {
        Ok(f) => f,
        Err(message) => return error(StatusCode::BAD_REQUEST, "bad_request", message),
    };
    let snap = state.current();
    let etag = snap.catalog.etag();
    let mut response = if if_none_match(&headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let tools = llm_tools(&snap.catalog, &snap.rendered, format, state.config.timeout);
        Json(json!({
            "version": snap.catalog.version,
            "etag": etag,
            "ptc_enabled": snap.catalog.ptc_enabled,
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
    response
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

/// Largest `POST /v1/exec_code` body: code is text a model wrote, not a file upload.
pub const MAX_EXEC_BYTES: usize = 1 << 20;

#[derive(Deserialize)]
struct ExecBody {
    code: String,
    /// Milliseconds (DESIGN.md); capped by `PTC_TIMEOUT`.
    timeout_ms: Option<u64>,
    /// Seconds, as the `exec_code` tool's own input has it; `timeout_ms` wins when both are given.
    timeout: Option<u64>,
    session_id: Option<String>,
}

/// Reads a JSON body with a size cap, answering what was wrong.
pub async fn json_body<T: serde::de::DeserializeOwned>(
    request: Request,
    limit: usize,
    shape: &str,
) -> Result<T, Response> {
    let bytes = to_bytes(request.into_body(), limit).await.map_err(|_| {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is limited to {limit} bytes"),
        )
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("expected {shape}: {e}"),
        )
    })
}

/// JSON, or with `Accept: text/event-stream` the attached protocol's event stream.
async fn exec_code(
    State(state): State<AppState>,
    streams: attached::Attached,
    request: Request,
) -> Response {
    let stream = attached::wants_stream(request.headers());
    let Some(runner) = state.runner.clone() else {
        return error(
            StatusCode::CONFLICT,
            "ptc_disabled",
            "PTC_ENABLED is false on this sidecar: every tool is direct and there is no exec_code",
        );
    };
    let body: ExecBody = match json_body(
        request,
        MAX_EXEC_BYTES,
        r#"{"code": "...", "timeout_ms"?: N}"#,
    )
    .await
    {
        Ok(b) => b,
        Err(response) => return response,
    };
    let timeout = match (body.timeout_ms, body.timeout) {
        (Some(0), _) | (None, Some(0)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "timeout_ms must be at least 1",
            );
        }
        (Some(ms), _) => Some(Duration::from_millis(ms)),
        (None, Some(s)) => Some(Duration::from_secs(s)),
        (None, None) => None,
    };
    let request = ExecRequest {
        code: body.code,
        timeout,
        session_id: body.session_id,
        ..ExecRequest::default()
    };
    if stream {
        return streams.stream(runner, request);
    }
    Json(runner.exec(request).await).into_response()
}
