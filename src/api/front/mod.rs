//! The MCP front door: the sidecar as an MCP server, so that any MCP host (Claude Code,
//! Claude Desktop, Cursor, Codex, goose, LibreChat's MCP client) gets programmatic tool calling
//! with one config line. `ptc-sidecar mcp` serves it on stdio ([`serve_stdio`]); `ptc-sidecar
//! serve` at `/mcp` over streamable HTTP ([`router`], behind the control API's key and an
//! `Origin` check).
//!
//! One tool, `exec_code`, with exactly the description `GET /v1/tools` gives; a call runs the
//! code as `POST /v1/exec_code` does ([`ExecDoor`]) and answers with what the code printed,
//! the images it saved, links to its other files (readable with `resources/read`) and the
//! whole run result as structured content. Each MCP session has a live session of its own
//! (state across calls), ended with it; a host of the 2026-07-28 revision, which has no
//! sessions, passes back the `session_id` a result names. Output reaches a host that asked for
//! progress as `notifications/progress` while the run goes on; `notifications/cancelled` stops
//! the run. A catalog change sends `notifications/tools/list_changed`.
//!
//! Owns the MCP shape of a run (`content`); what a run is and does is the runner's, how files
//! are kept the session store's. It must not speak HTTP itself (rmcp's transports do).

mod args;
mod ask;
mod content;
mod rounds;

use super::exec::{Asked, ExecDoor};
use super::state::AppState;
use crate::catalog::{Class, Origin};
use crate::render::Snapshot;
use crate::render::llm::EXEC_CODE;
use crate::run::OutputChunk;
use crate::session::Sessions;
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{
    NotificationContext, RequestContext, RoleServer, SubscriptionContext, SubscriptionSink,
};
use rmcp::{Peer, ServerHandler};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use content::FILE_SCHEME;

/// What the `exec_code` input adds for a host of the 2026-07-28 revision (no MCP sessions).
/// Why a host tool is not in the front door's catalog.
const NO_CALLBACK: &str = "a host tool without a callback URL: the MCP front door has no host to \
send its calls to (give PTC_TOOLS_FILE a callback)";

/// The current catalog less the host tools only the attached or continuation protocols can
/// answer, with the fingerprint of the catalog it was made from.
type OwnCatalog = Option<(u64, Arc<Snapshot>)>;

/// What every MCP session of one door shares: its catalog, when it is not the sidecar's.
#[derive(Clone, Default)]
pub struct Shared {
    own: Arc<Mutex<OwnCatalog>>,
    /// The runs of 2026-07-28 hosts between two rounds (approvals).
    held: rounds::Held,
}

/// The MCP server of one MCP session (one stdio connection, or one streamable HTTP session).
pub struct Front {
    state: AppState,
    shared: Shared,
    door: ExecDoor,
    /// This MCP session's live session: its runs share their globals and files.
    session: String,
    /// Whether a run used [`session`](Self::session) (it is removed with the MCP session).
    used: std::sync::atomic::AtomicBool,
    /// The host, once it is initialized (the handshake revisions): told when the tool list
    /// changes.
    peer: Arc<Mutex<Option<Peer<RoleServer>>>>,
    /// The `subscriptions/listen` streams of a 2026-07-28 host that asked for tool-list
    /// changes: told instead.
    listeners: Arc<Mutex<Vec<SubscriptionSink>>>,
    /// Ends the watch for catalog changes with this session.
    gone: CancellationToken,
}

impl Front {
    /// The server of one MCP session; `None` when PTC is off (no runner).
    pub fn new(state: AppState, shared: Shared) -> Option<Front> {
        let door = ExecDoor {
            runner: state.runner.clone()?,
            sessions: state.sessions.clone()?,
            artifacts: state.artifacts.clone()?,
        };
        let front = Front {
            session: format!("mcp-{}", Sessions::new_id()),
            used: Default::default(),
            peer: Arc::default(),
            listeners: Arc::default(),
            gone: CancellationToken::new(),
            state,
            shared,
            door,
        };
        front.watch_catalog();
        Some(front)
    }

    /// Tells the host each time the catalog changes (a reload), once it is initialized.
    fn watch_catalog(&self) {
        let mut changes = self.state.snapshot.clone();
        changes.borrow_and_update();
        let (peer, gone) = (self.peer.clone(), self.gone.clone());
        let listeners = self.listeners.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = gone.cancelled() => return,
                    changed = changes.changed() => if changed.is_err() { return },
                }
                let host = crate::util::lock(&peer).clone();
                if let Some(host) = host
                    && let Err(e) = host.notify_tool_list_changed().await
                {
                    tracing::debug!("MCP front door: cannot send tools/list_changed: {e}");
                }
                let sinks = crate::util::lock(&listeners).clone();
                for sink in sinks {
                    if let Err(e) = sink.notify_tool_list_changed().await {
                        tracing::debug!("MCP front door: cannot send tools/list_changed: {e}");
                    }
                }
            }
        });
    }

    /// `exec_code` as this door offers it: the description `GET /v1/tools` gives, and the
    /// input of `POST /v1/exec_code`'s tool with a `lang` and a `session_id`.
    fn tool(&self) -> Tool {
        let (snapshot, _) = self.catalog();
        let lang = self.state.config.lang;
        let schema = args::input_schema(self.state.config.timeout, lang);
        Tool::new(
            EXEC_CODE,
            snapshot.rendered_in(lang).description.clone(),
            Arc::new(schema),
        )
    }

    /// The catalog this door offers: the sidecar's, or when it has host tools that only the
    /// attached or continuation protocols can answer, the same without them (made once per
    /// catalog, said once in the log; its runs start cold). The flag says which.
    fn catalog(&self) -> (Arc<Snapshot>, bool) {
        let current = self.state.current();
        let catalog = &current.catalog;
        let unanswerable =
            |t: &crate::catalog::Tool| t.class == Class::Ptc && t.origin == Origin::Host;
        if catalog.callback.is_some() || !catalog.tools().iter().any(unanswerable) {
            return (current, false);
        }
        let mut own = crate::util::lock(&self.shared.own);
        if let Some((fingerprint, snapshot)) = &*own
            && *fingerprint == catalog.fingerprint
        {
            return (snapshot.clone(), true);
        }
        let left: Vec<&str> = catalog
            .tools()
            .iter()
            .filter(|t| unanswerable(t))
            .map(|t| t.name.as_str())
            .collect();
        tracing::warn!(
            tools = %crate::util::cut(&left.join(", "), 1000),
            "the MCP front door leaves out {} host tools: {NO_CALLBACK}",
            left.len()
        );
        let snapshot = Arc::new(Snapshot::new(catalog.without(unanswerable, NO_CALLBACK)));
        *own = Some((catalog.fingerprint, snapshot.clone()));
        (snapshot, true)
    }

    /// One call of `exec_code`: the run, its output as progress when asked, stopped when the
    /// host cancels it.
    async fn exec(
        &self,
        call: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A host of the 2026-07-28 revision has no MCP session to end this one with: the
        // session it was given lives on (until PTC_SESSION_IDLE_TTL), for it to pass back.
        let stateless = context
            .meta
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        let runner = &self.door.runner;
        // Its next round: the answers to the calls that waited for a person.
        if let (true, Some(state)) = (stateless, call.request_state.as_deref()) {
            let paused = self
                .shared
                .held
                .resume(state, call.input_responses, runner)?;
            return self
                .shared
                .held
                .next_round(paused, runner, &context.ct)
                .await;
        }
        let config = &self.state.config;
        let args = args::Args::parse(call.arguments, config.timeout, config.lang)?;
        let session = match args.session_id {
            Some(id) => id,
            None => {
                if !stateless {
                    self.used.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                self.session.clone()
            }
        };
        let asked = Asked {
            code: args.code,
            lang: args.lang,
            timeout: args.timeout,
            session_id: Some(session),
            reset: false,
            traceparent: context.meta.get_traceparent().map(str::to_string),
            snapshot: match self.catalog() {
                (snapshot, true) => Some(snapshot),
                (_, false) => None,
            },
        };
        let (mut request, held) = self
            .door
            .request(asked)
            .await
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let progress = context.meta.get_progress_token().map(|token| {
            let (tx, rx) = mpsc::unbounded_channel();
            request.output = Some(tx);
            tokio::spawn(forward_progress(rx, token, context.peer.clone()))
        });
        // Its calls that wait for a person: the host is asked (elicitation, or an
        // input-required result for a 2026-07-28 host), or they are denied saying why.
        let (asker, asked) = mpsc::unbounded_channel();
        request.asker = Some(asker);
        let elicits = ask::elicits(&context, stateless);
        if stateless && elicits {
            let cancel = CancellationToken::new();
            request.cancel = Some(cancel.clone());
            let (done, result) = tokio::sync::oneshot::channel();
            let door = self.door.clone();
            tokio::spawn(async move {
                let _ = done.send(door.finish(request, held).await);
            });
            let timeout = args.timeout.unwrap_or(self.state.config.timeout);
            let expires = rounds::hold_for(runner, timeout);
            let paused = rounds::Paused {
                result,
                asked,
                cancel,
                expires,
            };
            return self
                .shared
                .held
                .next_round(paused, runner, &context.ct)
                .await;
        }
        // The host's notifications/cancelled stops the run: its process group killed, what
        // it printed kept in its result and events (status error), the session's state gone.
        request.cancel = Some(context.ct.clone());
        let peer = context.peer.clone();
        let asking = tokio::spawn(ask::ask_the_host(asked, peer, runner.clone(), elicits));
        let result = self.door.finish(request, held).await;
        asking.abort();
        if let Some(progress) = progress {
            let _ = progress.await;
        }
        if context.ct.is_cancelled() {
            return Err(ErrorData::internal_error("the run was cancelled", None));
        }
        Ok(content::result(&result).into())
    }
}

impl Drop for Front {
    /// The MCP session is over: its live session (interpreter and files) goes with it.
    fn drop(&mut self) {
        self.gone.cancel();
        if !self.used.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let (runner, sessions, id) = (
            self.door.runner.clone(),
            self.door.sessions.clone(),
            self.session.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn_blocking(move || {
                runner.sessions().remove(&id);
                sessions.remove(&id);
            });
        }
    }
}

/// Sends each piece of a run's output to the host as progress (`message`: the text;
/// `progress`: bytes so far), until the run's output ends.
async fn forward_progress(
    mut chunks: mpsc::UnboundedReceiver<OutputChunk>,
    token: rmcp::model::ProgressToken,
    peer: Peer<RoleServer>,
) {
    let mut sent = 0usize;
    while let Some(chunk) = chunks.recv().await {
        let text = match chunk {
            OutputChunk::Stdout(t) | OutputChunk::Stderr(t) => t,
        };
        sent += text.len();
        let note = ProgressNotificationParam::new(token.clone(), sent as f64).with_message(text);
        if peer.notify_progress(note).await.is_err() {
            return;
        }
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "ptc-sidecar",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Run Python that calls this agent's tools with exec_code: its description lists \
             them. Only what the code prints comes back.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        *crate::util::lock(&self.peer) = Some(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    /// A 2026-07-28 host's `subscriptions/listen`: told of tool-list changes until it closes
    /// the stream or the session ends.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let id = context.sink().id().clone();
        let wants_tools = context.accepted().tools_list_changed == Some(true);
        if wants_tools {
            crate::util::lock(&self.listeners).push(context.sink().clone());
        }
        tokio::select! {
            () = context.cancelled() => {}
            () = self.gone.cancelled() => {}
        }
        crate::util::lock(&self.listeners).retain(|sink| sink.id() != &id);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == EXEC_CODE).then(|| self.tool())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != EXEC_CODE {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool {:?}: this server has one tool, exec_code; the others are called \
                     from its code",
                    request.name
                ),
                None,
            ));
        }
        self.exec(request, context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        content::read(&request.uri, &self.door)
            .await
            .map(Into::into)
    }
}

/// `ptc-sidecar mcp`: the front door on stdin and stdout until the host closes stdin.
pub async fn serve_stdio(state: AppState) -> Result<(), rmcp::service::ServerInitializeError> {
    use rmcp::ServiceExt;
    let Some(front) = Front::new(state, Shared::default()) else {
        tracing::error!("PTC is off: the MCP front door has no exec_code to offer");
        return Ok(());
    };
    let service = match front.serve((tokio::io::stdin(), tokio::io::stdout())).await {
        Ok(service) => service,
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let _ = service.waiting().await;
    Ok(())
}

/// `/mcp`: the front door over streamable HTTP, one [`Front`] per MCP session. Behind the
/// control API's key (the caller's `require_key` layer) and an `Origin` check: a browser page
/// of another origin must not reach a local server (the MCP spec's rule against DNS
/// rebinding), so a request whose `Origin` is not a loopback one is refused. Where the API
/// listens beyond loopback (with a key) any `Host` is taken.
pub fn router<S: Clone + Send + Sync + 'static>(state: AppState) -> axum::Router<S> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let mut config = StreamableHttpServerConfig::default();
    let loopback = match &state.config.listen {
        crate::config::Listen::Tcp(addr) => addr.ip().is_loopback(),
        crate::config::Listen::Unix(_) => true,
    };
    if !loopback {
        config = config.disable_allowed_hosts();
    }
    let shared = Shared::default();
    let service = StreamableHttpService::new(
        move || {
            Front::new(state.clone(), shared.clone())
                .ok_or_else(|| std::io::Error::other("PTC is off: there is no exec_code"))
        },
        LocalSessionManager::default().into(),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(ended_session))
        .layer(axum::middleware::from_fn(local_origin_only))
}

/// rmcp answers a `DELETE` that ended a session with 202; the session is gone by then, and
/// hosts (the Python SDK) take 200 or 204 as success: 204.
async fn ended_session(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
    }
    response
}

/// Refuses a request whose `Origin` is not a loopback origin (403, saying why).
async fn local_origin_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let origin = request
        .headers()
        .get(axum::http::header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("").to_string());
    match origin {
        Some(origin) if !is_local_origin(&origin) => super::ApiError::Forbidden(format!(
            "Origin {:?} is not a local one: /mcp answers hosts on this machine (no Origin, or \
             http(s)://localhost, 127.0.0.1 or [::1])",
            crate::util::cut(&origin, 200)
        ))
        .into_response(),
        _ => next.run(request).await,
    }
}

/// `http(s)://localhost`, `127.x.y.z` or `[::1]`, any port.
fn is_local_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => rest.split(':').next().unwrap_or(""),
    };
    host == "localhost"
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_origins_are_local() {
        for ok in [
            "http://localhost",
            "http://localhost:5173",
            "https://127.0.0.1:8443",
            "http://127.9.9.9",
            "http://[::1]:3000",
        ] {
            assert!(is_local_origin(ok), "{ok}");
        }
        for no in [
            "null",
            "http://example.com",
            "http://localhost.example.com",
            "http://127.0.0.1.example.com",
            "file://",
            "http://[::2]",
            "ftp://localhost",
        ] {
            assert!(!is_local_origin(no), "{no}");
        }
    }
}
