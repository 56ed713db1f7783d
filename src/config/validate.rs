//! [`RawConfig::validate`]: the raw strings into [`Config`], one concern at a time (the control
//! API, the run slots, the agent, the core, events, the runner, the sandbox, sessions,
//! operations). The order of the steps is the order in which a bad value is reported, so a
//! step must not move without a reason.
//!
//! Each value goes through one of the parsers of [`super::parse`]; what crosses two variables
//! (a public listener needs a key, sessions at least as many as runs) is checked here. Reads
//! nothing but the `RawConfig` it is given.

use super::parse::{
    check_agent_id, default_agent_id, non_empty, parse_bool, parse_globs, parse_list, parse_listen,
    parse_range, parse_read_paths, parse_redis_url, parse_sandbox, parse_sandbox_user, parse_secs,
};
use super::{
    Config, ConfigError, DEFAULT_ARTIFACT_MAX_MB, DEFAULT_ARTIFACT_TTL_SECS,
    DEFAULT_DESCRIPTION_BUDGET, DEFAULT_DIRECT_TOOLS, DEFAULT_LISTEN, DEFAULT_MAX_SESSIONS,
    DEFAULT_PATH, DEFAULT_PYTHON, DEFAULT_SESSION_IDLE_TTL_SECS, DEFAULT_SESSION_TTL_SECS,
    DEFAULT_SHUTDOWN_GRACE_SECS, DEFAULT_TEMP_DIR, DESCRIPTION_BUDGET_RANGE, LANG_FORMS, Lang,
    Listen, LogFormat, MAX_SCRATCH_FILES, MAX_SHUTDOWN_GRACE_SECS, OUTPUT_BYTES_RANGE, RawConfig,
    SYSTEM_PYTHON, SandboxMode, SandboxUser,
};
use crate::identity::jwt::{self, Verifier};
use std::path::PathBuf;
use std::time::Duration;

impl RawConfig {
    /// Validates one concern at a time. The first bad value stops it, so this order (and the
    /// order of the variables within each step) is the order in which errors are reported.
    pub fn validate(mut self) -> Result<Config, ConfigError> {
        let (listen, api_key, librechat_jwt) = self.control_api()?;
        let (max_runs, max_sessions) = self.run_slots()?;
        let agent_id = self.agent_id()?;
        let core = self.core()?;
        let (events_stream_maxlen, events_bodies) = self.events()?;
        let runner = self.runner()?;
        let sandbox = self.sandbox()?;
        let sessions = self.sessions()?;
        let ops = self.operations()?;
        let control = super::control::validate(
            self.ptc_approve_tools.take(),
            self.ptc_approve_destructive.take(),
            self.ptc_approval_timeout.take(),
            self.ptc_tool_limits.take(),
        )?;
        Ok(Config {
            enabled: core.enabled,
            timeout: core.timeout,
            direct_tools: core.direct_tools,
            tools_file: core.tools_file,
            mcp_config: core.mcp_config,
            listen,
            api_key,
            librechat_jwt,
            redis_url: core.redis_url,
            agent_id,
            python_fallback: match core.python {
                Some(_) => None,
                None => Some(PathBuf::from(SYSTEM_PYTHON)),
            },
            python: core.python.unwrap_or_else(|| DEFAULT_PYTHON.into()),
            tool_timeout: core.tool_timeout,
            max_output_bytes: core.max_output_bytes,
            allow_tools: core.allow_tools,
            deny_tools: core.deny_tools,
            read_only_tools: core.read_only_tools,
            description_budget: core.description_budget,
            lang: core.lang,
            state_dir: core.state_dir,
            search_model: core.search_model,
            learn_shapes: core.learn_shapes,
            events_stream_maxlen,
            events_bodies,
            warm_workers: runner.warm_workers,
            max_runs,
            memory_mb: runner.memory_mb,
            allow_subprocess: runner.allow_subprocess,
            runtime_dir: runner.runtime_dir,
            mcp_start_timeout: runner.mcp_start_timeout,
            sandbox: sandbox.mode,
            sandbox_user: sandbox.user,
            sandbox_read_paths: sandbox.read_paths,
            sandbox_uids: sandbox.uids,
            sandbox_uids_is_default: sandbox.uids_is_default,
            scratch_max_mb: sandbox.scratch_max_mb,
            scratch_max_files: sandbox.scratch_max_files,
            session_dir: sessions.dir,
            session_ttl: sessions.ttl,
            session_max_mb: sessions.max_mb,
            session_max_files: sessions.max_files,
            max_sessions,
            session_idle_ttl: sessions.idle_ttl,
            artifact_ttl: sessions.artifact_ttl,
            artifact_max_mb: sessions.artifact_max_mb,
            metrics_public: ops.metrics_public,
            metrics: ops.metrics,
            shutdown_grace: ops.shutdown_grace,
            log_format: ops.log_format,
            log_filter: non_empty(self.rust_log.take()),
            strict_config: ops.strict_config,
            control,
            otel_endpoint: ops.otel_endpoint,
            otel_service: ops.otel_service,
            path_env: non_empty(self.path.take()).unwrap_or_else(|| DEFAULT_PATH.into()),
            home: non_empty(self.home.take()).map(PathBuf::from),
            temp_dir: PathBuf::from(
                non_empty(self.tmpdir.take())
                    .as_deref()
                    .unwrap_or(DEFAULT_TEMP_DIR),
            ),
        })
    }

    /// `PTC_LISTEN`, `PTC_API_KEY` and `PTC_LIBRECHAT_JWT_*`: a listener beyond loopback
    /// needs a key or LibreChat's (which then opens only LibreChat's routes).
    #[allow(clippy::type_complexity)]
    fn control_api(&mut self) -> Result<(Listen, Option<String>, Option<Verifier>), ConfigError> {
        let api_key = non_empty(self.ptc_api_key.take());
        let listen = parse_listen(self.ptc_listen.as_deref().unwrap_or(DEFAULT_LISTEN))?;
        let issuer = non_empty(self.ptc_librechat_jwt_issuer.take());
        let audience = non_empty(self.ptc_librechat_jwt_audience.take());
        let jwt = match non_empty(self.ptc_librechat_jwt_public_key.take()) {
            None => None,
            Some(text) => Some(
                Verifier::parse(
                    &text,
                    issuer.as_deref().unwrap_or(jwt::DEFAULT_ISSUER),
                    audience.as_deref().unwrap_or(jwt::DEFAULT_AUDIENCE),
                )
                .map_err(|e| ConfigError {
                    variable: "PTC_LIBRECHAT_JWT_PUBLIC_KEY",
                    // The value may be a path or a key: only its length is repeated.
                    value: format!("({} bytes)", text.len()),
                    expected: e.what,
                })?,
            ),
        };
        if let Listen::Tcp(addr) = &listen
            && !listen.is_local()
            && api_key.is_none()
            && jwt.is_none()
        {
            return Err(ConfigError {
                variable: "PTC_LISTEN",
                value: addr.to_string(),
                expected: "a loopback address (127.0.0.1:PORT, [::1]:PORT) or unix:/path; \
                           listening on other interfaces requires PTC_API_KEY (or \
                           PTC_LIBRECHAT_JWT_PUBLIC_KEY, which opens only LibreChat's routes)"
                    .into(),
            });
        }
        Ok((listen, api_key, jwt))
    }

    /// `PTC_MAX_RUNS` and `PTC_MAX_SESSIONS`, which must be at least as many.
    fn run_slots(&mut self) -> Result<(usize, usize), ConfigError> {
        let max_runs =
            parse_range("PTC_MAX_RUNS", self.ptc_max_runs.take(), 32, (1, 4096))? as usize;
        let max_sessions = parse_range(
            "PTC_MAX_SESSIONS",
            self.ptc_max_sessions.take(),
            DEFAULT_MAX_SESSIONS.max(max_runs as u64),
            (1, 100_000),
        )? as usize;
        if max_sessions < max_runs {
            return Err(ConfigError {
                variable: "PTC_MAX_SESSIONS",
                value: max_sessions.to_string(),
                expected: format!(
                    "at least PTC_MAX_RUNS ({max_runs}): every run may hold a session's \
                     interpreter, and a new session needs one it can stop; raise it or lower \
                     PTC_MAX_RUNS"
                ),
            });
        }
        Ok((max_runs, max_sessions))
    }

    /// `PTC_AGENT_ID`, else the hostname.
    fn agent_id(&mut self) -> Result<String, ConfigError> {
        Ok(match non_empty(self.ptc_agent_id.take()) {
            Some(id) => check_agent_id(id)?,
            None => default_agent_id(),
        })
    }

    /// Whether PTC is on, its runs' timeout and output, where the tools come from and what the
    /// model sees of them. `REDIS_URL` is read among them, where it always was.
    fn core(&mut self) -> Result<Core, ConfigError> {
        Ok(Core {
            enabled: parse_bool("PTC_ENABLED", self.ptc_enabled.take(), false)?,
            timeout: parse_secs("PTC_TIMEOUT", self.ptc_timeout.take(), 120)?,
            direct_tools: parse_list(
                self.ptc_direct_tools
                    .as_deref()
                    .unwrap_or(DEFAULT_DIRECT_TOOLS),
            ),
            tools_file: non_empty(self.ptc_tools_file.take()).map(PathBuf::from),
            mcp_config: non_empty(self.ptc_mcp_config.take()).map(PathBuf::from),
            redis_url: parse_redis_url(self.redis_url.take())?,
            python: non_empty(self.ptc_python.take()),
            tool_timeout: parse_secs("PTC_TOOL_TIMEOUT", self.ptc_tool_timeout.take(), 30)?,
            max_output_bytes: parse_range(
                "PTC_MAX_OUTPUT_BYTES",
                self.ptc_max_output_bytes.take(),
                65_536,
                OUTPUT_BYTES_RANGE,
            )? as usize,
            allow_tools: parse_globs("PTC_ALLOW_TOOLS", self.ptc_allow_tools.take())?,
            deny_tools: parse_globs("PTC_DENY_TOOLS", self.ptc_deny_tools.take())?,
            read_only_tools: parse_bool(
                "PTC_READ_ONLY_TOOLS",
                self.ptc_read_only_tools.take(),
                false,
            )?,
            description_budget: parse_range(
                "PTC_DESCRIPTION_BUDGET",
                self.ptc_description_budget.take(),
                DEFAULT_DESCRIPTION_BUDGET,
                DESCRIPTION_BUDGET_RANGE,
            )? as usize,
            lang: match non_empty(self.ptc_lang.take()) {
                None => Lang::default(),
                Some(value) => value.parse().map_err(|_| ConfigError {
                    variable: "PTC_LANG",
                    value,
                    expected: LANG_FORMS.into(),
                })?,
            },
            state_dir: non_empty(self.ptc_state_dir.take()).map(PathBuf::from),
            search_model: non_empty(self.ptc_search_model.take()).map(PathBuf::from),
            learn_shapes: parse_bool("PTC_LEARN_SHAPES", self.ptc_learn_shapes.take(), true)?,
        })
    }

    /// `PTC_EVENTS_STREAM_MAXLEN` and `PTC_EVENTS_BODIES`.
    fn events(&mut self) -> Result<(usize, bool), ConfigError> {
        let maxlen = parse_range(
            "PTC_EVENTS_STREAM_MAXLEN",
            self.ptc_events_stream_maxlen.take(),
            10_000,
            (1, 100_000_000),
        )? as usize;
        let bodies = parse_bool("PTC_EVENTS_BODIES", self.ptc_events_bodies.take(), false)?;
        Ok((maxlen, bodies))
    }

    /// The runner's children and the MCP servers' start.
    fn runner(&mut self) -> Result<Runner, ConfigError> {
        Ok(Runner {
            warm_workers: parse_range("PTC_WARM_WORKERS", self.ptc_warm_workers.take(), 2, (0, 64))?
                as usize,
            memory_mb: parse_range(
                "PTC_MEMORY_MB",
                self.ptc_memory_mb.take(),
                2048,
                (64, 1 << 20),
            )?,
            allow_subprocess: parse_bool(
                "PTC_ALLOW_SUBPROCESS",
                self.ptc_allow_subprocess.take(),
                false,
            )?,
            runtime_dir: non_empty(self.ptc_runtime_dir.take()).map(PathBuf::from),
            mcp_start_timeout: parse_range(
                "PTC_MCP_START_TIMEOUT",
                self.ptc_mcp_start_timeout.take(),
                20,
                (1, 600),
            )
            .map(Duration::from_secs)?,
        })
    }

    /// `PTC_SANDBOX*` and the scratch quota of a run.
    fn sandbox(&mut self) -> Result<Sandbox, ConfigError> {
        Ok(Sandbox {
            mode: parse_sandbox(self.ptc_sandbox.take())?,
            user: parse_sandbox_user(self.ptc_sandbox_user.take())?,
            read_paths: parse_read_paths(self.ptc_sandbox_read_paths.take())?,
            uids_is_default: non_empty(self.ptc_sandbox_uids.clone()).is_none(),
            uids: parse_sandbox_uids(self.ptc_sandbox_uids.take())?,
            scratch_max_mb: parse_range(
                "PTC_SCRATCH_MAX_MB",
                self.ptc_scratch_max_mb.take(),
                256,
                (1, 1 << 20),
            )?,
            scratch_max_files: parse_range(
                "PTC_SCRATCH_MAX_FILES",
                self.ptc_scratch_max_files.take(),
                10_000,
                (1, MAX_SCRATCH_FILES),
            )?,
        })
    }

    /// The session store, its live interpreters' idle time and the artifacts' life.
    fn sessions(&mut self) -> Result<Sessions, ConfigError> {
        Ok(Sessions {
            dir: non_empty(self.ptc_session_dir.take()).map(PathBuf::from),
            ttl: parse_range(
                "PTC_SESSION_TTL",
                self.ptc_session_ttl.take(),
                DEFAULT_SESSION_TTL_SECS,
                (1, 30 * 24 * 3600),
            )
            .map(Duration::from_secs)?,
            max_mb: parse_range(
                "PTC_SESSION_MAX_MB",
                self.ptc_session_max_mb.take(),
                512,
                (1, 1 << 20),
            )?,
            max_files: parse_range(
                "PTC_SESSION_MAX_FILES",
                self.ptc_session_max_files.take(),
                10_000,
                (1, MAX_SCRATCH_FILES),
            )?,
            idle_ttl: parse_range(
                "PTC_SESSION_IDLE_TTL",
                self.ptc_session_idle_ttl.take(),
                DEFAULT_SESSION_IDLE_TTL_SECS,
                (1, 30 * 24 * 3600),
            )
            .map(Duration::from_secs)?,
            artifact_ttl: parse_range(
                "PTC_ARTIFACT_TTL",
                self.ptc_artifact_ttl.take(),
                DEFAULT_ARTIFACT_TTL_SECS,
                (1, 30 * 24 * 3600),
            )
            .map(Duration::from_secs)?,
            artifact_max_mb: parse_range(
                "PTC_ARTIFACT_MAX_MB",
                self.ptc_artifact_max_mb.take(),
                DEFAULT_ARTIFACT_MAX_MB,
                (1, 1 << 20),
            )?,
        })
    }

    /// What the operator sees and does: metrics, the shutdown grace, the log, OTLP, and how
    /// strictly the variables themselves are read.
    fn operations(&mut self) -> Result<Operations, ConfigError> {
        Ok(Operations {
            strict_config: parse_bool("PTC_STRICT_CONFIG", self.ptc_strict_config.take(), false)?,
            metrics_public: parse_bool(
                "PTC_METRICS_PUBLIC",
                self.ptc_metrics_public.take(),
                false,
            )?,
            metrics: parse_bool("PTC_METRICS", self.ptc_metrics.take(), true)?,
            shutdown_grace: parse_range(
                "PTC_SHUTDOWN_GRACE",
                self.ptc_shutdown_grace.take(),
                DEFAULT_SHUTDOWN_GRACE_SECS,
                (0, MAX_SHUTDOWN_GRACE_SECS),
            )
            .map(Duration::from_secs)?,
            log_format: match non_empty(self.ptc_log_format.take()).as_deref() {
                None | Some("text") => LogFormat::Text,
                Some("json") => LogFormat::Json,
                Some(other) => {
                    return Err(ConfigError {
                        variable: "PTC_LOG_FORMAT",
                        value: other.into(),
                        expected: "text (the default: lines for a person) or json (one object \
                                   per line, for a log collector)"
                            .into(),
                    });
                }
            },
            otel_endpoint: match non_empty(self.otel_exporter_otlp_endpoint.take()) {
                Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                    return Err(ConfigError {
                        variable: "OTEL_EXPORTER_OTLP_ENDPOINT",
                        value: url,
                        expected: "an http:// or https:// base URL of an OTLP/HTTP collector \
                                   (spans go to its /v1/traces), e.g. http://127.0.0.1:4318"
                            .into(),
                    });
                }
                url => url,
            },
            otel_service: non_empty(self.otel_service_name.take())
                .unwrap_or_else(|| "ptc-sidecar".into()),
        })
    }
}

/// What [`RawConfig::core`] validates, on its way into [`Config`].
struct Core {
    enabled: bool,
    timeout: Duration,
    direct_tools: Vec<String>,
    tools_file: Option<PathBuf>,
    mcp_config: Option<PathBuf>,
    redis_url: Option<String>,
    python: Option<String>,
    tool_timeout: Duration,
    max_output_bytes: usize,
    allow_tools: Vec<String>,
    deny_tools: Vec<String>,
    read_only_tools: bool,
    description_budget: usize,
    lang: Lang,
    state_dir: Option<PathBuf>,
    search_model: Option<PathBuf>,
    learn_shapes: bool,
}

/// What [`RawConfig::runner`] validates.
struct Runner {
    warm_workers: usize,
    memory_mb: u64,
    allow_subprocess: bool,
    runtime_dir: Option<PathBuf>,
    mcp_start_timeout: Duration,
}

/// What [`RawConfig::sandbox`] validates.
struct Sandbox {
    mode: SandboxMode,
    user: SandboxUser,
    read_paths: Vec<PathBuf>,
    uids: Option<crate::sandbox::UidRange>,
    uids_is_default: bool,
    scratch_max_mb: u64,
    scratch_max_files: u64,
}

/// `PTC_SANDBOX_UIDS`: `FIRST:COUNT` or `FIRST-LAST`, `off`, or unset for the default range.
fn parse_sandbox_uids(
    value: Option<String>,
) -> Result<Option<crate::sandbox::UidRange>, ConfigError> {
    use crate::sandbox::uids::DEFAULT_RANGE;
    let Some(value) = non_empty(value) else {
        return Ok(Some(DEFAULT_RANGE));
    };
    if matches!(value.trim(), "off" | "none") {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|e| ConfigError {
        variable: "PTC_SANDBOX_UIDS",
        value: value.clone(),
        expected: format!(
            "FIRST:COUNT or FIRST-LAST, a range of host uids no user has (default \
             {}:{}), or off ({e})",
            DEFAULT_RANGE.first, DEFAULT_RANGE.count
        ),
    })
}

/// What [`RawConfig::sessions`] validates.
struct Sessions {
    dir: Option<PathBuf>,
    ttl: Duration,
    max_mb: u64,
    max_files: u64,
    idle_ttl: Duration,
    artifact_ttl: Duration,
    artifact_max_mb: u64,
}

/// What [`RawConfig::operations`] validates.
struct Operations {
    strict_config: bool,
    metrics_public: bool,
    metrics: bool,
    shutdown_grace: Duration,
    log_format: LogFormat,
    otel_endpoint: Option<String>,
    otel_service: String,
}
