//! A call of a front-door run that waits for a person: the MCP host is asked with
//! `elicitation/create` (a form: `approved`, and a `reason`), and its answer decides the call.
//!
//! A host that declared no form elicitation cannot ask its user, and a host of the 2026-07-28
//! revision may not be sent requests at all (its input-required results are not built yet):
//! the call is denied at once, saying why, rather than left waiting for an answer no one was
//! asked for. `GET /v1/approvals` and the dashboard may still answer first.

use crate::run::{Approval, Decision, Runner};
use crate::util::json_excerpt;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer};
use serde_json::Value;
use tokio::sync::mpsc;

/// Most of a call's arguments the host's question quotes.
const QUOTED_ARGS_BYTES: usize = 600;

/// Asks the host about each of a run's calls that wait for a person, until the run ends.
pub async fn ask_the_host(
    mut asked: mpsc::UnboundedReceiver<Approval>,
    peer: Peer<RoleServer>,
    runner: Runner,
    stateless: bool,
) {
    let cannot = cannot_ask(&peer, stateless);
    while let Some(approval) = asked.recv().await {
        let Some(why) = cannot.clone() else {
            tokio::spawn(ask_one(approval, peer.clone(), runner.clone()));
            continue;
        };
        let denial = Decision {
            approved: false,
            reason: Some(why),
            door: "no_elicitation",
            by: None,
        };
        // Answered elsewhere first: nothing left to deny.
        let _ = runner.approvals().decide(&approval.id, denial);
    }
}

/// Why this host cannot be asked, or `None` when it can.
fn cannot_ask(peer: &Peer<RoleServer>, stateless: bool) -> Option<String> {
    if stateless {
        return Some(
            "this MCP host speaks the 2026-07-28 revision, whose input-required results \
             ptc-sidecar cannot send yet, so no one was asked; approve such calls from the \
             dashboard or POST /v1/approvals/{id}, or connect with an earlier protocol version"
                .into(),
        );
    }
    if peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return None;
    }
    Some(
        "this MCP host cannot ask its user (it declared no form elicitation capability), so \
         no one was asked; use a host that supports elicitation, or approve such calls from \
         the dashboard or POST /v1/approvals/{id}"
            .into(),
    )
}

/// One question to the host, and its answer as the decision.
async fn ask_one(approval: Approval, peer: Peer<RoleServer>, runner: Runner) {
    let decision = match peer.create_elicitation(question(&approval)).await {
        Ok(answer) => match answer.action {
            ElicitationAction::Accept => {
                let content = answer.content.unwrap_or_default();
                Decision {
                    approved: content.get("approved").and_then(Value::as_bool) == Some(true),
                    reason: content
                        .get("reason")
                        .and_then(Value::as_str)
                        .filter(|r| !r.is_empty())
                        .map(str::to_string),
                    door: "mcp",
                    by: Some("mcp host".into()),
                }
            }
            other => Decision {
                approved: false,
                reason: Some(format!("the host's user chose to {other:?}").to_lowercase()),
                door: "mcp",
                by: Some("mcp host".into()),
            },
        },
        Err(e) => Decision {
            approved: false,
            reason: Some(format!("asking the MCP host failed: {e}")),
            door: "no_elicitation",
            by: None,
        },
    };
    let _ = runner.approvals().decide(&approval.id, decision);
}

fn question(approval: &Approval) -> ElicitRequestParams {
    #[allow(
        clippy::expect_used,
        reason = "a schema of one required boolean and one string always builds"
    )]
    let schema = ElicitationSchema::builder()
        .required_bool("approved")
        .optional_string("reason")
        .build()
        .expect("the approval form builds");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "The code of run {} wants to call {} with {}. Allow this call? (It waits for your \
             answer; the approval id is {}.)",
            approval.run,
            approval.tool,
            json_excerpt(&approval.args, QUOTED_ARGS_BYTES),
            approval.id
        ),
        requested_schema: schema,
    }
}
