//! Live approval of one call: the calls a person must allow (`PTC_APPROVE_TOOLS`,
//! `PTC_APPROVE_DESTRUCTIVE`) wait here until someone answers or `PTC_APPROVAL_TIMEOUT` passes.
//!
//! Only the waiting call stops: the run's other calls go on, and the run's clock stands still
//! while any of its calls waits ([`super::clock`]). One [`Approval`] object is what every door
//! shows (`GET /v1/approvals`, the attached stream's `approval_required`, the dashboard, the MCP
//! front door's elicitation); [`Approvals::decide`] takes the first answer from any of them and
//! says 'unknown' to the rest. An approval whose call went away (its run ended) is gone too.
//!
//! Owns the waiting calls and the `approval.*` events. It must not know the doors' protocols
//! or what the call does once allowed.

use crate::catalog::{Origin, Tool, glob_match};
use crate::config::Control;
use crate::events::{Event, Events};
use crate::trace::SpanContext;
use crate::util::{cut, hex, lock, ms, now_ms};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Approvals waiting at once, across runs; one more is denied at once (a loop of calls that
/// each need a person is a mistake to stop, not a queue to build).
pub const MAX_WAITING: usize = 1024;

/// Longest reason kept from an answer, and longest `by`.
pub const MAX_REASON_BYTES: usize = 1024;
pub const MAX_BY_BYTES: usize = 128;

/// A call waiting for a person: what every door shows.
#[derive(Debug, Clone, Serialize)]
pub struct Approval {
    pub id: String,
    /// The run (`exec_id`) the call belongs to.
    pub run: String,
    /// The call's id within the run (`call_id` of its events).
    pub call: String,
    /// The tool's catalog name.
    pub tool: String,
    pub args: Value,
    /// Milliseconds since the Unix epoch.
    pub requested_at: u64,
    /// When the call is denied unless someone answers first.
    pub expires_at: u64,
    pub session: Option<String>,
    pub agent: String,
}

/// An answer to an approval.
#[derive(Debug, Clone)]
pub struct Decision {
    pub approved: bool,
    pub reason: Option<String>,
    /// Which door it came through: `http`, `mcp`, `timeout`, `shutdown`, `run_ended`.
    pub door: &'static str,
    /// Who answered, as the door says (e.g. `dashboard`, a person's name).
    pub by: Option<String>,
}

impl Decision {
    fn sidecar(door: &'static str, reason: &str) -> Decision {
        Decision {
            approved: false,
            reason: Some(reason.to_string()),
            door,
            by: None,
        }
    }
}

/// What a run's own door is told of its calls waiting for a person (the attached stream, the
/// MCP front door).
pub type Asker = mpsc::UnboundedSender<Approval>;

/// The answer to an id that waits for none.
#[derive(Debug, thiserror::Error)]
#[error("no approval {0:?} is waiting: it was answered, timed out, or its run ended")]
pub struct NotWaiting(pub String);

/// A call not allowed: the message the code gets (`ToolDenied`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

/// The approvals of the sidecar: the rules and the calls waiting.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

struct Inner {
    tools: Vec<String>,
    destructive: bool,
    timeout: Duration,
    events: Events,
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    calls: HashMap<String, (Approval, oneshot::Sender<Decision>)>,
    /// Set at shutdown: every call that needs a person is denied with it.
    closed: Option<String>,
}

/// The call in a run that asks: its ids, its span, and where the run's door hears of it.
pub struct Asking<'a> {
    pub run: &'a str,
    pub call: &'a str,
    pub session: Option<&'a str>,
    pub span: &'a SpanContext,
    pub asker: Option<&'a Asker>,
}

impl Approvals {
    pub fn new(control: &Control, events: Events) -> Approvals {
        Approvals {
            inner: Arc::new(Inner {
                tools: control.approve_tools.clone(),
                destructive: control.approve_destructive,
                timeout: control.approval_timeout,
                events,
                waiting: Mutex::default(),
            }),
        }
    }

    /// Whether any call may need a person.
    pub fn on(&self) -> bool {
        self.inner.destructive || !self.inner.tools.is_empty()
    }

    /// How long a call waits for a person at most.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Whether a call of `tool` waits for a person.
    pub fn needs(&self, tool: &Tool) -> bool {
        let destructive = || {
            matches!(tool.origin, Origin::Mcp { .. })
                && tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("destructiveHint"))
                    .and_then(Value::as_bool)
                    == Some(true)
        };
        self.inner.tools.iter().any(|p| glob_match(p, &tool.name))
            || (self.inner.destructive && destructive())
    }

    /// How many calls wait now.
    pub fn waiting(&self) -> usize {
        lock(&self.inner.waiting).calls.len()
    }

    /// What waits now, oldest first.
    pub fn list(&self) -> Vec<Approval> {
        let waiting = lock(&self.inner.waiting);
        let mut all: Vec<Approval> = waiting.calls.values().map(|(a, _)| a.clone()).collect();
        all.sort_by(|a, b| (a.requested_at, &a.id).cmp(&(b.requested_at, &b.id)));
        all
    }

    /// Answers a waiting approval; the first answer wins, a later one is [`NotWaiting`].
    pub fn decide(&self, id: &str, decision: Decision) -> Result<Approval, NotWaiting> {
        let taken = lock(&self.inner.waiting).calls.remove(id);
        let Some((approval, reply)) = taken else {
            return Err(NotWaiting(cut(id, 80).into_owned()));
        };
        // The call may have gone in between; it is answered either way.
        let _ = reply.send(bounded(decision));
        Ok(approval)
    }

    /// Denies every waiting call and every later one with `reason` (shutdown).
    pub fn close(&self, reason: &str) {
        let calls = {
            let mut waiting = lock(&self.inner.waiting);
            waiting.closed = Some(reason.to_string());
            std::mem::take(&mut waiting.calls)
        };
        for (_, (_, reply)) in calls {
            let _ = reply.send(Decision::sidecar("shutdown", reason));
        }
    }

    /// Waits for a person to allow this call: `Ok` to go on, [`Denied`] with their
    /// reason otherwise. The caller pauses the run's clock around it.
    pub async fn ask(&self, at: Asking<'_>, tool: &Tool, args: &Value) -> Result<(), Denied> {
        let inner = &self.inner;
        let requested = Instant::now();
        let now = now_ms();
        let approval = Approval {
            id: format!("ap-{}", new_id()),
            run: at.run.to_string(),
            call: at.call.to_string(),
            tool: tool.name.clone(),
            args: args.clone(),
            requested_at: now,
            expires_at: now + inner.timeout.as_millis() as u64,
            session: at.session.map(str::to_string),
            agent: inner.events.agent_id().to_string(),
        };
        let (reply, answer) = oneshot::channel();
        {
            let mut waiting = lock(&inner.waiting);
            let refused = match &waiting.closed {
                Some(reason) => Some(reason.clone()),
                None if waiting.calls.len() >= MAX_WAITING => Some(format!(
                    "{MAX_WAITING} calls are already waiting for a person across this sidecar's \
                     runs"
                )),
                None => None,
            };
            if let Some(reason) = refused {
                return Err(denied(&tool.python_name, false, Some(&reason)));
            }
            waiting
                .calls
                .insert(approval.id.clone(), (approval.clone(), reply));
        }
        self.requested(&approval, at.span, args);
        if let Some(asker) = at.asker {
            let _ = asker.send(approval.clone());
        }
        // A call dropped while it waits (its run ended) takes its approval with it.
        let mut guard = Forget {
            approvals: self,
            approval: &approval,
            span: at.span,
            requested,
            armed: true,
        };
        tokio::pin!(answer);
        let decision = match tokio::time::timeout(inner.timeout, &mut answer).await {
            Ok(Ok(decision)) => decision,
            Ok(Err(_)) => Decision::sidecar("shutdown", "the sidecar dropped the approval"),
            Err(_) => match take(&inner.waiting, &approval.id) {
                true => Decision::sidecar(
                    "timeout",
                    &format!(
                        "no one answered within {} s (PTC_APPROVAL_TIMEOUT)",
                        inner.timeout.as_secs()
                    ),
                ),
                // An answer taken in the same instant was sent: it wins.
                false => (&mut answer).await.unwrap_or_else(|_| {
                    Decision::sidecar("shutdown", "the sidecar dropped the approval")
                }),
            },
        };
        guard.armed = false;
        self.decided(&approval, at.span, &decision, requested.elapsed());
        match decision.approved {
            true => Ok(()),
            false => Err(denied(
                &tool.python_name,
                decision.door == "http" || decision.door == "mcp",
                decision.reason.as_deref(),
            )),
        }
    }

    fn requested(&self, approval: &Approval, span: &SpanContext, args: &Value) {
        let events = &self.inner.events;
        let mut e = approval_event("approval.requested", approval, span);
        e.args_bytes = Some(serde_json::to_vec(args).map_or(0, |v| v.len()));
        if events.bodies() {
            e.args = Some(args.clone());
        }
        events.emit(e);
    }

    fn decided(&self, approval: &Approval, span: &SpanContext, d: &Decision, waited: Duration) {
        let mut e = approval_event("approval.decided", approval, span);
        e.approved = Some(d.approved);
        e.door = Some(d.door);
        e.by.clone_from(&d.by);
        e.reason.clone_from(&d.reason);
        e.waited_ms = Some(ms(waited));
        self.inner.events.emit(e);
    }
}

/// Removes an approval whose call went away before an answer, and reports it decided.
struct Forget<'a> {
    approvals: &'a Approvals,
    approval: &'a Approval,
    span: &'a SpanContext,
    requested: Instant,
    armed: bool,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if take(&self.approvals.inner.waiting, &self.approval.id) {
            let gone = Decision::sidecar("run_ended", "the run ended before anyone answered");
            self.approvals
                .decided(self.approval, self.span, &gone, self.requested.elapsed());
        }
    }
}

/// An event of an approval: the waiting call's ids, span and tool, and the approval's id.
fn approval_event(kind: &'static str, approval: &Approval, span: &SpanContext) -> Event {
    let mut e = Event::new(kind);
    e.in_span(span);
    e.exec_id = Some(approval.run.clone());
    e.session_id.clone_from(&approval.session);
    e.call_id = Some(approval.call.clone());
    e.tool = Some(approval.tool.clone());
    e.approval_id = Some(approval.id.clone());
    e
}

/// Removes a waiting approval; whether it was there.
fn take(waiting: &Mutex<Waiting>, id: &str) -> bool {
    lock(waiting).calls.remove(id).is_some()
}

/// The error the code gets: a person's reason, or why no person could answer.
fn denied(tool: &str, by_person: bool, reason: Option<&str>) -> Denied {
    let reason = reason.filter(|r| !r.trim().is_empty());
    Denied(match (by_person, reason) {
        (true, Some(r)) => format!("{tool}: a person denied this call: {r}"),
        (true, None) => format!("{tool}: a person denied this call (no reason given)"),
        (false, Some(r)) => format!("{tool}: not approved: {r}"),
        (false, None) => format!("{tool}: not approved"),
    })
}

/// An answer within its bounds.
fn bounded(mut d: Decision) -> Decision {
    d.reason = d.reason.map(|r| cut(&r, MAX_REASON_BYTES).into_owned());
    d.by = d.by.map(|b| cut(&b, MAX_BY_BYTES).into_owned());
    d
}

fn new_id() -> String {
    let mut bytes = [0u8; 12];
    rand::fill(&mut bytes);
    hex(&bytes)
}
