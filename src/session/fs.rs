//! The safe-filesystem half of the session store: every access inside a session directory
//! goes through a directory file descriptor, one component at a time, and never follows a
//! symbolic link.
//!
//! A session directory is written by the run user while a run lives, and that code is hostile:
//! it can plant links to `/etc/shadow` or to another session, hard links, fifos, trees deeper
//! than any path buffer, and swap a folder for a link between two of our system calls. The
//! sidecar often runs as root, so a path-based call (`std::fs::read_dir`, `File::open` on a
//! joined path) could be steered anywhere. Here, instead:
//!
//! - folders are opened with `openat(parent_fd, name, O_DIRECTORY | O_NOFOLLOW)`, so a link in
//!   any position fails with `ELOOP`/`ENOTDIR` instead of being followed;
//! - files are checked with `fstatat(AT_SYMLINK_NOFOLLOW)` before they are opened (a device
//!   or fifo is never opened), opened with `O_NOFOLLOW | O_NONBLOCK` (a fifo swapped in
//!   between cannot block us), and checked again with `fstat` on the descriptor we got;
//! - listing reads a folder through `fdopendir` on a descriptor opened as above;
//! - walks hold at most [`MAX_DEPTH`] descriptors and stop past a count of entries, and the
//!   removal of a tree (`util::dirfd::remove_tree`, shared with a run's rollback) is iterative
//!   with the same depth bound (std's `remove_dir_all` does not follow links either, but it
//!   recurses once per level with one descriptor each, so a tree a million folders deep would
//!   exhaust the stack or the descriptor table).
//!
//! Everything here is blocking and owns no state; `super` decides what a session may hold.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::util::dirfd::retry;
pub use crate::util::dirfd::{
    DirStream, Stat, chmod, cstring, fstat, open_dir_at, open_dir_path, remove_tree, rename_at,
    stat_at, unlink_at,
};

/// Folders a name may go through, and so folders a walk descends: a walk holds one descriptor
/// per level, so a hostile tree thousands of levels deep costs no more than this many.
pub const MAX_DEPTH: usize = 64;

/// Makes the folder `name` in `dir` with `mode` (less the umask).
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is a valid C string.
    retry(|| unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })
        .map(drop)
}

/// Gives an open file or folder to `owner` (uid, gid); `None` leaves it as it is.
pub fn chown(fd: BorrowedFd<'_>, owner: Option<(u32, u32)>) -> io::Result<()> {
    match owner {
        // SAFETY: fchown on a descriptor we hold; no memory is involved.
        Some((uid, gid)) => retry(|| unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) }).map(drop),
        None => Ok(()),
    }
}

/// Why a file could not be opened, when it exists.
#[derive(Debug)]
pub enum Refused {
    /// A link, fifo, socket, device or folder.
    NotRegular,
    /// A regular file with another name (see [`Stat::is_plain_file`]).
    HardLink,
    Io(io::Error),
}

impl From<io::Error> for Refused {
    fn from(e: io::Error) -> Refused {
        Refused::Io(e)
    }
}

/// Clears `O_NONBLOCK` (set while opening, so a fifo swapped in could not block the open).
fn clear_nonblock(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor we hold; no memory is involved.
    let flags = retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) })
        .map(drop)
}

fn open_at(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: `name` is a valid C string; the mode argument is read only with O_CREAT.
    let fd = retry(|| unsafe {
        libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint)
    })?;
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the plain file `name` of `dir` for reading: `Ok(None)` when there is no such entry,
/// [`Refused`] when it is anything but a regular file with one name.
pub fn open_file_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> Result<Option<(std::fs::File, Stat)>, Refused> {
    // Checked before opening so a device or fifo is never opened at all.
    let before = match stat_at(dir, name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    check_plain(&before)?;
    let fd = match open_at(dir, name, libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // ELOOP: swapped for a link; ENXIO: for a socket.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) => {
            return Err(Refused::NotRegular);
        }
        Err(e) => return Err(e.into()),
    };
    // Checked again on what we actually opened: the entry may have been swapped meanwhile.
    let st = fstat(fd.as_fd())?;
    check_plain(&st)?;
    clear_nonblock(fd.as_fd())?;
    Ok(Some((std::fs::File::from(fd), st)))
}

/// Whether `st` is what a session serves and writes over: a regular file with one name.
pub fn check_plain(st: &Stat) -> Result<(), Refused> {
    if !st.is_regular() {
        Err(Refused::NotRegular)
    } else if st.nlink != 1 {
        Err(Refused::HardLink)
    } else {
        Ok(())
    }
}

/// Creates or empties the plain file `name` of `dir` for writing, mode 0600, given to
/// `owner`. An existing entry that is not a plain file is refused untouched: the file is
/// opened without `O_TRUNC` and emptied only once `fstat` shows a regular file with one name,
/// so a hard link planted under that name is never truncated.
pub fn create_file_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    owner: Option<(u32, u32)>,
) -> Result<(std::fs::File, Stat), Refused> {
    match stat_at(dir, name) {
        Ok(st) => check_plain(&st)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let fd = match open_at(dir, name, libc::O_WRONLY | libc::O_CREAT, 0o600) {
        Ok(fd) => fd,
        // ELOOP: a link; ENXIO: a fifo without a reader or a socket; EISDIR: a folder.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ELOOP | libc::ENXIO | libc::EISDIR)
            ) =>
        {
            return Err(Refused::NotRegular);
        }
        Err(e) => return Err(e.into()),
    };
    let st = fstat(fd.as_fd())?;
    check_plain(&st)?;
    clear_nonblock(fd.as_fd())?;
    // SAFETY: ftruncate on a descriptor we hold; no memory is involved.
    retry(|| unsafe { libc::ftruncate(fd.as_raw_fd(), 0) })?;
    chmod(fd.as_fd(), 0o600)?;
    chown(fd.as_fd(), owner)?;
    Ok((std::fs::File::from(fd), Stat { size: 0, ..st }))
}

/// Creates the file `name` of `dir`, which must not exist (`O_EXCL`: not even as a link, which
/// is never followed), for writing: mode 0600, given to `owner`.
pub fn create_new_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    owner: Option<(u32, u32)>,
) -> io::Result<(std::fs::File, Stat)> {
    let file = std::fs::File::from(open_at(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?);
    let st = fstat(file.as_fd())?;
    let set_up = || -> io::Result<()> {
        clear_nonblock(file.as_fd())?;
        chmod(file.as_fd(), 0o600)?;
        chown(file.as_fd(), owner)
    };
    if let Err(e) = set_up() {
        // Not left behind half made, if the name still is the file we made.
        if stat_at(dir, name).is_ok_and(|now| now.ino == st.ino) {
            let _ = unlink_at(dir, name, false);
        }
        return Err(e);
    }
    Ok((file, st))
}

/// Why a walk stopped early.
#[derive(Debug)]
pub enum WalkError {
    /// More than the allowed entries.
    TooMany,
    Io(io::Error),
}

impl From<io::Error> for WalkError {
    fn from(e: io::Error) -> WalkError {
        WalkError::Io(e)
    }
}

/// Every regular file under the folder `top`, depth first, passed to `visit` with its name
/// relative to `top` (components joined with '/') and what `fstatat` says of it.
///
/// The name is `None` when a component is not a name a session can serve (not UTF-8, or
/// refused by `name_ok`, or the whole longer than `max_name` bytes); the file is still
/// visited, so it is counted. Links, fifos and the like are not visited; folders on another
/// filesystem (a mount) and deeper than [`MAX_DEPTH`] are not entered. Every entry seen counts
/// against `max_entries` (folders and links too, so a tree of empty folders cannot make a walk
/// unbounded): one more is [`WalkError::TooMany`]. Entries that vanish or cannot be opened
/// while walking are skipped.
pub fn walk(
    top: OwnedFd,
    max_entries: u64,
    max_name: usize,
    name_ok: impl Fn(&str) -> bool,
    mut visit: impl FnMut(Option<&str>, &Stat),
) -> Result<(), WalkError> {
    let dev = fstat(top.as_fd())?.dev;
    // Each level: the folder being read, and its name with a trailing '/' ("" at the top).
    let mut stack: Vec<(DirStream, Option<String>)> =
        vec![(DirStream::new(top)?, Some(String::new()))];
    let mut seen: u64 = 0;
    loop {
        let depth = stack.len();
        let Some((dir, prefix)) = stack.last_mut() else {
            return Ok(());
        };
        let Some(name) = dir.next_name()? else {
            stack.pop();
            continue;
        };
        let Ok(st) = stat_at(dir.fd(), &name) else {
            continue;
        };
        seen += 1;
        if seen > max_entries {
            return Err(WalkError::TooMany);
        }
        let path = match (prefix.as_deref(), name.to_str()) {
            (Some(prefix), Ok(name)) if name_ok(name) => Some(format!("{prefix}{name}")),
            _ => None,
        };
        if st.is_regular() {
            visit(path.as_deref().filter(|p| p.len() <= max_name), &st);
        } else if st.is_dir() && st.dev == dev && depth < MAX_DEPTH {
            let Ok(fd) = open_dir_at(dir.fd(), &name) else {
                continue;
            };
            // What we opened, not what fstatat saw: the entry may have been swapped.
            if fstat(fd.as_fd()).map(|st| st.dev).ok() != Some(dev) {
                continue;
            }
            let dir = DirStream::new(fd)?;
            stack.push((dir, path.map(|p| p + "/")));
        }
    }
}
