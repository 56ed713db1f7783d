//! The Landlock ruleset of one run: read and execute on the interpreter, the SDK, a short list
//! of system paths and the operator's paths; read-write on the run's scratch directory and
//! nothing else; TCP connect to the IPC port only, bind nothing; no signals or abstract-socket
//! connects outside the run's own domain.
//!
//! Built here with the `landlock` crate and handed to the child as an fd: the child enforces it
//! on itself with `landlock_restrict_self` (`ptc_sandbox.confine`). Must not restrict the
//! sidecar's own process.

use super::{Policy, Unavailable};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The newest ABI whose rights this module was written and tested against. Newer kernels keep
/// honouring it; rights of later ABIs are left unhandled (allowed) until tested here, as the
/// `landlock` crate asks. Older kernels get what they have (best effort) and [`missing_features`]
/// names the rest.
const TARGET_ABI: ABI = ABI::V7;

/// System paths code may read (and execute, for `PTC_ALLOW_SUBPROCESS`), each for a reason:
/// shared libraries and the stdlib's data (`/usr`, `/lib*`, merged-usr links `/bin`, `/sbin`),
/// the dynamic loader's cache, the local time zone (`datetime`, `zoneinfo`). Not `/proc`, not
/// `/tmp`, not `/etc` as a whole (config files, `passwd`), not the runtime directory.
/// Paths absent on this system are skipped.
pub const SYSTEM_READ_PATHS: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/timezone",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
];

/// Devices code may also write: `open(os.devnull, "w")` is a common way to silence output.
pub const SYSTEM_WRITE_PATHS: &[&str] = &["/dev/null"];

/// The Landlock ABI of the running kernel, or why there is none.
pub fn kernel_abi() -> Result<i32, Unavailable> {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if v > 0 {
        return Ok(v as i32);
    }
    let err = io::Error::last_os_error();
    Err(Unavailable(match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) => {
            "disabled at boot (add landlock to the lsm= kernel parameter)".to_string()
        }
        Some(libc::ENOSYS) => {
            "the kernel has no Landlock (Linux 5.13+, CONFIG_SECURITY_LANDLOCK)".to_string()
        }
        Some(libc::EPERM) => {
            "blocked by a seccomp profile (allow the landlock_* syscalls)".to_string()
        }
        _ => format!("landlock_create_ruleset: {err}"),
    }))
}

/// The parts of the ruleset a kernel with Landlock `abi` cannot enforce.
pub fn missing_features(abi: i32) -> Vec<String> {
    let mut missing = Vec::new();
    if abi < 2 {
        missing.push("landlock rename/link across directories (ABI 2, Linux 5.19)".to_string());
    }
    if abi < 3 {
        missing.push("landlock truncate (ABI 3, Linux 6.2)".to_string());
    }
    if abi < 4 {
        missing.push(
            "landlock TCP: code may connect anywhere seccomp allows (ABI 4, Linux 6.7)".to_string(),
        );
    }
    if abi < 6 {
        missing.push(
            "landlock scopes: signals to and abstract sockets of other processes (ABI 6, Linux 6.12)"
                .to_string(),
        );
    }
    missing
}

/// The rights on a read-only path: read files, list directories, execute.
fn read_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(TARGET_ABI)
}

/// The rights on the run's scratch directory: everything but executing what was written there
/// (W^X), making device nodes and sockets, and device ioctls.
fn scratch_access() -> BitFlags<AccessFs> {
    AccessFs::from_all(TARGET_ABI)
        & !(AccessFs::Execute
            | AccessFs::MakeChar
            | AccessFs::MakeBlock
            | AccessFs::MakeSock
            | AccessFs::IoctlDev)
}

/// The ruleset of one run, as an fd the child passes to `landlock_restrict_self`; `None` when
/// the kernel has no Landlock at all. The interpreter, SDK, operator and scratch paths must
/// exist; absent system paths are skipped.
pub fn ruleset_for(policy: &Policy, scratch: &Path) -> io::Result<Option<OwnedFd>> {
    ruleset_with_sdk(policy, &policy.sdk_root, &[scratch])
}

/// [`ruleset_for`] with `sdk_dir` instead of the policy's SDK root (one directory per catalog
/// version), and every directory of `writable` with the scratch directory's rights (the run's
/// scratch directory, and its session's data directory when it has one).
pub fn ruleset_with_sdk(
    policy: &Policy,
    sdk_dir: &Path,
    writable: &[&Path],
) -> io::Result<Option<OwnedFd>> {
    let err = |e: landlock::RulesetError| io::Error::other(format!("landlock: {e}"));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(err)?
        .handle_access(AccessNet::from_all(TARGET_ABI))
        .map_err(err)?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(err)?
        .create()
        .map_err(err)?;
    let required = policy
        .interpreter_paths
        .iter()
        .map(PathBuf::as_path)
        .chain(std::iter::once(sdk_dir))
        .chain(policy.read_paths.iter().map(PathBuf::as_path));
    for path in required {
        ruleset = ruleset
            .add_rule(beneath(path, read_access())?)
            .map_err(err)?;
    }
    for (paths, access) in [
        (SYSTEM_READ_PATHS, read_access()),
        (
            SYSTEM_WRITE_PATHS,
            AccessFs::from_file(TARGET_ABI) & !AccessFs::Execute,
        ),
    ] {
        for path in paths {
            match beneath(Path::new(path), access) {
                Ok(rule) => ruleset = ruleset.add_rule(rule).map_err(err)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    for dir in writable {
        ruleset = ruleset
            .add_rule(beneath(dir, scratch_access())?)
            .map_err(err)?;
    }
    ruleset = ruleset
        .add_rule(NetPort::new(policy.ipc_port, AccessNet::ConnectTcp))
        .map_err(err)?;
    Ok(ruleset.into())
}

/// A rule for `path`: `access` on a directory, the file rights of `access` on anything else
/// (Landlock refuses directory rights on a file).
fn beneath(path: &Path, access: BitFlags<AccessFs>) -> io::Result<PathBeneath<PathFd>> {
    let meta = std::fs::metadata(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let fd = PathFd::new(path)
        .map_err(|e| io::Error::other(format!("landlock: {}: {e}", path.display())))?;
    let access = if meta.is_dir() {
        access
    } else {
        access & AccessFs::from_file(TARGET_ABI)
    };
    Ok(PathBeneath::new(fd, access))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn old_kernels_name_what_they_lack() {
        assert_eq!(missing_features(7), Vec::<String>::new());
        assert_eq!(missing_features(6), Vec::<String>::new());
        assert_eq!(
            missing_features(4),
            vec![
                "landlock scopes: signals to and abstract sockets of other processes (ABI 6, \
                 Linux 6.12)"
            ]
        );
        assert_eq!(missing_features(1).len(), 4);
    }

    #[test]
    fn scratch_is_writable_but_not_executable() {
        let access = scratch_access();
        assert!(access.contains(AccessFs::WriteFile | AccessFs::MakeReg | AccessFs::Truncate));
        assert!(!access.intersects(AccessFs::Execute | AccessFs::MakeSock | AccessFs::MakeChar));
    }

    #[test]
    fn a_missing_required_path_is_an_error() {
        let policy = Policy::new(vec!["/nonexistent-python".into()], "/usr".into(), 1);
        let e = ruleset_for(&policy, Path::new("/tmp")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-python"), "{e}");
    }
}
