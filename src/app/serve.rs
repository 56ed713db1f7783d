//! Serving the control API: the listener it is bound to (TCP or a Unix socket) and the server
//! that runs `api::router` on it until shutdown, with the grace its requests still get.
//!
//! Owns binding and serving only; what the routes do is [`api`]'s, and what is started before
//! serving (and stopped after) is the rest of [`app`](super)'s.

use crate::api::{self, AppState};
use crate::config::Listen;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Once the runs are over, how long the requests still open get to finish (a run's answer being
/// written, an event stream) before the server stops: the HTTP side must not hold up the exit.
pub const REQUESTS_GRACE: Duration = Duration::from_secs(3);

/// A bound control-API listener.
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listener {
    pub async fn bind(listen: &Listen) -> std::io::Result<Listener> {
        Ok(match listen {
            Listen::Tcp(addr) => Listener::Tcp(tokio::net::TcpListener::bind(addr).await?),
            Listen::Unix(path) => {
                // A stale socket from a previous run would make bind fail.
                if path.exists() {
                    std::fs::remove_file(path)?;
                }
                Listener::Unix(tokio::net::UnixListener::bind(path)?)
            }
        })
    }

    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
                .unwrap_or_default(),
        }
    }
}

/// Serves the control API on `listener` until `shutdown` is cancelled, then lets in-flight
/// requests finish for at most [`REQUESTS_GRACE`].
pub async fn run(
    listener: Listener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = api::router(state);
    let graceful = {
        let shutdown = shutdown.clone();
        async move { shutdown.cancelled().await }
    };
    let serve = async {
        match listener {
            Listener::Tcp(l) => {
                axum::serve(l, router)
                    .with_graceful_shutdown(graceful)
                    .await
            }
            Listener::Unix(l) => {
                axum::serve(l, router)
                    .with_graceful_shutdown(graceful)
                    .await
            }
        }
    };
    tokio::select! {
        result = serve => result,
        _ = async { shutdown.cancelled().await; tokio::time::sleep(REQUESTS_GRACE).await } => {
            tracing::warn!("in-flight requests did not finish within {REQUESTS_GRACE:?}; stopping");
            Ok(())
        }
    }
}
