//! Python children: how one is started (scrubbed environment, own process group, resource
//! limits, a scratch directory) and how it is stopped (its whole group killed, however the run
//! ends, including when the run's future is dropped).
//!
//! Must not leave a process behind: [`Child`] kills its process group on drop.

use crate::sandbox::{self, RunAs, Sandbox};
use crate::util::GroupKill;
use std::any::Any;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

/// How long the configured interpreter may take to say what it is at startup: a first start
/// may compile or page in a lot, but a hung shim must not hang the sidecar's start.
pub const PYTHON_PROBE_TIMEOUT: Duration = Duration::from_secs(20);

pub type Stdin = Box<dyn AsyncWrite + Send + Unpin>;
pub type Output = Box<dyn AsyncRead + Send + Unpin>;

/// Resource limits of one child (setrlimit, before exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Address space in bytes: `bytearray(10**10)` fails with MemoryError instead of swapping.
    pub address_space: u64,
    /// CPU seconds: a busy loop that somehow outlives its deadline still ends.
    pub cpu_secs: u64,
    /// Largest file the child may write, in bytes: a runaway writer cannot fill the disk.
    pub file_size: u64,
    /// Open file descriptors: bounds sockets and files a script can hold.
    pub open_files: u64,
    /// Processes and threads of the child's uid (`RLIMIT_NPROC`; the kernel counts every
    /// process of that uid, and does not hold root to it): a thread or fork flood stops here.
    pub processes: u64,
}

/// The variable that names a run's data directory (its session's files), as LibreChat's
/// client tells the model.
pub const DATA_DIR_VARIABLE: &str = "LIBRECHAT_CODE_DATA_DIR";

/// How to start children.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// The real interpreter (resolved once at startup, never a shim).
    pub python: PathBuf,
    /// Where each child's scratch directory (its cwd, HOME and TMPDIR) is made.
    pub scratch_root: PathBuf,
    /// `PATH` for the child.
    pub path_env: String,
    pub limits: Limits,
    /// How children are confined (docs/SECURITY.md): the run user, each run's Landlock ruleset,
    /// and what the child is told to apply (`PTC_SANDBOX`, read by `ptc_sandbox.py`).
    pub sandbox: Arc<Sandbox>,
    /// The seccomp filter file every child loads (`None` when seccomp is off or unavailable).
    pub filters: Option<PathBuf>,
    /// The sidecar's files every run needs, checked (and repaired) before each run.
    pub own_tree: Arc<super::confine::OwnTree>,
}

impl SpawnSpec {
    /// `python -I -u -B SCRIPT` with a cleared environment (only `PATH` and `LANG`), in its own
    /// process group, killed on drop: how every interpreter of docs/runner-protocol.md starts.
    pub fn command(&self, script: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.python);
        cmd.arg("-I")
            .arg("-u")
            .arg("-B")
            .arg(script)
            .env_clear()
            .env("PATH", &self.path_env)
            .env("LANG", "C.UTF-8")
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }

    /// What a child is told to apply, as the `PTC_SANDBOX` variable's value; `ruleset_fd` is
    /// where a cold child finds its Landlock ruleset (forked children get theirs with the fork).
    /// The fork server also learns the scratch root, which every run's scratch directory is in
    /// (`scratch_root`: its mount namespace for runs has it noexec).
    pub fn sandbox_spec(&self, ruleset_fd: Option<i32>) -> String {
        let mut spec = self.sandbox.spec(self.filters.as_deref(), ruleset_fd);
        spec["scratch_root"] = self.scratch_root.to_string_lossy().into();
        spec.to_string()
    }

    /// The scratch directory of run `id`: named by the id and a keyed hash of it whose key is
    /// random per sidecar process, so no run can guess another's folder (they were numbered:
    /// `runs/w2`, the next warm worker's) whatever it may do by path.
    pub fn scratch_of(&self, id: &str) -> PathBuf {
        use std::hash::BuildHasher;
        static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        let hash = KEY.get_or_init(std::hash::RandomState::new).hash_one(id);
        self.scratch_root.join(format!("{id}-{hash:016x}"))
    }

    /// Makes a run's scratch directory ([`scratch_of`](Self::scratch_of)), private to the
    /// uid the run gets: with `PTC_SANDBOX_UIDS`, its session's (the owner of `workspace`, its
    /// session's folder) or one leased for the run alone, else the run user's.
    pub fn make_scratch(&self, id: &str, workspace: Option<&Path>) -> std::io::Result<Scratch> {
        self.own_tree.repair()?;
        let (ids, lease) = self.run_ids(workspace)?;
        let path = self.scratch_of(id);
        std::fs::create_dir_all(&path)?;
        if let Err(e) = self.sandbox.prepare_scratch(&path, ids) {
            let _ = std::fs::remove_dir_all(&path);
            return Err(e);
        }
        Ok(Scratch { path, ids, lease })
    }

    /// The uid and gid a run gets where it has one of its own (see
    /// [`make_scratch`](Self::make_scratch)), and the lease that holds it.
    fn run_ids(
        &self,
        workspace: Option<&Path>,
    ) -> std::io::Result<(Option<Ids>, Option<sandbox::Lease>)> {
        let Some(uids) = self.sandbox.uids() else {
            return Ok((None, None));
        };
        if let Some(dir) = workspace {
            use std::os::unix::fs::MetadataExt;
            // The folder's owner is the session's uid: the store gave it, and no run can
            // change it (chown is refused, and needs a capability no run has). A session the
            // store gave the run user (made before PTC_SANDBOX_UIDS) keeps its runs as it.
            let st = std::fs::symlink_metadata(dir)?;
            let run_user = self.sandbox.run_as().map(|u| (u.uid, u.gid));
            if !uids.range().contains(st.uid()) && Some((st.uid(), st.gid())) != run_user {
                return Err(std::io::Error::other(format!(
                    "the session folder {} is owned by uid {}, neither a uid of \
                     PTC_SANDBOX_UIDS ({}) nor the run user's; delete the session",
                    dir.display(),
                    st.uid(),
                    uids.range()
                )));
            }
            return Ok((Some((st.uid(), st.gid())), None));
        }
        let lease = uids.lease().map_err(std::io::Error::other)?;
        Ok((Some((lease.uid(), lease.uid())), Some(lease)))
    }

    /// The whole environment of a run's child: nothing of the sidecar's but `PATH`; with a
    /// `workspace` (a session's data directory), its path as `LIBRECHAT_CODE_DATA_DIR`.
    pub fn run_env(&self, scratch: &Path, workspace: Option<&Path>) -> Vec<(&'static str, String)> {
        let scratch = scratch.to_string_lossy().into_owned();
        let mut env = vec![
            ("PATH", self.path_env.clone()),
            ("LANG", "C.UTF-8".into()),
            ("HOME", scratch.clone()),
            ("TMPDIR", scratch),
        ];
        if let Some(dir) = workspace {
            env.push((DATA_DIR_VARIABLE, dir.to_string_lossy().into_owned()));
        }
        env
    }
}

/// A uid and a gid.
pub type Ids = (u32, u32);

/// A run's scratch directory, and the uid it was made for.
#[derive(Debug)]
pub struct Scratch {
    pub path: PathBuf,
    /// The uid and gid of the run, where it has one of its own (`PTC_SANDBOX_UIDS`).
    pub ids: Option<Ids>,
    /// A uid leased for this run alone: given back once the folder is removed.
    pub lease: Option<sandbox::Lease>,
}

impl Scratch {
    /// Removes the folder, then gives the run's uid back (blocking).
    pub fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.path);
        drop(self.lease);
    }
}

/// A started child. Dropping it kills its whole process group and removes its scratch dir.
pub struct Child {
    exit: Exit,
    group: GroupKill,
    pub stdin: Option<Stdin>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
    scratch: Option<Scratch>,
    /// Its end of the IPC bridge when it has a network namespace of its own: a socket
    /// listening inside it, which the runner accepts on (`ipc::Bridge`).
    listener: Option<OwnedFd>,
    /// What lives as long as the child ([`Child::hold`]).
    held: Option<Box<dyn Any + Send>>,
}

/// Where a child's exit status comes from.
enum Exit {
    /// Our own child: waited on directly.
    Process(tokio::process::Child),
    /// Forked by the fork server, which reaps it and reports the code.
    Forked {
        report: Option<oneshot::Receiver<i32>>,
        code: Option<i32>,
        /// The fork server, kept running while this child lives: a newer catalog replacing it
        /// must not take the report of a run still going.
        _server: Arc<dyn Any + Send + Sync>,
    },
}

/// Starts `python -I -u -B SDK_DIR/ptc_bootstrap.py` (see docs/runner-protocol.md).
/// The child confines itself (`ptc_sandbox.confine`) before it reads its job: its Landlock
/// ruleset is inherited at [`sandbox::COLD_RULESET_FD`], and it starts as the run user.
pub async fn spawn(
    spec: &SpawnSpec,
    sdk_dir: &Path,
    id: &str,
    workspace: Option<&Path>,
) -> std::io::Result<Child> {
    let scratch = spec.make_scratch(id, workspace)?;
    let writable: Vec<&Path> = std::iter::once(scratch.path.as_path())
        .chain(workspace)
        .collect();
    let ruleset = match spec.sandbox.ruleset(sdk_dir, &writable) {
        Ok(r) => r,
        Err(e) => {
            scratch.remove();
            return Err(e);
        }
    };
    let mut cmd = spec.command(&sdk_dir.join("ptc_bootstrap.py"));
    cmd.envs(spec.run_env(&scratch.path, workspace))
        .env(
            sandbox::SPEC_VARIABLE,
            spec.sandbox_spec(ruleset.as_ref().map(|_| sandbox::COLD_RULESET_FD)),
        )
        .current_dir(workspace.unwrap_or(&scratch.path))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let limits = spec.limits;
    let ruleset_fd = ruleset.as_ref().map(AsRawFd::as_raw_fd);
    // As the run user, or as the run's own uid where it has one.
    let run_as = spec
        .sandbox
        .run_as()
        .cloned()
        .map(|user| match scratch.ids {
            Some((uid, gid)) => RunAs { uid, gid, ..user },
            None => user,
        });
    // SAFETY: the closure runs between fork and exec and calls only setrlimit, dup2/fcntl and
    // the set*id calls of `RunAs::switch`, all async-signal-safe; it allocates nothing and
    // takes no lock (`run_as` was cloned before the fork).
    unsafe {
        cmd.pre_exec(move || {
            set_limits(&limits)?;
            if let Some(fd) = ruleset_fd {
                sandbox::inherit_fd(fd, sandbox::COLD_RULESET_FD)?;
            }
            if let Some(user) = &run_as {
                user.switch()?;
            }
            Ok(())
        });
    }
    // It dies with the sidecar, even one killed with SIGKILL.
    let spawned = crate::util::spawn_tied(cmd, libc::SIGKILL).await;
    // The child has its own copy (or none, if the spawn failed): ours closes now.
    drop(ruleset);
    let mut process = match spawned {
        Ok(p) => p,
        Err(e) => {
            scratch.remove();
            return Err(start_failed(e, limits.processes));
        }
    };
    let group = GroupKill::of(process.id());
    Ok(Child {
        stdin: process.stdin.take().map(|p| Box::new(p) as Stdin),
        stdout: process.stdout.take().map(|p| Box::new(p) as Output),
        stderr: process.stderr.take().map(|p| Box::new(p) as Output),
        exit: Exit::Process(process),
        group,
        scratch: Some(scratch),
        listener: None,
        held: None,
    })
}

/// Why a child could not start. EAGAIN is the run user's process limit: the processes and
/// threads of every run count against one `RLIMIT_NPROC` (docs/SECURITY.md, "Limits"), so one
/// run that holds them all keeps the next from starting until it ends. That error says so, as
/// `ResourceBusy`; any other passes through.
pub fn start_failed(cause: std::io::Error, max_processes: u64) -> std::io::Error {
    if cause.raw_os_error() != Some(libc::EAGAIN) {
        return cause;
    }
    std::io::Error::new(
        std::io::ErrorKind::ResourceBusy,
        format!(
            "the run user's processes and threads reached their limit ({max_processes}, all \
             runs together: {cause}); retry when other runs end"
        ),
    )
}

/// Every resource limit of a child; async-signal-safe (setrlimit only).
pub fn set_limits(limits: &Limits) -> std::io::Result<()> {
    set_limit(libc::RLIMIT_AS, limits.address_space)?;
    set_limit(libc::RLIMIT_CPU, limits.cpu_secs)?;
    set_limit(libc::RLIMIT_FSIZE, limits.file_size)?;
    set_limit(libc::RLIMIT_NOFILE, limits.open_files)?;
    set_limit(libc::RLIMIT_NPROC, limits.processes)?;
    set_limit(libc::RLIMIT_CORE, 0)
}

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: a plain syscall with a valid pointer to a local.
    if unsafe { libc::setrlimit(resource, &limit) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What a run's stderr says when its interpreter was ended by a signal ([`Child::wait`]'s
/// `-signal`), or `None` for an exit of its own. Without it a killed run ended `error` with an
/// empty stderr and only `exit_code: -9` to go on: the code cannot say why, since nothing in the
/// process runs after a SIGKILL.
pub fn killed_by(exit_code: i32) -> Option<String> {
    let signal = exit_code.checked_neg().filter(|s| *s > 0)?;
    const CRASH: &str = ": a crash in the interpreter or a native extension";
    let (name, why) = match signal {
        libc::SIGKILL => (
            "SIGKILL",
            ", which code cannot catch: another process or the kernel (out of memory) sent it",
        ),
        libc::SIGTERM => ("SIGTERM", ""),
        libc::SIGXCPU => ("SIGXCPU", ": the run used up its CPU time limit"),
        libc::SIGSEGV => ("SIGSEGV", CRASH),
        libc::SIGBUS => ("SIGBUS", CRASH),
        libc::SIGILL => ("SIGILL", CRASH),
        libc::SIGFPE => ("SIGFPE", CRASH),
        libc::SIGABRT => (
            "SIGABRT",
            ": it aborted, often a failed check in native code",
        ),
        _ => ("", ""),
    };
    Some(match name {
        "" => format!("the interpreter was killed by signal {signal}"),
        name => format!("the interpreter was killed by signal {signal} ({name}){why}"),
    })
}

impl Child {
    /// The run's scratch directory (its cwd, HOME and TMPDIR).
    pub fn scratch(&self) -> &Path {
        self.scratch
            .as_ref()
            .map_or(Path::new(""), |s| s.path.as_path())
    }

    /// Its end of the IPC bridge, once (see [`Child`]'s `listener`).
    pub fn take_listener(&mut self) -> Option<OwnedFd> {
        self.listener.take()
    }

    /// A child the fork server made; its group is its pid. `listener`: its end of the IPC
    /// bridge, a socket listening inside its network namespace, when it has one.
    #[allow(clippy::too_many_arguments)]
    pub fn forked(
        pid: i32,
        report: oneshot::Receiver<i32>,
        listener: Option<OwnedFd>,
        server: Arc<dyn Any + Send + Sync>,
        stdin: impl AsyncWrite + Send + Unpin + 'static,
        stdout: impl AsyncRead + Send + Unpin + 'static,
        stderr: impl AsyncRead + Send + Unpin + 'static,
        scratch: Scratch,
    ) -> std::io::Result<Child> {
        Ok(Child {
            exit: Exit::Forked {
                report: Some(report),
                code: None,
                _server: server,
            },
            group: GroupKill(pid),
            stdin: Some(Box::new(stdin)),
            stdout: Some(Box::new(stdout)),
            stderr: Some(Box::new(stderr)),
            scratch: Some(scratch),
            listener,
            held: None,
        })
    }

    /// Waits for the child itself to exit; its exit code, or `-signal` when a signal ended it.
    pub async fn wait(&mut self) -> std::io::Result<i32> {
        match &mut self.exit {
            Exit::Process(process) => {
                let status = process.wait().await?;
                use std::os::unix::process::ExitStatusExt;
                Ok(status
                    .code()
                    .or_else(|| status.signal().map(|s| -s))
                    .unwrap_or(-1))
            }
            Exit::Forked { report, code, .. } => {
                if let Some(code) = code {
                    return Ok(*code);
                }
                // Awaited in place, so a wait given up (a session run that ended first) can be
                // waited again.
                let got = match report.as_mut() {
                    Some(rx) => rx.await,
                    None => return Err(std::io::Error::other("the fork server went away")),
                };
                *report = None;
                let got = got.map_err(|_| std::io::Error::other("the fork server went away"))?;
                *code = Some(got);
                Ok(got)
            }
        }
    }

    /// Whether the child already exited (a warm child that died while waiting).
    pub fn has_exited(&mut self) -> bool {
        match &mut self.exit {
            Exit::Process(process) => !matches!(process.try_wait(), Ok(None)),
            Exit::Forked { report, code, .. } => {
                if code.is_some() {
                    return true;
                }
                match report.as_mut().map(|rx| rx.try_recv()) {
                    Some(Ok(c)) => {
                        *code = Some(c);
                        true
                    }
                    Some(Err(oneshot::error::TryRecvError::Empty)) => false,
                    _ => true,
                }
            }
        }
    }

    /// Kills every process in the child's group, the child and anything it started.
    pub fn kill_group(&self) {
        self.group.kill();
    }

    /// The child's pid (it leads its own process group).
    pub fn pid(&self) -> i32 {
        self.group.0
    }

    /// Stops the child's whole group (`SIGSTOP`): a session's interpreter between runs, so
    /// that nothing an earlier run left running uses CPU or calls tools while no run is on.
    pub fn pause(&self) {
        crate::util::signal_group(self.group.0, libc::SIGSTOP);
    }

    /// Gives the child `secs` more CPU seconds from now (`RLIMIT_CPU` counts a process's whole
    /// life, and a session's interpreter lives through many runs). Without `CAP_SYS_RESOURCE`
    /// the hard limit cannot be raised: then only the soft one moves, up to the hard one, and
    /// a session whose runs together pass it ends (docs/SECURITY.md).
    pub fn extend_cpu(&self, secs: u64) -> std::io::Result<()> {
        let pid = self.group.0;
        let [utime, stime, _, _] = super::cpu::stat_times(pid)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        let used = (utime + stime).div_ceil(super::cpu::ticks_per_second());
        let want = used + secs;
        let mut limit = libc::rlimit {
            rlim_cur: want,
            rlim_max: want,
        };
        // SAFETY: prlimit with a valid pointer to a local and no old-limit pointer.
        if unsafe { libc::prlimit(pid, libc::RLIMIT_CPU, &limit, std::ptr::null_mut()) } == 0 {
            return Ok(());
        }
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above, reading into a local.
        if unsafe { libc::prlimit(pid, libc::RLIMIT_CPU, std::ptr::null(), &mut now) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit.rlim_max = now.rlim_max;
        limit.rlim_cur = want.min(now.rlim_max);
        // SAFETY: as above.
        if unsafe { libc::prlimit(pid, libc::RLIMIT_CPU, &limit, std::ptr::null_mut()) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Lets a [`pause`](Self::pause)d group go on (`SIGCONT`).
    pub fn resume(&self) {
        crate::util::signal_group(self.group.0, libc::SIGCONT);
    }
}

impl Child {
    /// Keeps `what` until the child is dropped (its run is over): a guard whose drop says so.
    pub fn hold(&mut self, what: impl Any + Send) {
        self.held = Some(Box::new(what));
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill_group();
        let Some(scratch) = self.scratch.take() else {
            return;
        };
        // Removing a tree can take a while; keep it off the async worker when we can. The
        // run's uid goes back to its range after (and, leased round-robin, is handed out again
        // only after every other uid of the range).
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(move || scratch.remove());
            }
            Err(_) => scratch.remove(),
        }
    }
}

/// Why the configured interpreter cannot run code.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    #[error("PTC_PYTHON={name:?} did not answer within {} s", PYTHON_PROBE_TIMEOUT.as_secs())]
    Silent { name: String },
    #[error("PTC_PYTHON={name:?} cannot be started: {source}")]
    Unstartable {
        name: String,
        source: std::io::Error,
    },
    #[error("PTC_PYTHON={name:?} is older than Python 3.9")]
    TooOld { name: String },
    #[error("PTC_PYTHON={name:?} is not a working Python 3 interpreter: {stderr}")]
    NotPython { name: String, stderr: String },
}

/// Resolves an interpreter name (`python3`, a pyenv shim, a path) to the real binary once, by
/// asking it: a shim costs ~100 ms per spawn, the binary nothing.
pub async fn resolve_python(name: &str) -> Result<PathBuf, PythonError> {
    let output = tokio::process::Command::new(name)
        .args([
            "-I",
            "-c",
            "import sys; print(sys.executable); print(sys.version_info[:2] >= (3, 9))",
        ])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let name = name.to_string();
    let output = match tokio::time::timeout(PYTHON_PROBE_TIMEOUT, output).await {
        Err(_) => return Err(PythonError::Silent { name }),
        Ok(Err(source)) => return Err(PythonError::Unstartable { name, source }),
        Ok(Ok(output)) => output,
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    match (output.status.success(), lines.next(), lines.next()) {
        (true, Some(exe), Some("True")) if !exe.is_empty() => {
            Ok(std::fs::canonicalize(exe).unwrap_or_else(|_| PathBuf::from(exe)))
        }
        (true, Some(_), Some(_)) => Err(PythonError::TooOld { name }),
        _ => Err(PythonError::NotPython {
            name,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_named_and_an_exit_is_not() {
        assert_eq!(
            killed_by(-9).as_deref(),
            Some(
                "the interpreter was killed by signal 9 (SIGKILL), which code cannot catch: \
                 another process or the kernel (out of memory) sent it"
            )
        );
        assert_eq!(
            killed_by(-24).as_deref(),
            Some(
                "the interpreter was killed by signal 24 (SIGXCPU): the run used up its CPU time limit"
            )
        );
        assert_eq!(
            killed_by(-64).as_deref(),
            Some("the interpreter was killed by signal 64")
        );
        assert_eq!(killed_by(0), None);
        assert_eq!(killed_by(1), None);
        assert_eq!(killed_by(i32::MIN), None);
    }
}
