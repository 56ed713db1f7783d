//! A host uid of its own for each run and each session (`PTC_SANDBOX_UIDS`), so that the
//! kernel's ownership rules, not a check of ours, keep one run's files from every other run:
//! Landlock covers what a run may open, not the metadata of what it may name, and with one uid
//! for all runs a `chmod 000` on the next warm worker's folder broke runs of every user.
//!
//! A root sidecar maps each run's user namespace to a uid leased from the range (its gid is
//! the same number), makes it the owner of the run's scratch folder (mode 0700), and takes the
//! lease back once the run's processes are gone and its folder is removed. A session holds one
//! uid for its whole life, recorded with its owner, across its runs and a restart.
//!
//! Owns the range, its checks at start and the leases; must not spawn anything or know runs.

use super::SandboxError;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// `PTC_SANDBOX_UIDS`' default: 65,536 uids from 2,000,000,000, above what distributions give
/// users (`UID_MAX` 60000), the `nobody` ids and the usual `/etc/subuid` ranges (from 100000,
/// 65536 each), and below 2^31 (tools that read a uid as a signed int).
pub const DEFAULT_RANGE: UidRange = UidRange {
    first: 2_000_000_000,
    count: 65_536,
};

/// The fewest uids a range may hold: a run, a warm worker and a session each hold one.
pub const MIN_COUNT: u32 = 64;

/// A range of host ids: `first` .. `first + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub count: u32,
}

impl UidRange {
    pub fn contains(&self, uid: u32) -> bool {
        uid >= self.first && uid - self.first < self.count
    }

    pub fn last(&self) -> u32 {
        self.first + (self.count - 1)
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last())
    }
}

/// Why a range cannot be used: one sentence naming the fix.
fn bad(text: &str, why: impl std::fmt::Display) -> SandboxError {
    SandboxError::Uids(format!("PTC_SANDBOX_UIDS={text:?}: {why}"))
}

impl std::str::FromStr for UidRange {
    type Err = SandboxError;

    /// `FIRST:COUNT` (as `/etc/subuid` writes a range) or `FIRST-LAST`.
    fn from_str(text: &str) -> Result<UidRange, SandboxError> {
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| bad(text, "expected FIRST:COUNT or FIRST-LAST, in numbers"))
        };
        let (first, count) = if let Some((a, b)) = text.split_once(':') {
            (number(a)?, number(b)?)
        } else if let Some((a, b)) = text.split_once('-') {
            let (first, last) = (number(a)?, number(b)?);
            if last < first {
                return Err(bad(text, "the last uid is below the first"));
            }
            (first, last - first + 1)
        } else {
            return Err(bad(
                text,
                "expected FIRST:COUNT or FIRST-LAST, e.g. 2000000000:65536",
            ));
        };
        if first == 0 {
            return Err(bad(
                text,
                "uid 0 is root; start the range above every user's uid",
            ));
        }
        if count < MIN_COUNT {
            return Err(bad(
                text,
                format!("a range needs at least {MIN_COUNT} uids"),
            ));
        }
        // (uid_t)-1 means "no change" to chown and setresuid: never a uid of ours.
        if u64::from(first) + u64::from(count) > u64::from(u32::MAX) {
            return Err(bad(text, "the range runs past the largest uid, 4294967294"));
        }
        Ok(UidRange { first, count })
    }
}

/// Checks that nobody else has an id in `range`: no user or group of `passwd` and `group`
/// (texts of `/etc/passwd` and `/etc/group`), no range of `subuid` (`/etc/subuid`), and that
/// this process's user namespace maps the whole range (`uid_map`, the text of
/// `/proc/self/uid_map`: a container given 65,536 ids cannot chown to the rest).
pub fn check(
    range: UidRange,
    passwd: &str,
    group: &str,
    subuid: &str,
    uid_map: &str,
) -> Result<(), SandboxError> {
    let text = range.to_string();
    for (file, ids) in [("/etc/passwd", passwd), ("/etc/group", group)] {
        for line in ids.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if let Some(id) = fields.get(2).and_then(|f| f.parse::<u32>().ok())
                && range.contains(id)
            {
                return Err(bad(
                    &text,
                    format!(
                        "{file} has {:?} with id {id} in the range: runs would share its \
                         files; choose a range no user or group has",
                        fields[0]
                    ),
                ));
            }
        }
    }
    for line in subuid.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if let (Some(first), Some(count)) = (
            fields.get(1).and_then(|f| f.parse::<u64>().ok()),
            fields.get(2).and_then(|f| f.parse::<u64>().ok()),
        ) && first < u64::from(range.first) + u64::from(range.count)
            && u64::from(range.first) < first + count
        {
            return Err(bad(
                &text,
                format!(
                    "/etc/subuid gives {:?} ids {first}:{count}, which overlap the range: their \
                     containers would share files with runs",
                    fields[0]
                ),
            ));
        }
    }
    let mapped = uid_map.lines().any(|line| {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        f.len() == 3
            && f[0] <= u64::from(range.first)
            && u64::from(range.first) + u64::from(range.count) <= f[0] + f[2]
    });
    if !mapped {
        return Err(bad(
            &text,
            "this process's user namespace does not map the whole range (/proc/self/uid_map); \
             choose a range inside it",
        ));
    }
    Ok(())
}

/// The leases of one range. Hands out uids round-robin, the least recently used first, so a
/// uid is reused as late as the range allows.
#[derive(Debug)]
pub struct Uids {
    range: UidRange,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Where the next search for a free uid starts (an offset into the range).
    next: u32,
    /// Uids leased or held by sessions.
    taken: BTreeSet<u32>,
}

/// Every uid of the range is leased or held by a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "every uid of PTC_SANDBOX_UIDS ({0}) is held by a run or a session; widen the range, or \
     lower PTC_MAX_SESSIONS / PTC_SESSION_TTL"
)]
pub struct Exhausted(pub UidRange);

impl Uids {
    pub fn new(range: UidRange) -> Arc<Uids> {
        Arc::new(Uids {
            range,
            state: Mutex::new(State::default()),
        })
    }

    pub fn range(&self) -> UidRange {
        self.range
    }

    /// A uid of its own for a run (or a new session), given back when the lease is dropped.
    pub fn lease(self: &Arc<Self>) -> Result<Lease, Exhausted> {
        let uid = self.take_free().ok_or(Exhausted(self.range))?;
        Ok(Lease {
            uid,
            uids: Some(self.clone()),
        })
    }

    /// Holds `uid` for good (a session's, read back at a restart); false when it is outside
    /// the range or already held.
    pub fn hold(&self, uid: u32) -> bool {
        self.range.contains(uid) && crate::util::lock(&self.state).taken.insert(uid)
    }

    /// Gives back a uid held with [`hold`](Self::hold) or [`Lease::keep`] (its session and its
    /// files are gone).
    pub fn release(&self, uid: u32) {
        crate::util::lock(&self.state).taken.remove(&uid);
    }

    /// How many uids are leased or held.
    pub fn in_use(&self) -> usize {
        crate::util::lock(&self.state).taken.len()
    }

    /// A uid held until [`release`](Self::release)d (a new session's).
    pub fn take(&self) -> Result<u32, Exhausted> {
        self.take_free().ok_or(Exhausted(self.range))
    }

    fn take_free(&self) -> Option<u32> {
        let mut state = crate::util::lock(&self.state);
        if state.taken.len() >= self.range.count as usize {
            return None;
        }
        // Fewer than `count` are taken, so the search ends within `taken.len() + 1` steps.
        loop {
            let uid = self.range.first + state.next;
            state.next = (state.next + 1) % self.range.count;
            if state.taken.insert(uid) {
                return Some(uid);
            }
        }
    }
}

/// A uid leased for a run: given back to its range when dropped (after the run's processes
/// are gone and its folder is removed: whoever owns the lease drops it then).
#[derive(Debug)]
pub struct Lease {
    uid: u32,
    uids: Option<Arc<Uids>>,
}

impl Lease {
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Keeps the uid held after the lease is dropped (a session's, until
    /// [`Uids::release`]).
    pub fn keep(mut self) -> u32 {
        self.uids = None;
        self.uid
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(uids) = self.uids.take() {
            uids.release(self.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn range(text: &str) -> Result<UidRange, String> {
        text.parse::<UidRange>().map_err(|e| e.to_string())
    }

    #[test]
    fn ranges_are_read_in_both_forms_and_bad_ones_say_why() {
        let want = UidRange {
            first: 5000,
            count: 100,
        };
        assert_eq!(range("5000:100"), Ok(want));
        assert_eq!(range("5000-5099"), Ok(want));
        assert_eq!(want.to_string(), "5000-5099");
        assert!(range("0:100").unwrap_err().contains("uid 0 is root"));
        assert!(range("5000:10").unwrap_err().contains("at least 64"));
        assert!(range("5000-4000").unwrap_err().contains("below the first"));
        assert!(
            range("4294967200:200")
                .unwrap_err()
                .contains("past the largest")
        );
        assert!(range("lots").unwrap_err().contains("FIRST:COUNT"));
        assert!(range("x:y").unwrap_err().contains("in numbers"));
    }

    #[test]
    fn a_range_someone_else_has_is_refused() {
        let r = UidRange {
            first: 5000,
            count: 100,
        };
        let map = "0 0 4294967295\n";
        let passwd = "root:x:0:0::/root:/bin/sh\nbob:x:5050:100::/home/bob:/bin/sh\n";
        let group = "root:x:0:\nstaff:x:5099:\n";
        let subuid = "alice:4000:1001\n";
        assert!(check(r, "", "", "", map).is_ok());
        let e = |p, g, s, m| check(r, p, g, s, m).unwrap_err().to_string();
        assert!(e(passwd, "", "", map).contains("/etc/passwd has \"bob\" with id 5050"));
        assert!(e("", group, "", map).contains("/etc/group has \"staff\" with id 5099"));
        assert!(e("", "", subuid, map).contains("/etc/subuid gives \"alice\" ids 4000:1001"));
        assert!(check(r, "", "", "alice:4000:1000\n", map).is_ok());
        assert!(e("", "", "", "0 100000 5050\n").contains("does not map the whole range"));
    }

    #[test]
    fn leases_are_each_runs_own_and_come_back_when_dropped() {
        let uids = Uids::new(UidRange {
            first: 7000,
            count: MIN_COUNT,
        });
        let a = uids.lease().unwrap();
        let b = uids.lease().unwrap();
        assert_ne!(a.uid(), b.uid());
        assert_eq!(uids.in_use(), 2);
        let kept = a.keep();
        drop(b);
        assert_eq!(uids.in_use(), 1);
        // Round-robin: a uid given back is not the next one handed out.
        let c = uids.lease().unwrap();
        assert_eq!(c.uid(), 7002);
        assert!(!uids.hold(kept), "a session's uid is held once");
        assert!(!uids.hold(6999), "outside the range");
        uids.release(kept);
        assert!(uids.hold(kept));
        let mut all: Vec<Lease> = Vec::new();
        while let Ok(l) = uids.lease() {
            all.push(l);
        }
        assert_eq!(uids.in_use(), MIN_COUNT as usize);
        assert!(uids.lease().unwrap_err().to_string().contains("7000-7063"));
        drop(all);
        assert_eq!(uids.in_use(), 2, "c and the held one");
    }
}
