//! The Redis writer: the one task that owns the one Redis connection (an actor), and the
//! queue that feeds it.
//!
//! It takes events from the queue, lets a burst gather for [`LINGER`], and sends pipelined
//! batches (PUBLISH to `ptc:events:{agent}` and XADD to `ptc:stream:{agent}` with `MAXLEN ~`).
//! While Redis is away it holds up to [`super::EventsConfig::hold`] events in order, reconnects
//! with backoff and flushes them when Redis is back; at shutdown it sends what it still holds
//! within [`FLUSH_AT_EXIT`]. Delivery is at least once: a batch cut off mid-flight is sent
//! again whole. Must never make an emitter wait: it keeps taking events while it backs off,
//! and what it cannot hold it drops and counts. Errors reach the log and `/healthz` redacted
//! (a Redis URL may carry a password).

use super::{EventsConfig, QUEUE_CAPACITY, Stats};
use crate::util::{lock, redact_urls};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events held while Redis is away, by default; past it new events are dropped and counted.
pub const DEFAULT_HOLD: usize = 50_000;
/// Events per pipelined round trip to Redis.
pub const BATCH_MAX: usize = 512;
/// How long the writer lets events gather after the first one before it writes: one round
/// trip per burst instead of one per event, so a busy run costs Redis (and this machine's
/// CPU) little. Events reach Redis at most this much later.
pub const LINGER: Duration = Duration::from_millis(5);
/// One connect or one batch to Redis may take this long: a slow Redis is treated as away.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(3);
/// At shutdown, how long the writer may take to send what it still holds (one connect and a
/// few batches): a Redis that is away must not hold up the exit past Kubernetes' grace.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(3);
/// Reconnect backoff, doubling from the first to the second.
pub const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Why a batch, or the last flush, did not reach Redis. Its text goes to the log and
/// `/healthz` through `redact_urls`; the Redis error is not chained as a source, which would
/// show it unredacted.
#[derive(Debug, thiserror::Error)]
enum SendError {
    /// Redis refused the batch or the connection failed.
    #[error("{0}")]
    Redis(redis::RedisError),
    /// No answer within [`REDIS_TIMEOUT`]: a slow Redis is treated as away.
    #[error("Redis did not answer within {REDIS_TIMEOUT:?}")]
    Timeout,
    /// The last flush at shutdown ran out of [`FLUSH_AT_EXIT`].
    #[error("not done within {FLUSH_AT_EXIT:?}")]
    NotDone,
}

/// Starts the writer on `client` for `cfg`'s agent. Returns the queue it takes events from and
/// the token it cancels when it has ended (after `shutdown`, once it has flushed or given up).
pub(super) fn spawn(
    client: redis::Client,
    cfg: &EventsConfig,
    stats: Arc<Stats>,
    shutdown: CancellationToken,
) -> (mpsc::Sender<Arc<str>>, CancellationToken) {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let written = CancellationToken::new();
    let writer = Writer {
        client,
        channel: format!("ptc:events:{}", cfg.agent_id),
        stream: format!("ptc:stream:{}", cfg.agent_id),
        maxlen: cfg.stream_maxlen,
        hold: cfg.hold.max(1),
        stats,
    };
    let ended = written.clone().drop_guard();
    tokio::spawn(async move {
        writer.run(rx, shutdown).await;
        drop(ended);
    });
    (tx, written)
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
                self.fail(&e.to_string());
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
                None => self.connect().await.map_err(SendError::Redis)?,
            };
            while !held.is_empty() {
                self.send_batch(&mut conn, &mut held).await?;
            }
            Ok(())
        })
        .await
        .unwrap_or(Err(SendError::NotDone));
        if let Err(e) = flushed {
            let left = held.len() as u64;
            self.stats.dropped.fetch_add(left, Ordering::Relaxed);
            tracing::warn!(
                "events: {left} events were not written to Redis at shutdown: {}",
                redact_urls(&e.to_string())
            );
        }
    }

    /// One pipelined batch of the oldest held events; they leave `held` once Redis has them.
    async fn send_batch(
        &self,
        c: &mut redis::aio::MultiplexedConnection,
        held: &mut VecDeque<Arc<str>>,
    ) -> Result<(), SendError> {
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
            Ok(Err(e)) => Err(SendError::Redis(e)),
            Err(_) => Err(SendError::Timeout),
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
