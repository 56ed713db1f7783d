//! What a sidecar holds comes back when it is idle: the host callback's idle connections are
//! closed within their idle time when no call comes.

use super::common::TEST_TIMEOUT;
use axum::serve::Listener;
use ptc_sidecar::catalog::source::Callback;
use ptc_sidecar::run::dispatch;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The pool's idle time in the test: short, so the test is.
const IDLE: Duration = Duration::from_secs(1);
/// How late past [`IDLE`] a connection may close on a loaded machine (timers and the host's
/// seeing the close): well under the half period by which the old reaping came late.
const IDLE_SLACK: Duration = Duration::from_millis(300);

/// hyper-util's pool reaped idle connections on a timer of the idle time's period, so one that
/// went idle just after a tick stayed open almost twice the idle time (30 s kept fds for up to
/// 60 s after the load bench). Calls at once, answered one after another over most of a
/// period, leave connections idle from times spread over it: each must close between half the
/// idle time (kept for the next call) and the idle time, with no further call coming.
#[tokio::test]
async fn idle_callback_connections_close_within_the_idle_time() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = Host::start(false).await;
        let http = dispatch::callback_client(IDLE);
        let callback = Callback {
            url: host.url(),
            headers: Default::default(),
        };
        let calls: Vec<_> = (0..6u64)
            .map(|i| {
                let (http, callback) = (http.clone(), callback.clone());
                tokio::spawn(async move {
                    let input = json!({"ms": i * 150});
                    dispatch::callback(&http, &callback, &i.to_string(), "noop", input, None).await
                })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap(), Ok(Value::Null));
        }
        let opened = host.conns.opened.load(Ordering::Relaxed);
        assert!(opened >= 2, "the calls at once shared one connection");
        let deadline = Instant::now() + 3 * IDLE;
        while host.conns.open() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let idle = host.conns.idle_before_close.lock().unwrap().clone();
        assert_eq!(idle.len(), opened, "connections still open: {idle:?}");
        for d in &idle {
            assert!(
                *d >= IDLE / 2 && *d <= IDLE + IDLE_SLACK,
                "idle for {d:?} before it closed, not within {:?}..{:?}: {idle:?}",
                IDLE / 2,
                IDLE + IDLE_SLACK
            );
        }
    })
    .await
    .expect("the idle connection test timed out");
}

/// A host callback server whose `noop` answers after `input.ms` milliseconds, counting its
/// connections and how long each was idle (since its last answer) before it closed.
struct Host {
    addr: SocketAddr,
    conns: Arc<Conns>,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct Conns {
    opened: AtomicUsize,
    idle_before_close: Mutex<Vec<Duration>>,
}

impl Conns {
    fn open(&self) -> usize {
        self.opened.load(Ordering::Relaxed) - self.idle_before_close.lock().unwrap().len()
    }
}

impl Host {
    /// `close`: every answer closes its connection (`Connection: close`).
    async fn start(close: bool) -> Host {
        use axum::http::header::{CONNECTION, HeaderValue};
        use axum::response::IntoResponse;
        use axum::{Json, Router, routing::post};
        let router = Router::new().route(
            "/tools",
            post(move |Json(body): Json<Value>| async move {
                let ms = body["input"]["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let mut answer = Json(json!({"result": null})).into_response();
                if close {
                    answer
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                answer
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(Conns::default());
        let counting = Counting {
            listener,
            conns: conns.clone(),
        };
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(counting, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
                .unwrap();
        });
        Host {
            addr,
            conns,
            shutdown,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/tools", self.addr)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A listener whose connections count themselves.
struct Counting {
    listener: TcpListener,
    conns: Arc<Conns>,
}

impl Listener for Counting {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            if let Ok((stream, addr)) = self.listener.accept().await {
                self.conns.opened.fetch_add(1, Ordering::Relaxed);
                let conn = Conn {
                    stream,
                    last_answer: Instant::now(),
                    conns: self.conns.clone(),
                };
                return (conn, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// One accepted connection: when it closes, how long since its last answer.
struct Conn {
    stream: TcpStream,
    last_answer: Instant,
    conns: Arc<Conns>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let idle = self.last_answer.elapsed();
        self.conns.idle_before_close.lock().unwrap().push(idle);
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.last_answer = Instant::now();
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
