//! The event schema, v1 (docs/events.md): one [`Event`] per run start and end, per tool call
//! start and end, and per catalog reload, serialised as one JSON object.
//!
//! Plain data: the fields and how they appear in the JSON (fields that do not apply are left
//! out). Stamping (`v`, `ts`, `seq`, `agent_id`) is [`super::Events::emit`]'s; nothing here
//! sends, queues or reads the clock.

use serde::Serialize;
use serde_json::Value;

/// The event schema's version, the `v` of every event.
pub const SCHEMA_VERSION: u32 = 1;

/// One event. Fields that do not apply to a type are left out of the JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Event {
    pub v: u32,
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Milliseconds since the Unix epoch.
    pub ts: u64,
    /// Increases by one per event of this sidecar process: order, and duplicates after a resend.
    pub seq: u64,
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_id: Option<String>,
    /// W3C trace context: the trace, this run's or call's span, and the span it is a child of
    /// (the caller's `traceparent` for a run, the run's span for a call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// The session a run belongs to (`session_id` of `exec_code`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// `mcp` or `host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// `{type, message}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// exec.finished: `ok`, `error` or `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<usize>,
    /// catalog.reloaded: the new version and what changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<Vec<String>>,
    /// Bodies, only with `PTC_EVENTS_BODIES=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl Event {
    /// Puts `span`'s ids on the event.
    pub fn in_span(&mut self, span: &crate::trace::SpanContext) {
        self.trace_id = Some(span.trace_id.clone());
        self.span_id = Some(span.span_id.clone());
        self.parent_span_id.clone_from(&span.parent_span_id);
    }

    pub fn new(kind: &'static str) -> Event {
        Event {
            kind,
            ..Event::default()
        }
    }
}
