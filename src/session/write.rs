//! Writing into a held session: creating a file (missing folders made, nothing followed, both
//! given to the owner), writing into it within the session's quota of bytes and files and the
//! store's bound ([`SessionConfig::max_total_bytes`](super::SessionConfig::max_total_bytes)),
//! chunk by chunk ([`Writer`]) or from a reader ([`Session::write`]), and removing the partial
//! file when a write fails.
//!
//! It must not hold more than [`COPY_CHUNK`] of an upload in memory, nor leave behind a file
//! a quota refused; reading and listing are `held`'s.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::fs::{self, Refused};
use super::held::{FileInfo, Session, Shared};
use super::names::{check_name, file_id, shown, split_name};
use super::{SessionError, io_error};

/// What [`Session::write`] copies at a time: the most it holds in memory per upload.
const COPY_CHUNK: usize = 64 << 10;

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

/// A file being written into a session ([`Session::writer`]): every [`append`](Writer::append)
/// is counted against the session's quota and the store's bound before it is written. Dropped,
/// the file stays as written; [`discard`](Writer::discard) removes it.
pub struct Writer {
    shared: Arc<Shared>,
    /// The session's id, for messages and file ids.
    id: String,
    name: String,
    created: Created,
    /// What the session held besides this file when it was made.
    used: u64,
    /// Bytes written so far (and counted in the store's `stored`).
    written: u64,
}

impl Writer {
    /// Appends `bytes`, all or nothing: refused, with nothing written, when the file would
    /// take the session past its quota or the store past its bound.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        let n = bytes.len() as u64;
        let cfg = &self.shared.cfg;
        let total = self.written + n;
        if self.used + total > cfg.max_bytes {
            return Err(SessionError::Quota {
                id: self.id.clone(),
                name: shown(&self.name),
                used: self.used,
                incoming: total,
                max_bytes: cfg.max_bytes,
            });
        }
        let before = self.shared.stored.fetch_add(n, Ordering::Relaxed);
        if let Some(max) = cfg.max_total_bytes
            && before + n > max
        {
            self.shared.release(n);
            return Err(SessionError::StoreFull {
                name: shown(&self.name),
                max_total_bytes: max,
            });
        }
        if let Err(e) = self.created.file.write_all(bytes) {
            self.shared.release(n);
            return Err(self.failed("write", e));
        }
        self.written = total;
        Ok(())
    }

    /// Bytes the file may still take before the session's quota or the store's bound
    /// refuses it (as of now: other writers share the store's).
    pub fn room(&self) -> u64 {
        let cfg = &self.shared.cfg;
        let session = cfg.max_bytes.saturating_sub(self.used + self.written);
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

    /// The file as written, as the session lists it.
    pub fn finish(self) -> Result<FileInfo, SessionError> {
        match fs::fstat(self.created.file.as_fd()) {
            Ok(st) => Ok(FileInfo {
                id: file_id(&self.id, &self.name),
                name: self.name.clone(),
                size: st.size,
                modified: st.modified(),
            }),
            Err(e) => {
                let error = self.failed("write", e);
                self.discard();
                Err(error)
            }
        }
    }

    /// Removes the file (a file it replaced is gone too).
    pub fn discard(self) {
        self.shared.release(self.written);
        self.created.discard();
    }

    fn failed(&self, what: &str, e: io::Error) -> SessionError {
        io_error(format!(
            "cannot {what} {:?} in session {}",
            self.name, self.id
        ))(e)
    }
}

impl Session {
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
        match fs::create_file_at(dir.as_fd(), &leaf, self.file_ids()) {
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
    /// folder or hard link under that name is refused and left untouched. No quota counts what
    /// is written to it: [`writer`](Session::writer) and [`write`](Session::write) do.
    pub fn create(&self, name: &str) -> Result<std::fs::File, SessionError> {
        let name = check_name(name)?;
        Ok(self.create_at(&name)?.file)
    }

    /// Creates the file `name` as [`create`](Session::create) does, to be written chunk by
    /// chunk within the quota: what the session already holds (measured at any depth, less the
    /// file being replaced) plus what is written may not pass `max_bytes`, the store may not
    /// pass `max_total_bytes`, and a new file may not pass `max_files`. Two writers at once are
    /// each measured against what was there before both: callers write under
    /// [`lock`](Session::lock) when that matters (the store's bound is exact either way).
    pub fn writer(&self, name: &str) -> Result<Writer, SessionError> {
        let name = check_name(name)?;
        let (used, files) = self.usage()?;
        let replaced = self.open_name(&name)?.map(|(info, _)| info.size);
        let cfg = &self.shared.cfg;
        if replaced.is_none() && files >= cfg.max_files {
            return Err(SessionError::TooManyFiles {
                id: self.id.clone(),
                max_files: cfg.max_files,
            });
        }
        let created = self.create_at(&name)?;
        // Emptied by create_at: the store no longer holds what the file held.
        if let Some(size) = replaced {
            self.shared.release(size);
        }
        Ok(Writer {
            shared: Arc::clone(&self.shared),
            id: self.id.clone(),
            used: used.saturating_sub(replaced.unwrap_or(0)),
            name,
            created,
            written: 0,
        })
    }

    /// Writes all of `reader` to the file `name` through a [`writer`](Session::writer): on any
    /// failure the partial file is removed (a file it replaced is gone too).
    pub fn write(&self, name: &str, reader: &mut impl Read) -> Result<FileInfo, SessionError> {
        let mut writer = self.writer(name)?;
        let mut buf = vec![0u8; COPY_CHUNK];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return writer.finish(),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let error = writer.failed("read the upload for", e);
                    writer.discard();
                    return Err(error);
                }
            };
            if let Err(e) = writer.append(&buf[..n]) {
                writer.discard();
                return Err(e);
            }
        }
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
        b.write("y", &mut &[3u8; 100][..]).unwrap();
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
}
