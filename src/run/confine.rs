//! Confinement set-up for the runner: turns the settings into one [`Sandbox`] at startup (the
//! policy with the IPC port, the run user checked against the interpreter, the seccomp filter
//! file, a runtime directory the run user can traverse but not list).
//!
//! Owns nothing per run: each child gets its ruleset where it is made (`child::spawn`,
//! `Zygote::fork`), and applies the layers itself (`sdk-template/ptc_sandbox.py`). Must not
//! weaken a layer to make a run work: what cannot be applied is reported (`Status::missing`),
//! and refused under `strict`.

use crate::sandbox::{self, Mode, Namespaces, Policy, Sandbox, SandboxError, Unavailable};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// How long the interpreter may take to start as the run user at startup.
pub const USER_PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the namespace probe may take at startup (a child that makes a run's namespaces).
pub const NAMESPACE_PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Name of the seccomp filter file in the runtime directory (read by every child).
pub const FILTER_FILE: &str = "ptc_seccomp.json";

/// How runs are confined (`PTC_SANDBOX`, `PTC_SANDBOX_USER`, `PTC_SANDBOX_READ_PATHS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub mode: Mode,
    /// The user code runs as (a name, a uid or `uid:gid`); `None` never switches.
    pub user: Option<String>,
    /// `user` is the default, not a setting (see [`sandbox::Policy::user_is_default`]).
    pub user_is_default: bool,
    /// Operator paths code may read.
    pub read_paths: Vec<PathBuf>,
    /// `PTC_SANDBOX_UIDS` (see [`sandbox::Policy::uids`]).
    pub uids: Option<sandbox::UidRange>,
    /// `uids` is the default, not a setting (see [`sandbox::Policy::uids_is_default`]).
    pub uids_is_default: bool,
    /// What [`sandbox::subordinate::enter`] did (see [`sandbox::Policy::subordinate`]).
    pub subordinate: Option<Result<sandbox::subordinate::Subordinate, sandbox::Unavailable>>,
    /// The interpreter to use when the run user cannot start the configured one (the system's,
    /// when `PTC_PYTHON` is unset).
    pub fallback_python: Option<PathBuf>,
}

impl Default for SandboxSettings {
    /// What an unconfigured sidecar does: best-effort, as the documented run user.
    fn default() -> Self {
        SandboxSettings {
            mode: Mode::BestEffort,
            user: Some(sandbox::DEFAULT_USER.to_string()),
            user_is_default: true,
            read_paths: Vec::new(),
            uids: Some(sandbox::uids::DEFAULT_RANGE),
            uids_is_default: true,
            subordinate: None,
            fallback_python: None,
        }
    }
}

/// What [`setup`] made: the sandbox, the seccomp filter file, and the interpreter runs use
/// (the configured one, or the fallback the run user can start).
#[derive(Debug)]
pub struct Confinement {
    pub sandbox: Sandbox,
    pub filters: Option<PathBuf>,
    pub python: PathBuf,
    /// The runtime directory, the scratch root and the filter file, with their modes.
    pub own_tree: OwnTree,
}

/// The sidecar's own files every run needs, with the modes [`setup`] gave them. Nothing a run
/// does should change them (seccomp refuses metadata changes, and the run's uid is not the
/// owner), but the third review did, by `chmod 000` from an unprivileged sidecar's runs: every
/// later run failed, and a restart could not write the filter file. [`repair`](Self::repair)
/// checks them before each run and puts back what changed, saying so.
#[derive(Debug, Clone, Default)]
pub struct OwnTree(Vec<(PathBuf, u32)>);

impl OwnTree {
    /// Gives each path its mode back if it changed (one `lstat` each when nothing did); an
    /// error names the path that can be neither read nor repaired.
    pub fn repair(&self) -> std::io::Result<()> {
        for (path, mode) in &self.0 {
            let found = std::fs::symlink_metadata(path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?
                .permissions()
                .mode()
                & 0o7777;
            if found != *mode {
                tracing::warn!(
                    "{} has mode {found:o}, which the sidecar did not give it; restoring {mode:o}",
                    path.display()
                );
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode)).map_err(
                    |e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot restore mode {mode:o} of {}: {e}", path.display()),
                        )
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// Builds the sandbox of a runner whose IPC server listens on `ipc_port`, and writes what
/// children read into `runtime_dir`. Errors when `strict` cannot be met, when code would run as
/// the sidecar's uid though it could switch (the run user cannot start the interpreter and
/// there is no fallback it can start), or when the runtime directory cannot be written.
pub async fn setup(
    settings: &SandboxSettings,
    python: &Path,
    allow_subprocess: bool,
    runtime_dir: &Path,
    ipc_port: u16,
) -> Result<Confinement, SandboxError> {
    let mut policy = Policy::new(Vec::new(), runtime_dir.to_path_buf(), ipc_port);
    policy.mode = settings.mode;
    policy.user = settings.user.clone();
    policy.user_is_default = settings.user_is_default;
    policy.read_paths = settings.read_paths.clone();
    policy.uids = settings.uids;
    policy.uids_is_default = settings.uids_is_default;
    policy.subordinate = settings.subordinate.clone();
    policy.allow_subprocess = allow_subprocess;
    let mut python = python.to_path_buf();
    if settings.mode != Mode::Off {
        python = interpreter_for(&Sandbox::new(policy.clone())?, python, settings).await?;
        policy.interpreter_paths = sandbox::interpreter_paths(&python)?;
    }
    let mut sandbox = Sandbox::new(policy)?;
    // The run user must be able to traverse to its SDK and scratch directories; it still
    // cannot list them, and Landlock keeps it out of everything else. Set at every start: an
    // earlier process's runtime directory (PTC_RUNTIME_DIR) may have been changed.
    let dir_mode = if sandbox.run_as().is_some() {
        0o711
    } else {
        0o700
    };
    let scratch_root = runtime_dir.join(super::SCRATCH_DIR);
    std::fs::create_dir_all(&scratch_root).map_err(|source| SandboxError::Io {
        context: format!("making {}", scratch_root.display()),
        source,
    })?;
    set_mode(runtime_dir, dir_mode)?;
    set_mode(&scratch_root, dir_mode)?;
    let mut own_tree = vec![
        (runtime_dir.to_path_buf(), dir_mode),
        (scratch_root, dir_mode),
    ];
    if sandbox.wants_namespaces() {
        sandbox = with_namespaces(sandbox, &python).await?;
    }
    let filters = match sandbox.filters_json()? {
        Some(json) => {
            let path = runtime_dir.join(FILTER_FILE);
            write_read_only(&path, json.as_bytes())?;
            own_tree.push((path.clone(), 0o444));
            Some(path)
        }
        None => None,
    };
    Ok(Confinement {
        sandbox,
        filters,
        python,
        own_tree: OwnTree(own_tree),
    })
}

/// The interpreter runs use: `python` when the run user can start it (or there is no run
/// user), else the settings' fallback when it can start that one (said in the log), else an
/// error: code would otherwise run as the sidecar's uid.
async fn interpreter_for(
    sandbox: &Sandbox,
    python: PathBuf,
    settings: &SandboxSettings,
) -> Result<PathBuf, SandboxError> {
    let Some(user) = sandbox.run_as() else {
        return Ok(python);
    };
    let Err(reason) = probe_as(&python, user).await else {
        return Ok(python);
    };
    if let Some(fallback) = &settings.fallback_python
        && fallback.as_path() != python
        && probe_as(fallback, user).await.is_ok()
    {
        tracing::info!(
            "PTC_PYTHON is unset and {} cannot be started by the run user {} ({}); runs use {}",
            python.display(),
            user.name,
            reason.0,
            fallback.display()
        );
        return Ok(fallback.clone());
    }
    Err(sandbox.user_cannot_run(&python, &reason.0))
}

/// The sandbox with every namespace a run can have here: all of them with a user namespace
/// (what an unprivileged sidecar needs, and what gives each run its own process budget), else
/// all but that one where the sidecar has CAP_SYS_ADMIN, else none, and why.
async fn with_namespaces(sandbox: Sandbox, python: &Path) -> Result<Sandbox, SandboxError> {
    let why = match probe_namespaces(python, &sandbox, Namespaces::ALL).await {
        Ok(()) => return Ok(sandbox.with_namespaces(Namespaces::ALL)),
        Err(why) => why,
    };
    if probe_namespaces(python, &sandbox, Namespaces::PRIVILEGED)
        .await
        .is_ok()
    {
        tracing::info!("user namespaces are unavailable ({why}); runs get the others");
        return Ok(sandbox.with_namespaces(Namespaces::PRIVILEGED));
    }
    sandbox.without_namespaces(&format!(
        "a run cannot have namespaces of its own here ({why}); allow unprivileged user \
         namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, no \
         seccomp or AppArmor profile refusing unshare/clone) or give the sidecar CAP_SYS_ADMIN"
    ))
}

/// Makes a run's namespaces in a child of the interpreter, exactly as a fork server's child
/// does (`ptc_sandbox.probe_namespaces`); why it cannot.
async fn probe_namespaces(
    python: &Path,
    sandbox: &Sandbox,
    namespaces: Namespaces,
) -> Result<(), Unavailable> {
    let program = format!(
        "{}\nimport json, sys\nprint(json.dumps(probe_namespaces(json.loads(sys.argv[1]))))\n",
        super::sdk::SANDBOX_PY
    );
    let output = tokio::process::Command::new(python)
        .args(["-I", "-c", &program])
        .arg(sandbox.probe_spec(namespaces).to_string())
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(NAMESPACE_PROBE_TIMEOUT, output)
        .await
        .map_err(|_| {
            Unavailable(format!(
                "the probe did not finish within {NAMESPACE_PROBE_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| Unavailable(format!("the probe cannot start: {e}")))?;
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|_| {
        Unavailable(format!(
            "the probe failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    })?;
    match answer["ok"].as_bool() {
        Some(true) => Ok(()),
        _ => Err(Unavailable(
            answer["error"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string(),
        )),
    }
}

/// Starts the interpreter as the run user, the way children start; the reason it cannot.
async fn probe_as(python: &Path, user: &sandbox::RunAs) -> Result<(), Unavailable> {
    let mut cmd = tokio::process::Command::new(python);
    cmd.args(["-I", "-c", "pass"])
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let run_as = user.clone();
    // SAFETY: `RunAs::switch` is async-signal-safe (set*id calls only), cloned before the fork.
    unsafe {
        cmd.pre_exec(move || run_as.switch());
    }
    let output = tokio::time::timeout(USER_PROBE_TIMEOUT, cmd.output())
        .await
        .map_err(|_| {
            Unavailable(format!(
                "{} did not start within {USER_PROBE_TIMEOUT:?}",
                python.display()
            ))
        })?
        .map_err(|e| Unavailable(format!("{} cannot be started by it: {e}", python.display())))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Unavailable(format!(
            "{} does not run as it ({}): set PTC_PYTHON to an interpreter every user can read \
             (e.g. /usr/bin/python3)",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), SandboxError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        SandboxError::Io {
            context: format!("chmod {mode:o} {}", path.display()),
            source,
        }
    })
}

fn write_read_only(path: &Path, bytes: &[u8]) -> Result<(), SandboxError> {
    let io = |source| SandboxError::Io {
        context: format!("writing {}", path.display()),
        source,
    };
    // A previous start's file is read-only too: replace it.
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).map_err(io)
}
