//! Server-sent-event bodies, as both streams of the API send them (`/v1/exec_code` attached,
//! `/v1/events`): one keep-alive for both.
//!
//! Owns the framing's timing only; what each stream says is its module's.

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use std::convert::Infallible;
use std::time::Duration;

/// How often an idle stream sends a comment line, so proxies and the caller's read timeout see
/// a live connection while code, a tool or the event stream is quiet.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `200 text/event-stream` of `events`, with the keep-alive.
pub fn response<S>(events: S) -> Response
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
