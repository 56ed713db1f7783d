//! `ptc-demo-mcp`: a small MCP server over stdio (or streamable HTTP with `--http ADDR`), built
//! with rmcp's server side.
//!
//! It exists so that the sidecar's tests, benchmark and README have a real MCP server whose
//! answers a reader can predict: a lookup over a bundled table, arithmetic, a slow tool, a
//! failing tool, a tool with an `outputSchema`, a no-op for benchmarks, a tool that reports the trace
//! context its call carried, and a pair of tools that change the tool list at runtime to exercise
//! `notifications/tools/list_changed`.
//!
//! Over stdio, stdout carries the protocol and nothing else: logs go to stderr (`RUST_LOG` filters them).
//! The process exits with status 0 soon after stdin closes, even with calls in flight. It must
//! not grow features the sidecar does not test; it is a fixture, not a product. One flag is a
//! fault on purpose: `--crash-every N` exits on the Nth `tools/call`, for the restart tests.

use std::{
    num::{NonZeroU64, NonZeroUsize},
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use clap::Parser;
use rmcp::{
    ErrorData, Json, Peer, RoleServer, ServerHandler, ServiceExt,
    handler::server::{
        tool::{ToolCallContext, ToolRouter},
        wrapper::Parameters,
    },
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Extensions,
        Implementation, ListToolsResult, PaginatedRequestParams, RequestMetaObject,
        ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
    },
    schemars::JsonSchema,
    service::{RequestContext, SubscriptionContext, SubscriptionSink},
    tool, tool_router,
    transport::stdio_pipes,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// Upper bound of `slow(ms)`: a typo like `slow(ms=6000000)` must not park a test for hours.
const MAX_SLOW_MS: u64 = 60_000;

/// How many valid codes an unknown-code error lists: enough to show the format, short enough to
/// read in one line.
const CODES_IN_ERROR: usize = 5;

/// The tool that `toggle_extra` adds and removes.
const EXTRA_TOOL: &str = "extra_echo";

/// How the process exits for `--crash-every`: EX_SOFTWARE, distinct from a clean exit (0) and
/// from a failure to start (1).
const CRASH_EXIT_CODE: i32 = 70;

/// Default log filter when `RUST_LOG` is unset: our own start and stop lines, rmcp's warnings.
const DEFAULT_LOG_FILTER: &str = "ptc_demo_mcp=info,rmcp=warn";

#[derive(Debug, Parser)]
#[command(
    name = "ptc-demo-mcp",
    version,
    about = "Demo MCP server over stdio (lookup, arithmetic, slow, fail, stats, noop)"
)]
struct Cli {
    /// Serve tools/list in pages of this many tools (default: one page), to exercise client
    /// pagination.
    #[arg(long)]
    page_size: Option<NonZeroUsize>,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (port 0 picks a free port).
    /// The address is printed on stdout as `listening on http://ADDR/mcp`; the server stops
    /// when stdin closes, as over stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// List the tools in reverse order, to show the sidecar's description does not depend on
    /// the order a server lists its tools in.
    #[arg(long)]
    reverse_tools: bool,
    /// Exit abruptly (status 70, the call unanswered) on the Nth tools/call of this process, as
    /// a crashing server would; a restarted process counts from zero again. A fault for the
    /// sidecar's restart tests.
    #[arg(long, value_name = "N")]
    crash_every: Option<NonZeroU64>,
}

/// What the command line asks of the server; over HTTP every session's server shares it, so
/// `calls` counts the whole process.
#[derive(Clone)]
struct Options {
    page_size: Option<NonZeroUsize>,
    reverse_tools: bool,
    crash_every: Option<NonZeroU64>,
    /// tools/call requests this process has taken.
    calls: Arc<AtomicU64>,
}

impl Options {
    fn from_cli(cli: &Cli) -> Options {
        Options {
            page_size: cli.page_size,
            reverse_tools: cli.reverse_tools,
            crash_every: cli.crash_every,
            calls: Arc::default(),
        }
    }
}

/// One row of the bundled country table.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Country {
    /// ISO 3166-1 alpha-2 code.
    code: &'static str,
    name: &'static str,
    capital: &'static str,
    /// Approximate population, rounded.
    population: u64,
    continent: &'static str,
}

/// A demo table, sorted by code. Populations are rounded recent estimates, not reference data.
const COUNTRIES: [Country; 20] = [
    country(
        "AR",
        "Argentina",
        "Buenos Aires",
        45_800_000,
        "South America",
    ),
    country("AU", "Australia", "Canberra", 26_600_000, "Oceania"),
    country("BR", "Brazil", "Brasília", 203_100_000, "South America"),
    country("CA", "Canada", "Ottawa", 40_100_000, "North America"),
    country("CN", "China", "Beijing", 1_409_700_000, "Asia"),
    country("DE", "Germany", "Berlin", 84_400_000, "Europe"),
    country("EG", "Egypt", "Cairo", 105_900_000, "Africa"),
    country("ES", "Spain", "Madrid", 48_600_000, "Europe"),
    country("FR", "France", "Paris", 68_400_000, "Europe"),
    country("GB", "United Kingdom", "London", 68_300_000, "Europe"),
    country("IN", "India", "New Delhi", 1_438_100_000, "Asia"),
    country("IT", "Italy", "Rome", 59_000_000, "Europe"),
    country("JP", "Japan", "Tokyo", 124_500_000, "Asia"),
    country("KE", "Kenya", "Nairobi", 55_100_000, "Africa"),
    country("MX", "Mexico", "Mexico City", 129_700_000, "North America"),
    country("NG", "Nigeria", "Abuja", 227_900_000, "Africa"),
    country("NZ", "New Zealand", "Wellington", 5_300_000, "Oceania"),
    country("SE", "Sweden", "Stockholm", 10_550_000, "Europe"),
    country(
        "US",
        "United States",
        "Washington, D.C.",
        334_900_000,
        "North America",
    ),
    country("ZA", "South Africa", "Pretoria", 62_000_000, "Africa"),
];

const fn country(
    code: &'static str,
    name: &'static str,
    capital: &'static str,
    population: u64,
    continent: &'static str,
) -> Country {
    Country {
        code,
        name,
        capital,
        population,
        continent,
    }
}

/// Case-insensitive lookup; surrounding whitespace is ignored.
fn find_country(code: &str) -> Option<Country> {
    let code = code.trim();
    COUNTRIES
        .iter()
        .find(|country| country.code.eq_ignore_ascii_case(code))
        .copied()
}

fn unknown_country_message(code: &str) -> String {
    let examples: Vec<&str> = COUNTRIES
        .iter()
        .take(CODES_IN_ERROR)
        .map(|country| country.code)
        .collect();
    format!(
        "unknown country code {code:?}; valid codes include {} (ISO 3166-1 alpha-2, {} in the table)",
        examples.join(", "),
        COUNTRIES.len()
    )
}

/// What `slow(ms)` actually sleeps.
fn slow_duration(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_SLOW_MS))
}

#[derive(Debug, Serialize, JsonSchema, PartialEq)]
#[schemars(crate = "rmcp::schemars")]
struct Stats {
    count: u64,
    sum: f64,
    mean: f64,
    min: f64,
    max: f64,
}

fn compute_stats(numbers: &[f64]) -> Result<Stats, String> {
    if numbers.is_empty() {
        return Err("numbers must not be empty".to_owned());
    }
    let sum: f64 = numbers.iter().sum();
    let min = numbers.iter().copied().fold(f64::INFINITY, f64::min);
    let max = numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let count = numbers.len();
    let stats = Stats {
        count: count as u64,
        sum,
        mean: sum / count as f64,
        min,
        max,
    };
    if !stats.sum.is_finite() {
        return Err("the sum overflows a 64-bit float".to_owned());
    }
    Ok(stats)
}

/// Text of an arithmetic result; JSON cannot carry infinities, so they are a tool error.
fn number_text(value: f64) -> Result<String, String> {
    if value.is_finite() {
        Ok(value.to_string())
    } else {
        Err(format!("the result ({value}) is not a finite number"))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct LookupCountryArgs {
    /// ISO 3166-1 alpha-2 code such as "FR" (case-insensitive).
    code: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct BinaryArgs {
    a: f64,
    b: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct SlowArgs {
    /// Milliseconds to sleep, capped at 60000.
    ms: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct FailArgs {
    /// The error message to return.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct StatsArgs {
    /// The numbers to summarise; at least one.
    numbers: Vec<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct EchoArgs {
    /// The text to return.
    text: String,
}

struct DemoServer {
    /// Every tool, `extra_echo` included; `extra_enabled` decides whether that one is visible.
    tool_router: ToolRouter<Self>,
    extra_enabled: AtomicBool,
    /// Open `subscriptions/listen` streams (protocol 2026-07-28) that asked for tool-list changes.
    subscribers: Mutex<Vec<SubscriptionSink>>,
    options: Options,
    /// Cancelled when stdin reaches EOF. rmcp waits up to 5 s for running handlers after EOF
    /// before it cancels them; long waits select on this so the process exits at once.
    stdin_closed: CancellationToken,
}

#[tool_router]
impl DemoServer {
    #[tool(
        description = "Look up a country by its ISO 3166-1 alpha-2 code. Returns name, capital, population and continent.",
        annotations(read_only_hint = true)
    )]
    fn lookup_country(
        &self,
        Parameters(LookupCountryArgs { code }): Parameters<LookupCountryArgs>,
    ) -> Result<Json<Country>, String> {
        find_country(&code)
            .map(Json)
            .ok_or_else(|| unknown_country_message(&code))
    }

    #[tool(description = "Add two numbers.", annotations(read_only_hint = true))]
    fn add(
        &self,
        Parameters(BinaryArgs { a, b }): Parameters<BinaryArgs>,
    ) -> Result<String, String> {
        number_text(a + b)
    }

    #[tool(
        description = "Multiply two numbers.",
        annotations(read_only_hint = true)
    )]
    fn multiply(
        &self,
        Parameters(BinaryArgs { a, b }): Parameters<BinaryArgs>,
    ) -> Result<String, String> {
        number_text(a * b)
    }

    #[tool(description = "Sleep for ms milliseconds (at most 60000) and report how long it slept.")]
    async fn slow(
        &self,
        Parameters(SlowArgs { ms }): Parameters<SlowArgs>,
        cancelled: CancellationToken,
    ) -> Result<String, String> {
        let duration = slow_duration(ms);
        let started = Instant::now();
        tokio::select! {
            () = tokio::time::sleep(duration) => Ok(format!("slept {} ms", duration.as_millis())),
            // The client gave up (notifications/cancelled) or went away: stop sleeping.
            () = cancelled.cancelled() => {
                tracing::info!(elapsed_ms = started.elapsed().as_millis(), "slow call cancelled");
                Err("cancelled".to_owned())
            }
            () = self.stdin_closed.cancelled() => {
                tracing::info!(elapsed_ms = started.elapsed().as_millis(), "stdin closed during a slow call");
                Err("cancelled: stdin closed".to_owned())
            }
        }
    }

    #[tool(description = "Always fail with the given message (a tool error, isError: true).")]
    fn fail(&self, Parameters(FailArgs { message }): Parameters<FailArgs>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(message)])
    }

    #[tool(
        description = "Summary statistics of a list of numbers: count, sum, mean, min and max.",
        annotations(read_only_hint = true)
    )]
    fn stats(
        &self,
        Parameters(StatsArgs { numbers }): Parameters<StatsArgs>,
    ) -> Result<Json<Stats>, String> {
        compute_stats(&numbers).map(Json)
    }

    #[tool(
        description = "Do nothing and return an empty text result (for benchmarks).",
        annotations(read_only_hint = true)
    )]
    fn noop(&self) -> String {
        String::new()
    }

    #[tool(
        description = "Add the extra_echo tool if it is absent, remove it if present, and send notifications/tools/list_changed.",
        annotations(destructive_hint = true)
    )]
    async fn toggle_extra(&self, peer: Peer<RoleServer>) -> String {
        // fetch_xor returns the previous value.
        let enabled = !self.extra_enabled.fetch_xor(true, Ordering::SeqCst);
        self.notify_tool_list_changed(&peer).await;
        let state = if enabled { "added" } else { "removed" };
        format!("{EXTRA_TOOL} {state}")
    }

    #[tool(
        description = "Return the W3C trace context this call carried, as JSON: its _meta.traceparent and, over HTTP, its traceparent header.",
        annotations(read_only_hint = true)
    )]
    fn trace_context(&self, meta: RequestMetaObject, extensions: Extensions) -> String {
        let header = extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("traceparent"))
            .and_then(|value| value.to_str().ok());
        serde_json::json!({"meta": meta.get_traceparent(), "header": header}).to_string()
    }

    #[tool(
        description = "Return the given text. Listed only after toggle_extra has added it.",
        annotations(read_only_hint = true)
    )]
    fn extra_echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }
}

impl DemoServer {
    fn new(options: Options, stdin_closed: CancellationToken) -> Self {
        Self {
            tool_router: Self::tool_router(),
            extra_enabled: AtomicBool::new(false),
            subscribers: Mutex::new(Vec::new()),
            options,
            stdin_closed,
        }
    }

    fn is_visible(&self, name: &str) -> bool {
        name != EXTRA_TOOL || self.extra_enabled.load(Ordering::SeqCst)
    }

    /// Sorted by name, so pages are stable.
    fn visible_tools(&self) -> Vec<Tool> {
        let mut tools = self.tool_router.list_all();
        tools.retain(|tool| self.is_visible(&tool.name));
        if self.options.reverse_tools {
            tools.reverse();
        }
        tools
    }

    /// A 2026-07-28 client hears about changes on its `subscriptions/listen` stream; an older
    /// client (the `initialize` handshake) gets the plain, unscoped notification.
    async fn notify_tool_list_changed(&self, peer: &Peer<RoleServer>) {
        let subscribers = self.lock_subscribers().clone();
        if subscribers.is_empty() {
            if let Err(error) = peer.notify_tool_list_changed().await {
                tracing::warn!(%error, "could not send tools/list_changed");
            }
            return;
        }
        for sink in subscribers {
            if let Err(error) = sink.notify_tool_list_changed().await {
                tracing::warn!(%error, "could not send tools/list_changed to a subscription");
            }
        }
    }

    fn lock_subscribers(&self) -> std::sync::MutexGuard<'_, Vec<SubscriptionSink>> {
        // A panic while holding this lock leaves a plain Vec behind, which is still usable.
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "ptc-demo-mcp",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions("Demo tools for ptc-sidecar tests and examples.")
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.visible_tools();
        let Some(page_size) = self.options.page_size else {
            return Ok(ListToolsResult::with_all_items(tools));
        };
        // The cursor is the index of the page's first tool, as a decimal string.
        let start = match request.and_then(|params| params.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|start| *start <= tools.len())
                .ok_or_else(|| {
                    ErrorData::invalid_params(format!("invalid cursor {cursor:?}"), None)
                })?,
        };
        let end = start.saturating_add(page_size.get()).min(tools.len());
        let mut page = ListToolsResult::with_all_items(tools[start..end].to_vec());
        page.next_cursor = (end < tools.len()).then(|| end.to_string());
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = self.options.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.options.crash_every.is_some_and(|n| call == n.get()) {
            tracing::warn!(call, tool = %request.name, "crashing, as --crash-every asked");
            std::process::exit(CRASH_EXIT_CODE);
        }
        if !self.is_visible(&request.name) {
            // The same protocol error the router gives any unknown name.
            return Err(ErrorData::invalid_params("tool not found", None));
        }
        self.tool_router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        if !self.is_visible(name) {
            return None;
        }
        self.tool_router.get(name).cloned()
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let id = context.sink().id().clone();
        let wants_tools = context.accepted().tools_list_changed == Some(true);
        if wants_tools {
            self.lock_subscribers().push(context.sink().clone());
        }
        tokio::select! {
            () = context.cancelled() => {}
            () = self.stdin_closed.cancelled() => {}
        }
        if wants_tools {
            self.lock_subscribers().retain(|sink| sink.id() != &id);
        }
        Ok(())
    }
}

/// Stdin that cancels a token when it reads EOF, so tools can tell that the client is gone.
struct EofSignal<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        // A successful read that adds nothing to a buffer with room is EOF.
        if matches!(poll, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            this.eof.cancel();
        }
        poll
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER)),
        )
        // Stdout is the protocol: a log line there would be read as a (broken) message.
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();

    let options = Options::from_cli(&cli);
    if let Some(addr) = cli.http {
        return serve_http(addr, options).await;
    }
    tracing::info!(
        page_size = cli.page_size.map(NonZeroUsize::get),
        "serving MCP on stdio"
    );
    let stdin_closed = CancellationToken::new();
    let (stdin, stdout) = stdio_pipes();
    let stdin = EofSignal {
        inner: stdin,
        eof: stdin_closed.clone(),
    };
    let server = DemoServer::new(options, stdin_closed);
    let service = match server.serve((stdin, stdout)).await {
        Ok(service) => service,
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("stdin closed before initialize, exiting");
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    };
    let reason = service.waiting().await?;
    tracing::info!(?reason, "session ended, exiting");
    Ok(())
}

/// Streamable HTTP at `/mcp`, one `DemoServer` per session, until stdin closes.
async fn serve_http(addr: std::net::SocketAddr, options: Options) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    use tokio::io::AsyncReadExt;

    let stdin_closed = CancellationToken::new();
    let service = {
        let stdin_closed = stdin_closed.clone();
        StreamableHttpService::new(
            move || Ok(DemoServer::new(options.clone(), stdin_closed.clone())),
            LocalSessionManager::default().into(),
            StreamableHttpServerConfig::default(),
        )
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    // Stdout is free in this mode: it tells the caller the port it bound.
    println!("listening on http://{local}/mcp");
    tracing::info!(%local, "serving MCP over streamable HTTP");
    let watch = stdin_closed.clone();
    tokio::spawn(async move {
        let mut sink = [0u8; 256];
        let mut stdin = tokio::io::stdin();
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
        watch.cancel();
    });
    let app = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, app)
        .with_graceful_shutdown(stdin_closed.cancelled_owned())
        .await?;
    tracing::info!("stdin closed, exiting");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_is_capped() {
        assert_eq!(slow_duration(250), Duration::from_millis(250));
        assert_eq!(slow_duration(60_000), Duration::from_millis(60_000));
        assert_eq!(slow_duration(u64::MAX), Duration::from_millis(MAX_SLOW_MS));
    }

    #[test]
    fn table_is_sorted_and_unique() {
        let codes: Vec<&str> = COUNTRIES.iter().map(|country| country.code).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }
}
