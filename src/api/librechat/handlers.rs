//! The continuation protocol's HTTP side: `POST /exec/programmatic` (first request and
//! continuations), `POST /exec` (code without tools) and `POST /exec/programmatic/cancel`, in
//! the client's terms.
//!
//! Owns the request bodies, the per-request catalog built from a request's `tools`, the checks
//! on a continuation (token, session, round) and every answer the client reads: refusals as
//! [`ApiError`]s, runs that ended as `200` with `status: "completed"` or `"error"`. It must not
//! time rounds or hold runs (that is [`super::rounds`]) nor sign tokens ([`super::tokens`]).

use super::files::{self, FileRef};
use super::rounds::{
    self, MAX_ROUNDS, Outcome, Run, Runs, Start, ToolResult, check_results, deliver, next_outcome,
};
use super::tokens::{Claims, TokenError, Tokens};
use crate::api::error::{ApiError, json_body};
use crate::api::exec::lang_named;
use crate::api::workspace::{Held, SessionFiles, run_files};
use crate::catalog::source::parse_tool_list;
use crate::catalog::{Catalog, CatalogInput, Policy};
use crate::identity::Principal;
use crate::render::Snapshot;
use crate::run::{ExecRequest, ExecResult, ExecStatus, Lang, Runner, Workspace};
use crate::session::Sessions;
use crate::util::lock;
use crate::util::now_ms;
use axum::extract::{Extension, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Largest request body: a continuation carries every tool result of a round (a callback's
/// single result is capped at 16 MiB too, `run::dispatch::MAX_CALLBACK_BYTES`).
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// Bounds of the request's `timeout` (ms), as the client's schema has them.
pub const MIN_TIMEOUT_MS: u64 = 1_000;
pub const MAX_TIMEOUT_MS: u64 = 300_000;
/// The header the client puts on each `/exec/programmatic` request; `/cancel` names it.
pub const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";
/// Longest request id remembered (the client sends a UUID).
const MAX_REQUEST_ID_CHARS: usize = 128;
/// Largest `/cancel` body: `{"request_id": "<uuid>"}`.
const MAX_CANCEL_BYTES: usize = 1024;
/// How long a client told "too many open runs" should wait (the client shows it the model).
const RETRY_AFTER_SECONDS: u64 = 1;

/// The `error` strings the client shows the model (every other string is hidden).
const ERR_FAILED: &str = "Execution failed or timed out";
const ERR_TIME: &str = "Time limit exceeded";

const PTC_DISABLED: ApiError =
    ApiError::PtcDisabled("PTC_ENABLED is false on this sidecar: there is no code execution");

/// The continuation protocol's routes, and with `sessions` the files routes
/// ([`super::files`]); the caller puts `PTC_API_KEY` in front of them.
pub fn router<S: Clone + Send + Sync + 'static>(
    runner: Option<Runner>,
    sessions: Option<Sessions>,
) -> Router<S> {
    let empty = Arc::new(Snapshot::new(Catalog::build(
        CatalogInput::default(),
        &request_policy(),
        1,
    )));
    let lc = Lc(Arc::new(Inner {
        runner,
        sessions: sessions.clone(),
        tokens: Tokens::random(),
        empty,
        runs: Runs::default(),
    }));
    let routes = Router::new()
        .route("/exec/programmatic", post(programmatic))
        .route("/exec/programmatic/cancel", post(cancel))
        .route("/exec", post(plain))
        .with_state(lc);
    match sessions {
        Some(sessions) => routes.merge(files::router(sessions)),
        None => routes,
    }
}

/// Request tools are the host's own choice (LibreChat already applied `allowed_callers`):
/// every one is a PTC tool, none direct, and the sidecar's allow/deny/read-only policy, which
/// is about its own catalog, does not apply.
fn request_policy() -> Policy {
    Policy {
        ptc_enabled: true,
        ..Policy::default()
    }
}

#[derive(Clone)]
struct Lc(Arc<Inner>);

struct Inner {
    /// Absent when PTC is off.
    runner: Option<Runner>,
    /// Where runs keep their files; present with the runner.
    sessions: Option<Sessions>,
    tokens: Tokens,
    /// The catalog of `/exec` runs: no tools.
    empty: Arc<Snapshot>,
    runs: Runs,
}

impl Lc {
    fn runner(&self) -> Result<Runner, ApiError> {
        self.0.runner.clone().ok_or(PTC_DISABLED)
    }

    /// The session a request names (made when new), held for its run, with its files placed,
    /// and what is left of the run's `timeout` after waiting for it (a run of the session
    /// still going holds it).
    async fn hold(
        &self,
        session_id: Option<&str>,
        who: &Principal,
        files: &[FileRef],
        timeout: Duration,
    ) -> Result<(Held, Vec<String>, Duration), ApiError> {
        let sessions = self.0.sessions.as_ref().ok_or(PTC_DISABLED)?;
        let started = std::time::Instant::now();
        let (held, notes) =
            files::hold_for_run(sessions, session_id, &who.owner(), files, timeout).await?;
        Ok((held, notes, timeout.saturating_sub(started.elapsed())))
    }

    fn workspace(&self, held: &Held) -> Option<Workspace> {
        self.0.sessions.as_ref().map(|s| held.workspace(s))
    }

    /// Lets `/cancel` find `run` by this request's `X-LibreChat-Code-Request-ID`, if it has one.
    fn remember_request(&self, run: &Run, headers: &HeaderMap) {
        if let Some(id) = headers
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID_CHARS)
        {
            self.0.runs.remember_request(run, id);
        }
    }
}

/// `status: "error"` with a string the client shows and the reason in `stderr` (the only
/// text of an error the model reads).
fn failed(error: &str, stderr: impl Into<String>) -> Response {
    Json(json!({"status": "error", "error": error, "stderr": stderr.into(), "stdout": ""}))
        .into_response()
}

/// Python (no `lang`, as the client's Python runner sends it), bash, or JavaScript and
/// TypeScript (`js` and `ts`, as the client's `execute_code` sends them); any other `lang` is a
/// permanent capability mismatch, which the client tells the model not to retry.
fn check_lang(lang: Option<&str>) -> Result<Lang, ApiError> {
    match lang {
        None => Ok(Lang::Python),
        Some(name) => {
            lang_named(name).ok_or_else(|| ApiError::UnsupportedLang { lang: name.into() })
        }
    }
}

/// How code of `lang` starts independent calls together (one round trip for all of them).
fn together(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "with asyncio.gather",
        Lang::Bash => "in the background (`{ x=$(tool '...'); } &` ... `wait`)",
        Lang::JavaScript | Lang::TypeScript => "with Promise.all",
    }
}

/// The request's `timeout` (ms) clamped to [1 s, 300 s] and to `PTC_TIMEOUT`.
fn run_timeout(requested_ms: Option<u64>, ceiling: Duration) -> Duration {
    requested_ms
        .map(|ms| Duration::from_millis(ms.clamp(MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)))
        .map_or(ceiling, |t| t.min(ceiling))
}

#[derive(Deserialize)]
struct FirstBody {
    code: String,
    #[serde(default)]
    tools: Option<Value>,
    timeout: Option<u64>,
    session_id: Option<String>,
    lang: Option<String>,
    #[serde(default)]
    files: Vec<FileRef>,
}

#[derive(Deserialize)]
struct ContinueBody {
    continuation_token: String,
    #[serde(default)]
    tool_results: Vec<ToolResult>,
    /// Not sent by the LibreChat client; when a caller does send it, it must match.
    session_id: Option<String>,
}

const FIRST_SHAPE: &str = r#"{"code": "...", "tools": [...], "timeout"?: ms, "session_id"?: "..."} or {"continuation_token": "...", "tool_results": [...]}"#;

async fn programmatic(
    State(lc): State<Lc>,
    Extension(who): Extension<Principal>,
    request: Request,
) -> Result<Response, ApiError> {
    let runner = lc.runner()?;
    let headers = request.headers().clone();
    let body: Value = json_body(request, MAX_BODY_BYTES, FIRST_SHAPE).await?;
    let bad = |e: serde_json::Error| ApiError::BadRequest(format!("expected {FIRST_SHAPE}: {e}"));
    if body.get("continuation_token").is_some() {
        let body = serde_json::from_value::<ContinueBody>(body).map_err(bad)?;
        continuation(lc, body, &who, &headers).await
    } else {
        let body = serde_json::from_value::<FirstBody>(body).map_err(bad)?;
        // A continuation goes on (its run is one shutdown waits for); a new run does not start.
        runner.check_open()?;
        first(lc, runner, body, who, &headers).await
    }
}

async fn first(
    lc: Lc,
    runner: Runner,
    body: FirstBody,
    who: Principal,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let lang = check_lang(body.lang.as_deref())?;
    if body.code.trim().is_empty() {
        return Err(ApiError::BadRequest("\"code\" is empty".into()));
    }
    let tools = body.tools.unwrap_or_else(|| json!([]));
    let (defs, problems) = parse_tool_list("request tools", &tools)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    for p in problems.iter().filter(|p| p.skipped) {
        tracing::warn!("continuation request: {p}");
    }
    let snapshot = Arc::new(Snapshot::new(Catalog::build(
        CatalogInput {
            host_tools: defs,
            problems,
            ..CatalogInput::default()
        },
        &request_policy(),
        1,
    )));
    if lc.0.runs.full() {
        return Err(ApiError::RateLimited {
            retry_after_seconds: RETRY_AFTER_SECONDS,
        });
    }
    let timeout = run_timeout(body.timeout, runner.config().timeout);
    let (held, notes, timeout) = lc
        .hold(body.session_id.as_deref(), &who, &body.files, timeout)
        .await?;
    let run = lc.0.runs.start(
        &runner,
        Start {
            code: body.code,
            lang,
            workspace: lc.workspace(&held),
            snapshot,
            timeout,
            session_id: held.session.id.clone(),
            held: Some(held),
            notes,
            traceparent: crate::trace::from_headers(headers),
            principal: who,
        },
    );
    lc.remember_request(&run, headers);
    let mut driver = run.driver.lock().await;
    Ok(advance(&lc, &run, &mut driver).await)
}

/// Drives the run to its next answer and says it in the client's terms.
async fn advance(lc: &Lc, run: &Run, driver: &mut rounds::Driver) -> Response {
    match next_outcome(run, driver).await {
        Outcome::Calls(batch) => {
            if driver.round >= MAX_ROUNDS {
                let names: Vec<&str> = batch.iter().map(|c| c.tool.as_str()).collect();
                lc.0.runs.finish(run);
                return failed(
                    ERR_FAILED,
                    format!(
                        "ptc-sidecar: the code needed more than {MAX_ROUNDS} round trips of tool \
                         calls (the next were {}) and was stopped. Start independent calls \
                         together {} so they share one round trip.",
                        names.join(", "),
                        together(run.lang),
                    ),
                );
            }
            driver.round += 1;
            driver.token_live = true;
            let token = lc.0.tokens.mint(&Claims {
                run: run.id.clone(),
                round: driver.round,
                session: run.session_id.clone(),
                exp: run.expires_ms,
            });
            let tool_calls: Vec<Value> = batch
                .iter()
                .map(|c| json!({"id": c.id, "name": c.tool, "input": c.input}))
                .collect();
            driver.waiting = batch;
            Json(json!({
                "status": "tool_call_required",
                "continuation_token": token,
                "session_id": run.session_id,
                "tool_calls": tool_calls,
            }))
            .into_response()
        }
        Outcome::Done(result) => {
            // Held until its files are listed: no other run of the session changes them first.
            let held = lock(&run.held).take();
            let files = match &held {
                Some(held) => files::changed(held).await,
                None => Vec::new(),
            };
            lc.0.runs.finish(run);
            drop(held);
            answer(with_notes(result, &run.notes), &run.session_id, files)
        }
        Outcome::Stopped => {
            lc.0.runs.finish(run);
            failed(
                ERR_FAILED,
                "ptc-sidecar: the run was stopped (cancelled, or past its deadline)",
            )
        }
    }
}

/// What the sidecar has to tell the model about the run's input files, before its stderr.
fn with_notes(mut result: ExecResult, notes: &[String]) -> ExecResult {
    if !notes.is_empty() {
        result.stderr = format!("{}\n{}", notes.join("\n"), result.stderr);
    }
    result
}

/// A finished run as the client reads it: `completed` with the files the run made or changed,
/// or `error` with the traceback in stderr (a failed run's files are not offered: the client
/// says a failed run registers nothing).
fn answer(result: ExecResult, session_id: &str, files: Vec<Value>) -> Response {
    match result.status {
        ExecStatus::Ok => Json(json!({
            "status": "completed",
            "stdout": result.stdout,
            "stderr": result.stderr,
            "session_id": session_id,
            "files": files,
        }))
        .into_response(),
        status => {
            let error = match (status, result.exit_code) {
                (ExecStatus::Timeout, _) => ERR_TIME.to_string(),
                // Shown to the model as "Execution exited with code N".
                (_, Some(code)) if (-9999..=9999).contains(&code) => {
                    format!("Sandbox exited with code {code}")
                }
                _ => ERR_FAILED.to_string(),
            };
            // The model reads only stderr of an error: what the code printed first goes too.
            let stderr = if result.stdout.is_empty() {
                result.stderr
            } else {
                format!(
                    "{}\n(stdout before the error)\n{}",
                    result.stderr.trim_end(),
                    result.stdout
                )
            };
            Json(json!({
                "status": "error",
                "error": error,
                "stdout": result.stdout,
                "stderr": stderr,
                "session_id": session_id,
            }))
            .into_response()
        }
    }
}

async fn continuation(
    lc: Lc,
    body: ContinueBody,
    who: &Principal,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let claims = match lc.0.tokens.verify(&body.continuation_token, now_ms()) {
        Ok(c) => c,
        Err(e @ TokenError::Invalid) => return Err(ApiError::InvalidToken(e.to_string())),
        Err(e @ TokenError::Expired) => {
            return Ok(failed(
                ERR_TIME,
                format!("ptc-sidecar: {e}; the run is over. Run the code again."),
            ));
        }
    };
    let Some(run) = lc.0.runs.get(&claims.run) else {
        return Ok(failed(
            ERR_FAILED,
            "ptc-sidecar: the run of this continuation token is over (it finished, was \
             cancelled, or its token was already used for its last round). Run the code again.",
        ));
    };
    if claims.session != run.session_id
        || run.owner != who.owner()
        || body
            .session_id
            .as_ref()
            .is_some_and(|s| *s != run.session_id)
    {
        return Err(ApiError::InvalidToken(
            "the continuation token belongs to another session".into(),
        ));
    }
    // A request holding the driver is already continuing this run: this token is used.
    let mut driver = run.driver.try_lock().map_err(|_| ApiError::TokenUsed)?;
    if !driver.token_live || claims.round != driver.round {
        return Err(ApiError::TokenUsed);
    }
    // On a mismatch the token stays valid: a corrected request may follow.
    check_results(&driver.waiting, &body.tool_results)?;
    driver.token_live = false;
    lc.remember_request(&run, headers);
    deliver(std::mem::take(&mut driver.waiting), body.tool_results);
    Ok(advance(&lc, &run, &mut driver).await)
}

#[derive(Deserialize)]
struct CancelBody {
    request_id: String,
}

async fn cancel(
    State(lc): State<Lc>,
    Extension(who): Extension<Principal>,
    request: Request,
) -> Result<Response, ApiError> {
    let body: CancelBody = json_body(request, MAX_CANCEL_BYTES, r#"{"request_id": "..."}"#).await?;
    let run =
        lc.0.runs
            .by_request(&who.owner(), &body.request_id)
            .ok_or_else(|| {
                ApiError::NotFound("no open run has a request with this id (it may be over)".into())
            })?;
    lc.0.runs.finish(&run);
    Ok(Json(json!({"status": "cancelled", "request_id": body.request_id})).into_response())
}

#[derive(Deserialize)]
struct PlainBody {
    code: String,
    lang: Option<String>,
    timeout: Option<u64>,
    session_id: Option<String>,
    #[serde(default)]
    files: Vec<FileRef>,
}

/// `POST /exec`: code that calls no tools. The client wraps Python in `async def
/// __user_main__(): ... asyncio.run(__user_main__())`, which cannot run inside our event loop
/// (top-level await is already on), so the wrapper is taken off again.
async fn plain(
    State(lc): State<Lc>,
    Extension(who): Extension<Principal>,
    request: Request,
) -> Result<Response, ApiError> {
    let runner = lc.runner()?;
    runner.check_open()?;
    let traceparent = crate::trace::from_headers(request.headers());
    let body: PlainBody = json_body(
        request,
        MAX_BODY_BYTES,
        r#"{"lang": "py", "code": "...", "timeout"?: ms}"#,
    )
    .await?;
    let lang = check_lang(body.lang.as_deref())?;
    let timeout = run_timeout(body.timeout, runner.config().timeout);
    let (held, notes, timeout) = lc
        .hold(body.session_id.as_deref(), &who, &body.files, timeout)
        .await?;
    let code = match lang {
        Lang::Python => unwrap_plain(&body.code).unwrap_or(body.code),
        Lang::Bash | Lang::JavaScript | Lang::TypeScript => body.code,
    };
    let result = runner
        .exec(ExecRequest {
            code,
            lang,
            workspace: lc.workspace(&held),
            timeout: Some(timeout),
            snapshot: Some(lc.0.empty.clone()),
            session: Some(held.session.id.clone()),
            user: who.user().cloned(),
            files: Some(run_files(SessionFiles(held.session.clone()), &runner)),
            traceparent,
            ..ExecRequest::default()
        })
        .await;
    Ok(answer(
        with_notes(result, &notes),
        &held.session.id,
        files::changed(&held).await,
    ))
}

const WRAP_HEAD: &str = "async def __user_main__():\n    \"\"\"Auto-generated wrapper for user code to support top-level await\"\"\"\n";
const WRAP_TAIL: &str =
    "\nif __name__ == \"__main__\":\n    import asyncio\n    asyncio.run(__user_main__())\n";

/// The user's code inside the client's `wrapPythonForPlainExecution`, or `None` when the code
/// is not wrapped exactly that way.
fn unwrap_plain(code: &str) -> Option<String> {
    let inner = code.strip_prefix(WRAP_HEAD)?.strip_suffix(WRAP_TAIL)?;
    let inner = inner.strip_suffix('\n').unwrap_or(inner);
    let lines: Option<Vec<&str>> = inner
        .split('\n')
        .map(|line| {
            if line.is_empty() {
                Some(line)
            } else {
                line.strip_prefix("    ")
            }
        })
        .collect();
    Some(lines?.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// What the client's `wrapPythonForPlainExecution` makes of `code`.
    fn wrap(code: &str) -> String {
        let body: Vec<String> = code
            .split('\n')
            .map(|l| {
                if l.trim().is_empty() {
                    String::new()
                } else {
                    format!("    {l}")
                }
            })
            .collect();
        format!("{WRAP_HEAD}{}\n{WRAP_TAIL}", body.join("\n"))
    }

    #[test]
    fn unwraps_the_clients_wrapper() {
        let code = "x = 1\nif x:\n    print('a\\n')\n\nawait asyncio.sleep(0)";
        assert_eq!(unwrap_plain(&wrap(code)), Some(format!("{code}\n")));
        assert_eq!(unwrap_plain("print(1)\n"), None);
    }

    #[test]
    fn timeouts_are_clamped() {
        let ceiling = Duration::from_secs(120);
        assert_eq!(run_timeout(Some(5), ceiling), Duration::from_millis(1000));
        assert_eq!(run_timeout(Some(15_000), ceiling), Duration::from_secs(15));
        assert_eq!(run_timeout(Some(10_000_000), ceiling), ceiling);
        assert_eq!(
            run_timeout(Some(10_000_000), Duration::from_secs(900)),
            Duration::from_secs(300)
        );
        assert_eq!(run_timeout(None, ceiling), ceiling);
    }

    #[test]
    fn python_bash_javascript_and_typescript_run() {
        for lang in [None, Some("py"), Some("python"), Some("python3")] {
            assert_eq!(check_lang(lang), Ok(Lang::Python), "{lang:?}");
        }
        assert_eq!(check_lang(Some("bash")), Ok(Lang::Bash));
        for (lang, is) in [
            ("js", Lang::JavaScript),
            ("javascript", Lang::JavaScript),
            ("ts", Lang::TypeScript),
            ("typescript", Lang::TypeScript),
        ] {
            assert_eq!(check_lang(Some(lang)), Ok(is), "{lang}");
        }
        assert_eq!(
            check_lang(Some("go")),
            Err(ApiError::UnsupportedLang { lang: "go".into() })
        );
    }
}
