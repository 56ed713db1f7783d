//! A session's files on the sidecar's own API: `GET /v1/sessions/{id}/files` and
//! `GET | PUT | DELETE /v1/sessions/{id}/files/{path}`. The same store as LibreChat's files
//! (`librechat/files.rs`), another front door: names checked the same way
//! (`session::check_name`), every access through the store, which never follows a link.
//!
//! Owns these routes' shapes. It must not walk a session's folder itself, nor run code.

use super::error::ApiError;
use super::workspace::{blocking, file_response, lock_for_files, session_file_url, write_stream};
use crate::session::{FileInfo, Session, Sessions, check_name};
use crate::util::{mime_of, rfc3339};
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::Arc;

/// The files routes; the caller puts `PTC_API_KEY` in front of them.
pub fn router<S>(sessions: Sessions) -> Router<S> {
    let limit = usize::try_from(sessions.config().max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    Router::new()
        .route("/v1/sessions/{id}/files", get(list))
        .route(
            "/v1/sessions/{id}/files/{*path}",
            get(download).put(upload).delete(remove),
        )
        .layer(DefaultBodyLimit::max(limit))
        .with_state(sessions)
}

/// A file as these routes show it.
fn entry(session: &str, f: &FileInfo) -> Value {
    json!({
        "name": f.name,
        "size": f.size,
        "mime": mime_of(&f.name),
        "modified": rfc3339(f.modified),
        "url": session_file_url(session, &f.name),
    })
}

/// The session `id` names, if it exists.
fn existing(sessions: &Sessions, id: &str) -> Result<Arc<Session>, ApiError> {
    Sessions::check_id(id)?;
    sessions.get(id).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no session {id} (it may have expired: PTC_SESSION_TTL)"
        ))
    })
}

async fn list(
    State(sessions): State<Sessions>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session = existing(&sessions, &id)?;
    let files = blocking(move || session.files()).await?;
    let files: Vec<Value> = files.iter().map(|f| entry(&id, f)).collect();
    Ok(Json(json!({"session_id": id, "files": files})).into_response())
}

async fn download(
    State(sessions): State<Sessions>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let session = existing(&sessions, &id)?;
    let name = check_name(&path)?;
    let wanted = name.clone();
    let (info, file) = blocking(move || session.open_name(&wanted))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("session {id} has no file {name:?}")))?;
    Ok(file_response(&info, file))
}

/// `PUT`: the body becomes the file (made with its folders, or replaced), within the quota;
/// a session that does not exist yet is made, so files can be there before its first run.
async fn upload(
    State(sessions): State<Sessions>,
    Path((id, path)): Path<(String, String)>,
    body: Body,
) -> Result<Response, ApiError> {
    Sessions::check_id(&id)?;
    let name = check_name(&path)?;
    let session = sessions.open(&id)?;
    let _lock = lock_for_files(&session).await?;
    let info = write_stream(&session, &name, body.into_data_stream(), |e| {
        ApiError::BadRequest(format!("the body broke off: {e}"))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(entry(&id, &info))).into_response())
}

async fn remove(
    State(sessions): State<Sessions>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let session = existing(&sessions, &id)?;
    let name = check_name(&path)?;
    let _lock = lock_for_files(&session).await?;
    let wanted = name.clone();
    let target = session.clone();
    if blocking(move || target.remove_name(&wanted)).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::NotFound(format!(
            "session {id} has no file {name:?}"
        )))
    }
}
