//! The value parsers of [`super::RawConfig::validate`]: one per form a variable takes (a
//! boolean, a bounded number, a list, an address, a URL, a user), each failing with a
//! [`ConfigError`] that names the variable and the form it accepts.
//!
//! Pure functions of the strings given; only [`default_agent_id`] reads a file (the hostname).

use super::{ConfigError, Listen, SandboxMode, SandboxUser};
use crate::util::redact_urls;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Longest `PTC_TIMEOUT`: a day. Longer runs belong in a job system, not a tool call.
const MAX_TIMEOUT_SECS: u64 = 86_400;

pub(super) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

pub(super) fn parse_bool(
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

pub(super) fn parse_range(
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

pub(super) fn parse_secs(
    variable: &'static str,
    value: Option<String>,
    default: u64,
) -> Result<Duration, ConfigError> {
    parse_range(variable, value, default, (1, MAX_TIMEOUT_SECS)).map(Duration::from_secs)
}

pub(super) fn parse_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn parse_globs(
    variable: &'static str,
    value: Option<String>,
) -> Result<Vec<String>, ConfigError> {
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

pub(super) fn parse_listen(value: &str) -> Result<Listen, ConfigError> {
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

pub(super) fn listen_error(value: &str) -> ConfigError {
    ConfigError {
        variable: "PTC_LISTEN",
        value: value.into(),
        expected: "HOST:PORT with a numeric IP (127.0.0.1:7400, [::1]:7400) or unix:/path/to.sock"
            .into(),
    }
}

pub(super) fn parse_redis_url(value: Option<String>) -> Result<Option<String>, ConfigError> {
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
            // The message reaches the terminal and the log; the password stays out of it.
            value: redact_urls(&url),
            expected: "redis://[user:password@]host[:port][/db], rediss://… or unix:///path".into(),
        })
    }
}

pub(super) fn parse_sandbox(value: Option<String>) -> Result<SandboxMode, ConfigError> {
    let Some(value) = non_empty(value) else {
        return Ok(SandboxMode::default());
    };
    value.parse().map_err(|()| ConfigError {
        variable: "PTC_SANDBOX",
        value,
        expected: "strict, best-effort or off".into(),
    })
}

pub(super) fn parse_sandbox_user(value: Option<String>) -> Result<SandboxUser, ConfigError> {
    let Some(value) = non_empty(value) else {
        return Ok(SandboxUser::Default);
    };
    let user = value.trim();
    if user == "none" {
        return Ok(SandboxUser::Sidecar);
    }
    if !user.is_empty() && user.bytes().all(|b| b.is_ascii_digit()) {
        // (uid_t)-1 means "no change" to setuid(2), so it is not a user.
        if let Ok(uid) = user.parse::<u32>()
            && uid != u32::MAX
        {
            return Ok(SandboxUser::Uid(uid));
        }
    } else if user.len() <= 32
        && !user.starts_with('-')
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Ok(SandboxUser::Name(user.to_string()));
    }
    Err(ConfigError {
        variable: "PTC_SANDBOX_USER",
        value,
        expected: "a user name (up to 32 characters from A-Z a-z 0-9 _ - ., not starting with -), \
                   a numeric uid below 4294967295, or none (code runs as the sidecar's own uid)"
            .into(),
    })
}

pub(super) fn parse_read_paths(value: Option<String>) -> Result<Vec<PathBuf>, ConfigError> {
    let paths: Vec<PathBuf> = parse_list(value.as_deref().unwrap_or(""))
        .into_iter()
        .map(PathBuf::from)
        .collect();
    if let Some(relative) = paths.iter().find(|p| !p.is_absolute()) {
        return Err(ConfigError {
            variable: "PTC_SANDBOX_READ_PATHS",
            value: relative.display().to_string(),
            expected: "comma-separated absolute paths (e.g. /usr/share/zoneinfo,/etc/ssl/certs)"
                .into(),
        });
    }
    Ok(paths)
}

pub(super) fn check_agent_id(id: String) -> Result<String, ConfigError> {
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
pub(super) fn default_agent_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .and_then(|h| check_agent_id(h).ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ptc-sidecar".into())
}
