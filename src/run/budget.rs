//! A run's budget: its share of everything the sidecar lends to runs, named in one place.
//!
//! Every resource runs share has a bound overall and a share per run, so that no run can empty
//! a pool the others need: the clock (a run waits for people `PTC_APPROVAL_TIMEOUT` in all,
//! [`super::clock`]), the calls waiting for a person and the bytes of their arguments, the IPC
//! bridge's connections, the `save_file` bodies being written, its calls in all (searches
//! included; the search model takes one query of a run at a time, `embed::share`), the calls of
//! a tool's `per_second` rate. What a run asks past its share is refused at once with a
//! message that names the share, and counted by resource ([`refusals`], the metric
//! `ptc_run_share_refusals_total`).
//!
//! [`Lender`] is the one rule for a pool: each run may always hold its `floor` (kept for it
//! whatever other runs hold), and past that up to its `ceiling`, out of a `pool` every run
//! draws from. It knows nothing of what it lends.

use crate::util::lock;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the sidecar lends runs, as the refusal metric names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// Time waiting for people (`PTC_APPROVAL_TIMEOUT` per run).
    ApprovalTime,
    /// Calls waiting for a person at once.
    Approvals,
    /// Bytes of the arguments of calls waiting for a person.
    ApprovalBytes,
    /// `save_file` bodies being written at once.
    Saves,
    /// The run's calls in all, tool calls and searches (`max_calls`).
    Calls,
    /// Calls of a tool with a `per_second` rate booked ahead.
    Rate,
    /// Connections to the IPC bridge at once (the loopback listener's; a run's own bridge
    /// keeps the next one waiting in the run's backlog instead).
    Connections,
    /// CPU time of all the run's processes together.
    Cpu,
}

impl Resource {
    pub const ALL: [Resource; 8] = [
        Resource::ApprovalTime,
        Resource::Approvals,
        Resource::ApprovalBytes,
        Resource::Saves,
        Resource::Calls,
        Resource::Rate,
        Resource::Connections,
        Resource::Cpu,
    ];

    /// The metric's label.
    pub fn name(self) -> &'static str {
        match self {
            Resource::ApprovalTime => "approval_time",
            Resource::Approvals => "approvals",
            Resource::ApprovalBytes => "approval_bytes",
            Resource::Saves => "saves",
            Resource::Calls => "calls",
            Resource::Rate => "rate",
            Resource::Connections => "connections",
            Resource::Cpu => "cpu",
        }
    }
}

/// Refusals so far, by resource (in [`Resource::ALL`]'s order).
static REFUSED: [AtomicU64; Resource::ALL.len()] =
    [const { AtomicU64::new(0) }; Resource::ALL.len()];

/// Counts one refusal of `resource`.
pub fn refused(resource: Resource) {
    let i = Resource::ALL
        .iter()
        .position(|r| *r == resource)
        .unwrap_or(0);
    REFUSED[i].fetch_add(1, Ordering::Relaxed);
}

/// Refusals so far, by resource: what `ptc_run_share_refusals_total` reports.
pub fn refusals() -> Vec<(&'static str, u64)> {
    Resource::ALL
        .iter()
        .zip(&REFUSED)
        .map(|(r, n)| (r.name(), n.load(Ordering::Relaxed)))
        .collect()
}

/// Calls of one run waiting for a person at once: its floor of the approval table, always
/// there for it.
pub const APPROVALS_FLOOR: u64 = 4;
/// Calls of one run waiting for a person at once, at most.
pub const APPROVALS_CEILING: u64 = 32;
/// Calls waiting for a person across runs, past their floors.
pub const APPROVALS_POOL: u64 = 1024;

/// Bytes of a run's waiting calls' arguments always there for it (a few ordinary calls).
pub const APPROVAL_BYTES_FLOOR: u64 = 256 << 10;
/// Bytes of one run's waiting calls' arguments at most (two of the largest calls).
pub const APPROVAL_BYTES_CEILING: u64 = 16 << 20;
/// Bytes of waiting calls' arguments across runs, past their floors.
pub const APPROVAL_BYTES_POOL: u64 = 64 << 20;

/// `save_file` bodies of one run written at once, always.
pub const SAVES_FLOOR: u64 = 1;
/// `save_file` bodies of one run written at once, at most.
pub const SAVES_CEILING: u64 = 4;
/// `save_file` bodies written at once across runs, past their floors.
pub const SAVES_POOL: u64 = 16;

/// A pool lent to runs: each run holds up to `floor` whatever the others do, and past that up
/// to `ceiling` from `pool`, shared. Amounts are counts or bytes, as the resource is.
pub struct Lender {
    pub resource: Resource,
    pub floor: u64,
    pub ceiling: u64,
    /// What is left of the shared part.
    left: AtomicU64,
    pub pool: u64,
}

/// What one run holds of one [`Lender`].
#[derive(Default)]
pub struct Account {
    held: Mutex<u64>,
}

impl Account {
    pub fn held(&self) -> u64 {
        *lock(&self.held)
    }
}

/// Why a run may not have more: what it asked, what it holds, and which bound stopped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Short {
    /// The run holds its ceiling.
    Ceiling { ceiling: u64, held: u64 },
    /// The shared part is lent out whole.
    Pool { pool: u64 },
}

impl Lender {
    pub const fn new(resource: Resource, floor: u64, ceiling: u64, pool: u64) -> Lender {
        Lender {
            resource,
            floor,
            ceiling,
            left: AtomicU64::new(pool),
            pool,
        }
    }

    /// Takes `n` for the run of `account`, or says why not (counted as a refusal).
    pub fn take(&self, account: &Account, n: u64) -> Result<(), Short> {
        let mut held = lock(&account.held);
        let after = held.saturating_add(n);
        if after > self.ceiling.max(self.floor) {
            refused(self.resource);
            return Err(Short::Ceiling {
                ceiling: self.ceiling,
                held: *held,
            });
        }
        let need = self.past_floor(after) - self.past_floor(*held);
        if need > 0 {
            let taken = self
                .left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                    left.checked_sub(need)
                });
            if taken.is_err() {
                refused(self.resource);
                return Err(Short::Pool { pool: self.pool });
            }
        }
        *held = after;
        Ok(())
    }

    /// Gives back `n` the run of `account` took.
    pub fn give_back(&self, account: &Account, n: u64) {
        let mut held = lock(&account.held);
        let after = held.saturating_sub(n);
        let back = self.past_floor(*held) - self.past_floor(after);
        if back > 0 {
            self.left.fetch_add(back, Ordering::AcqRel);
        }
        *held = after;
    }

    /// What of `held` comes from the shared part.
    fn past_floor(&self, held: u64) -> u64 {
        held.saturating_sub(self.floor)
    }

    /// What is left of the shared part now.
    pub fn left(&self) -> u64 {
        self.left.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_always_has_its_floor_however_much_others_hold() {
        let lender = Lender::new(Resource::Approvals, 2, 10, 8);
        let (greedy, other, late) = (Account::default(), Account::default(), Account::default());
        // The greedy run takes its ceiling: its floor and 8 of the pool.
        for _ in 0..10 {
            lender.take(&greedy, 1).unwrap();
        }
        assert_eq!(
            lender.take(&greedy, 1),
            Err(Short::Ceiling {
                ceiling: 10,
                held: 10
            })
        );
        assert_eq!(lender.left(), 0);
        // Another run still has its floor, and nothing past it.
        lender.take(&other, 2).unwrap();
        assert_eq!(lender.take(&other, 1), Err(Short::Pool { pool: 8 }));
        // Given back, the pool serves the next.
        lender.give_back(&greedy, 3);
        assert_eq!(lender.left(), 3);
        lender.take(&late, 5).unwrap();
        assert_eq!(lender.left(), 0);
        lender.give_back(&late, 5);
        lender.give_back(&other, 2);
        lender.give_back(&greedy, 7);
        assert_eq!(lender.left(), 8);
        assert_eq!(greedy.held() + other.held() + late.held(), 0);
    }

    #[test]
    fn refusals_are_counted_by_resource() {
        let before = refusals();
        let lender = Lender::new(Resource::Saves, 1, 1, 0);
        let run = Account::default();
        lender.take(&run, 1).unwrap();
        assert!(lender.take(&run, 1).is_err());
        let after = refusals();
        let saves = |all: &[(&str, u64)]| all.iter().find(|(n, _)| *n == "saves").unwrap().1;
        assert!(saves(&after) > saves(&before));
    }
}
