//! The bridge's routes: a tool call as the SDK posts it (`/call`), as a sandbox posts it
//! (`/tool_call`) and as a bash run's tool function posts it (`/bash/{tool}`), each answered in
//! its own shape; with `save_file` ([`super::file`]), `search_tools` and `describe()`
//! ([`super::lookup`]) behind the same token.

use super::auth::{Refusal, authorized, plain, refuse, reply};
use super::{file, lookup};
use crate::run::bash;
use crate::run::calls::Calls;
use crate::run::dispatch::CallError;
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};

pub(super) fn router(calls: Calls) -> Router {
    Router::new()
        .route(
            "/call",
            post(|State(calls), request| handle(Route::Call, calls, request)),
        )
        .route(
            "/tool_call",
            post(|State(calls), request| handle(Route::ToolCall, calls, request)),
        )
        .route("/bash/{tool}", post(bash))
        .route("/file", post(file::save_file))
        .route("/search", post(lookup::search))
        .route("/search/bash", post(lookup::bash_search))
        .route("/describe", post(lookup::describe))
        .fallback(|| async {
            refuse(
                StatusCode::NOT_FOUND,
                "not_found",
                "the IPC bridge answers POST /call, POST /tool_call, POST /bash/{tool}, \
                 POST /file, POST /search, POST /search/bash and POST /describe only",
            )
        })
        .with_state(calls)
}

/// The two routes: they differ only in the body's field for the arguments and in how the
/// answer is shaped.
#[derive(Clone, Copy)]
enum Route {
    /// The SDK's `/call {tool, args}`: HTTP 200 with `{ok, result}` or `{ok: false, error}`.
    Call,
    /// `/tool_call {tool, input}`: `{result}`, or `{error}` with a status that says who has to
    /// act (400 bad input, 404 no such tool, 502 the tool failed, ...).
    ToolCall,
}

#[derive(Deserialize)]
struct CallBody {
    tool: String,
    #[serde(default = "empty_args")]
    args: Value,
}

#[derive(Deserialize)]
struct ToolCallBody {
    tool: String,
    #[serde(default = "empty_args")]
    input: Value,
}

fn empty_args() -> Value {
    json!({})
}

impl Route {
    /// The tool and its arguments.
    fn parse(self, body: &[u8]) -> serde_json::Result<(String, Value)> {
        match self {
            Route::Call => serde_json::from_slice(body).map(|b: CallBody| (b.tool, b.args)),
            Route::ToolCall => {
                serde_json::from_slice(body).map(|b: ToolCallBody| (b.tool, b.input))
            }
        }
    }

    /// The body's shape, for a 400.
    fn expected(self) -> &'static str {
        match self {
            Route::Call => r#"{"tool": name, "args": {...}}"#,
            Route::ToolCall => r#"{"tool": name, "input": {...}}"#,
        }
    }

    fn answer(self, result: Result<Value, CallError>) -> Response {
        match (self, result) {
            (Route::Call, Ok(result)) => {
                reply(StatusCode::OK, json!({"ok": true, "result": result}))
            }
            (Route::Call, Err(e)) => {
                reply(StatusCode::OK, json!({"ok": false, "error": e.to_json()}))
            }
            (Route::ToolCall, Ok(result)) => reply(StatusCode::OK, json!({"result": result})),
            (Route::ToolCall, Err(e)) => reply(self.status_of(&e), json!({"error": e.to_json()})),
        }
    }

    /// The status that says who has to act on a failed call.
    fn status_of(self, e: &CallError) -> StatusCode {
        match e {
            CallError::Input(_) => StatusCode::BAD_REQUEST,
            CallError::UnknownTool(_) => StatusCode::NOT_FOUND,
            CallError::Tool(_) => StatusCode::BAD_GATEWAY,
            CallError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            CallError::Limit(_) => StatusCode::TOO_MANY_REQUESTS,
            CallError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            CallError::Denied(_) => StatusCode::FORBIDDEN,
            CallError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

/// The one path of both routes: token, body, parse, dispatch, answer.
async fn handle(route: Route, calls: Calls, request: Request) -> Response {
    let outcome = async {
        let (run, body) = authorized(&calls, request).await.map_err(Refusal::json)?;
        let (tool, args) = route.parse(&body).map_err(|e| {
            let message = format!("expected {}: {e}", route.expected());
            refuse(StatusCode::BAD_REQUEST, "bad_request", &message)
        })?;
        Ok(route.answer(calls.call(&run, &tool, args).await))
    };
    match outcome.await {
        Ok(response) | Err(response) => response,
    }
}

/// `POST /bash/{tool}` (the tool's name percent-encoded), the body the call's one JSON argument
/// (empty: `{}`). `200` with the result as the tool function prints it ([`bash::printed`]); anything else with the
/// error as one line of text (`TOOL: message`), which the bash function prints to stderr.
async fn bash(State(calls): State<Calls>, Path(tool): Path<String>, request: Request) -> Response {
    let text = |status: StatusCode, message: String| {
        plain(status, format!("{tool}: {}\n", message.replace('\n', " ")))
    };
    let (run, body) = match authorized(&calls, request).await {
        Ok(authorized) => authorized,
        Err(refused) => return text(refused.status, refused.message),
    };
    let args: Value = if body.iter().all(u8::is_ascii_whitespace) {
        empty_args()
    } else {
        match serde_json::from_slice(&body) {
            Ok(args) => args,
            Err(e) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the argument is not JSON ({e}); pass one JSON object in single quotes, \
                         e.g. {tool} '{{\"key\": \"value\"}}'"
                    ),
                );
            }
        }
    };
    match calls.call(&run, &tool, args).await {
        Ok(result) => plain(StatusCode::OK, bash::printed(&result)),
        Err(e) => text(Route::ToolCall.status_of(&e), e.to_string()),
    }
}
