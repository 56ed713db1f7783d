//! A session held for one run, whichever protocol asked for it: the session's lock (one run at a
//! time), what its folder held before the run, and what the run changed. Also [`blocking`], how
//! handlers call the session store (which walks and copies files) off the async workers.
//!
//! Owns waiting for a session (within the run's own timeout, then a clear 409), the
//! before-and-after of its files, and where a run's own files go ([`SessionFiles`] in a
//! session, [`RunArtifacts`] otherwise) and how an image among them becomes a content block.
//! It must not know any protocol's wire shapes.

use crate::api::error::ApiError;
use crate::run::{
    Budgeted, ChunkReader, FileError, FileStore, Files, NewFile, RunFile, Runner, ScratchQuota,
    Workspace,
};
use crate::session::{
    FileInfo, RunGuard, Session, SessionError, Sessions, Snapshot, Writer, check_name,
};
use crate::util::{lock, mime_of, url_path};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::{Stream, StreamExt};

/// How long a change to a session's files from outside a run (an upload, a `PUT`, a `DELETE`)
/// waits for the session's run to end before it gets 409 `busy`: a file must not change under
/// a run that is reading it, and a caller must not wait without a bound on a run that is stuck.
pub const FILES_WAIT: Duration = Duration::from_secs(30);

/// `session` locked for a change to its files from outside a run, within [`FILES_WAIT`].
pub async fn lock_for_files(session: &Arc<Session>) -> Result<RunGuard, ApiError> {
    tokio::time::timeout(FILES_WAIT, session.lock())
        .await
        .map_err(|_| {
            ApiError::Busy(format!(
                "session {} is busy with a run for longer than {} s; try again when it ends",
                session.id,
                FILES_WAIT.as_secs()
            ))
        })
}

/// A session held for one run: no other run or upload touches it until this is dropped.
pub struct Held {
    pub session: Arc<Session>,
    before: Snapshot,
    /// The store, when it made this session for this run because no request named one.
    made_for_run: Option<Sessions>,
    _lock: RunGuard,
}

/// A session made for one run that leaves it empty goes with the hold, still locked: nothing
/// can be found in it, and the next request naming its id makes it again. Kept, it would hold
/// a folder and an entry for `PTC_SESSION_TTL` (a day) per run of a client that names no
/// session: ~400 bytes of the sidecar's memory per run, without bound within the day.
impl Drop for Held {
    fn drop(&mut self) {
        if let Some(store) = &self.made_for_run {
            // One rmdir of the store's own entry: cheap enough for an async thread.
            store.remove_if_empty(&self.session.id);
        }
    }
}

impl Held {
    /// The session `id` names (made for `owner` when it does not exist yet, or when there is
    /// no `id`; another owner's is not found), locked within `wait`; `prepare` runs on it (on
    /// a blocking thread) before its files are taken as what the run found.
    pub async fn take<T: Send + 'static>(
        sessions: &Sessions,
        id: Option<&str>,
        owner: &str,
        wait: Duration,
        prepare: impl FnOnce(&Sessions, &Session) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<(Held, T), ApiError> {
        let named = id.filter(|s| !s.is_empty());
        let session = match named {
            Some(id) => sessions.open_as(id, owner)?,
            None => sessions.open_as(&Sessions::new_id(), owner)?,
        };
        let made_for_run = named.is_none().then(|| sessions.clone());
        let lock = tokio::time::timeout(wait, session.clone().lock())
            .await
            .map_err(|_| {
                ApiError::Busy(format!(
                    "session {} is busy with another run for longer than this run's timeout \
                     ({:.0} s); run one at a time per session",
                    session.id,
                    wait.as_secs_f64()
                ))
            })?;
        let (store, held) = (sessions.clone(), session.clone());
        let (prepared, before) = blocking(move || {
            let prepared = prepare(&store, &held)?;
            Ok::<_, ApiError>((prepared, held.snapshot()?))
        })
        .await?;
        let held = Held {
            session,
            before,
            made_for_run,
            _lock: lock,
        };
        Ok((held, prepared))
    }

    /// The run's data directory.
    pub fn workspace(&self, sessions: &Sessions) -> Workspace {
        let cfg = sessions.config();
        Workspace {
            dir: self.session.dir.clone(),
            quota: ScratchQuota {
                max_bytes: cfg.max_bytes,
                max_files: cfg.max_files,
            },
        }
    }

    /// The files the run made or changed.
    pub async fn changed(&self) -> Vec<FileInfo> {
        let (session, before) = (self.session.clone(), self.before.clone());
        match blocking(move || session.changed_since(&before)).await {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!(session = %self.session.id, "cannot list the run's files: {e}");
                Vec::new()
            }
        }
    }
}

/// A store call that walks or copies files, on a blocking thread.
pub async fn blocking<T: Send + 'static, E: Send + 'static>(
    call: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError>
where
    ApiError: From<E>,
{
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| ApiError::Internal(format!("a session store call failed: {e}")))?
        .map_err(ApiError::from)
}

/// A session's file as a download: streamed, its type from its name (never one a browser would
/// run as a page), `nosniff`, and its base name as the attachment's file name.
pub fn file_response(info: &FileInfo, file: std::fs::File) -> Response {
    let base = info.name.rsplit('/').next().unwrap_or(&info.name);
    let disposition = format!(
        "attachment; filename=\"{}\"",
        base.replace(['"', '\\', '\r', '\n'], "_")
    );
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(mime_of(base)),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(info.size));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

/// Images a result hands back as content blocks, at most: a run that draws a hundred charts
/// does not put a hundred images in one answer.
pub const MAX_IMAGE_BLOCKS: usize = 8;

/// Largest image handed back as a content block (Anthropic's limit per image).
pub const MAX_IMAGE_BYTES: u64 = 5 << 20;

/// A run's file store: `store`, with what all the run's files take together bounded by the
/// run's scratch quota (`PTC_SCRATCH_MAX_MB`), besides the store's own quotas.
pub fn run_files(store: impl FileStore + 'static, runner: &Runner) -> Files {
    let budget = runner.config().scratch_quota.max_bytes;
    Arc::new(Budgeted::new(Arc::new(store), budget))
}

/// A session run's files: the session's workspace (its working directory).
#[derive(Debug)]
pub struct SessionFiles(pub Arc<Session>);

impl FileStore for SessionFiles {
    fn create(&self, name: &str) -> Result<(Box<dyn NewFile>, RunFile), FileError> {
        let name = check_name(name).map_err(FileError::store)?;
        let file = self.0.writer(&name).map_err(FileError::store)?;
        let url = session_file_url(&self.0.id, &name);
        Ok((Box::new(StoreFile(Some(file))), run_file(name, url)))
    }

    fn locate(&self, file: &RunFile) -> String {
        format!("{} in the session's working directory", file.name)
    }

    fn read(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        read_from(&self.0, name, max)
    }
}

/// The files of a run without a session: a folder of its own in the artifacts store, made when
/// the first file is, removed `PTC_ARTIFACT_TTL` after.
#[derive(Debug)]
pub struct RunArtifacts {
    store: Sessions,
    folder: Mutex<Option<Arc<Session>>>,
}

impl RunArtifacts {
    pub fn new(store: Sessions) -> RunArtifacts {
        RunArtifacts {
            store,
            folder: Mutex::new(None),
        }
    }

    fn folder(&self) -> Result<Arc<Session>, SessionError> {
        let mut folder = lock(&self.folder);
        if let Some(f) = &*folder {
            return Ok(f.clone());
        }
        let made = self.store.open(&Sessions::new_id())?;
        *folder = Some(made.clone());
        Ok(made)
    }
}

impl FileStore for RunArtifacts {
    fn create(&self, name: &str) -> Result<(Box<dyn NewFile>, RunFile), FileError> {
        let name = check_name(name).map_err(FileError::store)?;
        let folder = self.folder().map_err(FileError::store)?;
        let file = folder.writer(&name).map_err(FileError::store)?;
        let url = format!("/v1/artifacts/{}/{}", folder.id, url_path(&name));
        Ok((Box::new(StoreFile(Some(file))), run_file(name, url)))
    }

    fn locate(&self, file: &RunFile) -> String {
        format!("GET {}", file.url)
    }

    fn read(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        let folder = lock(&self.folder).clone()?;
        read_from(&folder, name, max)
    }
}

/// A run's file being written into a session or the artifacts store, within the session's
/// quota and the store's bound (the session store's [`Writer`], `None` once discarded).
///
/// The run layer's [`NewFile`] is kept as written when dropped (a `save_file` that read its
/// whole body, the saved whole of a cut stream however far it got), while a session's
/// [`Writer`] publishes only on `finish`: so dropping this finishes the writer, renaming the
/// file into place, and [`discard`](NewFile::discard) drops it unfinished, which leaves a file
/// it would have replaced as it was.
struct StoreFile(Option<Writer>);

impl NewFile for StoreFile {
    fn append(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        match &mut self.0 {
            Some(writer) => writer.append(bytes).map_err(FileError::store),
            None => Ok(()),
        }
    }

    fn room(&self) -> u64 {
        self.0.as_ref().map_or(0, Writer::room)
    }

    fn discard(mut self: Box<Self>) {
        if let Some(writer) = self.0.take() {
            writer.discard();
        }
    }
}

impl Drop for StoreFile {
    fn drop(&mut self) {
        if let Some(writer) = self.0.take()
            && let Err(e) = writer.finish()
        {
            // The run was told the file was kept; only a run racing its own save (a folder
            // put under the name meanwhile) gets here.
            tracing::warn!("a run's file could not be put into place: {e}");
        }
    }
}

/// Where the control API serves a session's file `name`.
pub fn session_file_url(session: &str, name: &str) -> String {
    format!("/v1/sessions/{session}/files/{}", url_path(name))
}

fn run_file(name: String, url: String) -> RunFile {
    RunFile {
        mime: mime_of(&name).to_string(),
        size: 0,
        url,
        name,
    }
}

fn read_from(session: &Session, name: &str, max: u64) -> Option<Vec<u8>> {
    let (info, file) = session.open_name(name).ok()??;
    if info.size > max {
        return None;
    }
    let mut bytes = Vec::with_capacity(info.size as usize);
    file.take(max + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

/// The images among `files` as content blocks the Anthropic Messages API takes in a tool
/// result (`{"type": "image", "source": {"type": "base64", ...}}`), read from `store`.
pub fn image_blocks(store: &dyn FileStore, files: &[RunFile]) -> Vec<Value> {
    files
        .iter()
        .filter(|f| {
            matches!(
                f.mime.as_str(),
                "image/png" | "image/jpeg" | "image/gif" | "image/webp"
            )
        })
        .filter_map(|f| {
            let bytes = store.read(&f.name, MAX_IMAGE_BYTES)?;
            Some(json!({
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": f.mime,
                    "data": base64::engine::general_purpose::STANDARD.encode(bytes),
                },
            }))
        })
        .take(MAX_IMAGE_BLOCKS)
        .collect()
}

/// Writes `body` into `session` as `name`: the store writes (and counts against the quota) on
/// a blocking thread, fed chunk by chunk, so an upload is never held in memory whole. A body
/// that breaks off leaves no file; `unreadable` says why it broke.
pub async fn write_stream<E>(
    session: &Arc<Session>,
    name: &str,
    mut body: impl Stream<Item = Result<Bytes, E>> + Unpin,
    unreadable: fn(E) -> ApiError,
) -> Result<FileInfo, ApiError> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let (store, file_name) = (session.clone(), name.to_string());
    let writer = tokio::task::spawn_blocking(move || {
        let mut chunks = ChunkReader::new(rx);
        store.write(&file_name, &mut chunks)
    });
    let mut read_error = None;
    let mut refused = false;
    while let Some(chunk) = body.next().await {
        match chunk {
            // Once the store refused the file (its error says why), the rest of the body is
            // read and dropped, so that the client, still sending, gets the answer instead of
            // a reset connection (the body limit bounds it).
            Ok(chunk) => {
                if !refused && tx.send(Ok(chunk)).await.is_err() {
                    refused = true;
                }
            }
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let written = writer
        .await
        .map_err(|e| ApiError::Internal(format!("the upload's writer failed: {e}")))?;
    // The store's refusal says more than the broken body that may follow it.
    let info = written?;
    if let Some(e) = read_error {
        let _ = session.remove_name(name);
        return Err(unreadable(e));
    }
    Ok(info)
}
