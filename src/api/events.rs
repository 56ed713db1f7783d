//! `GET /v1/events`: the live event stream as server-sent events, with or without Redis.
//!
//! Each event is one `data:` line holding the same JSON as in Redis (docs/events.md). A
//! subscriber that falls more than `events::LIVE_CAPACITY` events behind is told how many it
//! missed (`event: lagged`) and carries on; the sidecar never waits for it. A quiet stream
//! sends the keep-alive of [`super::sse`].

use super::sse;
use super::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::response::sse::Event;
use axum::routing::get;
use std::convert::Infallible;
use tokio::sync::broadcast::error::RecvError;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/events", get(stream))
}

async fn stream(State(state): State<AppState>) -> Response {
    let mut rx = state.events.subscribe();
    let events = async_stream(move |tx| async move {
        loop {
            let item = match rx.recv().await {
                Ok(json) => Event::default().data(json.as_ref()),
                Err(RecvError::Lagged(n)) => Event::default()
                    .event("lagged")
                    .data(format!("{{\"missed\": {n}}}")),
                Err(RecvError::Closed) => return,
            };
            if tx.send(Ok::<_, Infallible>(item)).await.is_err() {
                return;
            }
        }
    });
    sse::response(events)
}

/// A stream fed by a task through a small channel; the task ends when the client goes away.
fn async_stream<T, F, Fut>(producer: F) -> tokio_stream::wrappers::ReceiverStream<T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    /// Events buffered per client between the subscription and the socket.
    const CLIENT_BUFFER: usize = 64;
    let (tx, rx) = tokio::sync::mpsc::channel(CLIENT_BUFFER);
    tokio::spawn(producer(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
