//! The sidecar's own sessions: `GET /v1/sessions` (every session: its files, and its live
//! interpreter when it has one) and `DELETE /v1/sessions/{id}` (the interpreter stopped, the
//! files removed); and `GET /v1/artifacts/{id}/{name}`, the files of runs without a session.
//! The files of a session have their own routes (`session_files`).
//!
//! Owns how a session looks to an operator; the store (`crate::session`) owns the files and the
//! runner (`run::live`) the interpreters. It must not run code.

use super::error::ApiError;
use super::workspace::{blocking, file_response};
use crate::run::{LiveInfo, Runner};
use crate::session::Sessions;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::HashMap;

#[derive(Clone)]
struct SessionsApi {
    runner: Runner,
    sessions: Sessions,
    artifacts: Sessions,
}

/// `GET /v1/sessions`, `DELETE /v1/sessions/{id}` and `GET /v1/artifacts/{run}/{name}`; the
/// caller puts `PTC_API_KEY` in front.
pub fn router<S>(runner: Runner, sessions: Sessions, artifacts: Sessions) -> Router<S> {
    Router::new()
        .route("/v1/sessions", get(list))
        .route("/v1/sessions/{id}", delete(remove))
        .route("/v1/artifacts/{id}/{*name}", get(artifact))
        .with_state(SessionsApi {
            runner,
            sessions,
            artifacts,
        })
}

/// `GET /v1/artifacts/{id}/{name}`: a file of a run without a session (`save_file`, the whole
/// output of a stream that was cut), for `PTC_ARTIFACT_TTL` after the run.
async fn artifact(
    State(api): State<SessionsApi>,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Sessions::check_id(&id)?;
    let gone = || {
        ApiError::NotFound(format!(
            "no artifact {name:?} of run files {id} (artifacts are kept for PTC_ARTIFACT_TTL)"
        ))
    };
    let folder = api.artifacts.get(&id).ok_or_else(gone)?;
    let wanted = name.clone();
    let (info, file) = blocking(move || folder.open_name(&wanted))
        .await?
        .ok_or_else(gone)?;
    Ok(file_response(&info, file))
}

async fn list(State(api): State<SessionsApi>) -> Result<Response, ApiError> {
    let mut live: HashMap<String, LiveInfo> = api
        .runner
        .sessions()
        .list()
        .into_iter()
        .map(|l| (l.id.clone(), l))
        .collect();
    let stored = api.sessions.list();
    // Counting files walks each folder: off the async workers.
    let counted = blocking(move || {
        Ok::<_, ApiError>(
            stored
                .into_iter()
                .map(|s| (s.id.clone(), s.idle(), s.usage().ok()))
                .collect::<Vec<_>>(),
        )
    })
    .await?;
    let mut out: Vec<Value> = Vec::with_capacity(counted.len());
    for (id, idle, usage) in counted {
        let (bytes, files) = usage.unwrap_or_default();
        let mut entry = json!({
            "id": id,
            "files": files,
            "bytes": bytes,
            "idle_s": idle.as_secs_f64(),
            "live": false,
        });
        if let Some(l) = live.remove(&id) {
            entry["live"] = json!(true);
            entry["idle_s"] = json!(l.idle_s);
            entry["age_s"] = json!(l.age_s);
            entry["runs"] = json!(l.runs);
            entry["running"] = json!(l.running);
            entry["memory_bytes"] = json!(l.memory_bytes);
            entry["pid"] = json!(l.pid);
        }
        out.push(entry);
    }
    // Held out of every route, listed for the operator to repair or remove.
    for (id, why) in api.sessions.unreadable() {
        out.push(json!({"id": id, "live": false, "unreadable": why}));
    }
    Ok(Json(json!({
        "sessions": out,
        "live": api.runner.sessions().live(),
        "max_live": api.runner.sessions().max,
    }))
    .into_response())
}

async fn remove(
    State(api): State<SessionsApi>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Sessions::check_id(&id)?;
    let had_live = api.runner.sessions().remove(&id);
    let sessions = api.sessions.clone();
    let had_files = blocking(move || Ok::<_, ApiError>(sessions.remove(&id))).await?;
    if had_live || had_files {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::NotFound(
            "no such session (it may have expired: PTC_SESSION_TTL)".into(),
        ))
    }
}
