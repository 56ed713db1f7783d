//! Tool events: every run and every call as one JSON event, to Redis and to in-process
//! subscribers (the `GET /v1/events` stream).
//!
//! Owns the event schema (v1, docs/events.md) and the one Redis connection, held by one writer
//! task (an actor). Emitting never waits: an event goes into a bounded queue or is counted as
//! dropped. The writer sends pipelined batches (PUBLISH to `ptc:events:{agent}` and XADD to
//! `ptc:stream:{agent}` with `MAXLEN ~`); while Redis is away it holds up to
//! [`EventsConfig::hold`] events in order, reconnects with backoff and flushes them when Redis is
//! back. Delivery is at least once: a batch cut off mid-flight is sent again whole.
//!
//! Redis errors reach the log and `/healthz`, so they are shown with URLs redacted (a Redis
//! URL may carry a password).

use crate::util::{lock, now_ms, redact_urls};
use serde::Serialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// The event schema's version, the `v` of every event.
pub const SCHEMA_VERSION: u32 = 1;
/// Events waiting for the writer: a burst of calls fits, a stuck writer cannot grow memory.
pub const QUEUE_CAPACITY: usize = 8192;
/// Events held while Redis is away, by default; past it new events are dropped and counted.
pub const DEFAULT_HOLD: usize = 50_000;
/// Events per pipelined round trip to Redis.
pub const BATCH_MAX: usize = 512;
/// How long the writer lets events gather after the first one before it writes: one round
/// trip per burst instead of one per event, so a busy run costs Redis (and this machine's
/// CPU) little. Events reach Redis at most this much later.
pub const LINGER: Duration = Duration::from_millis(5);
/// Events an in-process subscriber may lag behind before it misses some (and is told).
pub const LIVE_CAPACITY: usize = 4096;
/// One connect or one batch to Redis may take this long: a slow Redis is treated as away.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(3);
/// At shutdown, how long the writer may take to send what it still holds (one connect and a
/// few batches): a Redis that is away must not hold up the exit past Kubernetes' grace.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(3);
/// Reconnect backoff, doubling from the first to the second.
pub const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// A `REDIS_URL` the publisher cannot use. The message carries the cause, redacted; the
/// Redis error is not chained as a source, which would show it unredacted.
#[derive(Debug, thiserror::Error)]
#[error("REDIS_URL={:?} is not usable: {}", redact_urls(url), redact_urls(&error.to_string()))]
pub struct EventsError {
    pub url: String,
    pub error: redis::RedisError,
}

/// Why `ptc-sidecar events` stopped watching (causes redacted and not chained, as above).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("REDIS_URL={:?}: {}", redact_urls(url), redact_urls(&error.to_string()))]
    Url {
        url: String,
        error: redis::RedisError,
    },
    #[error("cannot connect to Redis at {}: {}", redact_urls(url), redact_urls(&error.to_string()))]
    Connect {
        url: String,
        error: redis::RedisError,
    },
    #[error("cannot subscribe: {}", redact_urls(&.0.to_string()))]
    Subscribe(redis::RedisError),
    #[error("the Redis connection ended")]
    Ended,
}

/// What the publisher needs.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    pub agent_id: String,
    pub redis_url: Option<String>,
    pub stream_maxlen: usize,
    /// Include argument and result bodies (`PTC_EVENTS_BODIES`).
    pub bodies: bool,
    pub hold: usize,
}

/// One event. Fields that do not apply to a type are left out of the JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Event {
    pub v: u32,
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Milliseconds since the Unix epoch.
    pub ts: u64,
    /// Increases by one per event of this sidecar process: order, and duplicates after a resend.
    pub seq: u64,
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_id: Option<String>,
    /// W3C trace context: the trace, this run's or call's span, and the span it is a child of
    /// (the caller's `traceparent` for a run, the run's span for a call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// The session a run belongs to (`session_id` of `exec_code`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// `mcp` or `host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// `{type, message}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// exec.finished: `ok`, `error` or `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<usize>,
    /// catalog.reloaded: the new version and what changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<Vec<String>>,
    /// Bodies, only with `PTC_EVENTS_BODIES=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl Event {
    /// Puts `span`'s ids on the event.
    pub fn in_span(&mut self, span: &crate::trace::SpanContext) {
        self.trace_id = Some(span.trace_id.clone());
        self.span_id = Some(span.span_id.clone());
        self.parent_span_id.clone_from(&span.parent_span_id);
    }

    pub fn new(kind: &'static str) -> Event {
        Event {
            kind,
            ..Event::default()
        }
    }
}

/// Counters for `/healthz` and the log.
#[derive(Debug, Default)]
pub struct Stats {
    pub emitted: AtomicU64,
    pub published: AtomicU64,
    pub dropped: AtomicU64,
    pub held: AtomicU64,
    pub connected: AtomicBool,
    pub last_error: Mutex<Option<String>>,
}

/// Something that learns of every event as it is emitted, synchronously and before it is
/// queued (the metrics): it must be quick and must never wait.
pub trait Observer: Send + Sync {
    fn observe(&self, event: &Event);
}

/// Several observers, each told of every event in turn.
impl Observer for Vec<Arc<dyn Observer>> {
    fn observe(&self, event: &Event) {
        for observer in self {
            observer.observe(event);
        }
    }
}

/// A cloneable handle: emit events, subscribe to them.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

struct Inner {
    agent_id: String,
    bodies: bool,
    redis: bool,
    seq: AtomicU64,
    queue: Option<mpsc::Sender<Arc<str>>>,
    live: broadcast::Sender<Arc<str>>,
    stats: Arc<Stats>,
    observer: std::sync::OnceLock<Arc<dyn Observer>>,
    /// Cancelled when the writer has ended (at once when there is none).
    written: CancellationToken,
}

impl Events {
    /// Starts the writer when a Redis URL is configured; without one, events go to
    /// subscribers and the debug log only.
    pub fn start(cfg: EventsConfig, shutdown: CancellationToken) -> Result<Events, EventsError> {
        let stats = Arc::new(Stats::default());
        let queue = match &cfg.redis_url {
            Some(url) => {
                let client = redis::Client::open(url.as_str()).map_err(|error| EventsError {
                    url: url.clone(),
                    error,
                })?;
                let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
                let written = CancellationToken::new();
                let writer = Writer {
                    client,
                    channel: format!("ptc:events:{}", cfg.agent_id),
                    stream: format!("ptc:stream:{}", cfg.agent_id),
                    maxlen: cfg.stream_maxlen,
                    hold: cfg.hold.max(1),
                    stats: stats.clone(),
                };
                let ended = written.clone().drop_guard();
                tokio::spawn(async move {
                    writer.run(rx, shutdown).await;
                    drop(ended);
                });
                Some((tx, written))
            }
            None => None,
        };
        Ok(Events::new(cfg.agent_id, cfg.bodies, queue, stats))
    }

    /// Events that go nowhere but to subscribers and the debug log (a runner's default
    /// backends, before the sidecar's own publisher is set).
    pub fn local(agent_id: &str) -> Events {
        Events::new(agent_id.into(), false, None, Arc::default())
    }

    /// `queue`: the writer's queue and the token it cancels when it ends.
    fn new(
        agent_id: String,
        bodies: bool,
        queue: Option<(mpsc::Sender<Arc<str>>, CancellationToken)>,
        stats: Arc<Stats>,
    ) -> Events {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let (queue, written) = match queue {
            Some((queue, written)) => (Some(queue), written),
            None => {
                let none = CancellationToken::new();
                none.cancel();
                (None, none)
            }
        };
        Events {
            inner: Arc::new(Inner {
                agent_id,
                bodies,
                redis: queue.is_some(),
                seq: AtomicU64::new(0),
                queue,
                live,
                stats,
                observer: std::sync::OnceLock::new(),
                written,
            }),
        }
    }

    /// Resolves once the writer has ended: after the shutdown token was cancelled, when it has
    /// sent what it held to Redis or given up after [`FLUSH_AT_EXIT`]. At once without Redis.
    pub async fn written(&self) {
        self.inner.written.cancelled().await;
    }

    /// Hands every later event to `observer` too (once; a second observer is ignored).
    pub fn observe_with(&self, observer: Arc<dyn Observer>) {
        let _ = self.inner.observer.set(observer);
    }

    /// Whether events carry argument and result bodies.
    pub fn bodies(&self) -> bool {
        self.inner.bodies
    }

    /// Stamps and sends an event. Never waits; a full queue drops the event and counts it.
    pub fn emit(&self, mut event: Event) {
        let inner = &self.inner;
        event.v = SCHEMA_VERSION;
        event.ts = now_ms();
        event.seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        event.agent_id.clone_from(&inner.agent_id);
        if let Some(observer) = inner.observer.get() {
            observer.observe(&event);
        }
        let json: Arc<str> = match serde_json::to_string(&event) {
            Ok(j) => j.into(),
            Err(_) => return,
        };
        inner.stats.emitted.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "ptc_sidecar::events", "{json}");
        let _ = inner.live.send(json.clone());
        if let Some(queue) = &inner.queue
            && queue.try_send(json).is_err()
        {
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every event from now on, as JSON text.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.inner.live.subscribe()
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// The publisher's state for `/healthz`.
    pub fn health(&self) -> Value {
        let s = &self.inner.stats;
        serde_json::json!({
            "redis": self.inner.redis,
            "connected": s.connected.load(Ordering::Relaxed),
            "emitted": s.emitted.load(Ordering::Relaxed),
            "published": s.published.load(Ordering::Relaxed),
            "held": s.held.load(Ordering::Relaxed),
            "dropped": s.dropped.load(Ordering::Relaxed),
            "last_error": lock(&s.last_error).clone(),
        })
    }
}

/// One event as a line for a person: time, agent, type, ids, tool, outcome.
/// `17:30:00.123 agent-1 tool_call.finished r3/r3-0 github__list_issues ok 12.5ms`
pub fn readable(event: &Value) -> String {
    let ts = event["ts"].as_u64().unwrap_or(0);
    let (h, m, sec, ms) = (
        (ts / 3_600_000) % 24,
        (ts / 60_000) % 60,
        (ts / 1000) % 60,
        ts % 1000,
    );
    let mut line = format!(
        "{h:02}:{m:02}:{sec:02}.{ms:03} {} {}",
        event["agent_id"].as_str().unwrap_or("?"),
        event["type"].as_str().unwrap_or("?")
    );
    let ids: Vec<&str> = ["exec_id", "call_id"]
        .iter()
        .filter_map(|k| event[*k].as_str())
        .collect();
    if !ids.is_empty() {
        line.push(' ');
        line.push_str(&ids.join("/"));
    }
    for key in ["tool", "status"] {
        if let Some(v) = event[key].as_str() {
            line.push(' ');
            line.push_str(v);
        }
    }
    match event["ok"].as_bool() {
        Some(true) if event["status"].is_null() => line.push_str(" ok"),
        Some(false) if event["status"].is_null() => line.push_str(" failed"),
        _ => {}
    }
    if let Some(d) = event["duration_ms"].as_f64() {
        line.push_str(&format!(" {d:.1}ms"));
    }
    if let Some(msg) = event["error"]["message"].as_str() {
        line.push_str(&format!(" error: {msg}"));
    }
    if let Some(v) = event["version"].as_u64() {
        line.push_str(&format!(" v{v}"));
        for key in ["added", "removed", "changed"] {
            if let Some(names) = event[key].as_array().filter(|a| !a.is_empty()) {
                let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
                line.push_str(&format!(" {key}: {}", names.join(",")));
            }
        }
    }
    line
}

/// Subscribes to one agent's channel (or every agent's, with a pattern) and writes each event
/// as a line, readable or raw JSON, until the connection ends.
pub async fn watch(
    redis_url: &str,
    agent: Option<&str>,
    json: bool,
    mut out: impl std::io::Write,
) -> Result<(), WatchError> {
    use futures_util::StreamExt;
    let client = redis::Client::open(redis_url).map_err(|error| WatchError::Url {
        url: redis_url.to_string(),
        error,
    })?;
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .map_err(|error| WatchError::Connect {
            url: redis_url.to_string(),
            error,
        })?;
    match agent {
        Some(agent) => pubsub.subscribe(format!("ptc:events:{agent}")).await,
        None => pubsub.psubscribe("ptc:events:*").await,
    }
    .map_err(WatchError::Subscribe)?;
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let payload: String = msg.get_payload().unwrap_or_default();
        let line = if json {
            payload
        } else {
            match serde_json::from_str::<Value>(&payload) {
                Ok(v) => readable(&v),
                Err(_) => payload,
            }
        };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
    }
    Err(WatchError::Ended)
}

/// Most events read back from each agent's stream at start (`ptc-sidecar dashboard`): the
/// dashboard keeps the latest runs only, and a stream of 100,000 events must not be read whole.
pub const HISTORY_PER_AGENT: usize = 5000;

/// Most agents' streams read back at start.
pub const HISTORY_AGENTS: usize = 1000;

/// Every agent's events from Redis, oldest first: up to [`HISTORY_PER_AGENT`] of each of up to
/// [`HISTORY_AGENTS`] streams (`ptc:stream:*`) read back, then the live ones (`ptc:events:*`),
/// each handed to `sink` as JSON text, until the connection ends. Subscribes before it reads
/// the history, so no event falls between the two (one may come twice: a consumer keyed by
/// `seq` sees it as such). `ready` is called once the history is in and live events flow.
pub async fn follow_all(
    redis_url: &str,
    mut sink: impl FnMut(&str),
    ready: impl FnOnce(),
) -> Result<(), WatchError> {
    use futures_util::StreamExt;
    let client = redis::Client::open(redis_url).map_err(|error| WatchError::Url {
        url: redis_url.to_string(),
        error,
    })?;
    let connect = |error| WatchError::Connect {
        url: redis_url.to_string(),
        error,
    };
    let mut pubsub = client.get_async_pubsub().await.map_err(connect)?;
    pubsub
        .psubscribe("ptc:events:*")
        .await
        .map_err(WatchError::Subscribe)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(connect)?;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("ptc:stream:*")
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await
            .map_err(WatchError::Subscribe)?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 || keys.len() >= HISTORY_AGENTS {
            break;
        }
    }
    keys.truncate(HISTORY_AGENTS);
    let mut history: Vec<(u64, String)> = Vec::new();
    for key in keys {
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
            .arg(&key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(HISTORY_PER_AGENT)
            .query_async(&mut conn)
            .await
            .map_err(WatchError::Subscribe)?;
        // XREVRANGE gives the newest first: each agent's events go in oldest first.
        for (_, fields) in entries.into_iter().rev() {
            for (field, json) in fields {
                if field == "event" {
                    let ts = serde_json::from_str::<Value>(&json)
                        .ok()
                        .and_then(|v| v["ts"].as_u64())
                        .unwrap_or(0);
                    history.push((ts, json));
                }
            }
        }
    }
    // Oldest first across agents; a stable sort keeps each agent's own order.
    history.sort_by_key(|(ts, _)| *ts);
    for (_, json) in &history {
        sink(json);
    }
    drop(history);
    let mut messages = pubsub.on_message();
    ready();
    while let Some(msg) = messages.next().await {
        let payload: String = msg.get_payload().unwrap_or_default();
        sink(&payload);
    }
    Err(WatchError::Ended)
}

/// The one task that talks to Redis.
struct Writer {
    client: redis::Client,
    channel: String,
    stream: String,
    maxlen: usize,
    hold: usize,
    stats: Arc<Stats>,
}

impl Writer {
    async fn run(self, mut rx: mpsc::Receiver<Arc<str>>, shutdown: CancellationToken) {
        let mut held: VecDeque<Arc<str>> = VecDeque::new();
        let mut conn: Option<redis::aio::MultiplexedConnection> = None;
        let mut backoff = BACKOFF.0;
        loop {
            if held.is_empty() {
                tokio::select! {
                    event = rx.recv() => match event {
                        Some(e) => held.push_back(e),
                        None => return,
                    },
                    _ = shutdown.cancelled() => return self.last_flush(&mut rx, held, conn).await,
                }
                if rx.len() < BATCH_MAX {
                    tokio::select! {
                        _ = tokio::time::sleep(LINGER) => {}
                        _ = shutdown.cancelled() => {}
                    }
                }
            }
            self.take_queued(&mut rx, &mut held);
            let Some(c) = conn.as_mut() else {
                match self.connect().await {
                    Ok(c) => {
                        conn = Some(c);
                        backoff = BACKOFF.0;
                        self.stats.connected.store(true, Ordering::Relaxed);
                        tracing::info!(
                            "events: connected to Redis; {} held events to flush",
                            held.len()
                        );
                    }
                    Err(e) => {
                        self.fail(&e.to_string());
                        // Keep taking events while waiting, so emitters never find the queue full.
                        let sleep = tokio::time::sleep(backoff);
                        tokio::pin!(sleep);
                        loop {
                            tokio::select! {
                                _ = &mut sleep => break,
                                _ = shutdown.cancelled() => {
                                    return self.last_flush(&mut rx, held, None).await;
                                }
                                event = rx.recv() => match event {
                                    Some(e) => self.hold(&mut held, e),
                                    None => return,
                                },
                            }
                        }
                        backoff = (backoff * 2).min(BACKOFF.1);
                    }
                }
                continue;
            };
            if let Err(e) = self.send_batch(c, &mut held).await {
                self.fail(&e);
                conn = None;
            }
            if shutdown.is_cancelled() {
                return self.last_flush(&mut rx, held, conn).await;
            }
        }
    }

    /// At shutdown: what is queued and held goes to Redis, in order, within [`FLUSH_AT_EXIT`];
    /// what cannot is counted as dropped and said in the log.
    async fn last_flush(
        &self,
        rx: &mut mpsc::Receiver<Arc<str>>,
        mut held: VecDeque<Arc<str>>,
        conn: Option<redis::aio::MultiplexedConnection>,
    ) {
        self.take_queued(rx, &mut held);
        if held.is_empty() {
            return;
        }
        let flushed = tokio::time::timeout(FLUSH_AT_EXIT, async {
            let mut conn = match conn {
                Some(c) => c,
                None => self.connect().await.map_err(|e| e.to_string())?,
            };
            while !held.is_empty() {
                self.send_batch(&mut conn, &mut held).await?;
            }
            Ok::<(), String>(())
        })
        .await
        .unwrap_or_else(|_| Err(format!("not done within {FLUSH_AT_EXIT:?}")));
        if let Err(e) = flushed {
            let left = held.len() as u64;
            self.stats.dropped.fetch_add(left, Ordering::Relaxed);
            tracing::warn!(
                "events: {left} events were not written to Redis at shutdown: {}",
                redact_urls(&e)
            );
        }
    }

    /// One pipelined batch of the oldest held events; they leave `held` once Redis has them.
    async fn send_batch(
        &self,
        c: &mut redis::aio::MultiplexedConnection,
        held: &mut VecDeque<Arc<str>>,
    ) -> Result<(), String> {
        let n = held.len().min(BATCH_MAX);
        let mut pipe = redis::pipe();
        for event in held.iter().take(n) {
            pipe.cmd("PUBLISH")
                .arg(&self.channel)
                .arg(event.as_ref())
                .ignore();
            pipe.cmd("XADD")
                .arg(&self.stream)
                .arg("MAXLEN")
                .arg("~")
                .arg(self.maxlen)
                .arg("*")
                .arg("event")
                .arg(event.as_ref())
                .ignore();
        }
        match tokio::time::timeout(REDIS_TIMEOUT, pipe.query_async::<()>(c)).await {
            Ok(Ok(())) => {
                held.drain(..n);
                self.stats.published.fetch_add(n as u64, Ordering::Relaxed);
                self.stats.held.store(held.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("Redis did not answer within {REDIS_TIMEOUT:?}")),
        }
    }

    async fn connect(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    fn take_queued(&self, rx: &mut mpsc::Receiver<Arc<str>>, held: &mut VecDeque<Arc<str>>) {
        while let Ok(event) = rx.try_recv() {
            self.hold(held, event);
        }
    }

    /// Keeps an event in order, or drops it when the hold is full (the oldest stay: a
    /// dashboard sees an unbroken history up to the gap).
    fn hold(&self, held: &mut VecDeque<Arc<str>>, event: Arc<str>) {
        if held.len() < self.hold {
            held.push_back(event);
            self.stats.held.store(held.len() as u64, Ordering::Relaxed);
        } else {
            let dropped = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    "events: Redis is away and {} events are held; {dropped} dropped so far",
                    held.len()
                );
            }
        }
    }

    fn fail(&self, error: &str) {
        let error = redact_urls(error);
        let was = self.stats.connected.swap(false, Ordering::Relaxed);
        let mut last = lock(&self.stats.last_error);
        if was || last.as_deref() != Some(error.as_str()) {
            tracing::warn!("events: Redis unavailable ({error}); holding events and reconnecting");
        }
        *last = Some(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_lines() {
        let e = serde_json::json!({"v": 1, "type": "tool_call.finished", "ts": 1_763_832_600_123u64,
            "agent_id": "a1", "exec_id": "r3", "call_id": "r3-0", "tool": "github__list_issues",
            "ok": false, "duration_ms": 12.54, "error": {"type": "tool", "message": "boom"}});
        assert_eq!(
            readable(&e),
            "17:30:00.123 a1 tool_call.finished r3/r3-0 github__list_issues failed 12.5ms error: boom"
        );
        let e = serde_json::json!({"type": "exec.finished", "ts": 0, "agent_id": "a1", "exec_id": "r3", "status": "timeout", "ok": false});
        assert_eq!(readable(&e), "00:00:00.000 a1 exec.finished r3 timeout");
        let e = serde_json::json!({"type": "catalog.reloaded", "ts": 0, "agent_id": "a1", "version": 4, "added": ["x"], "removed": [], "changed": ["y", "z"]});
        assert_eq!(
            readable(&e),
            "00:00:00.000 a1 catalog.reloaded v4 added: x changed: y,z"
        );
    }

    #[tokio::test]
    async fn local_events_reach_subscribers_stamped() {
        let events = Events::local("agent-1");
        let mut rx = events.subscribe();
        let mut e = Event::new("exec.started");
        e.exec_id = Some("r1".into());
        events.emit(e);
        events.emit(Event::new("exec.finished"));
        let first: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        let second: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(first["v"], 1);
        assert_eq!(first["type"], "exec.started");
        assert_eq!(first["agent_id"], "agent-1");
        assert_eq!(first["exec_id"], "r1");
        assert!(
            first.get("call_id").is_none(),
            "fields that do not apply are left out"
        );
        assert_eq!(
            second["seq"].as_u64().unwrap(),
            first["seq"].as_u64().unwrap() + 1
        );
        assert!(first["ts"].as_u64().unwrap() > 1_700_000_000_000);
    }
}
