//! Dispatch: one tool call from code, from name to result.
//!
//! Looks the tool up in the run's own catalog snapshot (direct tools and unknown names are
//! refused with the closest names), checks the arguments against the tool's input schema
//! before anything leaves the sidecar, enforces the run's call limits and `PTC_TOOL_TIMEOUT`,
//! and routes the call to the tool's backend: the host callback, the run's attached caller, or
//! an MCP server.

use super::approval::{Approvals, Denied};
use super::limits::{Limiter, Refused};
use crate::catalog::source::Callback;
use crate::catalog::{Catalog, Class, Origin, Tool};
use crate::config::Control;
use crate::embed::Embeddings;
use crate::events::Events;
use crate::util::{cut, json_excerpt, lock, redact_urls};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Largest answer read from a host callback: a tool result is data for code, not a download.
pub const MAX_CALLBACK_BYTES: usize = 16 << 20;

/// How long an idle connection to a host callback is kept for the next call, at most (at least
/// half of it, see [`callback_client`]): long enough to carry a run's calls one after another,
/// short enough not to hold sockets a host has dropped, and to give back the fds of a burst.
pub const CALLBACK_POOL_IDLE: Duration = Duration::from_secs(30);

/// Idle connections kept per host callback URL: a burst of gathered calls opens one
/// connection per call in flight, and without a cap all of them stayed open after the burst,
/// past `CALLBACK_POOL_IDLE` (the load bench found 250-300 held 45 s later).
pub const CALLBACK_POOL_MAX_IDLE: usize = 32;

/// Longest tool name looked up: catalog names are far shorter, and a longer one is refused
/// before any lookup (a 6 MB name once cost 8 s of an async worker's CPU per call).
pub const MAX_TOOL_NAME_BYTES: usize = 256;

/// Longest name the closest tool names are suggested for: the edit distance to every tool
/// costs the product of the lengths, and a name longer than this is no typo of a tool's.
pub const MAX_SUGGEST_CHARS: usize = 64;

/// Most of an argument one schema error quotes: enough to recognise the value, never the whole
/// of a big one (a 4 MiB argument quoted into every event once held 723 MiB of the sidecar).
pub const MAX_QUOTED_BYTES: usize = 120;

/// Longest message of one schema error: one that names unexpected keys names every one.
pub const MAX_SCHEMA_ERROR_BYTES: usize = 400;

/// The error a model's code sees for one call (`ToolError` / `ToolInputError` in Python).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The arguments do not match the schema; nothing was dispatched.
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    UnknownTool(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Tool(String),
    #[error("{0}")]
    Timeout(String),
    /// A per-run bound was reached.
    #[error("{0}")]
    Limit(String),
    /// Nothing can reach the tool right now.
    #[error("{0}")]
    Unavailable(String),
    /// A person denied the call, or no one answered in time (`ToolDenied` in Python).
    #[error("{0}")]
    Denied(String),
    /// The tool's limits across runs (`PTC_TOOL_LIMITS`) left no turn within the deadline.
    #[error("{0}")]
    RateLimited(String),
}

impl CallError {
    /// The `error.type` of the wire format.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Input(_) => "input",
            CallError::UnknownTool(_) => "unknown_tool",
            CallError::Tool(_) => "tool",
            CallError::Timeout(_) => "timeout",
            CallError::Limit(_) => "limit",
            CallError::Unavailable(_) => "unavailable",
            CallError::Denied(_) => "denied",
            CallError::RateLimited(_) => "rate_limited",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"type": self.kind(), "message": self.to_string()})
    }
}

impl From<Denied> for CallError {
    fn from(Denied(message): Denied) -> CallError {
        CallError::Denied(message)
    }
}

impl From<Refused> for CallError {
    fn from(refused: Refused) -> CallError {
        match refused {
            Refused::RateLimited(m) => CallError::RateLimited(m),
            Refused::PerRun(m) => CallError::Limit(m),
        }
    }
}

/// A host tool call waiting for an outside answer (attached and continuation protocols).
#[derive(Debug)]
pub struct PendingCall {
    pub id: String,
    pub tool: String,
    pub input: Value,
    pub reply: oneshot::Sender<Result<Value, CallError>>,
}

/// Where an MCP call goes; implemented by the MCP hub.
pub trait McpCaller: Send + Sync {
    /// `traceparent` is the call's span (W3C trace context): the server gets it in the
    /// request's `params._meta.traceparent` (MCP's SEP-414) and, over HTTP, as a header.
    /// `deadline` is when the caller gives up (`PTC_TOOL_TIMEOUT`): a call that finds its
    /// server restarting waits for it only when the restart is due before then.
    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        args: Value,
        traceparent: &'a str,
        deadline: tokio::time::Instant,
    ) -> Pin<Box<dyn Future<Output = Result<Value, CallError>> + Send + 'a>>;
}

/// Compiled argument validators of one catalog snapshot, built on first use.
#[derive(Default)]
pub struct Validators {
    compiled: Mutex<HashMap<String, Option<Arc<jsonschema::Validator>>>>,
}

impl Validators {
    fn get(&self, tool: &Tool) -> Option<Arc<jsonschema::Validator>> {
        let mut map = lock(&self.compiled);
        // The common case, without allocating a key: compiled on an earlier call.
        if let Some(compiled) = map.get(&tool.name) {
            return compiled.clone();
        }
        map.entry(tool.name.clone())
            .or_insert_with(|| match jsonschema::validator_for(&tool.input_schema) {
                Ok(v) => Some(Arc::new(v)),
                Err(e) => {
                    tracing::warn!(tool = %tool.name, "input schema does not compile, arguments pass unchecked: {e}");
                    None
                }
            })
            .clone()
    }
}

/// Checks arguments against a tool's schema; the message says where and what.
pub fn check_args(validators: &Validators, tool: &Tool, args: &Value) -> Result<(), CallError> {
    if !args.is_object() {
        return Err(CallError::Input(format!(
            "{}: arguments must be keyword arguments (a JSON object)",
            tool.python_name
        )));
    }
    let Some(validator) = validators.get(tool) else {
        return Ok(());
    };
    let errors: Vec<String> = validator
        .iter_errors(args)
        .take(5)
        .map(|e| {
            // The value as an excerpt, never the whole argument.
            let quoted = json_excerpt(e.instance(), MAX_QUOTED_BYTES);
            let said = e.masked_with(quoted).to_string();
            let said = cut(&said, MAX_SCHEMA_ERROR_BYTES);
            let at = e.instance_path().to_string();
            if at.is_empty() {
                said.into_owned()
            } else {
                let at = cut(&at, MAX_QUOTED_BYTES);
                format!("{}: {said}", at.trim_start_matches('/').replace('/', "."))
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CallError::Input(format!(
            "{}(): {} (describe(\"{}\") shows the schema)",
            tool.python_name,
            errors.join("; "),
            tool.python_name
        )))
    }
}

/// Finds a PTC tool by the name code sent, or says which names are close. A name over
/// [`MAX_TOOL_NAME_BYTES`] is refused before it is looked up.
pub fn lookup<'c>(catalog: &'c Catalog, name: &str) -> Result<&'c Tool, CallError> {
    if name.len() > MAX_TOOL_NAME_BYTES {
        return Err(CallError::UnknownTool(format!(
            "no tool has a name of {} bytes: tool names are at most {MAX_TOOL_NAME_BYTES} \
             bytes; this one begins {:?}",
            name.len(),
            cut(name, 40)
        )));
    }
    match catalog.get(name).or_else(|| catalog.by_python_name(name)) {
        Some(tool) if tool.class == Class::Ptc => Ok(tool),
        Some(tool) => Err(CallError::UnknownTool(format!(
            "{:?} is a direct tool: the model calls it itself, code cannot",
            tool.name
        ))),
        None => {
            let close = closest(catalog, name);
            let hint = if close.is_empty() {
                String::new()
            } else {
                format!("; closest: {}", close.join(", "))
            };
            Err(CallError::UnknownTool(format!(
                "no tool named {name:?}{hint}"
            )))
        }
    }
}

/// The PTC tools whose names are within an edit distance of about half of `name`, nearest
/// first, at most 3; none for a name over [`MAX_SUGGEST_CHARS`].
pub fn closest(catalog: &Catalog, name: &str) -> Vec<String> {
    nearest(name, catalog.ptc().map(|t| t.python_name.as_str()))
}

/// The `names` within an edit distance of about half of `name` (a `server__tool` name also by
/// its tool part), nearest first, at most 3; none for a name over [`MAX_SUGGEST_CHARS`]. The
/// one rule of every "closest" suggestion.
pub fn nearest<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    if name.chars().nth(MAX_SUGGEST_CHARS).is_some() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, &str)> = names
        .map(|offered| {
            let tail = offered.rsplit("__").next().unwrap_or(offered);
            let d = edit_distance(name, offered).min(edit_distance(name, tail) + 1);
            (d, offered)
        })
        .filter(|(d, _)| *d <= name.len().max(3) / 2 + 1)
        .collect();
    scored.sort();
    scored.dedup();
    scored
        .into_iter()
        .take(3)
        .map(|(_, n)| n.to_string())
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Backends shared by all runs.
#[derive(Clone)]
pub struct Backends {
    pub http: reqwest::Client,
    pub mcp: Option<Arc<dyn McpCaller>>,
    pub tool_timeout: Duration,
    /// Where every run and call is reported (Redis and `GET /v1/events`).
    pub events: Events,
    /// The calls that wait for a person, and those waiting (`PTC_APPROVE_*`).
    pub approvals: Approvals,
    /// The limits per tool (`PTC_TOOL_LIMITS`).
    pub limiter: Arc<Limiter>,
    /// The search model `search_tools` ranks with beside BM25F (`PTC_SEARCH_MODEL`).
    pub embeddings: Option<Embeddings>,
}

impl Backends {
    /// No MCP, no approvals, no limits: `app` sets what the configuration asks for.
    pub fn new(tool_timeout: Duration) -> Backends {
        let events = Events::local("ptc-sidecar");
        Backends {
            http: callback_client(CALLBACK_POOL_IDLE),
            mcp: None,
            tool_timeout,
            approvals: Approvals::new(&Control::default(), events.clone()),
            events,
            limiter: Arc::default(),
            embeddings: None,
        }
    }
}

/// The HTTP client of host callbacks: an idle connection is closed within `idle` of its last
/// call, when no call comes, and at most [`CALLBACK_POOL_MAX_IDLE`] are kept per URL.
pub fn callback_client(idle: Duration) -> reqwest::Client {
    // hyper-util's pool (reqwest 0.13) closes expired idle connections on a timer whose period
    // is the idle timeout itself, started when a connection goes into an empty pool: one that
    // went idle just after a tick was closed at the tick after next, up to twice the timeout
    // later (the load bench found them open 45 s after the load with 30 s). Expired after half
    // of `idle` and checked every half, each is closed between half of `idle` and `idle`.
    #[allow(
        clippy::expect_used,
        reason = "building a client without TLS roots or proxies does not fail"
    )]
    reqwest::Client::builder()
        .no_proxy()
        .pool_idle_timeout(idle / 2)
        .pool_max_idle_per_host(CALLBACK_POOL_MAX_IDLE)
        .build()
        .expect("reqwest client builds")
}

/// Runs one validated call on its backend, by `deadline` (`PTC_TOOL_TIMEOUT` from when the
/// call was let through; a wait for its turn under the tool's limits counts).
#[allow(
    clippy::too_many_arguments,
    reason = "one call's every part, each used once"
)]
pub async fn route(
    backends: &Backends,
    catalog: &Catalog,
    host: Option<&mpsc::Sender<PendingCall>>,
    call_id: &str,
    tool: &Tool,
    args: Value,
    traceparent: &str,
    deadline: tokio::time::Instant,
) -> Result<Value, CallError> {
    let timeout = backends.tool_timeout;
    let call = async {
        match &tool.origin {
            Origin::Mcp { server, tool: t } => match &backends.mcp {
                Some(mcp) => mcp.call(server, t, args, traceparent, deadline).await,
                None => Err(CallError::Unavailable(format!(
                    "MCP server {server:?} is not connected"
                ))),
            },
            Origin::Host => match (&catalog.callback, host) {
                (Some(cb), _) => {
                    callback(
                        &backends.http,
                        cb,
                        call_id,
                        &tool.name,
                        args,
                        Some(traceparent),
                    )
                    .await
                }
                (None, Some(host)) => attached(host, call_id, &tool.name, args).await,
                (None, None) => Err(CallError::Unavailable(format!(
                    "host tool {:?} has no way to run: PTC_TOOLS_FILE names no callback URL \
                     and this run has no attached caller",
                    tool.name
                ))),
            },
        }
    };
    match tokio::time::timeout_at(deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(CallError::Timeout(format!(
            "{} did not answer within {} s (PTC_TOOL_TIMEOUT)",
            tool.python_name,
            timeout.as_secs_f64()
        ))),
    }
}

async fn attached(
    host: &mpsc::Sender<PendingCall>,
    call_id: &str,
    tool: &str,
    input: Value,
) -> Result<Value, CallError> {
    let (reply, answer) = oneshot::channel();
    let pending = PendingCall {
        id: call_id.to_string(),
        tool: tool.to_string(),
        input,
        reply,
    };
    host.send(pending)
        .await
        .map_err(|_| CallError::Unavailable("the attached caller went away".into()))?;
    answer.await.unwrap_or_else(|_| {
        Err(CallError::Unavailable(
            "the attached caller went away".into(),
        ))
    })
}

/// Host protocol 1: POST `{id, tool, input}`, expect `{result}` or `{error}`.
pub async fn callback(
    http: &reqwest::Client,
    cb: &Callback,
    id: &str,
    tool: &str,
    input: Value,
    traceparent: Option<&str>,
) -> Result<Value, CallError> {
    // No timeout of reqwest's own: the caller's PTC_TOOL_TIMEOUT covers the whole call and
    // says so; a second timer of the same length would race it with a vaguer message.
    let mut request = http
        .post(&cb.url)
        .json(&json!({"id": id, "tool": tool, "input": input}));
    for (k, v) in &cb.headers {
        request = request.header(k, v);
    }
    // The call's span, so the host's own tracing joins the run's trace.
    if let Some(tp) = traceparent {
        request = request.header(crate::trace::TRACEPARENT, tp);
    }
    let mut response = request.send().await.map_err(|e| {
        // The code sees this message: a URL's query string or userinfo may be a secret.
        CallError::Unavailable(redact_urls(&format!(
            "host callback {} is unreachable: {}",
            cb.url,
            root_cause(&e)
        )))
    })?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        CallError::Tool(redact_urls(&format!(
            "host callback {} broke off its answer: {}",
            cb.url,
            root_cause(&e)
        )))
    })? {
        if body.len() + chunk.len() > MAX_CALLBACK_BYTES {
            return Err(CallError::Tool(format!(
                "host callback answer for {tool} is over {MAX_CALLBACK_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    let preview = || String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if !status.is_success() {
        return Err(CallError::Tool(format!(
            "host callback answered HTTP {status} for {tool}: {}",
            preview()
        )));
    }
    let answer: Value = serde_json::from_slice(&body).map_err(|_| {
        CallError::Tool(format!(
            "host callback answered something that is not JSON for {tool}: {:?}",
            preview()
        ))
    })?;
    match answer {
        Value::Object(mut obj) if obj.contains_key("error") && !obj["error"].is_null() => {
            Err(host_error(obj.remove("error").unwrap_or_default()))
        }
        Value::Object(mut obj) if obj.contains_key("result") => {
            Ok(obj.remove("result").unwrap_or_default())
        }
        _ => Err(CallError::Tool(format!(
            "host callback answered neither {{\"result\": ...}} nor {{\"error\": ...}} for {tool}: {:?}",
            preview()
        ))),
    }
}

/// A host's `error` for a call, as the call's error: a string, or an object with a `message`
/// (any other value is shown as JSON). The callback, attached and continuation protocols all
/// answer errors this way.
pub fn host_error(error: Value) -> CallError {
    CallError::Tool(match error {
        Value::String(message) => message,
        Value::Object(ref e) => e
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_string),
        other => other.to_string(),
    })
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::ToolDef;
    use crate::catalog::{CatalogInput, Policy};
    use pretty_assertions::assert_eq;

    fn catalog() -> Catalog {
        let def = |name: &str, input_schema: Value| ToolDef {
            name: name.into(),
            title: None,
            description: String::new(),
            input_schema,
            output_schema: None,
            annotations: None,
        };
        let input = CatalogInput {
            host_tools: vec![
                def("get_weather", json!({"type": "object"})),
                def(
                    "count",
                    json!({"type": "object", "properties": {"n": {"type": "integer"}},
                           "additionalProperties": false}),
                ),
            ],
            ..CatalogInput::default()
        };
        let policy = Policy {
            ptc_enabled: true,
            ..Policy::default()
        };
        Catalog::build(input, &policy, 1)
    }

    fn refused(result: Result<&Tool, CallError>) -> CallError {
        match result {
            Ok(tool) => panic!("found {}", tool.name),
            Err(e) => e,
        }
    }

    #[test]
    fn a_long_name_is_refused_before_lookup_and_gets_no_suggestion() {
        let c = catalog();
        assert_eq!(
            refused(lookup(&c, "get_wether")).to_string(),
            "no tool named \"get_wether\"; closest: get_weather"
        );
        // Within the bound but no typo: looked up, nothing suggested.
        let long = "get_weather".repeat(10);
        assert_eq!(
            refused(lookup(&c, &long)).to_string(),
            format!("no tool named {long:?}")
        );
        // Past the bound: refused by its length, 6 MB or 257 bytes alike.
        for len in [MAX_TOOL_NAME_BYTES + 1, 6 << 20] {
            let name = "x".repeat(len);
            let e = refused(lookup(&c, &name));
            assert_eq!(e.kind(), "unknown_tool");
            assert_eq!(
                e.to_string(),
                format!(
                    "no tool has a name of {len} bytes: tool names are at most 256 bytes; this \
                     one begins \"{}… [cut: {} more bytes]\"",
                    "x".repeat(40),
                    len - 40
                )
            );
        }
        assert_eq!(
            closest(&c, &"g".repeat(MAX_SUGGEST_CHARS + 1)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_schema_error_quotes_an_excerpt_of_a_big_argument() {
        let c = catalog();
        let tool = lookup(&c, "count").unwrap();
        let validators = Validators::default();
        let big = "a".repeat(4 << 20);
        let e = check_args(&validators, tool, &json!({"n": big})).unwrap_err();
        let message = e.to_string();
        assert!(message.len() < 1024, "{} bytes", message.len());
        assert_eq!(
            message,
            format!(
                "count(): n: \"{}… [cut: {} more bytes] is not of type \"integer\" \
                 (describe(\"count\") shows the schema)",
                "a".repeat(MAX_QUOTED_BYTES - 1),
                (4 << 20) + 2 - MAX_QUOTED_BYTES
            )
        );
        // Unexpected keys are all named by the validator: the message is cut.
        let mut many = serde_json::Map::new();
        for i in 0..10_000 {
            many.insert(format!("key{i}"), json!(1));
        }
        let e = check_args(&validators, tool, &Value::Object(many)).unwrap_err();
        assert!(e.to_string().len() < 1024, "{e}");
        assert!(e.to_string().contains("more bytes]"), "{e}");
        // A small argument is quoted whole, as before.
        let e = check_args(&validators, tool, &json!({"n": "x"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "count(): n: \"x\" is not of type \"integer\" (describe(\"count\") shows the schema)"
        );
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
