//! `PTC_API_KEY`: the middleware that requires it on every route but `/healthz`.
//!
//! Owns how a key is presented (`X-API-Key` or `Authorization: Bearer`) and compared; it must
//! not decide which routes are protected (the router does).

use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;

/// With `PTC_API_KEY` set, requires it as `X-API-Key` or `Authorization: Bearer`.
pub async fn require_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(key) = state.config.api_key.as_deref() else {
        return Ok(next.run(request).await);
    };
    if carries(request.headers(), key) {
        Ok(next.run(request).await)
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// Whether a request presents `key` (compared in constant time).
pub fn carries(headers: &HeaderMap, key: &str) -> bool {
    presented_key(headers).is_some_and(|given| constant_time_eq(given.as_bytes(), key.as_bytes()))
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
