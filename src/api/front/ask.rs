//! A call of a front-door run that waits for a person: the MCP host is asked with
//! `elicitation/create` (a form: `approved`, and a `reason`), and its answer decides the call
//! (a host of the 2026-07-28 revision gets the same form in an input-required result instead:
//! `rounds`).
//!
//! A host that declared no form elicitation cannot ask its user: the call is denied at once,
//! saying why, rather than left waiting for an answer no one was asked for.
//! `GET /v1/approvals` and the dashboard may still answer first.

use crate::run::{Approval, Decision, Runner};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer, RequestContext, RoleServer};
use serde_json::Value;
use tokio::sync::mpsc;

/// Most of a call's arguments the host's question quotes.
const QUOTED_ARGS_BYTES: usize = 600;

/// Asks the host about each of a run's calls that wait for a person, until the run ends; one
/// that cannot ask its user (`elicits` false) denies them, saying why.
pub async fn ask_the_host(
    mut asked: mpsc::UnboundedReceiver<Approval>,
    peer: Peer<RoleServer>,
    runner: Runner,
    elicits: bool,
) {
    while let Some(approval) = asked.recv().await {
        if elicits {
            tokio::spawn(ask_one(approval, peer.clone(), runner.clone()));
            continue;
        }
        let denial = Decision {
            approved: false,
            reason: Some(CANNOT_ASK.into()),
            door: "no_elicitation",
            by: None,
        };
        // Answered elsewhere first: nothing left to deny.
        let _ = runner.approvals().decide(&approval.id, denial);
    }
}

/// Why a call of a host that cannot ask its user is denied.
const CANNOT_ASK: &str = "this MCP host cannot ask its user (it declared no form elicitation \
     capability), so no one was asked; use a host that supports elicitation, or approve such \
     calls from the dashboard or POST /v1/approvals/{id}";

/// Whether the host can put a form to its user: declared at the handshake, or (2026-07-28)
/// in the request's own client capabilities.
pub fn elicits(context: &RequestContext<RoleServer>, stateless: bool) -> bool {
    if !stateless {
        return context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
    }
    let declared = context
        .meta
        .client_capabilities()
        .and_then(|c| c.elicitation);
    // Neither mode named means form (the capability's first revision).
    declared.is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// One question to the host, and its answer as the decision.
async fn ask_one(approval: Approval, peer: Peer<RoleServer>, runner: Runner) {
    let decision = match peer.create_elicitation(question(&approval)).await {
        Ok(answer) => decision_of(answer),
        Err(e) => Decision {
            approved: false,
            reason: Some(format!("asking the MCP host failed: {e}")),
            door: "no_elicitation",
            by: None,
        },
    };
    let _ = runner.approvals().decide(&approval.id, decision);
}

/// The host's answer to the approval form as a decision: `accept` with `approved: true` lets
/// the call go; anything else denies it (with the reason given, or what the user chose).
pub fn decision_of(answer: ElicitResult) -> Decision {
    let by = Some("mcp host".to_string());
    match answer.action {
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
                by,
            }
        }
        other => Decision {
            approved: false,
            reason: Some(format!("the host's user chose to {other:?}").to_lowercase()),
            door: "mcp",
            by,
        },
    }
}

/// The approval form the host shows its user.
pub fn question(approval: &Approval) -> ElicitRequestParams {
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
            approval.args.excerpt(QUOTED_ARGS_BYTES),
            approval.id
        ),
        requested_schema: schema,
    }
}
