//! Live approval of one call: the calls a person must allow (`PTC_APPROVE_TOOLS`,
//! `PTC_APPROVE_DESTRUCTIVE`) wait here until someone answers or `PTC_APPROVAL_TIMEOUT` passes.
//!
//! Only the waiting call stops: the run's other calls go on, and the run's clock stands still
//! while any of its calls waits ([`super::clock`]). One [`Approval`] object is what every door
//! shows (`GET /v1/approvals`, the attached stream's `approval_required`, the dashboard, the MCP
//! front door's elicitation); [`Approvals::decide`] takes the first answer from any of them and
//! says 'unknown' to the rest. An approval whose call went away (its run ended) is gone too.
//!
//! A waiting call keeps its arguments as the JSON it sent, once ([`WaitingArgs`]): listings
//! and doors show a bounded excerpt of it without parsing or copying it, and the whole of it
//! is fetched by id ([`Approvals::args`]). What runs keep waiting is their budget's
//! (`super::budget`): the calls and the bytes of one run, and of all runs, are bounded, and a
//! run always has its floor of both whatever the others keep waiting.
//!
//! Owns the waiting calls and the `approval.*` events. It must not know the doors' protocols
//! or what the call does once allowed.

use super::budget::{self, Account, Lender, Resource, Short};
use crate::catalog::{Origin, Tool, glob_match};
use crate::config::Control;
use crate::events::{Event, Events};
use crate::trace::SpanContext;
use crate::util::{cut, hex, lock, ms, now_ms};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// The approval table: each run always has [`budget::APPROVALS_FLOOR`] calls of it, and past
/// that up to [`budget::APPROVALS_CEILING`] of a pool all runs share; one more is denied at
/// once (a loop of calls that each need a person is a mistake to stop, not a queue to build).
static TABLE: Lender = Lender::new(
    Resource::Approvals,
    budget::APPROVALS_FLOOR,
    budget::APPROVALS_CEILING,
    budget::APPROVALS_POOL,
);

/// The bytes of waiting calls' arguments, shared the same way.
static BYTES: Lender = Lender::new(
    Resource::ApprovalBytes,
    budget::APPROVAL_BYTES_FLOOR,
    budget::APPROVAL_BYTES_CEILING,
    budget::APPROVAL_BYTES_POOL,
);

/// What a listing shows of a call's arguments: the whole JSON up to this, else an excerpt of
/// it this long (the whole is at `GET /v1/approvals/{id}/args`).
pub const ARGS_EXCERPT_BYTES: usize = 4096;

/// Longest reason kept from an answer, and longest `by`.
pub const MAX_REASON_BYTES: usize = 1024;
pub const MAX_BY_BYTES: usize = 128;

/// A call waiting for a person: what every door shows. As JSON: its ids, `tool`,
/// `args_bytes`, and `args` (the arguments) when they are at most [`ARGS_EXCERPT_BYTES`] of
/// JSON, else `args_excerpt` (their first bytes, the cut said) and `args_cut: true`.
#[derive(Debug, Clone)]
pub struct Approval {
    pub id: String,
    /// The run (`exec_id`) the call belongs to.
    pub run: String,
    /// The call's id within the run (`call_id` of its events).
    pub call: String,
    /// The tool's catalog name.
    pub tool: String,
    pub args: WaitingArgs,
    /// Milliseconds since the Unix epoch.
    pub requested_at: u64,
    /// When the call is denied unless someone answers first.
    pub expires_at: u64,
    pub session: Option<String>,
    pub agent: String,
}

/// The arguments of a waiting call, as the compact JSON they were, shared by every copy of
/// the approval; and their excerpt for listings.
#[derive(Debug, Clone)]
pub struct WaitingArgs {
    json: Arc<RawValue>,
    excerpt: Option<Arc<str>>,
}

impl WaitingArgs {
    /// The arguments as JSON; `None` for a value that is not JSON (a float NaN).
    pub fn of(args: &Value) -> Option<WaitingArgs> {
        let raw: Arc<RawValue> = RawValue::from_string(serde_json::to_string(args).ok()?)
            .ok()?
            .into();
        let text = raw.get();
        let excerpt = (text.len() > ARGS_EXCERPT_BYTES)
            .then(|| Arc::from(cut(text, ARGS_EXCERPT_BYTES).as_ref()));
        Some(WaitingArgs { json: raw, excerpt })
    }

    /// The whole JSON.
    pub fn json(&self) -> &str {
        self.json.get()
    }

    /// The whole arguments, parsed again (for the call, once it may go on).
    pub fn value(&self) -> Value {
        serde_json::from_str(self.json.get()).unwrap_or(Value::Null)
    }

    /// Their JSON within about `max` bytes, the cut said.
    pub fn excerpt(&self, max: usize) -> std::borrow::Cow<'_, str> {
        cut(self.json.get(), max)
    }

    /// Bytes of their JSON.
    pub fn len(&self) -> usize {
        self.json.get().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Serialize for Approval {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("run", &self.run)?;
        map.serialize_entry("call", &self.call)?;
        map.serialize_entry("tool", &self.tool)?;
        match &self.args.excerpt {
            None => map.serialize_entry("args", &*self.args.json)?,
            Some(excerpt) => {
                map.serialize_entry("args_excerpt", &**excerpt)?;
                map.serialize_entry("args_cut", &true)?;
            }
        }
        map.serialize_entry("args_bytes", &self.args.len())?;
        map.serialize_entry("requested_at", &self.requested_at)?;
        map.serialize_entry("expires_at", &self.expires_at)?;
        map.serialize_entry("session", &self.session)?;
        map.serialize_entry("agent", &self.agent)?;
        map.end()
    }
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

/// What one run holds of the approval table and of the bytes waiting (a [`RunCtx`]'s).
///
/// [`RunCtx`]: super::calls::RunCtx
#[derive(Default)]
pub struct ApprovalShares {
    calls: Account,
    bytes: Account,
}

/// A run's share taken for one waiting call, given back when it is dropped.
struct Held<'a> {
    shares: &'a ApprovalShares,
    bytes: u64,
}

/// Why a call may not wait for a person: its run's share of the approval table or of the
/// bytes of waiting calls' arguments is taken, or the sidecar's whole table or bytes are.
#[derive(Debug, thiserror::Error)]
enum NoShare {
    #[error(
        "{ceiling} calls of this run already wait for a person, its share of the approval \
         table: wait for their answers before asking more"
    )]
    Calls { ceiling: u64 },
    #[error(
        "the approval table is full across this sidecar's runs (each run keeps its first few \
         calls): try again once some are answered"
    )]
    Table,
    #[error(
        "this call's arguments ({bytes} bytes) would take the run's calls waiting for a person \
         past {ceiling} bytes, its share ({held} wait already): send less, or wait for their \
         answers"
    )]
    Bytes { bytes: u64, ceiling: u64, held: u64 },
    #[error(
        "the arguments of calls waiting for a person fill this sidecar's share for them; this \
         call's {bytes} bytes do not fit: try again once some are answered, or send less"
    )]
    AllBytes { bytes: u64 },
}

impl<'a> Held<'a> {
    fn take(shares: &'a ApprovalShares, bytes: u64) -> Result<Held<'a>, NoShare> {
        TABLE.take(&shares.calls, 1).map_err(|short| match short {
            Short::Ceiling { ceiling, .. } => NoShare::Calls { ceiling },
            Short::Pool { .. } => NoShare::Table,
        })?;
        if let Err(short) = BYTES.take(&shares.bytes, bytes) {
            TABLE.give_back(&shares.calls, 1);
            return Err(match short {
                Short::Ceiling { ceiling, held } => NoShare::Bytes {
                    bytes,
                    ceiling,
                    held,
                },
                Short::Pool { .. } => NoShare::AllBytes { bytes },
            });
        }
        Ok(Held { shares, bytes })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        TABLE.give_back(&self.shares.calls, 1);
        BYTES.give_back(&self.shares.bytes, self.bytes);
    }
}

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
    /// The run's share of the approval table and of the bytes waiting.
    pub shares: &'a ApprovalShares,
    /// The longest the call may wait: what is left of its run's share of waiting for people
    /// (its clock's pause budget, `budget` in all). Nothing left: denied without asking.
    pub within: Duration,
    pub budget: Duration,
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

    /// The whole arguments of the waiting approval `id`, as JSON.
    pub fn args(&self, id: &str) -> Result<WaitingArgs, NotWaiting> {
        match lock(&self.inner.waiting).calls.get(id) {
            Some((approval, _)) => Ok(approval.args.clone()),
            None => Err(NotWaiting(cut(id, 80).into_owned())),
        }
    }

    /// What waits now, oldest first (each sharing its arguments with the waiting call).
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
    /// reason otherwise. The caller pauses the run's clock around it, and holds only `args`
    /// (the JSON) while it waits.
    pub async fn ask(&self, at: Asking<'_>, tool: &Tool, args: &WaitingArgs) -> Result<(), Denied> {
        let inner = &self.inner;
        if at.within.is_zero() {
            budget::refused(Resource::ApprovalTime);
            let spent = format!(
                "this run already waited {} s for people, its whole share \
                 (PTC_APPROVAL_TIMEOUT): no more of its calls are put to a person",
                at.budget.as_secs()
            );
            return Err(denied(&tool.python_name, false, Some(&spent)));
        }
        let wait = inner.timeout.min(at.within);
        let requested = Instant::now();
        let now = now_ms();
        let approval = Approval {
            id: format!("ap-{}", new_id()),
            run: at.run.to_string(),
            call: at.call.to_string(),
            tool: tool.name.clone(),
            args: args.clone(),
            requested_at: now,
            expires_at: now + ms_u64(wait),
            session: at.session.map(str::to_string),
            agent: inner.events.agent_id().to_string(),
        };
        let (reply, answer) = oneshot::channel();
        let _held = Held::take(at.shares, args.len() as u64)
            .map_err(|short| denied(&tool.python_name, false, Some(&short.to_string())))?;
        {
            let mut waiting = lock(&inner.waiting);
            if let Some(reason) = &waiting.closed {
                return Err(denied(&tool.python_name, false, Some(reason)));
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
        let decision = match tokio::time::timeout(wait, &mut answer).await {
            Ok(Ok(decision)) => decision,
            Ok(Err(_)) => Decision::sidecar("shutdown", "the sidecar dropped the approval"),
            Err(_) => match take(&inner.waiting, &approval.id) {
                true if wait < inner.timeout => Decision::sidecar(
                    "timeout",
                    &format!(
                        "no one answered within {:.1} s, what was left of the run's {} s of \
                         waiting for people (PTC_APPROVAL_TIMEOUT)",
                        wait.as_secs_f64(),
                        at.budget.as_secs()
                    ),
                ),
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

    fn requested(&self, approval: &Approval, span: &SpanContext, args: &WaitingArgs) {
        let events = &self.inner.events;
        let mut e = approval_event("approval.requested", approval, span);
        e.args_bytes = Some(args.len());
        if events.bodies() {
            // Whole when short; else the excerpt, as a string (the event bounds it again).
            e.args = Some(match &args.excerpt {
                None => args.value(),
                Some(excerpt) => Value::String(excerpt.to_string()),
            });
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

fn ms_u64(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn new_id() -> String {
    let mut bytes = [0u8; 12];
    rand::fill(&mut bytes);
    hex(&bytes)
}
