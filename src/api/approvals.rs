//! Where a person answers a call that waits for them: `GET /v1/approvals` (what waits, oldest
//! first, each call's arguments whole up to 4 KiB of JSON, else an excerpt),
//! `GET /v1/approvals/{id}/args` (one call's whole arguments, as the JSON they are) and
//! `POST /v1/approvals/{id}` with `{"approved": bool, "reason": "...", "by": "..."}`.
//!
//! The first answer wins; an id that waits for nothing (unknown, answered, timed out, its run
//! over) is 404. Owns the HTTP side only: the waiting and the deciding are `run::approval`'s.

use super::error::{ApiError, json_body};
use crate::run::{Approvals, Decision};
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest answer: a reason and a name.
const MAX_ANSWER_BYTES: usize = 16 << 10;

/// `GET /v1/approvals` and `POST /v1/approvals/{id}`; the caller puts `PTC_API_KEY` in front.
pub fn router<S>(approvals: Approvals) -> Router<S> {
    Router::new()
        .route("/v1/approvals", get(list))
        .route("/v1/approvals/{id}", post(answer))
        .route("/v1/approvals/{id}/args", get(args))
        .with_state(approvals)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    approved: bool,
    #[serde(default)]
    reason: Option<String>,
    /// Who answered (a name, `dashboard`): said in the `approval.decided` event.
    #[serde(default)]
    by: Option<String>,
}

async fn list(State(approvals): State<Approvals>) -> Json<Value> {
    Json(json!({
        "approvals": approvals.list(),
        "timeout_seconds": approvals.timeout().as_secs(),
        "enabled": approvals.on(),
    }))
}

/// One waiting call's whole arguments, as JSON, shared with the waiting call (not copied).
async fn args(
    State(approvals): State<Approvals>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let args = approvals
        .args(&id)
        .map_err(|e| ApiError::NotFound(e.to_string()))?;
    let body = axum::body::Body::from(args.json().to_owned());
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn answer(
    State(approvals): State<Approvals>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let answer: Answer = json_body(
        request,
        MAX_ANSWER_BYTES,
        r#"{"approved": true|false, "reason": "why (optional)", "by": "who (optional)"}"#,
    )
    .await?;
    let decision = Decision {
        approved: answer.approved,
        reason: answer.reason,
        door: "http",
        by: answer.by,
    };
    let approval = approvals
        .decide(&id, decision)
        .map_err(|e| ApiError::NotFound(e.to_string()))?;
    Ok(Json(json!({
        "id": approval.id,
        "approved": answer.approved,
        "tool": approval.tool,
        "run": approval.run,
    })))
}
