//! The IPC bridge: the loopback HTTP server the Python SDK calls (`POST /call`),
//! `POST /tool_call` for sandboxes that call tools themselves (host protocol "direct posting",
//! docs/protocols.md), and `POST /bash/{tool}` for the tool functions of a bash run (the body is
//! the one JSON argument, the answer the result as compact JSON or the error as one line of
//! text): same token, same dispatch and policy. `POST /search` (the SDK's `search_tools`) and
//! `POST /describe` (what `describe()` adds to catalog.json: the learned result shape) read the
//! run's catalog and the learned shapes, with the same token. `POST /file?name=` (the SDK's
//! `save_file`) is [`file`]'s: the body streamed into the run's files as it arrives.
//!
//! Owns the wire: bearer-token check before anything is read or dispatched, the body limit,
//! JSON error bodies, and the bounds on connections: how many at once (all runs together, and
//! one run's own), how long a connection may take to send a request's head or sit idle, how
//! long a body may take. What a call does is the calls handle's business
//! (`calls::Calls::call`); this module sees nothing of the runner. The routes are [`routes`]'s,
//! the token's and the body's checks and the shapes of a refusal [`auth`]'s.
//!
//! Two kinds of listener serve the same routes: the sidecar's loopback one (runs without a
//! network namespace of their own), and a run's own [`Bridge`], a socket listening inside the
//! run's network namespace that the sidecar accepts on from its own, which answers only that
//! run's token.

mod auth;
mod file;
mod lookup;
mod loopback;
mod routes;

use super::calls::Calls;
use axum::Router;
use loopback::{Loopback, Slot};
use routes::router;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// Largest `/call` body: arguments are data for one tool call, not a file transfer.
pub const MAX_CALL_BYTES: usize = 8 << 20;
/// Largest `/search` and `/describe` body: a query of [`MAX_QUERY_CHARS`] or a tool name,
/// with room for JSON escapes; anything bigger is not a question.
pub const MAX_LOOKUP_BYTES: usize = 16 << 10;

/// Connections to one run's [`Bridge`] at once (the SDK keeps at most 32; bash tool functions
/// open one per call in flight); the next waits in the run's backlog. Every run has its
/// share whatever the others hold: the bridge's bound overall is this times the runs at once
/// (`PTC_MAX_RUNS`), less where the sidecar's descriptors are too few ([`run_share`]).
pub const MAX_RUN_CONNECTIONS: usize = 64;

/// The least share of connections a run's bridge gets, however few descriptors there are.
pub const MIN_RUN_CONNECTIONS: usize = 8;

/// How long a connection may take to send a request's head, and sit idle between requests,
/// before it is closed: a connection held open sending nothing holds a descriptor for nothing.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request's body may take to arrive whole (8 MB over loopback takes milliseconds).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a listener of the bridge serves with: the routes, and the loopback listener's
/// connections by run. Cloneable.
#[derive(Clone)]
pub struct Bridges {
    router: Router,
    /// The loopback listener's connections ([`loopback_cap`]), a share of them per run.
    loopback: Arc<Loopback>,
    /// Each run bridge's connections at once ([`run_share`]).
    run_share: usize,
    shutdown: CancellationToken,
    /// The listeners accepted on now, by the socket's identity: a fork server's network
    /// namespace serves its runs in turn (`ptc_zygote._NetSlots`), each handed the same
    /// listening socket, and one socket has one acceptor. Kept [`LISTEN_GRACE`] after its last
    /// run let go: the namespace's next run may have connected before its own handle came.
    listening: Arc<std::sync::Mutex<Acceptors>>,
}

/// The sockets accepted on, by (device, inode): duplicates of one socket share its acceptor.
type Acceptors = HashMap<(u64, u64), Arc<Listening>>;

/// How long a listening socket no run holds is still accepted on: a fork server's namespace
/// serves its next run on the same socket, whose code may connect before the sidecar has its
/// handle (milliseconds); a socket of a run that had its own namespace is dropped this long
/// after its run.
pub const LISTEN_GRACE: Duration = Duration::from_secs(2);

/// Drops the sockets no run held for [`LISTEN_GRACE`] (the map holds one reference; each
/// run's [`Bridge`] another).
fn prune(acceptors: &mut Acceptors) {
    acceptors.retain(|_, l| Arc::strong_count(l) > 1 || !l.idle_for(LISTEN_GRACE));
}

/// How long a request through a run's bridge waits for its token to be the one the bridge
/// answers: the run's code may call before the sidecar has bound the run to its bridge.
pub const BIND_WAIT: Duration = Duration::from_secs(2);

impl Bridges {
    /// The bridges of a sidecar that runs `max_runs` runs at once.
    pub fn new(calls: Calls, max_runs: usize, shutdown: CancellationToken) -> Bridges {
        let descriptors = descriptors();
        let run_share = run_share(max_runs, descriptors);
        if run_share < MAX_RUN_CONNECTIONS {
            tracing::warn!(
                "{descriptors} descriptors (RLIMIT_NOFILE) for {max_runs} runs at once: each \
                 run's IPC bridge gets {run_share} connections instead of \
                 {MAX_RUN_CONNECTIONS}; raise the limit or lower PTC_MAX_RUNS"
            );
        }
        Bridges {
            router: router(calls),
            loopback: Loopback::new(loopback_cap(run_share, max_runs), run_share),
            run_share,
            shutdown,
            listening: Arc::default(),
        }
    }

    /// Each run bridge's share of connections.
    pub fn run_share(&self) -> usize {
        self.run_share
    }

    /// Serves the sidecar's loopback listener until shutdown: any run's token.
    pub async fn serve(self, listener: tokio::net::TcpListener) {
        let stop = self.shutdown.clone();
        accept(listener, self, None, None, stop).await;
    }
}

/// This process's descriptors (the soft `RLIMIT_NOFILE`; the sidecar raises it to the hard
/// one at start).
fn descriptors() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX),
        _ => 1024,
    }
}

/// The loopback listener's connections at once (runs without a network namespace of their
/// own): every run's share, and one share more for connections no run has claimed yet. A
/// sidecar's runs either all have namespaces or none do, so the loopback and the runs' own
/// bridges never hold their bounds at once: half the descriptors ([`run_share`]), whichever
/// serves (24,800 idle connections once took the sidecar to its descriptor limit).
pub fn loopback_cap(run_share: usize, max_runs: usize) -> usize {
    run_share * (max_runs.max(1) + 1)
}

/// Each run bridge's connections: [`MAX_RUN_CONNECTIONS`], or as many as half the descriptors
/// give each of `max_runs` runs, never under [`MIN_RUN_CONNECTIONS`]. The bridge must never take
/// the sidecar to its descriptor limit, and every run must always be able to open its own.
pub fn run_share(max_runs: usize, descriptors: usize) -> usize {
    (descriptors / 2 / max_runs.max(1)).clamp(MIN_RUN_CONNECTIONS, MAX_RUN_CONNECTIONS)
}

/// One run's own end of the bridge: a socket listening inside the run's network namespace
/// (the child made it, `ptc_sandbox.enter`, or the fork server did, for a namespace its runs
/// use in turn), accepted on here while a handle on it lives. It answers only the token it is
/// bound to: a run's, while that run goes on (a session's interpreter is bound to each of its
/// runs in turn, and to none between them).
pub struct Bridge {
    listening: Arc<Listening>,
    /// The sockets accepted on, to drop this one from once no run held it for the grace.
    acceptors: Weak<std::sync::Mutex<Acceptors>>,
    /// The token this handle bound last: the one its `unbind` (and drop) may take back, and
    /// no other (the namespace may serve the next run by then).
    bound: std::sync::Mutex<Option<Arc<str>>>,
}

/// One listening socket accepted on, until the last [`Bridge`] on it is dropped.
struct Listening {
    token: watch::Sender<Option<Arc<str>>>,
    stop: CancellationToken,
    /// What ends each run's connections, by its token: a session's interpreter keeps its
    /// bridge for its life, and a fork server's namespace serves run after run, but each run's
    /// connections end with the run (the SDK's idle ones of an earlier run would otherwise
    /// hold the run's connection count). A connection is a run's from its first request with
    /// that run's token ([`Claim`]): one the next run opened before its token was bound here
    /// is not ended with the run before it (once, 2 to 3 runs in 100 under load lost a call
    /// that way, "ConnectionResetError").
    runs: std::sync::Mutex<HashMap<Arc<str>, CancellationToken>>,
    /// When its last [`Bridge`] let go.
    idle_since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Listening {
    /// Whether no run held it for `grace` (it may have been taken again since).
    fn idle_for(&self, grace: Duration) -> bool {
        crate::util::lock(&self.idle_since).is_some_and(|t| t.elapsed() >= grace)
    }

    /// Ends the connections of the run of `token`.
    fn end(&self, token: &str) {
        if let Some(ends) = crate::util::lock(&self.runs).remove(token) {
            ends.cancel();
        }
    }

    /// What ends the connections of the run of `token`.
    fn ends_of(&self, token: &Arc<str>) -> CancellationToken {
        crate::util::lock(&self.runs)
            .entry(token.clone())
            .or_insert_with(|| self.stop.child_token())
            .clone()
    }
}

/// The run a connection is of, once it is: its token, and what ends the run's connections.
type Claimed = Option<(Arc<str>, CancellationToken)>;

/// One connection to a run's [`Bridge`]: told, at its first request a run's token may make,
/// what ends that run's connections.
#[derive(Clone)]
struct Claim {
    listening: Weak<Listening>,
    claimed: Arc<watch::Sender<Claimed>>,
}

impl Claim {
    /// Makes the connection the run's of `token` (the token the bridge answers now).
    fn claim(&self, token: &Arc<str>) {
        let mine = self
            .claimed
            .borrow()
            .as_ref()
            .is_some_and(|(t, _)| t == token);
        if mine {
            return;
        }
        if let Some(listening) = self.listening.upgrade() {
            let ends = listening.ends_of(token);
            self.claimed.send_replace(Some((token.clone(), ends)));
        }
    }
}

impl Drop for Listening {
    /// Stops accepting, and ends every connection.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What a request through a run's [`Bridge`] carries: the token the bridge answers now.
#[derive(Clone)]
struct Binding(watch::Receiver<Option<Arc<str>>>);

impl Bridge {
    /// Accepts on `listener` (a listening TCP socket in the run's network namespace), or joins
    /// the acceptor already on that socket (a duplicate of it: the namespace's earlier run may
    /// not have let go of its handle yet).
    pub fn start(bridges: &Bridges, listener: OwnedFd) -> std::io::Result<Bridge> {
        let file = std::fs::File::from(listener);
        let meta = file.metadata()?;
        let identity = (meta.dev(), meta.ino());
        let mut listening = crate::util::lock(&bridges.listening);
        prune(&mut listening);
        if let Some(on) = listening.get(&identity) {
            return Ok(Bridge::on(on.clone(), &bridges.listening));
        }
        let listener = std::net::TcpListener::from(OwnedFd::from(file));
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (token, bound) = watch::channel(None);
        let stop = bridges.shutdown.child_token();
        let run_connections = Arc::new(Semaphore::new(bridges.run_share));
        let on = Arc::new(Listening {
            token,
            stop: stop.clone(),
            runs: std::sync::Mutex::default(),
            idle_since: std::sync::Mutex::new(None),
        });
        tokio::spawn(accept(
            listener,
            bridges.clone(),
            Some(Binding(bound)),
            Some((run_connections, Arc::downgrade(&on))),
            stop,
        ));
        listening.insert(identity, on.clone());
        Ok(Bridge::on(on, &bridges.listening))
    }

    fn on(listening: Arc<Listening>, acceptors: &Arc<std::sync::Mutex<Acceptors>>) -> Bridge {
        *crate::util::lock(&listening.idle_since) = None;
        Bridge {
            listening,
            acceptors: Arc::downgrade(acceptors),
            bound: std::sync::Mutex::new(None),
        }
    }

    /// Answers `token` from now on (a run's, for as long as it goes on). Another run's token
    /// bound until now is answered no more, and its connections end.
    pub fn bind(&self, token: &str) {
        let token: Arc<str> = token.into();
        let listening = &self.listening;
        let before = listening.token.send_replace(Some(token.clone()));
        if let Some(other) = before.filter(|t| *t != token) {
            listening.end(&other);
        }
        *crate::util::lock(&self.bound) = Some(token);
    }

    /// Answers no token until the next [`bind`](Self::bind), and ends the connections of the
    /// run that was bound: when that is still the token this handle bound.
    pub fn unbind(&self) {
        let Some(mine) = crate::util::lock(&self.bound).take() else {
            return;
        };
        self.listening.token.send_if_modified(|now| {
            let ours = now.as_ref().is_some_and(|t| *t == mine);
            if ours {
                *now = None;
            }
            ours
        });
        // Its connections end whether or not the next run's token is bound already.
        self.listening.end(&mine);
    }
}

impl Drop for Bridge {
    /// Answers this handle's token no more, and ends its run's connections; the last handle
    /// on a socket stops accepting on it.
    fn drop(&mut self) {
        self.unbind();
        *crate::util::lock(&self.listening.idle_since) = Some(std::time::Instant::now());
        // Once the grace is over, the socket goes unless a run took it again meanwhile.
        let acceptors = self.acceptors.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(LISTEN_GRACE).await;
                if let Some(acceptors) = acceptors.upgrade() {
                    prune(&mut crate::util::lock(&acceptors));
                }
            });
        }
    }
}

/// Accepts connections until `stop`, each within the loopback listener's count or, when the
/// listener is one run's, within the run's share, and serves each on its own task: HTTP/1,
/// heads within [`HEADER_TIMEOUT`], idle no longer than that either, ended with the run whose
/// token it first presents ([`Claim`]). A connection over the loopback's count is closed at
/// once; one over the run's share waits in the run's backlog.
async fn accept(
    listener: tokio::net::TcpListener,
    bridges: Bridges,
    binding: Option<Binding>,
    run: Option<(Arc<Semaphore>, Weak<Listening>)>,
    stop: CancellationToken,
) {
    let router = match binding {
        Some(binding) => bridges.router.clone().layer(axum::Extension(binding)),
        None => bridges.router.clone(),
    };
    loop {
        // A run's listener accepts no connection over the run's count: the next one waits in
        // the run's own backlog (its network namespace's) until one of the run's closes.
        let own = match &run {
            Some((count, _)) => tokio::select! {
                _ = stop.cancelled() => return,
                permit = count.clone().acquire_owned() => permit.ok(),
            },
            None => None,
        };
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most likely: give the others a moment to close.
                    tracing::debug!("IPC bridge: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // The loopback's place: room is made by closing its oldest unclaimed connection.
        let (all, evicted) = match &run {
            Some(_) => (None, None),
            None => match bridges.loopback.admit() {
                Some((slot, close)) => (Some(Arc::new(slot)), Some(close)),
                None => {
                    tracing::debug!("IPC bridge: every loopback connection is a run's; one closed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (router, claimed) = match (&run, &all) {
            (Some((_, listening)), _) => {
                let (claimed, watching) = watch::channel(None);
                let claim = Claim {
                    listening: listening.clone(),
                    claimed: Arc::new(claimed),
                };
                (router.clone().layer(axum::Extension(claim)), Some(watching))
            }
            (None, Some(slot)) => {
                let slot = LoopbackSlot(slot.clone());
                (router.clone().layer(axum::Extension(slot)), None)
            }
            (None, None) => (router.clone(), None),
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let _places = (all, own);
            let evicted = async {
                match evicted {
                    Some(close) => close.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = serve_connection(stream, router, stop, claimed) => {}
                _ = evicted => {}
            }
        });
    }
}

/// A loopback connection's place ([`Loopback`]), claimed by the run whose token its requests
/// present.
#[derive(Clone)]
struct LoopbackSlot(Arc<Slot>);

/// One connection, until it closes, times out, `stop`, or the run that `claimed` it ends.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    router: Router,
    stop: CancellationToken,
    claimed: Option<watch::Receiver<Claimed>>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let service = hyper_util::service::TowerToHyperService::new(router);
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let run_ended = async {
        let Some(mut claimed) = claimed else {
            return std::future::pending().await;
        };
        loop {
            let ends = claimed.borrow_and_update().as_ref().map(|(_, e)| e.clone());
            match ends {
                Some(ends) => {
                    tokio::select! {
                        _ = ends.cancelled() => return,
                        changed = claimed.changed() => if changed.is_err() {
                            return std::future::pending().await;
                        },
                    }
                }
                None => {
                    if claimed.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = stop.cancelled() => {}
        _ = run_ended => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::dispatch::Backends;
    use crate::run::shapes::{Shapes, ShapesConfig};
    use std::io::{Read, Write};

    fn bridges() -> Bridges {
        let shapes = Shapes::load(ShapesConfig {
            learn: false,
            agent: "ipc-test".into(),
            state_dir: None,
        });
        let calls = Calls::new(Backends::new(Duration::from_secs(5)), shapes);
        Bridges::new(calls, 32, CancellationToken::new())
    }

    fn bound(bridge: &Bridge) -> Option<String> {
        bridge
            .listening
            .token
            .borrow()
            .as_deref()
            .map(str::to_string)
    }

    /// The status line of a `/call` with `token` to `addr`.
    async fn call_status(addr: std::net::SocketAddr, token: &str) -> String {
        let token = token.to_string();
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let body = r#"{"tool":"nothing_here","args":{}}"#;
            write!(
                s,
                "POST /call HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out.lines().next().unwrap_or_default().to_string()
        })
        .await
        .unwrap()
    }

    /// A fork server's network namespace serves run after run, each handed a duplicate of its
    /// listening socket: one acceptor, and the later run's token kept when the run before lets
    /// go of its handle late.
    #[tokio::test]
    async fn duplicates_of_a_socket_share_one_acceptor_and_the_later_run_keeps_its_token() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let socket = OwnedFd::from(listener);
        let duplicate = socket.try_clone().unwrap();
        let bridges = bridges();
        let before = Bridge::start(&bridges, socket).unwrap();
        before.bind("token-before");
        let after = Bridge::start(&bridges, duplicate).unwrap();
        assert!(Arc::ptr_eq(&before.listening, &after.listening));
        assert_eq!(crate::util::lock(&bridges.listening).len(), 1);
        after.bind("token-after");
        // One acceptor answers (no run is registered here, so any token is refused; the
        // escape suite's `what_a_run_leaves_in_its_network_namespace_is_refused` has the
        // later run's calls go through, with real runs).
        let status = call_status(addr, "token-before").await;
        assert!(status.starts_with("HTTP/1.1 401"), "{status}");
        // The run before lets go after the next run was bound: the next keeps its token.
        before.unbind();
        drop(before);
        assert_eq!(bound(&after).as_deref(), Some("token-after"));
        after.unbind();
        assert_eq!(bound(&after), None);
    }

    /// A socket no run holds is accepted on for [`LISTEN_GRACE`] (the namespace's next run
    /// joins the same acceptor), and stopped once the grace is over and another bridge starts.
    #[tokio::test]
    async fn a_socket_no_run_holds_is_accepted_on_for_the_grace_then_stopped() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = OwnedFd::from(listener);
        let duplicate = socket.try_clone().unwrap();
        let bridges = bridges();
        let first = Bridge::start(&bridges, socket).unwrap();
        let stop = first.listening.stop.clone();
        drop(first);
        assert!(!stop.is_cancelled());
        let second = Bridge::start(&bridges, duplicate).unwrap();
        assert!(!second.listening.stop.is_cancelled());
        let listening = second.listening.clone();
        drop(second);
        drop(listening);
        // Past the grace: the next bridge started (on another socket) stops it.
        for l in crate::util::lock(&bridges.listening).values() {
            *crate::util::lock(&l.idle_since) = Some(std::time::Instant::now() - LISTEN_GRACE);
        }
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _third = Bridge::start(&bridges, OwnedFd::from(other)).unwrap();
        assert!(stop.is_cancelled());
        assert_eq!(crate::util::lock(&bridges.listening).len(), 1);
    }
}
