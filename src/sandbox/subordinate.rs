//! An unprivileged sidecar's uid per run: the ids `/etc/subuid` and `/etc/subgid` grant its
//! user, given through `newuidmap` and `newgidmap` (the setuid helpers of shadow, Debian's
//! `uidmap` package), as rootless containers get theirs.
//!
//! Without it an unprivileged sidecar has one uid to give, and its runs share it. With it the
//! sidecar enters, once at start and before any thread exists, a user namespace of its own
//! that maps its own uid to 0 and the granted ids to themselves (as `podman unshare` does); in
//! there it is root, and does what a root sidecar does: each run and session gets a uid of its
//! own from the grant, owns its folder (mode 0700), and the kernel keeps one run's files from
//! every other. The sidecar's own files stay its host uid's, and so do its MCP servers.
//!
//! Only [`enter`] spawns anything (the two helpers) and touches the process: `main` calls it
//! before the tokio runtime starts (`setns` into a user namespace needs a single thread). The
//! rest is plain text and arithmetic, tested here.

use super::uids::MIN_COUNT;
use super::{UidRange, Unavailable};
use std::sync::OnceLock;

/// What the grant gives, in this process's user namespace once entered (the ids are the
/// host's own numbers: a uid seen by `stat` outside is the uid the sidecar leased inside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subordinate {
    /// The uids each run and session gets one of: the grant less its last two ids.
    pub range: UidRange,
    /// The run user's uid (and gid): the grant's next-to-last id. Code runs as it only where a
    /// run has no uid of its own (a session made before the range).
    pub run_user: u32,
    /// The sidecar's own gid in the namespace: the grant's last id. Its host gid is not mapped
    /// (mapping it would make `newgidmap` deny `setgroups`, and runs could not drop the
    /// sidecar's supplementary groups), and files need a mapped group.
    pub own_gid: u32,
    /// The user the grant is for, as `/etc/subuid` names it.
    pub user: String,
}

/// What [`enter`] did: `None` when it was not tried (root, the sandbox or the uid range off),
/// `Some(Err(reason))` when this machine gives no subordinate ids (the reason says how to get
/// them), `Some(Ok(_))` when the sidecar is in its namespace.
static OUTCOME: OnceLock<Result<Subordinate, Unavailable>> = OnceLock::new();

/// What [`enter`] did, for the sandbox's status (`/healthz` `sandbox.uids`).
pub fn outcome() -> Option<Result<Subordinate, Unavailable>> {
    OUTCOME.get().cloned()
}

/// A range of `/etc/subuid` or `/etc/subgid`: `first .. first + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub first: u32,
    pub count: u32,
}

/// The first range `text` (a subuid or subgid file) grants the user `name` (or its uid, the
/// other form shadow accepts).
pub fn grant(text: &str, name: &str, uid: u32) -> Option<Grant> {
    let uid = uid.to_string();
    text.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let owner = fields.next()?;
        let first = fields.next()?.parse().ok()?;
        let count: u32 = fields.next()?.parse().ok()?;
        let fits = u64::from(first) + u64::from(count) <= u64::from(u32::MAX);
        ((owner == name || owner == uid) && count > 0 && fits).then_some(Grant { first, count })
    })
}

/// The maps of the sidecar's namespace and what they give, from the grants of its user:
/// uids `0` → `my_uid` and the uid grant to itself; gids the same numbers to the gid grant
/// (no map of the sidecar's own gid: see [`Subordinate::own_gid`]). `asked` is an operator's
/// `PTC_SANDBOX_UIDS`, which must lie inside the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `newuidmap`'s arguments after the pid: `inside outside count` triples.
    pub uid_map: Vec<u32>,
    /// `newgidmap`'s arguments after the pid.
    pub gid_map: Vec<u32>,
    pub given: Subordinate,
}

pub fn layout(
    user: &str,
    my_uid: u32,
    uids: Grant,
    gids: Grant,
    asked: Option<UidRange>,
) -> Result<Layout, Unavailable> {
    let count = uids.count.min(gids.count);
    let usable = count.saturating_sub(2);
    if usable < MIN_COUNT {
        return Err(Unavailable(format!(
            "/etc/subuid and /etc/subgid grant {user:?} {count} ids; a uid per run needs at \
             least {} (the last two are the run user's and the sidecar's group)",
            MIN_COUNT + 2
        )));
    }
    let whole = UidRange {
        first: uids.first,
        count: usable,
    };
    let range = match asked {
        None => whole,
        Some(r) if whole.contains(r.first) && whole.contains(r.last()) => r,
        Some(r) => {
            return Err(Unavailable(format!(
                "{r} is outside its user's /etc/subuid \
                 grant, {whole} here; choose a range inside it, or leave PTC_SANDBOX_UIDS unset"
            )));
        }
    };
    let run_user = uids.first + usable;
    Ok(Layout {
        uid_map: vec![0, my_uid, 1, uids.first, uids.first, count],
        gid_map: vec![uids.first, gids.first, count],
        given: Subordinate {
            range,
            run_user,
            own_gid: run_user + 1,
            user: user.to_string(),
        },
    })
}

/// Enters the sidecar's own user namespace with its subordinate ids, where the machine grants
/// them, and records what happened for [`outcome`]. `asked` is `PTC_SANDBOX_UIDS` when the
/// operator set it: then a machine that gives no ids is an error, as for a root sidecar.
///
/// Must be called before any other thread exists. The sidecar's environment never reaches the
/// helpers (they run with an empty one).
pub fn enter(asked: Option<UidRange>) -> Result<(), Unavailable> {
    let started = std::time::Instant::now();
    let tried = try_enter(asked);
    match &tried {
        Ok(given) => tracing::info!(
            "runs get uids of their own: {} of {}'s /etc/subuid grant (the sidecar is root in a \
             user namespace of its own, entered in {:.1} ms; the run user is {})",
            given.range,
            given.user,
            started.elapsed().as_secs_f64() * 1000.0,
            given.run_user
        ),
        Err(reason) => tracing::debug!("no uid per run: {reason}"),
    }
    let failed = tried.as_ref().err().cloned();
    let _ = OUTCOME.set(tried);
    match (failed, asked) {
        (Some(reason), Some(range)) => Err(Unavailable(format!(
            "PTC_SANDBOX_UIDS={range}: an unprivileged sidecar gives runs subordinate ids: \
             {reason}"
        ))),
        _ => Ok(()),
    }
}

fn try_enter(asked: Option<UidRange>) -> Result<Subordinate, Unavailable> {
    // SAFETY: getuid and getgid cannot fail.
    let my_uid = unsafe { libc::getuid() };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let user = super::user::name_of(&passwd, my_uid).unwrap_or_else(|| my_uid.to_string());
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let how = format!(
        "give it ids, e.g. `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 \
         {user}`, and install newuidmap (Debian's uidmap)"
    );
    let (Some(uids), Some(gids)) = (
        grant(&read("/etc/subuid"), &user, my_uid),
        grant(&read("/etc/subgid"), &user, my_uid),
    ) else {
        return Err(Unavailable(format!(
            "/etc/subuid and /etc/subgid grant {user:?} no ids ({how})"
        )));
    };
    let layout = layout(&user, my_uid, uids, gids, asked)?;
    let helpers = ["newuidmap", "newgidmap"].map(find_program);
    let [Some(newuidmap), Some(newgidmap)] = helpers else {
        return Err(Unavailable(format!(
            "newuidmap or newgidmap is not installed ({how})"
        )));
    };
    namespace::join(&layout, &newuidmap, &newgidmap)?;
    Ok(layout.given)
}

/// `name` in the usual places of setuid helpers and `PATH`.
fn find_program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"])
        .filter(|dir| !dir.is_empty())
        .map(|dir| std::path::Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// The part that touches the process: a child makes the namespace, the helpers map it, and
/// the sidecar joins it with `setns` (it owns the namespace, so it may), so a failure at any
/// step leaves the sidecar where it was.
mod namespace {
    use super::{Layout, Unavailable};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Path;

    fn os_error(what: &str) -> Unavailable {
        Unavailable(format!("{what}: {}", std::io::Error::last_os_error()))
    }

    fn pipe() -> Result<(OwnedFd, OwnedFd), Unavailable> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(os_error("pipe2"));
        }
        // SAFETY: both are open descriptors owned by nothing else.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// A child in a new user namespace, waiting until `hold` is closed; reaped on drop.
    struct Holder {
        pid: libc::pid_t,
        hold: Option<OwnedFd>,
    }

    impl Drop for Holder {
        fn drop(&mut self) {
            self.hold.take();
            let mut status = 0;
            // SAFETY: waits for our own child, which exits once `hold` is closed.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }

    fn holder() -> Result<Holder, Unavailable> {
        let (ready_r, ready_w) = pipe()?;
        let (hold_r, hold_w) = pipe()?;
        // SAFETY: the process has one thread (the caller's promise); the child calls only
        // async-signal-safe functions and ends in `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(os_error("fork"));
        }
        if pid == 0 {
            // SAFETY: the child: closes the parent's ends (so `hold` reads EOF once the
            // parent closes its end), unshares, writes once, reads once, `_exit`s.
            unsafe {
                libc::close(hold_w.as_raw_fd());
                libc::close(ready_r.as_raw_fd());
                let errno = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                    0
                } else {
                    *libc::__errno_location()
                };
                let bytes = errno.to_ne_bytes();
                libc::write(ready_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                let mut byte = 0u8;
                libc::read(hold_r.as_raw_fd(), (&raw mut byte).cast(), 1);
                libc::_exit(0);
            }
        }
        drop((ready_w, hold_r));
        let holder = Holder {
            pid,
            hold: Some(hold_w),
        };
        let mut bytes = [0u8; 4];
        // SAFETY: reads at most four bytes into `bytes`.
        let n = unsafe { libc::read(ready_r.as_raw_fd(), bytes.as_mut_ptr().cast(), 4) };
        match (n, i32::from_ne_bytes(bytes)) {
            (4, 0) => Ok(holder),
            (4, errno) => Err(Unavailable(format!(
                "unshare(CLONE_NEWUSER): {} (user namespaces are off for this user)",
                std::io::Error::from_raw_os_error(errno)
            ))),
            _ => Err(Unavailable(
                "the child making the user namespace died".into(),
            )),
        }
    }

    fn map(helper: &Path, pid: libc::pid_t, triples: &[u32]) -> Result<(), Unavailable> {
        let output = std::process::Command::new(helper)
            .arg(pid.to_string())
            .args(triples.iter().map(u32::to_string))
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| Unavailable(format!("{}: {e}", helper.display())))?;
        if output.status.success() {
            return Ok(());
        }
        Err(Unavailable(format!(
            "{} refused the map {triples:?}: {}",
            helper.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }

    pub(super) fn join(
        layout: &Layout,
        newuidmap: &Path,
        newgidmap: &Path,
    ) -> Result<(), Unavailable> {
        let holder = holder()?;
        map(newuidmap, holder.pid, &layout.uid_map)?;
        map(newgidmap, holder.pid, &layout.gid_map)?;
        let ns = std::fs::File::open(format!("/proc/{}/ns/user", holder.pid))
            .map_err(|e| Unavailable(format!("opening the new user namespace: {e}")))?;
        // SAFETY: setns on an open namespace descriptor; the process has one thread.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
            return Err(os_error("setns into the new user namespace"));
        }
        drop(holder);
        // In there the sidecar's host gid and groups are not mapped: a group of the grant, and
        // no supplementary groups (they would still open the host's files to its children).
        let gid = layout.given.own_gid;
        // SAFETY: plain credential calls; the namespace maps `gid` and allows setgroups.
        unsafe {
            if libc::setresgid(gid, gid, gid) != 0 {
                return Err(os_error("setresgid in the new user namespace"));
            }
            if libc::setgroups(0, std::ptr::null()) != 0 {
                return Err(os_error("setgroups in the new user namespace"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_grant_is_found_by_name_or_uid() {
        let text = "alice:100000:65536\n# note\nbob:x:1\n1001:300000:1000\n";
        let alice = Grant {
            first: 100000,
            count: 65536,
        };
        assert_eq!(grant(text, "alice", 1000), Some(alice));
        assert_eq!(
            grant(text, "carol", 1001),
            Some(Grant {
                first: 300000,
                count: 1000
            })
        );
        assert_eq!(
            grant(text, "bob", 5),
            None,
            "a malformed line grants nothing"
        );
        assert_eq!(grant("dave:4294967290:100\n", "dave", 7), None, "past u32");
    }

    #[test]
    fn the_layout_maps_the_sidecar_to_root_and_the_grant_to_itself() {
        let uids = Grant {
            first: 100000,
            count: 65536,
        };
        let gids = Grant {
            first: 200000,
            count: 65536,
        };
        let l = layout("alice", 1000, uids, gids, None).unwrap();
        assert_eq!(l.uid_map, vec![0, 1000, 1, 100000, 100000, 65536]);
        assert_eq!(l.gid_map, vec![100000, 200000, 65536]);
        assert_eq!(l.given.range.to_string(), "100000-165533");
        assert_eq!(l.given.run_user, 165534);
        assert_eq!(l.given.own_gid, 165535);
        let asked = "100100:100".parse().unwrap();
        assert_eq!(
            layout("alice", 1000, uids, gids, Some(asked))
                .unwrap()
                .given
                .range,
            asked
        );
        let outside = layout(
            "alice",
            1000,
            uids,
            gids,
            Some("2000000000:65536".parse().unwrap()),
        );
        assert!(outside.unwrap_err().0.contains("inside it"));
        let small = Grant {
            first: 100000,
            count: 65,
        };
        let e = layout("alice", 1000, small, gids, None).unwrap_err().0;
        assert!(
            e.contains("grant \"alice\" 65 ids") && e.contains("at least 66"),
            "{e}"
        );
    }
}
