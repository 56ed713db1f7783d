//! The IPC bridge: the loopback HTTP server the Python SDK calls (`POST /call`).
//!
//! Owns the wire: bearer-token check before anything is read or dispatched, the body limit,
//! JSON error bodies. What a call does is the runner's business.

use super::runner::Runner;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Largest `/call` body: arguments are data for one tool call, not a file transfer.
pub const MAX_CALL_BYTES: usize = 8 << 20;

#[derive(Deserialize)]
struct CallRequest {
    tool: String,
    #[serde(default = "empty_args")]
    args: Value,
}

fn empty_args() -> Value {
    json!({})
}

pub async fn serve(listener: tokio::net::TcpListener, runner: Runner, shutdown: CancellationToken) {
    let router = Router::new()
        .route("/call", post(call))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "not_found",
                "the IPC bridge answers POST /call only",
            )
        })
        .with_state(runner);
    let result = axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!("IPC bridge stopped: {e}");
    }
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"ok": false, "error": {"type": kind, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn call(State(runner): State<Runner>, request: Request) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(run) = token.and_then(|t| runner.run_for_token(t)) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown run token (the run may be over)",
        );
    };
    let body: Body = request.into_body();
    let bytes = match to_bytes(body, MAX_CALL_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                &format!("a tool call's body is limited to {MAX_CALL_BYTES} bytes"),
            );
        }
    };
    let req: CallRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("expected {{\"tool\": name, \"args\": {{...}}}}: {e}"),
            );
        }
    };
    let answer = match runner.call(&run, &req.tool, req.args).await {
        Ok(result) => json!({"ok": true, "result": result}),
        Err(e) => json!({"ok": false, "error": e.to_json()}),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}
