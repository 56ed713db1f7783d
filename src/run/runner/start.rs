//! How a run's turn starts: the job it is given, and the interpreter it runs on (the session's
//! live one, or a fresh child running Python's SDK, bash with the tool functions, or node with
//! the code's module).

use super::{CALL_TIMEOUT_MARGIN, Runner};
use crate::run::bash;
use crate::run::calls::new_token;
use crate::run::javascript;
use crate::run::output::Captured;
use crate::run::pool::OnServer;
use crate::run::request::{ExecRequest, ExecStatus, Lang};
use crate::run::turn::{Finished, Job, Turn, TurnRun};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

impl Runner {
    /// How long the SDK waits for one call's answer before it gives up on the sidecar: the
    /// tool's timeout, and a person's when calls may wait for one.
    fn call_timeout(&self) -> Duration {
        let approvals = self.inner.calls.approvals();
        let person = match approvals.on() {
            true => approvals.timeout(),
            false => Duration::ZERO,
        };
        self.inner.cfg.tool_timeout + CALL_TIMEOUT_MARGIN + person
    }

    /// The run's turn on an interpreter: the session's live one for Python code of a live
    /// session, else a fresh child (Python, bash with the tool functions, or node with the
    /// code's module). A run that cannot start is finished with why.
    pub(super) async fn turn(
        &self,
        req: &ExecRequest,
        run: TurnRun<'_>,
        code: &str,
        runs: Runs,
    ) -> Result<Turn, Finished> {
        let cfg = &self.inner.cfg;
        let pool = &self.inner.pool;
        let (id, prepared, token) = (run.id, run.prepared, run.token);
        let mut job = json!({
            "code": code,
            "ipc": self.ipc_addr().to_string(),
            "token": token,
            "call_timeout": self.call_timeout().as_secs_f64(),
            "allow_subprocess": cfg.allow_subprocess,
        });
        if let (Lang::Python, true, Some(session), Some(_)) =
            (req.lang, req.live, req.session.as_deref(), &req.workspace)
        {
            let nonce = new_token()[..32].to_string();
            job["session"] = json!(true);
            job["nonce"] = json!(nonce);
            let live = &self.inner.live;
            return Turn::live(pool, cfg, live, session, run, job, &nonce).await;
        }
        let started = match runs {
            Runs::Python => {
                let job = job.to_string();
                let warm = req.snapshot.is_none();
                Turn::fresh(
                    pool,
                    cfg,
                    run,
                    Job::Python {
                        job: job.as_bytes(),
                        warm,
                    },
                )
                .await
            }
            Runs::Bash(functions) => {
                let mut program =
                    bash::program(code, &pool.scratch_of(id), self.ipc_addr().port(), token);
                program.files = vec![(bash::FUNCTIONS_FILE.into(), functions)];
                // The current catalog's fork server, when there is a warm pool to keep it.
                let current = match cfg.warm_workers {
                    0 => None,
                    _ => self.inner.preparations.current().await.ok().map(|(_, p)| p),
                };
                let fork_from = current.as_deref().unwrap_or(prepared);
                let on = OnServer {
                    prepared: fork_from,
                    own: false,
                    warm_node: false,
                };
                let job = Job::Program {
                    program: &program,
                    on,
                    job: b"",
                };
                Turn::fresh(pool, cfg, run, job).await
            }
            Runs::Node(module) => {
                let program = javascript::program(&prepared.sdk_dir, cfg.allow_subprocess);
                module.into_job(&mut job);
                let job = job.to_string();
                // node reads the run's catalog in the SDK directory of the server it is forked
                // from: a request's own catalog gets a server of its own.
                let on = OnServer {
                    prepared,
                    own: req.snapshot.is_some(),
                    warm_node: true,
                };
                let job = Job::Program {
                    program: &program,
                    on,
                    job: job.as_bytes(),
                };
                Turn::fresh(pool, cfg, run, job).await
            }
        };
        started.map_err(|e| {
            let program = match req.lang {
                Lang::Python => cfg.python.display().to_string(),
                Lang::Bash => bash::BASH.to_string(),
                Lang::JavaScript | Lang::TypeScript => javascript::NODE.to_string(),
            };
            Finished {
                status: ExecStatus::Error,
                output: Captured {
                    stderr: format!("ptc-sidecar could not start {program}: {e}"),
                    ..Captured::default()
                },
                exit_code: None,
                session: None,
            }
        })
    }
}

/// What a run's child runs beyond its job: the SDK's bootstrap, or a program.
pub(super) enum Runs {
    Python,
    /// bash, with the file of its tool functions.
    Bash(String),
    /// node, with the module of the code ([`javascript::module`]).
    Node(javascript::Module),
}

/// What a run of `lang` runs beyond its job (for node, the code's module: [`node_module`], its
/// reading holding the run's `slot`).
pub(super) async fn runs_of(
    lang: Lang,
    catalog: &crate::catalog::Catalog,
    code: &str,
    slot: Arc<OwnedSemaphorePermit>,
) -> Result<Runs, Unreadable> {
    Ok(match lang {
        Lang::Python => Runs::Python,
        Lang::Bash => Runs::Bash(bash::functions(catalog)),
        Lang::JavaScript | Lang::TypeScript => Runs::Node(node_module(code, lang, slot).await?),
    })
}

/// Why JavaScript or TypeScript code was made no module: its syntax error as the run prints
/// it, or the reader's failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unreadable(String);

/// The module node imports for `code` (TypeScript stripped of its types); on a blocking thread
/// with the parser's stack, which holds the run's `slot` until it is done: a run dropped while
/// its code is read leaves no reading going on outside the `max_runs` slots.
async fn node_module(
    code: &str,
    lang: Lang,
    slot: Arc<OwnedSemaphorePermit>,
) -> Result<javascript::Module, Unreadable> {
    let code = code.to_string();
    let typescript = lang == Lang::TypeScript;
    let read = move || {
        let _slot = slot;
        javascript::on_parse_stack(move || javascript::module(&code, typescript))
    };
    let failed =
        |e: &dyn std::fmt::Display| Unreadable(format!("ptc-sidecar could not read the code: {e}"));
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(Ok(module))) => Ok(module),
        Ok(Ok(Err(syntax))) => Err(Unreadable(syntax.to_string())),
        Ok(Err(e)) => Err(failed(&e)),
        Err(e) => Err(failed(&e)),
    }
}
