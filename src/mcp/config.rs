//! `PTC_MCP_CONFIG`: the MCP servers to start, in the `{"mcpServers": {...}}` form Claude Desktop
//! and Cursor use.
//!
//! Owns reading and checking that file into [`ServerSpec`]s. Every error names the file, the
//! server and what is wrong, and stops startup; nothing here starts a process or opens a socket.
//!
//! A relative `command` with a `/` in it (`bin/server`, `./run.sh`, `../target/release/x`) is
//! the file's: it is resolved against the directory of the config file, so the file works
//! from any working directory. A bare name (`npx`, `uvx`) is looked up in `PATH` as a shell
//! would. `args` and `env` are passed as written.

use crate::catalog::source::{self, SourceError, kind};
use crate::util::redact_urls;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the sidecar reaches one server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// As the file gives it, a relative path with a `/` joined to the file's directory.
        command: String,
        args: Vec<String>,
        /// The child's whole environment besides `PATH` and `HOME`.
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One enabled server of the config file.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub name: String,
    pub transport: Transport,
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    #[error("PTC_MCP_CONFIG: {0}")]
    File(#[from] SourceError),
    #[error("PTC_MCP_CONFIG {path}: {problem}")]
    Shape { path: PathBuf, problem: ShapeError },
    #[error("PTC_MCP_CONFIG {path}: server {server:?}: {problem}")]
    Server {
        path: PathBuf,
        server: String,
        problem: ServerError,
    },
}

/// What is wrong with the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error(r#""mcpServers" is a JSON {0}, expected an object of servers by name"#)]
    ServersNotObject(&'static str),
    #[error(
        r#"has no "mcpServers"; expected {{"mcpServers": {{"NAME": {{"command": ..., "args": [...]}} or {{"url": ...}}}}}}"#
    )]
    NoServers,
    #[error(r#"is a JSON {0}, expected {{"mcpServers": {{...}}}}"#)]
    NotObject(&'static str),
}

/// What is wrong with one server's entry. URLs are shown without userinfo or query string
/// (they may carry a token), since these messages reach the log and `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Name(#[from] ServerNameError),
    #[error("is a JSON {0}, expected an object with \"command\" or \"url\"")]
    NotObject(&'static str),
    #[error(r#""disabled" is a JSON {0}, expected true or false"#)]
    Disabled(&'static str),
    #[error(r#""type": "sse" (the old HTTP+SSE transport) is not supported; use a streamable HTTP "url""#)]
    Sse,
    #[error(r#"gives both "command" and "url"; give one"#)]
    Both,
    #[error(
        r#"needs "command" (stdio, with optional "args" and "env") or "url" (streamable HTTP, with optional "headers")"#
    )]
    Neither,
    #[error(r#""command" is empty"#)]
    EmptyCommand,
    #[error(r#""command" is a JSON {0}, expected a string"#)]
    Command(&'static str),
    #[error(r#""args" must be an array of strings"#)]
    ArgNotString,
    #[error(r#""args" is a JSON {0}, expected an array of strings"#)]
    Args(&'static str),
    #[error(r#""{key}" must map names to strings"#)]
    MapValue { key: &'static str },
    #[error(r#""{key}" is a JSON {kind}, expected an object of strings"#)]
    Map {
        key: &'static str,
        kind: &'static str,
    },
    #[error(r#""url" {:?} must start with http:// or https://"#, redact_urls(.0))]
    UrlScheme(String),
    #[error(r#""url" is a JSON {0}, expected a string"#)]
    Url(&'static str),
    #[error("header name {0:?} is not a valid HTTP header name")]
    HeaderName(String),
    #[error("header {0:?} has a value that is not valid in HTTP")]
    HeaderValue(String),
    #[error("header {0:?} is set by the MCP transport itself and cannot be configured")]
    ReservedHeader(String),
}

/// A server name that cannot be a tool-name prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "MCP server name {0:?} must be non-empty, use only A-Z a-z 0-9 - _ . and not contain \"__\""
)]
pub struct ServerNameError(pub String);

/// MCP server names become tool-name prefixes (`server__tool`), so they are kept plain.
pub fn check_server_name(name: &str) -> Result<(), ServerNameError> {
    let ok = !name.is_empty()
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ServerNameError(name.to_string()))
    }
}

/// Reads and checks the file (with the same size cap as every tool file).
pub fn read(path: &Path) -> Result<Vec<ServerSpec>, McpConfigError> {
    parse(path, &source::read_json(path)?)
}

/// Checks a parsed config file; servers come back sorted by name, disabled ones left out.
pub fn parse(path: &Path, value: &Value) -> Result<Vec<ServerSpec>, McpConfigError> {
    let shape = |problem: ShapeError| McpConfigError::Shape {
        path: path.to_path_buf(),
        problem,
    };
    let servers = match value {
        Value::Object(obj) => match obj.get("mcpServers") {
            Some(Value::Object(servers)) => servers,
            Some(other) => return Err(shape(ShapeError::ServersNotObject(kind(other)))),
            None => return Err(shape(ShapeError::NoServers)),
        },
        other => return Err(shape(ShapeError::NotObject(kind(other)))),
    };
    let base = config_dir(path);
    let mut specs = Vec::new();
    for (name, entry) in servers {
        let server_err = |problem: ServerError| McpConfigError::Server {
            path: path.to_path_buf(),
            server: name.clone(),
            problem,
        };
        check_server_name(name).map_err(|e| server_err(e.into()))?;
        let Value::Object(entry) = entry else {
            return Err(server_err(ServerError::NotObject(kind(entry))));
        };
        match entry.get("disabled") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => continue,
            Some(other) => return Err(server_err(ServerError::Disabled(kind(other)))),
        }
        let mut transport = parse_transport(entry).map_err(server_err)?;
        if let Transport::Stdio { command, .. } = &mut transport {
            *command = resolve_command(&base, command);
        }
        specs.push(ServerSpec {
            name: name.clone(),
            transport,
        });
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(specs)
}

/// The directory relative commands are resolved against: the config file's, made absolute
/// (the working directory when it cannot be, which only a deleted working directory makes so).
fn config_dir(path: &Path) -> PathBuf {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// `command` as the sidecar starts it: a relative path with a `/` joined to `base` (the config
/// file's directory); an absolute path or a bare name (looked up in `PATH`) as written.
fn resolve_command(base: &Path, command: &str) -> String {
    let path = Path::new(command);
    if path.is_absolute() || !command.contains('/') {
        return command.to_string();
    }
    base.join(path).to_string_lossy().into_owned()
}

fn parse_transport(entry: &Map<String, Value>) -> Result<Transport, ServerError> {
    if let Some(Value::String(t)) = entry.get("type")
        && t == "sse"
    {
        return Err(ServerError::Sse);
    }
    match (entry.get("command"), entry.get("url")) {
        (Some(_), Some(_)) => Err(ServerError::Both),
        (None, None) => Err(ServerError::Neither),
        (Some(command), None) => {
            let command = match command {
                Value::String(c) if !c.trim().is_empty() => c.clone(),
                Value::String(_) => return Err(ServerError::EmptyCommand),
                other => return Err(ServerError::Command(kind(other))),
            };
            let args = match entry.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|a| a.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or(ServerError::ArgNotString)?,
                Some(other) => return Err(ServerError::Args(kind(other))),
            };
            let env = string_map(entry, "env")?;
            Ok(Transport::Stdio { command, args, env })
        }
        (None, Some(url)) => {
            let url = match url {
                Value::String(u) if u.starts_with("http://") || u.starts_with("https://") => {
                    u.clone()
                }
                Value::String(u) => return Err(ServerError::UrlScheme(u.clone())),
                other => return Err(ServerError::Url(kind(other))),
            };
            let headers = string_map(entry, "headers")?;
            for (name, value) in &headers {
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| ServerError::HeaderName(name.clone()))?;
                HeaderValue::from_str(value).map_err(|_| ServerError::HeaderValue(name.clone()))?;
                if ["accept", "mcp-session-id", "last-event-id"]
                    .contains(&name.to_ascii_lowercase().as_str())
                {
                    return Err(ServerError::ReservedHeader(name.clone()));
                }
            }
            Ok(Transport::Http { url, headers })
        }
    }
}

fn string_map(
    entry: &Map<String, Value>,
    key: &'static str,
) -> Result<BTreeMap<String, String>, ServerError> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect::<Option<BTreeMap<_, _>>>()
            .ok_or(ServerError::MapValue { key }),
        Some(other) => Err(ServerError::Map {
            key,
            kind: kind(other),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn parse_value(value: Value) -> Result<Vec<ServerSpec>, McpConfigError> {
        parse(Path::new("mcp.json"), &value)
    }

    #[test]
    fn reads_both_transports_and_skips_disabled() {
        let specs = parse_value(json!({"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"A": "1"}},
            "api": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            "off": {"command": "x", "disabled": true}
        }}))
        .unwrap();
        assert_eq!(
            specs,
            vec![
                ServerSpec {
                    name: "api".into(),
                    transport: Transport::Http {
                        url: "https://example.com/mcp".into(),
                        headers: [("Authorization".to_string(), "Bearer x".to_string())].into(),
                    },
                },
                ServerSpec {
                    name: "fs".into(),
                    transport: Transport::Stdio {
                        command: "npx".into(),
                        args: vec!["-y".into(), "server-filesystem".into(), "/tmp".into()],
                        env: [("A".to_string(), "1".to_string())].into(),
                    },
                },
            ]
        );
    }

    #[test]
    fn relative_commands_are_the_config_files() {
        let file = json!({"mcpServers": {
            "rel": {"command": "../target/release/ptc-demo-mcp"},
            "dot": {"command": "./run.sh", "args": ["data/x.json"]},
            "bare": {"command": "npx"},
            "abs": {"command": "/usr/bin/server"},
        }});
        let commands = |path: &Path| -> Vec<(String, String)> {
            parse(path, &file)
                .unwrap()
                .into_iter()
                .map(|s| match s.transport {
                    Transport::Stdio { command, .. } => (s.name, command),
                    Transport::Http { url, .. } => (s.name, url),
                })
                .collect()
        };
        assert_eq!(
            commands(Path::new("/etc/ptc/mcp.json")),
            [
                ("abs".to_string(), "/usr/bin/server".to_string()),
                ("bare".into(), "npx".into()),
                ("dot".into(), "/etc/ptc/./run.sh".into()),
                (
                    "rel".into(),
                    "/etc/ptc/../target/release/ptc-demo-mcp".into()
                ),
            ]
        );
        // A relative config path: its directory under the working directory, made absolute.
        let cwd = std::env::current_dir().unwrap();
        let rel = commands(Path::new("examples/mcp.json"));
        let want = cwd.join("examples/../target/release/ptc-demo-mcp");
        assert_eq!(rel[3].1, want.to_string_lossy());
        let here = commands(Path::new("mcp.json"));
        assert_eq!(here[2].1, cwd.join("./run.sh").to_string_lossy());
    }

    #[test]
    fn errors_name_the_file_the_server_and_the_fault() {
        let cases = [
            (
                json!([]),
                "PTC_MCP_CONFIG mcp.json: is a JSON array, expected",
            ),
            (json!({}), r#"PTC_MCP_CONFIG mcp.json: has no "mcpServers""#),
            (
                json!({"mcpServers": {"a__b": {"command": "x"}}}),
                r#"server "a__b": MCP server name "a__b" must be non-empty"#,
            ),
            (
                json!({"mcpServers": {"s": {}}}),
                r#"PTC_MCP_CONFIG mcp.json: server "s": needs "command""#,
            ),
            (
                json!({"mcpServers": {"s": {"command": "x", "url": "http://a"}}}),
                r#"server "s": gives both "command" and "url""#,
            ),
            (
                json!({"mcpServers": {"s": {"command": "x", "args": [1]}}}),
                r#"server "s": "args" must be an array of strings"#,
            ),
            (
                json!({"mcpServers": {"s": {"command": "x", "env": {"A": 1}}}}),
                r#"server "s": "env" must map names to strings"#,
            ),
            (
                json!({"mcpServers": {"s": {"url": "ftp://a"}}}),
                r#"server "s": "url" "ftp://a" must start with http://"#,
            ),
            (
                json!({"mcpServers": {"s": {"url": "http://a", "headers": {"Accept": "x"}}}}),
                r#"server "s": header "Accept" is set by the MCP transport"#,
            ),
            (
                json!({"mcpServers": {"s": {"url": "http://a", "type": "sse"}}}),
                r#"server "s": "type": "sse" (the old HTTP+SSE transport) is not supported"#,
            ),
            (
                json!({"mcpServers": {"s": {"command": "x", "disabled": "yes"}}}),
                r#"server "s": "disabled" is a JSON string"#,
            ),
            (
                json!({"mcpServers": {"s": {"url": "ws://u:p@a/mcp?api_key=k"}}}),
                r#"server "s": "url" "ws://a/mcp" must start with http://"#,
            ),
        ];
        for (value, want) in cases {
            let err = parse_value(value.clone()).unwrap_err().to_string();
            assert!(err.contains(want), "{value}: {err}");
        }
    }
}
