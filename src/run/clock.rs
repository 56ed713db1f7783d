//! A run's clock: its time limit, which stands still while a call of the run waits for a person,
//! for as long as the run's share of waiting lasts.
//!
//! A person may take minutes to answer an approval; the run's own `PTC_TIMEOUT` is for the code
//! and its tools, so while any of its calls waits for a person ([`RunClock::pause`]) the
//! deadline moves by as long, but by no more than the run's pause budget in all
//! (`PTC_APPROVAL_TIMEOUT`): a run that keeps a call waiting for good ends at `PTC_TIMEOUT` +
//! `PTC_APPROVAL_TIMEOUT` whatever it does. Once the budget is spent the clock no longer
//! stands still ([`RunClock::pause_left`] says so before a call asks). Plain timekeeping: it
//! knows nothing of approvals or processes.

use crate::util::lock;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The deadline of one run, paused while any pause guard lives and pause budget remains.
pub struct RunClock {
    deadline: Instant,
    /// How long the clock may stand still in all.
    budget: Duration,
    state: Mutex<Paused>,
    changed: Notify,
}

#[derive(Default)]
struct Paused {
    /// Pause guards alive.
    holders: usize,
    /// When the current pause began (holders went from 0 to 1).
    since: Option<Instant>,
    /// Time spent paused in earlier pauses.
    total: Duration,
}

impl RunClock {
    /// A clock that runs out at `deadline`, later by the time it stood still, up to `budget`.
    pub fn new(deadline: Instant, budget: Duration) -> RunClock {
        RunClock {
            deadline,
            budget,
            state: Mutex::new(Paused::default()),
            changed: Notify::new(),
        }
    }

    /// Stops the clock until the guard is dropped (guards nest: it runs again when the last
    /// one goes).
    pub fn pause(&self) -> Pause<'_> {
        let mut state = lock(&self.state);
        if state.holders == 0 {
            state.since = Some(Instant::now());
        }
        state.holders += 1;
        Pause { clock: self }
    }

    /// How long the run's clock stood still so far (within its budget).
    pub fn paused(&self) -> Duration {
        let state = lock(&self.state);
        let paused = state.total + state.since.map_or(Duration::ZERO, |s| s.elapsed());
        paused.min(self.budget)
    }

    /// How much longer the clock may stand still: what a call may wait for a person at most.
    pub fn pause_left(&self) -> Duration {
        self.budget.saturating_sub(self.paused())
    }

    /// The run's time left if its clock runs from now on (what a wait inside the run may
    /// take at most).
    pub fn left(&self) -> Duration {
        self.current().saturating_duration_since(Instant::now())
    }

    /// The pause budget: what the clock may stand still in all.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// When the time is up if nothing changes. Paused, that is when the budget is spent and
    /// the rest of the run's own time gone too: the deadline plus the whole budget.
    fn current(&self) -> Instant {
        let state = lock(&self.state);
        match state.holders {
            0 => self.deadline + state.total.min(self.budget),
            _ => self.deadline + self.budget,
        }
    }

    /// Resolves when the run's time is up: the deadline plus every pause.
    pub async fn expired(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before reading the state, so a pause or resume in between wakes it.
            changed.as_mut().enable();
            let at = self.current();
            if at <= Instant::now() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = changed => {}
            }
        }
    }
}

/// The clock stands still while this lives (within the budget).
pub struct Pause<'a> {
    clock: &'a RunClock,
}

impl Drop for Pause<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.clock.state);
        state.holders -= 1;
        if state.holders == 0
            && let Some(since) = state.since.take()
        {
            state.total += since.elapsed();
        }
        drop(state);
        self.clock.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_deadline_moves_by_every_pause() {
        let start = Instant::now();
        let clock = RunClock::new(start + Duration::from_secs(10), Duration::from_secs(60));
        let expired = clock.expired();
        tokio::pin!(expired);
        // 4 s in, two overlapping pauses of 6 s together.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let first = clock.pause();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = clock.pause();
        drop(first);
        tokio::select! {
            _ = &mut expired => panic!("expired while paused"),
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
        drop(second);
        assert_eq!(clock.paused(), Duration::from_secs(32));
        expired.await;
        // 10 s of its own time, plus 32 paused.
        assert_eq!(start.elapsed(), Duration::from_secs(42));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_that_never_ends_moves_the_deadline_by_the_budget_only() {
        let start = Instant::now();
        let clock = RunClock::new(start + Duration::from_secs(5), Duration::from_secs(20));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _forever = clock.pause();
        clock.expired().await;
        // 5 s of its own time and 20 of waiting: never later, however long the pause.
        assert_eq!(start.elapsed(), Duration::from_secs(25));
        assert_eq!(clock.pause_left(), Duration::ZERO);
        assert_eq!(clock.paused(), Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn pauses_past_the_budget_count_as_the_runs_own_time() {
        let start = Instant::now();
        let clock = RunClock::new(start + Duration::from_secs(10), Duration::from_secs(4));
        // Two pauses of 3 s: the first stops the clock, the second only its first second.
        for _ in 0..2 {
            let pause = clock.pause();
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(pause);
        }
        assert_eq!(clock.pause_left(), Duration::ZERO);
        clock.expired().await;
        assert_eq!(start.elapsed(), Duration::from_secs(14));
    }
}
