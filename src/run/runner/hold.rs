//! A session held to its quota at its run's end: what its data directory held before the run,
//! and what is done when the run left it past its quota.

use super::Runner;
use crate::run::live::Lost;
use crate::run::request::{ExecRequest, ExecStatus, StateChange, Workspace};
use crate::run::scratch::{self, OverQuota, SessionBefore, Unnoted};
use crate::run::turn::Finished;

impl Runner {
    /// Holds the run's session to its quota now that nothing of the run runs (a fresh child's
    /// group is killed, a live interpreter stopped): within it, nothing; past it, a live
    /// interpreter the session kept is ended (it may hold what the run wrote open, and its
    /// state may refer to it), what the run wrote is removed, and the run ends with an error
    /// saying so.
    pub(super) async fn hold_session(
        &self,
        req: &ExecRequest,
        workspace: &Workspace,
        before: SessionBefore,
        finished: &mut Finished,
    ) -> Option<OverQuota> {
        let (dir, quota) = (workspace.dir.clone(), workspace.quota);
        let past = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || scratch::session_past(&dir, &quota))
                .await
                // What cannot be measured counts as past the quota.
                .unwrap_or_else(|e| Some(scratch::Past::unmeasured(&e)))?
        };
        if let (Some(id), Some(state)) = (req.session.as_deref(), finished.session.as_mut())
            && state.state != StateChange::Ended
            && self.inner.live.stop(id, Lost::Quota)
        {
            state.state = StateChange::Ended;
            state.reason = Some(Lost::Quota);
        }
        let held =
            tokio::task::spawn_blocking(move || scratch::hold_session(&dir, &quota, before, past))
                .await;
        let over = match held {
            Ok(over) => over,
            Err(e) => OverQuota {
                setting: scratch::SESSION.bytes,
                message: format!(
                    "the run left the session's data directory past its quota, and holding it \
                     to it failed ({e})"
                ),
                removed: false,
            },
        };
        finished.status = ExecStatus::Error;
        let stderr = &mut finished.output.stderr;
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(&format!("ptc-sidecar: {}\n", over.message));
        Some(over)
    }
}

/// What the session's data directory holds before its run (`scratch::note_session`, on a
/// blocking thread).
pub(super) async fn note_session(workspace: &Workspace) -> SessionBefore {
    let (dir, quota) = (workspace.dir.clone(), workspace.quota);
    tokio::task::spawn_blocking(move || scratch::note_session(&dir, &quota))
        .await
        .unwrap_or_else(|e| SessionBefore::unknown(Unnoted::Unread(e.to_string())))
}
