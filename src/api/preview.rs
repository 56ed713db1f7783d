//! `POST /v1/exec_code/preview`: the tools a piece of code may call, found without running it
//! (wire format in docs/protocols.md, "Preview").
//!
//! Python is read from Python's own syntax tree by a trusted analyzer (`assets/preview.py`)
//! that runs as a run of the sidecar's own: confined like every run (the pool, the fork server,
//! seccomp, Landlock, namespaces, rlimits, `PTC_TIMEOUT`), reported as none (`quiet`: no
//! `exec.*` event, so no event stream, dashboard or run metric shows it), with the user's code
//! only as data (base64 in the analyzer's source), given to `ast.parse` and nothing else.
//! Bash is scanned here ([`bash`]: the words in a command's place) and its syntax checked by
//! `bash -n` in a confined bash run, the script a quoted here-document.
//!
//! Owns the request, the mapping of what was found to the sidecar's current catalog (a tool by
//! its Python, catalog or bash name; unknown names with the closest tools, as dispatch
//! suggests them) and the answer's shape ([`tool_entry`]). It must not run the user's code,
//! nor call a tool.

mod bash;
mod javascript;

use super::error::{ApiError, json_body};
use super::exec::{LANGS, MAX_EXEC_BYTES};
use crate::catalog::{Catalog, Class, Tool};
use crate::render::Snapshot;
use crate::run::bash as run_bash;
use crate::run::javascript as run_javascript;
use crate::run::{ExecRequest, ExecResult, ExecStatus, Lang, Runner, closest, new_token};
use crate::util::cut;
use axum::extract::{Request, State};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The analyzer of Python code, run with `main("<base64 of its input>")` appended.
const ANALYZER: &str = include_str!("../../assets/preview.py");

/// What starts the one line of an analysis on the analyzer's stdout (and of `bash -n`'s exit
/// status on a bash check's).
const MARK: &str = "PTC-PREVIEW ";

/// Lines listed per tool or unknown name: enough to find each use in a script a model wrote.
pub const MAX_LINES: usize = 50;

/// Most of the analyzer's stderr an error quotes.
const MAX_QUOTED_STDERR: usize = 400;

/// Most of a name an answer quotes (a 1 MB identifier is no tool's name).
const MAX_NAME_BYTES: usize = 256;

const DYNAMIC_NOTE: &str = "a tool chosen at run time cannot be previewed";

const DIRECT_NOTE: &str = "a direct tool: the model calls it itself, code cannot";

const BASH_NOTE: &str = "bash: the tool functions the script names in a command's place are \
     listed; any other command may be a program or a function the script defines, so none is \
     reported as unknown";

#[derive(Clone)]
struct Preview {
    runner: Option<Runner>,
    snapshot: watch::Receiver<Arc<Snapshot>>,
}

/// `POST /v1/exec_code/preview`.
pub fn router<S>(runner: Option<Runner>, snapshot: watch::Receiver<Arc<Snapshot>>) -> Router<S> {
    Router::new()
        .route("/v1/exec_code/preview", post(preview))
        .with_state(Preview { runner, snapshot })
}

#[derive(Deserialize)]
struct PreviewBody {
    code: String,
    /// `"python"` (the default) or `"bash"`, as for `POST /v1/exec_code`.
    lang: Option<String>,
}

/// The analysis failed for a reason of the sidecar's, not of the code's.
#[derive(Debug, thiserror::Error)]
enum PreviewError {
    #[error(
        "the preview's analysis did not finish within PTC_TIMEOUT ({timeout_s} s): {stderr}; \
         try again, or preview a shorter piece of code"
    )]
    Timeout { timeout_s: f64, stderr: String },
    #[error("the preview's analyzer ended ({status}) without an answer: {stderr}")]
    NoAnswer { status: String, stderr: String },
    #[error("the preview's analyzer answered something that is not its protocol: {0}")]
    Malformed(String),
}

impl From<PreviewError> for ApiError {
    fn from(e: PreviewError) -> ApiError {
        match e {
            PreviewError::Timeout { .. } => ApiError::Busy(e.to_string()),
            _ => ApiError::Internal(e.to_string()),
        }
    }
}

async fn preview(State(p): State<Preview>, request: Request) -> Result<Json<Value>, ApiError> {
    let Some(runner) = p.runner.as_ref() else {
        return Err(ApiError::PtcDisabled(
            "PTC_ENABLED is false on this sidecar: every tool is direct and there is no exec_code",
        ));
    };
    runner.check_open()?;
    let body: PreviewBody = json_body(
        request,
        MAX_EXEC_BYTES,
        r#"{"code": "...", "lang"?: "python" | "bash"}"#,
    )
    .await?;
    let lang = match body.lang.as_deref() {
        None | Some("python" | "py" | "python3") => Lang::Python,
        Some("bash") => Lang::Bash,
        Some("javascript" | "js") => Lang::JavaScript,
        Some("typescript" | "ts") => Lang::TypeScript,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "lang {:?} cannot be previewed: use {LANGS}",
                cut(other, 40)
            )));
        }
    };
    let snapshot = p.snapshot.borrow().clone();
    let mut answer = match lang {
        Lang::Python => python(runner, &snapshot.catalog, body.code).await?,
        Lang::Bash => bash_script(runner, &snapshot.catalog, &body.code).await?,
        Lang::JavaScript | Lang::TypeScript => {
            let typescript = lang == Lang::TypeScript;
            node_code(runner, snapshot.clone(), body.code, typescript).await?
        }
    };
    answer["catalog_version"] = json!(snapshot.catalog.version);
    Ok(Json(answer))
}

/// One catalog tool the code may call, as the preview lists it: its catalog name, its Python
/// name, the lines that name it, whether a call of it waits for a person (`approval`), and its
/// limits (`PTC_TOOL_LIMITS`, each field the strictest of the rules that match, or null).
pub fn tool_entry(tool: &Tool, lines: &BTreeSet<u64>, runner: &Runner) -> Value {
    let limit = runner.limiter().limit_of(&tool.name);
    let limits = match limit.is_none() {
        true => Value::Null,
        false => json!({
            "max_concurrent": limit.max_concurrent,
            "per_second": limit.per_second,
            "max_per_run": limit.max_per_run,
        }),
    };
    json!({
        "name": tool.name,
        "python": tool.python_name,
        "lines": lines.iter().take(MAX_LINES).collect::<Vec<_>>(),
        "approval": runner.approvals().needs(tool),
        "limits": limits,
    })
}

/// What the code names, mapped to the catalog: the tools (by catalog name, each with its lines)
/// and the names that are none (each with its lines, and whether it is a direct tool).
#[derive(Default)]
struct Found<'c> {
    tools: HashMap<&'c str, (&'c Tool, BTreeSet<u64>)>,
    unknown: HashMap<String, (Option<&'c Tool>, BTreeSet<u64>)>,
    /// The dynamic places: (line, what).
    dynamic: Vec<(u64, String)>,
}

impl<'c> Found<'c> {
    /// `name` on `lines`, which is `tool` when there is one: a PTC tool is listed, a direct
    /// one (code cannot call it) and none at all are unknown.
    fn add(&mut self, name: &str, tool: Option<&'c Tool>, lines: impl IntoIterator<Item = u64>) {
        match tool {
            Some(t) if t.class == Class::Ptc => {
                let (_, at) = self.tools.entry(&t.name).or_insert((t, BTreeSet::new()));
                at.extend(lines);
            }
            _ => {
                let name = cut(name, MAX_NAME_BYTES).into_owned();
                let (_, at) = self.unknown.entry(name).or_insert((tool, BTreeSet::new()));
                at.extend(lines);
            }
        }
    }

    /// The answer's `tools` and `unknown`, each in the order of their first line.
    fn answer(self, catalog: &Catalog, runner: &Runner) -> (Vec<Value>, Vec<Value>) {
        let mut tools: Vec<_> = self.tools.into_values().collect();
        tools.sort_by(|a, b| (a.1.first(), &a.0.name).cmp(&(b.1.first(), &b.0.name)));
        let tools = tools
            .iter()
            .map(|(t, lines)| tool_entry(t, lines, runner))
            .collect();
        let mut unknown: Vec<(u64, Value)> = self
            .unknown
            .into_iter()
            .map(|(name, (direct, lines))| {
                let line = lines.first().copied().unwrap_or(0);
                let mut entry = json!({
                    "name": name,
                    "line": line,
                    "lines": lines.iter().take(MAX_LINES).collect::<Vec<_>>(),
                    "did_you_mean": match direct {
                        Some(_) => Vec::new(),
                        None => closest(catalog, &name),
                    },
                });
                if direct.is_some() {
                    entry["direct"] = json!(true);
                    entry["note"] = json!(DIRECT_NOTE);
                }
                (line, entry)
            })
            .collect();
        unknown.extend(self.dynamic.into_iter().map(|(line, what)| {
            let entry = json!({"name": null, "line": line, "dynamic": true, "what": what, "note": DYNAMIC_NOTE});
            (line, entry)
        }));
        unknown.sort_by(|a, b| (a.0, a.1["name"].as_str()).cmp(&(b.0, b.1["name"].as_str())));
        (tools, unknown.into_iter().map(|(_, e)| e).collect())
    }
}

/// The analyzer's answer (`assets/preview.py`).
#[derive(Deserialize)]
struct Analysis {
    syntax_error: Option<SyntaxError>,
    found: Vec<Named>,
    dynamic: Vec<Dynamic>,
    truncated: bool,
}

#[derive(Deserialize, serde::Serialize)]
struct SyntaxError {
    line: Option<u64>,
    message: String,
}

#[derive(Deserialize)]
struct Named {
    name: String,
    kind: Kind,
    lines: Vec<u64>,
}

/// How a name is looked up: as a Python name, or as `call_tool` takes it (the catalog name,
/// else the Python name).
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Python,
    Name,
}

#[derive(Deserialize)]
struct Dynamic {
    line: u64,
    what: String,
}

/// The tool a name reaches, PTC or direct, or none.
fn resolve<'c>(catalog: &'c Catalog, name: &str, kind: Kind) -> Option<&'c Tool> {
    let by_python = || {
        catalog
            .by_python_name(name)
            .or_else(|| catalog.direct().find(|t| t.python_name == name))
    };
    match kind {
        Kind::Python => by_python(),
        Kind::Name => catalog.get(name).or_else(by_python),
    }
}

/// A Python preview: the analyzer's run, its answer mapped to the catalog.
async fn python(runner: &Runner, catalog: &Catalog, code: String) -> Result<Value, ApiError> {
    let known: Vec<&str> = catalog.ptc().map(|t| t.python_name.as_str()).collect();
    let input = json!({"code": code, "known": known, "budget": runner.config().max_output_bytes});
    let data = base64::engine::general_purpose::STANDARD.encode(input.to_string());
    let result = runner
        .exec(ExecRequest {
            code: format!("{ANALYZER}\nmain(\"{data}\")\n"),
            quiet: true,
            ..ExecRequest::default()
        })
        .await;
    let analysis = analysis_of(&result, runner.config().timeout)?;
    let mut found = Found::default();
    for named in &analysis.found {
        let tool = resolve(catalog, &named.name, named.kind);
        found.add(&named.name, tool, named.lines.iter().copied());
    }
    found.dynamic = analysis
        .dynamic
        .into_iter()
        .map(|d| (d.line, cut(&d.what, MAX_NAME_BYTES).into_owned()))
        .collect();
    let (tools, unknown) = found.answer(catalog, runner);
    Ok(json!({
        "lang": "python",
        "tools": tools,
        "unknown": unknown,
        "syntax_error": analysis.syntax_error,
        "truncated": analysis.truncated,
    }))
}

/// A JavaScript or TypeScript preview: the code read in the sidecar ([`javascript::read`],
/// on a blocking thread), what it names mapped to the catalog by JavaScript name.
async fn node_code(
    runner: &Runner,
    snapshot: Arc<Snapshot>,
    code: String,
    typescript: bool,
) -> Result<Value, ApiError> {
    // Reading is a run's work: a slot of its own, as the Python analyzer's run takes, held by
    // the reading thread until it is done (even if the request is dropped meanwhile).
    let slot = runner.slot().await.map_err(|why| PreviewError::Timeout {
        timeout_s: runner.config().timeout.as_secs_f64(),
        stderr: why.to_string(),
    })?;
    let names = snapshot.clone();
    let read = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        run_javascript::on_parse_stack(move || {
            javascript::read(&code, typescript, |n| names.catalog.by_js_name(n).is_some())
        })
    })
    .await
    .map_err(|e| PreviewError::Malformed(e.to_string()))?
    .map_err(|e| PreviewError::Malformed(e.to_string()))?;
    let catalog = &snapshot.catalog;
    // A PTC tool first, as code would reach it; a direct one for what the answer says of it.
    let by_js = |name: &str| {
        catalog
            .by_js_name(name)
            .or_else(|| catalog.direct().find(|t| t.js_name == name))
    };
    let mut found = Found::default();
    for named in &read.found {
        let tool = match named.by_name {
            true => catalog.get(&named.name).or_else(|| by_js(&named.name)),
            false => by_js(&named.name),
        };
        found.add(&named.name, tool, [named.line]);
    }
    found.dynamic = read.dynamic;
    let (tools, unknown) = found.answer(catalog, runner);
    let syntax_error = read
        .syntax_error
        .map(|(line, message)| json!({"line": line, "message": message}));
    Ok(json!({
        "lang": if typescript { "typescript" } else { "javascript" },
        "tools": tools,
        "unknown": unknown,
        "syntax_error": syntax_error,
        "truncated": read.truncated,
    }))
}

/// The analyzer's answer in its run's result.
fn analysis_of(result: &ExecResult, timeout: Duration) -> Result<Analysis, PreviewError> {
    let line = answer_line(result, timeout)?;
    serde_json::from_str(line)
        .map_err(|e| PreviewError::Malformed(cut(&e.to_string(), 200).into_owned()))
}

/// The text after [`MARK`] on the last line of the run's stdout that starts with it; a run
/// that printed none ended too soon (`timeout`: the run's limit, `PTC_TIMEOUT`).
fn answer_line(result: &ExecResult, timeout: Duration) -> Result<&str, PreviewError> {
    if let Some(line) = result
        .stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(MARK))
    {
        return Ok(line);
    }
    let stderr = cut(result.stderr.trim(), MAX_QUOTED_STDERR).into_owned();
    Err(match result.status {
        ExecStatus::Timeout => PreviewError::Timeout {
            timeout_s: timeout.as_secs_f64(),
            stderr,
        },
        status => PreviewError::NoAnswer {
            status: match (status, result.exit_code) {
                (_, Some(code)) => format!("exit code {code}"),
                (ExecStatus::Ok, None) => "ok".into(),
                _ => "status error".into(),
            },
            stderr,
        },
    })
}

/// A bash preview: the tool functions the script names, and `bash -n`'s verdict.
async fn bash_script(runner: &Runner, catalog: &Catalog, code: &str) -> Result<Value, ApiError> {
    if code.len() > run_bash::MAX_CODE_BYTES {
        return Err(ApiError::BadRequest(format!(
            "bash code is limited to {} bytes (one argument of bash -c, as for exec_code), this is \
             {}: preview and run a shorter script",
            run_bash::MAX_CODE_BYTES,
            code.len()
        )));
    }
    // A tool's function, by its bash name; of two tools with one bash name the first is
    // defined (`run::bash::functions`).
    let mut functions: HashMap<String, &Tool> = HashMap::new();
    for tool in catalog.ptc() {
        let name = run_bash::bash_name(&tool.name);
        if !name.is_empty() {
            functions.entry(name).or_insert(tool);
        }
    }
    let scanned = bash::commands(code);
    let mut found = Found::default();
    for command in &scanned.found {
        if let Some(tool) = functions.get(&command.word) {
            found.add(&command.word, Some(tool), [command.line as u64]);
        }
    }
    let (tools, _) = found.answer(catalog, runner);
    let (syntax_error, checked) = bash_syntax(runner, code).await?;
    let mut answer = json!({
        "lang": "bash",
        "tools": tools,
        "unknown": [],
        "syntax_error": syntax_error,
        "syntax_checked": checked,
        "truncated": scanned.truncated,
        "note": BASH_NOTE,
    });
    if !checked {
        answer["note"] = json!(format!(
            "{BASH_NOTE}; the syntax was not checked: the script and the check together are \
             over bash's {} bytes",
            run_bash::MAX_CODE_BYTES
        ));
    }
    Ok(answer)
}

/// `bash -n` of the script in a confined bash run (the script a quoted here-document, so the
/// run's bash reads it as data and the checking bash only parses it): the syntax error, and
/// whether the check was made (the script and the check must fit one `bash -c` argument).
async fn bash_syntax(runner: &Runner, code: &str) -> Result<(Option<Value>, bool), ApiError> {
    if code.contains('\0') {
        let error = json!({"line": null, "message": "bash code cannot hold a NUL byte"});
        return Ok((Some(error), true));
    }
    // A delimiter no line of the script is.
    let delimiter = loop {
        let d = format!("PTC_PREVIEW_EOF_{}", &new_token()[..16]);
        if !code.lines().any(|l| l == d) {
            break d;
        }
    };
    let newline = if code.ends_with('\n') { "" } else { "\n" };
    let check = format!(
        "command {bash} -n 2>&1 <<'{delimiter}'\n{code}{newline}{delimiter}\n\
         builtin printf '{MARK}%s\\n' \"$?\"\n",
        bash = run_bash::BASH
    );
    if check.len() > run_bash::MAX_CODE_BYTES {
        return Ok((None, false));
    }
    let result = runner
        .exec(ExecRequest {
            code: check,
            lang: Lang::Bash,
            quiet: true,
            ..ExecRequest::default()
        })
        .await;
    let status = answer_line(&result, runner.config().timeout)?.trim();
    let error = match status.parse::<i32>() {
        Ok(0) => None,
        // Killed by a signal: bash's parser recurses, and a script nested deeply enough
        // overflows its stack (SIGSEGV), as it would when the script ran.
        Ok(code) if code > 128 => Some(json!({
            "line": null,
            "message": format!(
                "bash crashed parsing the script (signal {}), as it would running it: it is \
                 nested too deeply for bash; nest less",
                code - 128
            ),
        })),
        _ => Some(bash_error(&result.stdout)),
    };
    Ok((error, true))
}

/// The first error `bash -n` printed (`bash: line 3: syntax error near ...`) as
/// `{line, message}`.
fn bash_error(output: &str) -> Value {
    let first = output
        .lines()
        .find(|l| !l.starts_with(MARK))
        .unwrap_or("bash -n found an error it did not name");
    // After the program's name (`/bin/bash: `).
    let text = match first.split_once(": ") {
        Some((program, rest)) if program.ends_with("bash") => rest,
        _ => first,
    };
    let parsed = text.strip_prefix("line ").and_then(|rest| {
        let (n, message) = rest.split_once(": ")?;
        Some((n.parse::<u64>().ok()?, message))
    });
    match parsed {
        Some((line, message)) => json!({"line": line, "message": cut(message, MAX_QUOTED_STDERR)}),
        None => json!({"line": null, "message": cut(text, MAX_QUOTED_STDERR)}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn bash_errors_name_their_line() {
        let out = "/bin/bash: line 3: syntax error near unexpected token `fi'\n/bin/bash: line 3: `fi fi'\nPTC-PREVIEW 2\n";
        assert_eq!(
            bash_error(out),
            json!({"line": 3, "message": "syntax error near unexpected token `fi'"})
        );
        assert_eq!(
            bash_error("something else\nPTC-PREVIEW 1\n"),
            json!({"line": null, "message": "something else"})
        );
    }

    fn ended(status: ExecStatus, stdout: &str, stderr: &str) -> ExecResult {
        let mut r = ExecResult::refused(std::time::Instant::now(), status, stderr.into());
        r.stdout = stdout.into();
        r.exit_code = (status != ExecStatus::Timeout).then_some(1);
        r
    }

    /// An analyzer that crashed, timed out or printed garbage is a clear error, never a panic.
    #[test]
    fn an_analyzer_without_an_answer_is_an_error_that_says_why() {
        let t = Duration::from_secs(30);
        let err = |r: &ExecResult| ApiError::from(analysis_of(r, t).err().unwrap());
        let crashed = ended(ExecStatus::Error, "", "Segmentation fault");
        assert_eq!(
            err(&crashed),
            ApiError::Internal(
                "the preview's analyzer ended (exit code 1) without an answer: Segmentation fault"
                    .into()
            )
        );
        let slow = ended(ExecStatus::Timeout, "PTC-PREVIEW", "timed out after 30.0 s");
        assert_eq!(
            err(&slow),
            ApiError::Busy(
                "the preview's analysis did not finish within PTC_TIMEOUT (30 s): timed out \
                 after 30.0 s; try again, or preview a shorter piece of code"
                    .into()
            )
        );
        let garbage = ended(ExecStatus::Ok, "PTC-PREVIEW {\"found\": 1}\n", "");
        assert!(matches!(err(&garbage), ApiError::Internal(m) if m.contains("not its protocol")));
        let fine = "noise\nPTC-PREVIEW {\"syntax_error\":null,\"found\":[],\"dynamic\":[],\"truncated\":false}\n";
        let analysis = analysis_of(&ended(ExecStatus::Ok, fine, ""), t).unwrap();
        assert!(analysis.found.is_empty() && analysis.syntax_error.is_none());
    }
}
