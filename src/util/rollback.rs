//! A folder tree put back, after a run, to no more than it held before the run: how a session
//! that a run leaves over its quota is held to it (`run::scratch::hold_session`).
//!
//! [`Manifest::take`] notes every entry under a folder before the run — by the inode of the
//! folder holding it and its name: its own inode, its kind, its size and the room it takes —
//! through descriptors at any depth ([`super::tree::walk`]). After the run,
//! [`Manifest::restore`] walks the folder again and
//!
//! - removes every entry the manifest does not have as it is (a new name, or a name whose inode
//!   or kind changed: a new or replaced file, link, fifo or folder, a new name for an old file),
//!   a folder with everything in it (`dirfd::remove_tree`);
//! - cuts a file of the manifest that takes more room than it did back to its size then
//!   (`ftruncate`, and blocks preallocated past its end punched out), and removes it when that
//!   does not bring it back (holes the run filled in a sparse file);
//! - enters only folders of the manifest (found in the same folder under the same name with the
//!   same inode), given `u+rwx` when a run took it away.
//!
//! Afterwards the tree holds no entry that was not there before and no file that takes more
//! room than it did, so at most the entries and the bytes the manifest saw — folders aside,
//! which a file system such as ext4 never shrinks once they grew. It is not a snapshot: what the
//! run deleted, renamed or replaced is not brought back (a renamed entry is a new name, and
//! goes), and bytes the run overwrote within a file's old size stay overwritten.
//!
//! The tree is the run's, written by hostile code: nothing here follows a link (each entry is
//! reached by `fstatat`/`openat`/`unlinkat` relative to its folder's descriptor, `O_NOFOLLOW`),
//! a file is cut only through a descriptor checked to be the inode the manifest noted, and each
//! noted entry is matched at most once. The manifest keeps no names: an entry's key is a keyed
//! 128-bit hash (SipHash, random keys per manifest) of its folder's inode and its name, so a
//! run cannot aim at a collision, and an entry costs about 64 bytes however long its name: the
//! manifest of a session of 10,000 entries (`PTC_SESSION_MAX_FILES`' default) is about 640 KB,
//! held for the run.
//!
//! Blocking, and owns no state beyond a manifest.

use std::collections::HashMap;
use std::ffi::CStr;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::dirfd::{Stat, add_mode_at, fstat, open_dir_writable_at, remove_tree, retry, unlink_at};
use super::tree::{self, Entry, Unmeasurable};

/// What an entry was when the manifest was taken.
#[derive(Debug, Clone, Copy)]
struct Noted {
    ino: u64,
    /// `st_mode & S_IFMT`: a file replaced by a folder of the same inode number is not it.
    kind: u32,
    size: u64,
    room: u64,
    /// Matched by an entry of the restore's walk already: a key matches once.
    matched: bool,
}

impl Noted {
    fn of(st: &Stat) -> Noted {
        Noted {
            ino: st.ino,
            kind: kind(st),
            size: st.size,
            room: st.room(),
            matched: false,
        }
    }
}

fn kind(st: &Stat) -> u32 {
    st.mode & libc::S_IFMT
}

/// Why a manifest could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum NotTaken {
    /// More entries than the manifest may note (the quota of files it is taken for).
    #[error("it holds more than {0} files, folders and links")]
    TooMany(u64),
    #[error("it cannot be measured ({0})")]
    Unmeasurable(#[from] Unmeasurable),
}

/// Why a tree could not be put back.
#[derive(Debug, thiserror::Error)]
pub enum NotRestored {
    #[error("it is not the folder the manifest was taken of")]
    Replaced,
    #[error("it cannot be walked ({0})")]
    Unmeasurable(#[from] Unmeasurable),
}

/// Every entry of a tree at one moment, to put the tree back to later.
#[derive(Debug)]
pub struct Manifest {
    /// The folder's `(st_dev, st_ino)`: another folder is not restored from it.
    top: (u64, u64),
    keys: (RandomState, RandomState),
    entries: HashMap<u128, Noted>,
    /// The room the entries took together (what a quota counts).
    pub bytes: u64,
}

/// What [`Manifest::restore`] did.
#[derive(Debug, Default)]
pub struct Restored {
    /// Entries removed: new names (a folder counted once, with all it held), and files that
    /// could not be cut back.
    pub removed: u64,
    /// Files cut back to their size before.
    pub cut: u64,
    /// The first entry that could be neither removed nor cut back (the walk went on).
    pub failed: Option<io::Error>,
}

impl Manifest {
    /// Notes every entry under the folder `top`, at most `max_entries` of them.
    pub fn take(top: OwnedFd, max_entries: u64) -> Result<Manifest, NotTaken> {
        let st = fstat(top.as_fd()).map_err(Unmeasurable::Unreadable)?;
        let mut manifest = Manifest {
            top: (st.dev, st.ino),
            keys: (RandomState::new(), RandomState::new()),
            entries: HashMap::new(),
            bytes: 0,
        };
        let mut too_many = false;
        tree::walk(top, |e| {
            if manifest.entries.len() as u64 >= max_entries {
                too_many = true;
                return ControlFlow::Break(());
            }
            let key = manifest.key(&e);
            manifest.entries.insert(key, Noted::of(e.stat));
            manifest.bytes += e.stat.room();
            ControlFlow::Continue(())
        })?;
        match too_many {
            true => Err(NotTaken::TooMany(max_entries)),
            false => Ok(manifest),
        }
    }

    /// Entries noted.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the tree was empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn key(&self, e: &Entry<'_>) -> u128 {
        let hash = |keys: &RandomState| {
            let mut h = keys.build_hasher();
            h.write_u64(e.dir_ino);
            h.write(e.name.to_bytes());
            h.finish()
        };
        (u128::from(hash(&self.keys.0)) << 64) | u128::from(hash(&self.keys.1))
    }

    /// Puts the folder `top` (the one the manifest was taken of) back to no more than it held:
    /// see the module's doc. An entry that can be neither removed nor cut back is left, the
    /// first such failure said in [`Restored::failed`]; a walk that cannot go on is an error.
    pub fn restore(mut self, top: OwnedFd) -> Result<Restored, NotRestored> {
        let st = fstat(top.as_fd()).map_err(Unmeasurable::Unreadable)?;
        if (st.dev, st.ino) != self.top {
            return Err(NotRestored::Replaced);
        }
        let mut done = Restored::default();
        tree::walk(top, |e| {
            let key = self.key(&e);
            let kept = match self.entries.get_mut(&key) {
                Some(n) if !n.matched && n.ino == e.stat.ino && n.kind == kind(e.stat) => {
                    n.matched = true;
                    Some(*n)
                }
                _ => None,
            };
            let result = match kept {
                None => remove_tree(e.dir, e.name).map(|()| done.removed += 1),
                // The walk enters it next: it must be able to, and to remove from it.
                Some(_) if e.stat.is_dir() && e.stat.mode & 0o700 != 0o700 => {
                    open_dir_writable_at(e.dir, e.name).map(drop)
                }
                Some(n) if e.stat.is_regular() && e.stat.room() > n.room => {
                    match cut(e.dir, e.name, &n) {
                        Ok(true) => {
                            done.cut += 1;
                            Ok(())
                        }
                        _ => unlink_at(e.dir, e.name, false).map(|()| done.removed += 1),
                    }
                }
                Some(_) => Ok(()),
            };
            match result {
                Err(err) if err.kind() != io::ErrorKind::NotFound => {
                    done.failed.get_or_insert(err);
                }
                _ => {}
            }
            ControlFlow::Continue(())
        })?;
        Ok(done)
    }
}

/// Cuts the file `name` of `dir` back to `noted`'s size and room; whether that worked (not when
/// it is no longer the file noted, or still takes more room).
fn cut(dir: BorrowedFd<'_>, name: &CStr, noted: &Noted) -> io::Result<bool> {
    let fd = match open_to_write(dir, name) {
        // A mode the run took away from an unprivileged sidecar's own file.
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            add_mode_at(dir, name, 0o200)?;
            open_to_write(dir, name)?
        }
        other => other?,
    };
    let st = fstat(fd.as_fd())?;
    if st.ino != noted.ino || !st.is_regular() {
        return Ok(false);
    }
    let size = i64::try_from(noted.size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: ftruncate on a descriptor we hold; no memory is involved.
    retry(|| unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
    if fstat(fd.as_fd())?.room() > noted.room {
        // Blocks preallocated past the end (`fallocate` with `FALLOC_FL_KEEP_SIZE`), which
        // truncating to the size a file already has leaves on some file systems (tmpfs). A file
        // system without hole punching keeps them, and the file is removed instead.
        let flags = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate on a descriptor we hold; no memory is involved.
        let _ = retry(|| unsafe { libc::fallocate(fd.as_raw_fd(), flags, size, i64::MAX - size) });
    }
    Ok(fstat(fd.as_fd())?.room() <= noted.room)
}

/// The entry `name` of `dir` opened to write, never following a link nor blocking on a fifo.
fn open_to_write(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let flags =
        libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: `name` is a valid C string and `dir` a descriptor we borrow for the call.
    let fd = retry(|| unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::dirfd::open_dir_path;
    use crate::util::tree::testing::{nest, remove};
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
    use std::path::{Path, PathBuf};

    fn temp_dir() -> PathBuf {
        crate::util::private_dir(&std::env::temp_dir(), "ptc-rollback-test").unwrap()
    }

    /// Every entry under `dir` (not following links) with its size for a file, sorted.
    fn listing(dir: &Path) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let meta = entry.path().symlink_metadata().unwrap();
                let name = entry
                    .path()
                    .strip_prefix(dir)
                    .unwrap()
                    .display()
                    .to_string();
                if meta.is_dir() {
                    pending.push(entry.path());
                    out.push((name + "/", 0));
                } else {
                    out.push((name, if meta.is_file() { meta.len() } else { 0 }));
                }
            }
        }
        out.sort();
        out
    }

    fn room(dir: &Path) -> u64 {
        let mut bytes = 0;
        tree::measure(open_dir_path(dir).unwrap(), |st| {
            if !st.is_dir() {
                bytes += st.room();
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        bytes
    }

    #[test]
    fn what_a_run_added_goes_and_what_grew_is_cut_back() {
        let dir = temp_dir();
        let outside = temp_dir();
        std::fs::write(outside.join("keep"), "outside").unwrap();
        std::fs::create_dir_all(dir.join("old/deeper")).unwrap();
        std::fs::write(dir.join("old/a.txt"), "aaaa").unwrap();
        std::fs::write(dir.join("old/deeper/b.txt"), "bb").unwrap();
        std::fs::write(dir.join("grows.bin"), vec![1u8; 1000]).unwrap();
        std::fs::write(dir.join("replaced.txt"), "old").unwrap();
        std::fs::write(dir.join("prealloc.bin"), "p").unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), dir.join("old-link")).unwrap();
        let before = listing(&dir);
        let room_before = room(&dir);
        let manifest = Manifest::take(open_dir_path(&dir).unwrap(), 100).unwrap();
        assert_eq!(manifest.len(), 8);

        // The run: new files, folders and links, a deep tree, a grown file, a replaced one, a
        // new name for an old file, a preallocated tail, a folder it shut.
        std::fs::write(dir.join("new.bin"), vec![0u8; 3 << 20]).unwrap();
        std::fs::create_dir_all(dir.join("old/new-dir/sub")).unwrap();
        std::fs::write(dir.join("old/new-dir/sub/c"), vec![0u8; 1 << 20]).unwrap();
        nest(&dir.join("old"), 100, &"d".repeat(100), 1000);
        let mut grown = std::fs::read(dir.join("grows.bin")).unwrap();
        grown.extend(vec![2u8; 2 << 20]);
        std::fs::write(dir.join("grows.bin"), &grown).unwrap();
        std::fs::write(dir.join("tmp"), "new one").unwrap();
        std::fs::rename(dir.join("tmp"), dir.join("replaced.txt")).unwrap();
        std::fs::hard_link(dir.join("old/a.txt"), dir.join("twin.txt")).unwrap();
        symlink(&outside, dir.join("old/deeper/out")).unwrap();
        let pre = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("prealloc.bin"))
            .unwrap();
        // SAFETY: fallocate on a descriptor we hold.
        let r = unsafe { libc::fallocate(pre.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, 4 << 20) };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        drop(pre);
        std::fs::write(dir.join("old/deeper/inside-shut"), vec![0u8; 1 << 20]).unwrap();
        std::fs::set_permissions(
            dir.join("old/deeper"),
            std::fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        assert!(room(&dir) > room_before + (8 << 20));

        let done = manifest.restore(open_dir_path(&dir).unwrap()).unwrap();
        assert!(done.failed.is_none(), "{:?}", done.failed);
        // new.bin, new-dir, the deep tree, replaced.txt, twin.txt, out, inside-shut.
        assert_eq!((done.removed, done.cut), (7, 2));
        let mut expected = before.clone();
        expected.retain(|(name, _)| name != "replaced.txt");
        assert_eq!(listing(&dir), expected);
        assert!(room(&dir) <= room_before, "{} > {room_before}", room(&dir));
        assert_eq!(
            std::fs::read(dir.join("grows.bin")).unwrap(),
            vec![1u8; 1000]
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("old/a.txt")).unwrap(),
            "aaaa"
        );
        assert_eq!(std::fs::metadata(dir.join("old/a.txt")).unwrap().nlink(), 1);
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "outside"
        );
        assert_eq!(listing(&outside), [("keep".to_string(), 7)]);
        remove(&dir);
        remove(&outside);
    }

    #[test]
    fn a_manifest_is_bounded_and_restores_only_its_own_folder() {
        let dir = temp_dir();
        for i in 0..10 {
            std::fs::write(dir.join(format!("f{i}")), "x").unwrap();
        }
        let err = Manifest::take(open_dir_path(&dir).unwrap(), 9).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it holds more than 9 files, folders and links"
        );
        let manifest = Manifest::take(open_dir_path(&dir).unwrap(), 10).unwrap();
        let other = temp_dir();
        std::fs::write(other.join("mine"), "x").unwrap();
        let err = manifest
            .restore(open_dir_path(&other).unwrap())
            .unwrap_err();
        assert!(matches!(err, NotRestored::Replaced), "{err}");
        assert_eq!(listing(&other), [("mine".to_string(), 1)]);
        remove(&dir);
        remove(&other);
    }
}
