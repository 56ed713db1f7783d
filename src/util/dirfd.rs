//! Folders through descriptors: opening a folder relative to another's descriptor without
//! following a link, `fstatat`/`fstat` as a plain [`Stat`], and reading a folder through
//! `fdopendir` ([`DirStream`]). The pieces both the session store (`session::fs`) and the quota
//! measure ([`super::tree`]) walk with, where a run's hostile tree (links planted anywhere,
//! paths longer than `PATH_MAX`) must never steer a path-based call.
//!
//! Blocking, and owns no state.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
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
}
