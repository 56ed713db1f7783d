//! The session store: folders that live across the runs naming the same session id
//! (LibreChat's code API "session", later the sidecar's own). Runs write files into a session;
//! the control API lists, uploads and downloads them.
//!
//! Owns the session root ([`SessionConfig::root`](crate::session::SessionConfig::root)) and one
//! folder per session in it, when each session was last used, the one-run-at-a-time lock, and
//! the sweeper that removes idle sessions. It must not know runs or HTTP, and imports only
//! [`crate::util`].
//!
//! The run user writes into its session folder while a run lives, and that code is hostile:
//! every access inside a session goes through `fs`, which walks from directory descriptors and
//! never follows a link (its module doc says how). The root is the sidecar's, mode 0711: the
//! run user can pass through it to its session but cannot list it or replace `root/<id>`, so
//! that entry is ours; everything below it is not.
//!
//! Every method but [`Session::lock`](crate::session::Session::lock) makes blocking file system
//! calls: async code calls them through `spawn_blocking`.

mod fs;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::util::lock;
use fs::{Refused, Stat, WalkError};

/// Characters of a new session id and of a file id: LibreChat's download route accepts
/// exactly 21 of `[A-Za-z0-9_-]` (a nanoid).
pub const ID_LEN: usize = 21;

/// Longest session id accepted from a client.
pub const MAX_ID_LEN: usize = 64;

/// Longest file name, in bytes, so a name fits in a path buffer with the root before it.
pub const MAX_NAME_BYTES: usize = 1024;

/// Longest component of a file name, in bytes (what Linux file systems allow).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Components a file name may have: the walk holds one descriptor per folder and goes no
/// deeper, so a file further down is neither listed nor written.
pub const MAX_COMPONENTS: usize = fs::MAX_DEPTH;

/// Where LibreChat tells the model its files live: a name under it is that name in the session.
pub const MOUNT_PREFIX: &str = "/mnt/data/";

/// What [`Session::write`] copies at a time: the most it holds in memory per upload.
const COPY_CHUNK: usize = 64 << 10;

/// A removed session's folder is renamed to this and a random suffix before its tree is
/// deleted, so the id is free at once. '.' is not in an id: a trash folder is never taken for a
/// session, and one left by a crash is deleted by the next [`Sessions::new`].
const TRASH_PREFIX: &str = ".trash-";

/// The sweeper runs at least this far apart, however short the TTL (a TTL of milliseconds in
/// a test must not spin a core)...
const SWEEP_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// ...and at least this often, so a session outlives its TTL by at most this.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// Characters of a client's id or name an error message repeats (a 1 MB name is not echoed).
const SHOWN_CHARS: usize = 80;

/// The URL-safe base64 alphabet: ids are 6 random or hashed bits per character.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

const NAME_EXAMPLE: &str = r#"name a file inside the session, like "out/report.csv""#;

/// Where sessions live and how much each may hold.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The folder holding one folder per session; made with mode 0711 when missing.
    pub root: PathBuf,
    /// Idle time after which the sweeper removes a session (`PTC_SESSION_TTL`).
    pub ttl: Duration,
    /// Bytes of regular files a session may hold, for the store's own writes
    /// (`PTC_SESSION_MAX_MB` << 20).
    pub max_bytes: u64,
    /// Entries (files, folders, links) a walk of a session visits before it stops with
    /// [`SessionError::TooManyFiles`] (`PTC_SESSION_MAX_FILES`).
    pub max_files: u64,
    /// The uid and gid (the run user's) that session folders and the files the store writes
    /// are given to; `None` leaves them to the sidecar's user.
    pub owner: Option<(u32, u32)>,
}

/// Why a session operation failed; every message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A session id that is not 1 to 64 characters of `[A-Za-z0-9_-]`.
    #[error("session id {id:?}: {why}")]
    BadId { id: String, why: String },
    /// A file name [`check_name`] refuses, or one whose path holds a link, a file where a
    /// folder should be, or something that is not a plain file.
    #[error("file name {name:?}: {why}")]
    BadName { name: String, why: String },
    /// A write that would take the session past `max_bytes`.
    #[error(
        "writing {name:?} would take session {id} past its quota of {max_bytes} bytes \
         (PTC_SESSION_MAX_MB): the session holds {used} bytes and the file has at least \
         {incoming}; delete files from the session, or raise PTC_SESSION_MAX_MB"
    )]
    Quota {
        id: String,
        name: String,
        used: u64,
        incoming: u64,
        max_bytes: u64,
    },
    /// A session with more entries than `max_files` (a walk stops there).
    #[error(
        "session {id} holds more than {max_files} files, folders and links \
         (PTC_SESSION_MAX_FILES): delete some, keep fewer larger files (an archive), or raise \
         PTC_SESSION_MAX_FILES"
    )]
    TooManyFiles { id: String, max_files: u64 },
    /// The session (its id here) has no folder any more.
    #[error(
        "session {0:?} does not exist (a session is removed after PTC_SESSION_TTL without \
         use): start a new session and upload its files again"
    )]
    NotFound(String),
    /// A file system call failed: `context` says on what.
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> SessionError {
    move |source| SessionError::Io {
        context: context.into(),
        source,
    }
}

/// At most [`SHOWN_CHARS`] of `text`, for an error message.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

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

/// The id under which a session serves the file `name`: 21 characters of `[A-Za-z0-9_-]`,
/// the URL-safe base64 of SHA-256(`session_id` "/" `name`) cut to 126 bits. The same name in
/// the same session always has the same id, so an id handed out before a run still finds the
/// file after it; a session id has no '/', so no two pairs hash the same input.
pub fn file_id(session_id: &str, name: &str) -> String {
    let digest = Sha256::new()
        .chain_update(session_id.as_bytes())
        .chain_update(b"/")
        .chain_update(name.as_bytes())
        .finalize();
    let mut id = base64url(&digest[..16]);
    id.truncate(ID_LEN);
    id
}

/// Unpadded URL-safe base64.
fn base64url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(char::from(ALPHABET[((acc >> bits) & 63) as usize]));
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (6 - bits)) & 63) as usize]));
    }
    out
}

/// Checks a file name from a client or the model and returns it normalized: a relative path,
/// components joined by one '/', a leading `./` dropped, and a leading [`MOUNT_PREFIX`]
/// (`/mnt/data/`) dropped. Refused: empty, absolute, a `.` or `..` component, a control
/// character (NUL included), a backslash, a trailing '/', a component over
/// [`MAX_COMPONENT_BYTES`], more than [`MAX_COMPONENTS`] folders, over [`MAX_NAME_BYTES`] in all.
pub fn check_name(name: &str) -> Result<String, SessionError> {
    let bad = |why: String| SessionError::BadName {
        name: shown(name),
        why,
    };
    // Bounds the work below for a name of any length.
    if name.len() > MOUNT_PREFIX.len() + 2 * MAX_NAME_BYTES {
        return Err(bad(format!(
            "is {} bytes long; a name is at most {MAX_NAME_BYTES} bytes: {NAME_EXAMPLE}",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(bad(format!(
            "contains the control character {c:?}: {NAME_EXAMPLE}"
        )));
    }
    if name.contains('\\') {
        return Err(bad(format!(
            r#"contains a backslash; folders are separated by "/": {NAME_EXAMPLE}"#
        )));
    }
    let relative = name.strip_prefix(MOUNT_PREFIX).unwrap_or(name);
    if relative.starts_with('/') {
        return Err(bad(format!(
            r#"is an absolute path: {NAME_EXAMPLE} (or "/mnt/data/out/report.csv")"#
        )));
    }
    if relative.ends_with('/') {
        return Err(bad(format!(
            "ends with \"/\", so it names a folder: {NAME_EXAMPLE}"
        )));
    }
    let mut parts = Vec::new();
    for part in relative.split('/') {
        match part {
            // Duplicate '/' and a leading "./" change nothing.
            "" => {}
            "." if parts.is_empty() => {}
            "." | ".." => return Err(bad(format!("{part:?} is not allowed: {NAME_EXAMPLE}"))),
            _ if part.len() > MAX_COMPONENT_BYTES => {
                return Err(bad(format!(
                    "has a component of {} bytes; each is at most {MAX_COMPONENT_BYTES}: \
                     {NAME_EXAMPLE}",
                    part.len()
                )));
            }
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(bad(format!("names no file: {NAME_EXAMPLE}")));
    }
    if parts.len() > MAX_COMPONENTS {
        return Err(bad(format!(
            "is {} components deep; a name has at most {MAX_COMPONENTS}: {NAME_EXAMPLE}",
            parts.len()
        )));
    }
    let normalized = parts.join("/");
    if normalized.len() > MAX_NAME_BYTES {
        return Err(bad(format!(
            "is {} bytes long; a name is at most {MAX_NAME_BYTES} bytes: {NAME_EXAMPLE}",
            normalized.len()
        )));
    }
    Ok(normalized)
}

/// Whether an entry name read from a session folder is a component [`check_name`] accepts, so
/// a listed file can be opened by its name.
fn component_ok(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part.len() <= MAX_COMPONENT_BYTES
        && !part.chars().any(|c| c.is_control() || c == '\\')
}

/// How often the sweeper runs for a TTL: a quarter of it, within
/// [[`SWEEP_AT_MOST_EVERY`], [`SWEEP_AT_LEAST_EVERY`]].
fn sweep_every(ttl: Duration) -> Duration {
    (ttl / 4).clamp(SWEEP_AT_MOST_EVERY, SWEEP_AT_LEAST_EVERY)
}

/// What every session shares: the configuration and the root folder, held open so every
/// session folder is reached from it with `openat`.
#[derive(Debug)]
struct Shared {
    cfg: SessionConfig,
    root: OwnedFd,
}

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

    /// Deletes a trash folder; a failure is logged (the next start retries).
    fn empty_trash(&self, id: &str, trash: &CString) {
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
        let shared = Arc::new(Shared { cfg, root });
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

    /// A fresh session id: [`ID_LEN`] random characters of `[A-Za-z0-9_-]`, 126 bits.
    pub fn new_id() -> String {
        let mut random = [0u8; ID_LEN];
        rand::fill(&mut random);
        // 64 divides 256, so every character is equally likely.
        random
            .iter()
            .map(|b| char::from(ALPHABET[usize::from(b & 63)]))
            .collect()
    }

    /// Checks a session id from a client: 1 to [`MAX_ID_LEN`] characters of `[A-Za-z0-9_-]`,
    /// so it is one safe path component.
    pub fn check_id(id: &str) -> Result<(), SessionError> {
        let bad = |why: String| SessionError::BadId { id: shown(id), why };
        const FIX: &str =
            "use the session_id a previous run returned, or none to start a new session";
        if id.is_empty() {
            return Err(bad(format!("is empty: {FIX}")));
        }
        if id.len() > MAX_ID_LEN {
            return Err(bad(format!(
                "is {} bytes long; an id is at most {MAX_ID_LEN} characters: {FIX}",
                id.len()
            )));
        }
        if let Some(c) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(bad(format!(
                "contains {c:?}; an id has only letters, digits, '_' and '-': {FIX}"
            )));
        }
        Ok(())
    }

    /// The session `id`, made (folder mode 0700, given to the owner) if it does not exist,
    /// marked used now.
    pub fn open(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        Self::check_id(id)?;
        let mut sessions = lock(&self.inner.sessions);
        // Under the map's lock, so a concurrent remove cannot rename the folder between this
        // and the insert.
        self.inner.shared.ensure_dir(id)?;
        let session = sessions
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Session::new(&self.inner.shared, id, Duration::ZERO)))
            .clone();
        drop(sessions);
        session.touch();
        Ok(session)
    }

    /// The session `id` if it exists (a bad id is just not there), marked used now.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        Self::check_id(id).ok()?;
        let session = lock(&self.inner.sessions).get(id).cloned()?;
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
            (known, self.inner.shared.to_trash(id))
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
    while let Some(name) = entries.next_name()? {
        let Ok(id) = name.to_str() else { continue };
        if id.starts_with(TRASH_PREFIX) {
            shared.empty_trash(id, &name);
            continue;
        }
        if Sessions::check_id(id).is_err() {
            continue;
        }
        match fs::stat_at(root, &name) {
            Ok(st) if st.is_dir() => {
                let idle = now.duration_since(st.modified()).unwrap_or_default();
                let session = Session::new(shared, id, idle);
                sessions.insert(id.to_string(), Arc::new(session));
            }
            _ => tracing::warn!(
                entry = id,
                "the session root holds something that is not a folder; left alone"
            ),
        }
    }
    Ok(sessions)
}

/// One session: its folder, when it was last used, and the lock a run holds.
#[derive(Debug)]
pub struct Session {
    /// Checked by [`Sessions::check_id`]: one safe path component.
    pub id: String,
    /// `root/<id>`, for the runner to hand to a run (its working folder, its Landlock rule).
    /// The store itself never uses this path: it opens the folder from the root's descriptor.
    pub dir: PathBuf,
    shared: Arc<Shared>,
    /// When last used: an instant, plus how long it had been idle by then (an adopted session
    /// was idle before this process started).
    used: Mutex<(Instant, Duration)>,
    run: Arc<tokio::sync::Mutex<()>>,
}

/// A file made by [`Session::create_at`], with what removing it again takes.
struct Created {
    dir: OwnedFd,
    leaf: CString,
    file: std::fs::File,
    ino: u64,
}

impl Created {
    /// Removes the file, if the name still is the one we made.
    fn discard(self) {
        drop(self.file);
        if fs::stat_at(self.dir.as_fd(), &self.leaf).is_ok_and(|st| st.ino == self.ino) {
            let _ = fs::unlink_at(self.dir.as_fd(), &self.leaf, false);
        }
    }
}

/// Why [`copy_capped`] stopped.
enum CopyError {
    /// The input had at least this many bytes, more than there is room for.
    Quota(u64),
    Read(io::Error),
    Write(io::Error),
}

/// Copies `reader` to `file` while it fits in `room` bytes; the bytes copied.
fn copy_capped(
    reader: &mut impl Read,
    file: &mut std::fs::File,
    room: u64,
) -> Result<u64, CopyError> {
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut copied: u64 = 0;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(copied),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        let total = copied + n as u64;
        if total > room {
            return Err(CopyError::Quota(total));
        }
        file.write_all(&buf[..n]).map_err(CopyError::Write)?;
        copied = total;
    }
}

impl Session {
    fn new(shared: &Arc<Shared>, id: &str, idle: Duration) -> Session {
        Session {
            id: id.to_string(),
            dir: shared.cfg.root.join(id),
            shared: Arc::clone(shared),
            used: Mutex::new((Instant::now(), idle)),
            run: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Waits until no other run uses the session and holds it for this one; while the guard
    /// lives the sweeper leaves the session alone. Marks it used; the runner should
    /// [`touch`](Session::touch) it again when the run ends.
    pub async fn lock(self: &Arc<Self>) -> tokio::sync::OwnedMutexGuard<()> {
        let guard = Arc::clone(&self.run).lock_owned().await;
        self.touch();
        guard
    }

    /// Marks the session used now, also on disk (the folder's mtime), so a restarted sidecar
    /// adopts it with the right idle time.
    pub fn touch(&self) {
        *lock(&self.used) = (Instant::now(), Duration::ZERO);
        if let Ok(name) = fs::cstring(&self.id) {
            // Best effort: only the idle time after a restart depends on it.
            let _ = fs::touch_at(self.shared.root.as_fd(), &name);
        }
    }

    /// How long since the session was last used.
    pub fn idle(&self) -> Duration {
        let (at, before) = *lock(&self.used);
        at.elapsed() + before
    }

    /// The session folder, opened from the root without following a link.
    fn dir_fd(&self) -> Result<OwnedFd, SessionError> {
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
    fn walk(&self, visit: impl FnMut(Option<&str>, &Stat)) -> Result<(), SessionError> {
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

    fn info(&self, name: &str, st: &Stat) -> FileInfo {
        FileInfo {
            id: file_id(&self.id, name),
            name: name.to_string(),
            size: st.size,
            modified: st.modified(),
        }
    }

    /// Every file the session serves, by name: regular files only, walked without following
    /// a link, and not a hard link (a file with another name, maybe outside the session).
    /// Links, fifos, sockets, files deeper than [`MAX_COMPONENTS`] and names [`check_name`] would
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
    fn descend(
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
                fs::chown(next.as_fd(), self.shared.cfg.owner).map_err(failed)?;
            }
            dir = next;
        }
        Ok(Some(dir))
    }

    /// Creates (or empties) the file `name` and what it needs to be removed again.
    fn create_at(&self, name: &str) -> Result<Created, SessionError> {
        let (folders, leaf) = split_name(name);
        let Some(dir) = self.descend(&folders, Some(name))? else {
            // descend makes what is missing, so it always has a folder when making.
            return Err(SessionError::NotFound(self.id.clone()));
        };
        let failed =
            |e: io::Error| io_error(format!("cannot create {name:?} in session {}", self.id))(e);
        let bad = |why: &str| SessionError::BadName {
            name: shown(name),
            why: why.to_string(),
        };
        let leaf = fs::cstring(leaf).map_err(failed)?;
        match fs::create_file_at(dir.as_fd(), &leaf, self.shared.cfg.owner) {
            Ok((file, st)) => Ok(Created {
                dir,
                leaf,
                file,
                ino: st.ino,
            }),
            Err(Refused::NotRegular) => Err(bad(
                "is a folder, link, fifo or socket, not a file: delete it, or pick another name",
            )),
            Err(Refused::HardLink) => Err(bad(
                "is a hard link (the file has another name, maybe outside the session) and the \
                 session never writes through one: delete it, or pick another name",
            )),
            Err(Refused::Io(e)) => Err(failed(e)),
        }
    }

    /// Creates the file `name` (checked by [`check_name`]) for writing, or empties it if it
    /// exists: missing folders made (0700), each folder opened without following a link, the
    /// file opened with `O_NOFOLLOW`, mode 0600, both given to the owner. A link, fifo, socket,
    /// folder or hard link under that name is refused and left untouched. The quota is
    /// [`write`](Session::write)'s job, not this one's.
    pub fn create(&self, name: &str) -> Result<std::fs::File, SessionError> {
        let name = check_name(name)?;
        Ok(self.create_at(&name)?.file)
    }

    /// Writes all of `reader` to the file `name` as [`create`](Session::create) does, within
    /// the quota: what the session already holds (less the file being replaced) plus what is
    /// written may not pass `max_bytes`, and a new file may not pass `max_files`. On any
    /// failure the partial file is removed (a file it replaced is gone too). Two writes at once
    /// are each measured against what was there before both: callers write under
    /// [`lock`](Session::lock) when that matters.
    pub fn write(&self, name: &str, reader: &mut impl Read) -> Result<FileInfo, SessionError> {
        let name = check_name(name)?;
        let (mut used, mut files, mut replaced) = (0u64, 0u64, None);
        self.walk(|path, st| {
            used += st.size;
            files += 1;
            if path == Some(name.as_str()) && st.is_plain_file() {
                replaced = Some(st.size);
            }
        })?;
        let max = &self.shared.cfg;
        if replaced.is_none() && files >= max.max_files {
            return Err(SessionError::TooManyFiles {
                id: self.id.clone(),
                max_files: max.max_files,
            });
        }
        let used = used.saturating_sub(replaced.unwrap_or(0));
        let mut created = self.create_at(&name)?;
        let copied = copy_capped(
            reader,
            &mut created.file,
            max.max_bytes.saturating_sub(used),
        );
        let failed = |what: &str, e: io::Error| {
            io_error(format!("cannot {what} {name:?} in session {}", self.id))(e)
        };
        let error = match copied {
            Ok(_) => match fs::fstat(created.file.as_fd()) {
                Ok(st) => return Ok(self.info(&name, &st)),
                Err(e) => failed("write", e),
            },
            Err(CopyError::Quota(incoming)) => SessionError::Quota {
                id: self.id.clone(),
                name: shown(&name),
                used,
                incoming,
                max_bytes: max.max_bytes,
            },
            Err(CopyError::Read(e)) => failed("read the upload for", e),
            Err(CopyError::Write(e)) => failed("write", e),
        };
        created.discard();
        Err(error)
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
        match fs::stat_at(dir.as_fd(), &leaf) {
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
            Ok(_) => {}
        }
        match fs::unlink_at(dir.as_fd(), &leaf, false) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            // Swapped for a folder since the stat: left alone, as above.
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Ok(false),
            Err(e) => Err(failed(e)),
        }
    }

    /// Bytes and count of every regular file in the session, whatever its name or links (what
    /// it takes on disk, as far as the walk reaches).
    pub fn usage(&self) -> Result<(u64, u64), SessionError> {
        let (mut bytes, mut files) = (0u64, 0u64);
        self.walk(|_, st| {
            bytes += st.size;
            files += 1;
        })?;
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

/// A checked name's folders and its last component.
fn split_name(name: &str) -> (Vec<&str>, &str) {
    let mut parts: Vec<&str> = name.split('/').collect();
    let leaf = parts.pop().unwrap_or(name);
    (parts, leaf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::collections::HashSet;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

    /// A private folder under the temp dir holding a session root and an "outside" folder,
    /// deleted when dropped.
    struct Scratch {
        base: PathBuf,
    }

    impl Scratch {
        fn new() -> Scratch {
            let base = crate::util::private_dir(&std::env::temp_dir(), "ptc-session-test")
                .expect("temp dir");
            std::fs::create_dir(base.join("outside")).unwrap();
            Scratch { base }
        }

        fn root(&self) -> PathBuf {
            self.base.join("sessions")
        }

        fn outside(&self) -> PathBuf {
            self.base.join("outside")
        }

        fn config(&self) -> SessionConfig {
            SessionConfig {
                root: self.root(),
                ttl: Duration::from_secs(3600),
                max_bytes: 1 << 20,
                max_files: 100,
                owner: None,
            }
        }

        fn sessions(&self) -> Sessions {
            Sessions::new(self.config()).unwrap()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn names(files: &[FileInfo]) -> Vec<&str> {
        files.iter().map(|f| f.name.as_str()).collect()
    }

    fn read(file: &mut std::fs::File) -> String {
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        text
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn the_store_can_be_shared_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Sessions>();
        send_sync::<Session>();
        send_sync::<SessionError>();
    }

    #[test]
    fn new_ids_are_21_url_safe_characters_and_unique() {
        let ids: HashSet<String> = (0..1000).map(|_| Sessions::new_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), ID_LEN, "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{id}"
            );
            Sessions::check_id(id).unwrap();
        }
        // 21,000 characters: every one of the 64 shows up unless the mapping is skewed.
        let used: HashSet<char> = ids.iter().flat_map(|id| id.chars()).collect();
        assert_eq!(used.len(), 64);
    }

    #[test]
    fn check_id_takes_url_safe_ids_up_to_64_characters() {
        let long_ok = "x".repeat(64);
        for good in ["a", "A-z_09", "abc-DEF_123", long_ok.as_str()] {
            assert!(Sessions::check_id(good).is_ok(), "{good}");
        }
        let too_long = "x".repeat(65);
        for bad in [
            "",
            "../x",
            "a/b",
            too_long.as_str(),
            "a.b",
            "a b",
            "é",
            "a\0b",
            ".",
        ] {
            assert!(
                matches!(Sessions::check_id(bad), Err(SessionError::BadId { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            Sessions::check_id("a/b").unwrap_err().to_string(),
            "session id \"a/b\": contains '/'; an id has only letters, digits, '_' and '-': \
             use the session_id a previous run returned, or none to start a new session"
        );
    }

    #[test]
    fn check_name_normalizes_good_names() {
        let long_part = "p".repeat(255);
        let deepest = vec!["d"; 64].join("/");
        let cases = [
            ("a.txt", "a.txt"),
            ("/mnt/data/a.txt", "a.txt"),
            ("/mnt/data/out/r.csv", "out/r.csv"),
            ("./a.txt", "a.txt"),
            ("././a.txt", "a.txt"),
            ("out//x///y.csv", "out/x/y.csv"),
            (".hidden", ".hidden"),
            ("a..b/..c", "a..b/..c"),
            ("mnt/data/a", "mnt/data/a"),
            ("ünï/cödé.txt", "ünï/cödé.txt"),
            (long_part.as_str(), long_part.as_str()),
            (deepest.as_str(), deepest.as_str()),
        ];
        for (name, normalized) in cases {
            assert_eq!(check_name(name).unwrap(), normalized, "{name:?}");
        }
    }

    #[test]
    fn check_name_refuses_what_could_leave_the_session() {
        let long_part = "p".repeat(256);
        let too_deep = vec!["d"; 65].join("/");
        let too_long = vec!["q".repeat(250); 5].join("/");
        let huge = "h".repeat(1 << 20);
        let bad = [
            "",
            ".",
            "./",
            "..",
            "../x",
            "a/../b",
            "a/./b",
            "a/..",
            "/etc/passwd",
            "/mnt/data/",
            "/mnt/data/../x",
            "/mnt/data//etc/passwd",
            "a\\b",
            "..\\x",
            "a\0b",
            "a\nb",
            "a\u{7f}b",
            "a\u{85}b",
            "dir/",
            long_part.as_str(),
            too_deep.as_str(),
            too_long.as_str(),
            huge.as_str(),
        ];
        for name in bad {
            match check_name(name) {
                Err(SessionError::BadName {
                    name: shown_name,
                    why,
                }) => {
                    assert!(shown_name.len() <= 4 * SHOWN_CHARS + 3, "{shown_name}");
                    assert!(why.contains("like \"out/report.csv\""), "{name:?}: {why}");
                }
                other => panic!("{name:?} gave {other:?}"),
            }
        }
        assert_eq!(
            check_name("../x").unwrap_err().to_string(),
            r#"file name "../x": ".." is not allowed: name a file inside the session, like "out/report.csv""#
        );
        assert_eq!(
            check_name("a\0b").unwrap_err().to_string(),
            r#"file name "a\0b": contains the control character '\0': name a file inside the session, like "out/report.csv""#
        );
    }

    #[test]
    fn file_ids_are_deterministic_url_safe_hashes() {
        // base64url(SHA-256("sess1/a.txt"))[..21], computed with Python's hashlib and base64.
        assert_eq!(file_id("sess1", "a.txt"), "YhGHXcz94DrKQASFzCg0B");
        assert_eq!(file_id("abc", "out/report.csv"), "aqn5hIlr3GBXHfh60-IBh");
        assert_eq!(file_id("sess1", "a.txt"), file_id("sess1", "a.txt"));
        assert_ne!(file_id("sess1", "a.txt"), file_id("sess2", "a.txt"));
        assert_ne!(file_id("sess1", "a.txt"), file_id("sess1", "b.txt"));
        let ids: HashSet<String> = (0..1000).map(|i| file_id("s", &format!("f{i}"))).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), ID_LEN);
            Sessions::check_id(id).unwrap();
        }
    }

    #[test]
    fn files_round_trip_through_nested_folders() {
        let scratch = Scratch::new();
        let sessions = scratch.sessions();
        let s = sessions.open("sess1").unwrap();
        assert_eq!(s.dir, scratch.root().join("sess1"));
        let mut f = s.create("out/deep/r.csv").unwrap();
        f.write_all(b"1,2\n").unwrap();
        drop(f);
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
            s.create("link.txt"),
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
            let err = s.create(name).unwrap_err();
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
            s.create("pipe"),
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
        let err = s.create("hl.txt").unwrap_err();
        assert!(err.to_string().contains("hard link"), "{err}");
        assert!(s.write("hl.txt", &mut &b"pwned"[..]).is_err());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
        // Counted all the same: they take room.
        assert_eq!(s.usage().unwrap(), (4 + 4 + 6, 3));
    }

    #[test]
    fn the_quota_refuses_a_write_and_leaves_no_partial_file() {
        let scratch = Scratch::new();
        let sessions = Sessions::new(SessionConfig {
            max_bytes: 1000,
            ..scratch.config()
        })
        .unwrap();
        let s = sessions.open("s").unwrap();
        s.write("a", &mut &[1u8; 600][..]).unwrap();
        let err = s.write("b", &mut &[2u8; 500][..]).unwrap_err();
        match &err {
            SessionError::Quota {
                used, max_bytes, ..
            } => assert_eq!((*used, *max_bytes), (600, 1000)),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("PTC_SESSION_MAX_MB"), "{err}");
        assert!(!s.dir.join("b").exists());
        // An endless upload stops at the quota too, inside a new folder.
        let mut endless = io::repeat(0);
        assert!(matches!(
            s.write("big/b", &mut endless),
            Err(SessionError::Quota { .. })
        ));
        assert!(!s.dir.join("big/b").exists());
        // Replacing a file counts its old size out; exactly the quota fits.
        s.write("a", &mut &[3u8; 900][..]).unwrap();
        s.write("c", &mut &[4u8; 100][..]).unwrap();
        assert_eq!(s.usage().unwrap(), (1000, 2));
        assert!(matches!(
            s.write("d", &mut &[5u8; 1][..]),
            Err(SessionError::Quota { .. })
        ));
        assert_eq!(names(&s.files().unwrap()), ["a", "c"]);
    }

    #[test]
    fn too_many_files_stops_the_walk() {
        let scratch = Scratch::new();
        let sessions = Sessions::new(SessionConfig {
            max_files: 5,
            ..scratch.config()
        })
        .unwrap();
        let s = sessions.open("s").unwrap();
        for i in 0..5 {
            s.write(&format!("f{i}"), &mut &b"x"[..]).unwrap();
        }
        assert_eq!(s.files().unwrap().len(), 5);
        let err = s.write("f5", &mut &b"x"[..]).unwrap_err();
        assert!(matches!(err, SessionError::TooManyFiles { .. }), "{err}");
        assert!(!s.dir.join("f5").exists());
        // Replacing one is fine.
        s.write("f0", &mut &b"y"[..]).unwrap();
        // Folders count too, so a tree of empty folders cannot make a walk unbounded.
        std::fs::create_dir(s.dir.join("empty")).unwrap();
        let err = s.files().unwrap_err();
        assert!(err.to_string().contains("PTC_SESSION_MAX_FILES"), "{err}");
        assert!(matches!(s.usage(), Err(SessionError::TooManyFiles { .. })));
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
    fn files_are_given_to_the_owner() {
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: giving files away takes root");
            return;
        }
        let scratch = Scratch::new();
        let sessions = Sessions::new(SessionConfig {
            owner: Some((65534, 65533)),
            ..scratch.config()
        })
        .unwrap();
        let s = sessions.open("owned").unwrap();
        s.write("a/b/c.txt", &mut &b"x"[..]).unwrap();
        for path in ["", "a", "a/b", "a/b/c.txt"] {
            let meta = std::fs::symlink_metadata(s.dir.join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (65534, 65533), "{path:?}");
        }
        // The root stays the sidecar's.
        assert_eq!(std::fs::metadata(scratch.root()).unwrap().uid(), 0);
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
