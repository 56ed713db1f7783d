//! Writing into a held session: creating a file (missing folders made, nothing followed, both
//! given to the owner), copying an upload into it within the session's quota of bytes and files,
//! and removing the partial file when a write fails.
//!
//! It must not hold more than [`COPY_CHUNK`] of an upload in memory, nor leave behind a file
//! the quota refused; reading and listing are `held`'s.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use super::fs::{self, Refused};
use super::held::{FileInfo, Session};
use super::names::{check_name, shown, split_name};
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
    /// the quota: what the session already holds (measured at any depth, less the file being
    /// replaced) plus what is
    /// written may not pass `max_bytes`, and a new file may not pass `max_files`. On any
    /// failure the partial file is removed (a file it replaced is gone too). Two writes at once
    /// are each measured against what was there before both: callers write under
    /// [`lock`](Session::lock) when that matters.
    pub fn write(&self, name: &str, reader: &mut impl Read) -> Result<FileInfo, SessionError> {
        let name = check_name(name)?;
        let (used, files) = self.usage()?;
        let replaced = self.open_name(&name)?.map(|(info, _)| info.size);
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
