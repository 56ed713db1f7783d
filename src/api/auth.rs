//! Who may call: [`require_key`] puts `PTC_API_KEY` in front of every route but `/healthz`
//! and LibreChat's; [`librechat`] lets LibreChat's routes in with that key or, with
//! `PTC_LIBRECHAT_JWT_PUBLIC_KEY`, a per-user token it verifies once per request, and hands the
//! route the [`Principal`] it found.
//!
//! Owns how a key or token is presented (`X-API-Key` or `Authorization: Bearer`) and checked;
//! it must not decide which routes are protected (the router does) nor what a principal may
//! touch (the routes and the session store do).

use super::error::ApiError;
use super::state::AppState;
use crate::config::Config;
use crate::identity::Principal;
use crate::identity::jwt::Refusal;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;

/// With `PTC_API_KEY` set, requires it as `X-API-Key` or `Authorization: Bearer`.
pub async fn require_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(key) = state.config.api_key.as_deref() else {
        // No key: open on loopback (the config refuses a wider listener without one) unless
        // LibreChat's key let the listener out, which opens LibreChat's routes alone.
        if state.config.librechat_jwt.is_some() && !state.config.listen.is_local() {
            return Err(ApiError::NoKeySet);
        }
        return Ok(next.run(request).await);
    };
    if carries(request.headers(), key) {
        Ok(next.run(request).await)
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// LibreChat's routes: the API key's holder, or (with `PTC_LIBRECHAT_JWT_PUBLIC_KEY`) the user
/// of a verified `Authorization: Bearer` token, put in the request's extensions for the route.
/// Without a key or LibreChat's, everyone is the operator (loopback only).
pub async fn librechat(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let principal = principal_of(&state, request.headers())?;
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

fn principal_of(state: &AppState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let config = &state.config;
    if let Some(key) = config.api_key.as_deref()
        && carries(headers, key)
    {
        return Ok(Principal::Operator);
    }
    let Some(verifier) = &config.librechat_jwt else {
        return match config.api_key {
            Some(_) => Err(ApiError::Unauthorized),
            None => Ok(Principal::Operator),
        };
    };
    let checked = match bearer(headers).map(str::trim) {
        Some(token) => verifier.verify(token),
        // A wrong key and no token: the key is what was tried.
        None if config.api_key.is_some() && headers.contains_key("x-api-key") => {
            return Err(ApiError::Unauthorized);
        }
        None => Err(Refusal::Missing),
    };
    state
        .metrics
        .token_checked(checked.as_ref().map_or_else(Refusal::reason, |_| "ok"));
    match checked {
        Ok(user) => Ok(Principal::User(Arc::new(user))),
        Err(refusal) => {
            tracing::debug!(
                reason = refusal.reason(),
                "refused a LibreChat request: {refusal}"
            );
            Err(ApiError::BadToken(format!(
                "LibreChat's token was refused: {refusal}"
            )))
        }
    }
}

/// Who may call, for `/healthz` and the startup line: `mode` is `api_key`, `librechat_jwt`,
/// both (`api_key+librechat_jwt`) or `none` (open to anyone on this host: loopback only), with
/// LibreChat's key set (kids, algorithms, issuer, audience) when there is one.
pub fn describe(config: &Config) -> Value {
    let mode = match (config.api_key.is_some(), config.librechat_jwt.is_some()) {
        (true, true) => "api_key+librechat_jwt",
        (true, false) => "api_key",
        (false, true) => "librechat_jwt",
        (false, false) => "none",
    };
    json!({
        "mode": mode,
        "librechat_jwt": config.librechat_jwt.as_ref().map(|v| v.describe()),
    })
}

/// Says at start who may call; with no auth at all, that anyone on this host may.
pub fn log_startup(config: &Config) {
    let auth = describe(config);
    if config.api_key.is_none() && config.librechat_jwt.is_none() {
        tracing::warn!(
            "no auth: the control API answers anyone who can reach it, so it listens on loopback \
             only; set PTC_API_KEY, and for LibreChat PTC_LIBRECHAT_JWT_PUBLIC_KEY"
        );
    } else {
        tracing::info!(auth = %auth, "control API auth");
    }
}

/// The credential of `Authorization: Bearer <credential>`, as sent.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Whether a request presents `key` (compared in constant time).
pub fn carries(headers: &HeaderMap, key: &str) -> bool {
    presented_key(headers).is_some_and(|given| constant_time_eq(given.as_bytes(), key.as_bytes()))
}

pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key);
    }
    bearer(headers)
}

/// Compares without leaking where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
