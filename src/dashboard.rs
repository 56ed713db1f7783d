//! The dashboard's model: what the page shows, folded from events as they come (one agent's
//! own, or every agent's from Redis), in bounded memory however many events pass through.
//!
//! Owns the folding and the limits: the latest [`MAX_RUNS`] runs with their calls (at most
//! [`MAX_CALLS_PER_RUN`] each) as a waterfall (each call's start as an offset into its run),
//! per-tool counts, error rates and latency percentiles over the latest [`LATENCY_SAMPLES`]
//! calls of each agent's tools (at most [`MAX_TOOLS`] agent and tool pairs), the latest
//! [`MAX_RELOADS`] catalog reloads, and each agent's health: its last sign of life, its runs in
//! flight, how its latest runs ended and whether its latest reload failed. The latest
//! [`DETAIL_RUNS`] runs also keep what a run's page shows ([`Model::run`]): excerpts of their
//! code, stdout and stderr ([`OUTPUT_EXCERPT`]) and of each call's arguments and result
//! ([`BODY_EXCERPT`], at most [`RUN_BODY_BYTES`] of them a run), when the events carry them
//! (`PTC_EVENTS_BODIES`). Pure: it is handed events (as parsed JSON) and a clock, and answers
//! views; serving it is the API's job. What it answers is text for the page to show as text:
//! it escapes nothing, and the page puts nothing of it into HTML.
//!
//! This file folds; `view` answers ([`Model::view`], [`Model::run`], the agents' health).

mod view;

pub use view::Filter;

use serde_json::Value;
use std::collections::{HashMap, VecDeque};

/// Runs kept, newest first: what a page shows without paging.
pub const MAX_RUNS: usize = 500;
/// Calls kept per run: a run that makes 10,000 calls shows its first 200.
pub const MAX_CALLS_PER_RUN: usize = 200;
/// Agent and tool pairs with statistics of their own; later ones count under `(other)`.
pub const MAX_TOOLS: usize = 5000;
/// Latencies kept per tool for its percentiles (the latest ones).
pub const LATENCY_SAMPLES: usize = 512;
/// Catalog reloads kept.
pub const MAX_RELOADS: usize = 50;
/// Agents kept (the most recently heard from).
pub const MAX_AGENTS: usize = 1000;
/// An agent's latest finished runs that its health looks at.
pub const HEALTH_RUNS: usize = 20;
/// Silence after which an agent shows as idle: a sidecar emits events only when it works.
pub const IDLE_AFTER_MS: u64 = 60_000;
/// Longest string kept of an event: a sidecar cuts its own to 1 KiB, but events from Redis may
/// come from one that does not, and 500 runs of megabyte errors would make a state of gigabytes.
pub const MAX_TEXT_BYTES: usize = 2048;
/// Runs, the latest, that keep their code, output and call bodies: 100 runs of at most
/// 12 KiB of output and [`RUN_BODY_BYTES`] of bodies is under 5 MB in the worst case.
pub const DETAIL_RUNS: usize = 100;
/// Longest excerpt of a run's code, stdout or stderr kept (its first and last halves).
pub const OUTPUT_EXCERPT: usize = 4096;
/// Longest excerpt of one call's arguments or result kept (as JSON text).
pub const BODY_EXCERPT: usize = 1024;
/// Bodies of one run's calls kept in all: the calls past it show their sizes only.
pub const RUN_BODY_BYTES: usize = 32 << 10;

/// One run as the page shows it.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    agent: String,
    exec_id: String,
    session_id: Option<String>,
    trace_id: Option<String>,
    started_ms: u64,
    status: Option<String>,
    duration_ms: Option<f64>,
    error: Option<String>,
    exit_code: Option<i64>,
    code_bytes: Option<u64>,
    stdout_bytes: Option<u64>,
    stderr_bytes: Option<u64>,
    /// Excerpts, when the events carry them and the run is among the latest [`DETAIL_RUNS`].
    code: Option<String>,
    stdout: Option<String>,
    stderr: Option<String>,
    /// Its excerpts were let go: it is older than the latest [`DETAIL_RUNS`].
    details_dropped: bool,
    /// Bytes of its calls' bodies kept, within [`RUN_BODY_BYTES`].
    body_bytes: usize,
    calls: Vec<Call>,
    /// Calls past [`MAX_CALLS_PER_RUN`], counted but not kept.
    calls_dropped: usize,
}

impl Run {
    fn drop_details(&mut self) {
        self.code = None;
        self.stdout = None;
        self.stderr = None;
        for call in &mut self.calls {
            call.args = None;
            call.result = None;
        }
        self.body_bytes = 0;
        self.details_dropped = true;
    }

    /// `body` as an excerpt for one of its calls, if the run's [`RUN_BODY_BYTES`] allow it.
    fn keep_body(&mut self, body: &Value) -> Option<String> {
        if body.is_null() || self.details_dropped {
            return None;
        }
        let text = match body {
            Value::String(s) => bounded_to(s, BODY_EXCERPT),
            other => bounded_to(&other.to_string(), BODY_EXCERPT),
        };
        if self.body_bytes + text.len() > RUN_BODY_BYTES {
            return None;
        }
        self.body_bytes += text.len();
        Some(text)
    }
}

/// One call in a run's waterfall.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    call_id: String,
    tool: String,
    /// Milliseconds from the run's start to the call's.
    offset_ms: f64,
    duration_ms: Option<f64>,
    ok: Option<bool>,
    error: Option<String>,
    backend: Option<String>,
    args_bytes: Option<u64>,
    result_bytes: Option<u64>,
    /// Excerpts of the bodies, as JSON text (a string as itself), when kept.
    args: Option<String>,
    result: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct ToolStats {
    calls: u64,
    errors: u64,
    latencies: VecDeque<f64>,
}

/// Everything the page shows.
#[derive(Debug, Default)]
pub struct Model {
    /// Newest at the back.
    runs: VecDeque<Run>,
    /// (agent, tool) → statistics; a view merges the agents it admits.
    tools: HashMap<(String, String), ToolStats>,
    reloads: VecDeque<Value>,
    /// Agent → how its latest catalog reload ended.
    last_reload: HashMap<String, ReloadOutcome>,
    /// Agent → last event's time (ms).
    agents: HashMap<String, u64>,
    /// Agent → the `(seq, ts)` of its latest event: an event at or before both is one seen
    /// already (history and live can overlap); a restarted sidecar's low `seq` comes later.
    latest: HashMap<String, (u64, u64)>,
    /// Events folded in all.
    pub events: u64,
}

/// How an agent's latest catalog reload ended, as its health reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReloadOutcome {
    Ok,
    /// The old catalog was kept; why (the event's `error.message`).
    Failed(String),
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(bounded)
}

/// `s` within [`MAX_TEXT_BYTES`], the cut said.
fn bounded(s: &str) -> String {
    bounded_to(s, MAX_TEXT_BYTES)
}

/// `s` within `max` bytes, the cut said.
fn bounded_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} more bytes]", &s[..end], s.len() - end)
}

/// A run's code or output within [`OUTPUT_EXCERPT`]: its first and last halves around the
/// cut (a traceback is at the end), as `events::excerpt` makes them (an excerpt of that length
/// is kept as it is). Events of this sidecar are cut so already; ones from Redis may come from
/// a sidecar that does not.
fn output(v: &Value, key: &str) -> Option<String> {
    let s = v.get(key)?.as_str()?;
    if s.len() <= OUTPUT_EXCERPT {
        return Some(s.to_string());
    }
    let said = format!("\n… [cut: {} bytes] …\n", s.len()).len();
    let keep = OUTPUT_EXCERPT.saturating_sub(said);
    let mut head = keep / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - (keep - keep / 2);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    Some(format!(
        "{}\n… [cut: {} bytes] …\n{}",
        &s[..head],
        tail - head,
        &s[tail..]
    ))
}

impl Model {
    /// Folds one event in.
    pub fn fold(&mut self, e: &Value) {
        self.events += 1;
        let Some(agent) = text(e, "agent_id") else {
            return;
        };
        let ts = e["ts"].as_u64().unwrap_or(0);
        if let Some(seq) = e["seq"].as_u64() {
            let latest = self.latest.entry(agent.clone()).or_insert((0, 0));
            if latest.1 > 0 && seq <= latest.0 && ts <= latest.1 {
                return;
            }
            *latest = (seq.max(latest.0), ts.max(latest.1));
        }
        self.hear_from(&agent, ts);
        match e["type"].as_str().unwrap_or("") {
            "exec.started" => self.run_started(&agent, e, ts),
            "exec.finished" => self.run_finished(&agent, e, ts),
            "tool_call.started" => self.call_started(&agent, e, ts),
            "tool_call.finished" => self.call_finished(&agent, e, ts),
            "catalog.reloaded" => {
                let outcome = match e["ok"].as_bool() {
                    Some(false) => ReloadOutcome::Failed(bounded(
                        e["error"]["message"]
                            .as_str()
                            .unwrap_or("the reload failed"),
                    )),
                    _ => ReloadOutcome::Ok,
                };
                self.last_reload.insert(agent.clone(), outcome);
                if self.reloads.len() == MAX_RELOADS {
                    self.reloads.pop_front();
                }
                let mut r = e.clone();
                r.as_object_mut().map(|o| o.remove("seq"));
                self.reloads.push_back(r);
            }
            _ => {}
        }
    }

    fn hear_from(&mut self, agent: &str, ts: u64) {
        if !self.agents.contains_key(agent) && self.agents.len() >= MAX_AGENTS {
            let oldest = self
                .agents
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(a, _)| a.clone());
            if let Some(oldest) = oldest {
                self.agents.remove(&oldest);
                self.latest.remove(&oldest);
                self.last_reload.remove(&oldest);
            }
        }
        let last = self.agents.entry(agent.to_string()).or_insert(0);
        *last = (*last).max(ts);
    }

    fn run_index(&self, agent: &str, exec_id: &str) -> Option<usize> {
        // The newest runs are the ones events arrive for: look from the back.
        self.runs
            .iter()
            .rposition(|r| r.exec_id == exec_id && r.agent == agent)
    }

    /// The run an event belongs to, made when its start was not seen (history from the middle
    /// of a stream, or a start that was dropped), and whether it keeps details (it is among
    /// the latest [`DETAIL_RUNS`]).
    fn run_for(&mut self, agent: &str, e: &Value, ts: u64) -> Option<(&mut Run, bool)> {
        let exec_id = text(e, "exec_id")?;
        let index = match self.run_index(agent, &exec_id) {
            Some(i) => i,
            None => {
                if self.runs.len() == MAX_RUNS {
                    self.runs.pop_front();
                }
                self.runs.push_back(Run {
                    agent: agent.to_string(),
                    exec_id,
                    session_id: text(e, "session_id"),
                    trace_id: text(e, "trace_id"),
                    started_ms: ts,
                    status: None,
                    duration_ms: None,
                    error: None,
                    exit_code: None,
                    code_bytes: None,
                    stdout_bytes: None,
                    stderr_bytes: None,
                    code: None,
                    stdout: None,
                    stderr: None,
                    details_dropped: false,
                    body_bytes: 0,
                    calls: Vec::new(),
                    calls_dropped: 0,
                });
                let len = self.runs.len();
                if len > DETAIL_RUNS {
                    self.runs[len - 1 - DETAIL_RUNS].drop_details();
                }
                len - 1
            }
        };
        let details = self.runs.len() - index <= DETAIL_RUNS;
        Some((&mut self.runs[index], details))
    }

    fn run_started(&mut self, agent: &str, e: &Value, ts: u64) {
        if let Some((run, details)) = self.run_for(agent, e, ts) {
            run.started_ms = ts;
            run.code_bytes = e["code_bytes"].as_u64().or(run.code_bytes);
            if details {
                run.code = output(e, "code").or(run.code.take());
            }
        }
    }

    fn run_finished(&mut self, agent: &str, e: &Value, ts: u64) {
        let Some((run, details)) = self.run_for(agent, e, ts) else {
            return;
        };
        let duration = e["duration_ms"].as_f64();
        if let Some(d) = duration {
            // A run whose start was not seen starts where its duration says.
            run.started_ms = run.started_ms.min(ts.saturating_sub(d as u64));
        }
        run.status = text(e, "status");
        run.duration_ms = duration;
        run.error = e["error"]["message"].as_str().map(bounded);
        run.exit_code = e["exit_code"].as_i64();
        run.stdout_bytes = e["stdout_bytes"].as_u64();
        run.stderr_bytes = e["stderr_bytes"].as_u64();
        if details {
            run.stdout = output(e, "stdout");
            run.stderr = output(e, "stderr");
        }
    }

    fn call_started(&mut self, agent: &str, e: &Value, ts: u64) {
        let Some((run, details)) = self.run_for(agent, e, ts) else {
            return;
        };
        let Some(call_id) = text(e, "call_id") else {
            return;
        };
        if run.calls.iter().any(|c| c.call_id == call_id) {
            return;
        }
        if run.calls.len() >= MAX_CALLS_PER_RUN {
            run.calls_dropped += 1;
            return;
        }
        let args = match details {
            true => run.keep_body(&e["args"]),
            false => None,
        };
        run.calls.push(Call {
            call_id,
            tool: text(e, "tool").unwrap_or_default(),
            offset_ms: ts.saturating_sub(run.started_ms) as f64,
            duration_ms: None,
            ok: None,
            error: None,
            backend: text(e, "source"),
            args_bytes: e["args_bytes"].as_u64(),
            result_bytes: None,
            args,
            result: None,
        });
    }

    fn call_finished(&mut self, agent: &str, e: &Value, ts: u64) {
        let ok = e["ok"].as_bool();
        let duration = e["duration_ms"].as_f64();
        let tool = text(e, "tool").unwrap_or_default();
        self.count_call(agent, &tool, ok == Some(true), duration);
        let Some((run, details)) = self.run_for(agent, e, ts) else {
            return;
        };
        let Some(call_id) = text(e, "call_id") else {
            return;
        };
        let error = e["error"]["message"].as_str().map(bounded);
        let result = match details {
            true => run.keep_body(&e["result"]),
            false => None,
        };
        let index = match run.calls.iter().position(|c| c.call_id == call_id) {
            Some(i) => i,
            None if run.calls.len() < MAX_CALLS_PER_RUN => {
                // Refused before dispatch: no start; it began as it ended.
                let start = ts.saturating_sub(duration.unwrap_or(0.0) as u64);
                run.calls.push(Call {
                    call_id,
                    tool,
                    offset_ms: start.saturating_sub(run.started_ms) as f64,
                    duration_ms: None,
                    ok: None,
                    error: None,
                    backend: text(e, "source"),
                    args_bytes: e["args_bytes"].as_u64(),
                    result_bytes: None,
                    args: None,
                    result: None,
                });
                run.calls.len() - 1
            }
            None => {
                run.calls_dropped += 1;
                return;
            }
        };
        let call = &mut run.calls[index];
        call.duration_ms = duration.or(Some(0.0));
        call.ok = ok;
        call.error = error;
        call.result_bytes = e["result_bytes"].as_u64();
        call.result = result;
        // A runtime's calls (native PTC: `caller` set) have no exec.* events: their run is as
        // its calls went, `error` once one failed, and lasts until its last call ended.
        if e["caller"].is_string() {
            let failed = run.calls.iter().any(|c| c.ok == Some(false));
            run.status = Some(if failed { "error" } else { "ok" }.to_string());
            run.duration_ms = Some(ts.saturating_sub(run.started_ms) as f64);
        }
    }

    fn count_call(&mut self, agent: &str, tool: &str, ok: bool, duration: Option<f64>) {
        let mut key = (agent.to_string(), tool.to_string());
        if !self.tools.contains_key(&key) && self.tools.len() >= MAX_TOOLS {
            key.1 = "(other)".to_string();
        }
        let stats = self.tools.entry(key).or_default();
        stats.calls += 1;
        if !ok {
            stats.errors += 1;
        }
        if let Some(d) = duration {
            if stats.latencies.len() == LATENCY_SAMPLES {
                stats.latencies.pop_front();
            }
            stats.latencies.push_back(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// A run of agent `a1` with two calls in parallel, one failing, and one refused call.
    fn a_run(model: &mut Model) {
        let base = json!({"agent_id": "a1", "exec_id": "r1"});
        let with = |extra: Value| {
            let mut e = base.clone();
            for (k, v) in extra.as_object().unwrap() {
                e[k] = v.clone();
            }
            e
        };
        for e in [
            with(
                json!({"type": "exec.started", "ts": 1000, "trace_id": "t1", "code_bytes": 81, "code": "print(await get(id='a'))"}),
            ),
            with(
                json!({"type": "tool_call.started", "ts": 1010, "call_id": "r1-0", "tool": "get", "source": "host", "args_bytes": 14, "args": {"id": "a"}}),
            ),
            with(
                json!({"type": "tool_call.started", "ts": 1012, "call_id": "r1-1", "tool": "boom", "source": "mcp"}),
            ),
            with(
                json!({"type": "tool_call.finished", "ts": 1030, "call_id": "r1-1", "tool": "boom", "ok": false, "duration_ms": 18.0, "error": {"type": "tool", "message": "it broke"}}),
            ),
            with(
                json!({"type": "tool_call.finished", "ts": 1050, "call_id": "r1-0", "tool": "get", "ok": true, "duration_ms": 40.0, "result_bytes": 2, "result": "ok"}),
            ),
            with(
                json!({"type": "tool_call.finished", "ts": 1060, "call_id": "r1-2", "tool": "nope", "ok": false, "error": {"type": "unknown_tool", "message": "no tool nope"}}),
            ),
            with(
                json!({"type": "exec.finished", "ts": 1100, "status": "ok", "duration_ms": 100.0, "exit_code": 0, "stdout_bytes": 12, "stderr_bytes": 0, "stdout": "<b>ok</b>\n", "stderr": ""}),
            ),
        ] {
            model.fold(&e);
        }
    }

    #[test]
    fn a_runtimes_calls_make_a_run_that_is_not_left_running() {
        let mut m = Model::default();
        let call = |kind: &str, ts: u64, id: &str, ok: Option<bool>| {
            let mut e = json!({"type": kind, "agent_id": "a1", "exec_id": "n0", "ts": ts,
                               "call_id": id, "tool": "get", "source": "mcp",
                               "caller": "program", "caller_id": "call_prog_1"});
            if let Some(ok) = ok {
                e["ok"] = json!(ok);
                e["duration_ms"] = json!(5.0);
            }
            e
        };
        m.fold(&call("tool_call.started", 1000, "n0-0", None));
        m.fold(&call("tool_call.finished", 1005, "n0-0", Some(true)));
        let run = |m: &Model| m.view(2000, &Filter::default(), 10)["runs"][0].clone();
        assert_eq!(
            (run(&m)["status"].clone(), run(&m)["duration_ms"].clone()),
            (json!("ok"), json!(5.0))
        );
        m.fold(&call("tool_call.started", 1010, "n0-1", None));
        m.fold(&call("tool_call.finished", 1030, "n0-1", Some(false)));
        assert_eq!(
            (run(&m)["status"].clone(), run(&m)["duration_ms"].clone()),
            (json!("error"), json!(30.0))
        );
        let agents = m.view(2000, &Filter::default(), 10)["agents"]["a1"].clone();
        assert_eq!(
            (agents["running"].clone(), agents["recent_failed"].clone()),
            (json!(0), json!(1))
        );
    }

    #[test]
    fn a_run_becomes_a_waterfall_with_overlapping_calls_and_its_errors() {
        let mut m = Model::default();
        a_run(&mut m);
        let view = m.view(2000, &Filter::default(), 10);
        assert_eq!(
            view["runs"],
            json!([{
                "agent": "a1", "exec_id": "r1", "session_id": null, "trace_id": "t1",
                "started_ms": 1000, "status": "ok", "duration_ms": 100.0, "error": null,
                "exit_code": 0, "code_bytes": 81, "stdout_bytes": 12, "stderr_bytes": 0,
                "calls_dropped": 0,
                "calls": [
                    {"call_id": "r1-0", "tool": "get", "offset_ms": 10.0, "duration_ms": 40.0, "ok": true, "error": null, "backend": "host", "args_bytes": 14, "result_bytes": 2},
                    {"call_id": "r1-1", "tool": "boom", "offset_ms": 12.0, "duration_ms": 18.0, "ok": false, "error": "it broke", "backend": "mcp", "args_bytes": null, "result_bytes": null},
                    {"call_id": "r1-2", "tool": "nope", "offset_ms": 60.0, "duration_ms": 0.0, "ok": false, "error": "no tool nope", "backend": null, "args_bytes": null, "result_bytes": null},
                ]
            }])
        );
        assert_eq!(
            view["agents"],
            json!({"a1": {"health": "ok", "last_event_ms_ago": 900, "running": 0, "recent_runs": 1, "recent_failed": 0, "reload_error": null}})
        );
        let tools: Vec<(&str, u64, u64)> = view["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["tool"].as_str().unwrap(),
                    t["calls"].as_u64().unwrap(),
                    t["errors"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(tools, [("boom", 1, 1), ("get", 1, 0), ("nope", 1, 1)]);
    }

    #[test]
    fn a_runs_page_has_its_code_output_and_each_calls_bodies_as_text() {
        let mut m = Model::default();
        a_run(&mut m);
        let run = m.run("a1", "r1").unwrap();
        assert_eq!(
            (
                &run["code"],
                &run["stdout"],
                &run["stderr"],
                &run["details_dropped"]
            ),
            (
                &json!("print(await get(id='a'))"),
                &json!("<b>ok</b>\n"),
                &json!(""),
                &json!(false)
            )
        );
        let bodies: Vec<(&Value, &Value)> = run["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (&c["args"], &c["result"]))
            .collect();
        assert_eq!(
            bodies,
            [
                (&json!("{\"id\":\"a\"}"), &json!("ok")),
                (&Value::Null, &Value::Null),
                (&Value::Null, &Value::Null)
            ]
        );
        assert_eq!(m.run("a1", "r2"), None);
        assert_eq!(m.run("a2", "r1"), None);
        // The view of many runs does not carry them.
        let view = m.view(2000, &Filter::default(), 10);
        assert!(
            view["runs"][0].get("code").is_none()
                && view["runs"][0]["calls"][0].get("args").is_none()
        );
    }

    #[test]
    fn only_the_latest_runs_keep_their_details_and_each_within_its_bytes() {
        let mut m = Model::default();
        let long = "x".repeat(10_000);
        for i in 0..(DETAIL_RUNS + 5) {
            let exec_id = format!("r{i}");
            let e = |kind: &str, extra: Value| {
                let mut e = json!({"type": kind, "agent_id": "a", "exec_id": exec_id, "ts": i});
                for (k, v) in extra.as_object().unwrap() {
                    e[k] = v.clone();
                }
                e
            };
            m.fold(&e("exec.started", json!({"code": format!("{long}END")})));
            // 40 calls of two bodies of 1 KiB each: more than a run keeps.
            for c in 0..40 {
                let call = json!({"call_id": format!("{exec_id}-{c}"), "tool": "t"});
                let mut started = e("tool_call.started", json!({"args": {"q": long}}));
                let mut finished = e("tool_call.finished", json!({"ok": true, "result": long}));
                for e in [&mut started, &mut finished] {
                    for (k, v) in call.as_object().unwrap() {
                        e[k] = v.clone();
                    }
                }
                m.fold(&started);
                m.fold(&finished);
            }
            m.fold(&e(
                "exec.finished",
                json!({"status": "ok", "stdout": long, "stderr": "é".repeat(5_000)}),
            ));
        }
        let oldest = m.run("a", "r4").unwrap();
        assert_eq!(
            (&oldest["code"], &oldest["details_dropped"]),
            (&Value::Null, &json!(true))
        );
        assert!(
            oldest["calls"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["args"].is_null())
        );
        let kept = m.run("a", "r5").unwrap();
        assert_eq!(kept["details_dropped"], false);
        let code = kept["code"].as_str().unwrap();
        assert!(
            code.len() <= OUTPUT_EXCERPT && code.ends_with("xEND"),
            "{}",
            code.len()
        );
        let stderr = kept["stderr"].as_str().unwrap();
        assert!(
            stderr.len() <= OUTPUT_EXCERPT && stderr.ends_with('é'),
            "{}",
            stderr.len()
        );
        let calls = kept["calls"].as_array().unwrap();
        let bodies: usize = calls
            .iter()
            .flat_map(|c| [&c["args"], &c["result"]])
            .filter_map(Value::as_str)
            .map(str::len)
            .sum();
        assert!(bodies <= RUN_BODY_BYTES, "{bodies}");
        assert!(
            calls[0]["args"]
                .as_str()
                .unwrap()
                .starts_with("{\"q\":\"xxx")
        );
        assert!(
            calls[39]["result"].is_null(),
            "past the run's bytes, sizes only"
        );
        // All runs' details together stay within what the constants promise.
        let all: usize = (0..DETAIL_RUNS + 5)
            .filter_map(|i| m.run("a", &format!("r{i}")))
            .map(|r| r.to_string().len())
            .sum();
        assert!(
            all < DETAIL_RUNS * (3 * OUTPUT_EXCERPT + RUN_BODY_BYTES + 40_000),
            "{all}"
        );
    }

    #[test]
    fn filters_pick_runs_by_agent_tool_and_status() {
        let mut m = Model::default();
        a_run(&mut m);
        m.fold(&json!({"type": "exec.started", "agent_id": "a2", "exec_id": "r1", "ts": 5000}));
        let ids = |f: Filter| -> Vec<String> {
            m.view(6000, &f, 10)["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    format!(
                        "{}/{}",
                        r["agent"].as_str().unwrap(),
                        r["status"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(ids(Filter::default()), ["a2/running", "a1/ok"]);
        assert_eq!(
            ids(Filter {
                agent: Some("a1".into()),
                ..Filter::default()
            }),
            ["a1/ok"]
        );
        assert_eq!(
            ids(Filter {
                status: Some("running".into()),
                ..Filter::default()
            }),
            ["a2/running"]
        );
        assert_eq!(
            ids(Filter {
                tool: Some("boom".into()),
                ..Filter::default()
            }),
            ["a1/ok"]
        );
    }

    #[test]
    fn the_tools_table_follows_the_agent_filter_and_sums_the_agents_otherwise() {
        let mut m = Model::default();
        a_run(&mut m);
        for (agent, ok, ms) in [("a2", true, 10.0), ("a2", false, 30.0)] {
            m.fold(&json!({"type": "tool_call.finished", "agent_id": agent, "exec_id": "r9", "call_id": "x", "ts": 3000, "tool": "get", "ok": ok, "duration_ms": ms}));
        }
        let get = |agent: Option<&str>| -> Value {
            let f = Filter {
                agent: agent.map(str::to_string),
                tool: Some("get".into()),
                ..Filter::default()
            };
            m.view(4000, &f, 10)["tools"].clone()
        };
        assert_eq!(
            get(None),
            json!([{"tool": "get", "calls": 3, "errors": 1, "error_rate": 1.0 / 3.0, "p50_ms": 30.0, "p95_ms": 40.0}])
        );
        assert_eq!(
            get(Some("a1")),
            json!([{"tool": "get", "calls": 1, "errors": 0, "error_rate": 0.0, "p50_ms": 40.0, "p95_ms": 40.0}])
        );
        assert_eq!(get(Some("a3")), json!([]));
    }

    #[test]
    fn an_agent_is_degraded_by_failing_runs_or_a_failed_reload_and_idle_when_quiet() {
        let mut m = Model::default();
        let run = |m: &mut Model, agent: &str, id: &str, status: Option<&str>, ts: u64| {
            m.fold(&json!({"type": "exec.started", "agent_id": agent, "exec_id": id, "ts": ts}));
            if let Some(status) = status {
                m.fold(&json!({"type": "exec.finished", "agent_id": agent, "exec_id": id, "ts": ts + 1, "status": status}));
            }
        };
        run(&mut m, "good", "r1", Some("ok"), 1000);
        run(&mut m, "good", "r2", Some("error"), 1100);
        run(&mut m, "good", "r3", Some("ok"), 1200);
        run(&mut m, "good", "r4", None, 1300);
        run(&mut m, "bad", "r1", Some("timeout"), 1000);
        run(&mut m, "bad", "r2", Some("ok"), 1100);
        m.fold(&json!({"type": "catalog.reloaded", "agent_id": "reload", "ts": 1000, "ok": false, "error": {"type": "reload", "message": "tools.json: not JSON"}}));
        let health = |m: &Model, now: u64| -> Vec<(String, String)> {
            m.view(now, &Filter::default(), 10)["agents"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(a, h)| (a.clone(), h["health"].as_str().unwrap().to_string()))
                .collect()
        };
        let at = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, h)| (a.to_string(), h.to_string()))
                .collect()
        };
        assert_eq!(
            health(&m, 2000),
            at(&[("bad", "degraded"), ("good", "ok"), ("reload", "degraded")])
        );
        let good = &m.view(2000, &Filter::default(), 10)["agents"]["good"];
        assert_eq!(
            (
                good["running"].as_u64(),
                good["recent_runs"].as_u64(),
                good["recent_failed"].as_u64()
            ),
            (Some(1), Some(3), Some(1))
        );
        assert_eq!(
            m.view(2000, &Filter::default(), 10)["agents"]["reload"]["reload_error"],
            "tools.json: not JSON"
        );
        // A minute of silence: idle, unless something is wrong.
        assert_eq!(
            health(&m, 1301 + IDLE_AFTER_MS),
            at(&[
                ("bad", "degraded"),
                ("good", "idle"),
                ("reload", "degraded")
            ])
        );
        // A reload that works again clears it.
        m.fold(&json!({"type": "catalog.reloaded", "agent_id": "reload", "ts": 3000, "ok": true}));
        assert_eq!(
            health(&m, 3000)[2],
            ("reload".to_string(), "ok".to_string())
        );
    }

    #[test]
    fn memory_stays_bounded_however_many_events_pass() {
        let mut m = Model::default();
        for i in 0..(MAX_RUNS as u64 * 3) {
            let exec_id = format!("r{i}");
            m.fold(&json!({"type": "exec.started", "agent_id": "a", "exec_id": exec_id, "ts": i}));
            for c in 0..(MAX_CALLS_PER_RUN + 5) {
                m.fold(&json!({"type": "tool_call.finished", "agent_id": "a", "exec_id": exec_id,
                    "call_id": format!("{exec_id}-{c}"), "tool": format!("t{}", c % 3), "ok": true, "duration_ms": c as f64, "ts": i}));
            }
        }
        assert_eq!(m.runs.len(), MAX_RUNS);
        assert!(
            m.runs
                .iter()
                .all(|r| r.calls.len() == MAX_CALLS_PER_RUN && r.calls_dropped == 5)
        );
        assert!(
            m.tools
                .values()
                .all(|t| t.latencies.len() == LATENCY_SAMPLES)
        );
        // The newest run is kept, the oldest gone.
        let newest = m.view(0, &Filter::default(), 1);
        assert_eq!(
            newest["runs"][0]["exec_id"],
            format!("r{}", MAX_RUNS * 3 - 1)
        );
    }

    #[test]
    fn an_event_seen_twice_counts_once_but_a_restarted_agent_counts_again() {
        let mut m = Model::default();
        let e = |seq: u64, ts: u64| {
            json!({"type": "tool_call.finished", "agent_id": "a", "exec_id": "r1", "call_id": format!("r1-{seq}"),
                   "tool": "t", "ok": true, "duration_ms": 1.0, "seq": seq, "ts": ts})
        };
        for event in [e(1, 10), e(2, 11), e(2, 11), e(1, 10), e(1, 50)] {
            m.fold(&event);
        }
        assert_eq!(m.tools[&("a".to_string(), "t".to_string())].calls, 3);
    }

    #[test]
    fn strings_of_megabytes_are_kept_cut() {
        let mut m = Model::default();
        let huge = "é".repeat(1 << 20);
        for (i, e) in [
            json!({"type": "exec.started", "ts": 1, "exec_id": "r1"}),
            json!({"type": "tool_call.finished", "ts": 2, "exec_id": "r1", "call_id": "r1-0",
                   "tool": huge, "ok": false, "error": {"type": "input", "message": huge}}),
            json!({"type": "exec.finished", "ts": 3, "exec_id": "r1", "status": "error",
                   "error": {"type": "x", "message": huge}}),
        ]
        .into_iter()
        .enumerate()
        {
            let mut e = e;
            e["agent_id"] = json!("a1");
            e["seq"] = json!(i);
            m.fold(&e);
        }
        let view = m.view(10, &Filter::default(), 10).to_string();
        assert!(view.len() < 16 << 10, "{} bytes", view.len());
        assert!(view.contains(&format!(
            "… [cut: {} more bytes]",
            (2 << 20) - MAX_TEXT_BYTES
        )));
    }
}
