//! Limits per tool (`PTC_TOOL_LIMITS`): calls in flight at once and calls started per second,
//! both across every run of the sidecar, and calls per run.
//!
//! A call over `max_concurrent` or `per_second` waits its turn within its own deadline
//! ([`Counters::admit`]); one that would wait past it fails as `rate_limited` at once, without
//! sleeping until then. A `per_second` turn is a token taken when the call starts (a bucket of
//! one, refilled at the rate): a waiting call books nothing, so one dropped (its run ended)
//! leaves no gap behind. Waiting calls take their turns fairly between runs, one run's after
//! another's in rounds ([`Rate`]), and a run keeps at most [`RATE_WAITING_PER_RUN`] calls of a
//! tool waiting: no run can take more than its share of a tool's rate. `max_per_run` is counted by the run ([`RunCounts`]). The rules may be
//! replaced while calls run ([`Limiter::set_rules`], hot reload): calls already admitted keep
//! what admitted them, later ones follow the new rules.
//!
//! Owns the counters; the rules are config's (`config::control`), matched with the catalog's
//! globs. It must not know how a call is made.

use super::budget::{self, Resource};
use crate::catalog::glob_match;
use crate::config::{LimitRules, ToolLimit};
use crate::util::lock;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Most tools whose counters are kept; past it they start over (a catalog is far smaller).
const MAX_TRACKED_TOOLS: usize = 65_536;

/// Calls of one run waiting for a `per_second` turn of one tool at once; one more is refused
/// at once (a run's share of the tool's rate: its calls wait in rounds with other runs').
pub const RATE_WAITING_PER_RUN: usize = 64;

/// The limits of every tool, and their counters across runs.
#[derive(Default)]
pub struct Limiter {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    rules: Arc<LimitRules>,
    /// The counters of each tool called since the rules were set; `None`: no rule matches it.
    tools: HashMap<String, Option<Arc<Counters>>>,
}

/// One tool's limit and the counters it drives.
pub struct Counters {
    pub limit: ToolLimit,
    in_flight: Option<Arc<Semaphore>>,
    /// The `per_second` turns.
    rate: Option<Rate>,
}

/// A tool's `per_second` turns: a token every `interval`, taken by the first waiting call in
/// fair order. Each waiting call has a round: one more than its run's last, and never below
/// the round served last, so a run that queues many calls waits behind one call of each other
/// run per round (start-time fair queueing, with a run as the flow).
struct Rate {
    interval: Duration,
    state: Mutex<Turns>,
    /// Told whenever the first waiting call or the next token changes.
    changed: Notify,
}

#[derive(Default)]
struct Turns {
    /// When the next token is there; `None`: now.
    next_token: Option<Instant>,
    /// The round of the last call that started.
    served: u64,
    /// Each waiting run's last round and its count of waiting calls.
    runs: HashMap<String, (u64, usize)>,
    /// The waiting calls, in the order they take turns: (round, arrival).
    waiting: BTreeMap<(u64, u64), ()>,
    arrivals: u64,
}

/// Why a call was refused: no turn within its deadline, or past the run's `max_per_run`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    RateLimited(String),
    #[error("{0}")]
    PerRun(String),
}

/// A call let through: it holds its place among the tool's calls in flight while this lives.
#[derive(Debug)]
pub struct Admitted {
    _in_flight: Option<OwnedSemaphorePermit>,
    /// How long the call waited for its turn.
    pub waited: Duration,
}

impl Limiter {
    pub fn new(rules: LimitRules) -> Limiter {
        let limiter = Limiter::default();
        limiter.set_rules(rules);
        limiter
    }

    /// Replaces the rules: every tool's counters start over with them.
    pub fn set_rules(&self, rules: LimitRules) {
        let mut state = lock(&self.state);
        state.rules = Arc::new(rules);
        state.tools.clear();
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<LimitRules> {
        lock(&self.state).rules.clone()
    }

    /// Whether any rule is set.
    pub fn is_empty(&self) -> bool {
        lock(&self.state).rules.rules.is_empty()
    }

    /// The limit of a tool (every rule that matches, each field the strictest).
    pub fn limit_of(&self, tool: &str) -> ToolLimit {
        self.counters(tool)
            .map_or_else(ToolLimit::default, |c| c.limit)
    }

    /// The counters of a tool; `None` when no rule limits it.
    pub fn counters(&self, tool: &str) -> Option<Arc<Counters>> {
        let mut state = lock(&self.state);
        if let Some(found) = state.tools.get(tool) {
            return found.clone();
        }
        let limit = state.rules.limit_for(tool, glob_match);
        let counters = (!limit.is_none()).then(|| {
            Arc::new(Counters {
                limit,
                in_flight: limit
                    .max_concurrent
                    .map(|n| Arc::new(Semaphore::new(n as usize))),
                rate: limit.per_second.map(|rate| Rate {
                    interval: Duration::from_secs_f64(1.0 / rate),
                    state: Mutex::default(),
                    changed: Notify::new(),
                }),
            })
        });
        if state.tools.len() >= MAX_TRACKED_TOOLS {
            state.tools.clear();
        }
        state.tools.insert(tool.to_string(), counters.clone());
        counters
    }
}

impl Counters {
    /// Waits for the call's turn, for the run `run`: a place among the tool's calls in flight,
    /// then its start time. Fails as `rate_limited` when the turn would come after `deadline`.
    pub async fn admit(
        &self,
        tool: &str,
        run: &str,
        deadline: Instant,
    ) -> Result<Admitted, Refused> {
        let began = Instant::now();
        let in_flight = match &self.in_flight {
            None => None,
            Some(sem) => match tokio::time::timeout_at(deadline, sem.clone().acquire_owned()).await
            {
                Ok(Ok(permit)) => Some(permit),
                Ok(Err(_)) | Err(_) => {
                    return Err(Refused::RateLimited(format!(
                        "{tool}: {} calls were already in flight (PTC_TOOL_LIMITS max_concurrent) \
                         and none finished within the call's {:.1} s; make fewer calls at once",
                        self.limit.max_concurrent.unwrap_or_default(),
                        (deadline - began).as_secs_f64()
                    )));
                }
            },
        };
        if let (Some(rate), Some(per_second)) = (&self.rate, self.limit.per_second) {
            rate.turn(run, deadline).await.map_err(|late| {
                Refused::RateLimited(match late {
                    Late::Share => {
                        budget::refused(Resource::Rate);
                        format!(
                            "{tool} may start {per_second} calls per second (PTC_TOOL_LIMITS \
                             per_second), and {RATE_WAITING_PER_RUN} calls of this run already \
                             wait for a turn, its share; make fewer calls at once"
                        )
                    }
                    Late::By(after) => format!(
                        "{tool} may start {per_second} calls per second (PTC_TOOL_LIMITS \
                         per_second), and this one's turn comes {:.1} s after its deadline; \
                         spread the calls out or make fewer",
                        after.as_secs_f64()
                    ),
                })
            })?;
        }
        Ok(Admitted {
            _in_flight: in_flight,
            waited: began.elapsed(),
        })
    }
}

/// Why a call gets no `per_second` turn.
enum Late {
    /// Its run has its share of calls waiting already.
    Share,
    /// Its turn would come this long after its deadline.
    By(Duration),
}

impl Rate {
    /// Waits for a token in fair order; takes it when the call starts.
    async fn turn(&self, run: &str, deadline: Instant) -> Result<(), Late> {
        let key = {
            let mut turns = lock(&self.state);
            let served = turns.served;
            let (last, count) = turns.runs.entry(run.to_string()).or_insert((served, 0));
            if *count >= RATE_WAITING_PER_RUN {
                return Err(Late::Share);
            }
            *last = (*last).max(served) + 1;
            *count += 1;
            let round = *last;
            turns.arrivals += 1;
            let key = (round, turns.arrivals);
            turns.waiting.insert(key, ());
            key
        };
        // Leaves the queue however the wait ends: started, refused, or dropped with its run.
        let _leave = Leave {
            rate: self,
            run,
            key,
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let now = Instant::now();
            let due = {
                let mut turns = lock(&self.state);
                let ahead = turns.waiting.range(..key).count() as u32;
                let token = turns.next_token.map_or(now, |t| t.max(now));
                let due = token + self.interval * ahead;
                if due > deadline {
                    return Err(Late::By(due - deadline));
                }
                if ahead == 0 && token <= now {
                    turns.next_token = Some(now + self.interval);
                    turns.served = turns.served.max(key.0);
                    drop(turns);
                    return Ok(());
                }
                due
            };
            // A timer rounds its deadline up to the next millisecond; a turn due later waits
            // for it or for a change ahead (a call that left).
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {}
                _ = changed => {}
            }
        }
    }
}

/// Takes a waiting call out of its tool's queue, and tells the others.
struct Leave<'a> {
    rate: &'a Rate,
    run: &'a str,
    key: (u64, u64),
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut turns = lock(&self.rate.state);
        turns.waiting.remove(&self.key);
        if let Some((_, count)) = turns.runs.get_mut(self.run) {
            *count -= 1;
            if *count == 0 {
                turns.runs.remove(self.run);
            }
        }
        drop(turns);
        self.rate.changed.notify_waiters();
    }
}

/// One run's calls per tool, for `max_per_run`.
#[derive(Default)]
pub struct RunCounts {
    calls: Mutex<HashMap<String, u32>>,
}

impl RunCounts {
    /// Counts a call of `tool`; fails when it is past the run's `max`.
    pub fn count(&self, tool: &str, max: u32) -> Result<(), Refused> {
        let mut calls = lock(&self.calls);
        let n = calls.entry(tool.to_string()).or_default();
        if *n >= max {
            return Err(Refused::PerRun(format!(
                "{tool} may be called {max} times per run (PTC_TOOL_LIMITS max_per_run) and this \
                 run already did; do the rest in a later run or with fewer calls"
            )));
        }
        *n += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(json: &str) -> Limiter {
        Limiter::new(LimitRules::parse(json).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn per_second_spaces_the_starts_and_refuses_past_the_deadline() {
        let l = limiter(r#"{"t*": {"per_second": 4}}"#);
        let c = l.counters("tool").unwrap();
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(60);
        for i in 0..5u32 {
            let admitted = c.admit("tool", "r", far).await.unwrap();
            assert_eq!(t0.elapsed(), Duration::from_millis(250) * i, "start {i}");
            drop(admitted);
        }
        // The next turn is 250 ms away: a deadline of 100 ms is refused without waiting.
        let err = c
            .admit("tool", "r", Instant::now() + Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(err, Refused::RateLimited(_)), "{err}");
        assert!(l.counters("other").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn max_concurrent_waits_within_the_deadline() {
        let l = limiter(r#"{"tool": {"max_concurrent": 1}}"#);
        let c = l.counters("tool").unwrap();
        let held = c.admit("tool", "r", Instant::now()).await.unwrap();
        let late = c
            .admit("tool", "r", Instant::now() + Duration::from_secs(1))
            .await;
        assert!(matches!(late.unwrap_err(), Refused::RateLimited(_)));
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move {
                c.admit("tool", "r", Instant::now() + Duration::from_secs(10))
                    .await
                    .map(|a| a.waited)
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_waiting_call_leaves_no_gap_and_runs_take_turns() {
        let l = limiter(r#"{"tool": {"per_second": 1}}"#);
        let c = l.counters("tool").unwrap();
        let far = Instant::now() + Duration::from_secs(600);
        // Run a books 60 calls: the first starts, 59 wait.
        let greedy: Vec<_> = (0..60)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.admit("tool", "a", far).await.map(|_| ()) })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Run b's one call waits behind one more of a's (a's second round), not 58.
        let t0 = Instant::now();
        let fair = {
            let c = c.clone();
            tokio::spawn(async move { c.admit("tool", "b", far).await.map(|a| a.waited) })
        };
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            fair.is_finished(),
            "b's call still waits after {:?}",
            t0.elapsed()
        );
        assert!(fair.await.unwrap().unwrap() <= Duration::from_secs(2));
        // Run a ends: its waiting calls go, and the next call starts at the next token.
        for g in &greedy {
            g.abort();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t1 = Instant::now();
        c.admit("tool", "c", far).await.unwrap();
        assert!(t1.elapsed() <= Duration::from_secs(1), "{:?}", t1.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_past_its_share_of_waiting_calls_is_refused_at_once() {
        let l = limiter(r#"{"tool": {"per_second": 1}}"#);
        let c = l.counters("tool").unwrap();
        let far = Instant::now() + Duration::from_secs(600);
        let held: Vec<_> = (0..=RATE_WAITING_PER_RUN)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.admit("tool", "a", far).await.map(|_| ()) })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let refused = c.admit("tool", "a", far).await.unwrap_err();
        assert!(refused.to_string().contains("its share"), "{refused}");
        // Another run is not refused for a's share.
        let other = c.clone();
        let b = tokio::spawn(async move { other.admit("tool", "b", far).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(b.is_finished());
        for h in held {
            h.abort();
        }
    }

    #[test]
    fn max_per_run_counts_each_tool() {
        let counts = RunCounts::default();
        assert!(counts.count("a", 2).is_ok() && counts.count("a", 2).is_ok());
        assert!(matches!(counts.count("a", 2), Err(Refused::PerRun(_))));
        assert!(counts.count("b", 2).is_ok());
    }
}
