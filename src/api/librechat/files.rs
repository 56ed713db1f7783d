//! LibreChat's code-API files, on the session store (`crate::session`): a run's files in and
//! out (`files` on `/exec` and `/exec/programmatic`), and the endpoints LibreChat's server calls
//! for them: `POST /upload` (multipart), `GET /download/{session_id}/{file_id}`,
//! `GET /files/{session_id}?detail=…` and `GET /sessions/{session_id}/objects/{file_id}`.
//!
//! Owns the wire shapes of files (what the client and LibreChat's server read) and holding a
//! session for one run: its lock, what it held before, what changed. It must not run code (the
//! runner's) nor walk a session's directory itself (the store does it without following links).

use crate::api::error::ApiError;
use crate::api::workspace::{Held, blocking, file_response, lock_for_files, write_stream};
use crate::identity::Principal;
use crate::session::{FileInfo, RunGuard, Session, SessionError, Sessions};
use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension, Multipart, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Where the client tells the model a session's files are.
const MODEL_DIR: &str = crate::run::MODEL_DATA_DIR;

/// A file a request brings along: one of a session's files by id (LibreChat's
/// `{id, session_id | storage_session_id, name}`), placed under `name`.
#[derive(Debug, Clone, Deserialize)]
pub struct FileRef {
    pub id: String,
    pub name: String,
    pub session_id: Option<String>,
    pub storage_session_id: Option<String>,
}

impl FileRef {
    fn source_session(&self) -> Option<&str> {
        self.storage_session_id
            .as_deref()
            .or(self.session_id.as_deref())
            .filter(|s| !s.is_empty())
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        match e {
            SessionError::Quota { .. }
            | SessionError::TooManyFiles { .. }
            | SessionError::StoreFull { .. }
            | SessionError::Unmeasurable { .. } => ApiError::Quota(e.to_string()),
            SessionError::NotFound(_) => ApiError::NotFound(e.to_string()),
            SessionError::Io { .. } => ApiError::Internal(e.to_string()),
            _ => ApiError::BadRequest(e.to_string()),
        }
    }
}

/// Holds the session `id` names for one run of `owner` (see [`Held::take`]), with the
/// request's `files` placed in it. A file that is gone (its session expired, or is another
/// owner's) is not an error: the run goes on, and the notes say so for its stderr.
pub async fn hold_for_run(
    sessions: &Sessions,
    id: Option<&str>,
    owner: &str,
    files: &[FileRef],
    wait: Duration,
) -> Result<(Held, Vec<String>), ApiError> {
    let files = files.to_vec();
    Held::take(sessions, id, owner, wait, move |store, session| {
        place(store, session, &files)
    })
    .await
}

/// The files a held run made or changed, as the client reads them.
pub async fn changed(held: &Held) -> Vec<Value> {
    held.changed()
        .await
        .iter()
        .map(|f| run_file(&held.session.id, f))
        .collect()
}

/// Copies each of `files` into `session` under its `name`, from the session it names. Only a
/// request that names a session (and a file id in it) reaches that session's files, and only
/// a session of the run's own owner: another's is gone, as if it did not exist.
fn place(
    sessions: &Sessions,
    session: &Session,
    files: &[FileRef],
) -> Result<Vec<String>, ApiError> {
    let mut notes = Vec::new();
    for f in files {
        let name = crate::session::check_name(&f.name)?;
        // Another session's file, or (no session named, or this one) the run's own.
        let other = match f.source_session() {
            Some(id) if id != session.id => {
                Sessions::check_id(id)?;
                match sessions.get_as(id, &session.owner) {
                    Some(other) => Some(other),
                    None => {
                        notes.push(gone(&name, id));
                        continue;
                    }
                }
            }
            _ => None,
        };
        let from = other.as_deref().unwrap_or(session);
        let Some((info, mut file)) = from.open(&f.id)? else {
            notes.push(gone(&name, &from.id));
            continue;
        };
        if other.is_none() && info.name == name {
            continue; // already where the run will look
        }
        session.write(&name, &mut file)?;
    }
    Ok(notes)
}

fn gone(name: &str, session: &str) -> String {
    format!(
        "ptc-sidecar: the input file {name:?} (session {session}) is gone: its session expired \
         (PTC_SESSION_TTL) or never held it; upload it again"
    )
}

/// A file in an answer of `/exec` or `/exec/programmatic`.
fn run_file(session_id: &str, f: &FileInfo) -> Value {
    json!({
        "id": f.id,
        "name": f.name,
        "path": format!("{MODEL_DIR}/{}", f.name),
        "session_id": session_id,
        "storage_session_id": session_id,
        "size": f.size,
        "lastModified": crate::util::rfc3339(f.modified),
    })
}

/// A file in `GET /files/{session_id}`: LibreChat's older server matches `name` against
/// `session_id/file_id`, its newer one `fileId`, its agents `metadata["original-filename"]`.
fn listed_file(session_id: &str, f: &FileInfo) -> Value {
    json!({
        "name": format!("{session_id}/{}", f.id),
        "id": f.id,
        "fileId": f.id,
        "session_id": session_id,
        "storage_session_id": session_id,
        "filename": f.name,
        "size": f.size,
        "lastModified": crate::util::rfc3339(f.modified),
        "metadata": {"original-filename": f.name},
    })
}

/// The files routes; the caller puts `PTC_API_KEY` in front of them.
pub fn router<S>(sessions: Sessions) -> Router<S> {
    let upload_limit = usize::try_from(sessions.config().max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    Router::new()
        .route(
            "/upload",
            post(upload).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route(
            "/upload/batch",
            post(upload_batch).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route("/download/{session_id}/{file_id}", get(download))
        .route("/files/{session_id}", get(list))
        .route("/sessions/{session_id}/objects/{file_id}", get(object))
        .with_state(sessions)
}

/// `POST /upload`: multipart, each `file` part stored in a new session (or in the one a
/// `session_id` part names, sent before the files); `entity_id`, `kind`, `id`, `version` and
/// `read_only` are accepted and ignored.
async fn upload(
    State(sessions): State<Sessions>,
    Extension(who): Extension<Principal>,
    form: Multipart,
) -> Result<Response, ApiError> {
    let (session, stored) = store_upload(&sessions, &who.owner(), form).await?;
    Ok(Json(json!({
        "message": "success",
        "session_id": session,
        "storage_session_id": session,
        "files": stored,
    }))
    .into_response())
}

/// `POST /upload/batch`: the same, answered as LibreChat's batch upload reads it. The files
/// are stored all or none: a refused one fails the request, as for `/upload`.
async fn upload_batch(
    State(sessions): State<Sessions>,
    Extension(who): Extension<Principal>,
    form: Multipart,
) -> Result<Response, ApiError> {
    let (session, stored) = store_upload(&sessions, &who.owner(), form).await?;
    let files: Vec<Value> = stored
        .into_iter()
        .map(|mut f| {
            f["status"] = json!("success");
            f
        })
        .collect();
    Ok(Json(json!({
        "message": "success",
        "session_id": session,
        "storage_session_id": session,
        "succeeded": files.len(),
        "failed": 0,
        "files": files,
    }))
    .into_response())
}

/// Stores each `file` part of an upload; the session's id and `{fileId, filename}` per file.
async fn store_upload(
    sessions: &Sessions,
    owner: &str,
    mut form: Multipart,
) -> Result<(String, Vec<Value>), ApiError> {
    let mut held: Option<(Arc<Session>, RunGuard)> = None;
    let mut stored = Vec::new();
    while let Some(mut field) = form.next_field().await.map_err(unreadable)? {
        match field.name().unwrap_or_default() {
            "session_id" if held.is_none() => {
                let id = field.text().await.map_err(unreadable)?;
                held = Some(hold(sessions, id.trim(), owner).await?);
            }
            "file" => {
                if held.is_none() {
                    held = Some(hold(sessions, &Sessions::new_id(), owner).await?);
                }
                if let Some((session, _)) = &held {
                    let info = store_file(session, &mut field).await?;
                    stored.push(json!({"fileId": info.id, "filename": info.name}));
                }
            }
            _ => {
                // entity_id, kind, id, version, read_only: nothing the store needs.
                let _ = field.text().await.map_err(unreadable)?;
            }
        }
    }
    match held {
        Some((session, _lock)) if !stored.is_empty() => Ok((session.id.clone(), stored)),
        _ => Err(ApiError::BadRequest(
            "the upload has no \"file\" part: send each file as a \"file\" part".into(),
        )),
    }
}

fn unreadable(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::BadRequest(format!(
        "the upload is not readable multipart/form-data ({e}); send each file as a \"file\" part"
    ))
}

/// The session `id` names (made for `owner` when new; another owner's is not found), locked
/// for an upload within [`FILES_WAIT`](crate::api::workspace::FILES_WAIT).
async fn hold(
    sessions: &Sessions,
    id: &str,
    owner: &str,
) -> Result<(Arc<Session>, RunGuard), ApiError> {
    let session = sessions.open_as(id, owner)?;
    let lock = lock_for_files(&session).await?;
    Ok((session, lock))
}

/// One `file` part into `session`, under the part's file name ([`write_stream`]).
async fn store_file(
    session: &Arc<Session>,
    field: &mut axum::extract::multipart::Field<'_>,
) -> Result<FileInfo, ApiError> {
    let name = crate::session::check_name(field.file_name().unwrap_or_default())?;
    write_stream(session, &name, field, unreadable).await
}

/// `GET /download/{session_id}/{file_id}`: the file's bytes (`?kind=&id=&version=` ignored).
async fn download(
    State(sessions): State<Sessions>,
    Extension(who): Extension<Principal>,
    Path((session_id, file_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (info, file) = find(&sessions, &who, &session_id, &file_id).await?;
    Ok(file_response(&info, file))
}

/// `GET /files/{session_id}?detail=summary|full`: the session's files (none for a session
/// that does not exist, or is another owner's: LibreChat then uploads its files again).
async fn list(
    State(sessions): State<Sessions>,
    Extension(who): Extension<Principal>,
    Path(session_id): Path<String>,
) -> Result<Response, ApiError> {
    Sessions::check_id(&session_id)?;
    let Some(session) = sessions.get_as(&session_id, &who.owner()) else {
        return Ok(Json(json!([])).into_response());
    };
    let files = blocking(move || session.files()).await?;
    let files: Vec<Value> = files.iter().map(|f| listed_file(&session_id, f)).collect();
    Ok(Json(Value::Array(files)).into_response())
}

/// `GET /sessions/{session_id}/objects/{file_id}`: one file's facts, `404` when it is gone.
async fn object(
    State(sessions): State<Sessions>,
    Extension(who): Extension<Principal>,
    Path((session_id, file_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (info, _) = find(&sessions, &who, &session_id, &file_id).await?;
    Ok(Json(listed_file(&session_id, &info)).into_response())
}

/// A session's file by id, opened (finding it walks the session: off the async workers).
/// Another owner's session is not found, as if it did not exist.
async fn find(
    sessions: &Sessions,
    who: &Principal,
    session_id: &str,
    file_id: &str,
) -> Result<(FileInfo, std::fs::File), ApiError> {
    Sessions::check_id(session_id)?;
    let session = sessions.get_as(session_id, &who.owner()).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no session {session_id} (it expired after PTC_SESSION_TTL, or never existed)"
        ))
    })?;
    let id = file_id.to_string();
    blocking(move || session.open(&id))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("session {session_id} has no file {file_id}")))
}
