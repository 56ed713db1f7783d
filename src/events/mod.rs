//! Tool events: every run and every call as one JSON event, to Redis and to in-process
//! subscribers (the `GET /v1/events` stream).
//!
//! Owns the [`Events`] handle: emitting stamps an event, tells the [`Observer`] (the metrics,
//! OTLP), keeps it in the [`ring`] of recent events, hands it to in-process subscribers
//! ([`Events::subscribe`]) and queues it for Redis, all in `seq` order. Emitting never waits
//! on anyone: an event goes into a bounded queue or is counted as dropped. The parts: the
//! schema ([`schema`], v1, docs/events.md), the ring of the latest events since start
//! ([`ring`], what the dashboard's first look shows), the one Redis connection held by one
//! writer task, an actor ([`writer`]: batching, holding while Redis is away, the flush at
//! exit), and reading events back from Redis for `ptc-sidecar events` and the dashboard
//! ([`follow`]).
//!
//! Redis errors reach the log and `/healthz`, so they are shown with URLs redacted (a Redis
//! URL may carry a password).

mod follow;
mod ring;
mod schema;
mod writer;

pub use follow::{HISTORY_AGENTS, HISTORY_PER_AGENT, WatchError, follow_all, readable, watch};
pub use ring::{RING_BODY, RING_BYTES, RING_EVENTS};
pub use schema::{
    Event, MAX_EVENT_BODY, MAX_EVENT_EXCERPT, MAX_EVENT_NAMES, MAX_EVENT_TEXT, SCHEMA_VERSION,
    excerpt,
};
pub use writer::{BACKOFF, BATCH_MAX, DEFAULT_HOLD, FLUSH_AT_EXIT, LINGER, REDIS_TIMEOUT};

use crate::util::{lock, now_ms, redact_urls};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// Events waiting for the writer: a burst of calls fits, a stuck writer cannot grow memory.
pub const QUEUE_CAPACITY: usize = 8192;
/// Events an in-process subscriber may lag behind before it misses some (and is told).
pub const LIVE_CAPACITY: usize = 4096;

/// A `REDIS_URL` the publisher cannot use. The message carries the cause, redacted; the
/// Redis error is not chained as a source, which would show it unredacted.
#[derive(Debug, thiserror::Error)]
#[error("REDIS_URL={:?} is not usable: {}", redact_urls(url), redact_urls(&error.to_string()))]
pub struct EventsError {
    pub url: String,
    pub error: redis::RedisError,
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
    /// The latest events; its lock is held while an event is numbered and handed on, so that
    /// every consumer (the ring, subscribers, Redis) sees events in `seq` order.
    ring: Mutex<ring::Ring>,
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
                Some(writer::spawn(client, &cfg, stats.clone(), shutdown))
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
                ring: Mutex::default(),
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
    /// The agent every event names.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }

    pub fn bodies(&self) -> bool {
        self.inner.bodies
    }

    /// Stamps and sends an event, within its bounds ([`Event::bounded`]: what the observers,
    /// the ring, subscribers, the dashboard and Redis see). Never waits but for the few
    /// microseconds another emit holds the order; a full queue drops the event and counts it.
    pub fn emit(&self, event: Event) {
        let mut event = event.bounded();
        let inner = &self.inner;
        event.v = SCHEMA_VERSION;
        event.agent_id.clone_from(&inner.agent_id);
        // One event at a time from its number to its queueing: two calls finishing together
        // once reached subscribers out of `seq` order, and a consumer that skips what it has
        // seen (the dashboard's model) lost the lower one.
        let mut ring = lock(&inner.ring);
        event.ts = now_ms();
        event.seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        if let Some(observer) = inner.observer.get() {
            observer.observe(&event);
        }
        let json: Arc<str> = match serde_json::to_string(&event) {
            Ok(j) => j.into(),
            Err(_) => return,
        };
        inner.stats.emitted.fetch_add(1, Ordering::Relaxed);
        match event.slim(RING_BODY).map(|e| serde_json::to_string(&e)) {
            Some(Ok(slim)) => ring.push(slim.into()),
            Some(Err(_)) => {}
            None => ring.push(json.clone()),
        }
        let _ = inner.live.send(json.clone());
        if let Some(queue) = &inner.queue
            && queue.try_send(json.clone()).is_err()
        {
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        drop(ring);
        tracing::debug!(target: "ptc_sidecar::events", "{json}");
    }

    /// Every event from now on, as JSON text.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.inner.live.subscribe()
    }

    /// The latest events kept since start ([`ring`]: at most [`RING_EVENTS`] and
    /// [`RING_BYTES`], oldest first) and every event after them: none missed between the two,
    /// none in both.
    pub fn recent_and_subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let ring = lock(&self.inner.ring);
        (ring.events(), self.inner.live.subscribe())
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn the_recent_events_are_kept_from_start_and_follow_on_from_the_live_ones() {
        let events = Events::local("agent-1");
        for i in 0..3 {
            let mut e = Event::new("exec.started");
            e.exec_id = Some(format!("r{i}"));
            events.emit(e);
        }
        let (recent, mut rx) = events.recent_and_subscribe();
        events.emit(Event::new("exec.finished"));
        let seqs: Vec<u64> = recent
            .iter()
            .map(|j| {
                serde_json::from_str::<Value>(j).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, [0, 1, 2]);
        let next: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(
            (next["seq"].as_u64(), next["type"].as_str()),
            (Some(3), Some("exec.finished"))
        );
        // A body longer than the ring keeps is cut there, whole for subscribers.
        let mut e = Event::new("tool_call.finished");
        e.result = Some(serde_json::json!(vec!["o".repeat(20); 150]));
        events.emit(e);
        let live: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(live["result"].as_array().unwrap().len(), 150);
        let (recent, _) = events.recent_and_subscribe();
        let kept: Value = serde_json::from_str(recent.last().unwrap()).unwrap();
        let kept = kept["result"].as_str().unwrap();
        assert!(
            kept.len() < RING_BODY + 40 && kept.ends_with("[cut: 1403 more bytes]"),
            "{kept}"
        );
    }

    #[test]
    fn events_emitted_at_once_from_many_threads_reach_subscribers_in_seq_order() {
        let events = Events::local("agent-1");
        let mut rx = events.subscribe();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..500 {
                        events.emit(Event::new("tool_call.finished"));
                    }
                });
            }
        });
        let mut last = None;
        for _ in 0..2000 {
            let json = rx.try_recv().unwrap();
            let seq = serde_json::from_str::<Value>(&json).unwrap()["seq"].as_u64();
            assert!(last < seq, "{last:?} then {seq:?}");
            last = seq;
        }
    }
}
