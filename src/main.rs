//! The `ptc-sidecar` command: parses the command line, sets up tracing, and hands over to `app`
//! (or, for the one-shot `tools` command, to `sources`).

use anyhow::Context;
use clap::{Parser, Subcommand};
use ptc_sidecar::app::{self, Listener};
use ptc_sidecar::config::{Config, LogFormat};
use ptc_sidecar::render::llm::UnknownFormat;
use ptc_sidecar::render::{Format, llm_tools};
use ptc_sidecar::run::{ExecRequest, ExecStatus};
use ptc_sidecar::sandbox;
use ptc_sidecar::sources::{self, SavedCatalog};
use std::process::ExitCode;

#[derive(Parser)]
#[command(version, about = "Programmatic tool calling for any agent runtime", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar: the control API on PTC_LISTEN.
    Serve,
    /// Serve the MCP front door on stdin and stdout: one tool, exec_code, over the configured
    /// tools, for an MCP host's config (`claude mcp add ptc -- ptc-sidecar mcp`). PTC is
    /// treated as on; logs go to stderr.
    Mcp,
    /// Watch tool events live from Redis (REDIS_URL), one per line.
    Events {
        /// The agent to watch (default: PTC_AGENT_ID, else this host's name).
        #[arg(long, conflicts_with = "all")]
        agent: Option<String>,
        /// Every agent publishing to this Redis.
        #[arg(long)]
        all: bool,
        /// Raw JSON events instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Serve the dashboard of every agent publishing to Redis (REDIS_URL): history from the
    /// event streams, then live; the page at / and /dashboard, its data at /v1/dashboard/state.
    Dashboard {
        /// Where to listen: a loopback address unless PTC_API_KEY is set.
        #[arg(long, default_value = "127.0.0.1:7480")]
        listen: std::net::SocketAddr,
    },
    /// List the sessions of the sidecar running on PTC_LISTEN: files, and the live interpreter
    /// (runs, idle time, memory) of each.
    Sessions {
        /// The JSON of GET /v1/sessions instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print what the agent runtime hands its LLM for the configured tools.
    Tools {
        /// anthropic, openai or mcp (a tool list as JSON, per PTC_ENABLED), or description
        /// (the exec_code text, as PTC_ENABLED=true would give it).
        #[arg(long, default_value = "anthropic")]
        format: String,
        /// Add a saved MCP tools/list result as if it came from MCP server NAME (repeatable).
        #[arg(long = "mcp-catalog", value_name = "NAME=FILE")]
        mcp_catalog: Vec<SavedCatalog>,
    },
    /// Run a Python script against the configured tools; prints its output and exits with its
    /// exit code. PTC is treated as on.
    Exec {
        /// The script, or - for standard input.
        file: String,
        /// Add a saved MCP tools/list result as MCP server NAME (its tools are listed, not callable).
        #[arg(long = "mcp-catalog", value_name = "NAME=FILE")]
        mcp_catalog: Vec<SavedCatalog>,
    },
}

/// `print!` of a whole text, ending quietly on a closed pipe as `out!` does.
fn print_all(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        done => done,
    }
}

/// Prints a line to stdout, as `println!` does, but a reader that went away (`| head`) ends
/// the output quietly instead of a panic: the command is done, exit 0.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(e.into());
        }
    }};
}

fn main() -> ExitCode {
    one_malloc_arena();
    more_open_files();
    let cli = Cli::parse();
    let (report, config) = Config::from_env();
    let config = match config {
        Ok(config) => config,
        Err(e) => {
            // A misspelt name may be why a value is missing: said before the error.
            for line in report.warnings() {
                eprintln!("ptc-sidecar: warning: {line}");
            }
            eprintln!("ptc-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    // The server logs what it does; a one-shot command's output is the script's or the
    // catalog's, so it shows only warnings unless RUST_LOG asks for more.
    let default = match cli.command {
        Command::Serve => "info,rmcp=warn",
        // The search model's progress embedding a catalog before a search answers.
        _ => "warn,rmcp=error,ptc_sidecar::embed::progress=info",
    };
    // RUST_LOG through the configuration, so a `.env` may set it too; a filter that does not
    // parse leaves the default, as tracing's own reading of RUST_LOG does.
    let filter = config
        .log_filter
        .as_deref()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(ptc_sidecar::util::RedactedStderr);
    match config.log_format {
        // One JSON object per line, for a log collector.
        LogFormat::Json => log.json().init(),
        // Colour for a person at a terminal only: a log collector gets plain lines.
        LogFormat::Text => log
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    for line in report.warnings() {
        tracing::warn!("{line}");
    }
    if let Some(line) = report.dotenv_line() {
        tracing::info!("{line}");
    }
    match run(cli, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptc-sidecar: {}", describe(&e));
            ExitCode::from(2)
        }
    }
}

/// glibc's malloc gives threads arenas of their own (up to 8 per core), and memory freed in one
/// arena serves only the threads that use it: under load the sidecar's async workers each grew
/// an arena to their own peak (load bench, medians of 7 pairs: peak RSS 60.1 MB with glibc's
/// default, 52.6 MB with one arena; runs/s about 5% lower over 14 pairs, within their noise).
/// The sidecar's work is I/O, its threads few and their allocations mostly served by glibc's
/// per-thread cache, so one shared arena costs little.
/// Called first in `main`, before any thread starts. An operator's own `MALLOC_ARENA_MAX` or
/// `GLIBC_TUNABLES` (glibc's variables, which glibc reads itself) wins.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none()
        && std::env::var_os("GLIBC_TUNABLES").is_none()
    {
        // SAFETY: mallopt only sets a parameter of glibc's allocator; no other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// Raises the soft limit on open descriptors to the hard one (at most [`MAX_OPEN_FILES`]), as
/// Go's runtime does: a soft limit of 1024 (systemd's default) is used up by a few hundred runs'
/// pipes, bridges and connections. Children set their own (`RLIMIT_NOFILE` 256 for a run).
fn more_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max.min(MAX_OPEN_FILES);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The most open descriptors [`more_open_files`] asks for.
const MAX_OPEN_FILES: libc::rlim_t = 1 << 16;

/// An error with its causes, as `{:#}` shows them, less each cause the message before it
/// already contains (our errors say their cause in their own message).
fn describe(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn run(cli: Cli, config: Config) -> anyhow::Result<()> {
    if matches!(
        cli.command,
        Command::Serve | Command::Mcp | Command::Exec { .. }
    ) {
        // Before `keep_secrets`: newuidmap maps only a process that is dumpable.
        uids_of_our_own(&config)?;
    }
    keep_secrets()?;
    match cli.command {
        Command::Tools {
            format,
            mcp_catalog,
        } => print_tools(config, &format, &mcp_catalog),
        Command::Serve => runtime()?.block_on(serve(config)),
        Command::Mcp => runtime()?.block_on(mcp(config)),
        Command::Events { agent, all, json } => {
            let url = config
                .redis_url
                .clone()
                .context("REDIS_URL is not set; events are only in Redis and at GET /v1/events")?;
            let agent = (!all).then(|| agent.unwrap_or_else(|| config.agent_id.clone()));
            Ok(runtime()?.block_on(ptc_sidecar::events::watch(
                &url,
                agent.as_deref(),
                json,
                std::io::stdout(),
            ))?)
        }
        Command::Sessions { json } => runtime()?.block_on(print_sessions(&config, json)),
        Command::Dashboard { listen } => runtime()?.block_on(dashboard(&config, listen)),
        Command::Exec { file, mcp_catalog } => {
            let code = exec_code_of(&file)?;
            let exit = runtime()?.block_on(exec(config, code, mcp_catalog))?;
            std::process::exit(exit);
        }
    }
}

/// `ptc-sidecar dashboard`: folds every agent's events from Redis into one board and serves it.
async fn dashboard(config: &Config, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    use ptc_sidecar::api::dashboard::{Board, board_router, page_router};
    let url = config
        .redis_url
        .clone()
        .context("REDIS_URL is not set; the dashboard reads every agent's events from Redis")?;
    if !listen.ip().is_loopback() && config.api_key.is_none() {
        anyhow::bail!(
            "--listen {listen} is not a loopback address; listening on other interfaces requires PTC_API_KEY"
        );
    }
    let board = std::sync::Arc::new(Board::default());
    let feeding = board.clone();
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let mut follow = tokio::spawn(async move {
        let ready = move || {
            let _ = ready_tx.send(());
        };
        ptc_sidecar::events::follow_all(&url, |json| feeding.fold(json), ready).await
    });
    // Serve once the history is in: a first look finds it.
    tokio::select! {
        _ = ready => {}
        followed = &mut follow => {
            followed??;
            anyhow::bail!("the Redis connection ended before the history was read");
        }
    }
    let router = board_router(board, config.api_key.clone());
    let router = router.merge(page_router(true));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    // On stdout: the address to open (with --listen 127.0.0.1:0, the port the system chose).
    out!(
        "ptc-sidecar dashboard serving on http://{}",
        listener.local_addr()?
    );
    tokio::select! {
        served = axum::serve(listener, router) => served?,
        followed = follow => {
            followed??;
        }
        _ = wait_for_signal() => {}
    }
    Ok(())
}

/// `ptc-sidecar sessions`: `GET /v1/sessions` of the running sidecar, as a table or JSON.
async fn print_sessions(config: &Config, json: bool) -> anyhow::Result<()> {
    let ptc_sidecar::config::Listen::Tcp(addr) = &config.listen else {
        anyhow::bail!(
            "PTC_LISTEN is a unix socket; use curl --unix-socket PATH http://x/v1/sessions"
        );
    };
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("http://{addr}/v1/sessions"))
        .timeout(std::time::Duration::from_secs(10));
    if let Some(key) = &config.api_key {
        request = request.header("X-API-Key", key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("no sidecar answers on {addr} (PTC_LISTEN)"))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await?;
    if !status.is_success() {
        anyhow::bail!("GET /v1/sessions: {status}: {body}");
    }
    if json {
        out!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    out!("{} live of at most {}", body["live"], body["max_live"]);
    out!(
        "{:<24} {:>5} {:>6} {:>9} {:>10} {:>6} {:>10}",
        "SESSION",
        "LIVE",
        "RUNS",
        "IDLE",
        "MEMORY",
        "FILES",
        "BYTES"
    );
    for s in body["sessions"].as_array().into_iter().flatten() {
        if let Some(why) = s["unreadable"].as_str() {
            // Held out of every route (docs/SECURITY.md): no figures, only why.
            let id = s["id"].as_str().unwrap_or("?");
            out!("{id:<24} held out: its record cannot be read ({why})");
            continue;
        }
        let mb = |v: &serde_json::Value| {
            v.as_f64()
                .map_or("-".to_string(), |b| format!("{:.1} MB", b / 1048576.0))
        };
        out!(
            "{:<24} {:>5} {:>6} {:>8.0}s {:>10} {:>6} {:>10}",
            s["id"].as_str().unwrap_or("?"),
            if s["live"] == true { "yes" } else { "no" },
            s["runs"].as_u64().map_or("-".into(), |r| r.to_string()),
            s["idle_s"].as_f64().unwrap_or(0.0),
            mb(&s["memory_bytes"]),
            s["files"].as_u64().unwrap_or(0),
            s["bytes"].as_u64().unwrap_or(0),
        );
    }
    Ok(())
}

/// An unprivileged sidecar that runs code enters a user namespace of its own with the ids
/// `/etc/subuid` grants its user, so each run gets a uid of its own as under a root sidecar
/// (`sandbox::subordinate`). Not tried where the sidecar may switch users already, or where
/// the sandbox, the run user or the uid range is off. Called before any thread exists.
fn uids_of_our_own(config: &Config) -> anyhow::Result<()> {
    use ptc_sidecar::config::{SandboxMode, SandboxUser};
    if sandbox::can_switch_users()
        || config.sandbox == SandboxMode::Off
        || config.sandbox_user == SandboxUser::Sidecar
        || config.sandbox_uids.is_none()
    {
        return Ok(());
    }
    let asked = (!config.sandbox_uids_is_default)
        .then_some(config.sandbox_uids)
        .flatten();
    Ok(sandbox::subordinate::enter(asked)?)
}

/// The sidecar keeps its secrets from code (docs/SECURITY.md): once the configuration holds
/// them, they leave the process environment (which children and `/proc/PID/environ` could
/// show), and the process becomes undumpable (no `/proc/PID/mem` or `environ` for processes of
/// the same uid, no core dumps).
fn keep_secrets() -> anyhow::Result<()> {
    // SAFETY: called from `main` before the tokio runtime or any other thread exists, so no
    // thread can be reading the environment while it changes.
    unsafe { sandbox::secrets::scrub_environment(sandbox::secrets::SECRET_VARIABLES) };
    sandbox::secrets::set_not_dumpable().context("prctl(PR_SET_DUMPABLE, 0)")
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

fn exec_code_of(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut code = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut code)
            .context("cannot read the script from standard input")?;
        Ok(code)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))
    }
}

/// `ptc-sidecar mcp`: the sidecar behind the MCP front door on stdio, until the host closes
/// stdin (or SIGTERM or SIGINT); then the runs still going are stopped (their host is gone),
/// and the events written, as at a shutdown.
async fn mcp(mut config: Config) -> anyhow::Result<()> {
    config.enabled = true;
    let sidecar = app::Sidecar::start(config, &[]).await?;
    tokio::select! {
        served = ptc_sidecar::api::front::serve_stdio(sidecar.state.clone()) => served?,
        _ = wait_for_signal() => tracing::info!("shutting down"),
    }
    app::drain(
        &sidecar.state,
        std::time::Duration::ZERO,
        std::future::ready(()),
    )
    .await;
    sidecar.shutdown.cancel();
    sidecar.flush().await;
    drop(sidecar);
    Ok(())
}

async fn exec(mut config: Config, code: String, saved: Vec<SavedCatalog>) -> anyhow::Result<i32> {
    config.enabled = true;
    config.warm_workers = 0;
    let sidecar = app::Sidecar::start(config, &saved).await?;
    let runner = sidecar
        .state
        .runner
        .clone()
        .context("the runner did not start")?;
    let result = runner
        .exec(ExecRequest {
            code,
            ..ExecRequest::default()
        })
        .await;
    print_all(&result.stdout)?;
    eprint!("{}", result.stderr);
    Ok(match result.status {
        ExecStatus::Ok => 0,
        ExecStatus::Timeout => 124,
        ExecStatus::Error => result.exit_code.filter(|c| *c > 0).unwrap_or(1),
    })
}

fn print_tools(mut config: Config, format: &str, saved: &[SavedCatalog]) -> anyhow::Result<()> {
    // The description is what the model reads with PTC on: printing it only reads the tools,
    // so it needs no PTC_ENABLED (as `exec` and `mcp` turn PTC on themselves). The tool lists
    // keep PTC_ENABLED: with it off they show every tool offered directly, as a runtime would.
    if format == "description" {
        config.enabled = true;
    }
    let config = &config;
    // MCP servers are started to list their tools, and stopped with the runtime at the end.
    let runtime = runtime()?;
    let hub = runtime.block_on(sources::start_mcp(
        config,
        tokio_util::sync::CancellationToken::new(),
    ))?;
    for line in hub.iter().flat_map(|hub| hub.status_lines()) {
        eprintln!("{line}");
    }
    let snapshot = sources::first_snapshot(config, saved, hub.as_ref())
        .map_err(|e| app::tools_error(config, saved, e))?;
    for line in snapshot.catalog.report() {
        eprintln!("warning: {line}");
    }
    let rendered = snapshot.rendered_in(config.lang);
    if format == "description" {
        out!("{}", rendered.description);
        return Ok(());
    }
    let format: Format = format
        .parse()
        .map_err(|e: UnknownFormat| anyhow::anyhow!("--format: {e}, or description"))?;
    let tools = llm_tools(&snapshot.catalog, rendered, format, config.timeout);
    out!("{}", serde_json::to_string_pretty(&tools)?);
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listen = config.listen.clone();
    let sidecar = app::Sidecar::start(config, &[]).await?;
    let listener = Listener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on PTC_LISTEN={listen}"))?;
    tracing::info!(
        listen = %listener.local_addr(),
        ptc_enabled = sidecar.state.config.enabled,
        ipc = %sidecar.state.runner.as_ref().map(|r| r.ipc_addr().to_string()).unwrap_or_default(),
        "ptc-sidecar serving"
    );
    ptc_sidecar::api::log_startup(&sidecar.state.config);
    let state = sidecar.state.clone();
    let shutdown = sidecar.shutdown.clone();
    let signal = shutdown.clone();
    let draining = state.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        // The runs get PTC_SHUTDOWN_GRACE; a second signal stops them at once.
        let grace = draining.config.shutdown_grace;
        app::drain(&draining, grace, wait_for_signal()).await;
        tracing::info!("shutting down");
        signal.cancel();
    });
    app::run(listener, state, shutdown).await?;
    sidecar.flush().await;
    drop(sidecar);
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the process still stops on SIGKILL; nothing to wait for.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
