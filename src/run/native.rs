//! Native PTC: one tool call a runtime sends (`POST /v1/tools/call`) because the provider ran
//! the model's code (Anthropic's code execution, OpenAI's programmatic tool calling) or because
//! the model called a tool directly. Each goes through [`Calls::call_as`], the path of a run's
//! call (the schema check before dispatch, the tool's `max_per_run`, a person's approval, its
//! limits across runs, `PTC_TOOL_TIMEOUT`, dispatch, the `tool_call.*` events): there is no
//! second dispatcher.
//!
//! Owns which "run" a runtime's call belongs to, its [`RunCtx`] (the budgets, the share of
//! waiting for people, the ids on its events): the provider's program when the caller names
//! one (its `tool_id` or `caller_id`; one context per id within the session and agent, kept
//! while calls come, [`NATIVE_RUN_IDLE`]), else a context of the call alone. It also owns how a
//! runtime's call finds its tool ([`lookup`]: every catalog tool, direct ones too, by the name
//! the native tool lists offer). It must not know HTTP or how a call is dispatched.

use super::Approvals;
use super::calls::{Arrival, CallLimits, Calls, RunCtx};
use super::clock::RunClock;
use super::dispatch::{self, Backends, CallError, MAX_TOOL_NAME_BYTES, nearest};
use super::prepare::{CatalogKey, Prepared};
use super::shapes::{Shapes, ShapesConfig};
use crate::catalog::{Catalog, Tool};
use crate::render::{Snapshot, offered_name};
use crate::trace::SpanContext;
use crate::util::lock;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a provider's program is one run after its last call: its budgets (`max_per_run`,
/// the calls in all, the waiting for people) hold across its calls. Anthropic reclaims an idle
/// container after about 5 minutes and fails a call pending 270 s; a program idle longer is
/// over.
pub const NATIVE_RUN_IDLE: Duration = Duration::from_secs(600);

/// Providers' programs kept as runs at once; past it the least recently called is forgotten
/// (its next call starts fresh budgets). Bounds the table a runtime's ids fill.
pub const MAX_NATIVE_RUNS: usize = 4096;

/// The caller of a call no one names: the runtime itself (the model called the tool directly).
pub const RUNTIME: &str = "runtime";

/// Who made a runtime's call: `runtime`, or the provider's caller type
/// (`code_execution_20260120`, `program`) with the id of the code that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub kind: String,
    pub id: Option<String>,
}

impl Caller {
    pub fn runtime() -> Caller {
        Caller {
            kind: RUNTIME.into(),
            id: None,
        }
    }
}

/// One call a runtime sends.
#[derive(Debug, Clone)]
pub struct RuntimeCall {
    /// The tool's name as the native lists offer it (or its dispatched or Python name).
    pub tool: String,
    pub input: Value,
    pub caller: Caller,
    /// The runtime's session, when it has one: on the events, and part of which run a
    /// program's calls belong to.
    pub session: Option<String>,
    /// The runtime's agent, when it has one: part of which run a program's calls belong to.
    pub agent: Option<String>,
    /// The caller's W3C trace context: the call's span is a child of it.
    pub traceparent: Option<String>,
}

/// The runtimes' calls: a cloneable handle.
#[derive(Clone)]
pub struct Native {
    inner: Arc<Inner>,
}

/// A provider's program as a run: `(session, agent, caller type, caller id)`.
type ProgramKey = (Option<String>, Option<String>, String, String);

struct Inner {
    calls: Calls,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    limits: CallLimits,
    counter: AtomicU64,
    /// The argument validators of the current catalog, compiled on first use.
    prepared: Mutex<Option<Arc<Prepared>>>,
    programs: Mutex<HashMap<ProgramKey, Kept>>,
}

struct Kept {
    run: Arc<RunCtx>,
    last: Instant,
}

impl Native {
    /// Calls on `backends` (the runner's own, when PTC is on: the same approvals, limits, MCP
    /// servers and events), in the catalog `snapshots` holds, each run within `limits` (those
    /// of a run). Learns no result shapes: those are for the code a sidecar run gives.
    pub fn new(
        backends: Backends,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        limits: CallLimits,
    ) -> Native {
        let shapes = Shapes::load(ShapesConfig {
            learn: false,
            agent: String::new(),
            state_dir: None,
        });
        Native {
            inner: Arc::new(Inner {
                calls: Calls::new(backends, shapes),
                snapshots,
                limits,
                counter: AtomicU64::new(0),
                prepared: Mutex::new(None),
                programs: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The calls that wait for a person, and the rules that make them wait.
    pub fn approvals(&self) -> &Approvals {
        self.inner.calls.approvals()
    }

    /// The limits per tool (`PTC_TOOL_LIMITS`), for a reload.
    pub fn limiter(&self) -> &Arc<super::Limiter> {
        self.inner.calls.limiter()
    }

    /// Providers' programs held as runs now.
    pub fn programs(&self) -> usize {
        lock(&self.inner.programs).len()
    }

    /// Runs one call: found by [`lookup`], then [`Calls::call_as`] in its run.
    pub async fn call(&self, call: RuntimeCall) -> Result<Value, CallError> {
        let run = self.run_for(&call);
        let arrival = Arrival {
            lookup,
            // A program's calls are children of its run's span, unless the runtime says whose.
            span: call
                .traceparent
                .as_deref()
                .map(|tp| SpanContext::for_run(Some(tp))),
        };
        self.inner
            .calls
            .call_as(&run, &call.tool, call.input, arrival)
            .await
    }

    /// The program's run when the caller names one (made on its first call), else a run of
    /// this call alone.
    fn run_for(&self, call: &RuntimeCall) -> Arc<RunCtx> {
        let Some(id) = &call.caller.id else {
            return self.new_run(call);
        };
        let key = (
            call.session.clone(),
            call.agent.clone(),
            call.caller.kind.clone(),
            id.clone(),
        );
        let now = Instant::now();
        let mut programs = lock(&self.inner.programs);
        if let Some(kept) = programs.get_mut(&key)
            && now.duration_since(kept.last) < NATIVE_RUN_IDLE
        {
            kept.last = now;
            return kept.run.clone();
        }
        programs.retain(|_, k| now.duration_since(k.last) < NATIVE_RUN_IDLE);
        if programs.len() >= MAX_NATIVE_RUNS {
            let oldest = programs
                .iter()
                .min_by_key(|(_, k)| k.last)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                programs.remove(&oldest);
            }
        }
        let run = self.new_run(call);
        programs.insert(
            key,
            Kept {
                run: run.clone(),
                last: now,
            },
        );
        run
    }

    /// A run for a runtime's calls, in the current catalog: the limits of a run, the share of
    /// waiting for people of a run (`PTC_APPROVAL_TIMEOUT`), no host channel (a host tool
    /// without a callback URL is the runtime's own to run).
    fn new_run(&self, call: &RuntimeCall) -> Arc<RunCtx> {
        let snapshot = self.inner.snapshots.borrow().clone();
        let prepared = self.prepared(&snapshot);
        let id = format!("n{}", self.inner.counter.fetch_add(1, Ordering::Relaxed));
        let mut run = RunCtx::new(id, snapshot, prepared, None, self.inner.limits);
        run.session = call.session.clone();
        run.caller = Some((call.caller.kind.clone(), call.caller.id.clone()));
        run.span = SpanContext::for_run(call.traceparent.as_deref());
        let budget = self.inner.calls.approval_budget();
        run.clock = RunClock::new(Instant::now() + NATIVE_RUN_IDLE, budget);
        Arc::new(run)
    }

    /// The validators of `snapshot`'s catalog: one set per catalog, kept for the current one.
    fn prepared(&self, snapshot: &Snapshot) -> Arc<Prepared> {
        let key = CatalogKey::of(snapshot);
        let mut kept = lock(&self.inner.prepared);
        if let Some(p) = kept.as_ref().filter(|p| p.key == key) {
            return p.clone();
        }
        // No SDK: a runtime's call runs no code of ours, only the argument check.
        let p = Arc::new(Prepared {
            key,
            sdk_dir: PathBuf::new(),
            validators: dispatch::Validators::default(),
            digest: 0,
            tampered: AtomicBool::new(false),
        });
        *kept = Some(p.clone());
        p
    }
}

/// Finds a tool by the name a runtime sent: any catalog tool (direct ones too: with
/// `PTC_ENABLED=false` every tool is one), by the name the native lists offer
/// ([`offered_name`]), its dispatched name or its Python name; or says which offered names are
/// close. A name over [`MAX_TOOL_NAME_BYTES`] is refused as a run's call would be.
pub fn lookup<'c>(catalog: &'c Catalog, name: &str) -> Result<&'c Tool, CallError> {
    if name.len() > MAX_TOOL_NAME_BYTES {
        return dispatch::lookup(catalog, name);
    }
    if let Some(tool) = catalog.get(name).or_else(|| catalog.by_python_name(name)) {
        return Ok(tool);
    }
    let close = closest(catalog, name);
    let hint = match close.is_empty() {
        true => String::new(),
        false => format!("; closest: {}", close.join(", ")),
    };
    Err(CallError::UnknownTool(format!(
        "no tool named {name:?}{hint}"
    )))
}

/// The offered names within an edit distance of about half of `name`, nearest first, at most
/// 3 (the rule of a run's call, `dispatch::nearest`, over every tool).
pub fn closest(catalog: &Catalog, name: &str) -> Vec<String> {
    nearest(name, catalog.tools().iter().map(offered_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::ToolDef;
    use crate::catalog::{CatalogInput, Policy};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn catalog(ptc_enabled: bool) -> Catalog {
        let def = |name: &str| ToolDef {
            name: name.into(),
            title: None,
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        };
        let input = CatalogInput {
            host_tools: vec![def("complete"), def("get-weather"), def("list_orders")],
            ..CatalogInput::default()
        };
        let policy = Policy {
            ptc_enabled,
            direct_tools: vec!["complete".into()],
            ..Policy::default()
        };
        Catalog::build(input, &policy, 1)
    }

    fn refused(result: Result<&Tool, CallError>) -> String {
        match result {
            Ok(tool) => panic!("found {}", tool.name),
            Err(e) => format!("{}: {e}", e.kind()),
        }
    }

    #[test]
    fn every_tool_is_found_by_the_name_offered_and_typos_get_suggestions() {
        for ptc in [true, false] {
            let c = catalog(ptc);
            // A direct tool too: with PTC off every tool is direct.
            assert_eq!(lookup(&c, "complete").unwrap().name, "complete");
            assert_eq!(lookup(&c, "get-weather").unwrap().name, "get-weather");
            assert_eq!(lookup(&c, "list_orders").unwrap().name, "list_orders");
            assert_eq!(
                refused(lookup(&c, "list_order")),
                "unknown_tool: no tool named \"list_order\"; closest: list_orders"
            );
            assert_eq!(
                refused(lookup(&c, "compleet")),
                "unknown_tool: no tool named \"compleet\"; closest: complete"
            );
        }
        // A PTC tool is offered (and found) by its Python name.
        let c = catalog(true);
        assert_eq!(lookup(&c, "get_weather").unwrap().name, "get-weather");
        assert_eq!(
            refused(lookup(&c, "get_wether")),
            "unknown_tool: no tool named \"get_wether\"; closest: get_weather"
        );
        let long = "x".repeat(MAX_TOOL_NAME_BYTES + 1);
        assert!(refused(lookup(&c, &long)).contains("tool names are at most 256 bytes"));
        assert_eq!(
            closest(&c, &"g".repeat(dispatch::MAX_SUGGEST_CHARS + 1)),
            Vec::<String>::new()
        );
    }
}
