//! The loopback listener's connections, shared out by run: runs without a network namespace of
//! their own (the kernel refused namespaces, or `PTC_SANDBOX=off`) all reach the sidecar on one
//! loopback port, so one run could otherwise open every connection it takes and leave the
//! others none.
//!
//! Two rules keep a share for every run:
//!
//! - A connection is the run's whose token its first request presents (and moves with a later
//!   request that presents another: a session's interpreter reuses its connections run after
//!   run). A run holds at most its share at once; one more is refused at its first request,
//!   saying so, and counted (`connections` in `ptc_run_share_refusals_total`).
//! - A connection no run has claimed yet (accepted, its first request not read) is anyone's: when
//!   the listener is full, the oldest of those is closed to make room for the new one. The SDK
//!   sends its request as soon as it connects, so a run that opens connections and sends
//!   nothing only closes its own; only when every open connection is claimed is a new one
//!   closed as it is accepted.

use crate::run::budget::{self, Resource};
use crate::util::lock;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The loopback listener's connections: how many in all, and each run's.
pub struct Loopback {
    /// Connections open at once, claimed or not.
    cap: usize,
    /// A run's connections at once.
    share: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    /// Every open connection by its number, with the token of the run that claimed it.
    connections: HashMap<u64, Connection>,
    /// The connections no run claimed yet, oldest first (numbers only grow).
    unclaimed: BTreeMap<u64, ()>,
    /// Each run's claimed connections, by token.
    runs: HashMap<Arc<str>, usize>,
    next: u64,
}

struct Connection {
    run: Option<Arc<str>>,
    /// Closes the connection when it is evicted.
    close: CancellationToken,
}

/// One accepted connection's place; gives it back when dropped.
pub struct Slot {
    loopback: Arc<Loopback>,
    number: u64,
}

/// A run that already holds its share of connections.
#[derive(Debug)]
pub struct OverShare {
    pub share: usize,
}

impl Loopback {
    pub fn new(cap: usize, share: usize) -> Arc<Loopback> {
        Arc::new(Loopback {
            cap,
            share,
            open: Mutex::default(),
        })
    }

    /// A place for a connection just accepted, and what closes it if it is evicted: the oldest
    /// unclaimed connection is closed to make room when all places are taken; `None` when every
    /// open connection is a run's.
    pub fn admit(self: &Arc<Self>) -> Option<(Slot, CancellationToken)> {
        let mut open = lock(&self.open);
        if open.connections.len() >= self.cap {
            let oldest = open.unclaimed.pop_first()?.0;
            if let Some(evicted) = open.connections.remove(&oldest) {
                tracing::debug!("IPC bridge: loopback full; an unclaimed connection closed");
                evicted.close.cancel();
            }
        }
        let number = open.next;
        open.next += 1;
        let close = CancellationToken::new();
        let connection = Connection {
            run: None,
            close: close.clone(),
        };
        open.connections.insert(number, connection);
        open.unclaimed.insert(number, ());
        let slot = Slot {
            loopback: self.clone(),
            number,
        };
        Some((slot, close))
    }

    /// Connections open now: in all, and claimed by the run of `token`.
    #[cfg(test)]
    fn counts(&self, token: &str) -> (usize, usize) {
        let open = lock(&self.open);
        let of_run = open.runs.get(token).copied().unwrap_or(0);
        (open.connections.len(), of_run)
    }
}

impl Slot {
    /// Makes the connection the run's of `token`, unless that run holds its share already.
    pub fn claim(&self, token: &Arc<str>) -> Result<(), OverShare> {
        let loopback = &self.loopback;
        let mut open = lock(&loopback.open);
        let open = &mut *open;
        let Some(connection) = open.connections.get_mut(&self.number) else {
            return Ok(()); // evicted: it closes now
        };
        if connection.run.as_ref() == Some(token) {
            return Ok(());
        }
        let held = open.runs.get(token).copied().unwrap_or(0);
        if held >= loopback.share {
            budget::refused(Resource::Connections);
            return Err(OverShare {
                share: loopback.share,
            });
        }
        let before = connection.run.replace(token.clone());
        open.unclaimed.remove(&self.number);
        *open.runs.entry(token.clone()).or_default() += 1;
        if let Some(before) = before {
            release(&mut open.runs, &before);
        }
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = lock(&self.loopback.open);
        let open = &mut *open;
        if let Some(connection) = open.connections.remove(&self.number) {
            open.unclaimed.remove(&self.number);
            if let Some(run) = connection.run {
                release(&mut open.runs, &run);
            }
        }
    }
}

/// One connection of the run of `token` fewer.
fn release(runs: &mut HashMap<Arc<str>, usize>, token: &Arc<str>) {
    if let Some(held) = runs.get_mut(token) {
        *held -= 1;
        if *held == 0 {
            runs.remove(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_listener_closes_its_oldest_unclaimed_connection_for_a_new_one() {
        let loopback = Loopback::new(3, 2);
        let (first, first_closed) = loopback.admit().unwrap();
        let (second, second_closed) = loopback.admit().unwrap();
        let (_third, _) = loopback.admit().unwrap();
        let run: Arc<str> = "run-a".into();
        first.claim(&run).unwrap();
        // Full: the oldest unclaimed one (the second) makes room, never a run's.
        let (_fourth, _) = loopback.admit().unwrap();
        assert!(!first_closed.is_cancelled());
        assert!(second_closed.is_cancelled());
        assert_eq!(loopback.counts(&run), (3, 1));
        drop(second); // an evicted connection's end gives back nothing twice
        assert_eq!(loopback.counts(&run), (3, 1));
    }

    #[test]
    fn a_run_holds_at_most_its_share_and_others_keep_theirs() {
        let loopback = Loopback::new(8, 2);
        let (a, b): (Arc<str>, Arc<str>) = ("run-a".into(), "run-b".into());
        let slots: Vec<_> = (0..4).map(|_| loopback.admit().unwrap().0).collect();
        slots[0].claim(&a).unwrap();
        slots[1].claim(&a).unwrap();
        let refused = slots[2].claim(&a).unwrap_err();
        assert_eq!(refused.share, 2);
        slots[2].claim(&b).unwrap();
        // The same run again on its own connection is no new claim.
        slots[0].claim(&a).unwrap();
        assert_eq!(loopback.counts(&a), (4, 2));
        // A connection moved to another run counts there, and no more for the first.
        slots[1].claim(&b).unwrap();
        assert_eq!(loopback.counts(&a), (4, 1));
        assert_eq!(loopback.counts(&b), (4, 2));
        drop(slots);
        assert_eq!(loopback.counts(&b), (0, 0));
    }

    #[test]
    fn a_listener_full_of_claimed_connections_admits_none() {
        let loopback = Loopback::new(2, 2);
        let run: Arc<str> = "run-a".into();
        let (one, _) = loopback.admit().unwrap();
        let (two, _) = loopback.admit().unwrap();
        one.claim(&run).unwrap();
        two.claim(&run).unwrap();
        assert!(loopback.admit().is_none());
        drop(one);
        assert!(loopback.admit().is_some());
    }
}
