//! The event schema, v1 (docs/events.md): one [`Event`] per run start and end, per tool call
//! start and end, and per catalog reload, serialised as one JSON object.
//!
//! Plain data: the fields and how they appear in the JSON (fields that do not apply are left
//! out), and the bounds on what an event carries ([`Event::bounded`]). Stamping (`v`, `ts`,
//! `seq`, `agent_id`) is [`super::Events::emit`]'s; nothing here sends, queues or reads the
//! clock.

use crate::util::{cut, json_excerpt};
use serde::Serialize;
use serde_json::Value;

/// The event schema's version, the `v` of every event.
pub const SCHEMA_VERSION: u32 = 1;

/// Longest string an event carries (a tool name, an error message, an id), cut with the cut
/// said: a tool's error quoting a 4 MiB argument, 150 times, once held 723 MiB of the sidecar
/// in events and made the dashboard's state 612 MB.
pub const MAX_EVENT_TEXT: usize = 1024;

/// Most names a `catalog.reloaded` list carries (the rest counted in one last entry).
pub const MAX_EVENT_NAMES: usize = 256;

/// Most servers a `catalog.reloaded`'s `unavailable` carries (the rest counted in one last
/// entry): each entry may hold an error of [`MAX_EVENT_TEXT`], and an event stays small.
pub const MAX_EVENT_SERVERS: usize = 32;

/// Largest body (`args`, `result` with `PTC_EVENTS_BODIES`) an event carries as JSON: past it
/// the body is an excerpt of its JSON text, [`MAX_EVENT_TEXT`] long.
pub const MAX_EVENT_BODY: usize = 64 << 10;

/// Longest excerpt of a run's code, stdout or stderr an event carries (`code`, `stdout`,
/// `stderr` with `PTC_EVENTS_BODIES`): its first and last halves ([`excerpt`]), where a
/// program's start and its traceback are.
pub const MAX_EVENT_EXCERPT: usize = 4096;

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
    /// The LibreChat user a run was made for (the verified token's `sub` and `tenant_id`,
    /// never the token), on its `exec.*` and `tool_call.*` events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// tool_call.*: who made a call a runtime sent (`POST /v1/tools/call`): `runtime`, or the
    /// provider's caller (`code_execution_20260120`, `program`); absent for a run's own code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The provider's id of the code that made the call (Anthropic's `tool_id`, OpenAI's
    /// `caller_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_id: Option<String>,
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
    /// catalog.reloaded: the configured MCP servers the new catalog names as not running, each
    /// `{server, error, down_since_ms, next_attempt_ms?, died?}` (`[]` when every one runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<Vec<Value>>,
    /// approval.*: the approval's id; approval.decided: the answer, the door it came through
    /// (`http`, `mcp`, `timeout`, `shutdown`, `run_ended`), who (as the door says), the
    /// reason and how long the call waited for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub door: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<f64>,
    /// tool_call.finished: how long the call waited for its turn (`PTC_TOOL_LIMITS`), when it
    /// waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<f64>,
    /// Bodies, only with `PTC_EVENTS_BODIES=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// exec.started: an excerpt of the run's code; exec.finished: of its stdout and stderr
    /// ([`excerpt`], [`MAX_EVENT_EXCERPT`]); only with `PTC_EVENTS_BODIES=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

impl Event {
    /// Puts `span`'s ids on the event.
    pub fn in_span(&mut self, span: &crate::trace::SpanContext) {
        self.trace_id = Some(span.trace_id.clone());
        self.span_id = Some(span.span_id.clone());
        self.parent_span_id.clone_from(&span.parent_span_id);
    }

    /// Puts the run's user on the event (nothing for a run of the API key's holder).
    pub fn for_user(&mut self, user: Option<&crate::identity::User>) {
        if let Some(user) = user {
            self.sub = Some(user.sub.clone());
            self.tenant_id = Some(user.tenant_id.clone());
        }
    }

    pub fn new(kind: &'static str) -> Event {
        Event {
            kind,
            ..Event::default()
        }
    }

    /// The event within its bounds: every string cut to [`MAX_EVENT_TEXT`] bytes (the strings
    /// inside `error` and the bodies too), each list of names to [`MAX_EVENT_NAMES`], each body
    /// to [`MAX_EVENT_BODY`] of JSON, `code`, `stdout` and `stderr` to [`MAX_EVENT_EXCERPT`];
    /// what was cut says so (`… [cut: N more bytes]`).
    pub fn bounded(mut self) -> Event {
        bound_text(&mut self.agent_id);
        for text in [
            &mut self.exec_id,
            &mut self.trace_id,
            &mut self.span_id,
            &mut self.parent_span_id,
            &mut self.session_id,
            &mut self.sub,
            &mut self.tenant_id,
            &mut self.call_id,
            &mut self.caller,
            &mut self.caller_id,
            &mut self.tool,
            &mut self.approval_id,
            &mut self.by,
            &mut self.reason,
        ]
        .into_iter()
        .flatten()
        {
            bound_text(text);
        }
        for names in [&mut self.added, &mut self.removed, &mut self.changed]
            .into_iter()
            .flatten()
        {
            bound_names(names);
        }
        if let Some(error) = &mut self.error {
            bound_strings(error);
        }
        if let Some(servers) = &mut self.unavailable {
            bound_list(servers);
        }
        for body in [&mut self.args, &mut self.result].into_iter().flatten() {
            bound_body(body);
        }
        for text in [&mut self.code, &mut self.stdout, &mut self.stderr]
            .into_iter()
            .flatten()
        {
            if text.len() > MAX_EVENT_EXCERPT {
                *text = excerpt(text, MAX_EVENT_EXCERPT);
            }
        }
        self
    }

    /// A copy with `args` and `result` each within `max` bytes of JSON (an excerpt of it, as
    /// a string), or `None` when both are already: the in-memory ring's form of a bounded
    /// event. `code`, `stdout` and `stderr` are left as they are ([`MAX_EVENT_EXCERPT`]).
    pub fn slim(&self, max: usize) -> Option<Event> {
        let long = |v: &Option<Value>| v.as_ref().is_some_and(|v| json_len(v) > max);
        if !(long(&self.args) || long(&self.result)) {
            return None;
        }
        let mut slim = self.clone();
        for body in [&mut slim.args, &mut slim.result].into_iter().flatten() {
            if json_len(body) > max {
                *body = Value::String(json_excerpt(body, max));
            }
        }
        Some(slim)
    }
}

/// `text` within `max` bytes: whole when it fits, else its first and last halves (on
/// character boundaries) around a line that says how much was cut, the whole no longer than
/// `max` (so an excerpt cut again is unchanged). For the run's side to fill `code`, `stdout`
/// and `stderr` without copying megabytes.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    // The line saying the cut is no longer than this one, which says all of `text` was cut.
    let said = format!("\n… [cut: {} bytes] …\n", text.len()).len();
    let keep = max.saturating_sub(said);
    let mut head = keep / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (keep - keep / 2);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n… [cut: {} bytes] …\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

fn bound_text(text: &mut String) {
    if text.len() > MAX_EVENT_TEXT {
        *text = cut(text, MAX_EVENT_TEXT).into_owned();
    }
}

fn bound_names(names: &mut Vec<String>) {
    if names.len() > MAX_EVENT_NAMES {
        let more = names.len() - MAX_EVENT_NAMES;
        names.truncate(MAX_EVENT_NAMES);
        names.push(format!("… [cut: {more} more names]"));
    }
    names.iter_mut().for_each(bound_text);
}

/// A list of servers cut to [`MAX_EVENT_SERVERS`] entries (the rest counted in one last entry),
/// every string in them cut to [`MAX_EVENT_TEXT`].
fn bound_list(items: &mut Vec<Value>) {
    if items.len() > MAX_EVENT_SERVERS {
        let more = items.len() - MAX_EVENT_SERVERS;
        items.truncate(MAX_EVENT_SERVERS);
        items.push(Value::String(format!("… [cut: {more} more]")));
    }
    items.iter_mut().for_each(bound_strings);
}

/// Every string in `value`, keys included, cut to [`MAX_EVENT_TEXT`].
fn bound_strings(value: &mut Value) {
    match value {
        Value::String(text) => bound_text(text),
        Value::Array(items) => items.iter_mut().for_each(bound_strings),
        Value::Object(map) => {
            if map.keys().any(|k| k.len() > MAX_EVENT_TEXT) {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (cut(&k, MAX_EVENT_TEXT).into_owned(), v))
                    .collect();
            }
            map.values_mut().for_each(bound_strings);
        }
        _ => {}
    }
}

/// A body's strings cut, and the whole replaced by an excerpt of its JSON when still over
/// [`MAX_EVENT_BODY`].
fn bound_body(body: &mut Value) {
    bound_strings(body);
    if json_len(body) > MAX_EVENT_BODY {
        *body = Value::String(json_excerpt(body, MAX_EVENT_TEXT));
    }
}

/// The length of `value` as JSON, counted without writing it anywhere.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn every_string_an_event_carries_is_bounded() {
        let huge = "x".repeat(4 << 20);
        let mut e = Event::new("tool_call.finished");
        e.tool = Some(huge.clone());
        e.exec_id = Some("r1".into());
        e.error = Some(json!({"type": "input", "message": huge}));
        e.added = Some((0..1000).map(|i| format!("t{i}")).collect());
        e.args = Some(json!({"a": huge, "list": vec![1; 100_000]}));
        e.result = Some(json!("ok"));
        let e = e.bounded();
        let said = format!(
            "{}… [cut: {} more bytes]",
            "x".repeat(1024),
            (4 << 20) - 1024
        );
        assert_eq!(e.tool.as_deref(), Some(said.as_str()));
        assert_eq!(e.exec_id.as_deref(), Some("r1"));
        assert_eq!(e.error, Some(json!({"type": "input", "message": said})));
        let added = e.added.as_ref().unwrap();
        assert_eq!(added.len(), MAX_EVENT_NAMES + 1);
        assert_eq!(added[MAX_EVENT_NAMES], "… [cut: 744 more names]");
        // Over its bound even with its strings cut (a long list): an excerpt of its JSON.
        let args = e.args.as_ref().unwrap().as_str().unwrap();
        assert!(args.starts_with("{\"a\":\"xxx"), "{args}");
        assert!(args.len() < 1100 && args.ends_with("more bytes]"), "{args}");
        assert_eq!(e.result, Some(json!("ok")));
        assert!(serde_json::to_string(&e).unwrap().len() < 8 << 10);

        let mut e = Event::new("catalog.reloaded");
        e.unavailable = Some(vec![json!({"server": "gh", "error": huge}); 300]);
        let e = e.bounded();
        let down = e.unavailable.as_ref().unwrap();
        assert_eq!(down.len(), MAX_EVENT_SERVERS + 1);
        assert_eq!(down[0], json!({"server": "gh", "error": said}));
        assert_eq!(down[MAX_EVENT_SERVERS], "… [cut: 268 more]");
    }

    #[test]
    fn code_and_output_are_kept_as_their_first_and_last_halves() {
        let out = format!("{}{}", "a".repeat(10_000), "Traceback: ValueError");
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(
            excerpt(&"0123456789".repeat(4), 30),
            "01\n… [cut: 35 bytes] …\n789"
        );
        // Never inside a character ("é" is two bytes), and never over its bound.
        let e = excerpt(&"é".repeat(20), 28);
        assert_eq!(e, "\n… [cut: 38 bytes] …\né");
        for max in [0, 5, 26, 27, 28, 29, 100] {
            assert!(excerpt(&"é".repeat(100), max).len() <= max.max(26), "{max}");
        }
        let mut e = Event::new("exec.finished");
        e.stdout = Some(out.clone());
        e.stderr = Some("fine".into());
        let e = e.bounded();
        let stdout = e.stdout.as_deref().unwrap();
        assert!(stdout.len() <= MAX_EVENT_EXCERPT, "{}", stdout.len());
        assert!(stdout.starts_with("aaaa") && stdout.ends_with("Traceback: ValueError"));
        assert!(stdout.contains("… [cut: 5953 bytes] …"), "{stdout}");
        // An excerpt cut again is unchanged.
        assert_eq!(excerpt(stdout, MAX_EVENT_EXCERPT), stdout);
        assert_eq!(e.stderr.as_deref(), Some("fine"));
        // The ring's copy: bodies within its bound, or none made when they are.
        assert!(e.slim(100).is_none());
        let mut call = Event::new("tool_call.finished");
        call.result = Some(json!({"rows": "r".repeat(5000)}));
        let slim = call.slim(100).unwrap();
        let result = slim.result.unwrap();
        assert!(
            result.as_str().unwrap().starts_with("{\"rows\":\"rrr"),
            "{result}"
        );
        assert!(result.as_str().unwrap().len() < 140, "{result}");
    }
}
