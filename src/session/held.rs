//! One held session: its folder, when it was last used (and whether its record says so yet),
//! the lock a run holds, what its writers in flight hold ([`Ledger`]), and reading its files —
//! listing them, opening one by name or by id, deleting one, the bytes it holds, and a snapshot
//! to tell later what a run wrote. A file being written (a temporary, `names::writing_name`) is
//! never listed, opened or snapshotted: its name is none a listing shows.
//!
//! Every access starts from the root's descriptor (`Shared`) and goes through `fs`, never
//! through the `dir` path: the run user owns everything below `root/<id>`. It must not make,
//! adopt or remove a session folder, nor write its record (the store's job: it knows whether
//! the session is still the one under its id), and writing a file under the quota is
//! `write`'s.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::OwnedMutexGuard;

use super::fs::{self, Refused, Stat, WalkError};
use super::names::{
    ID_LEN, MAX_NAME_BYTES, NAME_EXAMPLE, check_name, component_ok, file_id, shown, split_name,
};
use super::record::Record;
use super::{SessionConfig, SessionError, io_error};
use crate::util::lock;
use crate::util::tree;

/// What a session serves of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// [`file_id`] of the session and `name`.
    pub id: String,
    /// Relative to the session folder, components joined with '/'.
    pub name: String,
    /// Bytes, when listed or opened.
    pub size: u64,
    /// The file's mtime.
    pub modified: SystemTime,
}

/// Every plain file of a session at one moment, to tell later what a run wrote
/// ([`Session::changed_since`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    files: BTreeMap<String, Stamp>,
}

impl Snapshot {
    /// Files in the snapshot.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the session held no file it serves.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Whether the snapshot has a file of this (normalized) name.
    pub fn contains(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }
}

/// What tells one version of a file from another: a rewrite changes the size or the mtime, a
/// replacement (write elsewhere, rename over) the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Stamp {
    fn of(st: &Stat) -> Stamp {
        Stamp {
            size: st.size,
            mtime_ns: st.mtime_ns,
            ino: st.ino,
        }
    }
}

/// What every session shares: the configuration and the root folder, held open so every
/// session folder is reached from it with `openat`.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) cfg: SessionConfig,
    pub(super) root: OwnedFd,
    /// The bytes of the whole store, for `cfg.max_total_bytes`: found at start, then counted
    /// as the store writes and removes (see [`SessionConfig::max_total_bytes`]).
    pub(super) stored: AtomicU64,
}

impl Shared {
    /// Counts `bytes` the store no longer holds.
    pub(super) fn release(&self, bytes: u64) {
        let _ = self
            .stored
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
    }
}

/// What a session's writers in flight hold (`write`'s `Writer`, which writes into a temporary
/// and renames it over its file's name once whole), counted in memory so that writers at once
/// are measured against each other's bytes and files, not only against what a walk of the
/// folder found when each began.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    pub(super) writes: Mutex<Writes>,
    /// Held while a writer renames its file into place and counts it published, so that of
    /// two writers of one name, each sees what its own rename replaces.
    pub(super) publishing: Mutex<()>,
}

/// The counts of a [`Ledger`], under its lock (never held across a file system call).
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// Writers in flight: each holds one of the session's `max_files` for its temporary, from
    /// before the temporary is made until it is renamed or removed.
    pub(super) writers: u64,
    /// Each writer's temporary, by device and inode, with the bytes written into it.
    pub(super) temps: HashMap<(u64, u64), u64>,
    /// The bytes of all of `temps`.
    pub(super) pending: u64,
    /// What writers renamed into place since the session was opened; it only grows.
    pub(super) published: Published,
}

/// Bytes and files renamed into place, counted up: a writer takes what others published after
/// it measured the folder (a file a rename replaced is not counted out, so a writer at once
/// with it counts over rather than under).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Published {
    pub(super) bytes: u64,
    pub(super) files: u64,
}

/// One session: its folder, when it was last used, and the lock a run holds.
#[derive(Debug)]
pub struct Session {
    /// Checked by [`Sessions::check_id`](super::Sessions::check_id): one safe path component.
    pub id: String,
    /// `root/<id>`, for the runner to hand to a run (its working folder, its Landlock rule).
    /// The store itself never uses this path: it opens the folder from the root's descriptor.
    pub dir: PathBuf,
    /// Who the session belongs to, as the caller's opaque owner string (empty: the API key's
    /// holder); kept in the session's record, `root/<id>.owner`, so a restart keeps it.
    pub owner: String,
    pub(super) shared: Arc<Shared>,
    /// When last used, and whether the record says so yet.
    used: Mutex<Use>,
    /// The uid the session's runs get, when one is kept
    /// (`SessionConfig::uids`: leased when the session was made, kept in its record).
    uid: Option<u32>,
    /// Held by a run ([`lock`](Session::lock)); the store's sweep leaves a session alone while
    /// it is taken.
    pub(super) run: Arc<tokio::sync::Mutex<()>>,
    /// What its writers in flight hold; each writer keeps a handle.
    pub(super) ledger: Arc<Ledger>,
}

/// When a session was last used: an instant, plus how long it had been idle by then (an
/// adopted session was idle before this process started).
#[derive(Debug, Clone, Copy)]
struct Use {
    at: Instant,
    before: Duration,
    /// Whether the record on disk has this use; a use is written there later, by
    /// [`Sessions::record_uses`](super::Sessions::record_uses), not on the request's path.
    recorded: bool,
}

/// A session held for one run, or for a change to its files from outside a run: while it
/// lives no other takes the session, and the sweeper leaves it alone. Dropped, it marks the
/// session used, so a session's idle time counts from the end of its last run, not its start.
#[derive(Debug)]
pub struct RunGuard {
    session: Arc<Session>,
    _lock: OwnedMutexGuard<()>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this): the sweeper sees either the
        // lock taken or the session just used.
        self.session.touch();
    }
}

impl Session {
    /// The session `id` its record describes, idle since the record's last use as `now` sees
    /// it.
    pub(super) fn new(shared: &Arc<Shared>, id: &str, record: &Record, now: SystemTime) -> Session {
        let before = now.duration_since(record.last_used()).unwrap_or_default();
        Session {
            id: id.to_string(),
            dir: shared.cfg.root.join(id),
            owner: record.owner.clone(),
            shared: Arc::clone(shared),
            used: Mutex::new(Use {
                at: Instant::now(),
                before,
                recorded: true,
            }),
            uid: record.uid,
            run: Arc::new(tokio::sync::Mutex::new(())),
            ledger: Arc::default(),
        }
    }

    /// Waits until no other run uses the session and holds it for this one; while the guard
    /// lives the sweeper leaves the session alone. Marks it used now and when the guard drops.
    pub async fn lock(self: &Arc<Self>) -> RunGuard {
        let guard = Arc::clone(&self.run).lock_owned().await;
        self.touch();
        RunGuard {
            session: Arc::clone(self),
            _lock: guard,
        }
    }

    /// Marks the session used now. In memory only (no system call, so async code may call it):
    /// the store writes it to the session's record at its next sweep and at shutdown
    /// ([`Sessions::record_uses`](super::Sessions::record_uses)), so a restarted sidecar adopts
    /// the session with its idle time.
    pub fn touch(&self) {
        *lock(&self.used) = Use {
            at: Instant::now(),
            before: Duration::ZERO,
            recorded: false,
        };
    }

    /// How long since the session was last used.
    pub fn idle(&self) -> Duration {
        let used = *lock(&self.used);
        used.at.elapsed() + used.before
    }

    /// The uid the session's runs get, when one is kept
    /// (`SessionConfig::uids`: leased when the session was made, kept in its record).
    pub fn uid(&self) -> Option<u32> {
        self.uid
    }

    /// Whom the folders and files the store makes in this session are given to: the
    /// session's own uid (its gid the same number), else the run user's; `None`: the sidecar
    /// keeps them.
    pub(super) fn file_ids(&self) -> Option<(u32, u32)> {
        self.uid().map(|u| (u, u)).or(self.shared.cfg.owner)
    }

    /// What the session's record should say as `now` sees it: its owner, uid and last use.
    pub(super) fn record(&self, now: SystemTime) -> Record {
        let used = now
            .checked_sub(self.idle())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Record::new(&self.owner, used, self.uid())
    }

    /// Whether a use is not in the record yet; it counts as written from now on (a use
    /// meanwhile makes it unwritten again), and [`unrecorded`](Session::unrecorded) undoes
    /// this when the write fails.
    pub(super) fn take_unrecorded(&self) -> bool {
        let mut used = lock(&self.used);
        !std::mem::replace(&mut used.recorded, true)
    }

    /// Whether a use is not in the record yet.
    pub(super) fn is_unrecorded(&self) -> bool {
        !lock(&self.used).recorded
    }

    /// Counts the last use as not in the record (a write of it failed).
    pub(super) fn unrecorded(&self) {
        lock(&self.used).recorded = false;
    }

    /// The session folder, opened from the root without following a link.
    pub(super) fn dir_fd(&self) -> Result<OwnedFd, SessionError> {
        let not_found = || SessionError::NotFound(self.id.clone());
        let name = fs::cstring(&self.id).map_err(|_| not_found())?;
        fs::open_dir_at(self.shared.root.as_fd(), &name).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                not_found()
            } else {
                io_error(format!(
                    "cannot open the session folder {}",
                    self.dir.display()
                ))(e)
            }
        })
    }

    /// Visits every regular file of the session (see `fs::walk`).
    pub(super) fn walk(&self, visit: impl FnMut(Option<&str>, &Stat)) -> Result<(), SessionError> {
        let top = self.dir_fd()?;
        let max_files = self.shared.cfg.max_files;
        fs::walk(top, max_files, MAX_NAME_BYTES, component_ok, visit).map_err(|e| match e {
            WalkError::TooMany => SessionError::TooManyFiles {
                id: self.id.clone(),
                max_files,
            },
            WalkError::Io(e) => io_error(format!("cannot list session {}", self.id))(e),
        })
    }

    /// Every file the session serves, by name: regular, one name only (no hard link), a name
    /// [`check_name`] accepts.
    fn plain_files(&self) -> Result<BTreeMap<String, Stat>, SessionError> {
        let mut files = BTreeMap::new();
        self.walk(|name, st| {
            if let Some(name) = name
                && st.is_plain_file()
            {
                files.insert(name.to_string(), *st);
            }
        })?;
        Ok(files)
    }

    pub(super) fn info(&self, name: &str, st: &Stat) -> FileInfo {
        FileInfo {
            id: file_id(&self.id, name),
            name: name.to_string(),
            size: st.size,
            modified: st.modified(),
        }
    }

    /// Every file the session serves, by name: regular files only, walked without following
    /// a link, and not a hard link (a file with another name, maybe outside the session).
    /// Links, fifos, sockets, files deeper than [`MAX_COMPONENTS`](super::MAX_COMPONENTS) and names [`check_name`] would
    /// refuse are left out. Past `max_files` entries: [`SessionError::TooManyFiles`].
    pub fn files(&self) -> Result<Vec<FileInfo>, SessionError> {
        Ok(self
            .plain_files()?
            .iter()
            .map(|(name, st)| self.info(name, st))
            .collect())
    }

    /// The file whose [`file_id`] is `file_id`, opened for reading as
    /// [`open_name`](Session::open_name) does; `None` when the session serves no such file.
    pub fn open(&self, file_id: &str) -> Result<Option<(FileInfo, std::fs::File)>, SessionError> {
        if file_id.len() != ID_LEN {
            return Ok(None);
        }
        // An id cannot be turned back into a name: find the file that has it.
        let name = self
            .plain_files()?
            .into_keys()
            .find(|name| self::file_id(&self.id, name) == file_id);
        match name {
            Some(name) => self.open_name(&name),
            None => Ok(None),
        }
    }

    /// The file `name` (checked by [`check_name`]) opened for reading, each folder on the way
    /// opened without following a link and the file checked on the open descriptor to be a
    /// regular file with one name. `None` when there is no such file or it is something the
    /// session does not serve (a link, fifo, socket, folder or hard link).
    pub fn open_name(&self, name: &str) -> Result<Option<(FileInfo, std::fs::File)>, SessionError> {
        let name = check_name(name)?;
        let (folders, leaf) = split_name(&name);
        let Some(dir) = self.descend(&folders, None)? else {
            return Ok(None);
        };
        let leaf = fs::cstring(leaf).map_err(io_error(format!("file name {name:?}")))?;
        match fs::open_file_at(dir.as_fd(), &leaf) {
            Ok(Some((file, st))) => Ok(Some((self.info(&name, &st), file))),
            Ok(None) | Err(Refused::NotRegular | Refused::HardLink) => Ok(None),
            Err(Refused::Io(e)) => Err(io_error(format!(
                "cannot open {name:?} in session {}",
                self.id
            ))(e)),
        }
    }

    /// Opens the folders `folders` from the session folder, each without following a link
    /// and on the session's file system. Reading (`make` is `None`): `None` when one is
    /// missing or not a folder. Writing (`make` is the full name, for messages): a missing
    /// folder is made (0700, given to the owner), a link or file in the way is an error.
    pub(super) fn descend(
        &self,
        folders: &[&str],
        make: Option<&str>,
    ) -> Result<Option<OwnedFd>, SessionError> {
        let mut dir = self.dir_fd()?;
        let dev = fs::fstat(dir.as_fd())
            .map_err(io_error(format!("cannot open session {}", self.id)))?
            .dev;
        for (i, folder) in folders.iter().enumerate() {
            let path = folders[..=i].join("/");
            let failed = |e: io::Error| {
                io_error(format!(
                    "cannot open the folder {path:?} of session {}",
                    self.id
                ))(e)
            };
            let not_a_folder = |name: &str| SessionError::BadName {
                name: shown(name),
                why: format!(
                    "{path:?} is a link or a file, not a folder; links are never followed: \
                     delete it, or {NAME_EXAMPLE}"
                ),
            };
            let part = fs::cstring(folder).map_err(failed)?;
            let mut created = false;
            let opened = match fs::open_dir_at(dir.as_fd(), &part) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && make.is_some() => {
                    match fs::mkdir_at(dir.as_fd(), &part, 0o700) {
                        Ok(()) => created = true,
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(failed(e)),
                    }
                    fs::open_dir_at(dir.as_fd(), &part)
                }
                other => other,
            };
            let next = match (opened, make) {
                (Ok(fd), _) => fd,
                (Err(e), None)
                    if e.kind() == io::ErrorKind::NotFound
                        || matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) =>
                {
                    return Ok(None);
                }
                (Err(e), Some(name))
                    if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) =>
                {
                    return Err(not_a_folder(name));
                }
                (Err(e), _) => return Err(failed(e)),
            };
            // A mount inside a session is never entered (the walk does not list it either).
            if fs::fstat(next.as_fd()).map_err(failed)?.dev != dev {
                return match make {
                    Some(name) => Err(not_a_folder(name)),
                    None => Ok(None),
                };
            }
            if created {
                fs::chmod(next.as_fd(), 0o700).map_err(failed)?;
                fs::chown(next.as_fd(), self.file_ids()).map_err(failed)?;
            }
            dir = next;
        }
        Ok(Some(dir))
    }

    /// Deletes the file `name` (checked by [`check_name`]); whether there was one. Whatever
    /// is under that name goes unless it is a folder: a link is removed, never followed, and a
    /// hard link loses only this name. Folders on the way are opened as
    /// [`open_name`](Session::open_name) does; a link among them means there is no such file.
    pub fn remove_name(&self, name: &str) -> Result<bool, SessionError> {
        let name = check_name(name)?;
        let (folders, leaf) = split_name(&name);
        let Some(dir) = self.descend(&folders, None)? else {
            return Ok(false);
        };
        let failed =
            |e: io::Error| io_error(format!("cannot delete {name:?} in session {}", self.id))(e);
        let leaf = fs::cstring(leaf).map_err(failed)?;
        let size = match fs::stat_at(dir.as_fd(), &leaf) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(failed(e)),
            Ok(st) if st.is_dir() => {
                return Err(SessionError::BadName {
                    name: shown(&name),
                    why: "is a folder; only files are deleted one by one: name a file, like \
                          \"out/report.csv\""
                        .to_string(),
                });
            }
            // What the store no longer holds once it is gone (a link, a fifo or one name of a
            // hard link frees nothing).
            Ok(st) if st.is_plain_file() => st.size,
            Ok(_) => 0,
        };
        match fs::unlink_at(dir.as_fd(), &leaf, false) {
            Ok(()) => {
                self.shared.release(size);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            // Swapped for a folder since the stat: left alone, as above.
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Ok(false),
            Err(e) => Err(failed(e)),
        }
    }

    /// Bytes and count of every regular file in the session, whatever its name or links, at
    /// any depth (measured through descriptors, `util::tree`), files being written included.
    /// Past `max_files` entries (files, folders, links): [`SessionError::TooManyFiles`]; a
    /// folder that cannot be measured (nested too deep, unreadable):
    /// [`SessionError::Unmeasurable`].
    pub fn usage(&self) -> Result<(u64, u64), SessionError> {
        self.measure(|_| None)
    }

    /// What [`usage`](Session::usage) counts, less the temporaries of the session's writers in
    /// flight, whose bytes and files its [`Ledger`] counts instead (what a run wrote into one
    /// past what its writer did still counts here): what a new writer is measured against. A
    /// file of a temporary's name that no writer holds (a crash's, a run's) counts as any file.
    pub(super) fn measured(&self) -> Result<(u64, u64), SessionError> {
        self.measure(|st| {
            lock(&self.ledger.writes)
                .temps
                .get(&(st.dev, st.ino))
                .copied()
        })
    }

    /// Bytes and count of the regular files, `in_flight` saying of each whether it is a
    /// writer's temporary and how much its writer wrote.
    fn measure(
        &self,
        in_flight: impl Fn(&Stat) -> Option<u64>,
    ) -> Result<(u64, u64), SessionError> {
        let top = self.dir_fd()?;
        let max_files = self.shared.cfg.max_files;
        let (mut bytes, mut files, mut entries) = (0u64, 0u64, 0u64);
        tree::measure(top, |st| {
            entries += 1;
            if entries > max_files {
                return ControlFlow::Break(());
            }
            if st.is_regular() {
                match in_flight(st) {
                    Some(written) => bytes += st.size.saturating_sub(written),
                    None => {
                        bytes += st.size;
                        files += 1;
                    }
                }
            }
            ControlFlow::Continue(())
        })
        .map_err(|why| SessionError::Unmeasurable {
            id: self.id.clone(),
            why,
        })?;
        if entries > max_files {
            return Err(SessionError::TooManyFiles {
                id: self.id.clone(),
                max_files,
            });
        }
        Ok((bytes, files))
    }

    /// Every file the session serves ([`files`](Session::files)) with its size, mtime and
    /// inode, to compare with later.
    pub fn snapshot(&self) -> Result<Snapshot, SessionError> {
        let files = self
            .plain_files()?
            .into_iter()
            .map(|(name, st)| (name, Stamp::of(&st)))
            .collect();
        Ok(Snapshot { files })
    }

    /// The files the session serves now that are not in `before` or differ from it in size,
    /// mtime or inode: what a run wrote. A run can hide a change by restoring the mtime;
    /// that only hides its own output.
    pub fn changed_since(&self, before: &Snapshot) -> Result<Vec<FileInfo>, SessionError> {
        Ok(self
            .plain_files()?
            .iter()
            .filter(|(name, st)| before.files.get(*name) != Some(&Stamp::of(st)))
            .map(|(name, st)| self.info(name, st))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testing::{Scratch, mode, names};
    use pretty_assertions::assert_eq;
    use std::ffi::CString;
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, symlink};

    fn read(file: &mut std::fs::File) -> String {
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn files_round_trip_through_nested_folders() {
        let scratch = Scratch::new();
        let sessions = scratch.sessions();
        let s = sessions.open("sess1").unwrap();
        assert_eq!(s.dir, scratch.root().join("sess1"));
        let mut f = s.writer("out/deep/r.csv").unwrap();
        f.append(b"1,2\n").unwrap();
        f.finish().unwrap();
        let info = s.write("/mnt/data/a.txt", &mut &b"hello"[..]).unwrap();
        assert_eq!(
            (info.id.as_str(), info.name.as_str(), info.size),
            ("YhGHXcz94DrKQASFzCg0B", "a.txt", 5)
        );

        let files = s.files().unwrap();
        assert_eq!(names(&files), ["a.txt", "out/deep/r.csv"]);
        assert_eq!(files[0], info);
        assert_eq!(files[1].id, file_id("sess1", "out/deep/r.csv"));
        assert_eq!(files[1].size, 4);

        let (found, mut file) = s.open(&info.id).unwrap().unwrap();
        assert_eq!(found, info);
        assert_eq!(read(&mut file), "hello");
        let (found, mut file) = s.open_name("./out//deep/r.csv").unwrap().unwrap();
        assert_eq!(found.name, "out/deep/r.csv");
        assert_eq!(read(&mut file), "1,2\n");
        assert!(s.open_name("missing.txt").unwrap().is_none());
        assert!(s.open_name("out/missing/x").unwrap().is_none());
        assert!(s.open(&file_id("sess1", "missing.txt")).unwrap().is_none());
        assert!(s.open("not-an-id").unwrap().is_none());
        assert!(matches!(
            s.open_name("../x"),
            Err(SessionError::BadName { .. })
        ));

        assert_eq!(mode(&scratch.root()), 0o711);
        assert_eq!(mode(&s.dir), 0o700);
        assert_eq!(mode(&s.dir.join("out/deep")), 0o700);
        assert_eq!(mode(&s.dir.join("out/deep/r.csv")), 0o600);
        assert_eq!(s.usage().unwrap(), (9, 2));

        // Writing again replaces the contents.
        let info = s.write("a.txt", &mut &b"hi"[..]).unwrap();
        assert_eq!(info.size, 2);
        assert_eq!(std::fs::read(s.dir.join("a.txt")).unwrap(), b"hi");
        // A session opened twice is the same session.
        assert!(Arc::ptr_eq(&s, &sessions.open("sess1").unwrap()));
        assert!(Arc::ptr_eq(&s, &sessions.get("sess1").unwrap()));
        assert!(sessions.get("other").is_none());
        assert!(sessions.get("../x").is_none());
    }

    #[test]
    fn a_link_to_a_file_outside_is_neither_listed_nor_opened_nor_written() {
        let scratch = Scratch::new();
        let secret = scratch.outside().join("secret.txt");
        std::fs::write(&secret, "secret").unwrap();
        let s = scratch.sessions().open("s").unwrap();
        s.write("plain.txt", &mut &b"ok"[..]).unwrap();
        symlink(&secret, s.dir.join("link.txt")).unwrap();
        symlink("/etc/shadow", s.dir.join("shadow")).unwrap();

        assert_eq!(names(&s.files().unwrap()), ["plain.txt"]);
        assert!(s.open_name("link.txt").unwrap().is_none());
        assert!(s.open_name("shadow").unwrap().is_none());
        assert!(s.open(&file_id("s", "link.txt")).unwrap().is_none());
        assert!(matches!(
            s.writer("link.txt"),
            Err(SessionError::BadName { .. })
        ));
        let err = s.write("link.txt", &mut &b"pwned"[..]).unwrap_err();
        assert!(err.to_string().contains("link"), "{err}");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
        // The link is left as it was.
        assert!(
            std::fs::symlink_metadata(s.dir.join("link.txt"))
                .unwrap()
                .is_symlink()
        );
    }

    #[test]
    fn a_linked_folder_is_neither_walked_nor_written_through() {
        let scratch = Scratch::new();
        let outside = scratch.outside().join("dir");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("inner.txt"), "x").unwrap();
        let sessions = scratch.sessions();
        let s = sessions.open("s").unwrap();
        symlink(&outside, s.dir.join("a")).unwrap();
        std::fs::create_dir(s.dir.join("real")).unwrap();
        symlink(&outside, s.dir.join("real/b")).unwrap();

        assert_eq!(names(&s.files().unwrap()), Vec::<&str>::new());
        assert!(s.open_name("a/inner.txt").unwrap().is_none());
        assert!(s.open_name("real/b/inner.txt").unwrap().is_none());
        for name in ["a/x", "real/b/x", "a/new/x"] {
            let err = s.writer(name).unwrap_err();
            assert!(
                matches!(&err, SessionError::BadName { why, .. } if why.contains("not a folder")),
                "{name}: {err}"
            );
            assert!(s.write(name, &mut &b"x"[..]).is_err(), "{name}");
        }
        let mut left: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["inner.txt"]);

        // A session folder that is itself a link is refused, not followed.
        symlink(&outside, scratch.root().join("evil")).unwrap();
        assert!(sessions.open("evil").is_err());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn remove_name_deletes_one_entry_and_never_follows_a_link() {
        let scratch = Scratch::new();
        let outside = scratch.outside().join("dir");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("inner.txt"), "keep").unwrap();
        let s = scratch.sessions().open("s").unwrap();
        s.write("out/a.txt", &mut &b"x"[..]).unwrap();
        symlink(outside.join("inner.txt"), s.dir.join("link.txt")).unwrap();
        symlink(&outside, s.dir.join("linked")).unwrap();

        assert!(s.remove_name("/mnt/data/out/a.txt").unwrap());
        assert!(!s.dir.join("out/a.txt").exists() && s.dir.join("out").is_dir());
        assert!(!s.remove_name("out/a.txt").unwrap());
        assert!(!s.remove_name("missing/a.txt").unwrap());
        assert!(s.remove_name("link.txt").unwrap());
        assert!(!s.remove_name("linked/inner.txt").unwrap());
        assert!(matches!(
            s.remove_name("out"),
            Err(SessionError::BadName { .. })
        ));
        assert!(matches!(
            s.remove_name("../x"),
            Err(SessionError::BadName { .. })
        ));
        assert_eq!(
            std::fs::read_to_string(outside.join("inner.txt")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn a_fifo_is_skipped_and_never_blocks() {
        use std::os::unix::fs::FileTypeExt;
        let scratch = Scratch::new();
        let s = scratch.sessions().open("s").unwrap();
        s.write("plain.txt", &mut &b"ok"[..]).unwrap();
        let fifo = CString::new(s.dir.join("pipe").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);

        assert_eq!(names(&s.files().unwrap()), ["plain.txt"]);
        assert!(s.open_name("pipe").unwrap().is_none());
        assert!(matches!(
            s.writer("pipe"),
            Err(SessionError::BadName { .. })
        ));
        assert_eq!(s.usage().unwrap(), (2, 1));
        assert!(
            std::fs::symlink_metadata(s.dir.join("pipe"))
                .unwrap()
                .file_type()
                .is_fifo()
        );
    }

    #[test]
    fn a_hard_link_is_refused() {
        let scratch = Scratch::new();
        let secret = scratch.outside().join("secret.txt");
        std::fs::write(&secret, "secret").unwrap();
        let s = scratch.sessions().open("s").unwrap();
        s.write("orig.txt", &mut &b"mine"[..]).unwrap();
        std::fs::hard_link(s.dir.join("orig.txt"), s.dir.join("twin.txt")).unwrap();
        std::fs::hard_link(&secret, s.dir.join("hl.txt")).unwrap();
        assert_eq!(std::fs::metadata(&secret).unwrap().nlink(), 2);

        assert_eq!(names(&s.files().unwrap()), Vec::<&str>::new());
        for name in ["orig.txt", "twin.txt", "hl.txt"] {
            assert!(s.open_name(name).unwrap().is_none(), "{name}");
            assert!(s.open(&file_id("s", name)).unwrap().is_none(), "{name}");
        }
        let err = s.writer("hl.txt").unwrap_err();
        assert!(err.to_string().contains("hard link"), "{err}");
        assert!(s.write("hl.txt", &mut &b"pwned"[..]).is_err());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
        // Counted all the same: they take room.
        assert_eq!(s.usage().unwrap(), (4 + 4 + 6, 3));
    }

    #[test]
    fn changed_since_reports_new_and_changed_files_only() {
        let scratch = Scratch::new();
        let s = scratch.sessions().open("s").unwrap();
        for name in ["keep.txt", "grow.txt", "replace.txt", "retime.txt"] {
            s.write(name, &mut &b"same"[..]).unwrap();
        }
        let before = s.snapshot().unwrap();
        assert_eq!(before.len(), 4);
        assert!(before.contains("keep.txt") && !before.is_empty());

        s.write("grow.txt", &mut &b"longer"[..]).unwrap();
        s.write("sub/new.txt", &mut &b"new"[..]).unwrap();
        // Same size and contents, another inode.
        std::fs::write(s.dir.join("tmp"), "same").unwrap();
        std::fs::rename(s.dir.join("tmp"), s.dir.join("replace.txt")).unwrap();
        std::fs::File::options()
            .write(true)
            .open(s.dir.join("retime.txt"))
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .unwrap();

        let changed = s.changed_since(&before).unwrap();
        assert_eq!(
            names(&changed),
            ["grow.txt", "replace.txt", "retime.txt", "sub/new.txt"]
        );
        assert_eq!(changed[0].size, 6);
        assert!(s.changed_since(&s.snapshot().unwrap()).unwrap().is_empty());
        assert_eq!(
            names(&s.changed_since(&Snapshot::default()).unwrap()).len(),
            5
        );
    }
}
