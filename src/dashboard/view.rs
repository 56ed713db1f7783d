//! What the dashboard's model answers: the page's view of it ([`Model::view`], with a
//! [`Filter`]), one run's page ([`Model::run`]), and each agent's health as its events say it.
//!
//! Owns turning the folded state into JSON: the runs that pass a filter, the per-tool
//! statistics merged over the agents a filter admits (with their latency percentiles), and the
//! health rules. It reads the model and never changes it; the folding is the parent's.

use super::{HEALTH_RUNS, IDLE_AFTER_MS, Model, ReloadOutcome, Run, ToolStats};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

impl Model {
    /// What the page shows: agents with their health (`now_ms` being the clock), the latest
    /// `limit` runs that pass the filters (newest first), per-tool statistics of the agents
    /// the filter admits, and the reloads.
    pub fn view(&self, now_ms: u64, filter: &Filter, limit: usize) -> Value {
        // Each agent's runs in one pass over them, newest first.
        let mut runs_of: HashMap<&str, AgentRuns> = HashMap::new();
        for r in self.runs.iter().rev() {
            let a = runs_of.entry(r.agent.as_str()).or_default();
            match r.status.as_deref() {
                None => a.running += 1,
                Some(_) if a.recent == HEALTH_RUNS => {}
                Some(status) => {
                    a.recent += 1;
                    a.failed += usize::from(status != "ok");
                }
            }
        }
        let agents: BTreeMap<&String, Value> = self
            .agents
            .iter()
            .map(|(a, t)| {
                let runs = runs_of.get(a.as_str()).copied().unwrap_or_default();
                (a, self.health(a, runs, now_ms.saturating_sub(*t)))
            })
            .collect();
        let runs: Vec<Value> = self
            .runs
            .iter()
            .rev()
            .filter(|r| filter.admits(r))
            .take(limit)
            .map(|r| run_json(r, false))
            .collect();
        let mut merged: HashMap<&String, ToolStats> = HashMap::new();
        for ((agent, tool), s) in &self.tools {
            if filter.agent.as_ref().is_some_and(|a| a != agent)
                || filter.tool.as_ref().is_some_and(|t| t != tool)
            {
                continue;
            }
            let m = merged.entry(tool).or_default();
            m.calls += s.calls;
            m.errors += s.errors;
            m.latencies.extend(s.latencies.iter().copied());
        }
        let mut tools: Vec<(&String, ToolStats)> = merged.into_iter().collect();
        tools.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
        let tools: Vec<Value> = tools
            .into_iter()
            .map(|(name, s)| {
                let mut sorted: Vec<f64> = s.latencies.into_iter().collect();
                sorted.sort_by(f64::total_cmp);
                json!({
                    "tool": name,
                    "calls": s.calls,
                    "errors": s.errors,
                    "error_rate": if s.calls == 0 { 0.0 } else { s.errors as f64 / s.calls as f64 },
                    "p50_ms": percentile(&sorted, 0.50),
                    "p95_ms": percentile(&sorted, 0.95),
                })
            })
            .collect();
        json!({
            "agents": agents,
            "runs": runs,
            "tools": tools,
            "reloads": self.reloads.iter().rev().collect::<Vec<_>>(),
            "events": self.events,
        })
    }

    /// One run as its page shows it: what the view says of it, and its excerpts (`code`,
    /// `stdout`, `stderr`, each call's `args` and `result`: `null` when not kept, and
    /// `details_dropped` when let go for age). `None` when it is not kept.
    pub fn run(&self, agent: &str, exec_id: &str) -> Option<Value> {
        let index = self.run_index(agent, exec_id)?;
        Some(run_json(&self.runs[index], true))
    }

    /// An agent's health from what its events say (sidecars send no heartbeat):
    /// `degraded` when its latest catalog reload failed or half or more of its latest
    /// [`HEALTH_RUNS`] finished runs did not end `ok`; else `idle` after [`IDLE_AFTER_MS`]
    /// without an event; else `ok`.
    fn health(&self, agent: &str, runs: AgentRuns, quiet_ms: u64) -> Value {
        let AgentRuns {
            running,
            recent,
            failed,
        } = runs;
        let reload_error = match self.last_reload.get(agent) {
            Some(ReloadOutcome::Failed(why)) => Some(why.as_str()),
            _ => None,
        };
        let health = if reload_error.is_some() || (recent > 0 && failed * 2 >= recent) {
            "degraded"
        } else if quiet_ms >= IDLE_AFTER_MS {
            "idle"
        } else {
            "ok"
        };
        json!({
            "health": health,
            "last_event_ms_ago": quiet_ms,
            "running": running,
            "recent_runs": recent,
            "recent_failed": failed,
            "reload_error": reload_error,
        })
    }
}

/// An agent's kept runs as its health counts them: in flight, and of its latest
/// [`HEALTH_RUNS`] finished ones, how many and how many did not end `ok`.
#[derive(Debug, Default, Clone, Copy)]
struct AgentRuns {
    running: usize,
    recent: usize,
    failed: usize,
}

/// What the page asks to see.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub agent: Option<String>,
    pub tool: Option<String>,
    /// `ok`, `error`, `timeout`, or `running`.
    pub status: Option<String>,
}

impl Filter {
    fn admits(&self, r: &Run) -> bool {
        let status = r.status.as_deref().unwrap_or("running");
        self.agent.as_ref().is_none_or(|a| *a == r.agent)
            && self.status.as_ref().is_none_or(|s| s == status)
            && self
                .tool
                .as_ref()
                .is_none_or(|t| r.calls.iter().any(|c| c.tool == *t))
    }
}

/// A run as JSON: with `details`, its excerpts too (what [`Model::run`] answers).
fn run_json(r: &Run, details: bool) -> Value {
    let mut run = json!({
        "agent": r.agent,
        "exec_id": r.exec_id,
        "session_id": r.session_id,
        "trace_id": r.trace_id,
        "started_ms": r.started_ms,
        "status": r.status.as_deref().unwrap_or("running"),
        "duration_ms": r.duration_ms,
        "error": r.error,
        "exit_code": r.exit_code,
        "code_bytes": r.code_bytes,
        "stdout_bytes": r.stdout_bytes,
        "stderr_bytes": r.stderr_bytes,
        "calls_dropped": r.calls_dropped,
        "calls": r.calls.iter().map(|c| {
            let mut call = json!({
                "call_id": c.call_id,
                "tool": c.tool,
                "offset_ms": c.offset_ms,
                "duration_ms": c.duration_ms,
                "ok": c.ok,
                "error": c.error,
                "backend": c.backend,
                "args_bytes": c.args_bytes,
                "result_bytes": c.result_bytes,
            });
            if details {
                call["args"] = c.args.clone().into();
                call["result"] = c.result.clone().into();
            }
            call
        }).collect::<Vec<_>>(),
    });
    if details {
        run["code"] = r.code.clone().into();
        run["stdout"] = r.stdout.clone().into();
        run["stderr"] = r.stderr.clone().into();
        run["details_dropped"] = r.details_dropped.into();
    }
    run
}

/// The `q` quantile of `sorted` (nearest rank), `None` when empty.
fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(
            (percentile(&v, 0.5), percentile(&v, 0.95)),
            (Some(50.0), Some(95.0))
        );
        assert_eq!(percentile(&[], 0.5), None);
    }
}
