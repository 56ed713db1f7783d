//! Limits per tool (`PTC_TOOL_LIMITS`): calls in flight at once and calls started per second,
//! both across every run of the sidecar, and calls per run.
//!
//! A call over `max_concurrent` or `per_second` waits its turn within its own deadline
//! ([`Limiter::admit`]); one that would wait past it fails as `rate_limited` at once, without
//! sleeping until then. `max_per_run` is counted by the run ([`RunCounts`]). The rules may be
//! replaced while calls run ([`Limiter::set_rules`], hot reload): calls already admitted keep
//! what admitted them, later ones follow the new rules.
//!
//! Owns the counters; the rules are config's (`config::control`), matched with the catalog's
//! globs. It must not know how a call is made.

use crate::catalog::glob_match;
use crate::config::{LimitRules, ToolLimit};
use crate::util::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Most tools whose counters are kept; past it they start over (a catalog is far smaller).
const MAX_TRACKED_TOOLS: usize = 65_536;

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
    /// When the next call may start (`per_second`): each start moves it by one interval.
    next_start: Mutex<Instant>,
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
                next_start: Mutex::new(Instant::now()),
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
    /// Waits for the call's turn: a place among the tool's calls in flight, then its start
    /// time. Fails as `rate_limited` when the turn would come after `deadline`.
    pub async fn admit(&self, tool: &str, deadline: Instant) -> Result<Admitted, Refused> {
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
        if let Some(rate) = self.limit.per_second {
            let interval = Duration::from_secs_f64(1.0 / rate);
            let start = {
                let mut next = lock(&self.next_start);
                let start = (*next).max(Instant::now());
                if start > deadline {
                    return Err(Refused::RateLimited(format!(
                        "{tool} may start {rate} calls per second (PTC_TOOL_LIMITS per_second), \
                         and this one's turn comes {:.1} s after its deadline; spread the calls \
                         out or make fewer",
                        (start - deadline).as_secs_f64()
                    )));
                }
                *next = start + interval;
                start
            };
            // A timer rounds its deadline up to the next millisecond: one for a start that is
            // due now would cost a call that waits for nothing up to a millisecond.
            if start > Instant::now() {
                tokio::time::sleep_until(start).await;
            }
        }
        Ok(Admitted {
            _in_flight: in_flight,
            waited: began.elapsed(),
        })
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
            let admitted = c.admit("tool", far).await.unwrap();
            assert_eq!(t0.elapsed(), Duration::from_millis(250) * i, "start {i}");
            drop(admitted);
        }
        // The next turn is 250 ms away: a deadline of 100 ms is refused without waiting.
        let err = c
            .admit("tool", Instant::now() + Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(err, Refused::RateLimited(_)), "{err}");
        assert!(l.counters("other").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn max_concurrent_waits_within_the_deadline() {
        let l = limiter(r#"{"tool": {"max_concurrent": 1}}"#);
        let c = l.counters("tool").unwrap();
        let held = c.admit("tool", Instant::now()).await.unwrap();
        let late = c
            .admit("tool", Instant::now() + Duration::from_secs(1))
            .await;
        assert!(matches!(late.unwrap_err(), Refused::RateLimited(_)));
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move {
                c.admit("tool", Instant::now() + Duration::from_secs(10))
                    .await
                    .map(|a| a.waited)
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap(), Duration::from_secs(3));
    }

    #[test]
    fn max_per_run_counts_each_tool() {
        let counts = RunCounts::default();
        assert!(counts.count("a", 2).is_ok() && counts.count("a", 2).is_ok());
        assert!(matches!(counts.count("a", 2), Err(Refused::PerRun(_))));
        assert!(counts.count("b", 2).is_ok());
    }
}
