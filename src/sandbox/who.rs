//! Whom a run's code runs as: the run user (`PTC_SANDBOX_USER`) and the uid each run and
//! session gets of its own (`PTC_SANDBOX_UIDS`, or an unprivileged sidecar's subordinate ids),
//! with what `/healthz` says of them and what is missing.

use super::{
    DEFAULT_USER, FALLBACK_UID, Policy, RunAs, SandboxError, Uids, can_switch_users, subordinate,
    uids, user,
};
use std::sync::Arc;

/// Whom code runs as (`None`: the sidecar's own uid), its name for `/healthz`, and the uids
/// runs each get one of (`None`: they share it); what cannot be had is added to `missing`.
pub(super) fn runs_as(policy: &Policy, missing: &mut Vec<String>) -> Result<RunIds, SandboxError> {
    if let Some(Ok(given)) = &policy.subordinate {
        return subordinate_ids(policy, given);
    }
    if let Some(Err(reason)) = &policy.subordinate {
        missing.push(format!("a uid per run: {reason}"));
    }
    let (run_as, uid) = run_user(policy, missing)?;
    let uids = match &run_as {
        Some(_) => run_uids(policy, missing)?,
        None => None,
    };
    Ok((run_as, uid, uids))
}

/// `/healthz` `sandbox.uids`: `per run FIRST-LAST` (with `(subordinate)` for an unprivileged
/// sidecar's grant) or `shared`.
pub(super) fn uids_status(uids: Option<&Uids>, policy: &Policy) -> String {
    match (uids, &policy.subordinate) {
        (None, _) => SHARED.into(),
        (Some(u), Some(Ok(_))) => format!("per run {} (subordinate)", u.range()),
        (Some(u), _) => format!("per run {}", u.range()),
    }
}

/// How `/healthz` says that runs share the run user's uid.
pub(super) const SHARED: &str = "shared";

/// The uids of `policy.uids`, where nobody else has one of them and this process can give
/// them; else `None` with the reason in `missing` (the default range), or an error (a range
/// the operator chose must hold).
fn run_uids(policy: &Policy, missing: &mut Vec<String>) -> Result<Option<Arc<Uids>>, SandboxError> {
    let Some(range) = policy.uids else {
        return Ok(None);
    };
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let checked = uids::check(
        range,
        &read("/etc/passwd"),
        &read("/etc/group"),
        &read("/etc/subuid"),
        &read("/proc/self/uid_map"),
    );
    match checked {
        Ok(()) => Ok(Some(Uids::new(range))),
        Err(e) if policy.uids_is_default => {
            missing.push(format!(
                "a uid per run ({e}; set PTC_SANDBOX_UIDS to a free range): runs share the run \
                 user's uid"
            ));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Whom code runs as, its name for `/healthz`, and the uids runs each get one of.
pub(super) type RunIds = (Option<RunAs>, String, Option<Arc<Uids>>);

/// The run user, its name for `/healthz`, and the uids of an unprivileged sidecar in its own
/// user namespace (`given`): its grant is checked as a root sidecar's range is, but for the
/// grant's own line in `/etc/subuid`.
fn subordinate_ids(
    policy: &Policy,
    given: &subordinate::Subordinate,
) -> Result<RunIds, SandboxError> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let others: String = read("/etc/subuid")
        .lines()
        .filter(|line| line.split(':').next() != Some(given.user.as_str()))
        .map(|line| format!("{line}\n"))
        .collect();
    uids::check(
        given.range,
        &read("/etc/passwd"),
        &read("/etc/group"),
        &others,
        &read("/proc/self/uid_map"),
    )?;
    let run_as = RunAs {
        name: given.run_user.to_string(),
        uid: given.run_user,
        gid: given.run_user,
        max_processes: policy.max_processes,
    };
    Ok((
        Some(run_as),
        given.run_user.to_string(),
        Some(Uids::new(given.range)),
    ))
}

/// Whom code runs as under `policy`, and how `/healthz` names it; what cannot be had is
/// added to `missing`. Errors where code would run as the sidecar's uid though it could
/// switch (a named user that does not exist): only `PTC_SANDBOX_USER=none` asks for that.
fn run_user(
    policy: &Policy,
    missing: &mut Vec<String>,
) -> Result<(Option<RunAs>, String), SandboxError> {
    let my_uid = user::current_uid();
    let chosen = match &policy.user {
        None => {
            if can_switch_users() {
                missing.push(format!(
                    "user switch: PTC_SANDBOX_USER=none, so code runs as the sidecar's own \
                     uid {my_uid}"
                ));
            }
            (None, my_uid.to_string())
        }
        Some(name) if can_switch_users() => match user::resolve(name, policy.max_processes) {
            Ok(run_as) => {
                let uid = run_as.name.clone();
                (Some(run_as), uid)
            }
            // The default user is missing: a uid of its own instead, never the sidecar's.
            Err(_) if policy.user_is_default => {
                let run_as = user::fallback(policy.max_processes);
                tracing::info!(
                    "the run user {DEFAULT_USER:?} does not exist: code runs as uid {FALLBACK_UID} \
                     (create {DEFAULT_USER}, or set PTC_SANDBOX_USER)"
                );
                let uid = run_as.name.clone();
                (Some(run_as), uid)
            }
            // Code would run with the sidecar's privileges: only PTC_SANDBOX_USER=none
            // asks for that.
            Err(e) => return Err(e),
        },
        Some(name) => {
            missing.push(format!(
                "user switch to {name:?}: the sidecar is not root and lacks CAP_SETUID and \
                 CAP_SETGID, so code runs as the sidecar's uid {my_uid}"
            ));
            (None, my_uid.to_string())
        }
    };
    Ok(chosen)
}
