//! The store: the session root and the sessions in it by id. Making a session's folder,
//! holding each [`Session`] while it exists, adopting the folders a previous sidecar left at
//! start, removing a session (renamed to trash first, so its id is free at once), and the
//! sweeper that removes idle ones.
//!
//! It owns the root and the `root/<id>` entries, never what is inside a session folder
//! (`held` and `write` reach that through `fs`). It must not know runs or HTTP.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::fs;
use super::held::{Session, Shared};
use super::names;
use super::{SessionConfig, SessionError, io_error};
use crate::util::{lock, tree};

/// A removed session's folder is renamed to this and a random suffix before its tree is
/// deleted, so the id is free at once. '.' is not in an id: a trash folder is never taken for a
/// session, and one left by a crash is deleted by the next [`Sessions::new`].
const TRASH_PREFIX: &str = ".trash-";

/// `root/<id>` + this holds the owner of a session that has one (the sidecar's file: the run
/// user cannot write the root). '.' is not in an id, so it is never taken for a session.
const OWNER_SUFFIX: &str = ".owner";

/// Longest owner string kept: the caller's (a tenant and a user id, each bounded).
pub const MAX_OWNER_BYTES: usize = 1024;

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
    /// Makes the folder of session `id` if it is missing (mode 0700) and gives it to the
    /// owner.
    fn ensure_dir(&self, id: &str) -> Result<(), SessionError> {
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
            if let Some((uid, gid)) = self.cfg.owner {
                let st = fs::fstat(dir.as_fd())?;
                if (st.uid, st.gid) != (uid, gid) {
                    fs::chown(dir.as_fd(), Some((uid, gid)))?;
                }
            }
            Ok(())
        };
        give().map_err(io_error(format!(
            "cannot give the session folder {} to the run user",
            path.display()
        )))
    }

    /// Keeps `owner` as the owner of session `id` (none kept for the empty owner), before its
    /// folder is made: a crash in between leaves an owner file without a folder, which the next
    /// start deletes.
    fn keep_owner(&self, id: &str, owner: &str) -> Result<(), SessionError> {
        use std::io::Write;
        let name = owner_file(id).map_err(io_error(format!("session id {id:?}")))?;
        let context = || format!("cannot keep the owner of session {id}");
        if owner.is_empty() {
            return match fs::unlink_at(self.root.as_fd(), &name, false) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error(context())(e)),
                _ => Ok(()),
            };
        }
        let (mut file, _) = fs::create_file_at(self.root.as_fd(), &name, None).map_err(|e| {
            io_error(context())(match e {
                fs::Refused::Io(e) => e,
                _ => io::Error::other("something that is not a plain file holds its name"),
            })
        })?;
        file.write_all(owner.as_bytes())
            .map_err(io_error(context()))
    }

    /// The owner kept for the folder `id` (empty when none is, or it cannot be read).
    fn read_owner(&self, id: &str) -> String {
        use std::io::Read;
        let Ok(name) = owner_file(id) else {
            return String::new();
        };
        let mut owner = String::new();
        if let Ok(Some((file, _))) = fs::open_file_at(self.root.as_fd(), &name) {
            let _ = file.take(MAX_OWNER_BYTES as u64).read_to_string(&mut owner);
        }
        owner
    }

    /// Forgets the owner of a removed session (best effort: a stale file is deleted at the
    /// next start, or replaced when the id is made again).
    fn forget_owner(&self, id: &str) {
        if let Ok(name) = owner_file(id) {
            let _ = fs::unlink_at(self.root.as_fd(), &name, false);
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
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    /// Opens the store at `cfg.root`, making the root (mode 0711) if it is missing. Adopts
    /// every session folder already there (a previous sidecar's), last used when the folder
    /// was last modified, and deletes trash a crash left behind.
    pub fn new(cfg: SessionConfig) -> io::Result<Sessions> {
        let shown_root = cfg.root.display().to_string();
        let in_root = |what: &str| {
            let root = shown_root.clone();
            let what = what.to_string();
            move |e: io::Error| {
                io::Error::new(e.kind(), format!("session root {root}: {what}: {e}"))
            }
        };
        make_root(&cfg.root).map_err(in_root("cannot create it"))?;
        let root = fs::open_dir_path(&cfg.root).map_err(in_root("cannot open it"))?;
        let shared = Arc::new(Shared {
            cfg,
            root,
            stored: AtomicU64::new(0),
        });
        let sessions = adopt(&shared).map_err(in_root("cannot read it"))?;
        if !sessions.is_empty() {
            tracing::info!(
                root = %shared.cfg.root.display(),
                sessions = sessions.len(),
                "adopted existing sessions"
            );
        }
        Ok(Sessions {
            inner: Arc::new(Inner {
                shared,
                sessions: Mutex::new(sessions),
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

    /// The session `id` of `owner`, made for it (folder mode 0700, given to the run user) if
    /// it does not exist, marked used now. A session of another owner is
    /// [`SessionError::NotFound`], as if it did not exist.
    pub fn open_as(&self, id: &str, owner: &str) -> Result<Arc<Session>, SessionError> {
        Self::check_id(id)?;
        if owner.len() > MAX_OWNER_BYTES {
            return Err(SessionError::NotFound(id.to_string()));
        }
        let mut sessions = lock(&self.inner.sessions);
        let session = match sessions.get(id) {
            Some(session) if session.owner == owner => session.clone(),
            Some(_) => return Err(SessionError::NotFound(id.to_string())),
            None => {
                // Under the map's lock, so a concurrent remove cannot rename the folder between
                // this and the insert.
                self.inner.shared.keep_owner(id, owner)?;
                self.inner.shared.ensure_dir(id)?;
                let session = Arc::new(Session::new(&self.inner.shared, id, owner, Duration::ZERO));
                sessions.insert(id.to_string(), session.clone());
                session
            }
        };
        drop(sessions);
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
        let session = lock(&self.inner.sessions)
            .get(id)
            .filter(|s| s.owner == owner)
            .cloned()?;
        session.touch();
        Some(session)
    }

    /// Every session, by id.
    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = lock(&self.inner.sessions).values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Removes the session `id` and deletes its folder, whoever holds it: a later use of an
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
        let (known, trash) = {
            let mut sessions = lock(&self.inner.sessions);
            let known = sessions.remove(id).is_some();
            let trash = self.inner.shared.to_trash(id);
            self.inner.shared.forget_owner(id);
            (known, trash)
        };
        match trash {
            Ok(Some(trash)) => {
                self.inner.shared.empty_trash(id, &trash);
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
        let mut sessions = lock(&self.inner.sessions);
        match fs::unlink_at(self.inner.shared.root.as_fd(), &name, true) {
            Ok(()) => {
                sessions.remove(id);
                self.inner.shared.forget_owner(id);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes every session idle longer than the TTL that nobody uses: no run holds its lock
    /// and nobody but the store holds its `Arc` (a handler mid-upload keeps it). The ids
    /// removed.
    pub fn sweep(&self) -> Vec<String> {
        let ttl = self.inner.shared.cfg.ttl;
        let mut doomed = Vec::new();
        {
            let mut sessions = lock(&self.inner.sessions);
            // Nobody else holds the Arc, and nobody can take it while we hold the map: the
            // lock can only be held by a guard outliving its Arc, which try_lock sees.
            let idle: Vec<String> = sessions
                .values()
                .filter(|s| Arc::strong_count(s) == 1 && s.run.try_lock().is_ok() && s.idle() > ttl)
                .map(|s| s.id.clone())
                .collect();
            for id in idle {
                sessions.remove(&id);
                self.inner.shared.forget_owner(&id);
                match self.inner.shared.to_trash(&id) {
                    Ok(trash) => doomed.push((id, trash)),
                    Err(e) => tracing::warn!(session = id, "cannot remove an idle session: {e}"),
                }
            }
        }
        for (id, trash) in &doomed {
            if let Some(trash) = trash {
                self.inner.shared.empty_trash(id, trash);
            }
            tracing::info!(session = %id, "removed an idle session");
        }
        doomed.into_iter().map(|(id, _)| id).collect()
    }

    /// Sweeps every quarter of the TTL (at least every minute, at most every second) until
    /// `shutdown`; the task, for the caller to await at shutdown.
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
                if let Err(e) = tokio::task::spawn_blocking(move || sweeping.sweep()).await {
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

/// Makes the root with mode 0711 when missing. The root comes from configuration and is
/// trusted: links in its path are followed.
fn make_root(root: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(root)?;
            // The umask may have taken bits away.
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
        }
        Err(e) => Err(e),
        Ok(meta) if !meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "it is not a folder; point the session root at a folder",
        )),
        Ok(meta) => {
            if meta.permissions().mode() & 0o022 != 0 {
                tracing::warn!(
                    root = %root.display(),
                    "the session root is writable by others; make it mode 0711"
                );
            }
            Ok(())
        }
    }
}

/// The session folders under the root, each last used when its folder was last modified;
/// trash is deleted, anything else left alone.
fn adopt(shared: &Arc<Shared>) -> io::Result<HashMap<String, Arc<Session>>> {
    let root = shared.root.as_fd();
    let mut entries = fs::DirStream::new(fs::open_dir_at(root, c".")?)?;
    let now = SystemTime::now();
    let mut sessions = HashMap::new();
    let mut owned = Vec::new();
    while let Some(name) = entries.next_name()? {
        let Ok(id) = name.to_str() else { continue };
        if id.starts_with(TRASH_PREFIX) {
            shared.empty_trash(id, &name);
            continue;
        }
        if let Some(of) = id.strip_suffix(OWNER_SUFFIX) {
            owned.push(of.to_string());
            continue;
        }
        if Sessions::check_id(id).is_err() {
            continue;
        }
        match fs::stat_at(root, &name) {
            Ok(st) if st.is_dir() => {
                shared
                    .stored
                    .fetch_add(shared.bytes_in(&name), Ordering::Relaxed);
                let idle = now.duration_since(st.modified()).unwrap_or_default();
                let session = Session::new(shared, id, &shared.read_owner(id), idle);
                sessions.insert(id.to_string(), Arc::new(session));
            }
            _ => tracing::warn!(
                entry = id,
                "the session root holds something that is not a folder; left alone"
            ),
        }
    }
    // An owner whose folder is gone: a crash between the two.
    for id in owned.iter().filter(|id| !sessions.contains_key(*id)) {
        shared.forget_owner(id);
    }
    Ok(sessions)
}

fn owner_file(id: &str) -> io::Result<CString> {
    fs::cstring(&format!("{id}{OWNER_SUFFIX}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testing::{Scratch, names};
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::symlink;
    use std::time::Instant;

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
        // The owner file is the sidecar's, beside the folder.
        assert_eq!(
            std::fs::read_to_string(scratch.root().join("s1.owner")).unwrap(),
            alice
        );
        assert!(!scratch.root().join("k1.owner").exists());
        // An owner file whose folder a crash lost is deleted at the next start.
        std::fs::write(scratch.root().join("gone.owner"), bob).unwrap();
        drop((made, store));
        let store = scratch.sessions();
        assert!(store.get_as("s1", alice).is_some());
        assert!(store.get_as("s1", bob).is_none());
        assert!(store.get("k1").is_some());
        assert!(!scratch.root().join("gone.owner").exists());
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
        let mut removed = sessions.sweep();
        removed.sort();
        assert_eq!(removed, ["held", "locked"]);
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
        // Last used two hours ago, as far as the disk knows.
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        std::fs::File::open(root.join("kept"))
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();

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
