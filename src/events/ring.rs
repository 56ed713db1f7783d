//! The latest events of this sidecar, kept in its memory from its start: what the dashboard's
//! first look folds, so the page opened after eleven runs shows those eleven runs.
//!
//! Owns the bounds: at most [`RING_EVENTS`] events and [`RING_BYTES`] bytes of their JSON, the
//! oldest dropped first; an event whose `args` or `result` is longer than [`RING_BODY`] is
//! kept with it cut to that ([`super::Event::slim`]; `code`, `stdout` and `stderr` are within
//! `MAX_EVENT_EXCERPT` already).
//! Fed by [`super::Events::emit`] under the lock that orders every event, with the same JSON
//! it publishes; it reads nothing back from Redis, so a sidecar without Redis (or with Redis
//! away) has it too.

use std::collections::VecDeque;
use std::sync::Arc;

/// Most events kept: a few hundred runs' worth of small events.
pub const RING_EVENTS: usize = 4096;
/// Most bytes of event JSON kept: what a sidecar that nobody watches pays for being watchable
/// (about 150 runs of two calls each without bodies, and a fixed cost: the 500-run soak test
/// allows 512 KB of growth in all).
pub const RING_BYTES: usize = 256 << 10;
/// Longest `args` or `result` an event keeps in the ring, as JSON: bodies of 64 KiB would
/// leave room for four events; the dashboard shows less.
pub const RING_BODY: usize = 2048;

/// The events, oldest first, and their bytes.
#[derive(Debug, Default)]
pub(super) struct Ring {
    events: VecDeque<Arc<str>>,
    bytes: usize,
}

impl Ring {
    /// Keeps `json`, dropping the oldest events past the bounds (the newest is always kept).
    pub(super) fn push(&mut self, json: Arc<str>) {
        self.bytes += json.len();
        self.events.push_back(json);
        while self.events.len() > RING_EVENTS || (self.bytes > RING_BYTES && self.events.len() > 1)
        {
            if let Some(old) = self.events.pop_front() {
                self.bytes -= old.len();
            }
        }
    }

    /// Every event kept, oldest first.
    pub(super) fn events(&self) -> Vec<Arc<str>> {
        self.events.iter().cloned().collect()
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_within_its_count_and_bytes() {
        let mut ring = Ring::default();
        for i in 0..(RING_EVENTS * 2) {
            ring.push(format!("{{\"seq\":{i}}}").into());
        }
        let kept = ring.events();
        assert_eq!(kept.len(), RING_EVENTS);
        assert_eq!(&*kept[0], format!("{{\"seq\":{RING_EVENTS}}}"));
        assert_eq!(
            &*kept[RING_EVENTS - 1],
            format!("{{\"seq\":{}}}", RING_EVENTS * 2 - 1)
        );
        let big = "x".repeat(100 << 10);
        for _ in 0..5 {
            ring.push(big.as_str().into());
        }
        assert_eq!(ring.events().len(), 2, "two of 100 KiB fit in 256 KiB");
        assert_eq!(ring.bytes(), 200 << 10);
        // One event over the whole bound is kept alone rather than lost.
        ring.push("y".repeat(RING_BYTES + 1).into());
        assert_eq!(ring.events().len(), 1);
        ring.push("{}".into());
        assert_eq!((ring.events().len(), ring.bytes()), (1, 2));
    }
}
