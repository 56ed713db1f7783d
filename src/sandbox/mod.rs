//! The sandbox: what a run's Python child may reach, and what the sidecar keeps to itself
//! (docs/SECURITY.md has the threat model and what each layer stops).
//!
//! Owns the confinement primitives and nothing of a run's life: the Landlock ruleset of one run
//! ([`landlock`]), the seccomp programs every child installs ([`seccomp`]), the user code runs as
//! ([`user`]), the sidecar's own secrets ([`secrets`]), and [`probe`], which says what this
//! kernel and this process can do under a [`Mode`]. The layers are applied *in the child* by
//! `sdk-template/ptc_sandbox.py` (`confine`), before it reads its job; `src/run` spawns the
//! children and hands them a ruleset fd and the filter file made here.
//!
//! Must not spawn processes, read the configuration or the process environment (a [`Policy`] is
//! passed in), or know about jobs: every function here is a primitive the runner calls. The
//! one exception is [`subordinate::enter`], which `main` calls once before any thread starts:
//! it runs `newuidmap` and moves the sidecar into a user namespace of its own.

pub mod landlock;
pub mod seccomp;
pub mod secrets;
pub mod subordinate;
pub mod uids;
pub mod user;
mod who;

use serde::Serialize;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use self::landlock::ruleset_for;
pub use self::uids::{Lease, UidRange, Uids};
pub use self::user::{RunAs, can_switch_users};

/// The Landlock ABI whose access rights cover everything the design asks for: filesystem
/// rights (1-3), TCP bind/connect (4) and signal and abstract-socket scopes (6). `strict`
/// refuses to start below it.
pub const REQUIRED_LANDLOCK_ABI: i32 = 6;

/// `PTC_SANDBOX`: how hard the sidecar insists on its layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Refuse to start unless Landlock (ABI 6+) and seccomp both work.
    Strict,
    /// Apply every layer this kernel has and say, loudly, which are missing.
    BestEffort,
    /// No confinement at all: for debugging and the benchmark's comparison.
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::BestEffort => "best-effort",
            Mode::Off => "off",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = SandboxError;

    fn from_str(s: &str) -> Result<Mode, SandboxError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "strict" => Ok(Mode::Strict),
            "best-effort" | "best_effort" | "" => Ok(Mode::BestEffort),
            "off" => Ok(Mode::Off),
            other => Err(SandboxError::BadMode(other.to_string())),
        }
    }
}

/// What a run's child may reach. Built once at startup; [`ruleset_for`] adds the run's own
/// scratch directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    /// The interpreter's prefixes and stdlib (read and execute), from [`interpreter_paths`].
    pub interpreter_paths: Vec<PathBuf>,
    /// The SDK directory of the catalog version the child serves (read only: code that could
    /// write there would own every later run).
    pub sdk_root: PathBuf,
    /// Operator-added read-only paths (`PTC_SANDBOX_READ_PATHS`).
    pub read_paths: Vec<PathBuf>,
    /// The IPC server's port: the only TCP port code may connect to.
    pub ipc_port: u16,
    /// `PTC_ALLOW_SUBPROCESS`: leave out the process-creation filter.
    pub allow_subprocess: bool,
    /// `PTC_SANDBOX_USER` (a name, a uid, or `uid:gid`); `None` never switches users.
    pub user: Option<String>,
    /// `user` is the default, not a setting: where it does not exist, code runs as
    /// [`FALLBACK_UID`] rather than refusing to start.
    pub user_is_default: bool,
    /// `RLIMIT_NPROC` for the run user: processes *and threads* of that uid, all runs together.
    pub max_processes: u64,
    /// `PTC_SANDBOX_UIDS`: the host uids runs and sessions each get one of, where the sidecar
    /// may switch users; `None` (`off`) runs every run as the run user.
    pub uids: Option<UidRange>,
    /// `uids` is the default, not a setting: where this machine cannot give it (a container
    /// that maps fewer ids, a user in the range), runs share the run user's uid, said in
    /// `missing`, rather than the sidecar refusing to start.
    pub uids_is_default: bool,
    /// What [`subordinate::enter`] did for an unprivileged sidecar: `Some(Ok)`, it is root in a
    /// user namespace of its own and runs get uids of its `/etc/subuid` grant (they replace
    /// `user` and `uids`); `Some(Err)`, why not (said in `missing`); `None`, not tried.
    pub subordinate: Option<Result<subordinate::Subordinate, Unavailable>>,
}

/// The documented default of `PTC_SANDBOX_USER`.
pub const DEFAULT_USER: &str = "ptc-run";

/// The uid and gid code runs as when the default run user does not exist and the sidecar may
/// switch users: distroless's `nonroot`, which needs no passwd entry and owns nothing else.
pub const FALLBACK_UID: u32 = 65532;

/// The default `RLIMIT_NPROC` of the run user: room for every warm worker and run with a few
/// dozen threads each, far below the 3,000-thread flood of issue 9.
pub const DEFAULT_MAX_PROCESSES: u64 = 1024;

impl Policy {
    /// A policy with the defaults of the design: best-effort, user `ptc-run`, no subprocesses.
    pub fn new(interpreter_paths: Vec<PathBuf>, sdk_root: PathBuf, ipc_port: u16) -> Policy {
        Policy {
            mode: Mode::BestEffort,
            interpreter_paths,
            sdk_root,
            read_paths: Vec::new(),
            ipc_port,
            allow_subprocess: false,
            user: Some(DEFAULT_USER.to_string()),
            user_is_default: true,
            max_processes: DEFAULT_MAX_PROCESSES,
            uids: Some(uids::DEFAULT_RANGE),
            uids_is_default: true,
            subordinate: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("PTC_SANDBOX={0:?} is not one of strict, best-effort, off")]
    BadMode(String),
    #[error("PTC_SANDBOX=strict, but {}", .0.join("; "))]
    Strict(Vec<String>),
    #[error("PTC_SANDBOX_USER={user:?}: {reason}")]
    User { user: String, reason: String },
    #[error("seccomp filter: {0}")]
    Seccomp(String),
    #[error("{0}")]
    Uids(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// The namespaces each run gets of its own (docs/SECURITY.md, "Namespaces"): made by the
/// fork server, which clones the run's process into them (`ptc_sandbox.clone_isolated`,
/// `enter`), as the probe at startup found it could.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Namespaces {
    /// A user namespace mapping only the run's uid and gid: how a sidecar without
    /// CAP_SYS_ADMIN makes the others (unprivileged user namespaces, as bubblewrap uses), and
    /// what gives each run a process budget of its own.
    pub user: bool,
    /// The run's process is PID 1: when it exits, the kernel kills everything the run started.
    pub pid: bool,
    /// Only a loopback of its own: no route out at all.
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    /// Its scratch and data directories mounted noexec, nosuid, nodev.
    pub mount: bool,
}

impl Namespaces {
    /// Every namespace, a user namespace included.
    pub const ALL: Namespaces = Namespaces {
        user: true,
        pid: true,
        net: true,
        ipc: true,
        uts: true,
        mount: true,
    };

    /// Every namespace but a user namespace (a sidecar with CAP_SYS_ADMIN where user
    /// namespaces are off).
    pub const PRIVILEGED: Namespaces = Namespaces {
        user: false,
        ..Namespaces::ALL
    };

    /// The names of those in force, in the order `/healthz` lists them.
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("user", self.user),
            ("pid", self.pid),
            ("net", self.net),
            ("ipc", self.ipc),
            ("uts", self.uts),
            ("mount", self.mount),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }
}

/// Why a layer, or a part of one, cannot be applied here: one sentence naming the fix, for
/// the startup log and `/healthz` (`missing`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// What the sandbox does on this machine, for the startup log and `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub mode: Mode,
    /// `"abi 7"`, `"unavailable: …"` or `"off"`.
    pub landlock: String,
    pub seccomp: bool,
    /// Who code runs as: the run user's name, or the sidecar's own uid when it cannot switch.
    pub uid: String,
    /// Whose uid a run has: `"per run 2000000000-2000065535"` (a uid of its own from
    /// `PTC_SANDBOX_UIDS` for each run and each session), or `"shared"` (every run has `uid`).
    pub uids: String,
    /// The namespaces each run has of its own (`user`, `pid`, `net`, `ipc`, `uts`, `mount`).
    pub namespaces: Vec<&'static str>,
    pub subprocess: bool,
    /// Each layer (or part of one) that is not applied, with the reason.
    pub missing: Vec<String>,
}

impl fmt::Display for Status {
    /// One line: `sandbox best-effort: landlock abi 7, seccomp on, uid ptc-run, namespaces
    /// user,pid,net,ipc,uts,mount, subprocess denied; nothing missing`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let namespaces = match self.namespaces.is_empty() {
            true => "none".to_string(),
            false => self.namespaces.join(","),
        };
        write!(
            f,
            "sandbox {}: landlock {}, seccomp {}, uid {} ({}), namespaces {namespaces}, \
             subprocess {}",
            self.mode.as_str(),
            self.landlock,
            if self.seccomp { "on" } else { "off" },
            self.uid,
            self.uids,
            if self.subprocess { "allowed" } else { "denied" },
        )?;
        if self.missing.is_empty() {
            write!(f, "; nothing missing")
        } else {
            write!(f, "; MISSING: {}", self.missing.join("; "))
        }
    }
}

/// What this kernel and process can apply under `policy`, and whether `policy.mode` accepts it.
/// Never touches the calling process's own confinement.
pub fn probe(policy: &Policy) -> Result<Status, SandboxError> {
    Ok(Sandbox::new(policy.clone())?.status)
}

/// The sandbox as the runner uses it: the policy, what [`probe`] found, and the run user.
/// Built once at startup (`Sandbox::new`), then asked for each run's ruleset.
#[derive(Debug)]
pub struct Sandbox {
    policy: Policy,
    status: Status,
    landlock_abi: Option<i32>,
    seccomp: bool,
    run_as: Option<RunAs>,
    /// A uid of its own for each run and session (`PTC_SANDBOX_UIDS`), where code runs as
    /// another user than the sidecar.
    uids: Option<Arc<Uids>>,
    namespaces: Option<Namespaces>,
}

impl Sandbox {
    /// Probes the kernel and resolves the run user. Errors when `strict` cannot be met
    /// (including a run user that does not exist while the sidecar could switch to it: code
    /// would run with the sidecar's privileges); best-effort lists what is missing instead.
    pub fn new(policy: Policy) -> Result<Sandbox, SandboxError> {
        let my_uid = user::current_uid();
        let mut missing = Vec::new();
        if policy.mode == Mode::Off {
            return Ok(Sandbox {
                status: Status {
                    mode: Mode::Off,
                    landlock: "off".into(),
                    seccomp: false,
                    uid: my_uid.to_string(),
                    uids: who::SHARED.into(),
                    namespaces: Vec::new(),
                    subprocess: true,
                    missing: vec!["every layer: PTC_SANDBOX=off".into()],
                },
                policy,
                landlock_abi: None,
                seccomp: false,
                run_as: None,
                uids: None,
                namespaces: None,
            });
        }
        let (landlock_abi, landlock) = match landlock::kernel_abi() {
            Ok(abi) => {
                missing.extend(landlock::missing_features(abi));
                (Some(abi), format!("abi {abi}"))
            }
            Err(reason) => {
                missing.push(format!("landlock: {reason}"));
                (None, format!("unavailable: {reason}"))
            }
        };
        let seccomp = match seccomp::available() {
            Ok(()) => true,
            Err(reason) => {
                missing.push(format!("seccomp: {reason}"));
                false
            }
        };
        let (run_as, uid, uids) = who::runs_as(&policy, &mut missing)?;
        if policy.mode == Mode::Strict {
            let mut refused = Vec::new();
            match landlock_abi {
                Some(abi) if abi >= REQUIRED_LANDLOCK_ABI => {}
                Some(abi) => refused.push(format!(
                    "Landlock ABI {abi} < {REQUIRED_LANDLOCK_ABI} (Linux 6.12) lacks TCP or scope \
                     restrictions"
                )),
                None => refused.push("Landlock is unavailable".into()),
            }
            if !seccomp {
                refused.push("seccomp filters are unavailable".into());
            }
            if !refused.is_empty() {
                return Err(SandboxError::Strict(refused));
            }
        }
        Ok(Sandbox {
            status: Status {
                mode: policy.mode,
                landlock,
                seccomp,
                uid,
                uids: who::uids_status(uids.as_deref(), &policy),
                namespaces: Vec::new(),
                subprocess: policy.allow_subprocess,
                missing,
            },
            policy,
            landlock_abi,
            seccomp,
            run_as,
            uids,
            namespaces: None,
        })
    }

    /// What to ask the startup probe for: every namespace, a user namespace included, where
    /// the sandbox is on.
    pub fn wants_namespaces(&self) -> bool {
        self.policy.mode != Mode::Off
    }

    /// The sandbox with `namespaces` for every run, as the probe found them to work.
    pub fn with_namespaces(mut self, namespaces: Namespaces) -> Sandbox {
        self.namespaces = Some(namespaces);
        self.status.namespaces = namespaces.names();
        if !namespaces.user {
            self.status.missing.push(
                "a user namespace per run (user namespaces are unavailable): the runs' \
                 processes share one RLIMIT_NPROC budget"
                    .into(),
            );
        }
        self
    }

    /// The sandbox without namespaces, because `reason`: best-effort lists it as missing,
    /// strict refuses (a run must not reach the network nor outlive itself).
    pub fn without_namespaces(mut self, reason: &str) -> Result<Sandbox, SandboxError> {
        let missing = format!("namespaces: {reason}");
        if self.policy.mode == Mode::Strict {
            return Err(SandboxError::Strict(vec![format!(
                "{missing} (strict needs each run in its own PID and network namespaces)"
            )]));
        }
        self.namespaces = None;
        self.status.namespaces = Vec::new();
        self.status.missing.push(missing);
        Ok(self)
    }

    /// The namespaces each run gets, when it gets any.
    pub fn namespaces(&self) -> Option<Namespaces> {
        self.namespaces
    }

    /// The interpreter `python` cannot run as the run user, because `reason`: code would run
    /// as the sidecar's uid, which only `PTC_SANDBOX_USER=none` asks for, so this is an error
    /// saying how to fix it.
    pub fn user_cannot_run(&self, python: &Path, reason: &str) -> SandboxError {
        let user = self.run_as.as_ref().map_or("?", |u| u.name.as_str());
        SandboxError::User {
            user: user.to_string(),
            reason: format!(
                "cannot start {} ({reason}); set PTC_PYTHON to an interpreter it can read (e.g. \
                 /usr/bin/python3), or PTC_SANDBOX_USER=none to run code as the sidecar's own uid",
                python.display()
            ),
        }
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The user children start as (`None`: they keep the sidecar's uid).
    pub fn run_as(&self) -> Option<&RunAs> {
        self.run_as.as_ref()
    }

    /// The uids each run and session gets one of (`None`: runs share the run user's).
    pub fn uids(&self) -> Option<&Arc<Uids>> {
        self.uids.as_ref()
    }

    /// Whether code may start processes: `PTC_ALLOW_SUBPROCESS`, or no seccomp filter to
    /// refuse them (the audit hook alone does not hold).
    pub fn runs_may_fork(&self) -> bool {
        self.policy.allow_subprocess || !self.seccomp
    }

    /// The ruleset fd of one run (`None` when Landlock is off or unavailable): the policy's
    /// paths with `sdk_dir` (the run's catalog version) as the SDK, and the `writable`
    /// directories (its scratch directory, and its session's data directory).
    pub fn ruleset(&self, sdk_dir: &Path, writable: &[&Path]) -> std::io::Result<Option<OwnedFd>> {
        if self.landlock_abi.is_none() {
            return Ok(None);
        }
        landlock::ruleset_with_sdk(&self.policy, sdk_dir, writable)
    }

    /// The seccomp programs for this policy as the filter file's JSON
    /// (`{"arch", "filters": [{"name", "bpf"}]}`), or `None` when seccomp is off or unavailable.
    pub fn filters_json(&self) -> Result<Option<String>, SandboxError> {
        if !self.seccomp {
            return Ok(None);
        }
        seccomp::filters_json(seccomp::Options {
            allow_subprocess: self.policy.allow_subprocess,
            own_uid: self.run_as.is_some(),
        })
        .map(Some)
    }

    /// What the child is told to apply (`ptc_sandbox.confine_spec`, and in a fork server's
    /// child `enter`): each layer asked for fails the child closed when it cannot be applied.
    /// `filters` is where the filter file is; `user` the run user a fork server's child becomes
    /// (a cold child is switched before exec); `ns` the namespaces it makes, with the IPC
    /// bridge's end inside listening on the policy's port.
    pub fn spec(&self, filters: Option<&Path>, ruleset_fd: Option<i32>) -> serde_json::Value {
        serde_json::json!({
            "landlock": self.landlock_abi.is_some(),
            "seccomp": self.seccomp,
            "filters": filters.map(|p| p.to_string_lossy().into_owned()),
            "ruleset_fd": ruleset_fd,
            "user": self.run_as.as_ref().map(|u| serde_json::json!({"uid": u.uid, "gid": u.gid})),
            "ns": self.namespaces,
            "ipc_port": self.policy.ipc_port,
        })
    }

    /// The spec the startup probe tries `namespaces` with.
    pub fn probe_spec(&self, namespaces: Namespaces) -> serde_json::Value {
        serde_json::json!({
            "user": self.run_as.as_ref().map(|u| serde_json::json!({"uid": u.uid, "gid": u.gid})),
            "ns": namespaces,
            "ipc_port": self.policy.ipc_port,
        })
    }

    /// Makes a run's scratch directory private to the run (mode 0700), owned by `ids` (a uid
    /// of its own), else by the run user.
    pub fn prepare_scratch(&self, scratch: &Path, ids: Option<(u32, u32)>) -> std::io::Result<()> {
        let ids = ids.or(self.run_as.as_ref().map(|u| (u.uid, u.gid)));
        user::prepare_scratch(scratch, ids)
    }
}

/// The directories the interpreter reads at run time (its prefixes, where its binary lives),
/// asked of the interpreter itself once at startup.
pub fn interpreter_paths(python: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    let output = std::process::Command::new(python)
        .args([
            "-I",
            "-c",
            "import os, sys\n\
             for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,\n\
                       os.path.dirname(os.path.realpath(sys.executable))):\n\
             \x20   print(os.path.realpath(p))",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|source| SandboxError::Io {
            context: format!("asking {} for its prefixes", python.display()),
            source,
        })?;
    if !output.status.success() {
        return Err(SandboxError::Io {
            context: format!("asking {} for its prefixes", python.display()),
            source: std::io::Error::other(format!("exit {}", output.status)),
        });
    }
    let mut paths: Vec<PathBuf> = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let path = PathBuf::from(line);
        if !line.is_empty() && !paths.iter().any(|p| path.starts_with(p)) {
            paths.retain(|p| !p.starts_with(&path));
            paths.push(path);
        }
    }
    Ok(paths)
}

/// Makes `fd` the child's fd `target`, open across exec, for `Command::pre_exec` (how a cold
/// child inherits its ruleset at a fixed number). Async-signal-safe: `dup2` and `fcntl` only.
pub fn inherit_fd(fd: i32, target: i32) -> std::io::Result<()> {
    // SAFETY: dup2 and fcntl on descriptors; no memory is involved.
    unsafe {
        if fd == target {
            // dup2 onto itself keeps close-on-exec: clear it by hand.
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        } else if libc::dup2(fd, target) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The variable that tells a child what to apply (`ptc_sandbox.spec_from_env`, which removes
/// it before any of the run's code exists).
pub const SPEC_VARIABLE: &str = "PTC_SANDBOX";

/// The fd number a cold child finds its ruleset at (`PTC_SANDBOX`'s `ruleset_fd`).
pub const COLD_RULESET_FD: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn modes_parse() {
        assert_eq!("strict".parse::<Mode>().unwrap(), Mode::Strict);
        assert_eq!(" Best-Effort ".parse::<Mode>().unwrap(), Mode::BestEffort);
        assert_eq!("".parse::<Mode>().unwrap(), Mode::BestEffort);
        assert_eq!("off".parse::<Mode>().unwrap(), Mode::Off);
        assert_eq!(
            "lax".parse::<Mode>().unwrap_err().to_string(),
            "PTC_SANDBOX=\"lax\" is not one of strict, best-effort, off"
        );
    }

    #[test]
    fn status_reads_as_one_line_and_as_json() {
        let status = Status {
            mode: Mode::BestEffort,
            landlock: "abi 5".into(),
            seccomp: true,
            uid: "ptc-run".into(),
            uids: "per run 2000000000-2000065535".into(),
            namespaces: Namespaces::ALL.names(),
            subprocess: false,
            missing: vec!["landlock scopes (ABI 6, Linux 6.12)".into()],
        };
        assert_eq!(
            status.to_string(),
            "sandbox best-effort: landlock abi 5, seccomp on, uid ptc-run (per run \
             2000000000-2000065535), namespaces user,pid,net,ipc,uts,mount, subprocess denied; \
             MISSING: landlock scopes (ABI 6, Linux 6.12)"
        );
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({"mode": "best-effort", "landlock": "abi 5", "seccomp": true,
                               "uid": "ptc-run", "uids": "per run 2000000000-2000065535",
                               "namespaces": ["user", "pid", "net", "ipc", "uts", "mount"],
                               "subprocess": false,
                               "missing": ["landlock scopes (ABI 6, Linux 6.12)"]})
        );
    }

    /// An unprivileged sidecar in the user namespace of its subordinate ids: runs get uids of
    /// the grant and the run user is the grant's; where it got none, the reason is missing.
    #[test]
    fn subordinate_ids_give_runs_uids_of_the_grant_or_say_why_not() {
        let mut policy = Policy::new(vec![], PathBuf::from("/nonexistent"), 1);
        let given = subordinate::Subordinate {
            range: "1700000000:100".parse().unwrap(),
            run_user: 1_700_000_100,
            own_gid: 1_700_000_101,
            user: "nobody-here".into(),
        };
        policy.subordinate = Some(Ok(given));
        let Ok(sandbox) = Sandbox::new(policy.clone()) else {
            // This process's user namespace does not map the range (a container): nothing to
            // show here.
            return;
        };
        let status = sandbox.status();
        assert_eq!(status.uids, "per run 1700000000-1700000099 (subordinate)");
        assert_eq!(status.uid, "1700000100");
        assert_eq!(
            sandbox.run_as().map(|r| (r.uid, r.gid)),
            Some((1_700_000_100, 1_700_000_100))
        );
        assert!(sandbox.uids().is_some_and(|u| u.range().count == 100));
        policy.subordinate = Some(Err(Unavailable("/etc/subuid grants \"x\" no ids".into())));
        let sandbox = Sandbox::new(policy).unwrap();
        assert!(
            sandbox
                .status()
                .missing
                .iter()
                .any(|m| m == "a uid per run: /etc/subuid grants \"x\" no ids"),
            "{:?}",
            sandbox.status().missing
        );
    }

    #[test]
    fn strict_refuses_to_start_without_namespaces_and_best_effort_says_so() {
        let mut policy = Policy::new(vec![], PathBuf::from("/nonexistent"), 1);
        policy.user = None;
        policy.mode = Mode::Strict;
        let refused = match Sandbox::new(policy.clone()) {
            // A kernel without Landlock or seccomp is refused before namespaces are asked.
            Err(e) => e.to_string(),
            Ok(sandbox) => sandbox
                .without_namespaces("no user namespaces")
                .unwrap_err()
                .to_string(),
        };
        assert!(refused.starts_with("PTC_SANDBOX=strict, but"), "{refused}");
        policy.mode = Mode::BestEffort;
        let sandbox = Sandbox::new(policy.clone())
            .unwrap()
            .without_namespaces("no user namespaces")
            .unwrap();
        assert!(sandbox.status().namespaces.is_empty());
        assert!(
            sandbox
                .status()
                .missing
                .contains(&"namespaces: no user namespaces".to_string()),
            "{:?}",
            sandbox.status()
        );
        let with = Sandbox::new(policy)
            .unwrap()
            .with_namespaces(Namespaces::ALL);
        assert_eq!(
            with.spec(None, None)["ns"],
            serde_json::json!({"user": true, "pid": true, "net": true, "ipc": true, "uts": true,
                               "mount": true})
        );
        assert_eq!(
            with.status().namespaces,
            ["user", "pid", "net", "ipc", "uts", "mount"]
        );
    }

    #[test]
    fn off_applies_nothing_and_says_so() {
        let mut policy = Policy::new(vec![], PathBuf::from("/nonexistent"), 1);
        policy.mode = Mode::Off;
        let sandbox = Sandbox::new(policy).unwrap();
        assert_eq!(
            sandbox.status().missing,
            vec!["every layer: PTC_SANDBOX=off"]
        );
        assert!(
            sandbox
                .ruleset(Path::new("/usr"), &[Path::new("/tmp")])
                .unwrap()
                .is_none()
        );
        assert!(sandbox.filters_json().unwrap().is_none());
    }
}
