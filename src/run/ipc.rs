//! The IPC bridge: the loopback HTTP server the Python SDK calls (`POST /call`), and
//! `POST /tool_call` for sandboxes that call tools themselves (host protocol "direct posting",
//! docs/protocols.md): same token, same dispatch and policy, plain `{result}` or an HTTP error.
//!
//! Owns the wire: bearer-token check before anything is read or dispatched, the body limit,
//! JSON error bodies. What a call does is the runner's business.

use super::dispatch::CallError;
use super::runner::{RunCtx, Runner};
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
        .route("/tool_call", post(tool_call))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "not_found",
                "the IPC bridge answers POST /call and POST /tool_call only",
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

/// The run a request's bearer token belongs to, and its body within [`MAX_CALL_BYTES`].
async fn authorized(
    runner: &Runner,
    request: Request,
) -> Result<(std::sync::Arc<RunCtx>, axum::body::Bytes), Response> {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(run) = token.and_then(|t| runner.run_for_token(t)) else {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown run token (the run may be over)",
        ));
    };
    let body: Body = request.into_body();
    match to_bytes(body, MAX_CALL_BYTES).await {
        Ok(b) => Ok((run, b)),
        Err(_) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            &format!("a tool call's body is limited to {MAX_CALL_BYTES} bytes"),
        )),
    }
}

async fn call(State(runner): State<Runner>, request: Request) -> Response {
    let (run, bytes) = match authorized(&runner, request).await {
        Ok(r) => r,
        Err(response) => return response,
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

#[derive(Deserialize)]
struct ToolCallRequest {
    tool: String,
    #[serde(default = "empty_args")]
    input: Value,
}

/// `POST /tool_call {tool, input}` → `{result}`, or `{error: {type, message}}` with a status
/// that says who has to act (400 bad input, 404 no such tool, 502 the tool failed, ...).
async fn tool_call(State(runner): State<Runner>, request: Request) -> Response {
    let (run, bytes) = match authorized(&runner, request).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let req: ToolCallRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("expected {{\"tool\": name, \"input\": {{...}}}}: {e}"),
            );
        }
    };
    match runner.call(&run, &req.tool, req.input).await {
        Ok(result) => (
            [(header::CONTENT_TYPE, "application/json")],
            json!({"result": result}).to_string(),
        )
            .into_response(),
        Err(e) => {
            let status = match e {
                CallError::Input(_) => StatusCode::BAD_REQUEST,
                CallError::UnknownTool(_) => StatusCode::NOT_FOUND,
                CallError::Tool(_) => StatusCode::BAD_GATEWAY,
                CallError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                CallError::Limit(_) => StatusCode::TOO_MANY_REQUESTS,
                CallError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                json!({"error": e.to_json()}).to_string(),
            )
                .into_response()
        }
    }
}
