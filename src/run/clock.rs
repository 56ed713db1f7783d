//! A run's clock: its time limit, which stands still while a call of the run waits for a person.
//!
//! A person may take minutes to answer an approval (`PTC_APPROVAL_TIMEOUT` bounds that wait);
//! the run's own `PTC_TIMEOUT` is for the code and its tools, so while any of its calls waits
//! for a person ([`RunClock::pause`]) the deadline moves by as long. Plain timekeeping: it knows
//! nothing of approvals or processes.

use crate::util::lock;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The deadline of one run, paused while any pause guard lives.
pub struct RunClock {
    deadline: Instant,
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
    pub fn new(deadline: Instant) -> RunClock {
        RunClock {
            deadline,
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

    /// How long the run's clock stood still so far.
    pub fn paused(&self) -> Duration {
        let state = lock(&self.state);
        state.total + state.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// The deadline as it stands now: `None` while paused.
    fn current(&self) -> Option<Instant> {
        let state = lock(&self.state);
        (state.holders == 0).then(|| self.deadline + state.total)
    }

    /// Resolves when the run's time is up: the deadline plus every pause.
    pub async fn expired(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before reading the state, so a pause or resume in between wakes it.
            changed.as_mut().enable();
            match self.current() {
                Some(at) if at <= Instant::now() => return,
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// The clock stands still while this lives.
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
        let clock = RunClock::new(start + Duration::from_secs(10));
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
}
