//! Folders through descriptors: opening a folder relative to another's descriptor without
//! following a link, `fstatat`/`fstat` as a plain [`Stat`], and reading a folder through
//! `fdopendir` ([`DirStream`]), removing an entry or a whole tree ([`remove_tree`]). The pieces
//! the session store (`session::fs`), the quota measure ([`super::tree`]) and a session's
//! rollback ([`super::rollback`]) walk with, where a run's hostile tree (links planted
//! anywhere, paths longer than `PATH_MAX`) must never steer a path-based call.
//!
//! Blocking, and owns no state.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What `fstat` says about one entry, the fields the store uses (`libc::stat`'s, by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i128,
    pub ino: u64,
    pub dev: u64,
    pub nlink: u64,
    /// 512-byte blocks allocated: what a sparse file really takes.
    pub blocks: u64,
    pub uid: u32,
    pub gid: u32,
}

impl Stat {
    fn of(st: &libc::stat) -> Stat {
        Stat {
            mode: st.st_mode,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ino: st.st_ino,
            dev: st.st_dev,
            // u32 on some architectures (aarch64), u64 on others.
            #[allow(clippy::useless_conversion)]
            nlink: u64::from(st.st_nlink),
            blocks: u64::try_from(st.st_blocks).unwrap_or(0),
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }

    /// A folder (not a link to one).
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// A regular file (not a link to one, a fifo, socket or device).
    pub fn is_regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// A regular file with no other name: what a session lists and serves. A hard link
    /// (`st_nlink > 1`) is refused even though the run user can only link files it may already
    /// read: another name for the same inode could be outside the session, and serving or
    /// overwriting it through the session is never what anyone meant.
    pub fn is_plain_file(&self) -> bool {
        self.is_regular() && self.nlink == 1
    }

    /// The bytes a quota counts of it: as allocated on disk (a sparse file counts what it
    /// holds, a file preallocated past its end what it took) or as long, whichever is more.
    pub fn room(&self) -> u64 {
        self.size.max(self.blocks.saturating_mul(512))
    }

    /// The modification time (the epoch for a time that does not fit).
    pub fn modified(&self) -> SystemTime {
        let secs = self.mtime_ns.div_euclid(1_000_000_000);
        let nanos = self.mtime_ns.rem_euclid(1_000_000_000) as u64;
        let whole = if secs >= 0 {
            u64::try_from(secs)
                .ok()
                .and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s)))
        } else {
            u64::try_from(-secs)
                .ok()
                .and_then(|s| UNIX_EPOCH.checked_sub(Duration::from_secs(s)))
        };
        whole
            .and_then(|t| t.checked_add(Duration::from_nanos(nanos)))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// `name` as a C string (a name with a NUL byte cannot name anything: `InvalidInput`).
pub fn cstring(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Retries a call that failed with `EINTR`.
pub fn retry(mut call: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        match cvt(call()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Opens the folder `name` of `dir` without following a link: a link or a non-folder is
/// `ELOOP` or `ENOTDIR`. `name` may be `"."` for a second descriptor of `dir` itself.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is a valid C string and `dir` a descriptor we borrow for the call.
    let fd = retry(|| unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// [`open_dir_at`] for a folder the sidecar must walk into or empty whatever mode a run left
/// on it: it is given `u+rwx` when it lacks it ([`add_mode_at`] when it cannot be opened at
/// all). Fails as [`open_dir_at`] does for anything else, and with `EACCES` for a folder of
/// another owner.
pub fn open_dir_writable_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let fd = match open_dir_at(dir, name) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            add_mode_at(dir, name, 0o700)?;
            open_dir_at(dir, name)?
        }
        other => other?,
    };
    let mode = fstat(fd.as_fd())?.mode;
    if mode & 0o700 != 0o700 {
        // Fails harmlessly for a folder we do not own; removing from it then fails and says so.
        let _ = chmod(fd.as_fd(), (mode & 0o7777) | 0o700);
    }
    Ok(fd)
}

/// Adds the mode bits `add` to the folder or regular file `name` of `dir`, which may refuse to
/// be opened (its owner's bits cleared by a run: that stops an unprivileged sidecar, which runs
/// code as its own uid and so owns what a run makes, though not root). It is reached through
/// an `O_PATH` descriptor, which needs no permission on it and with `O_NOFOLLOW` holds a link
/// itself rather than what it points to (refused here: `ELOOP`), and its mode is changed
/// through that descriptor's `/proc/self/fd` path, which names that inode and nothing else.
pub fn add_mode_at(dir: BorrowedFd<'_>, name: &CStr, add: u32) -> io::Result<()> {
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is a valid C string and `dir` a descriptor we borrow for the call.
    let raw = retry(|| unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    let path = unsafe { OwnedFd::from_raw_fd(raw) };
    let st = fstat(path.as_fd())?;
    if !st.is_dir() && !st.is_regular() {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    if st.mode & add == add {
        return Ok(());
    }
    let proc = CString::new(format!("/proc/self/fd/{raw}"))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mode = (st.mode & 0o7777) | add;
    // SAFETY: a valid C string, naming the inode `path` holds while `path` is open.
    retry(|| unsafe { libc::chmod(proc.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// Opens a folder given by a trusted path (the store's root, from configuration).
pub fn open_dir_path(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: `path` is a valid C string.
    let fd = retry(|| unsafe { libc::open(path.as_ptr(), flags) })?;
    // SAFETY: open returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The entry `name` of `dir` itself, a link not followed.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a valid C string, `st` a writable stat buffer.
    retry(|| unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(Stat::of(&st))
}

/// What an open descriptor refers to.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat buffer.
    retry(|| unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(Stat::of(&st))
}

/// A folder being read: `fdopendir` on a descriptor opened by [`open_dir_at`]. Owns the
/// descriptor (closed with the stream).
pub struct DirStream {
    dir: NonNull<libc::DIR>,
}

impl DirStream {
    /// Reads the folder `fd` (taken over).
    pub fn new(fd: OwnedFd) -> io::Result<DirStream> {
        let raw = fd.into_raw_fd();
        // SAFETY: `raw` is an open folder descriptor we own; fdopendir takes it over.
        let dir = unsafe { libc::fdopendir(raw) };
        match NonNull::new(dir) {
            Some(dir) => Ok(DirStream { dir }),
            None => {
                let e = io::Error::last_os_error();
                // SAFETY: fdopendir failed, so the descriptor is still ours to close.
                unsafe { libc::close(raw) };
                Err(e)
            }
        }
    }

    /// The folder's descriptor, for `*at` calls on its entries.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the stream is open for as long as `self` lives, and so is its descriptor.
        unsafe { BorrowedFd::borrow_raw(libc::dirfd(self.dir.as_ptr())) }
    }

    /// The next entry's name, `.` and `..` left out; `None` at the end.
    pub fn next_name(&mut self) -> io::Result<Option<CString>> {
        loop {
            // readdir reports an error only through errno, and leaves it alone at the end.
            // SAFETY: errno is this thread's own.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: the stream is open and used by this thread only (`self` is not Sync).
            let entry = unsafe { libc::readdir(self.dir.as_ptr()) };
            if entry.is_null() {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(0) | None => Ok(None),
                    Some(_) => Err(e),
                };
            }
            // SAFETY: readdir returned an entry whose d_name is NUL-terminated and stays valid
            // until the next readdir on this stream; we copy it before that.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
            if name != c"." && name != c".." {
                return Ok(Some(name.to_owned()));
            }
        }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream is open and dropped once; closedir closes its descriptor.
        unsafe { libc::closedir(self.dir.as_ptr()) };
    }
}

/// Folders [`remove_tree`] holds open at once, however deep the tree: a folder deeper than
/// this is moved up and emptied in a later pass.
pub const REMOVE_LEVELS: usize = 64;

/// Passes [`remove_tree`] makes before giving up: each pass empties the tree to
/// [`REMOVE_LEVELS`] and moves what lies deeper to the top, so this bounds the removal of a tree
/// about 64 million folders deep, or of one something keeps writing into.
const MAX_REMOVE_PASSES: usize = 1 << 20;

/// Removes the entry `name` of `dir`: a file, link or fifo, or with `folder` an empty folder.
/// Never follows a link (unlinkat acts on the entry itself).
pub fn unlink_at(dir: BorrowedFd<'_>, name: &CStr, folder: bool) -> io::Result<()> {
    let flags = if folder { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: `name` is a valid C string.
    retry(|| unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// Renames the entry `from` of `from_dir` to `to` in `to_dir` (acts on entries, never
/// follows a link).
pub fn rename_at(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: both names are valid C strings.
    retry(|| unsafe {
        libc::renameat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
        )
    })
    .map(drop)
}

/// Sets the permission bits of an open file or folder.
pub fn chmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: fchmod on a descriptor we hold; no memory is involved.
    retry(|| unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) }).map(drop)
}

/// Removes the entry `name` of `parent` and, for a folder, everything in it, without
/// following a link and with at most [`REMOVE_LEVELS`] descriptors open however deep the tree:
/// a folder deeper than that is moved up to the top of the tree and emptied in a later pass.
/// Folders a run made read-only or unreadable are given `u+rwx` first
/// ([`open_dir_writable_at`]). A missing entry is fine.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    match stat_at(parent, name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(st) if !st.is_dir() => return ignore_missing(unlink_at(parent, name, false)),
        Ok(_) => {}
    }
    for _ in 0..MAX_REMOVE_PASSES {
        let top = match open_dir_writable_at(parent, name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        let progress = empty_pass(top)?;
        match unlink_at(parent, name, true) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) && progress => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "still not empty after {MAX_REMOVE_PASSES} passes; something keeps writing into it"
    )))
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// One pass of [`remove_tree`] over the folder `top`: removes what it can reach within
/// [`REMOVE_LEVELS`], moves deeper folders up into `top`. Whether it removed or moved anything.
fn empty_pass(top: OwnedFd) -> io::Result<bool> {
    let top_again = open_dir_at(top.as_fd(), c".")?;
    let mut progress = false;
    // Each level: the folder being emptied, and its name in the level above (None at the top).
    let mut stack: Vec<(DirStream, Option<CString>)> = vec![(DirStream::new(top)?, None)];
    loop {
        let depth = stack.len();
        let Some((dir, _)) = stack.last_mut() else {
            return Ok(progress);
        };
        let Some(entry) = dir.next_name()? else {
            if let Some((_, Some(name))) = stack.pop()
                && let Some((parent, _)) = stack.last()
            {
                // Not empty: something was added meanwhile; the next pass gets it.
                match unlink_at(parent.fd(), &name, true) {
                    Ok(()) => progress = true,
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::ENOENT)) => {}
                    Err(e) => return Err(e),
                }
            }
            continue;
        };
        let st = match stat_at(dir.fd(), &entry) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            other => other?,
        };
        if !st.is_dir() {
            ignore_missing(unlink_at(dir.fd(), &entry, false))?;
            progress = true;
        } else if depth < REMOVE_LEVELS {
            // A folder the run user made read-only or unreadable could not be emptied by an
            // unprivileged sidecar: it is given u+rwx first.
            let fd = match open_dir_writable_at(dir.fd(), &entry) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                other => other?,
            };
            let dir = DirStream::new(fd)?;
            stack.push((dir, Some(entry)));
        } else {
            let mut random = [0u8; 8];
            rand::fill(&mut random);
            let to = cstring(&format!(".deep-{}", crate::util::hex(&random)))?;
            ignore_missing(rename_at(dir.fd(), &entry, top_again.as_fd(), &to))?;
            progress = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modified_converts_times_before_and_after_1970() {
        let at = |mtime_ns: i128| {
            Stat {
                mode: 0,
                size: 0,
                mtime_ns,
                ino: 0,
                dev: 0,
                nlink: 1,
                blocks: 0,
                uid: 0,
                gid: 0,
            }
            .modified()
        };
        assert_eq!(at(1_500_000_000), UNIX_EPOCH + Duration::from_millis(1500));
        assert_eq!(at(-500_000_000), UNIX_EPOCH - Duration::from_millis(500));
        assert_eq!(at(i128::MAX), UNIX_EPOCH);
    }

    #[test]
    fn remove_tree_takes_a_tree_deeper_than_many_passes() {
        let base = crate::util::private_dir(&std::env::temp_dir(), "ptc-session-fs-test").unwrap();
        let mut path = base.join("tree");
        std::fs::create_dir(&path).unwrap();
        // 1500 levels: about 24 passes of 64, and a path of 3000 bytes, under PATH_MAX.
        for _ in 0..1500 {
            path.push("d");
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("f"), "x").unwrap();
        }
        let parent = open_dir_path(&base).unwrap();
        remove_tree(parent.as_fd(), c"tree").unwrap();
        assert!(!base.join("tree").exists());
        // Gone already: fine.
        remove_tree(parent.as_fd(), c"tree").unwrap();
        // A link is removed, not followed.
        std::fs::create_dir(base.join("target")).unwrap();
        std::fs::write(base.join("target/f"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("target"), base.join("link")).unwrap();
        remove_tree(parent.as_fd(), c"link").unwrap();
        assert!(base.join("target/f").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
