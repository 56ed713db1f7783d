//! Prometheus metrics: counters and histograms observed from the sidecar's own events (every
//! run and call already is one), and gauges read from the sidecar's state when `/metrics` is
//! scraped ([`Gauges`]), encoded in the Prometheus text format by `prometheus-client`.
//!
//! Owns the metric names, their labels and their buckets. Label values are bounded: a tool
//! label is a catalog tool's name (a call the catalog refused as unknown counts under
//! `(unknown)`), and at most [`MAX_TOOL_LABELS`] tools are told apart. It must not reach into
//! the parts it measures: `events` calls [`Metrics::observe`] for each event, and the API hands
//! in the gauges.

mod tenants;

use crate::events::{Event, Observer};
use crate::util::lock;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Tools told apart by the `tool` label; calls of tools past it count under `(other)`. A
/// catalog larger than this still cannot grow the series without bound.
pub const MAX_TOOL_LABELS: usize = 2000;

/// Run durations, in seconds: from a warm run's few milliseconds to a long run's minutes.
const RUN_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0,
];

/// Tool call latencies, in seconds: a local call's tenth of a millisecond to a slow API.
const CALL_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 2.0, 10.0,
];

/// How long a call waits for a person, in seconds: a click to the approval timeout.
const APPROVAL_BUCKETS: [f64; 10] = [0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0];

type Labels = Vec<(String, String)>;

/// A tool's label, and the counters of its calls by backend and outcome.
struct ToolCounters {
    label: String,
    by_outcome: Vec<(&'static str, String, Counter)>,
}

/// What the sidecar's state says at a scrape.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub runs_in_flight: i64,
    pub runs_queued: i64,
    pub warm_workers: i64,
    /// Each MCP server: its name, its state's name, its restarts.
    pub mcp_servers: Vec<(String, &'static str, u64)>,
    pub events_published: u64,
    pub events_held: u64,
    pub events_dropped: u64,
    pub catalog_version: i64,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub sessions_live: i64,
    pub sessions_max: i64,
    /// Sessions held out because their record cannot be read (`Sessions::unreadable`).
    pub session_records_unreadable: i64,
    /// Calls waiting for a person now.
    pub approvals_waiting: i64,
    /// What runs asked past their share, so far, by resource (`run::budget::refusals`).
    pub share_refusals: Vec<(&'static str, u64)>,
}

/// The registry and every metric in it; cloneable handle.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    runs: Runs,
    calls: Calls,
    runner: Runner,
    mcp: Mcp,
    events: EventCounts,
    catalog: CatalogMetrics,
    sessions: SessionGauges,
    control: Control,
    tenants: tenants::Tenants,
}

/// `ptc_runs` and `ptc_run_duration_seconds`, observed from `exec.finished`.
struct Runs {
    count: Family<Labels, Counter>,
    duration: Histogram,
}

/// `ptc_tool_calls` and `ptc_tool_call_duration_seconds`, observed from `tool_call.finished`.
struct Calls {
    count: Family<Labels, Counter>,
    /// The `tool_call_duration_seconds` series of each backend, kept at hand.
    host_latency: Histogram,
    mcp_latency: Histogram,
    /// Each tool's label and its counters by `(backend, outcome)`: a call of a tool seen before
    /// finds its counter without building a label set.
    tools_seen: Mutex<HashMap<String, ToolCounters>>,
}

/// The runner's gauges, set at a scrape.
struct Runner {
    in_flight: Gauge,
    queued: Gauge,
    warm: Gauge,
}

/// Each MCP server's state and restarts, set at a scrape.
struct Mcp {
    servers: Family<Labels, Gauge>,
    restarts: Family<Labels, Counter>,
}

/// What became of the events, mirrored from the publisher's stats at a scrape.
struct EventCounts {
    count: Family<Labels, Counter<u64, AtomicU64>>,
    held: Gauge,
}

/// The catalog's version and its hot reloads, set at a scrape.
struct CatalogMetrics {
    version: Gauge,
    reloads: Family<Labels, Counter>,
}

/// Approvals (`approval.decided`, a gauge of those waiting) and the waits for a tool's turn
/// under its limits (`tool_call.finished` with `queued_ms`).
struct Control {
    approvals: Family<Labels, Counter>,
    approval_wait: Histogram,
    waiting: Gauge,
    queued: Histogram,
    share_refusals: Family<Labels, Counter>,
}

/// The live interpreters of sessions and the sessions held out, set at a scrape.
struct SessionGauges {
    live: Gauge,
    max: Gauge,
    unreadable: Gauge,
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Metrics {
    /// Every metric, registered; `sandbox` becomes the `ptc_sandbox_info` labels. The families
    /// are registered in this order, which is the order of the text a scrape gets.
    pub fn new(sandbox: &[(&str, String)]) -> Metrics {
        let mut registry = Registry::with_prefix("ptc");
        let runs = Runs::register(&mut registry);
        let calls = Calls::register(&mut registry);
        let runner = Runner::register(&mut registry);
        let mcp = Mcp::register(&mut registry);
        let events = EventCounts::register(&mut registry);
        let catalog = CatalogMetrics::register(&mut registry);
        let sessions = SessionGauges::register(&mut registry);
        let control = Control::register(&mut registry);
        let tenants = tenants::Tenants::register(&mut registry);
        register_sandbox(&mut registry, sandbox);
        Metrics {
            inner: Arc::new(Inner {
                registry,
                runs,
                calls,
                runner,
                mcp,
                events,
                catalog,
                sessions,
                control,
                tenants,
            }),
        }
    }

    /// The Prometheus text of every metric, the gauges set from `now` first.
    pub fn render(&self, now: &Gauges) -> String {
        let m = &self.inner;
        m.runner.in_flight.set(now.runs_in_flight);
        m.runner.queued.set(now.runs_queued);
        m.runner.warm.set(now.warm_workers);
        // A server removed by a reload must not stay at its last state.
        m.mcp.servers.clear();
        for (server, state, restarts) in &now.mcp_servers {
            m.mcp
                .servers
                .get_or_create(&labels(&[("server", server), ("state", state)]))
                .set(1);
            let counter = m.mcp.restarts.get_or_create(&labels(&[("server", server)]));
            let seen = counter.get();
            if *restarts > seen {
                counter.inc_by(restarts - seen);
            }
        }
        set_total(&m.events.count, "published", now.events_published);
        set_total(&m.events.count, "dropped", now.events_dropped);
        m.events.held.set(now.events_held as i64);
        m.catalog.version.set(now.catalog_version);
        set_total(&m.catalog.reloads, "ok", now.reloads_ok);
        set_total(&m.catalog.reloads, "failed", now.reloads_failed);
        m.sessions.live.set(now.sessions_live);
        m.sessions.max.set(now.sessions_max);
        m.sessions.unreadable.set(now.session_records_unreadable);
        m.control.waiting.set(now.approvals_waiting);
        for (resource, total) in &now.share_refusals {
            let counter = m
                .control
                .share_refusals
                .get_or_create(&labels(&[("resource", resource)]));
            let seen = counter.get();
            if *total > seen {
                counter.inc_by(total - seen);
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &m.registry);
        out
    }

    /// A LibreChat token checked: `ok`, or the check that refused it.
    pub fn token_checked(&self, outcome: &str) {
        self.inner.tenants.token_checked(outcome);
    }

    /// The counter of calls of `tool` (its label: `(unknown)` when the catalog refused it as
    /// unknown, `(other)` past [`MAX_TOOL_LABELS`]) on `backend` with `outcome`.
    fn call_counter(
        &self,
        tool: &str,
        unknown: bool,
        backend: &'static str,
        outcome: &str,
    ) -> Counter {
        let key = if unknown { "(unknown)" } else { tool };
        let mut seen = lock(&self.inner.calls.tools_seen);
        if !seen.contains_key(key) {
            let label = if unknown || seen.len() < MAX_TOOL_LABELS {
                key.to_string()
            } else {
                "(other)".to_string()
            };
            seen.insert(
                key.to_string(),
                ToolCounters {
                    label,
                    by_outcome: Vec::new(),
                },
            );
        }
        let Some(tool) = seen.get_mut(key) else {
            return Counter::default();
        };
        if let Some((_, _, c)) = tool
            .by_outcome
            .iter()
            .find(|(b, o, _)| *b == backend && o == outcome)
        {
            return c.clone();
        }
        let counter = self.inner.calls.count.get_or_create_owned(&labels(&[
            ("tool", &tool.label),
            ("backend", backend),
            ("outcome", outcome),
        ]));
        tool.by_outcome
            .push((backend, outcome.to_string(), counter.clone()));
        counter
    }
}

impl Runs {
    fn register(registry: &mut Registry) -> Runs {
        let count = Family::<Labels, Counter>::default();
        registry.register("runs", "exec_code runs by how they ended", count.clone());
        let duration = Histogram::new(RUN_BUCKETS);
        registry.register_with_unit(
            "run_duration",
            "exec_code run duration, start to result",
            Unit::Seconds,
            duration.clone(),
        );
        Runs { count, duration }
    }
}

impl Calls {
    fn register(registry: &mut Registry) -> Calls {
        let count = Family::<Labels, Counter>::default();
        registry.register(
            "tool_calls",
            "tool calls by tool, backend (mcp, host) and outcome (ok or the error type)",
            count.clone(),
        );
        let duration =
            Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(CALL_BUCKETS));
        registry.register_with_unit(
            "tool_call_duration",
            "tool call latency by backend",
            Unit::Seconds,
            duration.clone(),
        );
        // One statement each: a family's read guard lives to the end of its statement, and the
        // next series is made under its write lock.
        let host_latency = duration.get_or_create_owned(&labels(&[("backend", "host")]));
        let mcp_latency = duration.get_or_create_owned(&labels(&[("backend", "mcp")]));
        Calls {
            count,
            host_latency,
            mcp_latency,
            tools_seen: Mutex::new(HashMap::new()),
        }
    }
}

impl Control {
    fn register(registry: &mut Registry) -> Control {
        let approvals = Family::<Labels, Counter>::default();
        registry.register(
            "approvals",
            "calls that waited for a person, by outcome (approved, denied, timeout, shutdown, \
             run_ended, no_elicitation)",
            approvals.clone(),
        );
        let approval_wait = Histogram::new(APPROVAL_BUCKETS);
        registry.register_with_unit(
            "approval_wait",
            "how long a call waited for a person's answer",
            Unit::Seconds,
            approval_wait.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "approvals_waiting",
            "calls waiting for a person now",
            waiting.clone(),
        );
        let queued = Histogram::new(CALL_BUCKETS);
        registry.register_with_unit(
            "tool_call_queued",
            "how long a call waited for its turn under its tool's limits (PTC_TOOL_LIMITS)",
            Unit::Seconds,
            queued.clone(),
        );
        let share_refusals = Family::<Labels, Counter>::default();
        registry.register(
            "run_share_refusals",
            "what runs asked past their share, by resource (approval_time, approvals, \
             approval_bytes, saves, calls, rate; docs/SECURITY.md, a run's budget)",
            share_refusals.clone(),
        );
        Control {
            approvals,
            approval_wait,
            waiting,
            queued,
            share_refusals,
        }
    }

    fn observe_decided(&self, e: &Event) {
        let outcome = match (e.approved, e.door) {
            (Some(true), _) => "approved",
            (_, Some("http" | "mcp")) | (_, None) => "denied",
            (_, Some(door)) => door,
        };
        self.approvals
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
        if let Some(ms) = e.waited_ms {
            self.approval_wait.observe(ms / 1e3);
        }
    }
}

impl Runner {
    fn register(registry: &mut Registry) -> Runner {
        let in_flight = Gauge::default();
        registry.register("runs_in_flight", "runs going on now", in_flight.clone());
        let queued = Gauge::default();
        registry.register(
            "runs_queued",
            "runs waiting for one of the PTC_MAX_RUNS slots",
            queued.clone(),
        );
        let warm = Gauge::default();
        registry.register(
            "warm_workers",
            "pre-started interpreters ready for a run",
            warm.clone(),
        );
        Runner {
            in_flight,
            queued,
            warm,
        }
    }
}

impl Mcp {
    fn register(registry: &mut Registry) -> Mcp {
        let servers = Family::<Labels, Gauge>::default();
        registry.register(
            "mcp_servers",
            "MCP servers by state (1 for the state each server is in)",
            servers.clone(),
        );
        let restarts = Family::<Labels, Counter>::default();
        registry.register(
            "mcp_server_restarts",
            "restarts of each MCP server",
            restarts.clone(),
        );
        Mcp { servers, restarts }
    }
}

impl EventCounts {
    fn register(registry: &mut Registry) -> EventCounts {
        let count = Family::<Labels, Counter<u64, AtomicU64>>::default();
        registry.register(
            "events",
            "events by what became of them (published to Redis, dropped)",
            count.clone(),
        );
        let held = Gauge::default();
        registry.register(
            "events_held",
            "events held while Redis is away",
            held.clone(),
        );
        EventCounts { count, held }
    }
}

impl CatalogMetrics {
    fn register(registry: &mut Registry) -> CatalogMetrics {
        let version = Gauge::default();
        registry.register(
            "catalog_version",
            "the tool catalog's version",
            version.clone(),
        );
        let reloads = Family::<Labels, Counter>::default();
        registry.register(
            "catalog_reloads",
            "hot reloads by result (ok: a new catalog; failed: the old one kept)",
            reloads.clone(),
        );
        CatalogMetrics { version, reloads }
    }
}

impl SessionGauges {
    fn register(registry: &mut Registry) -> SessionGauges {
        let live = Gauge::default();
        registry.register(
            "sessions_live",
            "sessions with a live interpreter",
            live.clone(),
        );
        let max = Gauge::default();
        registry.register(
            "sessions_max",
            "live interpreters allowed at once (PTC_MAX_SESSIONS)",
            max.clone(),
        );
        let unreadable = Gauge::default();
        registry.register(
            "session_records_unreadable",
            "sessions held out of every route because their record cannot be read \
             (docs/SECURITY.md)",
            unreadable.clone(),
        );
        SessionGauges {
            live,
            max,
            unreadable,
        }
    }
}

/// `ptc_sandbox_info`: how runs are confined, as labels of one info metric.
fn register_sandbox(registry: &mut Registry, sandbox: &[(&str, String)]) {
    let info: Labels = sandbox
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    registry.register(
        "sandbox",
        "how runs are confined (docs/SECURITY.md)",
        Info::new(info),
    );
}

/// Moves a counter that mirrors a total kept elsewhere up to `total` (counters only go up).
fn set_total<A>(family: &Family<Labels, Counter<u64, A>>, label: &str, total: u64)
where
    A: prometheus_client::metrics::counter::Atomic<u64> + Default,
    Counter<u64, A>: Clone,
{
    let counter = family.get_or_create(&labels(&[("result", label)]));
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

impl Observer for Metrics {
    fn observe(&self, e: &Event) {
        let m = &self.inner;
        match e.kind {
            "exec.finished" => {
                let status = match e.error.as_ref().and_then(|v| v["type"].as_str()) {
                    Some("cancelled") => "cancelled",
                    _ => e.status.unwrap_or("error"),
                };
                m.runs
                    .count
                    .get_or_create(&labels(&[("status", status)]))
                    .inc();
                if let Some(ms) = e.duration_ms {
                    m.runs.duration.observe(ms / 1e3);
                }
                m.tenants.observe_finished(e);
            }
            "tool_call.finished" => {
                let error = e.error.as_ref().and_then(|v| v["type"].as_str());
                let outcome = match (e.ok, error) {
                    (Some(true), _) => "ok",
                    (_, Some(kind)) => kind,
                    _ => "error",
                };
                if let Some(ms) = e.queued_ms {
                    m.control.queued.observe(ms / 1e3);
                }
                let backend = e.source.unwrap_or("none");
                let tool = e.tool.as_deref().unwrap_or("");
                self.call_counter(tool, error == Some("unknown_tool"), backend, outcome)
                    .inc();
                if let Some(ms) = e.duration_ms {
                    let latency = match backend {
                        "host" => &m.calls.host_latency,
                        "mcp" => &m.calls.mcp_latency,
                        _ => return,
                    };
                    latency.observe(ms / 1e3);
                }
            }
            "approval.decided" => m.control.observe_decided(e),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The families' names, help, types and units, in the order a scrape lists them: what
    /// dashboards and alerts are written against. (A family without a series is not listed,
    /// so each gets one.)
    #[test]
    fn every_family_is_described_in_registration_order() {
        let metrics = Metrics::new(&[("mode", "best-effort".to_string())]);
        let mut finished = Event::new("exec.finished");
        finished.tenant_id = Some("t1".into());
        metrics.observe(&finished);
        metrics.token_checked("ok");
        let mut call = Event::new("tool_call.finished");
        call.tool = Some("t".into());
        metrics.observe(&call);
        let mut decided = Event::new("approval.decided");
        decided.door = Some("timeout");
        metrics.observe(&decided);
        let now = Gauges {
            mcp_servers: vec![("s".into(), "ready", 0)],
            share_refusals: vec![("rate", 1)],
            ..Gauges::default()
        };
        let text = metrics.render(&now);
        let described: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with("# HELP") || l.starts_with("# TYPE") || l.starts_with("# UNIT")
            })
            .collect();
        assert_eq!(
            described,
            [
                "# HELP ptc_runs exec_code runs by how they ended.",
                "# TYPE ptc_runs counter",
                "# HELP ptc_run_duration_seconds exec_code run duration, start to result.",
                "# TYPE ptc_run_duration_seconds histogram",
                "# UNIT ptc_run_duration_seconds seconds",
                "# HELP ptc_tool_calls tool calls by tool, backend (mcp, host) and outcome (ok or the error type).",
                "# TYPE ptc_tool_calls counter",
                "# HELP ptc_tool_call_duration_seconds tool call latency by backend.",
                "# TYPE ptc_tool_call_duration_seconds histogram",
                "# UNIT ptc_tool_call_duration_seconds seconds",
                "# HELP ptc_runs_in_flight runs going on now.",
                "# TYPE ptc_runs_in_flight gauge",
                "# HELP ptc_runs_queued runs waiting for one of the PTC_MAX_RUNS slots.",
                "# TYPE ptc_runs_queued gauge",
                "# HELP ptc_warm_workers pre-started interpreters ready for a run.",
                "# TYPE ptc_warm_workers gauge",
                "# HELP ptc_mcp_servers MCP servers by state (1 for the state each server is in).",
                "# TYPE ptc_mcp_servers gauge",
                "# HELP ptc_mcp_server_restarts restarts of each MCP server.",
                "# TYPE ptc_mcp_server_restarts counter",
                "# HELP ptc_events events by what became of them (published to Redis, dropped).",
                "# TYPE ptc_events counter",
                "# HELP ptc_events_held events held while Redis is away.",
                "# TYPE ptc_events_held gauge",
                "# HELP ptc_catalog_version the tool catalog's version.",
                "# TYPE ptc_catalog_version gauge",
                "# HELP ptc_catalog_reloads hot reloads by result (ok: a new catalog; failed: the old one kept).",
                "# TYPE ptc_catalog_reloads counter",
                "# HELP ptc_sessions_live sessions with a live interpreter.",
                "# TYPE ptc_sessions_live gauge",
                "# HELP ptc_sessions_max live interpreters allowed at once (PTC_MAX_SESSIONS).",
                "# TYPE ptc_sessions_max gauge",
                "# HELP ptc_session_records_unreadable sessions held out of every route because their record cannot be read (docs/SECURITY.md).",
                "# TYPE ptc_session_records_unreadable gauge",
                "# HELP ptc_approvals calls that waited for a person, by outcome (approved, denied, timeout, shutdown, run_ended, no_elicitation).",
                "# TYPE ptc_approvals counter",
                "# HELP ptc_approval_wait_seconds how long a call waited for a person's answer.",
                "# TYPE ptc_approval_wait_seconds histogram",
                "# UNIT ptc_approval_wait_seconds seconds",
                "# HELP ptc_approvals_waiting calls waiting for a person now.",
                "# TYPE ptc_approvals_waiting gauge",
                "# HELP ptc_tool_call_queued_seconds how long a call waited for its turn under its tool's limits (PTC_TOOL_LIMITS).",
                "# TYPE ptc_tool_call_queued_seconds histogram",
                "# UNIT ptc_tool_call_queued_seconds seconds",
                "# HELP ptc_run_share_refusals what runs asked past their share, by resource (approval_time, approvals, approval_bytes, saves, calls, rate; docs/SECURITY.md, a run's budget).",
                "# TYPE ptc_run_share_refusals counter",
                "# HELP ptc_librechat_tokens LibreChat tokens checked, by outcome (ok, or the check that refused it: missing, malformed, algorithm, kid, signature, expired, not_yet_valid, audience, issuer, claims).",
                "# TYPE ptc_librechat_tokens counter",
                "# HELP ptc_tenant_runs runs made for LibreChat users, by tenant (tenant_id).",
                "# TYPE ptc_tenant_runs counter",
                "# HELP ptc_sandbox how runs are confined (docs/SECURITY.md).",
                "# TYPE ptc_sandbox info",
            ]
        );
    }
}
