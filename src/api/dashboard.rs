//! The dashboard: `GET /dashboard`, one page (`assets/dashboard.html`, embedded in the binary:
//! no CDN, no build step) that draws `GET /v1/dashboard/state` once a second: this sidecar's
//! own runs, their calls as a waterfall, per-tool statistics and catalog reloads, folded from
//! its in-process events by [`crate::dashboard::Model`] (bounded). The page holds no data, so
//! it is served without the key; the state behind it needs the key like the rest of the API
//! (the page asks for it when told 401).
//!
//! Owns the feeding task, started by the first request: until someone looks, the sidecar pays
//! nothing for it. It must never slow a run: it reads the events' broadcast, and one that
//! falls behind skips what it missed (counted in `missed`).

use super::state::AppState;
use crate::dashboard::{Filter, Model};
use crate::util::{lock, now_ms};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::broadcast::error::RecvError;

/// Runs a view shows when the request does not say.
const DEFAULT_LIMIT: usize = 50;

/// The model and what the feeder missed; made by the first request.
#[derive(Default)]
pub struct Board {
    model: Mutex<Model>,
    missed: std::sync::atomic::AtomicU64,
}

/// The board of this sidecar, started on first use (see the module doc).
pub type LazyBoard = Arc<OnceLock<Arc<Board>>>;

/// The page, as built into the binary.
pub const PAGE: &str = include_str!("../../assets/dashboard.html");

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/dashboard/state", get(state))
}

/// `GET /dashboard` (and `/`, for `ptc-sidecar dashboard`): the page, open to anyone who
/// reaches the port (it shows nothing by itself).
pub fn page_router<S: Clone + Send + Sync + 'static>(with_root: bool) -> Router<S> {
    let page = || async {
        (
            [
                (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (axum::http::header::CACHE_CONTROL, "no-cache"),
            ],
            PAGE,
        )
    };
    let router = Router::new().route("/dashboard", get(page));
    match with_root {
        true => router.route("/", get(page)),
        false => router,
    }
}

#[derive(Deserialize)]
pub struct ViewQuery {
    agent: Option<String>,
    tool: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
}

async fn state(State(state): State<AppState>, Query(q): Query<ViewQuery>) -> Response {
    let board = state
        .board
        .get_or_init(|| {
            let board = Arc::new(Board::default());
            tokio::spawn(feed(state.events.subscribe(), board.clone()));
            board
        })
        .clone();
    view(&board, q)
}

/// `GET /v1/dashboard/state` of `ptc-sidecar dashboard`: every agent's board, fed from Redis
/// by the command (see [`Board::fold`]); with `key`, only for requests that present it, as the
/// control API requires `PTC_API_KEY` ([`super::auth`]).
pub fn board_router(board: Arc<Board>, key: Option<String>) -> Router {
    let router = Router::new().route(
        "/v1/dashboard/state",
        get(move |Query(q): Query<ViewQuery>| async move { view(&board, q) }),
    );
    let Some(key) = key else {
        return router;
    };
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let known = super::auth::carries(request.headers(), &key);
            async move {
                match known {
                    true => next.run(request).await,
                    false => super::ApiError::Unauthorized.into_response(),
                }
            }
        },
    ))
}

impl Board {
    /// Folds one event given as JSON text (what Redis holds); text that is not JSON is skipped.
    pub fn fold(&self, json: &str) {
        if let Ok(event) = serde_json::from_str(json) {
            lock(&self.model).fold(&event);
        }
    }
}

fn view(board: &Board, q: ViewQuery) -> Response {
    let filter = Filter {
        agent: q.agent,
        tool: q.tool,
        status: q.status,
    };
    let limit = q
        .limit
        .unwrap_or(DEFAULT_LIMIT)
        .min(crate::dashboard::MAX_RUNS);
    let mut view = lock(&board.model).view(now_ms(), &filter, limit);
    view["missed"] = board
        .missed
        .load(std::sync::atomic::Ordering::Relaxed)
        .into();
    Json(view).into_response()
}

/// Folds every event into the board until the events end.
async fn feed(mut rx: tokio::sync::broadcast::Receiver<Arc<str>>, board: Arc<Board>) {
    loop {
        match rx.recv().await {
            Ok(json) => board.fold(&json),
            Err(RecvError::Lagged(n)) => {
                board
                    .missed
                    .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            Err(RecvError::Closed) => return,
        }
    }
}
