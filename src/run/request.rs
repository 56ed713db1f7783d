//! What a run is asked and what it gives back: the runner's configuration, [`ExecRequest`]
//! (with its [`Lang`] and [`Workspace`]), [`ExecResult`] (with the [`SessionState`] of a session
//! run), and the `/mnt/data` rewrite of a run with a data directory ([`DataPath`]).
//!
//! Plain data and pure functions: it must not start, wait for or judge a run (the runner's).

use super::approval::Asker;
use super::calls::CallRecord;
use super::child::Limits;
use super::confine::SandboxSettings;
use super::dispatch::PendingCall;
use super::files::{Files, RunFile};
use super::live::Lost;
use super::output::OutputChunk;
use super::scratch::{OverQuota, ScratchQuota};
use super::shapes::ShapesConfig;
use crate::render::Snapshot;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Everything the runner needs, validated.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub python: PathBuf,
    /// Default and ceiling of one run (`PTC_TIMEOUT`).
    pub timeout: Duration,
    pub tool_timeout: Duration,
    pub max_output_bytes: usize,
    /// Where SDK directories and scratch directories go.
    pub runtime_dir: PathBuf,
    /// Pre-started interpreters kept ready; 0 starts every run cold.
    pub warm_workers: usize,
    /// Runs at once; more wait for a slot within their own deadline.
    pub max_runs: usize,
    /// Tool calls one run may make: a runaway loop stops with `limit`.
    pub max_calls_per_run: usize,
    /// Tool calls of one run in flight at once.
    pub max_in_flight_per_run: usize,
    pub limits: Limits,
    pub path_env: String,
    /// Let code start processes (off: seccomp refuses fork/exec; the SDK says why).
    pub allow_subprocess: bool,
    /// How runs are confined (docs/SECURITY.md).
    pub sandbox: SandboxSettings,
    /// What a run may keep in its scratch directory; a run past it is stopped.
    pub scratch_quota: ScratchQuota,
    /// Live session interpreters at once (`PTC_MAX_SESSIONS`); one more stops the least
    /// recently used.
    pub max_sessions: usize,
    /// A live session interpreter idle this long is stopped (`PTC_SESSION_IDLE_TTL`).
    pub session_idle_ttl: Duration,
    /// Whether result shapes are learned (`PTC_LEARN_SHAPES`), for which agent, and where they
    /// are kept across restarts (`PTC_STATE_DIR`).
    pub shapes: ShapesConfig,
}

/// The language of a run's code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lang {
    /// Python with the SDK: tools are async functions (the default).
    #[default]
    Python,
    /// Bash: tools are bash functions ([`bash`]); the code may start processes.
    Bash,
    /// JavaScript in node: tools are async functions ([`javascript`](super::javascript)).
    JavaScript,
    /// TypeScript: JavaScript once its types are stripped in the sidecar.
    TypeScript,
}

impl Lang {
    /// A run in node (JavaScript or TypeScript).
    pub fn is_node(self) -> bool {
        matches!(self, Lang::JavaScript | Lang::TypeScript)
    }
}

/// The path LibreChat's client tells the model its files are under. A run cannot have a
/// directory there of its own without a mount namespace, so the literal path in its code is
/// rewritten to its data directory, and the data directory's path in its output back to it.
pub const MODEL_DATA_DIR: &str = "/mnt/data";

/// A run's data directory: a session's files, there before the run and kept after it.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub dir: PathBuf,
    /// What the directory may hold; a run past it is stopped, as for its scratch quota.
    pub quota: ScratchQuota,
}

/// One request to run code.
#[derive(Debug, Default)]
pub struct ExecRequest {
    pub code: String,
    pub lang: Lang,
    /// The run's data directory, when it belongs to a session: its cwd, writable, and
    /// `LIBRECHAT_CODE_DATA_DIR`; `/mnt/data` in the code names it ([`MODEL_DATA_DIR`]).
    pub workspace: Option<Workspace>,
    /// The session the run belongs to (its events name it).
    pub session: Option<String>,
    /// The LibreChat user the run is for (its events name the `sub` and `tenant_id`).
    pub user: Option<Arc<crate::identity::User>>,
    /// Run Python code on the session's live interpreter (with a `session` and a
    /// `workspace`): the globals of its earlier runs are there ([`live`](super::live)).
    pub live: bool,
    /// A live session run on a fresh interpreter: the one the session has is stopped first
    /// (a live session is one trust domain: an earlier run may have left code running that
    /// controls the later ones; docs/SECURITY.md).
    pub reset: bool,
    /// Capped by `PTC_TIMEOUT`.
    pub timeout: Option<Duration>,
    /// Run against this catalog instead of the sidecar's current one (a protocol that sends its
    /// tools with each request). Prepared once per distinct content; such runs start cold.
    pub snapshot: Option<Arc<Snapshot>>,
    /// Where host tool calls go when the catalog has no callback (attached protocols).
    pub host: Option<mpsc::Sender<PendingCall>>,
    /// Hears of the run's calls that wait for a person (the attached stream's
    /// `approval_required`, the MCP front door's elicitation).
    pub asker: Option<Asker>,
    /// Receives output chunks as they come (attached protocol).
    pub output: Option<mpsc::UnboundedSender<OutputChunk>>,
    /// Where the run's files go (`save_file`, a cut stream's whole output); without it
    /// `save_file` says it is not available and a cut stream is only cut.
    pub files: Option<Files>,
    /// The caller's W3C `traceparent`: the run is a span of that trace (else of a new one).
    pub traceparent: Option<String>,
    /// Stops the run when cancelled (an MCP host's `notifications/cancelled`): its process
    /// group killed, what it printed kept, status `error`; a session's interpreter goes with it.
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// A run of the sidecar's own, not a caller's (a preview's analyzer): it emits no `exec.*`
    /// event, so no event stream, dashboard or run metric shows it.
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecStatus {
    Ok,
    Error,
    Timeout,
}

/// What a run gives back (DESIGN.md "Running code").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecResult {
    pub status: ExecStatus,
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
    pub tool_calls: Vec<CallRecord>,
    pub truncated: bool,
    /// A session run: what became of the state of the session's earlier runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionState>,
    /// Files the run made: in its session's workspace, saved with `save_file`, and the full
    /// output of a stream that was cut.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<RunFile>,
    /// Content blocks for the model beside the text: the images among `files` (filled by the
    /// API, which can read them back).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<serde_json::Value>,
    /// The run went past a quota of its scratch directory or its session: stopped by the
    /// watch, or its session held to its quota at its end (what it wrote there removed). Boxed:
    /// rare, and a result is moved around whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<Box<OverQuota>>,
}

impl ExecResult {
    /// The result of a run that never started: the status and why, on stderr.
    pub fn refused(started: std::time::Instant, status: ExecStatus, stderr: String) -> ExecResult {
        ExecResult {
            status,
            stdout: String::new(),
            stderr,
            exit_code: None,
            duration_ms: crate::util::ms(started.elapsed()),
            tool_calls: Vec::new(),
            truncated: false,
            session: None,
            files: Vec::new(),
            content: Vec::new(),
            quota: None,
        }
    }
}

/// What a session run says about the session's state (its globals).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionState {
    pub id: String,
    pub state: StateChange,
    /// Why the state is gone (`reset`: before this run; `ended`: with this run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Lost>,
    /// Runs of the current interpreter, this one included (1: a new interpreter).
    pub run: u64,
}

/// What became of a session's state with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StateChange {
    /// The session's first run: a new interpreter.
    New,
    /// The globals of the earlier runs were there.
    Kept,
    /// The earlier runs' state was gone before this run (`reason`); a new interpreter ran it.
    Reset,
    /// The run ended the interpreter (`reason`); the next run starts a new one.
    Ended,
}

/// Where a run's code says `/mnt/data` ([`MODEL_DATA_DIR`]) and what that is: its data
/// directory's path, when that path needs no quoting in either language (any other is left
/// alone, and so is the code).
#[derive(Debug, Clone)]
pub struct DataPath(Option<String>);

impl DataPath {
    pub fn of(workspace: Option<&Workspace>) -> DataPath {
        DataPath(
            workspace
                .map(|w| w.dir.to_string_lossy().into_owned())
                .filter(|p| {
                    p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
                }),
        )
    }

    /// The code, with `/mnt/data` as the data directory.
    pub fn into_code(&self, code: String) -> String {
        match &self.0 {
            Some(path) => replace_path(&code, MODEL_DATA_DIR, path),
            None => code,
        }
    }

    /// What the code printed, naming its data directory as the code did.
    pub fn into_output(&self, text: String) -> String {
        match &self.0 {
            Some(path) => replace_path(&text, path, MODEL_DATA_DIR),
            None => text,
        }
    }
}

/// `text` with every `from` that is a whole path (not followed by a character a file name
/// continues with: `/mnt/data/x` and `"/mnt/data"` are, `/mnt/database` is not) as `to`.
fn replace_path(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        let whole = !after
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        out.push_str(&rest[..at]);
        out.push_str(if whole { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_whole_paths_are_replaced() {
        let code =
            "open('/mnt/data/a.csv'); cd /mnt/data; ls /mnt/database /mnt/data_x \"/mnt/data\"";
        assert_eq!(
            replace_path(code, "/mnt/data", "/run/s1"),
            "open('/run/s1/a.csv'); cd /run/s1; ls /mnt/database /mnt/data_x \"/run/s1\""
        );
        assert_eq!(replace_path("none here", "/mnt/data", "/x"), "none here");
    }
}
