//! Approvals for a host of the 2026-07-28 revision, which may not be sent requests: when a call
//! of its run waits for a person, the `tools/call` answers with an input-required result (one
//! `elicitation/create` per waiting call, keyed by the approval's id) and a `requestState`
//! naming the run, which goes on meanwhile. The host asks its user and calls again with the
//! answers (`inputResponses`) and that `requestState`: the answers decide the calls, and the
//! retry waits for the run's end, or for the next calls that wait for a person.
//!
//! A held run is the sidecar's, not the host's: the `requestState` is an unguessable handle,
//! never data. One the host never comes back for is stopped and forgotten once its run and
//! every approval could be over ([`Held::sweep`]); at most [`MAX_HELD`] wait at once.

use super::ask::{decision_of, question};
use super::content;
use crate::run::{Approval, Decision, ExecResult, Runner, new_token};
use crate::util::lock;
use rmcp::model::{
    CallToolResponse, ElicitRequest, ElicitResult, ErrorData, InputRequest, InputRequests,
    InputRequiredResult, InputResponses,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Runs held for their host's next round at once; past it, calls that need a person are
/// denied instead of held.
pub const MAX_HELD: usize = 256;

/// How long the calls that wait together (a gather) are gathered into one round.
const GATHER: Duration = Duration::from_millis(50);

/// A run between two rounds of its host.
pub struct Paused {
    pub result: oneshot::Receiver<ExecResult>,
    pub asked: mpsc::UnboundedReceiver<Approval>,
    /// Stops the run: the host cancelled, or never came back.
    pub cancel: CancellationToken,
    /// When it may be forgotten (its run and every approval over).
    pub expires: Instant,
}

impl Drop for Paused {
    fn drop(&mut self) {
        // A run no round waits for any more is stopped (a finished one is unaffected).
        self.cancel.cancel();
    }
}

/// The held runs of one door, by `requestState`.
#[derive(Clone, Default)]
pub struct Held(Arc<Mutex<HashMap<String, Paused>>>);

impl Held {
    /// Forgets the held runs past their time (each is stopped as it goes).
    fn sweep(&self) {
        let now = Instant::now();
        lock(&self.0).retain(|_, p| p.expires > now);
    }

    /// Takes the run a retry names and applies its answers.
    pub fn resume(
        &self,
        state: &str,
        responses: Option<InputResponses>,
        runner: &Runner,
    ) -> Result<Paused, ErrorData> {
        self.sweep();
        let paused = lock(&self.0).remove(state).ok_or_else(|| {
            ErrorData::invalid_params(
                "no run waits under this requestState: it ended, or no answer came in time; \
                 call exec_code again without it",
                None,
            )
        })?;
        for (id, response) in responses.unwrap_or_default() {
            let decision = match serde_json::from_value::<ElicitResult>(response) {
                Ok(answer) => decision_of(answer),
                Err(e) => Decision {
                    approved: false,
                    reason: Some(format!(
                        "the host's answer is not an elicitation result: {e}"
                    )),
                    door: "mcp",
                    by: Some("mcp host".into()),
                },
            };
            // An id answered elsewhere, or of another run, is nothing to decide.
            let _ = runner.approvals().decide(&id, decision);
        }
        Ok(paused)
    }

    /// Waits for the run's end (its result), or for its calls that wait for a person: then
    /// the run is held and the host gets an input-required result asking for them.
    pub async fn next_round(
        &self,
        mut paused: Paused,
        runner: &Runner,
        host_cancelled: &CancellationToken,
    ) -> Result<CallToolResponse, ErrorData> {
        loop {
            let first = tokio::select! {
                result = &mut paused.result => {
                    let result = result.map_err(|_| ErrorData::internal_error("the run was lost", None))?;
                    return Ok(content::result(&result).into());
                }
                Some(first) = paused.asked.recv() => first,
                _ = host_cancelled.cancelled() => {
                    paused.cancel.cancel();
                    return Err(ErrorData::internal_error("the run was cancelled", None));
                }
            };
            let mut asked = vec![first];
            tokio::time::sleep(GATHER).await;
            while let Ok(more) = paused.asked.try_recv() {
                asked.push(more);
            }
            self.sweep();
            if lock(&self.0).len() >= MAX_HELD {
                for a in &asked {
                    let why = format!(
                        "{MAX_HELD} runs already wait for their MCP host's answers; no one was asked"
                    );
                    let deny = Decision {
                        approved: false,
                        reason: Some(why),
                        door: "no_elicitation",
                        by: None,
                    };
                    let _ = runner.approvals().decide(&a.id, deny);
                }
                continue;
            }
            let requests: InputRequests = asked
                .iter()
                .map(|a| {
                    let ask = ElicitRequest::new(question(a));
                    (a.id.clone(), InputRequest::Elicitation(ask))
                })
                .collect();
            let state = format!("held-{}", new_token());
            lock(&self.0).insert(state.clone(), paused);
            return Ok(InputRequiredResult::new(Some(requests), Some(state)).into());
        }
    }
}

/// How long a held run may wait for its host at most: its own time, and a person's.
pub fn hold_for(runner: &Runner, timeout: Duration) -> Instant {
    Instant::now() + timeout + runner.approvals().timeout() + Duration::from_secs(60)
}
