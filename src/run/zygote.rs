//! The fork server: one Python process per catalog version that has imported the SDK and built
//! the stubs once, and forks a fresh child for each run.
//!
//! Starting an interpreter costs ~40 ms of CPU here; forking a prepared one costs ~1 ms. Each
//! forked child starts from the same clean state a cold child reaches (nothing of a run can leak
//! into the next: every run is a new process forked from the untouched server), sets its own
//! process group, resource limits, cwd and environment, and then serves its job exactly like a
//! cold child (docs/runner-protocol.md, "Fork server").
//!
//! Wire: a `SOCK_SEQPACKET` socketpair is the server's stdin. The sidecar sends one JSON message
//! per fork with the child's stdin, stdout and stderr pipe ends and its Landlock ruleset (when
//! there is one) attached (`SCM_RIGHTS`); the
//! server answers `forked ID PID` (with the run's end of the IPC bridge attached when the run
//! has a network namespace of its own: a socket listening inside it), or `failed ID ERRNO
//! MESSAGE`, and `exited PID CODE` when it reaps a child.
//!
//! The server runs as the sidecar's user, never as the run user (a run could otherwise signal
//! it, or set its resource limits): each child switches itself, and where runs get namespaces
//! of their own, is cloned into them and makes them its own before it is confined
//! (`ptc_sandbox.clone_isolated`, `enter`).

use super::child::{self, Child, Scratch, SpawnSpec};
use crate::sandbox;
use crate::util::{GroupKill, lock};
use serde_json::json;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

/// How long a server told to go may take to clean up and exit before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long the server may take to answer a fork request; a stuck server is replaced.
pub const FORK_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest control message read from the server.
const MAX_MESSAGE: usize = 4096;

/// A run's process from the server: its pid, where its exit code will come, and its end of
/// the IPC bridge when it has one.
struct Forked {
    pid: i32,
    exit: oneshot::Receiver<i32>,
    listener: Option<OwnedFd>,
}

/// The forked run, or the errno and message of a fork that failed.
type ForkReply = Result<Forked, (i32, String)>;

#[derive(Default)]
struct Waiters {
    forks: HashMap<String, oneshot::Sender<ForkReply>>,
    exits: HashMap<i32, oneshot::Sender<i32>>,
}

/// A program a forked child becomes once confined, and what it adds to the run's environment.
#[derive(Debug, Clone, Default)]
pub struct Program {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Files written into the run's scratch directory before the fork (read-only to the run):
    /// name, content.
    pub files: Vec<(String, String)>,
    /// The program may start processes (bash; node with `PTC_ALLOW_SUBPROCESS`): the seccomp
    /// program `exec`. Otherwise `alone`: process creation refused, the one exec of the
    /// program aside.
    pub may_spawn: bool,
}

/// A running fork server.
pub struct Zygote {
    process: Mutex<Option<tokio::process::Child>>,
    /// The SDK directory it serves (its children's Landlock rulesets name it).
    sdk_dir: PathBuf,
    group: GroupKill,
    ctl: Arc<AsyncFd<OwnedFd>>,
    waiters: Arc<Mutex<Waiters>>,
    alive: Arc<AtomicBool>,
}

impl Zygote {
    /// Starts `python -I -u -B SDK_DIR/ptc_zygote.py` with the control socket as its stdin.
    pub async fn start(spec: &SpawnSpec, sdk_dir: &Path) -> io::Result<Zygote> {
        let (ours, theirs) = seqpacket_pair()?;
        let mut cmd = spec.command(&sdk_dir.join("ptc_zygote.py"));
        cmd.current_dir(sdk_dir)
            .env(sandbox::SPEC_VARIABLE, spec.sandbox_spec(None))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // The server never runs code and keeps the sidecar's uid: each child becomes the run
        // user and confines itself after the fork.
        // A sidecar that dies (even by SIGKILL) closes the control socket, and the server
        // leaves, killing its children; SIGTERM at the sidecar's death does the same if the
        // server is somehow not reading it.
        let process = crate::util::spawn_tied(cmd, libc::SIGTERM).await?;
        let group = GroupKill::of(process.id());
        set_nonblocking(ours.as_raw_fd())?;
        // SAFETY: an OwnedFd keeps its fd open and unchanged for as long as it lives, and the
        // AsyncFd owns it.
        let ctl = Arc::new(
            unsafe { AsyncFd::register(ours) }.map_err(|e| io::Error::other(e.to_string()))?,
        );
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let alive = Arc::new(AtomicBool::new(true));
        tokio::spawn(read_replies(ctl.clone(), waiters.clone(), alive.clone()));
        Ok(Zygote {
            process: Mutex::new(Some(process)),
            sdk_dir: sdk_dir.to_path_buf(),
            group,
            ctl,
            waiters,
            alive,
        })
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Forks a child for one run, its pipes connected to us; it sets `spec.limits` on itself.
    /// With `program`, the child becomes that program once confined (a bash run).
    /// With `workspace` (a session's data directory), that is its cwd, writable, and named by
    /// `LIBRECHAT_CODE_DATA_DIR`.
    pub async fn fork(
        self: &Arc<Self>,
        spec: &SpawnSpec,
        id: &str,
        program: Option<&Program>,
        workspace: Option<&Path>,
    ) -> io::Result<Child> {
        if !self.is_alive() {
            return Err(io::Error::other("the fork server is gone"));
        }
        let scratch = spec.make_scratch(id, workspace)?;
        if let Some(program) = program
            && let Err(e) = write_files(&scratch.path, &program.files)
        {
            scratch.remove();
            return Err(e);
        }
        // The run's Landlock ruleset travels with the fork request as a fourth fd.
        let writable: Vec<&Path> = std::iter::once(scratch.path.as_path())
            .chain(workspace)
            .collect();
        let ruleset = match spec.sandbox.ruleset(&self.sdk_dir, &writable) {
            Ok(r) => r,
            Err(e) => {
                scratch.remove();
                return Err(e);
            }
        };
        let (stdin_r, stdin_w) = pipe()?;
        let (stdout_r, stdout_w) = pipe()?;
        let (stderr_r, stderr_w) = pipe()?;
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).forks.insert(id.to_string(), tx);
        let message = request(spec, id, &scratch, program, workspace);
        let mut fds = vec![
            stdin_r.as_raw_fd(),
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
        ];
        fds.extend(ruleset.as_ref().map(AsRawFd::as_raw_fd));
        let sent = self.send(message.as_bytes(), &fds).await;
        // The child holds its own copies now.
        drop((stdin_r, stdout_w, stderr_w, ruleset));
        if let Err(e) = sent {
            lock(&self.waiters).forks.remove(id);
            scratch.remove();
            return Err(e);
        }
        let forked = match tokio::time::timeout(FORK_TIMEOUT, rx).await {
            Ok(Ok(Ok(forked))) => forked,
            Ok(Ok(Err((errno, message)))) => {
                scratch.remove();
                let cause = match errno {
                    libc::EAGAIN | 0 if message.is_empty() => io::Error::from_raw_os_error(errno),
                    libc::EAGAIN => io::Error::from_raw_os_error(errno),
                    _ => {
                        io::Error::other(format!("the run's sandbox could not be made: {message}"))
                    }
                };
                return Err(child::start_failed(cause, spec.limits.processes));
            }
            _ => {
                lock(&self.waiters).forks.remove(id);
                scratch.remove();
                self.alive.store(false, Ordering::Relaxed);
                return Err(io::Error::other("the fork server did not answer"));
            }
        };
        Child::forked(
            forked.pid,
            forked.exit,
            forked.listener,
            self.clone(),
            tokio::net::unix::pipe::Sender::from_owned_fd(stdin_w)?,
            tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_r)?,
            tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_r)?,
            scratch,
        )
    }

    async fn send(&self, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
        loop {
            let mut guard = self.ctl.writable().await?;
            match guard.try_io(|inner| send_with_fds(inner.get_ref().as_raw_fd(), data, fds)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }
}

impl Drop for Zygote {
    /// Tells the server to go: it sees the end of its requests, kills its children and what
    /// they left behind, and exits (`ptc_zygote.py`); one that has not within [`STOP_GRACE`]
    /// is killed with its group. Without a runtime to wait on, it is killed at once.
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Relaxed);
        // SAFETY: shutdown(2) of the socket this Zygote owns (open until `ctl` drops).
        unsafe { libc::shutdown(self.ctl.as_raw_fd(), libc::SHUT_WR) };
        let mut group = std::mem::replace(&mut self.group, GroupKill(0));
        let process = lock(&self.process).take();
        if let (Some(mut process), Ok(runtime)) = (process, tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                if let Ok(Ok(_)) = tokio::time::timeout(STOP_GRACE, process.wait()).await {
                    // Gone and reaped: its pid may be someone else's group by now.
                    group.0 = 0;
                }
                drop(group);
            });
        }
        // Otherwise `group` and the process handle (kill_on_drop) kill it here.
    }
}

/// One fork request: the run's id, scratch directory, limits and environment, what it execs
/// (a program) and where it works (a session's data directory).
fn request(
    spec: &SpawnSpec,
    id: &str,
    scratch: &Scratch,
    program: Option<&Program>,
    workspace: Option<&Path>,
) -> String {
    let limits = spec.limits;
    let mut env: serde_json::Map<String, serde_json::Value> = spec
        .run_env(&scratch.path, workspace)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect();
    let mut message = json!({
        "id": id,
        "scratch": scratch.path.to_string_lossy(),
        "limits": {
            "as": limits.address_space,
            "cpu": limits.cpu_secs,
            "fsize": limits.file_size,
            "nofile": limits.open_files,
            "nproc": limits.processes,
        },
    });
    if let Some(program) = program {
        for (k, v) in &program.env {
            env.insert(k.clone(), v.clone().into());
        }
        message["exec"] = json!(program.argv);
        message["spawn"] = json!(program.may_spawn);
    }
    message["env"] = env.into();
    if let Some(dir) = workspace {
        message["cwd"] = dir.to_string_lossy().into();
    }
    // The run's own uid, where it has one: the server maps it and the run becomes it.
    if let Some((uid, gid)) = scratch.ids {
        message["user"] = json!({"uid": uid, "gid": gid});
    }
    message.to_string()
}

/// Writes a program's files into its scratch directory, readable by the run and not writable.
fn write_files(scratch: &Path, files: &[(String, String)]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for (name, content) in files {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(scratch.join(name))?
            .write_all(content.as_bytes())?;
    }
    Ok(())
}

/// Reads the server's replies and hands them to whoever waits. Each message is one line; a
/// `forked` one may carry the run's end of the IPC bridge.
async fn read_replies(
    ctl: Arc<AsyncFd<OwnedFd>>,
    waiters: Arc<Mutex<Waiters>>,
    alive: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let (n, mut fds) = match ctl.ready(Interest::READABLE).await {
            Ok(mut guard) => {
                match guard.try_io(|inner| recv_with_fds(inner.get_ref().as_raw_fd(), &mut buf)) {
                    Ok(Ok(got)) => got,
                    Ok(Err(_)) => (0, Vec::new()),
                    Err(_would_block) => continue,
                }
            }
            Err(_) => (0, Vec::new()),
        };
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&buf[..n]);
        for line in text.lines() {
            reply(line, &mut fds, &waiters);
        }
    }
    // The server is gone: nobody will report the remaining exits.
    alive.store(false, Ordering::Relaxed);
    let mut w = lock(&waiters);
    w.forks.clear();
    w.exits.clear();
}

/// Hands one line of the server to whoever waits for it; `fds` came with it.
fn reply(line: &str, fds: &mut Vec<OwnedFd>, waiters: &Mutex<Waiters>) {
    let mut words = line.splitn(4, ' ');
    let (kind, first, number, rest) = (
        words.next(),
        words.next(),
        words.next().and_then(|w| w.trim().parse::<i32>().ok()),
        words.next().unwrap_or("").trim(),
    );
    match (kind, first, number) {
        (Some("forked"), Some(id), Some(pid)) => {
            let (exit_tx, exit) = oneshot::channel();
            let mut w = lock(waiters);
            w.exits.insert(pid, exit_tx);
            if let Some(tx) = w.forks.remove(id) {
                let listener = (!fds.is_empty()).then(|| fds.remove(0));
                let _ = tx.send(Ok(Forked {
                    pid,
                    exit,
                    listener,
                }));
            }
        }
        (Some("failed"), Some(id), Some(errno)) => {
            if let Some(tx) = lock(waiters).forks.remove(id) {
                let _ = tx.send(Err((errno, rest.to_string())));
            }
        }
        (Some("exited"), Some(pid), Some(code)) => {
            if let Some(tx) = pid
                .parse()
                .ok()
                .and_then(|p: i32| lock(waiters).exits.remove(&p))
            {
                let _ = tx.send(code);
            }
        }
        _ => tracing::warn!("fork server said something unexpected: {line:?}"),
    }
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two fds into the array we own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `(read end, write end)`, both close-on-exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Most descriptors one reply carries (a `forked` reply carries one).
const MAX_REPLY_FDS: usize = 4;

/// One message and the descriptors attached to it (`SCM_RIGHTS`, made close-on-exec).
fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fds_len = MAX_REPLY_FDS * std::mem::size_of::<RawFd>();
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fds_len as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: a zeroed msghdr is valid; its pointers point into locals that outlive recvmsg, the
    // control buffer is CMSG_SPACE bytes, and each descriptor read from a SCM_RIGHTS header is
    // a new one the kernel gave this process, owned by nobody else.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        n as usize
    };
    Ok((n, fds))
}

/// One message with file descriptors attached (`SCM_RIGHTS`).
fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fds_len = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fds_len as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is valid; every pointer set below points into locals that outlive
    // the sendmsg call, and the control buffer is CMSG_SPACE bytes as the macros require.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::other("no room for SCM_RIGHTS"));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_len as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fds_len);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
