//! The demo MCP server (`src/bin/ptc-demo-mcp.rs`) seen through rmcp's client over stdio, the
//! way the sidecar's MCP backend sees it: spawn, initialize, list, call, notifications, death
//! and shutdown.
//!
//! Every test runs under [`TEST_DEADLINE`] and ends by checking that the demo's process group
//! is empty, so a failing test cannot hang the suite or leave a server behind.

// Helpers outside `#[test]` functions fail the test the same way: unwrap/expect are assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    future::Future,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use pretty_assertions::assert_eq;
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ServiceError,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest,
        PaginatedRequestParams, ProtocolVersion, ServerNotification, ServerResult,
        SubscriptionFilter, Tool,
    },
    service::{NotificationContext, PeerRequestOptions, QuitReason, RoleClient, RunningService},
    transport::{ConfigureCommandExt, TokioChildProcess},
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    process::Command,
    sync::mpsc,
};

const DEMO_BIN: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

/// Whole-test bound: a hung server or a lost notification fails the test instead of the suite.
const TEST_DEADLINE: Duration = Duration::from_secs(30);

/// How long we wait for one notification or one exit before calling it lost.
const EVENT_WAIT: Duration = Duration::from_secs(5);

/// How long a process group may take to disappear after its client shut down.
const REAP_WAIT: Duration = Duration::from_secs(5);

const ALL_TOOLS: [&str; 9] = [
    "add",
    "fail",
    "lookup_country",
    "multiply",
    "noop",
    "slow",
    "stats",
    "toggle_extra",
    "trace_context",
];

/// Runs a test body under [`TEST_DEADLINE`].
async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_DEADLINE, body)
        .await
        .expect("test exceeded its deadline");
}

/// A client handler that forwards every unscoped `notifications/tools/list_changed`.
struct Recorder {
    tool_list_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Recorder {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // The receiver lives as long as the test; a send error only means the test is over.
        let _ = self.tool_list_changed.send(());
    }
}

struct Demo {
    client: RunningService<RoleClient, Recorder>,
    /// Process id of the demo, which leads its own process group.
    pid: u32,
    tool_list_changed: mpsc::UnboundedReceiver<()>,
    /// Everything the demo logged so far (its stderr), drained by a background task.
    stderr: Arc<Mutex<String>>,
}

/// The command the sidecar would build: empty environment except PATH and HOME, own process
/// group, SIGKILL if the handle is dropped.
fn demo_command(args: &[&str]) -> Command {
    Command::new(DEMO_BIN).configure(|cmd| {
        cmd.args(args)
            .env_clear()
            .envs(std::env::vars_os().filter(|(key, _)| key == "PATH" || key == "HOME"))
            .process_group(0)
            .kill_on_drop(true);
    })
}

async fn start_demo(args: &[&str], lifecycle: ClientLifecycleMode) -> Demo {
    let (transport, stderr_pipe) = TokioChildProcess::builder(demo_command(args))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the demo server");
    let pid = transport.id().expect("a freshly spawned child has a pid");
    let stderr = Arc::new(Mutex::new(String::new()));
    let stderr_pipe = stderr_pipe.expect("stderr was piped");
    // Drain stderr so a chatty server can never block on a full pipe.
    tokio::spawn({
        let stderr = stderr.clone();
        async move {
            let mut lines = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = stderr.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        }
    });
    let (sender, tool_list_changed) = mpsc::unbounded_channel();
    let client = Recorder {
        tool_list_changed: sender,
    }
    .serve_with_lifecycle(transport, lifecycle)
    .await
    .expect("initialize the demo server");
    Demo {
        client,
        pid,
        tool_list_changed,
        stderr,
    }
}

async fn start_legacy(args: &[&str]) -> Demo {
    start_demo(args, ClientLifecycleMode::Initialize).await
}

impl Demo {
    async fn call(&self, name: &'static str, arguments: Value) -> CallToolResult {
        self.client
            .call_tool(call_params(name, arguments))
            .await
            .unwrap_or_else(|error| panic!("{name} failed at the protocol level: {error}"))
    }

    async fn call_json(&self, name: &'static str, arguments: Value) -> Value {
        serde_json::to_value(self.call(name, arguments).await).expect("results serialise")
    }

    async fn tool_names(&self) -> Vec<String> {
        let tools = self.client.list_all_tools().await.expect("tools/list");
        tools
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect()
    }

    /// Waits until the demo's log holds `needle` `times` times.
    async fn wait_for_log(&self, needle: &str, times: usize) {
        let deadline = Instant::now() + EVENT_WAIT;
        loop {
            let log = self.stderr.lock().unwrap().clone();
            if log.matches(needle).count() >= times {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} x{times} not in the log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn next_tool_list_changed(&mut self) {
        tokio::time::timeout(EVENT_WAIT, self.tool_list_changed.recv())
            .await
            .expect("notifications/tools/list_changed did not arrive")
            .expect("the client handler is alive");
    }

    /// Graceful shutdown: cancel the client, which closes the child's stdin and waits for it.
    async fn stop(self) {
        let Demo { client, pid, .. } = self;
        let reason = client.cancel().await.expect("client task joins");
        assert!(matches!(reason, QuitReason::Cancelled), "{reason:?}");
        assert_group_gone(pid).await;
    }
}

fn call_params(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let params = CallToolRequestParams::new(name);
    match arguments {
        Value::Object(arguments) => params.with_arguments(arguments),
        Value::Null => params,
        other => panic!("tool arguments must be an object, got {other}"),
    }
}

/// Waits until no process is left in the group led by `pgid` (exited and reaped).
async fn assert_group_gone(pgid: u32) {
    let pgid = libc::pid_t::try_from(pgid).expect("pids fit in pid_t");
    let deadline = Instant::now() + REAP_WAIT;
    loop {
        // SAFETY: signal 0 only checks for existence; it sends nothing.
        let alive = unsafe { libc::killpg(pgid, 0) } == 0;
        if !alive {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process group {pgid} still has processes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

fn expected_tools() -> Value {
    let number = json!({"type": "number", "format": "double"});
    let binary_input = json!({
        "$schema": SCHEMA,
        "type": "object",
        "properties": {"a": number, "b": number},
        "required": ["a", "b"],
    });
    let empty_input = json!({"type": "object", "properties": {}});
    let read_only = json!({"readOnlyHint": true});
    json!([
        {
            "name": "add",
            "description": "Add two numbers.",
            "inputSchema": binary_input,
            "annotations": read_only,
        },
        {
            "name": "fail",
            "description": "Always fail with the given message (a tool error, isError: true).",
            "inputSchema": {
                "$schema": SCHEMA,
                "type": "object",
                "properties": {
                    "message": {"description": "The error message to return.", "type": "string"},
                },
                "required": ["message"],
            },
        },
        {
            "name": "lookup_country",
            "description": "Look up a country by its ISO 3166-1 alpha-2 code. Returns name, capital, population and continent.",
            "inputSchema": {
                "$schema": SCHEMA,
                "type": "object",
                "properties": {
                    "code": {
                        "description": "ISO 3166-1 alpha-2 code such as \"FR\" (case-insensitive).",
                        "type": "string",
                    },
                },
                "required": ["code"],
            },
            "outputSchema": {
                "$schema": SCHEMA,
                "type": "object",
                "properties": {
                    "code": {"description": "ISO 3166-1 alpha-2 code.", "type": "string"},
                    "name": {"type": "string"},
                    "capital": {"type": "string"},
                    "population": {
                        "description": "Approximate population, rounded.",
                        "type": "integer",
                        "format": "uint64",
                        "minimum": 0,
                    },
                    "continent": {"type": "string"},
                },
                "required": ["code", "name", "capital", "population", "continent"],
            },
            "annotations": read_only,
        },
        {
            "name": "multiply",
            "description": "Multiply two numbers.",
            "inputSchema": binary_input,
            "annotations": read_only,
        },
        {
            "name": "noop",
            "description": "Do nothing and return an empty text result (for benchmarks).",
            "inputSchema": empty_input,
            "annotations": read_only,
        },
        {
            "name": "slow",
            "description": "Sleep for ms milliseconds (at most 60000) and report how long it slept.",
            "inputSchema": {
                "$schema": SCHEMA,
                "type": "object",
                "properties": {
                    "ms": {
                        "description": "Milliseconds to sleep, capped at 60000.",
                        "type": "integer",
                        "format": "uint64",
                        "minimum": 0,
                    },
                },
                "required": ["ms"],
            },
        },
        {
            "name": "stats",
            "description": "Summary statistics of a list of numbers: count, sum, mean, min and max.",
            "inputSchema": {
                "$schema": SCHEMA,
                "type": "object",
                "properties": {
                    "numbers": {
                        "description": "The numbers to summarise; at least one.",
                        "type": "array",
                        "items": number,
                    },
                },
                "required": ["numbers"],
            },
            "outputSchema": {
                "$schema": SCHEMA,
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "format": "uint64", "minimum": 0},
                    "sum": number,
                    "mean": number,
                    "min": number,
                    "max": number,
                },
                "required": ["count", "sum", "mean", "min", "max"],
            },
            "annotations": read_only,
        },
        {
            "name": "toggle_extra",
            "description": "Add the extra_echo tool if it is absent, remove it if present, and send notifications/tools/list_changed.",
            "inputSchema": empty_input,
            // It changes the server's tool list: the approval tests' destructive tool.
            "annotations": {"destructiveHint": true},
        },
        {
            "name": "trace_context",
            "description": "Return the W3C trace context this call carried, as JSON: its _meta.traceparent and, over HTTP, its traceparent header.",
            "inputSchema": empty_input,
            "annotations": read_only,
        },
    ])
}

#[tokio::test]
async fn initialize_reports_the_server_and_its_capabilities() {
    bounded(async {
        let demo = start_legacy(&[]).await;
        let info = demo.client.peer_info().expect("initialized");
        // The default client asks for the newest protocol; the server answers with the newest
        // one that still has an initialize handshake.
        assert_eq!(
            serde_json::to_value(&*info).unwrap(),
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "ptc-demo-mcp", "version": env!("CARGO_PKG_VERSION")},
                "instructions": "Demo tools for ptc-sidecar tests and examples.",
            })
        );
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn lists_every_tool_with_exact_schemas_and_annotations() {
    bounded(async {
        let demo = start_legacy(&[]).await;
        let tools = demo.client.list_all_tools().await.expect("tools/list");
        assert_eq!(serde_json::to_value(&tools).unwrap(), expected_tools());

        // The typed view the sidecar's catalog reads.
        let stats = tools.iter().find(|tool| tool.name == "stats").unwrap();
        let output = stats
            .output_schema
            .as_ref()
            .expect("stats has an outputSchema");
        assert_eq!(
            output["required"],
            json!(["count", "sum", "mean", "min", "max"])
        );
        let read_only: Vec<&str> = tools
            .iter()
            .filter(|tool| {
                tool.annotations
                    .as_ref()
                    .and_then(|annotations| annotations.read_only_hint)
                    == Some(true)
            })
            .map(|tool| tool.name.as_ref())
            .collect();
        assert_eq!(
            read_only,
            [
                "add",
                "lookup_country",
                "multiply",
                "noop",
                "stats",
                "trace_context"
            ]
        );
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn paginated_list_is_followed_to_the_last_page() {
    bounded(async {
        let demo = start_legacy(&["--page-size", "3"]).await;
        let first = demo.client.list_tools(None).await.expect("first page");
        let names: Vec<&str> = first.tools.iter().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(names, ["add", "fail", "lookup_country"]);
        assert_eq!(first.next_cursor.as_deref(), Some("3"));

        let last = demo
            .client
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(Some("6".to_owned()))))
            .await
            .expect("last page");
        let names: Vec<&str> = last.tools.iter().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(names, ["stats", "toggle_extra", "trace_context"]);
        assert_eq!(last.next_cursor, None);

        assert_eq!(demo.tool_names().await, ALL_TOOLS);
        let bad_cursor = demo
            .client
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(Some("nonsense".to_owned()))))
            .await;
        assert!(
            matches!(&bad_cursor, Err(ServiceError::McpError(error)) if error.message == "invalid cursor \"nonsense\""),
            "{bad_cursor:?}"
        );
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn lookup_country_returns_structured_content_or_a_tool_error() {
    bounded(async {
        let demo = start_legacy(&[]).await;
        let france = json!({
            "code": "FR",
            "name": "France",
            "capital": "Paris",
            "population": 68_400_000,
            "continent": "Europe",
        });
        assert_eq!(
            demo.call_json("lookup_country", json!({"code": "FR"})).await,
            json!({
                "content": [{"type": "text", "text": france.to_string()}],
                "structuredContent": france,
                "isError": false,
            })
        );
        // Case and surrounding blanks do not matter; non-ASCII survives the round trip.
        let brazil = demo.call("lookup_country", json!({"code": " br "})).await;
        assert_eq!(
            brazil.structured_content,
            Some(json!({
                "code": "BR",
                "name": "Brazil",
                "capital": "Brasília",
                "population": 203_100_000,
                "continent": "South America",
            }))
        );
        assert_eq!(
            demo.call_json("lookup_country", json!({"code": "XX"})).await,
            json!({
                "content": [{
                    "type": "text",
                    "text": "unknown country code \"XX\"; valid codes include AR, AU, BR, CA, CN (ISO 3166-1 alpha-2, 20 in the table)",
                }],
                "isError": true,
            })
        );
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn arithmetic_returns_text_and_rejects_bad_arguments_as_tool_errors() {
    bounded(async {
        let demo = start_legacy(&[]).await;
        let text = |text: &str| json!({"content": [{"type": "text", "text": text}], "isError": false});
        assert_eq!(demo.call_json("add", json!({"a": 2, "b": 3})).await, text("5"));
        assert_eq!(demo.call_json("add", json!({"a": 0.5, "b": -2})).await, text("-1.5"));
        assert_eq!(demo.call_json("multiply", json!({"a": 6, "b": 7})).await, text("42"));
        assert_eq!(demo.call_json("multiply", json!({"a": 1.5, "b": 0.5})).await, text("0.75"));
        assert_eq!(
            demo.call_json("multiply", json!({"a": 1e308, "b": 10})).await,
            json!({
                "content": [{"type": "text", "text": "the result (inf) is not a finite number"}],
                "isError": true,
            })
        );
        // rmcp turns an argument that does not deserialise into a tool error, not a protocol
        // error, so the model gets to read it.
        assert_eq!(
            demo.call_json("add", json!({"a": 2, "b": "three"})).await,
            json!({
                "content": [{
                    "type": "text",
                    "text": "failed to deserialize parameters: invalid type: string \"three\", expected f64",
                }],
                "isError": true,
            })
        );
        assert_eq!(
            demo.call_json("add", json!({"a": 2})).await,
            json!({
                "content": [{"type": "text", "text": "failed to deserialize parameters: missing field `b`"}],
                "isError": true,
            })
        );
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn stats_fail_noop_and_slow_return_exact_results() {
    bounded(async {
        let demo = start_legacy(&[]).await;
        let stats = json!({"count": 4, "sum": 10.0, "mean": 2.5, "min": -1.0, "max": 7.5});
        assert_eq!(
            demo.call_json("stats", json!({"numbers": [1, 2.5, -1, 7.5]})).await,
            json!({
                "content": [{"type": "text", "text": stats.to_string()}],
                "structuredContent": stats,
                "isError": false,
            })
        );
        assert_eq!(
            demo.call_json("stats", json!({"numbers": []})).await,
            json!({
                "content": [{"type": "text", "text": "numbers must not be empty"}],
                "isError": true,
            })
        );
        assert_eq!(
            demo.call_json("fail", json!({"message": "boom: disk on fire"})).await,
            json!({
                "content": [{"type": "text", "text": "boom: disk on fire"}],
                "isError": true,
            })
        );
        assert_eq!(
            demo.call_json("noop", Value::Null).await,
            json!({"content": [{"type": "text", "text": ""}], "isError": false})
        );

        let started = Instant::now();
        assert_eq!(
            demo.call_json("slow", json!({"ms": 150})).await,
            json!({"content": [{"type": "text", "text": "slept 150 ms"}], "isError": false})
        );
        assert!(started.elapsed() >= Duration::from_millis(150));

        // An unknown name is a JSON-RPC error, not a tool result.
        let unknown = demo.client.call_tool(call_params("nope", Value::Null)).await;
        assert!(
            matches!(&unknown, Err(ServiceError::McpError(error)) if error.message == "tool not found"),
            "{unknown:?}"
        );
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_per_call_timeout_abandons_the_call_and_the_session_stays_usable() {
    bounded(async {
        let demo = start_legacy(&[]).await;

        // 1. Drop the call future: rmcp sends notifications/cancelled for it.
        let started = Instant::now();
        let abandoned = tokio::time::timeout(
            Duration::from_millis(200),
            demo.client.call_tool(call_params("slow", json!({"ms": 30_000}))),
        )
        .await;
        assert!(abandoned.is_err(), "slow(30000) finished within 200 ms?");

        // 2. rmcp's own request timeout, which also sends notifications/cancelled.
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(call_params(
            "slow",
            json!({"ms": 30_000}),
        )));
        let handle = demo
            .client
            .send_request_with_option(
                request,
                PeerRequestOptions::with_timeout(Duration::from_millis(200)),
            )
            .await
            .expect("request sent");
        let timed_out = handle.await_response().await;
        assert!(
            matches!(timed_out, Err(ServiceError::Timeout { timeout }) if timeout == Duration::from_millis(200)),
            "{timed_out:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // Both abandoned calls reached the server as notifications/cancelled.
        demo.wait_for_log("slow call cancelled", 2).await;

        let response = demo
            .client
            .send_request(ClientRequest::CallToolRequest(CallToolRequest::new(
                call_params("noop", Value::Null),
            )))
            .await
            .expect("noop after two abandoned calls");
        assert!(matches!(response, ServerResult::CallToolResult(_)), "{response:?}");
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn toggle_extra_sends_tools_list_changed_to_a_legacy_client() {
    bounded(async {
        let mut demo = start_legacy(&[]).await;
        assert_eq!(demo.tool_names().await, ALL_TOOLS);

        assert_eq!(
            demo.call_json("toggle_extra", Value::Null).await,
            json!({"content": [{"type": "text", "text": "extra_echo added"}], "isError": false})
        );
        demo.next_tool_list_changed().await;
        let tools = demo.client.list_all_tools().await.expect("tools/list");
        let extra: &Tool = tools
            .iter()
            .find(|tool| tool.name == "extra_echo")
            .expect("extra_echo is listed after toggle_extra");
        assert_eq!(
            serde_json::to_value(extra).unwrap(),
            json!({
                "name": "extra_echo",
                "description": "Return the given text. Listed only after toggle_extra has added it.",
                "inputSchema": {
                    "$schema": SCHEMA,
                    "type": "object",
                    "properties": {"text": {"description": "The text to return.", "type": "string"}},
                    "required": ["text"],
                },
                "annotations": {"readOnlyHint": true},
            })
        );
        assert_eq!(
            demo.call_json("extra_echo", json!({"text": "héllo"})).await,
            json!({"content": [{"type": "text", "text": "héllo"}], "isError": false})
        );

        assert_eq!(
            demo.call_json("toggle_extra", Value::Null).await,
            json!({"content": [{"type": "text", "text": "extra_echo removed"}], "isError": false})
        );
        demo.next_tool_list_changed().await;
        assert_eq!(demo.tool_names().await, ALL_TOOLS);
        let gone = demo
            .client
            .call_tool(call_params("extra_echo", json!({"text": "x"})))
            .await;
        assert!(
            matches!(&gone, Err(ServiceError::McpError(error)) if error.message == "tool not found"),
            "{gone:?}"
        );
        // One notification per toggle, no more.
        assert!(demo.tool_list_changed.try_recv().is_err());
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn toggle_extra_notifies_a_2026_client_on_its_listen_stream() {
    bounded(async {
        let mut demo = start_demo(
            &[],
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await;
        let info = demo.client.peer_info().expect("discovered");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);

        let mut subscription = demo
            .client
            .listen(SubscriptionFilter::builder().tools_list_changed().build())
            .await
            .expect("subscriptions/listen");
        assert_eq!(
            subscription.acknowledged(),
            &SubscriptionFilter::builder().tools_list_changed().build()
        );

        let toggled = demo.call("toggle_extra", Value::Null).await;
        assert_eq!(toggled.is_error, Some(false));
        let notification = tokio::time::timeout(EVENT_WAIT, subscription.next())
            .await
            .expect("notification in time")
            .expect("a well-formed subscription stream")
            .expect("the stream is still open");
        assert!(
            matches!(
                notification,
                ServerNotification::ToolListChangedNotification(_)
            ),
            "{notification:?}"
        );
        assert!(demo.tool_names().await.contains(&"extra_echo".to_owned()));
        // Notifications routed to a subscription do not reach the ClientHandler callback.
        assert!(demo.tool_list_changed.try_recv().is_err());

        // Cancel explicitly: dropping the handle only queues the cancellation, and cancelling
        // the client right after may close the transport before it is sent.
        subscription
            .cancel()
            .await
            .expect("cancel the subscription");
        demo.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_dead_server_fails_calls_in_flight_and_ends_the_session() {
    bounded(async {
        let demo = start_legacy(&[]).await;
        let Demo { client, pid, .. } = demo;
        let peer = client.peer().clone();

        let in_flight = tokio::spawn({
            let peer = peer.clone();
            async move {
                peer.call_tool(call_params("slow", json!({"ms": 30_000})))
                    .await
            }
        });
        // Let the call reach the server before killing it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let pid_t = libc::pid_t::try_from(pid).unwrap();
        // SAFETY: plain kill(2) on the child we spawned.
        assert_eq!(unsafe { libc::kill(pid_t, libc::SIGKILL) }, 0);

        let result = tokio::time::timeout(EVENT_WAIT, in_flight)
            .await
            .expect("the in-flight call ends when the server dies")
            .expect("task joins");
        assert!(
            matches!(result, Err(ServiceError::TransportClosed)),
            "{result:?}"
        );

        // The owner of the RunningService learns it from waiting().
        let reason = tokio::time::timeout(EVENT_WAIT, client.waiting())
            .await
            .expect("the service loop ends")
            .expect("task joins");
        assert!(matches!(reason, QuitReason::Closed), "{reason:?}");
        assert!(peer.is_transport_closed());
        let after = peer.call_tool(call_params("noop", Value::Null)).await;
        assert!(
            matches!(after, Err(ServiceError::TransportClosed)),
            "{after:?}"
        );
        assert_group_gone(pid).await;
    })
    .await;
}

/// Talks to the binary without rmcp: every stdout line must be a JSON-RPC message (logs go to
/// stderr), and closing stdin must end the process with status 0 at once, even with a slow call
/// in flight (rmcp alone would wait up to 5 s for it).
#[tokio::test]
async fn stdout_is_protocol_only_and_the_server_exits_when_stdin_closes() {
    bounded(async {
        let mut child = demo_command(&[])
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the demo server");
        let pid = child.id().expect("pid");
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let stderr_task = tokio::spawn(async move {
            let mut text = String::new();
            stderr.read_to_string(&mut text).await.map(|_| text)
        });

        let messages = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            }}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "add", "arguments": {"a": 1, "b": 2},
            }}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "slow", "arguments": {"ms": 30_000},
            }}),
        ];
        for message in &messages {
            stdin
                .write_all(format!("{message}\n").as_bytes())
                .await
                .unwrap();
        }
        stdin.flush().await.unwrap();

        let mut lines = BufReader::new(stdout).lines();
        let mut responses = Vec::new();
        while responses.len() < 2 {
            responses.push(next_message(&mut lines).await.expect("stdout open"));
        }
        assert_eq!(responses[0]["id"], 1);
        assert_eq!(responses[0]["result"]["serverInfo"]["name"], "ptc-demo-mcp");
        assert_eq!(
            responses[1],
            json!({"jsonrpc": "2.0", "id": 2, "result": {
                "content": [{"type": "text", "text": "3"}],
                "isError": false,
            }})
        );

        drop(stdin);
        let closed = Instant::now();
        let status = tokio::time::timeout(EVENT_WAIT, child.wait())
            .await
            .expect("the server exits after stdin closes")
            .expect("wait");
        assert!(status.success(), "{status}");
        assert!(
            closed.elapsed() < Duration::from_secs(2),
            "{:?}",
            closed.elapsed()
        );
        // The slow call is answered (as cancelled) before the server goes.
        assert_eq!(
            next_message(&mut lines).await,
            Some(json!({"jsonrpc": "2.0", "id": 3, "result": {
                "content": [{"type": "text", "text": "cancelled: stdin closed"}],
                "isError": true,
            }}))
        );
        assert_eq!(next_message(&mut lines).await, None, "nothing after that");

        let stderr = stderr_task.await.unwrap().unwrap();
        assert!(stderr.contains("serving MCP on stdio"), "{stderr}");
        assert!(stderr.contains("session ended, exiting"), "{stderr}");
        assert_group_gone(pid).await;
    })
    .await;
}

/// The next stdout line, which must be one JSON-RPC message; `None` at EOF.
async fn next_message(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Option<Value> {
    let line = tokio::time::timeout(EVENT_WAIT, lines.next_line())
        .await
        .expect("a stdout line in time")
        .expect("read stdout")?;
    let message: Value = serde_json::from_str(&line)
        .unwrap_or_else(|error| panic!("non-JSON line on stdout ({error}): {line}"));
    assert_eq!(message["jsonrpc"], "2.0", "{line}");
    Some(message)
}

/// `--crash-every 3`: two calls answered, the third ends the process without an answer (the
/// fault the sidecar's restart tests need), with a line on stderr saying so.
#[tokio::test]
async fn crash_every_exits_on_the_nth_call() {
    bounded(async {
        let demo = start_legacy(&["--crash-every", "3"]).await;
        assert_eq!(
            demo.call_json("add", json!({"a": 1, "b": 2})).await["content"][0]["text"],
            "3"
        );
        assert_eq!(
            demo.call_json("noop", Value::Null).await["content"][0]["text"],
            ""
        );
        let third = demo
            .client
            .peer()
            .call_tool(call_params("add", json!({"a": 1, "b": 1})))
            .await;
        assert!(
            matches!(third, Err(ServiceError::TransportClosed)),
            "{third:?}"
        );
        demo.wait_for_log("crashing, as --crash-every asked", 1)
            .await;
        assert!(demo.stderr.lock().unwrap().contains("call=3 tool=add"));
        assert_group_gone(demo.pid).await;
    })
    .await;
}
