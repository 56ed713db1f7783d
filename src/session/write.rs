//! Writing into a held session, write then rename: a file is written into a temporary of its
//! own in the folder of its name (missing folders made, nothing followed, both given to the
//! owner), within the session's quota of bytes and files and the store's bound
//! ([`SessionConfig::max_total_bytes`](super::SessionConfig::max_total_bytes)), chunk by chunk
//! ([`Writer`]) or from a reader ([`Session::write`]), and renamed over its name only once whole
//! ([`Writer::finish`]).
//!
//! Only `finish` publishes. A write that fails, is refused, discarded or dropped removes its
//! temporary and leaves the file it would have replaced exactly as it was; whoever opens the
//! name gets the old file or the new one whole, never a part. A temporary is called
//! `names::writing_name()` (`.ptc-writing\` and random hex): no listing shows it and no user's
//! file can have its name. One a crash left behind counts against the quota like any file until
//! the store adopts the session at the next start and deletes it
//! ([`Session::remove_leftovers`]).
//!
//! Quota: a file being replaced counts until the rename replaces it (the session holds both
//! meanwhile, and the run's quota watch sees both), and so does the temporary: as one of
//! `max_files` from the start, and each byte before it is written. Writers of one session at
//! once are exact against each other, and none waits for another (no thread is held while
//! another writer's upload trickles in): each measures the folder when it begins, less the
//! temporaries of the writers in flight, and each append then adds, under the session's
//! [`Ledger`] lock, what every writer in flight has written and what writers renamed into place
//! since (a file a rename replaced is not counted out until the next writer measures: over,
//! never under). Two writers of one name at once each write a whole file; the last rename wins.
//! The store's `stored` counts a temporary's bytes as they are written and lets a replaced
//! file's go when the rename replaces it, not before.
//!
//! It must not hold more than [`COPY_CHUNK`] of an upload in memory, nor leave a temporary
//! behind; reading and listing are `held`'s.

use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::fs::{self, Refused};
use super::held::{FileInfo, Ledger, Published, Session, Shared, Writes};
use super::names::{check_name, file_id, is_writing, shown, split_name, writing_name};
use super::{SessionError, io_error};
use crate::util::{lock, tree};

/// What [`Session::write`] copies at a time: the most it holds in memory per upload.
const COPY_CHUNK: usize = 64 << 10;

impl Writes {
    /// What a writer that measured `used` when the ledger had `published` counts as held
    /// besides its own file (of which it wrote `own`): that, what writers published since, and
    /// what the other writers in flight have written.
    fn besides(&self, used: u64, published: Published, own: u64) -> u64 {
        used + self.published.bytes.saturating_sub(published.bytes)
            + self.pending.saturating_sub(own)
    }

    /// Counts `n` more bytes written into the temporary `key`.
    fn add(&mut self, key: (u64, u64), n: u64) {
        *self.temps.entry(key).or_default() += n;
        self.pending += n;
    }

    /// Takes back `n` bytes [`add`](Writes::add)ed to `key` that were not written after all.
    fn take_back(&mut self, key: (u64, u64), n: u64) {
        if let Some(held) = self.temps.get_mut(&key) {
            *held = held.saturating_sub(n);
        }
        self.pending = self.pending.saturating_sub(n);
    }

    /// A writer is done: its temporary, with the `written` bytes in it, is renamed or removed.
    fn leave(&mut self, key: Option<(u64, u64)>, written: u64) {
        if let Some(key) = key {
            self.temps.remove(&key);
        }
        self.pending = self.pending.saturating_sub(written);
        self.writers = self.writers.saturating_sub(1);
    }
}

/// A file being written into a session ([`Session::writer`]), in a temporary of its own: every
/// [`append`](Writer::append) is counted against the session's quota and the store's bound
/// before it is written, and [`finish`](Writer::finish) renames it over its name. Dropped or
/// [`discard`](Writer::discard)ed before that, the temporary is removed and the file it would
/// have replaced stays as it was: only `finish` publishes.
#[derive(Debug)]
pub struct Writer {
    shared: Arc<Shared>,
    ledger: Arc<Ledger>,
    /// The session's id, for messages and file ids.
    id: String,
    name: String,
    /// The folder of the file's name, opened without following a link.
    dir: OwnedFd,
    /// The file's name in `dir`, and its temporary's.
    leaf: CString,
    temp: CString,
    file: std::fs::File,
    /// The temporary's device and inode: its key in the ledger, and how the writer knows its
    /// name still is the file it made.
    key: (u64, u64),
    /// What the session held when the writer began, less its writers' temporaries (the file
    /// being replaced included).
    used: u64,
    /// What the ledger had published then.
    published: Published,
    /// Bytes written so far (and counted in the ledger and the store's `stored`).
    written: u64,
    /// Whether the temporary is still the writer's: neither renamed into place nor removed.
    live: bool,
}

impl Writer {
    /// Appends `bytes`, all or nothing: refused, with nothing written, when the file would
    /// take the session past its quota (with everything else it holds and every other writer
    /// of it has written) or the store past its bound.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        let n = bytes.len() as u64;
        let cfg = &self.shared.cfg;
        let total = self.written + n;
        {
            let mut writes = lock(&self.ledger.writes);
            let used = writes.besides(self.used, self.published, self.written);
            if used + total > cfg.max_bytes {
                return Err(SessionError::Quota {
                    id: self.id.clone(),
                    name: shown(&self.name),
                    used,
                    incoming: total,
                    max_bytes: cfg.max_bytes,
                });
            }
            writes.add(self.key, n);
        }
        let give_back = |this: &Writer| {
            this.shared.release(n);
            lock(&this.ledger.writes).take_back(this.key, n);
        };
        let before = self.shared.stored.fetch_add(n, Ordering::Relaxed);
        if let Some(max) = cfg.max_total_bytes
            && before + n > max
        {
            give_back(self);
            return Err(SessionError::StoreFull {
                name: shown(&self.name),
                max_total_bytes: max,
            });
        }
        if let Err(e) = self.file.write_all(bytes) {
            give_back(self);
            return Err(self.failed("write", e));
        }
        self.written = total;
        Ok(())
    }

    /// Bytes the file may still take before the session's quota or the store's bound
    /// refuses it (as of now: other writers share both).
    pub fn room(&self) -> u64 {
        let cfg = &self.shared.cfg;
        let used = lock(&self.ledger.writes).besides(self.used, self.published, self.written);
        let session = cfg.max_bytes.saturating_sub(used + self.written);
        match cfg.max_total_bytes {
            Some(max) => {
                session.min(max.saturating_sub(self.shared.stored.load(Ordering::Relaxed)))
            }
            None => session,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Renames the file over its name, whole, and says what the session lists of it. Refused,
    /// the temporary removed and whatever is under the name left as it is, when a folder,
    /// link, fifo, socket or hard link took the name meanwhile, or the temporary is no longer
    /// the file written (a run moved or replaced it).
    pub fn finish(mut self) -> Result<FileInfo, SessionError> {
        let st = fs::fstat(self.file.as_fd()).map_err(|e| self.failed("write", e))?;
        let ledger = Arc::clone(&self.ledger);
        let _publishing = lock(&ledger.publishing);
        let replaced = replaced(self.dir.as_fd(), &self.leaf, &self.name, &self.id)?;
        match fs::stat_at(self.dir.as_fd(), &self.temp) {
            Ok(now) if (now.dev, now.ino) == self.key => {}
            Ok(_) => return Err(self.moved()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(self.moved()),
            Err(e) => return Err(self.failed("write", e)),
        }
        fs::rename_at(self.dir.as_fd(), &self.temp, self.dir.as_fd(), &self.leaf)
            .map_err(|e| self.failed("put into place", e))?;
        self.live = false;
        {
            let mut writes = lock(&ledger.writes);
            writes.leave(Some(self.key), self.written);
            writes.published.bytes += self.written;
            writes.published.files += 1;
        }
        // Only now is what the file replaced gone from the store.
        self.shared.release(replaced.unwrap_or(0));
        Ok(FileInfo {
            id: file_id(&self.id, &self.name),
            name: self.name.clone(),
            size: st.size,
            modified: st.modified(),
        })
    }

    /// Removes the temporary: the file it would have replaced stays as it was (what dropping
    /// the writer does too).
    pub fn discard(self) {}

    fn failed(&self, what: &str, e: io::Error) -> SessionError {
        io_error(format!(
            "cannot {what} {:?} in session {}",
            self.name, self.id
        ))(e)
    }

    fn moved(&self) -> SessionError {
        self.failed(
            "write",
            io::Error::new(
                io::ErrorKind::NotFound,
                "the file being written was moved or replaced meanwhile (by a run in the \
                 session?); write it again",
            ),
        )
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        // Removed if its name still is the file we made (a run may have put another there).
        if fs::stat_at(self.dir.as_fd(), &self.temp).is_ok_and(|st| (st.dev, st.ino) == self.key) {
            let _ = fs::unlink_at(self.dir.as_fd(), &self.temp, false);
        }
        self.shared.release(self.written);
        lock(&self.ledger.writes).leave(Some(self.key), self.written);
    }
}

/// A temporary just made, with the folder and the name it is for ([`Writer`]'s fields).
struct Temporary {
    dir: OwnedFd,
    leaf: CString,
    temp: CString,
    file: std::fs::File,
    key: (u64, u64),
}

/// The size of the plain file named `leaf` in `dir`, which a rename over it would replace;
/// `None` when there is none. Anything else under the name (a folder, link, fifo, socket, or a
/// hard link) is refused and left as it is.
fn replaced(
    dir: BorrowedFd<'_>,
    leaf: &CStr,
    name: &str,
    id: &str,
) -> Result<Option<u64>, SessionError> {
    let bad = |why: &str| SessionError::BadName {
        name: shown(name),
        why: why.to_string(),
    };
    let failed = |e: io::Error| io_error(format!("cannot create {name:?} in session {id}"))(e);
    let st = match fs::stat_at(dir, leaf) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(failed(e)),
    };
    match fs::check_plain(&st) {
        Ok(()) => Ok(Some(st.size)),
        Err(Refused::NotRegular) => Err(bad(
            "is a folder, link, fifo or socket, not a file: delete it, or pick another name",
        )),
        Err(Refused::HardLink) => Err(bad(
            "is a hard link (the file has another name, maybe outside the session) and the \
             session never writes over one: delete it, or pick another name",
        )),
        Err(Refused::Io(e)) => Err(failed(e)),
    }
}

impl Session {
    /// A writer of the file `name` (checked by [`check_name`]), to be written chunk by chunk
    /// within the quota and renamed over `name` by [`Writer::finish`]: missing folders made
    /// (0700), each opened without following a link, and a temporary made beside the name
    /// (`O_EXCL`, `O_NOFOLLOW`, mode 0600), all given to the owner. A link, fifo, socket,
    /// folder or hard link under `name` is refused and left untouched, now and at `finish`.
    ///
    /// What the session already holds (measured at any depth, the file being replaced
    /// included: it counts until the rename), what its other writers in flight have written,
    /// and what this one writes may not pass `max_bytes`; the store may not pass
    /// `max_total_bytes`; and the temporary, with the session's files and the other writers'
    /// temporaries, may not pass `max_files` (so replacing a file needs one file of room too).
    pub fn writer(&self, name: &str) -> Result<Writer, SessionError> {
        let name = check_name(name)?;
        let cfg = &self.shared.cfg;
        // Taken before measuring: what is published while the walk goes counts, maybe twice.
        let published = lock(&self.ledger.writes).published;
        let (used, files) = self.measured()?;
        {
            let mut writes = lock(&self.ledger.writes);
            let since = writes.published.files.saturating_sub(published.files);
            if files + writes.writers + since >= cfg.max_files {
                return Err(SessionError::TooManyFiles {
                    id: self.id.clone(),
                    max_files: cfg.max_files,
                });
            }
            writes.writers += 1;
        }
        let made = self.make_temporary(&name);
        let mut writes = lock(&self.ledger.writes);
        let Temporary {
            dir,
            leaf,
            temp,
            file,
            key,
        } = match made {
            Ok(made) => made,
            Err(e) => {
                writes.leave(None, 0);
                return Err(e);
            }
        };
        writes.temps.insert(key, 0);
        drop(writes);
        Ok(Writer {
            shared: Arc::clone(&self.shared),
            ledger: Arc::clone(&self.ledger),
            id: self.id.clone(),
            name,
            dir,
            leaf,
            temp,
            file,
            key,
            used,
            published,
            written: 0,
            live: true,
        })
    }

    /// The folder of `name` (made when missing), its leaf, and a fresh temporary beside it;
    /// refused when something other than a plain file is under the name.
    fn make_temporary(&self, name: &str) -> Result<Temporary, SessionError> {
        let (folders, leaf) = split_name(name);
        let Some(dir) = self.descend(&folders, Some(name))? else {
            // descend makes what is missing, so it always has a folder when making.
            return Err(SessionError::NotFound(self.id.clone()));
        };
        let failed =
            |e: io::Error| io_error(format!("cannot create {name:?} in session {}", self.id))(e);
        let leaf = fs::cstring(leaf).map_err(failed)?;
        replaced(dir.as_fd(), &leaf, name, &self.id)?;
        let temp = fs::cstring(&writing_name()).map_err(failed)?;
        let (file, st) = fs::create_new_at(dir.as_fd(), &temp, self.file_ids()).map_err(failed)?;
        Ok(Temporary {
            dir,
            leaf,
            temp,
            file,
            key: (st.dev, st.ino),
        })
    }

    /// Writes all of `reader` to the file `name` through a [`writer`](Session::writer) and
    /// renames it into place: on any failure (the quota, the reader's error) the temporary is
    /// removed and a file of that name stays as it was.
    pub fn write(&self, name: &str, reader: &mut impl Read) -> Result<FileInfo, SessionError> {
        let mut writer = self.writer(name)?;
        let mut buf = vec![0u8; COPY_CHUNK];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return writer.finish(),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(writer.failed("read the upload for", e)),
            };
            writer.append(&buf[..n])?;
        }
    }

    /// Deletes the temporaries a crash left in the session (every entry a writer's name could
    /// have, folders apart), walking at most `max_files` entries; how many it deleted. For the
    /// store adopting the session at start, when no writer of it is in flight.
    pub(super) fn remove_leftovers(&self) -> usize {
        let Ok(top) = self.dir_fd() else {
            return 0;
        };
        let max_entries = self.shared.cfg.max_files;
        let (mut seen, mut removed) = (0u64, 0usize);
        let _ = tree::walk(top, |entry| {
            seen += 1;
            if seen > max_entries {
                return ControlFlow::Break(());
            }
            if !entry.stat.is_dir()
                && is_writing(entry.name.to_bytes())
                && fs::unlink_at(entry.dir, entry.name, false).is_ok()
            {
                removed += 1;
            }
            ControlFlow::Continue(())
        });
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testing::{Scratch, names};
    use crate::session::{SessionConfig, Sessions};
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::MetadataExt;

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
        // A file being replaced counts until the rename (the session holds both meanwhile):
        // 600 + 900 is past the quota, and "a" stays as it was; 600 + 400 fits exactly.
        assert!(matches!(
            s.write("a", &mut &[3u8; 900][..]),
            Err(SessionError::Quota { used: 600, .. })
        ));
        assert_eq!(std::fs::read(s.dir.join("a")).unwrap(), [1u8; 600]);
        s.write("a", &mut &[3u8; 400][..]).unwrap();
        s.write("c", &mut &[4u8; 600][..]).unwrap();
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
        // Replacing one needs a file of room too (its temporary is one until the rename).
        let err = s.write("f0", &mut &b"y"[..]).unwrap_err();
        assert!(matches!(err, SessionError::TooManyFiles { .. }), "{err}");
        assert_eq!(std::fs::read(s.dir.join("f0")).unwrap(), b"x");
        assert!(s.remove_name("f4").unwrap());
        s.write("f0", &mut &b"y"[..]).unwrap();
        assert_eq!(std::fs::read(s.dir.join("f0")).unwrap(), b"y");
        // Folders count too, so a tree of empty folders cannot make a walk unbounded.
        std::fs::create_dir(s.dir.join("empty")).unwrap();
        std::fs::create_dir(s.dir.join("empty2")).unwrap();
        let err = s.files().unwrap_err();
        assert!(err.to_string().contains("PTC_SESSION_MAX_FILES"), "{err}");
        assert!(matches!(s.usage(), Err(SessionError::TooManyFiles { .. })));
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
            uids: None,
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
    fn the_store_bound_refuses_past_its_total_and_counts_what_goes() {
        let scratch = Scratch::new();
        let cfg = SessionConfig {
            max_bytes: 10_000,
            max_total_bytes: Some(1000),
            ..scratch.config()
        };
        let sessions = Sessions::new(cfg.clone()).unwrap();
        let (a, b) = (sessions.open("a").unwrap(), sessions.open("b").unwrap());
        a.write("x", &mut &[1u8; 600][..]).unwrap();
        let err = b.write("y", &mut &[2u8; 500][..]).unwrap_err();
        assert!(matches!(err, SessionError::StoreFull { .. }), "{err}");
        assert!(err.to_string().contains("PTC_ARTIFACT_MAX_MB"), "{err}");
        assert!(!b.dir.join("y").exists());
        assert_eq!(sessions.stored(), 600);
        // Chunk by chunk: the room shrinks, a chunk past it is refused whole.
        let mut w = b.writer("y").unwrap();
        assert_eq!(w.room(), 400);
        w.append(&[2u8; 300]).unwrap();
        assert_eq!((w.room(), w.written()), (100, 300));
        assert!(matches!(
            w.append(&[2u8; 101]),
            Err(SessionError::StoreFull { .. })
        ));
        w.append(&[2u8; 100]).unwrap();
        assert_eq!(w.finish().unwrap().size, 400);
        assert_eq!(sessions.stored(), 1000);
        // What goes is counted out: a file deleted, a file replaced, a session removed.
        assert!(a.remove_name("x").unwrap());
        assert_eq!(sessions.stored(), 400);
        // A file being replaced is counted until the rename replaces it, not before.
        let mut w = b.writer("y").unwrap();
        assert_eq!((sessions.stored(), w.room()), (400, 600));
        w.append(&[3u8; 100]).unwrap();
        assert_eq!(sessions.stored(), 500);
        w.finish().unwrap();
        assert_eq!(sessions.stored(), 100);
        a.write("z", &mut &[4u8; 900][..]).unwrap();
        assert!(sessions.remove("a"));
        assert_eq!(sessions.stored(), 100);
        // A discarded writer gives its bytes back; a store opened again counts what it finds.
        let mut w = b.writer("w").unwrap();
        w.append(&[5u8; 800]).unwrap();
        w.discard();
        assert_eq!(sessions.stored(), 100);
        assert!(!b.dir.join("w").exists());
        drop((a, b, sessions));
        assert_eq!(Sessions::new(cfg).unwrap().stored(), 100);
    }

    #[test]
    fn bytes_nested_past_the_listing_depth_count_against_the_quota() {
        use crate::util::tree::testing::nest;
        let scratch = Scratch::new();
        let sessions = Sessions::new(SessionConfig {
            max_bytes: 100_000,
            max_files: 100_000,
            ..scratch.config()
        })
        .unwrap();
        let s = sessions.open("s").unwrap();
        // 80 levels of 100-byte names, 1000 bytes in each: deeper than a listing goes (64) and
        // than PATH_MAX, and all of it counted.
        nest(&s.dir, 80, &"d".repeat(100), 1000);
        assert_eq!(s.usage().unwrap(), (80_000, 80));
        let err = s.write("big", &mut &[0u8; 30_000][..]).unwrap_err();
        assert!(
            matches!(err, SessionError::Quota { used: 80_000, .. }),
            "{err}"
        );
        // Nested too deep to measure: over the quota.
        let t = sessions.open("t").unwrap();
        nest(&t.dir, crate::util::tree::MAX_TREE_DEPTH + 1, "d", 0);
        let err = t.write("small", &mut &b"x"[..]).unwrap_err();
        assert!(matches!(err, SessionError::Unmeasurable { .. }), "{err}");
        assert!(
            err.to_string().contains("nested more than 4096 deep"),
            "{err}"
        );
        assert!(sessions.remove("s") && sessions.remove("t"));
    }

    /// Every temporary under `dir` (walked with std: the test's own tree).
    fn temporaries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(temporaries(&path));
            } else if is_writing(path.file_name().unwrap().as_encoded_bytes()) {
                found.push(path);
            }
        }
        found
    }

    /// The bytes of every regular file under `dir`, walked with std.
    fn walked_bytes(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let meta = std::fs::symlink_metadata(entry.as_ref().unwrap().path()).unwrap();
                match meta.is_dir() {
                    true => walked_bytes(&entry.unwrap().path()),
                    false => meta.len(),
                }
            })
            .sum()
    }

    fn quota(scratch: &Scratch, max_bytes: u64) -> Sessions {
        Sessions::new(SessionConfig {
            max_bytes,
            ..scratch.config()
        })
        .unwrap()
    }

    /// Breaks when a writer empties the file it replaces before it is whole (writing in
    /// place, as `create_at` once did): "a" is then empty or 300 bytes of 9s.
    #[test]
    fn a_replacing_write_refused_by_the_quota_keeps_the_old_file_byte_for_byte() {
        let scratch = Scratch::new();
        let s = quota(&scratch, 1000).open("s").unwrap();
        let old: Vec<u8> = (0..600u32).map(|i| (i % 251) as u8).collect();
        s.write("a", &mut &old[..]).unwrap();
        // The old file counts until the rename: 600 + 500 is past 1000.
        let err = s.write("a", &mut &[9u8; 500][..]).unwrap_err();
        assert!(
            matches!(err, SessionError::Quota { used: 600, .. }),
            "{err}"
        );
        assert_eq!(std::fs::read(s.dir.join("a")).unwrap(), old);
        // Chunk by chunk: refused mid-way, then dropped.
        let mut w = s.writer("a").unwrap();
        w.append(&[9u8; 300]).unwrap();
        assert!(matches!(
            w.append(&[9u8; 200]),
            Err(SessionError::Quota { .. })
        ));
        drop(w);
        assert_eq!(std::fs::read(s.dir.join("a")).unwrap(), old);
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
        assert_eq!(s.usage().unwrap(), (600, 1));
    }

    /// A reader that gives `left` bytes of 7s, then fails as a broken upload does.
    struct Broken {
        left: usize,
    }

    impl Read for Broken {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the client went away",
                ));
            }
            let n = buf.len().min(self.left);
            buf[..n].fill(7);
            self.left -= n;
            Ok(n)
        }
    }

    /// Breaks when a failed write removes or empties the file it was replacing (the old
    /// `discard`: "a file it replaced is gone too").
    #[test]
    fn a_replacing_write_that_fails_mid_way_keeps_the_old_file() {
        let scratch = Scratch::new();
        let sessions = quota(&scratch, 1 << 20);
        let s = sessions.open("s").unwrap();
        s.write("dir/a.csv", &mut &b"1,2\n3,4\n"[..]).unwrap();
        let err = s
            .write("dir/a.csv", &mut Broken { left: 200_000 })
            .unwrap_err();
        assert!(err.to_string().contains("the client went away"), "{err}");
        assert_eq!(
            std::fs::read(s.dir.join("dir/a.csv")).unwrap(),
            b"1,2\n3,4\n"
        );
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
        assert_eq!(s.usage().unwrap(), (8, 1));
        // A new file that fails leaves nothing either.
        assert!(s.write("b", &mut Broken { left: 10 }).is_err());
        assert!(!s.dir.join("b").exists());
        assert_eq!(names(&s.files().unwrap()), ["dir/a.csv"]);
    }

    /// Breaks when a dropped writer publishes what it wrote (the old "stays as written"),
    /// leaves its temporary, or keeps its bytes counted (the last write is then refused).
    #[test]
    fn a_dropped_writer_leaves_neither_temporary_nor_partial_file() {
        let scratch = Scratch::new();
        let s = quota(&scratch, 1 << 20).open("s").unwrap();
        s.write("keep", &mut &b"old"[..]).unwrap();
        let mut w = s.writer("sub/new.txt").unwrap();
        w.append(b"partial").unwrap();
        assert_eq!(temporaries(&s.dir).len(), 1);
        drop(w);
        assert!(!s.dir.join("sub/new.txt").exists());
        let mut w = s.writer("keep").unwrap();
        w.append(&[1u8; 1000]).unwrap();
        w.discard();
        assert_eq!(std::fs::read(s.dir.join("keep")).unwrap(), b"old");
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
        assert_eq!(names(&s.files().unwrap()), ["keep"]);
        // All the room is back: the rest of the quota fits exactly.
        s.write("big", &mut io::repeat(0).take((1 << 20) - 3))
            .unwrap();
        assert_eq!(s.usage().unwrap(), (1 << 20, 2));
    }

    /// Breaks when each writer is measured only against what the session held when it began
    /// (the old way): both files are then kept, 1400 KiB in a 1 MiB session.
    #[test]
    fn two_writers_at_once_cannot_together_pass_the_quota() {
        let scratch = Scratch::new();
        let s = quota(&scratch, 1 << 20).open("s").unwrap();
        let both = Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let (s, both) = (s.clone(), both.clone());
                std::thread::spawn(move || {
                    let mut w = s.writer(name).unwrap();
                    // Both have measured the empty session before either writes.
                    both.wait();
                    for _ in 0..700 / 50 {
                        w.append(&[1u8; 50 << 10])?;
                    }
                    w.finish()
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(SessionError::Quota { .. })))
            .count();
        // One, or (when the second reaches the quota before the first has let go) both.
        assert!(refused >= 1, "{results:?}");
        let (bytes, files) = s.usage().unwrap();
        assert!(bytes <= 1 << 20, "{bytes}");
        assert_eq!(walked_bytes(&s.dir), bytes);
        assert_eq!(
            (bytes, files),
            ((2 - refused as u64) * (700 << 10), 2 - refused as u64)
        );
        for file in s.files().unwrap() {
            assert_eq!(file.size, 700 << 10, "{file:?}");
        }
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
    }

    /// Breaks when two writers of one name write into the same file: its bytes are then a
    /// mix of both.
    #[test]
    fn two_writers_of_one_name_at_once_each_write_a_whole_file_and_the_last_wins() {
        let scratch = Scratch::new();
        let s = quota(&scratch, 1 << 20).open("s").unwrap();
        let both = Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = [1u8, 2]
            .into_iter()
            .map(|byte| {
                let (s, both) = (s.clone(), both.clone());
                std::thread::spawn(move || {
                    let mut w = s.writer("same").unwrap();
                    both.wait();
                    for _ in 0..30 {
                        w.append(&[byte; 10 << 10]).unwrap();
                    }
                    w.finish().unwrap()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap().size, 300 << 10);
        }
        let bytes = std::fs::read(s.dir.join("same")).unwrap();
        assert_eq!(bytes.len(), 300 << 10);
        assert!(
            bytes.iter().all(|b| *b == bytes[0]),
            "a mix of both writers"
        );
        assert_eq!(s.usage().unwrap(), (300 << 10, 1));
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
    }

    /// Breaks when a temporary is listed (its name passing the listing's check), when a file
    /// of a temporary's name that no writer holds is left out of the quota (a run could hide
    /// bytes there), or when adoption leaves a crash's temporaries.
    #[test]
    fn temporaries_are_never_listed_and_are_removed_at_adoption() {
        let scratch = Scratch::new();
        let cfg = SessionConfig {
            max_bytes: 1000,
            ..scratch.config()
        };
        let sessions = Sessions::new(cfg.clone()).unwrap();
        let s = sessions.open("s").unwrap();
        s.write("out/kept.txt", &mut &b"kept"[..]).unwrap();
        let before = s.snapshot().unwrap();
        let mut w = s.writer("out/new.txt").unwrap();
        w.append(&[7u8; 100]).unwrap();
        assert_eq!(names(&s.files().unwrap()), ["out/kept.txt"]);
        assert_eq!(s.snapshot().unwrap(), before);
        assert!(s.changed_since(&before).unwrap().is_empty());
        assert_eq!(temporaries(&s.dir.join("out")).len(), 1);
        // On disk, it is there.
        assert_eq!(s.usage().unwrap(), (104, 2));
        // A crash: the writer neither finishes nor is dropped.
        std::mem::forget(w);
        // A file of a temporary's name no writer holds counts like any other.
        let planted = s
            .dir
            .join(format!("{}planted", super::super::names::WRITING_PREFIX));
        std::fs::write(&planted, [0u8; 800]).unwrap();
        let err = s.write("more", &mut &[0u8; 200][..]).unwrap_err();
        assert!(matches!(err, SessionError::Quota { .. }), "{err}");
        drop((s, sessions));

        let sessions = Sessions::new(cfg).unwrap();
        let s = sessions.get("s").unwrap();
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
        assert_eq!(names(&s.files().unwrap()), ["out/kept.txt"]);
        assert_eq!(s.usage().unwrap(), (4, 1));
    }

    /// Breaks when `finish` renames without looking at what took the name meanwhile: the
    /// folder would make the rename fail with the temporary left, the link be replaced.
    #[test]
    fn finish_refuses_a_folder_or_link_put_under_the_name_meanwhile() {
        let scratch = Scratch::new();
        let secret = scratch.outside().join("secret.txt");
        std::fs::write(&secret, "secret").unwrap();
        let s = scratch.sessions().open("s").unwrap();
        let mut w = s.writer("x").unwrap();
        w.append(b"data").unwrap();
        std::fs::create_dir(s.dir.join("x")).unwrap();
        let err = w.finish().unwrap_err();
        assert!(matches!(err, SessionError::BadName { .. }), "{err}");
        assert!(s.dir.join("x").is_dir());
        let mut w = s.writer("y").unwrap();
        w.append(b"pwned").unwrap();
        std::os::unix::fs::symlink(&secret, s.dir.join("y")).unwrap();
        assert!(matches!(w.finish(), Err(SessionError::BadName { .. })));
        assert!(
            std::fs::symlink_metadata(s.dir.join("y"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
        assert_eq!(temporaries(&s.dir), Vec::<std::path::PathBuf>::new());
    }
}
