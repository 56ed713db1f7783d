//! `POST /file?name=NAME`, the SDK's `save_file`: the body streamed into the run's files as it
//! arrives, each chunk counted against the run's quotas before it is written (`files::save`),
//! and nothing left of a save that was refused or broke off. The bridge's own checks (the
//! token, the body's bounds) are the parent's.

use super::super::budget::{self, Lender, Resource};
use super::super::calls::RunCtx;
use super::super::files::{ChunkReader, FileError, MAX_SAVE_BYTES};
use super::BODY_TIMEOUT;
use super::auth::{Refusal, authorize, body_timeout, bound_in_time, refuse, reply, too_large};
use crate::run::calls::Calls;
use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

/// Chunks of a `save_file` body queued for the writer at most: what the sidecar holds of one
/// save while the disk catches up (`save_file` once held whole bodies, and wrote 959 MiB in
/// 4.6 s past 64 MiB quotas).
const SAVE_QUEUE: usize = 4;

/// The threads that write `save_file` bodies: a body trickles in for up to [`BODY_TIMEOUT`]
/// and its writer holds a blocking thread meanwhile, so each run always has one
/// ([`budget::SAVES_FLOOR`]) and past that draws from a pool all runs share; the rest of the
/// sidecar's blocking work (file routes, the store) never waits for runs' saves.
static SAVE_THREADS: Lender = Lender::new(
    Resource::Saves,
    budget::SAVES_FLOOR,
    budget::SAVES_CEILING,
    budget::SAVES_POOL,
);

/// Told when a save thread is given back.
static SAVE_THREAD_BACK: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A run's turn to write one body: one of its [`budget::SAVES_CEILING`] saves at once, and a
/// writing thread of its share; both given back when dropped.
struct SaveTurn<'a> {
    run: &'a RunCtx,
    _at_once: tokio::sync::SemaphorePermit<'a>,
}

impl Drop for SaveTurn<'_> {
    fn drop(&mut self) {
        SAVE_THREADS.give_back(&self.run.save_threads, 1);
        SAVE_THREAD_BACK.notify_waiters();
    }
}

/// Waits, within [`BODY_TIMEOUT`], for the run's turn to write a body, without holding a
/// thread; past that the save is refused, saying why.
async fn save_turn(run: &RunCtx) -> Result<SaveTurn<'_>, Response> {
    let deadline = tokio::time::Instant::now() + BODY_TIMEOUT;
    let busy = |what: String| refuse(StatusCode::TOO_MANY_REQUESTS, "limit", &what);
    let Ok(Ok(at_once)) = tokio::time::timeout_at(deadline, run.saves.acquire()).await else {
        budget::refused(Resource::Saves);
        return Err(busy(format!(
            "save_file: {} saves of this run were still under way after {} s, its share; save \
             fewer files at once",
            budget::SAVES_CEILING,
            BODY_TIMEOUT.as_secs()
        )));
    };
    loop {
        let back = SAVE_THREAD_BACK.notified();
        tokio::pin!(back);
        back.as_mut().enable();
        if SAVE_THREADS.take(&run.save_threads, 1).is_ok() {
            return Ok(SaveTurn {
                run,
                _at_once: at_once,
            });
        }
        if tokio::time::timeout_at(deadline, back).await.is_err() {
            return Err(busy(format!(
                "save_file: the sidecar was writing as many files as it writes at once for \
                 {} s; try again",
                BODY_TIMEOUT.as_secs()
            )));
        }
    }
}

#[derive(Deserialize)]
pub(super) struct FileQuery {
    name: Option<String>,
}

/// `POST /file?name=NAME` (the SDK's `save_file`), the body the file's bytes: `{ok, file}` with
/// the file as a result lists it, or `{ok: false, error}`. The body is streamed into the store
/// as it arrives ([`SAVE_QUEUE`] chunks of it held at most), each chunk counted against the
/// run's quotas before it is written; a refused or broken save leaves no file.
pub(super) async fn save_file(
    State(calls): State<Calls>,
    Query(query): Query<FileQuery>,
    request: Request,
) -> Response {
    let name = query.name.unwrap_or_default();
    bound_in_time(&request).await;
    let run = match authorize(&calls, &request) {
        Ok(run) => run,
        Err(refused) => return refused.json(),
    };
    if name.is_empty() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "save_file needs a file name: POST /file?name=NAME",
        );
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_SAVE_BYTES as u64) {
        return too_large(MAX_SAVE_BYTES).json();
    }
    let turn = match save_turn(&run).await {
        Ok(turn) => turn,
        Err(refused) => return refused,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(SAVE_QUEUE);
    let writer = run.clone();
    let saving = tokio::task::spawn_blocking(move || writer.save(&name, &mut ChunkReader::new(rx)));
    let fed = tokio::time::timeout(BODY_TIMEOUT, feed(request.into_body(), &tx)).await;
    let broke = match fed {
        Ok(Ok(())) => None,
        Ok(Err(refusal)) => Some(refusal),
        Err(_) => Some(body_timeout()),
    };
    if let Some(refusal) = &broke {
        // The writer discards what it wrote on an error.
        let _ = tx
            .send(Err(std::io::Error::other(refusal.message.clone())))
            .await;
    }
    drop(tx);
    let saved = saving.await;
    drop(turn);
    match (saved, broke) {
        (Ok(Ok(file)), None) => reply(StatusCode::OK, json!({"ok": true, "file": file})),
        (Ok(Err(e)), None) => refuse(StatusCode::BAD_REQUEST, "file", &e.to_string()),
        // The store refused the file (a quota) before the body broke: that says more.
        (Ok(Err(e)), Some(_)) if !matches!(e, FileError::Body { .. }) => {
            refuse(StatusCode::BAD_REQUEST, "file", &e.to_string())
        }
        (Ok(_), Some(refusal)) => refusal.json(),
        (Err(_), _) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "saving the file failed in the sidecar",
        ),
    }
}

/// Sends `body`'s chunks to the writer until its end, within [`MAX_SAVE_BYTES`]. Once the
/// writer stops taking them (the store refused the file), the rest is read and dropped, so the
/// client, still sending, gets the answer rather than a reset connection.
async fn feed(
    body: axum::body::Body,
    tx: &tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
) -> Result<(), Refusal> {
    use tokio_stream::StreamExt;
    let mut stream = body.into_data_stream();
    let (mut total, mut refused) = (0usize, false);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Refusal {
            status: StatusCode::BAD_REQUEST,
            kind: "bad_request",
            message: format!("the body broke off: {e}"),
        })?;
        total += chunk.len();
        if total > MAX_SAVE_BYTES {
            return Err(too_large(MAX_SAVE_BYTES));
        }
        if !refused && tx.send(Ok(chunk)).await.is_err() {
            refused = true;
        }
    }
    Ok(())
}
