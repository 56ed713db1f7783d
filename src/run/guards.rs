//! The runner's two guards of a run: [`Waiting`], the count of runs waiting for a slot, and
//! [`FinishGuard`], the run's one `exec.finished` event, also when its future is dropped.
//!
//! Plain bookkeeping: it must not start, wait for or judge a run (the runner's).

use super::request::{ExecResult, ExecStatus};
use crate::events::{Event, Events};
use crate::trace::SpanContext;
use crate::util::ms;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Counts a run waiting for a slot for as long as it lives (also when the run's future is
/// dropped while it waits).
pub struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    pub fn on(queued: &'a AtomicUsize) -> Waiting<'a> {
        queued.fetch_add(1, Ordering::Relaxed);
        Waiting(queued)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reports `exec.finished` once: with the result, or as `cancelled` when the run's future is
/// dropped before it has one (a client that went away).
pub struct FinishGuard<'a> {
    pub events: &'a Events,
    pub exec_id: &'a str,
    pub span: &'a SpanContext,
    pub session: Option<&'a str>,
    pub user: Option<&'a crate::identity::User>,
    pub started: Instant,
    pub done: bool,
}

impl FinishGuard<'_> {
    pub fn finish(&mut self, result: &ExecResult) {
        self.done = true;
        let mut e = Event::new("exec.finished");
        e.exec_id = Some(self.exec_id.to_string());
        e.in_span(self.span);
        e.session_id = self.session.map(str::to_string);
        e.for_user(self.user);
        e.status = Some(match result.status {
            ExecStatus::Ok => "ok",
            ExecStatus::Error => "error",
            ExecStatus::Timeout => "timeout",
        });
        e.ok = Some(result.status == ExecStatus::Ok);
        e.exit_code = result.exit_code;
        e.duration_ms = Some(result.duration_ms);
        e.stdout_bytes = Some(result.stdout.len());
        e.stderr_bytes = Some(result.stderr.len());
        if self.events.bodies() {
            use crate::events::{MAX_EVENT_EXCERPT, excerpt};
            e.stdout = Some(excerpt(&result.stdout, MAX_EVENT_EXCERPT));
            e.stderr = Some(excerpt(&result.stderr, MAX_EVENT_EXCERPT));
        }
        e.tool_calls = Some(result.tool_calls.len());
        e.error = result
            .quota
            .as_ref()
            .map(|q| serde_json::json!({"type": "quota", "message": q.message}));
        self.events.emit(e);
    }
}

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut e = Event::new("exec.finished");
            e.exec_id = Some(self.exec_id.to_string());
            e.in_span(self.span);
            e.session_id = self.session.map(str::to_string);
            e.for_user(self.user);
            e.status = Some("error");
            e.ok = Some(false);
            e.duration_ms = Some(ms(self.started.elapsed()));
            e.error = Some(
                serde_json::json!({"type": "cancelled", "message": "the caller went away before the run finished"}),
            );
            self.events.emit(e);
        }
    }
}
