//! Who may call the bridge, and how much: the run a request's bearer token belongs to (on a
//! run's own bridge, only that run), the body within its limit and its time, and the shapes
//! of an answer and of a refusal.

use super::{BIND_WAIT, BODY_TIMEOUT, Binding, Claim, LoopbackSlot, MAX_CALL_BYTES};
use crate::run::calls::{Calls, RunCtx};
use axum::body::{Bytes, to_bytes};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// An answer to bash as bash prints it: plain UTF-8 text.
pub(super) fn plain(status: StatusCode, body: String) -> Response {
    let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    (status, content_type, body).into_response()
}

/// Why a request was refused before its body was read whole: each route says it its way.
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) kind: &'static str,
    pub(super) message: String,
}

impl Refusal {
    /// As the JSON routes answer.
    pub(super) fn json(self) -> Response {
        refuse(self.status, self.kind, &self.message)
    }
}

/// The run a request's bearer token belongs to, and its body within [`MAX_CALL_BYTES`].
pub(super) async fn authorized(
    calls: &Calls,
    request: Request,
) -> Result<(Arc<RunCtx>, Bytes), Refusal> {
    authorized_within(calls, request, MAX_CALL_BYTES).await
}

/// The run a request's bearer token belongs to, and its body within `limit` bytes.
pub(super) async fn authorized_within(
    calls: &Calls,
    request: Request,
    limit: usize,
) -> Result<(Arc<RunCtx>, Bytes), Refusal> {
    bound_in_time(&request).await;
    let run = authorize(calls, &request)?;
    match tokio::time::timeout(BODY_TIMEOUT, to_bytes(request.into_body(), limit)).await {
        Ok(Ok(body)) => Ok((run, body)),
        Ok(Err(_)) => Err(too_large(limit)),
        Err(_) => Err(body_timeout()),
    }
}

/// Through a run's bridge, waits (within [`BIND_WAIT`]) until the bridge answers the token the
/// request presents: the run's code may have called before the sidecar bound the run there.
/// [`authorize`] then decides.
pub(super) fn bound_in_time(
    request: &Request,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let waiting = request
        .extensions()
        .get::<Binding>()
        .zip(bearer(request))
        .map(|(Binding(bound), token)| (bound.clone(), token.to_string()));
    async move {
        if let Some((mut bound, token)) = waiting {
            let _ = tokio::time::timeout(
                BIND_WAIT,
                bound.wait_for(|now| now.as_deref() == Some(token.as_str())),
            )
            .await;
        }
    }
}

/// The request's bearer token.
fn bearer(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// The run a request's bearer token belongs to, before any of its body is read.
pub(super) fn authorize(calls: &Calls, request: &Request) -> Result<Arc<RunCtx>, Refusal> {
    let token = bearer(request);
    // Through a run's own bridge, only that run's token while it goes on.
    let bound = request
        .extensions()
        .get::<Binding>()
        .map(|b| b.0.borrow().clone());
    let token = match (token, bound) {
        (Some(t), Some(Some(bound))) if t == &*bound => {
            if let Some(claim) = request.extensions().get::<Claim>() {
                claim.claim(&bound);
            }
            Some(t)
        }
        (_, Some(_)) => None,
        (t, None) => t,
    };
    let run = token
        .and_then(|t| calls.run_for_token(t).map(|run| (t, run)))
        .ok_or_else(|| Refusal {
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            message: "missing or unknown run token (the run may be over)".into(),
        });
    let (token, run) = run?;
    // Through the loopback, the connection is the run's now, within its share.
    if let Some(LoopbackSlot(slot)) = request.extensions().get::<LoopbackSlot>() {
        slot.claim(&Arc::from(token)).map_err(|over| Refusal {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "limit",
            message: format!(
                "this run has {} connections to the sidecar open, its share: wait for a call to \
                 answer before opening another",
                over.share
            ),
        })?;
    }
    Ok(run)
}

pub(super) fn too_large(limit: usize) -> Refusal {
    Refusal {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        kind: "too_large",
        message: format!("the body is limited to {limit} bytes"),
    }
}

pub(super) fn body_timeout() -> Refusal {
    Refusal {
        status: StatusCode::REQUEST_TIMEOUT,
        kind: "timeout",
        message: format!(
            "the body did not arrive within {} s",
            BODY_TIMEOUT.as_secs()
        ),
    }
}

/// A request refused before anything was dispatched (either route).
pub(super) fn refuse(status: StatusCode, kind: &str, message: &str) -> Response {
    reply(
        status,
        json!({"ok": false, "error": {"type": kind, "message": message}}),
    )
}

pub(super) fn reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
