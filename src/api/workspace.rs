//! A session held for one run, whichever protocol asked for it: the session's lock (one run at a
//! time), what its folder held before the run, and what the run changed. Also [`blocking`], how
//! handlers call the session store (which walks and copies files) off the async workers.
//!
//! Owns waiting for a session (within the run's own timeout, then a clear 409) and the
//! before-and-after of its files. It must not know any protocol's wire shapes.

use crate::api::error::ApiError;
use crate::run::{ScratchQuota, Workspace};
use crate::session::{FileInfo, Session, Sessions, Snapshot};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedMutexGuard;

/// A session held for one run: no other run or upload touches it until this is dropped.
pub struct Held {
    pub session: Arc<Session>,
    before: Snapshot,
    _lock: OwnedMutexGuard<()>,
}

impl Held {
    /// The session `id` names (made when it does not exist yet, or when there is no `id`),
    /// locked within `wait`; `prepare` runs on it (on a blocking thread) before its files are
    /// taken as what the run found.
    pub async fn take<T: Send + 'static>(
        sessions: &Sessions,
        id: Option<&str>,
        wait: Duration,
        prepare: impl FnOnce(&Sessions, &Session) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<(Held, T), ApiError> {
        let session = match id.filter(|s| !s.is_empty()) {
            Some(id) => sessions.open(id)?,
            None => sessions.open(&Sessions::new_id())?,
        };
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
