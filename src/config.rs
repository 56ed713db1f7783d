//! Configuration: every environment variable of DESIGN.md, read once with envy and validated into
//! the typed [`Config`] the rest of the program uses.
//!
//! Raw strings first, then validation (the ripgrep way), so a bad value stops startup with a
//! message naming the variable and the form it accepts. Nothing else in the program reads the
//! environment.

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
    redis_url: Option<String>,
    ptc_agent_id: Option<String>,
    ptc_python: Option<String>,
    ptc_tool_timeout: Option<String>,
    ptc_max_output_bytes: Option<String>,
    ptc_allow_tools: Option<String>,
    ptc_deny_tools: Option<String>,
    ptc_read_only_tools: Option<String>,
    ptc_events_stream_maxlen: Option<String>,
    ptc_events_bodies: Option<String>,
    ptc_warm_workers: Option<String>,
    ptc_max_runs: Option<String>,
    ptc_memory_mb: Option<String>,
    ptc_allow_subprocess: Option<String>,
    ptc_runtime_dir: Option<String>,
    ptc_mcp_start_timeout: Option<String>,
}

/// Where the control API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
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
    pub redis_url: Option<String>,
    pub agent_id: String,
    pub python: String,
    pub tool_timeout: Duration,
    pub max_output_bytes: usize,
    pub allow_tools: Vec<String>,
    pub deny_tools: Vec<String>,
    pub read_only_tools: bool,
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
}

pub const DEFAULT_DIRECT_TOOLS: &str = "complete,fail,onboarding_handoff";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7400";

/// Longest `PTC_TIMEOUT`: a day. Longer runs belong in a job system, not a tool call.
const MAX_TIMEOUT_SECS: u64 = 86_400;
/// `PTC_MAX_OUTPUT_BYTES` bounds: enough for a traceback, at most 64 MiB held per stream.
const OUTPUT_BYTES_RANGE: (u64, u64) = (1024, 64 * 1024 * 1024);

/// A variable with a value we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: {expected}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub value: String,
    pub expected: String,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads the given variables (tests pass their own instead of mutating the environment).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        // Only our variables: envy would otherwise fail on unrelated non-UTF-8 or odd names.
        let ours = vars.into_iter().filter(|(k, _)| {
            let k = k.to_ascii_uppercase();
            k.starts_with("PTC_") || k == "REDIS_URL"
        });
        let raw: RawConfig = envy::from_iter(ours).map_err(|e| ConfigError {
            variable: "environment",
            value: String::new(),
            expected: e.to_string(),
        })?;
        raw.validate()
    }
}

impl RawConfig {
    pub fn validate(self) -> Result<Config, ConfigError> {
        let api_key = non_empty(self.ptc_api_key);
        let listen = parse_listen(self.ptc_listen.as_deref().unwrap_or(DEFAULT_LISTEN))?;
        if let Listen::Tcp(addr) = &listen
            && !addr.ip().is_loopback()
            && api_key.is_none()
        {
            return Err(ConfigError {
                variable: "PTC_LISTEN",
                value: addr.to_string(),
                expected: "a loopback address (127.0.0.1:PORT, [::1]:PORT) or unix:/path; \
                           listening on other interfaces requires PTC_API_KEY"
                    .into(),
            });
        }
        let agent_id = match non_empty(self.ptc_agent_id) {
            Some(id) => check_agent_id(id)?,
            None => default_agent_id(),
        };
        Ok(Config {
            enabled: parse_bool("PTC_ENABLED", self.ptc_enabled, false)?,
            timeout: parse_secs("PTC_TIMEOUT", self.ptc_timeout, 120)?,
            direct_tools: parse_list(
                self.ptc_direct_tools
                    .as_deref()
                    .unwrap_or(DEFAULT_DIRECT_TOOLS),
            ),
            tools_file: non_empty(self.ptc_tools_file).map(PathBuf::from),
            mcp_config: non_empty(self.ptc_mcp_config).map(PathBuf::from),
            listen,
            api_key,
            redis_url: parse_redis_url(self.redis_url)?,
            agent_id,
            python: non_empty(self.ptc_python).unwrap_or_else(|| "python3".into()),
            tool_timeout: parse_secs("PTC_TOOL_TIMEOUT", self.ptc_tool_timeout, 30)?,
            max_output_bytes: parse_range(
                "PTC_MAX_OUTPUT_BYTES",
                self.ptc_max_output_bytes,
                65_536,
                OUTPUT_BYTES_RANGE,
            )? as usize,
            allow_tools: parse_globs("PTC_ALLOW_TOOLS", self.ptc_allow_tools)?,
            deny_tools: parse_globs("PTC_DENY_TOOLS", self.ptc_deny_tools)?,
            read_only_tools: parse_bool("PTC_READ_ONLY_TOOLS", self.ptc_read_only_tools, false)?,
            events_stream_maxlen: parse_range(
                "PTC_EVENTS_STREAM_MAXLEN",
                self.ptc_events_stream_maxlen,
                10_000,
                (1, 100_000_000),
            )? as usize,
            events_bodies: parse_bool("PTC_EVENTS_BODIES", self.ptc_events_bodies, false)?,
            warm_workers: parse_range("PTC_WARM_WORKERS", self.ptc_warm_workers, 2, (0, 64))?
                as usize,
            max_runs: parse_range("PTC_MAX_RUNS", self.ptc_max_runs, 32, (1, 4096))? as usize,
            memory_mb: parse_range("PTC_MEMORY_MB", self.ptc_memory_mb, 2048, (64, 1 << 20))?,
            allow_subprocess: parse_bool("PTC_ALLOW_SUBPROCESS", self.ptc_allow_subprocess, false)?,
            runtime_dir: non_empty(self.ptc_runtime_dir).map(PathBuf::from),
            mcp_start_timeout: parse_range(
                "PTC_MCP_START_TIMEOUT",
                self.ptc_mcp_start_timeout,
                20,
                (1, 600),
            )
            .map(Duration::from_secs)?,
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        // The empty environment always validates.
        RawConfig::default().validate().expect("defaults are valid")
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

fn parse_bool(
    variable: &'static str,
    value: Option<String>,
    default: bool,
) -> Result<bool, ConfigError> {
    let Some(value) = non_empty(value) else {
        return Ok(default);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(ConfigError {
            variable,
            value,
            expected: "true or false (also 1/0, yes/no, on/off)".into(),
        }),
    }
}

fn parse_range(
    variable: &'static str,
    value: Option<String>,
    default: u64,
    (min, max): (u64, u64),
) -> Result<u64, ConfigError> {
    let Some(value) = non_empty(value) else {
        return Ok(default);
    };
    match value.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ConfigError {
            variable,
            value,
            expected: format!("a whole number from {min} to {max}"),
        }),
    }
}

fn parse_secs(
    variable: &'static str,
    value: Option<String>,
    default: u64,
) -> Result<Duration, ConfigError> {
    parse_range(variable, value, default, (1, MAX_TIMEOUT_SECS)).map(Duration::from_secs)
}

fn parse_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn parse_globs(variable: &'static str, value: Option<String>) -> Result<Vec<String>, ConfigError> {
    let patterns = parse_list(value.as_deref().unwrap_or(""));
    if let Some(bad) = patterns.iter().find(|p| p.chars().any(char::is_whitespace)) {
        return Err(ConfigError {
            variable,
            value: bad.clone(),
            expected: "comma-separated tool name patterns using * and ? (e.g. github__*,read_*)"
                .into(),
        });
    }
    Ok(patterns)
}

fn parse_listen(value: &str) -> Result<Listen, ConfigError> {
    let value = value.trim();
    if let Some(path) = value.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(listen_error(value));
        }
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    value
        .parse::<SocketAddr>()
        .map(Listen::Tcp)
        .map_err(|_| listen_error(value))
}

fn listen_error(value: &str) -> ConfigError {
    ConfigError {
        variable: "PTC_LISTEN",
        value: value.into(),
        expected: "HOST:PORT with a numeric IP (127.0.0.1:7400, [::1]:7400) or unix:/path/to.sock"
            .into(),
    }
}

fn parse_redis_url(value: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(url) = non_empty(value) else {
        return Ok(None);
    };
    let ok = ["redis://", "rediss://", "redis+unix://", "unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme) && url.len() > scheme.len());
    if ok {
        Ok(Some(url))
    } else {
        Err(ConfigError {
            variable: "REDIS_URL",
            value: url,
            expected: "redis://[user:password@]host[:port][/db], rediss://… or unix:///path".into(),
        })
    }
}

fn check_agent_id(id: String) -> Result<String, ConfigError> {
    let ok = id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok {
        Ok(id)
    } else {
        Err(ConfigError {
            variable: "PTC_AGENT_ID",
            value: id,
            expected: "up to 128 characters from A-Z a-z 0-9 - _ . : (it names Redis keys)".into(),
        })
    }
}

/// The hostname, as DESIGN.md says; in a pod that is the pod name.
fn default_agent_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .and_then(|h| check_agent_id(h).ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ptc-sidecar".into())
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
        assert!(c.api_key.is_none() && c.redis_url.is_none());
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
        ])
        .unwrap();
        assert!(c.enabled);
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
                ("PTC_DENY_TOOLS", "a b"),
                "PTC_DENY_TOOLS=\"a b\" is not valid: comma-separated",
            ),
        ];
        for ((k, v), want) in cases {
            let err = config(&[(k, v)]).unwrap_err().to_string();
            assert!(err.starts_with(want), "{k}={v}: {err}");
        }
    }

    #[test]
    fn public_listen_is_allowed_with_a_key() {
        let c = config(&[("PTC_LISTEN", "0.0.0.0:7400"), ("PTC_API_KEY", "s3cret")]).unwrap();
        assert_eq!(c.listen, Listen::Tcp("0.0.0.0:7400".parse().unwrap()));
    }
}
