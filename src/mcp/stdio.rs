//! A stdio MCP server's process: how it is started (a cleared environment with the sidecar's
//! `PATH` and `HOME` from [`HubOptions`], its own process group, piped stdio), its stderr
//! drained into the log, and how its end is described.
//!
//! Owns the process, not the MCP session (that is [`super::server`]'s actor). Must not leave a
//! process behind: the group is killed when the child is dropped, however the actor ends.

use super::HubOptions;
use crate::util::{GroupKill, lock};
use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Longest stderr line forwarded to the log: a server printing a binary blob cannot flood it.
pub const MAX_STDERR_LINE: usize = 2048;
/// Last stderr lines kept to explain a failure in the log (a missing module, a bad token).
pub const STDERR_TAIL_LINES: usize = 3;
/// How long a stopping stdio server gets to exit after its stdin closes before its group is
/// killed: enough to flush, not enough to hold up shutdown.
pub const STOP_GRACE: Duration = Duration::from_millis(500);

/// A running stdio server process.
pub(super) struct StdioChild {
    pub(super) process: tokio::process::Child,
    /// Declared after `process` so it drops after it: the group is killed last.
    _group: GroupKill,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl StdioChild {
    /// Logs the last stderr lines at warn level, to explain a failure. They stay out of
    /// `/healthz`, which is open to probes and must say nothing secret (a server may print
    /// its token in an error).
    pub(super) fn log_tail(&self, server: &str) {
        let tail = lock(&self.stderr_tail);
        if !tail.is_empty() {
            let lines = tail.iter().cloned().collect::<Vec<_>>().join(" | ");
            tracing::warn!(server = %server, "its stderr ended with: {lines}");
        }
    }
}

/// Awaits the process when there is one; never resolves otherwise.
pub(super) async fn wait_child(child: &mut Option<StdioChild>) -> std::io::Result<ExitStatus> {
    match child {
        Some(c) => c.process.wait().await,
        None => std::future::pending().await,
    }
}

pub(super) fn describe_exit(status: std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            _ => s.to_string(),
        },
        Err(e) => format!("cannot wait for it: {e}"),
    }
}

/// What starts one stdio server.
pub(super) struct StdioSpec<'a> {
    pub(super) server: &'a str,
    pub(super) command: &'a str,
    pub(super) args: &'a [String],
    pub(super) env: &'a std::collections::BTreeMap<String, String>,
}

/// Starts a stdio server: only `PATH`, `HOME` (the sidecar's, from [`HubOptions`]) and its own
/// `env`, its own process group, stdio piped (stderr forwarded to the log, never to our stderr).
pub(super) async fn spawn_stdio(
    spec: &StdioSpec<'_>,
    options: &HubOptions,
) -> std::io::Result<(
    StdioChild,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
)> {
    let mut cmd = tokio::process::Command::new(spec.command);
    cmd.args(spec.args)
        .env_clear()
        .env("PATH", &options.path_env);
    if let Some(home) = &options.home {
        cmd.env("HOME", home);
    }
    cmd.envs(spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // It dies with the sidecar, even one killed with SIGKILL.
    let mut process = crate::util::spawn_tied(cmd, libc::SIGKILL).await?;
    let group = GroupKill::of(process.id());
    let missing = || std::io::Error::other("a piped stdio stream is missing");
    let stdout = process.stdout.take().ok_or_else(missing)?;
    let stdin = process.stdin.take().ok_or_else(missing)?;
    let stderr = process.stderr.take().ok_or_else(missing)?;
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    tokio::spawn(forward_stderr(
        spec.server.to_string(),
        stderr,
        stderr_tail.clone(),
    ));
    Ok((
        StdioChild {
            process,
            _group: group,
            stderr_tail,
        },
        stdout,
        stdin,
    ))
}

/// Forwards a server's stderr to the log line by line (debug), each line capped, and keeps the
/// last few lines. Always drains, so the server never blocks on a full pipe.
async fn forward_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let emit = |line: &mut Vec<u8>, cut: &mut bool| {
        let mut text = String::from_utf8_lossy(line).into_owned();
        if *cut {
            text.push_str(" …[cut]");
        }
        tracing::debug!(server = %server, "stderr: {text}");
        let mut t = lock(&tail);
        if !text.trim().is_empty() {
            if t.len() == STDERR_TAIL_LINES {
                t.pop_front();
            }
            t.push_back(text);
        }
        line.clear();
        *cut = false;
    };
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&mut line, &mut cut);
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        emit(&mut line, &mut cut);
    }
}
