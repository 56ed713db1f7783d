//! The dashboard: `GET /dashboard`, one page (`assets/dashboard.html`, embedded in the binary:
//! no CDN, no build step) that draws `GET /v1/dashboard/state` once a second: this sidecar's
//! own runs, their calls as a waterfall on a time axis, per-tool statistics and catalog
//! reloads, folded from its events by [`crate::dashboard::Model`] (bounded); and a run opened
//! from `GET /v1/dashboard/run?agent=&exec_id=` (its code, stdout, stderr and each call's
//! arguments and result, as excerpts). The page holds no data, so it is served without the key;
//! the data behind it needs the key like the rest of the API (the page asks for it when told
//! 401). What the page shows of a run is the model's code and its tools' output, hostile text:
//! the page sets it as text only, and its Content-Security-Policy lets no script run but its
//! own (a nonce per response).
//!
//! Owns the feeding task, started by the first request with the events the sidecar kept since
//! its start (`Events::recent_and_subscribe`: the page opened after eleven runs shows them),
//! then the live ones. Until someone looks, the sidecar pays for the ring of recent events
//! only (`events::RING_BYTES`), not for folding. It must never slow a run: it reads the
//! events' broadcast, and one that falls behind skips what it missed (counted in `missed`).

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
    Router::new()
        .route("/v1/dashboard/state", get(state))
        .route("/v1/dashboard/run", get(run))
}

/// `GET /dashboard` (and `/`, for `ptc-sidecar dashboard`): the page, open to anyone who
/// reaches the port (it shows nothing by itself), with a Content-Security-Policy that lets
/// only its own script run (see [`page`]).
pub fn page_router<S: Clone + Send + Sync + 'static>(with_root: bool) -> Router<S> {
    let router = Router::new().route("/dashboard", get(page));
    match with_root {
        true => router.route("/", get(page)),
        false => router,
    }
}

/// Where the page's script takes the nonce of its response.
const NONCE_SLOT: &str = "{{nonce}}";

/// The page with a fresh nonce: the one `<script>` carries it and the policy allows only it,
/// so no markup that text shown by the page could become would run (the page never makes
/// markup of it; this is the second wall). Nothing but the page's own origin may be fetched,
/// framed into or posted to.
async fn page() -> Response {
    let mut random = [0u8; 16];
    rand::fill(&mut random);
    let nonce = crate::util::hex(&random);
    let policy = format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; \
         connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    );
    (
        [
            (
                axum::http::header::CONTENT_TYPE,
                "text/html; charset=utf-8".to_string(),
            ),
            (axum::http::header::CACHE_CONTROL, "no-cache".to_string()),
            (axum::http::header::CONTENT_SECURITY_POLICY, policy),
            (
                axum::http::header::X_CONTENT_TYPE_OPTIONS,
                "nosniff".to_string(),
            ),
        ],
        PAGE.replace(NONCE_SLOT, &nonce),
    )
        .into_response()
}

#[derive(Deserialize)]
pub struct ViewQuery {
    agent: Option<String>,
    tool: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
pub struct RunQuery {
    agent: Option<String>,
    exec_id: Option<String>,
}

/// This sidecar's board, made by the first request: the events it kept since start folded in,
/// then the live ones from where they end.
fn board(state: &AppState) -> Arc<Board> {
    state
        .board
        .get_or_init(|| {
            let board = Arc::new(Board::default());
            let (recent, live) = state.events.recent_and_subscribe();
            for json in &recent {
                board.fold(json);
            }
            tokio::spawn(feed(live, board.clone()));
            board
        })
        .clone()
}

async fn state(State(state): State<AppState>, Query(q): Query<ViewQuery>) -> Response {
    view(&board(&state), q)
}

async fn run(State(state): State<AppState>, Query(q): Query<RunQuery>) -> Response {
    one_run(&board(&state), q)
}

/// `GET /v1/dashboard/state` and `GET /v1/dashboard/run` of `ptc-sidecar dashboard`: every
/// agent's board, fed from Redis by the command (see [`Board::fold`]); with `key`, only for
/// requests that present it, as the control API requires `PTC_API_KEY` ([`super::auth`]).
pub fn board_router(board: Arc<Board>, key: Option<String>) -> Router {
    let for_run = board.clone();
    let router = Router::new()
        .route(
            "/v1/dashboard/state",
            get(move |Query(q): Query<ViewQuery>| async move { view(&board, q) }),
        )
        .route(
            "/v1/dashboard/run",
            get(move |Query(q): Query<RunQuery>| async move { one_run(&for_run, q) }),
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

/// One run with its excerpts (`crate::dashboard::Model::run`), or 404 when it is not kept.
fn one_run(board: &Board, q: RunQuery) -> Response {
    let (Some(agent), Some(exec_id)) = (q.agent, q.exec_id) else {
        return super::ApiError::BadRequest(
            "say which run: ?agent=<agent id>&exec_id=<run id>, as /v1/dashboard/state lists them"
                .into(),
        )
        .into_response();
    };
    match lock(&board.model).run(&agent, &exec_id) {
        Some(run) => Json(run).into_response(),
        None => super::ApiError::NotFound(format!(
            "no run {:?} of agent {:?} is kept (the dashboard keeps the latest {})",
            crate::util::cut(&exec_id, 64),
            crate::util::cut(&agent, 64),
            crate::dashboard::MAX_RUNS
        ))
        .into_response(),
    }
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
