//! The API's errors: one type for every refusal an HTTP handler gives, and the one place that
//! turns it into a status and a body; plus reading a capped JSON body into a value or into the
//! error that says what was wrong.
//!
//! Owns the wire shape of a refusal, `{"error": {"type", "message"}}`, and the two LibreChat
//! answers whose shape the client fixes (a flat `error` code it branches on). It must not hold
//! the answers that are not refusals: a LibreChat run that failed is a `200` with
//! `status: "error"` (the handlers build those).

use crate::run::CallError;
use axum::Json;
use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why a request was refused. The `Display` text is the `message` of the body.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// 400 `bad_request`: the body or a parameter says something the endpoint cannot do.
    #[error("{0}")]
    BadRequest(String),
    /// 400 `bad_request`: a continuation's `tool_results` do not match its round.
    #[error(transparent)]
    BadResults(#[from] ResultsError),
    /// 401 `unauthorized`: `PTC_API_KEY` is set and the request did not carry it.
    #[error("this sidecar requires its API key as X-API-Key or Authorization: Bearer")]
    Unauthorized,
    /// 401 `unauthorized`: a LibreChat route's token was missing or refused (the message says
    /// which check failed, never the token).
    #[error("{0}")]
    BadToken(String),
    /// 401 `unauthorized`: a route beyond LibreChat's, on a sidecar listening beyond loopback
    /// with LibreChat's key and no `PTC_API_KEY`.
    #[error(
        "this route needs PTC_API_KEY, which this sidecar does not set: it listens beyond \
         loopback with PTC_LIBRECHAT_JWT_PUBLIC_KEY alone, which opens only LibreChat's routes"
    )]
    NoKeySet,
    /// 403 `invalid_token`: a continuation token this sidecar did not issue, or for another
    /// session.
    #[error("{0}")]
    InvalidToken(String),
    /// 403 `forbidden`: the request came from where this endpoint does not answer (an
    /// `Origin` that is not a local one, at `/mcp`).
    #[error("{0}")]
    Forbidden(String),
    /// 404 `not_found`: no such endpoint, or nothing open under the id the request names.
    #[error("{0}")]
    NotFound(String),
    /// 409 `ptc_disabled`: `PTC_ENABLED=false`, so there is no code execution.
    #[error("{0}")]
    PtcDisabled(&'static str),
    /// 409 `token_used`: the continuation token's round was already continued.
    #[error("this continuation token was already used (each works once)")]
    TokenUsed,
    /// 413 `too_large`: the body is over the endpoint's cap.
    #[error("the body is limited to {limit} bytes")]
    TooLarge { limit: usize },
    /// 413 `quota`: a session would hold more than its quota (the message names it).
    #[error("{0}")]
    Quota(String),
    /// 409 `busy`: what the request needs is held by another request for too long.
    #[error("{0}")]
    Busy(String),
    /// 500 `internal`: the sidecar failed at something that should not fail (a disk error).
    #[error("{0}")]
    Internal(String),
    /// 422 `{"error": "unsupported_capability"}`: a `lang` other than Python. The LibreChat
    /// client reads this code (not a `type`) as a permanent capability mismatch.
    #[error("ptc-sidecar runs Python, bash, JavaScript and TypeScript, not {lang:?}")]
    UnsupportedLang { lang: String },
    /// 429 `{"error": "rate_limited", "retry_after_seconds"}`: too many open runs; the
    /// LibreChat client reads both keys.
    #[error("too many open runs; retry after {retry_after_seconds} s")]
    RateLimited { retry_after_seconds: u64 },
    /// 503 `shutting_down`: the sidecar got SIGTERM or SIGINT; it finishes the runs it has and
    /// takes no new ones.
    #[error(transparent)]
    ShuttingDown(#[from] crate::run::ShuttingDown),
    /// A runtime's tool call (`POST /v1/tools/call`) refused or failed: its `type` is the
    /// error a run's code would get (`input` 400, `unknown_tool` 404, `denied` 403,
    /// `rate_limited` and `limit` 429, `tool` 502, `unavailable` 503, `timeout` 504).
    #[error(transparent)]
    Call(#[from] crate::run::CallError),
}

/// A continuation's `tool_results` against the calls its round asked for.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ResultsError {
    #[error("call_id {0:?} is answered twice")]
    Twice(String),
    #[error(
        "tool_results name call ids this round did not ask for: {}; it asked for: {}",
        unknown.join(", "),
        expected.join(", ")
    )]
    Unknown {
        unknown: Vec<String>,
        expected: Vec<String>,
    },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::BadResults(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized | ApiError::BadToken(_) | ApiError::NoKeySet => {
                StatusCode::UNAUTHORIZED
            }
            ApiError::InvalidToken(_) | ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::PtcDisabled(_) | ApiError::TokenUsed => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } | ApiError::Quota(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Busy(_) => StatusCode::CONFLICT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::UnsupportedLang { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::ShuttingDown(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Call(e) => match e {
                CallError::Input(_) => StatusCode::BAD_REQUEST,
                CallError::UnknownTool(_) => StatusCode::NOT_FOUND,
                CallError::Denied(_) => StatusCode::FORBIDDEN,
                CallError::RateLimited(_) | CallError::Limit(_) => StatusCode::TOO_MANY_REQUESTS,
                CallError::Tool(_) => StatusCode::BAD_GATEWAY,
                CallError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                CallError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            },
        }
    }

    /// The `type` of the body.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) | ApiError::BadResults(_) => "bad_request",
            ApiError::Unauthorized | ApiError::BadToken(_) | ApiError::NoKeySet => "unauthorized",
            ApiError::InvalidToken(_) => "invalid_token",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::PtcDisabled(_) => "ptc_disabled",
            ApiError::TokenUsed => "token_used",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::Quota(_) => "quota",
            ApiError::Busy(_) => "busy",
            ApiError::Internal(_) => "internal",
            ApiError::UnsupportedLang { .. } => "unsupported_capability",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::ShuttingDown(_) => "shutting_down",
            ApiError::Call(e) => e.kind(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match &self {
            ApiError::UnsupportedLang { .. } => {
                json!({"error": self.kind(), "message": self.to_string()})
            }
            ApiError::RateLimited {
                retry_after_seconds,
            } => json!({"error": self.kind(), "retry_after_seconds": retry_after_seconds}),
            _ => json!({"error": {"type": self.kind(), "message": self.to_string()}}),
        };
        (self.status(), Json(body)).into_response()
    }
}

/// Reads a JSON body of at most `limit` bytes; `shape` names what was expected when it is not.
pub async fn json_body<T: serde::de::DeserializeOwned>(
    request: Request,
    limit: usize,
    shape: &str,
) -> Result<T, ApiError> {
    let bytes = to_bytes(request.into_body(), limit)
        .await
        .map_err(|_| ApiError::TooLarge { limit })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("expected {shape}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    async fn wire(e: ApiError) -> (u16, String) {
        let response = e.into_response();
        let status = response.status().as_u16();
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// The bodies the integration tests cannot reach cheaply (256 open runs, a bad round).
    #[tokio::test]
    async fn each_error_has_its_status_and_body() {
        assert_eq!(
            wire(ApiError::RateLimited {
                retry_after_seconds: 1
            })
            .await,
            (
                429,
                r#"{"error":"rate_limited","retry_after_seconds":1}"#.into()
            )
        );
        assert_eq!(
            wire(crate::run::ShuttingDown.into()).await,
            (
                503,
                r#"{"error":{"type":"shutting_down","message":"ptc-sidecar is shutting down and takes no new runs; send the run to another instance"}}"#.into()
            )
        );
        assert_eq!(
            wire(ApiError::TokenUsed).await,
            (
                409,
                r#"{"error":{"type":"token_used","message":"this continuation token was already used (each works once)"}}"#.into()
            )
        );
        assert_eq!(
            wire(ResultsError::Twice("c1".into()).into()).await,
            (
                400,
                r#"{"error":{"type":"bad_request","message":"call_id \"c1\" is answered twice"}}"#
                    .into()
            )
        );
        assert_eq!(
            wire(
                ResultsError::Unknown {
                    unknown: vec!["x".into(), "y".into()],
                    expected: vec!["a".into()],
                }
                .into()
            )
            .await,
            (
                400,
                r#"{"error":{"type":"bad_request","message":"tool_results name call ids this round did not ask for: x, y; it asked for: a"}}"#.into()
            )
        );
    }
}
