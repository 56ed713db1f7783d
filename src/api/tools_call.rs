//! `POST /v1/tools/call`: one call of any catalog tool for an agent runtime (native PTC: the
//! provider ran the model's code and it called a tool, or the model called one directly), with
//! PTC on or off. Body `{tool, input, caller?, session_id?, agent?}`, the caller's
//! `traceparent` header; answer `{"result": ...}`, or the API's error shape whose `type` is the
//! error a run's code would get (`input`, `unknown_tool`, `denied`, `rate_limited`, `limit`,
//! `timeout`, `unavailable`, `tool`).
//!
//! Owns the HTTP side only: the body, its bounds, the status of each refusal. What the call
//! does, and which run it belongs to, is `run::native`'s.

use super::error::{ApiError, json_body};
use crate::run::ipc::MAX_CALL_BYTES;
use crate::run::{Caller, Native, RuntimeCall};
use crate::trace::TRACEPARENT;
use axum::extract::{Request, State};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest `session_id`, `agent` or caller type or id: a label, not data (each run the
/// runtime's ids name is kept a while, `run::native::NATIVE_RUN_IDLE`).
pub const MAX_LABEL_BYTES: usize = 256;

/// `POST /v1/tools/call`; the caller puts `PTC_API_KEY` in front.
pub fn router<S>(native: Native) -> Router<S> {
    Router::new()
        .route("/v1/tools/call", post(call))
        .with_state(native)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    tool: String,
    input: Value,
    #[serde(default)]
    caller: Option<CallerBody>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    agent: Option<String>,
}

/// A caller as a name (`"runtime"`), or as the provider sent it: Anthropic's
/// `{type: "code_execution_20260120", tool_id}`, OpenAI's `{type: "program", caller_id}`,
/// either's `{type: "direct"}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum CallerBody {
    Name(String),
    Provider {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        tool_id: Option<String>,
        #[serde(default)]
        caller_id: Option<String>,
        #[serde(default)]
        id: Option<String>,
    },
}

impl CallerBody {
    fn into_caller(self) -> Caller {
        match self {
            CallerBody::Name(kind) => Caller { kind, id: None },
            CallerBody::Provider {
                kind,
                tool_id,
                caller_id,
                id,
            } => Caller {
                kind,
                id: tool_id.or(caller_id).or(id),
            },
        }
    }
}

const SHAPE: &str = r#"{"tool": "name", "input": {...}, "caller": "runtime" | {"type", "tool_id" | "caller_id"} (optional), "session_id": "..." (optional), "agent": "..." (optional)}"#;

async fn call(State(native): State<Native>, request: Request) -> Result<Json<Value>, ApiError> {
    let traceparent = request
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body: Body = json_body(request, MAX_CALL_BYTES, SHAPE).await?;
    let caller = body
        .caller
        .map_or_else(Caller::runtime, CallerBody::into_caller);
    let labels = [
        ("session_id", body.session_id.as_deref()),
        ("agent", body.agent.as_deref()),
        ("caller type", Some(caller.kind.as_str())),
        ("caller id", caller.id.as_deref()),
    ];
    for (what, label) in labels {
        if let Some(label) = label
            && (label.is_empty() || label.len() > MAX_LABEL_BYTES)
        {
            return Err(ApiError::BadRequest(format!(
                "{what} must be 1 to {MAX_LABEL_BYTES} bytes, not {}",
                label.len()
            )));
        }
    }
    let call = RuntimeCall {
        tool: body.tool,
        input: body.input,
        caller,
        session: body.session_id,
        agent: body.agent,
        traceparent,
    };
    let result = native.call(call).await?;
    Ok(Json(json!({"result": result})))
}
