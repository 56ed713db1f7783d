//! The user code runs as (`PTC_SANDBOX_USER`), when the sidecar may switch users: resolving it,
//! and the async-signal-safe switch a `Command::pre_exec` makes before exec (supplementary
//! groups dropped, gid, uid, and `RLIMIT_NPROC` bounding that user's processes and threads).
//!
//! Owns reading `/etc/passwd` (no NSS: no LDAP lookup, no dlopen in a multi-threaded process)
//! and the privilege drop; must not spawn anything itself.

use super::SandboxError;
use std::io;
use std::path::Path;

/// A resolved run user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The name as configured (or the uid when given as a number).
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// `RLIMIT_NPROC` set before the switch.
    pub max_processes: u64,
}

/// The real uid of this process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// Whether this process may switch users: effective uid 0, or both CAP_SETUID and CAP_SETGID
/// in its effective capability set.
pub fn can_switch_users() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    effective_caps(&status).is_some_and(|caps| {
        // linux/capability.h: CAP_SETGID 6, CAP_SETUID 7.
        let need = (1u64 << 6) | (1u64 << 7);
        caps & need == need
    })
}

/// `CapEff` of a `/proc/PID/status` text.
fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// Resolves `user` (a name from `/etc/passwd`, a numeric uid, or `uid:gid`) to ids.
pub fn resolve(user: &str, max_processes: u64) -> Result<RunAs, SandboxError> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    resolve_in(&passwd, user, max_processes)
}

/// [`resolve`] against the text of a passwd file.
pub fn resolve_in(passwd: &str, user: &str, max_processes: u64) -> Result<RunAs, SandboxError> {
    let bad = |reason: &str| SandboxError::User {
        user: user.to_string(),
        reason: reason.to_string(),
    };
    let user_trimmed = user.trim();
    if user_trimmed.is_empty() {
        return Err(bad("empty"));
    }
    let (uid, gid) = if let Some((u, g)) = user_trimmed.split_once(':') {
        match (u.parse::<u32>(), g.parse::<u32>()) {
            (Ok(u), Ok(g)) => (u, g),
            _ => return Err(bad("expected NAME, UID or UID:GID")),
        }
    } else if let Ok(uid) = user_trimmed.parse::<u32>() {
        // A bare uid takes its passwd group when it has one, else the same number.
        let gid = passwd_entries(passwd)
            .find(|e| e.1 == uid)
            .map_or(uid, |e| e.2);
        (uid, gid)
    } else {
        match passwd_entries(passwd).find(|e| e.0 == user_trimmed) {
            Some((_, uid, gid)) => (uid, gid),
            None => {
                return Err(bad(
                    "no such user in /etc/passwd (create it, e.g. `useradd --system \
                     --no-create-home ptc-run`, or give a numeric UID:GID)",
                ));
            }
        }
    };
    if uid == 0 || gid == 0 {
        return Err(bad("code must not run as root (uid or gid 0)"));
    }
    Ok(RunAs {
        name: user_trimmed.to_string(),
        uid,
        gid,
        max_processes,
    })
}

/// [`FALLBACK_UID`](super::FALLBACK_UID) as the run user: the default user's stand-in where it
/// does not exist.
pub fn fallback(max_processes: u64) -> RunAs {
    RunAs {
        name: super::FALLBACK_UID.to_string(),
        uid: super::FALLBACK_UID,
        gid: super::FALLBACK_UID,
        max_processes,
    }
}

/// The name `passwd` (the text of `/etc/passwd`) gives `uid`, if any.
pub fn name_of(passwd: &str, uid: u32) -> Option<String> {
    passwd_entries(passwd)
        .find(|e| e.1 == uid)
        .map(|e| e.0.to_string())
}

/// `(name, uid, gid)` of each well-formed line.
fn passwd_entries(passwd: &str) -> impl Iterator<Item = (&str, u32, u32)> {
    passwd.lines().filter_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((name, uid, gid))
    })
}

impl RunAs {
    /// Becomes this user, for `Command::pre_exec` (the fork server and cold children): sets
    /// `RLIMIT_NPROC` while still privileged, drops supplementary groups, then gid, then uid,
    /// and checks none can be regained. Async-signal-safe: setrlimit, setgroups, setgid,
    /// setuid, getuid and friends only; no allocation, no lock.
    ///
    /// The process limit counts every process and thread of the uid, all runs together; an
    /// exec by a uid already at the limit fails with EAGAIN.
    pub fn switch(&self) -> io::Result<()> {
        let limit = libc::rlimit {
            rlim_cur: self.max_processes as libc::rlim_t,
            rlim_max: self.max_processes as libc::rlim_t,
        };
        // SAFETY: plain syscalls on locals; all are async-signal-safe.
        unsafe {
            check(libc::setrlimit(libc::RLIMIT_NPROC, &limit))?;
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setresgid(self.gid, self.gid, self.gid))?;
            check(libc::setresuid(self.uid, self.uid, self.uid))?;
            // Paranoia against a kernel or LSM that ignored part of the drop.
            if libc::getuid() != self.uid
                || libc::geteuid() != self.uid
                || libc::getgid() != self.gid
                || libc::getegid() != self.gid
                || libc::setuid(0) == 0
            {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
        }
        Ok(())
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes a scratch directory private to whoever runs the code: mode 0700, owned by `ids`
/// (uid, gid) when code runs as another user.
pub fn prepare_scratch(scratch: &Path, ids: Option<(u32, u32)>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::chown(scratch, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                          # a comment line\n\
                          nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                          ptc-run:x:999:998::/nonexistent:/usr/sbin/nologin\n";

    #[test]
    fn users_resolve_by_name_uid_and_pair() {
        let run = |u: &str| resolve_in(PASSWD, u, 64).map(|r| (r.name, r.uid, r.gid));
        assert_eq!(run("ptc-run").unwrap(), ("ptc-run".into(), 999, 998));
        assert_eq!(run("999").unwrap(), ("999".into(), 999, 998));
        assert_eq!(run("4242").unwrap(), ("4242".into(), 4242, 4242));
        assert_eq!(run("5000:6000").unwrap(), ("5000:6000".into(), 5000, 6000));
    }

    #[test]
    fn bad_users_are_clear_errors() {
        let err = |u: &str| resolve_in(PASSWD, u, 64).unwrap_err().to_string();
        assert!(err("ghost").contains("no such user in /etc/passwd"));
        assert_eq!(
            err("root"),
            "PTC_SANDBOX_USER=\"root\": code must not run as root (uid or gid 0)"
        );
        assert!(err("0").contains("must not run as root"));
        assert!(err("12:x").contains("expected NAME, UID or UID:GID"));
        assert!(err(" ").contains("empty"));
    }

    #[test]
    fn capabilities_are_read_from_status() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t00000000000000c0\n";
        assert_eq!(effective_caps(status), Some(0xc0));
        assert_eq!(effective_caps("Name: x\n"), None);
    }
}
