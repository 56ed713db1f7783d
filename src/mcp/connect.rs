//! Connecting to one MCP server: starting it (a stdio child through [`super::stdio`], or a
//! streamable HTTP session through [`super::http`]), rmcp's `initialize` with our client
//! handler, and `tools/list` read page by page into catalog tool definitions, bounded in pages
//! and tools (at a start, and again within [`RELIST_TIMEOUT`] after `tools/list_changed`).
//!
//! Owns the steps of one start and their errors ([`ConnectError`], [`ListError`]: what the log
//! and a server's `/healthz` entry say when one fails). The actor ([`super::server`]) decides
//! when to connect, bounds a start with the hub's start timeout and owns the [`Connection`]
//! once it is made; nothing here retries, holds calls or keeps state. Must not leave a process
//! behind: a stdio server that fails to initialize is given [`STOP_GRACE`] to say why, and its
//! process group is killed when its child is dropped.

use super::HubOptions;
use super::config::{ServerSpec, Transport};
use super::http::Traced;
use super::stdio::{STOP_GRACE, StdioChild, StdioSpec, describe_exit, spawn_stdio};
use crate::catalog::source::{Problem, ToolDef, ToolListError, parse_tool_list};
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{ClientInitializeError, NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceError, ServiceExt};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest JSON-RPC line read from a stdio server: a runaway server cannot make us buffer
/// without bound. (Lines over it are dropped by rmcp, and the call then times out.)
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Pages of `tools/list` followed: a server that always returns a cursor cannot loop us forever.
pub const MAX_TOOL_PAGES: usize = 100;
/// Tools taken from one server: the catalog and the model's prompt stay bounded.
pub const MAX_TOOLS: usize = 1000;
/// Bound on re-listing tools after `notifications/tools/list_changed`: a server that stops
/// answering `tools/list` keeps its last list instead of stalling.
pub const RELIST_TIMEOUT: Duration = Duration::from_secs(20);

/// The rmcp client handler: identifies us, and forwards `tools/list_changed` to the actor.
pub(super) struct Handler {
    tools_changed: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("ptc-sidecar", env!("CARGO_PKG_VERSION")),
        )
        // The version every server we use speaks; newer lifecycles are opt-in.
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        // Capacity 1: a burst of notifications is one re-list.
        let _ = self.tools_changed.try_send(());
    }
}

/// Why a server did not come up (spawn or connect, initialize, list tools).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("did not start within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    /// `exit` says how the process ended, when it did within [`STOP_GRACE`].
    #[error("initialize failed: {source}{}", .exit.as_ref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Initialize {
        // Boxed: rmcp's error is large, and this travels in every `Result` of a start.
        source: Box<ClientInitializeError>,
        exit: Option<String>,
    },
    #[error(transparent)]
    List(#[from] ListError),
}

/// Why listing a server's tools failed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("tools/list failed: {0}")]
    Request(#[from] ServiceError),
    #[error("tools/list did not answer within {} s", RELIST_TIMEOUT.as_secs())]
    Timeout,
    #[error("cannot read its tool list: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Shape(#[from] ToolListError),
}

/// A started, initialized server with its tools listed.
pub(super) struct Connection {
    pub service: RunningService<RoleClient, Handler>,
    pub child: Option<StdioChild>,
    pub tools: Vec<ToolDef>,
    pub problems: Vec<Problem>,
}

pub(super) type Listed = (Vec<ToolDef>, Vec<Problem>);
/// A re-listing of tools under way.
pub(super) type Relist = std::pin::Pin<Box<dyn Future<Output = Result<Listed, ListError>> + Send>>;

pub(super) async fn relist_tools(
    peer: Peer<RoleClient>,
    server: String,
) -> Result<Listed, ListError> {
    tokio::time::timeout(RELIST_TIMEOUT, list_tools(&peer, &server))
        .await
        .unwrap_or(Err(ListError::Timeout))
}

/// Every page of `tools/list`, capped, as catalog tool definitions.
async fn list_tools(peer: &Peer<RoleClient>, server: &str) -> Result<Listed, ListError> {
    let origin = format!("mcp server {server}");
    let mut tools = Vec::new();
    let mut problems = Vec::new();
    let mut cursor = None;
    for page in 0.. {
        if page == MAX_TOOL_PAGES {
            problems.push(Problem {
                origin: origin.clone(),
                index: None,
                tool: None,
                message: format!(
                    "tools/list has more than {MAX_TOOL_PAGES} pages; the rest are left out"
                ),
                skipped: true,
            });
            break;
        }
        let result = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await?;
        tools.extend(result.tools);
        if tools.len() > MAX_TOOLS {
            tools.truncate(MAX_TOOLS);
            problems.push(Problem {
                origin: origin.clone(),
                index: None,
                tool: None,
                message: format!("lists more than {MAX_TOOLS} tools; the rest are left out"),
                skipped: true,
            });
            break;
        }
        cursor = result.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let value = serde_json::to_value(&tools)?;
    let (defs, more) = parse_tool_list(&origin, &value)?;
    problems.extend(more);
    Ok((defs, problems))
}

/// Starts the server, initializes the session and lists its tools.
pub(super) async fn connect(
    spec: &ServerSpec,
    options: &HubOptions,
    tools_changed: mpsc::Sender<()>,
) -> Result<Connection, ConnectError> {
    let handler = Handler { tools_changed };
    let (service, child) = match &spec.transport {
        Transport::Stdio { command, args, env } => {
            let stdio = StdioSpec {
                server: &spec.name,
                command,
                args,
                env,
            };
            let (child, stdout, stdin) =
                spawn_stdio(&stdio, options)
                    .await
                    .map_err(|source| ConnectError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
            let transport =
                AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
            match handler.serve(transport).await {
                Ok(service) => (service, Some(child)),
                Err(source) => {
                    // Give the process a moment to finish printing why it failed.
                    let mut child = child;
                    let status = tokio::time::timeout(STOP_GRACE, child.process.wait()).await;
                    child.log_tail(&spec.name);
                    return Err(ConnectError::Initialize {
                        source: Box::new(source),
                        exit: status.ok().map(describe_exit),
                    });
                }
            }
        }
        Transport::Http { url, headers } => {
            let mut map = HashMap::new();
            for (k, v) in headers {
                // Checked when the config was read; a failure here is skipped, not fatal.
                if let (Ok(k), Ok(v)) = (
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                    reqwest::header::HeaderValue::from_str(v),
                ) {
                    map.insert(k, v);
                }
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
            let transport =
                StreamableHttpClientTransport::with_client(Traced(options.http.clone()), config);
            let service =
                handler
                    .serve(transport)
                    .await
                    .map_err(|source| ConnectError::Initialize {
                        source: Box::new(source),
                        exit: None,
                    })?;
            (service, None)
        }
    };
    // A catalog must reflect the server exactly, not a cached page.
    service
        .peer()
        .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    let (tools, problems) = list_tools(service.peer(), &spec.name).await?;
    Ok(Connection {
        service,
        child,
        tools,
        problems,
    })
}
