//! The store: the session root and the sessions in it by id. Making a session's folder and
//! its record, holding each [`Session`] while it exists, writing its uses to its record,
//! adopting the folders a previous sidecar left at start (each as its record says, or held out
//! when the record cannot be read; the files a crash left half written deleted from those
//! adopted), removing a session (renamed to trash first, so its id is
//! free at once), and the sweeper that removes idle ones.
//!
//! It owns the root and the `root/<id>` and `root/<id>.owner` entries, never what is inside a
//! session folder (`held` and `write` reach that through `fs`). It must not know runs or HTTP.
//!
//! What happens once at start, making the root and adopting what is in it, is `adopt`'s.

mod adopt;

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::io;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::fs;
use super::held::{Session, Shared};
use super::names;
use super::record::{self, Durability, MAX_OWNER_BYTES, Record};
use super::{SessionConfig, SessionError, io_error};
use crate::util::{lock, tree};

/// A removed session's folder is renamed to this and a random suffix before its tree is
/// deleted, so the id is free at once. '.' is not in an id: a trash folder is never taken for a
/// session, and one left by a crash is deleted by the next [`Sessions::new`].
const TRASH_PREFIX: &str = ".trash-";

/// The sweeper runs at least this far apart, however short the TTL (a TTL of milliseconds in
/// a test must not spin a core)...
const SWEEP_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// ...and at least this often, so a session outlives its TTL by at most this.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// How often the sweeper runs for a TTL: a quarter of it, within
/// [[`SWEEP_AT_MOST_EVERY`], [`SWEEP_AT_LEAST_EVERY`]].
fn sweep_every(ttl: Duration) -> Duration {
    (ttl / 4).clamp(SWEEP_AT_MOST_EVERY, SWEEP_AT_LEAST_EVERY)
}

// The store's half of `Shared` (defined in `held`, where a session reaches its folder through
// it): making, trashing and deleting the session folders in the root.
impl Shared {
    /// Makes the folder of session `id` if it is missing (mode 0700) and gives it to `ids`
    /// (the session's uid, or the run user's; `None`: the sidecar keeps it).
    fn ensure_dir(&self, id: &str, ids: Option<(u32, u32)>) -> Result<(), SessionError> {
        let path = self.cfg.root.join(id);
        let name = fs::cstring(id).map_err(io_error(format!("session id {id:?}")))?;
        let created = match fs::mkdir_at(self.root.as_fd(), &name, 0o700) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => {
                return Err(io_error(format!(
                    "cannot create the session folder {}",
                    path.display()
                ))(e));
            }
        };
        let dir = fs::open_dir_at(self.root.as_fd(), &name).map_err(|e| {
            let context = if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
                format!(
                    "{} is not a folder (a link or a file): remove it from the session root",
                    path.display()
                )
            } else {
                format!("cannot open the session folder {}", path.display())
            };
            io_error(context)(e)
        })?;
        let give = || -> io::Result<()> {
            if created {
                fs::chmod(dir.as_fd(), 0o700)?;
            }
            if let Some((uid, gid)) = ids {
                let st = fs::fstat(dir.as_fd())?;
                if (st.uid, st.gid) != (uid, gid) {
                    fs::chown(dir.as_fd(), Some((uid, gid)))?;
                }
            }
            Ok(())
        };
        give().map_err(io_error(format!(
            "cannot give the session folder {} to the session's uid",
            path.display()
        )))
    }

    /// A uid of its own for a new session, where sessions have one.
    fn new_uid(&self) -> Result<Option<u32>, SessionError> {
        match &self.cfg.uids {
            Some(uids) => uids
                .lease()
                .map(Some)
                .map_err(io_error("cannot give the new session a uid".to_string())),
            None => Ok(None),
        }
    }

    /// Gives back the uid of a session whose folder is gone.
    pub(super) fn release_uid(&self, uid: Option<u32>) {
        if let (Some(uids), Some(uid)) = (&self.cfg.uids, uid) {
            uids.release(uid);
        }
    }

    /// Writes the record of session `id`, replacing any (`record::write_at`).
    fn write_record(
        &self,
        id: &str,
        record: &Record,
        durability: Durability,
    ) -> Result<(), SessionError> {
        record::write_at(self.root.as_fd(), id, record, durability).map_err(io_error(format!(
            "cannot write the record of session {id} in {}",
            self.cfg.root.display()
        )))
    }

    /// Deletes the record of a removed session (when it fails, logged: a record whose folder
    /// is gone is deleted at the next start, or replaced when the id is made again).
    fn forget_record(&self, id: &str) {
        if let Err(e) = record::remove_at(self.root.as_fd(), id) {
            tracing::warn!(
                session = id,
                "cannot delete the record of a removed session: {e}; the next start retries"
            );
        }
    }

    /// Renames the folder of session `id` out of the way; the trash name, or `None` when there
    /// was no folder.
    fn to_trash(&self, id: &str) -> io::Result<Option<CString>> {
        let name = fs::cstring(id)?;
        let mut random = [0u8; 8];
        rand::fill(&mut random);
        let trash = fs::cstring(&format!("{TRASH_PREFIX}{}", crate::util::hex(&random)))?;
        let root = self.root.as_fd();
        match fs::rename_at(root, &name, root, &trash) {
            Ok(()) => Ok(Some(trash)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The bytes of the regular files under the root's folder `name`, for a store with a
    /// bound on its total (0 for one without: nothing counts them). What cannot be measured
    /// counts what was measured of it.
    fn bytes_in(&self, name: &CStr) -> u64 {
        if self.cfg.max_total_bytes.is_none() {
            return 0;
        }
        let mut bytes = 0;
        if let Ok(dir) = fs::open_dir_at(self.root.as_fd(), name) {
            let _ = tree::measure(dir, |st| {
                if st.is_plain_file() {
                    bytes += st.size;
                }
                ControlFlow::Continue(())
            });
        }
        bytes
    }

    /// Deletes a trash folder, and counts its bytes out of the store; a failure is logged (the
    /// next start retries).
    fn empty_trash(&self, id: &str, trash: &CString) {
        self.release(self.bytes_in(trash));
        if let Err(e) = fs::remove_tree(self.root.as_fd(), trash) {
            tracing::warn!(
                session = id,
                trash = %trash.to_string_lossy(),
                "cannot delete a removed session's files: {e}; the next start retries"
            );
        }
    }
}

/// The session store: a cheap handle, cloned into every task that needs it.
#[derive(Debug, Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    map: Mutex<Map>,
}

/// The store's ids, under one lock.
#[derive(Debug, Default)]
struct Map {
    /// The sessions, by id.
    held: HashMap<String, Arc<Session>>,
    /// The folders adopted at start whose record cannot be read or parsed, by id, with why.
    /// Held out of every route: nothing says whose they are, and read as the API key's holder's
    /// (the empty owner) a user's session would be opened to the key. Never swept either: what
    /// cannot be attributed is not deleted unasked. An operator repairs the record and restarts,
    /// or removes the session ([`Sessions::remove`]).
    unreadable: BTreeMap<String, String>,
}

impl Sessions {
    /// Opens the store at `cfg.root`, making the root (mode 0711) if it is missing. Adopts
    /// every session folder already there (a previous sidecar's) as its record says (owner,
    /// last use, uid), holds out those whose record cannot be read ([`unreadable`]), and
    /// deletes trash a crash left behind and the temporaries of writes a crash cut short in
    /// the sessions it adopts.
    ///
    /// [`unreadable`]: Sessions::unreadable
    pub fn new(cfg: SessionConfig) -> io::Result<Sessions> {
        let shown_root = cfg.root.display().to_string();
        let in_root = |what: &str| {
            let root = shown_root.clone();
            let what = what.to_string();
            move |e: io::Error| {
                io::Error::new(e.kind(), format!("session root {root}: {what}: {e}"))
            }
        };
        adopt::make_root(&cfg.root).map_err(in_root("cannot create it"))?;
        let root = fs::open_dir_path(&cfg.root).map_err(in_root("cannot open it"))?;
        let shared = Arc::new(Shared {
            cfg,
            root,
            stored: AtomicU64::new(0),
        });
        let map = adopt::adopt(&shared).map_err(in_root("cannot read it"))?;
        if !map.held.is_empty() || !map.unreadable.is_empty() {
            tracing::info!(
                root = %shared.cfg.root.display(),
                sessions = map.held.len(),
                held_out = map.unreadable.len(),
                "adopted existing sessions"
            );
        }
        Ok(Sessions {
            inner: Arc::new(Inner {
                shared,
                map: Mutex::new(map),
            }),
        })
    }

    /// A fresh session id: [`ID_LEN`](super::ID_LEN) random characters of `[A-Za-z0-9_-]`, 126
    /// bits.
    pub fn new_id() -> String {
        names::new_id()
    }

    /// Checks a session id from a client: 1 to [`MAX_ID_LEN`](super::MAX_ID_LEN) characters of
    /// `[A-Za-z0-9_-]`, so it is one safe path component.
    pub fn check_id(id: &str) -> Result<(), SessionError> {
        names::check_id(id)
    }

    /// The session `id` of the empty owner (the API key's holder): [`open_as`](Self::open_as).
    pub fn open(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        self.open_as(id, "")
    }

    /// The session `id` of `owner`, made for it (its record first, then its folder, mode 0700,
    /// given to the run user) if it does not exist, marked used now. A session of another
    /// owner, or one whose record cannot be read, is [`SessionError::NotFound`], as if it did
    /// not exist.
    pub fn open_as(&self, id: &str, owner: &str) -> Result<Arc<Session>, SessionError> {
        Self::check_id(id)?;
        if owner.len() > MAX_OWNER_BYTES {
            return Err(SessionError::NotFound(id.to_string()));
        }
        let mut map = lock(&self.inner.map);
        if map.unreadable.contains_key(id) {
            return Err(SessionError::NotFound(id.to_string()));
        }
        let session = match map.held.get(id) {
            Some(session) if session.owner == owner => session.clone(),
            Some(_) => return Err(SessionError::NotFound(id.to_string())),
            None => {
                // Under the map's lock, so a concurrent remove cannot rename the folder between
                // this and the insert. The record first: a crash in between leaves a record
                // without a folder, which the next start deletes, never a folder without one.
                let shared = &self.inner.shared;
                let uid = shared.new_uid()?;
                let record = Record::new(owner, SystemTime::now(), uid);
                let ids = uid.map(|u| (u, u)).or(shared.cfg.owner);
                let made = shared
                    .write_record(id, &record, Durability::Unsynced)
                    .and_then(|()| shared.ensure_dir(id, ids));
                if let Err(e) = made {
                    shared.release_uid(uid);
                    return Err(e);
                }
                let session = Arc::new(Session::new(
                    &self.inner.shared,
                    id,
                    &record,
                    SystemTime::now(),
                ));
                map.held.insert(id.to_string(), session.clone());
                session
            }
        };
        drop(map);
        session.touch();
        Ok(session)
    }

    /// The session `id` of the empty owner: [`get_as`](Self::get_as).
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.get_as(id, "")
    }

    /// The session `id` if it exists and is `owner`'s (a bad id, or another owner's session, is
    /// just not there), marked used now.
    pub fn get_as(&self, id: &str, owner: &str) -> Option<Arc<Session>> {
        Self::check_id(id).ok()?;
        let session = lock(&self.inner.map)
            .held
            .get(id)
            .filter(|s| s.owner == owner)
            .cloned()?;
        session.touch();
        Some(session)
    }

    /// Every session, by id (not those held out: [`unreadable`](Self::unreadable)).
    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = lock(&self.inner.map).held.values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// The sessions held out because their record cannot be read or parsed, by id, each with
    /// why: no owner, the API key's holder included, can use them, and the sweeper leaves them;
    /// [`remove`](Self::remove) deletes one.
    pub fn unreadable(&self) -> Vec<(String, String)> {
        lock(&self.inner.map)
            .unreadable
            .iter()
            .map(|(id, why)| (id.clone(), why.clone()))
            .collect()
    }

    /// Writes each session's last use to its record when it is not there yet: called by the
    /// sweeper at each sweep and once at shutdown, so a use costs no write on the request's
    /// path, and a crash loses at most one sweep's worth (a quarter of the TTL, at most a
    /// minute) of idle time. A write that fails is logged and retried at the next call.
    pub fn record_uses(&self) {
        let used: Vec<Arc<Session>> = lock(&self.inner.map)
            .held
            .values()
            .filter(|s| s.is_unrecorded())
            .cloned()
            .collect();
        let shared = &self.inner.shared;
        for session in used {
            if !session.take_unrecorded() {
                continue;
            }
            let record = session.record(SystemTime::now());
            // Written and synced outside the map's lock (a sync takes milliseconds, and every
            // request takes that lock); renamed into place under it, and only while the id is
            // still this session's: a removed session's record must not come back, nor
            // overwrite the record of a new session made under its id since.
            let renamed = record::Written::new(shared.root.as_fd(), &record, Durability::Synced)
                .and_then(|written| {
                    let map = lock(&self.inner.map);
                    match map.held.get(&session.id) {
                        Some(current) if Arc::ptr_eq(current, &session) => {
                            written.rename(&session.id)
                        }
                        // Dropped: the temporary file goes.
                        _ => Ok(()),
                    }
                });
            if let Err(e) = renamed {
                session.unrecorded();
                tracing::warn!(
                    session = %session.id,
                    "cannot keep when the session was last used: {e}; retried at the next sweep"
                );
            }
        }
    }

    /// Removes the session `id` and deletes its folder and record, whoever holds it (one held
    /// out as [`unreadable`](Self::unreadable) too): a later use of an
    /// `Arc<Session>` still held fails with [`SessionError::NotFound`]. Whether there was a
    /// session or a folder to remove.
    ///
    /// The folder is renamed away first (so `open(id)` makes a fresh one at once) and its tree
    /// deleted by `fs::remove_tree`, which never follows a link and stays within a fixed
    /// number of descriptors however deep the tree (std's `remove_dir_all` does not follow
    /// links either, but recurses once per level).
    pub fn remove(&self, id: &str) -> bool {
        if Self::check_id(id).is_err() {
            return false;
        }
        let (known, uid, trash) = {
            let mut map = lock(&self.inner.map);
            let held = map.held.remove(id);
            let uid = held.as_ref().and_then(|s| s.uid());
            let known = held.is_some() | map.unreadable.remove(id).is_some();
            let trash = self.inner.shared.to_trash(id);
            self.inner.shared.forget_record(id);
            (known, uid, trash)
        };
        match trash {
            Ok(Some(trash)) => {
                self.inner.shared.empty_trash(id, &trash);
                self.inner.shared.release_uid(uid);
                true
            }
            Ok(None) => known,
            Err(e) => {
                tracing::warn!(session = id, "cannot remove the session folder: {e}");
                known
            }
        }
    }

    /// Removes the session `id` if its folder is empty: one `rmdir`, which leaves a folder
    /// with anything in it (and its session) as it is, so nothing written is ever lost. Whether
    /// it was removed.
    pub fn remove_if_empty(&self, id: &str) -> bool {
        if Self::check_id(id).is_err() {
            return false;
        }
        let Ok(name) = fs::cstring(id) else {
            return false;
        };
        // Under the map's lock, so a concurrent open cannot make the folder again between the
        // rmdir and the removal of the entry.
        let mut map = lock(&self.inner.map);
        if map.unreadable.contains_key(id) {
            return false;
        }
        match fs::unlink_at(self.inner.shared.root.as_fd(), &name, true) {
            Ok(()) => {
                let uid = map.held.remove(id).and_then(|s| s.uid());
                self.inner.shared.forget_record(id);
                self.inner.shared.release_uid(uid);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes every session idle longer than the TTL that nobody uses: no run holds its lock
    /// and nobody but the store holds its `Arc` (a handler mid-upload keeps it). Those held out
    /// as [`unreadable`](Self::unreadable) stay. The ids removed.
    pub fn sweep(&self) -> Vec<String> {
        let ttl = self.inner.shared.cfg.ttl;
        let mut doomed = Vec::new();
        {
            let sessions = &mut lock(&self.inner.map).held;
            // Nobody else holds the Arc, and nobody can take it while we hold the map: the
            // lock can only be held by a guard outliving its Arc, which try_lock sees.
            let idle: Vec<String> = sessions
                .values()
                .filter(|s| Arc::strong_count(s) == 1 && s.run.try_lock().is_ok() && s.idle() > ttl)
                .map(|s| s.id.clone())
                .collect();
            for id in idle {
                let uid = sessions.remove(&id).and_then(|s| s.uid());
                self.inner.shared.forget_record(&id);
                match self.inner.shared.to_trash(&id) {
                    Ok(trash) => doomed.push((id, uid, trash)),
                    Err(e) => tracing::warn!(session = id, "cannot remove an idle session: {e}"),
                }
            }
        }
        for (id, uid, trash) in &doomed {
            if let Some(trash) = trash {
                self.inner.shared.empty_trash(id, trash);
            }
            self.inner.shared.release_uid(*uid);
            tracing::info!(session = %id, "removed an idle session");
        }
        doomed.into_iter().map(|(id, _, _)| id).collect()
    }

    /// Sweeps every quarter of the TTL (at least every minute, at most every second), and
    /// writes the uses of the sessions left to their records ([`record_uses`]), until
    /// `shutdown`; the task, for the caller to await at shutdown.
    ///
    /// [`record_uses`]: Self::record_uses
    pub fn spawn_sweeper(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let sessions = self.clone();
        let every = sweep_every(self.inner.shared.cfg.ttl);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                let sweeping = sessions.clone();
                let swept = tokio::task::spawn_blocking(move || {
                    sweeping.sweep();
                    sweeping.record_uses();
                });
                if let Err(e) = swept.await {
                    tracing::warn!("the session sweep failed: {e}");
                }
            }
        })
    }

    /// The bytes the store counts as held, all sessions together (for
    /// [`SessionConfig::max_total_bytes`]).
    pub fn stored(&self) -> u64 {
        self.inner.shared.stored.load(Ordering::Relaxed)
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &SessionConfig {
        &self.inner.shared.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::record::{Found, RECORD_SUFFIX};
    use crate::session::testing::{Scratch, mode, names};
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    fn record_path(scratch: &Scratch, id: &str) -> PathBuf {
        scratch.root().join(format!("{id}{RECORD_SUFFIX}"))
    }

    /// The record of `id` as the disk holds it, which must be one of this format.
    fn record_of(scratch: &Scratch, id: &str) -> Record {
        let bytes = std::fs::read(record_path(scratch, id)).unwrap();
        match record::parse(&bytes) {
            Ok(Found::Record(record)) => record,
            other => panic!("the record of {id}: {other:?}"),
        }
    }

    /// Writes `record` as `id`'s, as the sidecar would (mode 0600).
    fn write_record(scratch: &Scratch, id: &str, record: &Record) {
        let path = record_path(scratch, id);
        std::fs::write(&path, serde_json::to_vec(record).unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// What the folder's metadata says (a run could once set its mtime, `utime(0)`) decides
    /// nothing: the idle time after a restart is the record's, so the session is not swept.
    #[test]
    fn a_restart_takes_the_last_use_from_the_record_not_the_folder() {
        let scratch = Scratch::new();
        let first = scratch.sessions();
        let alice = r#"["t1","alice"]"#;
        first.open_as("s", alice).unwrap();
        first.open("old").unwrap();
        write_record(
            &scratch,
            "old",
            &Record::new("", SystemTime::now() - Duration::from_secs(7200), None),
        );
        for id in ["s", "old"] {
            std::fs::File::open(scratch.root().join(id))
                .unwrap()
                .set_modified(SystemTime::UNIX_EPOCH)
                .unwrap();
        }
        drop(first);

        let second = scratch.sessions();
        let idle = |id: &str| {
            second
                .list()
                .into_iter()
                .find(|s| s.id == id)
                .unwrap()
                .idle()
        };
        assert!(idle("s") < Duration::from_secs(60), "{:?}", idle("s"));
        assert!(
            idle("old") >= Duration::from_secs(7190),
            "{:?}",
            idle("old")
        );
        assert_eq!(second.sweep(), ["old"], "the TTL is an hour");
        assert_eq!(second.get_as("s", alice).unwrap().owner, alice);
    }

    /// A use is kept in memory at once and written to the record by `record_uses` (the
    /// sweeper's), also the end of a run (its guard dropped); a removed session's use is never
    /// written, so neither its record comes back nor a new owner's record under its id is
    /// overwritten.
    #[tokio::test]
    async fn uses_are_written_to_the_record_by_the_store_alone() {
        let scratch = Scratch::new();
        let sessions = scratch.sessions();
        let s = sessions.open("s").unwrap();
        let made = record_of(&scratch, "s").last_used_ms;
        std::thread::sleep(Duration::from_millis(30));
        let guard = s.lock().await;
        std::thread::sleep(Duration::from_millis(30));
        drop(guard);
        assert!(
            s.idle() < Duration::from_millis(30),
            "the run's end is a use"
        );
        assert_eq!(record_of(&scratch, "s").last_used_ms, made, "not yet");
        sessions.record_uses();
        let used = record_of(&scratch, "s").last_used_ms;
        assert!(used >= made + 60, "{made} then {used}");
        assert!(!s.is_unrecorded());

        // Removed, then made again for another owner: the old handle's use is not written.
        assert!(sessions.remove("s"));
        s.touch();
        sessions.record_uses();
        assert!(!record_path(&scratch, "s").exists());
        let bob = r#"["t1","bob"]"#;
        let again = sessions.open_as("s", bob).unwrap();
        s.touch();
        sessions.record_uses();
        assert_eq!(record_of(&scratch, "s").owner, bob);
        assert!(Arc::ptr_eq(&again, &sessions.get_as("s", bob).unwrap()));
    }

    /// A record that cannot be read or parsed leaves its session out of every route, the API
    /// key's holder's included (it is never read as the empty owner), out of the sweep, listed
    /// with why, and untouched until it is removed.
    #[test]
    fn an_unreadable_record_holds_its_session_out() {
        let scratch = Scratch::new();
        let root = scratch.root();
        let first = Sessions::new(SessionConfig {
            ttl: Duration::from_millis(1),
            ..scratch.config()
        })
        .unwrap();
        let alice = r#"["t1","alice"]"#;
        // A record of the empty owner, outside the root, for a link to point at.
        let operators = scratch.outside().join("operators.owner");
        std::fs::write(
            &operators,
            serde_json::to_vec(&Record::new("", SystemTime::now(), None)).unwrap(),
        )
        .unwrap();
        std::fs::set_permissions(&operators, std::fs::Permissions::from_mode(0o600)).unwrap();
        type Tamper = Box<dyn Fn(&Path)>;
        let write = |bytes: Vec<u8>| -> Tamper {
            Box::new(move |path: &Path| std::fs::write(path, &bytes).unwrap())
        };
        let cases: Vec<(&str, Tamper, &str)> = vec![
            (
                "mode000",
                Box::new(|path: &Path| {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000)).unwrap()
                }),
                // Root reads it and sees the mode; another user cannot open it.
                "mode is 0000|Permission denied",
            ),
            ("garbage", write(b"\xff\xfe\x00".to_vec()), "not UTF-8"),
            (
                "broken",
                write(b"{\"v\":1,\"owner\":".to_vec()),
                "not a record",
            ),
            ("empty", write(Vec::new()), "empty"),
            (
                "long",
                write(vec![b' '; record::MAX_RECORD_BYTES + 1]),
                "longer than",
            ),
            (
                "newer",
                write(br#"{"v":2,"owner":"","last_used_ms":1}"#.to_vec()),
                "version 2",
            ),
            (
                "folder",
                Box::new(|path: &Path| {
                    std::fs::remove_file(path).unwrap();
                    std::fs::create_dir(path).unwrap();
                }),
                "not a plain file",
            ),
            (
                "linked",
                Box::new({
                    let operators = operators.clone();
                    move |path: &Path| {
                        std::fs::remove_file(path).unwrap();
                        symlink(&operators, path).unwrap();
                    }
                }),
                "not a plain file",
            ),
            (
                "twin",
                Box::new(|path: &Path| {
                    std::fs::hard_link(path, path.with_extension("twin")).unwrap();
                }),
                "hard link",
            ),
        ];
        for (id, tamper, _) in &cases {
            first.open_as(id, alice).unwrap();
            tamper(&record_path(&scratch, id));
        }
        first.open_as("fine", alice).unwrap();
        drop(first);

        let second = Sessions::new(SessionConfig {
            ttl: Duration::from_millis(1),
            ..scratch.config()
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            second.sweep(),
            ["fine"],
            "only what can be attributed is swept"
        );
        second.record_uses();
        let held_out = second.unreadable();
        assert_eq!(held_out.len(), cases.len(), "{held_out:?}");
        for (id, _, says) in &cases {
            for owner in ["", alice] {
                assert!(
                    matches!(second.open_as(id, owner), Err(SessionError::NotFound(_))),
                    "{id} opened as {owner:?}"
                );
                assert!(second.get_as(id, owner).is_none(), "{id} got as {owner:?}");
            }
            let why = &held_out.iter().find(|(held, _)| held == id).unwrap().1;
            assert!(says.split('|').any(|s| why.contains(s)), "{id}: {why}");
            assert!(root.join(id).is_dir(), "{id}'s folder");
        }
        assert!(second.list().is_empty());
        assert_eq!(mode(&record_path(&scratch, "mode000")), 0, "left as found");
        assert!(record_path(&scratch, "folder").is_dir());

        // The operator's removal deletes folder and record, and frees the id.
        for (id, _, _) in &cases {
            assert!(second.remove(id), "{id}");
            assert!(!root.join(id).exists() && !record_path(&scratch, id).exists());
        }
        assert!(second.unreadable().is_empty());
        assert_eq!(std::fs::read(&operators).unwrap().first(), Some(&b'{'));
        assert_eq!(second.open("folder").unwrap().owner, "");
    }

    /// An older sidecar kept the owner alone as the file's text, and no file for the empty
    /// owner: both are adopted as used now (whatever the folder's mtime), and written again as
    /// records; a record half written by a crash is deleted.
    #[test]
    fn an_older_sidecars_owners_are_adopted_and_written_again() {
        let scratch = Scratch::new();
        let root = scratch.root();
        let alice = r#"["t1","alice"]"#;
        std::fs::create_dir_all(root.join("s1")).unwrap();
        std::fs::create_dir(root.join("k1")).unwrap();
        std::fs::write(root.join("s1.owner"), alice).unwrap();
        std::fs::set_permissions(
            root.join("s1.owner"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        for id in ["s1", "k1"] {
            std::fs::File::open(root.join(id))
                .unwrap()
                .set_modified(SystemTime::UNIX_EPOCH)
                .unwrap();
        }
        let before = SystemTime::now();

        let store = scratch.sessions();
        assert_eq!(store.sweep(), Vec::<String>::new());
        let s1 = store.get_as("s1", alice).unwrap();
        assert!(store.get("s1").is_none());
        let k1 = store.get("k1").unwrap();
        assert!(store.get_as("k1", alice).is_none());
        for (session, owner) in [(&s1, alice), (&k1, "")] {
            let record = record_of(&scratch, &session.id);
            assert_eq!(record.owner, owner);
            assert!(
                record.last_used() >= before - Duration::from_secs(1),
                "{record:?}"
            );
            assert_eq!(mode(&record_path(&scratch, &session.id)), 0o600);
        }
    }

    /// A uid kept for a session is in its record, so a restart keeps it; a removed session
    /// keeps none.
    /// With `uids`, each new session leases a uid of its own, its folder and the files the
    /// store writes are given to it, its record keeps it, a restart holds it again, and it goes
    /// back when the session is removed. Root only: giving a folder away needs CAP_CHOWN.
    #[test]
    fn each_session_has_a_uid_of_its_own_across_a_restart() {
        use crate::sandbox::{UidRange, Uids};
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: giving a folder to another uid needs root");
            return;
        }
        let range = UidRange {
            first: 2_000_100_000,
            count: 64,
        };
        let scratch = Scratch::new();
        let uids = Uids::new(range);
        let cfg = SessionConfig {
            owner: Some((65534, 65534)),
            uids: Some(uids.clone()),
            ..scratch.config()
        };
        let store = Sessions::new(cfg.clone()).unwrap();
        let (a, b) = (store.open("a").unwrap(), store.open("b").unwrap());
        let (ua, ub) = (a.uid().unwrap(), b.uid().unwrap());
        assert!(range.contains(ua) && range.contains(ub) && ua != ub);
        assert_eq!(uids.in_use(), 2);
        a.write("sub/f", &mut &b"x"[..]).unwrap();
        let owner = |rel: &str| {
            let m = std::fs::symlink_metadata(scratch.root().join(rel)).unwrap();
            (m.uid(), m.gid())
        };
        for rel in ["a", "a/sub", "a/sub/f"] {
            assert_eq!(owner(rel), (ua, ua), "{rel}");
        }
        assert_eq!(record_of(&scratch, "a").uid, Some(ua));
        drop((a, b, store));
        // A restart: a new process, a new range of leases.
        let uids = Uids::new(range);
        let store = Sessions::new(SessionConfig {
            uids: Some(uids.clone()),
            ..cfg
        })
        .unwrap();
        assert_eq!(store.get("a").unwrap().uid(), Some(ua));
        assert_eq!(uids.in_use(), 2, "both held again");
        let c = store.open("c").unwrap();
        assert!(![ua, ub].contains(&c.uid().unwrap()), "never another's");
        assert!(store.remove("a"));
        assert_eq!(uids.in_use(), 2, "a's given back");
    }

    #[test]
    fn a_session_is_its_owners_alone_and_stays_so_across_a_restart() {
        let scratch = Scratch::new();
        let store = scratch.sessions();
        let (alice, bob) = (r#"["t1","alice"]"#, r#"["t1","bob"]"#);
        let made = store.open_as("s1", alice).unwrap();
        assert_eq!(made.owner, alice);
        // Another owner, and the key's holder, find nothing under that id.
        assert!(matches!(
            store.open_as("s1", bob),
            Err(SessionError::NotFound(_))
        ));
        assert!(store.get_as("s1", bob).is_none());
        assert!(store.get("s1").is_none());
        assert!(store.get_as("s1", alice).is_some());
        store.open("k1").unwrap();
        assert!(store.get_as("k1", alice).is_none());
        // The record is the sidecar's, beside the folder; the empty owner has one too.
        assert_eq!(record_of(&scratch, "s1").owner, alice);
        assert_eq!(record_of(&scratch, "k1").owner, "");
        assert_eq!(mode(&scratch.root().join("s1.owner")), 0o600);
        // A record whose folder a crash lost is deleted at the next start, and so is a record
        // a crash left half written.
        std::fs::write(scratch.root().join("gone.owner"), bob).unwrap();
        std::fs::write(scratch.root().join(".record-0123"), "{").unwrap();
        drop((made, store));
        let store = scratch.sessions();
        assert!(store.get_as("s1", alice).is_some());
        assert!(store.get_as("s1", bob).is_none());
        assert!(store.get("k1").is_some());
        assert!(!scratch.root().join("gone.owner").exists());
        assert!(!scratch.root().join(".record-0123").exists());
        // Removed, its id is free for anyone, and the old owner is forgotten.
        assert!(store.remove("s1"));
        assert!(!scratch.root().join("s1.owner").exists());
        assert_eq!(store.open_as("s1", bob).unwrap().owner, bob);
    }

    #[test]
    fn the_store_can_be_shared_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Sessions>();
        send_sync::<Session>();
        send_sync::<SessionError>();
    }

    #[tokio::test]
    async fn sweep_removes_idle_sessions_but_not_held_ones() {
        let scratch = Scratch::new();
        let sessions = Sessions::new(SessionConfig {
            ttl: Duration::from_millis(50),
            ..scratch.config()
        })
        .unwrap();
        let idle = sessions.open("idle").unwrap();
        let locked = sessions.open("locked").unwrap();
        let held = sessions.open("held").unwrap();
        let guard = locked.lock().await;
        let (idle_dir, locked_dir) = (idle.dir.clone(), locked.dir.clone());
        drop((idle, locked));
        assert_eq!(
            sessions.sweep(),
            Vec::<String>::new(),
            "nothing is idle yet"
        );
        tokio::time::sleep(Duration::from_millis(120)).await;

        assert_eq!(sessions.sweep(), ["idle"]);
        assert!(!idle_dir.exists());
        assert!(locked_dir.is_dir() && held.dir.is_dir());
        let ids: Vec<_> = sessions.list().iter().map(|s| s.id.clone()).collect();
        assert_eq!(ids, ["held", "locked"]);

        drop(guard);
        let held_dir = held.dir.clone();
        drop(held);
        // The end of a run is a use: the session it held is idle a TTL after that, not after
        // the run's start.
        assert_eq!(sessions.sweep(), ["held"]);
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert_eq!(sessions.sweep(), ["locked"]);
        assert!(!locked_dir.exists() && !held_dir.exists());
        assert!(sessions.list().is_empty());
        // Only the (empty) root is left: no trash.
        assert_eq!(std::fs::read_dir(scratch.root()).unwrap().count(), 0);
    }

    #[test]
    fn a_second_store_adopts_existing_sessions() {
        let scratch = Scratch::new();
        let first = scratch.sessions();
        first
            .open("kept")
            .unwrap()
            .write("f.txt", &mut &b"x"[..])
            .unwrap();
        let root = scratch.root();
        std::fs::create_dir_all(root.join(".trash-0123/deep")).unwrap();
        std::fs::write(root.join(".trash-0123/deep/f"), "x").unwrap();
        std::fs::write(root.join("stray-file"), "x").unwrap();
        std::fs::create_dir(root.join("not.an.id")).unwrap();
        symlink(scratch.outside(), root.join("linked")).unwrap();
        // Last used two hours ago, as its record says.
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        write_record(&scratch, "kept", &Record::new("", two_hours_ago, None));

        let second = scratch.sessions();
        let listed = second.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, "kept");
        assert!(
            listed[0].idle() >= Duration::from_secs(7190),
            "{:?}",
            listed[0].idle()
        );
        assert!(!root.join(".trash-0123").exists());
        assert!(root.join("stray-file").exists() && root.join("not.an.id").exists());
        let kept = second.get("kept").unwrap();
        assert!(kept.idle() < Duration::from_secs(60), "get marks it used");
        assert_eq!(names(&kept.files().unwrap()), ["f.txt"]);
        drop(kept);

        // Removing: the folder goes, a stale handle says so, the id starts afresh.
        let stale = first.get("kept").unwrap();
        assert!(second.remove("kept"));
        assert!(!root.join("kept").exists());
        assert!(!second.remove("kept"));
        assert!(matches!(stale.files(), Err(SessionError::NotFound(_))));
        let fresh = second.open("kept").unwrap();
        assert!(fresh.files().unwrap().is_empty());
        assert_eq!(std::fs::read_dir(scratch.outside()).unwrap().count(), 0);
    }

    #[test]
    fn a_deep_tree_is_listed_to_64_levels_and_removed_without_following_links() {
        let scratch = Scratch::new();
        let keep = scratch.outside().join("keep.txt");
        std::fs::write(&keep, "keep").unwrap();
        let sessions = scratch.sessions();
        let s = sessions.open("deep").unwrap();
        let mut path = s.dir.clone();
        for level in 1..=300 {
            path.push("d");
            std::fs::create_dir(&path).unwrap();
            if matches!(level, 3 | 63 | 64) {
                std::fs::write(path.join("f"), "x").unwrap();
                symlink(scratch.outside(), path.join("out")).unwrap();
            }
        }
        std::fs::write(path.join("bottom"), "x").unwrap();
        let at = |level: usize| format!("{}f", "d/".repeat(level));

        // A name has at most 64 components: the file 63 folders down is the deepest listed.
        // (Sorted by name: "d/d/d/d..." before "d/d/d/f".)
        assert_eq!(names(&s.files().unwrap()), [at(63), at(3)]);
        assert!(s.open_name(&at(63)).unwrap().is_some());

        assert!(sessions.remove("deep"));
        assert!(!s.dir.exists());
        assert_eq!(std::fs::read_dir(scratch.root()).unwrap().count(), 0);
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "keep");
    }

    #[test]
    fn the_sweeper_runs_every_quarter_ttl_within_bounds() {
        assert_eq!(
            sweep_every(Duration::from_millis(10)),
            Duration::from_secs(1)
        );
        assert_eq!(
            sweep_every(Duration::from_secs(120)),
            Duration::from_secs(30)
        );
        assert_eq!(
            sweep_every(Duration::from_secs(86_400)),
            Duration::from_secs(60)
        );
    }

    #[tokio::test]
    async fn the_sweeper_removes_idle_sessions_until_shutdown() {
        let scratch = Scratch::new();
        let sessions = Sessions::new(SessionConfig {
            ttl: Duration::from_millis(1),
            ..scratch.config()
        })
        .unwrap();
        let dir = sessions.open("s").unwrap().dir.clone();
        let shutdown = CancellationToken::new();
        let sweeper = sessions.spawn_sweeper(shutdown.clone());
        let deadline = Instant::now() + Duration::from_secs(5);
        while dir.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!dir.exists(), "the sweeper did not remove the idle session");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), sweeper)
            .await
            .expect("the sweeper stops on shutdown")
            .unwrap();
    }
}
