//! `POST /file?name=NAME`, the SDK's `save_file`: the body streamed into the run's files as it
//! arrives, each chunk counted against the run's quotas before it is written (`files::save`),
//! and nothing left of a save that was refused or broke off. The bridge's own checks (the
//! token, the body's bounds) are the parent's.

use super::super::files::{ChunkReader, FileError, MAX_SAVE_BYTES};
use super::{BODY_TIMEOUT, Refusal, authorize, body_timeout, refuse, reply, too_large};
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
    let (tx, rx) = tokio::sync::mpsc::channel(SAVE_QUEUE);
    let saving = tokio::task::spawn_blocking(move || run.save(&name, &mut ChunkReader::new(rx)));
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
    match (saving.await, broke) {
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
