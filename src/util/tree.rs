//! A folder tree measured through descriptors, at any depth: every entry under a folder handed
//! to a visitor with what `fstatat` says of it, for the quotas (a run's scratch directory, a
//! session's folder).
//!
//! A path-based walk (`std::fs::read_dir` on joined paths) fails past `PATH_MAX` and skipped
//! what lay deeper: 180 MiB once hid from a 16 MiB quota in folders nested past it. Here each
//! folder is opened relative to its parent's descriptor (`openat`, `O_NOFOLLOW`), so the depth
//! of a path never matters, and the cost stays bounded however hostile the tree: at most
//! [`OPEN_LEVELS`] descriptors are open at once (the folders of deeper levels are read ahead
//! and closed, and found again through `..`, checked to be the same folder), at most
//! [`MAX_TREE_DEPTH`] levels are entered, and the visitor stops the walk once it has seen
//! enough. What cannot be measured — too deep, a folder that cannot be read, a tree changed
//! under the walk where it had to find a folder again — is an [`Unmeasurable`], which a quota
//! counts as over.
//!
//! Blocking, and owns no state.

use std::ffi::{CStr, CString};
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::dirfd::{DirStream, Stat, fstat, open_dir_at, stat_at};

/// Levels of folders a measure enters: far past any data layout, and a tree nested deeper
/// (a few thousand `mkdir`s, to hide bytes from a quota) is [`Unmeasurable::TooDeep`].
pub const MAX_TREE_DEPTH: usize = 4096;

/// Folders a measure holds open at once, however deep the tree: a walk holding one descriptor
/// per level would run the sidecar out of descriptors on a deep enough tree.
pub const OPEN_LEVELS: usize = 32;

/// Entry names a measure holds in memory for the folders it closed (those deeper than
/// [`OPEN_LEVELS`] below the folder it reads): without a bound, a wide folder deep in a tree
/// would be read into memory whole.
pub const MAX_HELD_NAMES: usize = 1 << 16;

/// Why a tree could not be measured. A quota counts it as over: what cannot be measured could
/// hold anything.
#[derive(Debug, thiserror::Error)]
pub enum Unmeasurable {
    #[error("its folders are nested more than {MAX_TREE_DEPTH} deep")]
    TooDeep,
    #[error("its folders deeper than {OPEN_LEVELS} levels hold more than {MAX_HELD_NAMES} entries")]
    TooWide,
    #[error("a folder more than {OPEN_LEVELS} levels deep was moved while it was measured")]
    Moved,
    #[error("a folder in it cannot be read: {0}")]
    Unreadable(io::Error),
}

/// One folder being walked: read through its stream, or (once it is far enough above the
/// folder being read) through the names read ahead from it, its descriptor closed.
struct Level {
    dir: Dir,
    /// What the folder is (`st_dev`, `st_ino`), to tell it is the same when found again.
    id: (u64, u64),
}

enum Dir {
    Open(DirStream),
    /// The names not visited yet, and the descriptor while it is open.
    Held(Vec<CString>, Option<OwnedFd>),
}

impl Level {
    fn open(fd: OwnedFd) -> Result<Level, Unmeasurable> {
        let st = fstat(fd.as_fd()).map_err(Unmeasurable::Unreadable)?;
        let dir = DirStream::new(fd).map_err(Unmeasurable::Unreadable)?;
        Ok(Level {
            dir: Dir::Open(dir),
            id: (st.dev, st.ino),
        })
    }

    /// The folder's descriptor, when it is open.
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.dir {
            Dir::Open(stream) => Some(stream.fd()),
            Dir::Held(_, fd) => fd.as_ref().map(AsFd::as_fd),
        }
    }

    fn next_name(&mut self) -> Result<Option<CString>, Unmeasurable> {
        match &mut self.dir {
            Dir::Open(stream) => stream.next_name().map_err(Unmeasurable::Unreadable),
            Dir::Held(names, _) => Ok(names.pop()),
        }
    }

    /// Reads the rest of the folder's names and closes it; `held` counts the names held by
    /// every level.
    fn close(&mut self, held: &mut usize) -> Result<(), Unmeasurable> {
        let Dir::Open(stream) = &mut self.dir else {
            if let Dir::Held(_, fd) = &mut self.dir {
                *fd = None;
            }
            return Ok(());
        };
        let mut names = Vec::new();
        while let Some(name) = stream.next_name().map_err(Unmeasurable::Unreadable)? {
            *held += 1;
            if *held > MAX_HELD_NAMES {
                return Err(Unmeasurable::TooWide);
            }
            names.push(name);
        }
        names.reverse();
        self.dir = Dir::Held(names, None);
        Ok(())
    }
}

/// One entry of a tree as [`walk`] hands it over: where it is and what `fstatat` says of it.
pub struct Entry<'a> {
    /// The folder holding it, open: for `*at` calls on it (removing it, opening it).
    pub dir: BorrowedFd<'a>,
    /// The inode of that folder (the walk never leaves `top`'s file system).
    pub dir_ino: u64,
    pub name: &'a CStr,
    pub stat: &'a Stat,
}

/// Hands every entry under the folder `top` (not `top` itself) to `visit` with its `fstatat`
/// (a link not followed), depth first, until `visit` breaks or every entry was seen. Folders
/// are entered when they are on `top`'s file system (a mount inside is counted, not entered);
/// links, fifos and the like are only counted. An entry that vanishes while the walk goes is
/// skipped, as is a folder swapped for something else between its `fstatat` and its opening
/// (the next measure counts what is there then).
pub fn measure(
    top: OwnedFd,
    mut visit: impl FnMut(&Stat) -> ControlFlow<()>,
) -> Result<(), Unmeasurable> {
    walk(top, |entry| visit(entry.stat))
}

/// [`measure`], each entry handed over with its folder and name. A folder is entered after
/// `visit` saw it, so a visitor that removes a folder is not taken into it.
pub fn walk(
    top: OwnedFd,
    mut visit: impl FnMut(Entry<'_>) -> ControlFlow<()>,
) -> Result<(), Unmeasurable> {
    let dev = fstat(top.as_fd()).map_err(Unmeasurable::Unreadable)?.dev;
    let mut stack = vec![Level::open(top)?];
    let mut held = 0usize;
    loop {
        let depth = stack.len();
        let Some(level) = stack.last_mut() else {
            return Ok(());
        };
        let Some(name) = level.next_name()? else {
            finish_level(&mut stack)?;
            continue;
        };
        if let Dir::Held(..) = level.dir {
            held -= 1;
        }
        let Some(fd) = level.fd() else {
            // The level being read is always open (finish_level reopens it).
            return Err(Unmeasurable::Moved);
        };
        let st = match stat_at(fd, &name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Unmeasurable::Unreadable(e)),
        };
        let entry = Entry {
            dir: fd,
            dir_ino: level.id.1,
            name: &name,
            stat: &st,
        };
        if visit(entry).is_break() {
            return Ok(());
        }
        if !st.is_dir() || st.dev != dev {
            continue;
        }
        if depth > MAX_TREE_DEPTH {
            return Err(Unmeasurable::TooDeep);
        }
        let child = match open_dir_at(fd, &name) {
            Ok(child) => child,
            // Gone, or swapped for a link or a file since the fstatat.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) =>
            {
                continue;
            }
            Err(e) => return Err(Unmeasurable::Unreadable(e)),
        };
        let child = Level::open(child)?;
        if child.id.0 != dev {
            continue;
        }
        stack.push(child);
        if stack.len() > OPEN_LEVELS {
            let far = stack.len() - OPEN_LEVELS - 1;
            stack[far].close(&mut held)?;
        }
    }
}

/// Leaves the folder on top of `stack`: its parent, when its descriptor was closed, is opened
/// again through the folder's `..` and must be the folder it was.
fn finish_level(stack: &mut Vec<Level>) -> Result<(), Unmeasurable> {
    let Some(done) = stack.pop() else {
        return Ok(());
    };
    let Some(parent) = stack.last_mut() else {
        return Ok(());
    };
    if parent.fd().is_some() {
        return Ok(());
    }
    let Some(fd) = done.fd() else {
        return Err(Unmeasurable::Moved);
    };
    let up = open_dir_at(fd, c"..").map_err(Unmeasurable::Unreadable)?;
    let st = fstat(up.as_fd()).map_err(Unmeasurable::Unreadable)?;
    if (st.dev, st.ino) != parent.id {
        return Err(Unmeasurable::Moved);
    }
    if let Dir::Held(_, fd) = &mut parent.dir {
        *fd = Some(up);
    }
    Ok(())
}

/// Deep trees for tests, made and removed through descriptors.
#[cfg(test)]
pub(crate) mod testing {
    use crate::util::dirfd::{open_dir_at, open_dir_path};
    use std::ffi::CString;
    use std::os::fd::{AsFd, AsRawFd};
    use std::path::Path;

    /// Makes `levels` nested folders named `name` under `dir` with a file of `file_bytes` in
    /// each, relative to descriptors (the path of the deepest is far past `PATH_MAX`).
    pub fn nest(dir: &Path, levels: usize, name: &str, file_bytes: usize) {
        let name = CString::new(name).unwrap();
        let mut fd = open_dir_path(dir).unwrap();
        for _ in 0..levels {
            // SAFETY: valid C strings and a descriptor we hold.
            unsafe {
                assert_eq!(libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o700), 0);
            }
            fd = open_dir_at(fd.as_fd(), &name).unwrap();
            // SAFETY: as above; the file descriptor is closed at once.
            unsafe {
                let f = libc::openat(
                    fd.as_raw_fd(),
                    c"f".as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                    0o600,
                );
                assert!(f >= 0);
                let data = vec![b'x'; file_bytes];
                assert_eq!(
                    libc::write(f, data.as_ptr().cast(), data.len()),
                    data.len() as isize
                );
                libc::close(f);
            }
        }
    }

    /// Removes a tree of any depth (`rm` walks by descriptors too; std's `remove_dir_all` holds
    /// one per level).
    pub fn remove(dir: &Path) {
        let status = std::process::Command::new("rm")
            .arg("-rf")
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{nest, remove};
    use super::*;
    use crate::util::dirfd::open_dir_path;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    fn temp_dir() -> PathBuf {
        crate::util::private_dir(&std::env::temp_dir(), "ptc-tree-test").unwrap()
    }

    /// (entries, regular files, their bytes) under `dir`.
    fn count(dir: &Path) -> Result<(u64, u64, u64), Unmeasurable> {
        let (mut entries, mut files, mut bytes) = (0, 0, 0);
        measure(open_dir_path(dir).unwrap(), |st| {
            entries += 1;
            if st.is_regular() {
                files += 1;
                bytes += st.size;
            }
            ControlFlow::Continue(())
        })?;
        Ok((entries, files, bytes))
    }

    #[test]
    fn a_tree_past_path_max_is_measured_whole() {
        let dir = temp_dir();
        std::fs::write(dir.join("top"), b"abc").unwrap();
        std::os::unix::fs::symlink("/usr", dir.join("usr")).unwrap();
        // 100 levels of 200-byte names: a path of 20 KB, five times PATH_MAX, and deeper than
        // the folders a measure holds open.
        nest(&dir, 100, &"d".repeat(200), 1000);
        assert_eq!(count(&dir).unwrap(), (2 + 200, 101, 3 + 100 * 1000));
        remove(&dir);
    }

    #[test]
    fn too_deep_and_unreadable_trees_are_unmeasurable() {
        let dir = temp_dir();
        nest(&dir, MAX_TREE_DEPTH + 1, "d", 0);
        let err = count(&dir).unwrap_err();
        assert!(matches!(err, Unmeasurable::TooDeep), "{err}");
        assert_eq!(
            err.to_string(),
            "its folders are nested more than 4096 deep"
        );
        remove(&dir);

        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } == 0 {
            eprintln!("skipped the unreadable folder: root reads every folder");
            return;
        }
        let dir = temp_dir();
        std::fs::create_dir_all(dir.join("a/locked")).unwrap();
        std::fs::set_permissions(dir.join("a/locked"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        let err = count(&dir).unwrap_err();
        assert!(matches!(err, Unmeasurable::Unreadable(_)), "{err}");
        std::fs::set_permissions(dir.join("a/locked"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        remove(&dir);
    }

    #[test]
    fn the_visitor_stops_the_walk() {
        let dir = temp_dir();
        for i in 0..50 {
            std::fs::write(dir.join(format!("f{i}")), b"x").unwrap();
        }
        let mut seen = 0;
        measure(open_dir_path(&dir).unwrap(), |_| {
            seen += 1;
            if seen == 10 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(seen, 10);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
