//! The `ptc-sidecar` command: parses the command line, sets up tracing, and hands over to `app`.

use anyhow::Context;
use clap::{Parser, Subcommand};
use ptc_sidecar::app::{self, AppState, Listener, SavedCatalog};
use ptc_sidecar::config::Config;
use ptc_sidecar::render::{Format, llm_tools};
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
    /// Print what the agent runtime hands its LLM for the configured tools.
    Tools {
        /// anthropic, openai or mcp (a tool list as JSON), or description (the exec_code text).
        #[arg(long, default_value = "anthropic")]
        format: String,
        /// Add a saved MCP tools/list result as if it came from MCP server NAME (repeatable).
        #[arg(long = "mcp-catalog", value_name = "NAME=FILE")]
        mcp_catalog: Vec<SavedCatalog>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptc-sidecar: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::from_env()?;
    match cli.command {
        Command::Tools {
            format,
            mcp_catalog,
        } => print_tools(&config, &format, &mcp_catalog),
        Command::Serve => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(serve(config)),
    }
}

fn print_tools(config: &Config, format: &str, saved: &[SavedCatalog]) -> anyhow::Result<()> {
    let snapshot = app::initial_snapshot(config, saved)?;
    for line in snapshot.catalog.report() {
        eprintln!("warning: {line}");
    }
    if format == "description" {
        if !snapshot.catalog.ptc_enabled {
            anyhow::bail!(
                "PTC_ENABLED is false, so there is no exec_code description; set PTC_ENABLED=true"
            );
        }
        println!("{}", snapshot.rendered.description);
        return Ok(());
    }
    let format: Format = format
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--format: {e}, or description"))?;
    let tools = llm_tools(
        &snapshot.catalog,
        &snapshot.rendered,
        format,
        config.timeout,
    );
    println!("{}", serde_json::to_string_pretty(&tools)?);
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let snapshot = Arc::new(app::initial_snapshot(&config, &[])?);
    app::log_report(&snapshot);
    let (_snapshot_tx, snapshot_rx) = tokio::sync::watch::channel(snapshot);
    let listener = Listener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on PTC_LISTEN={:?}", config.listen))?;
    tracing::info!(listen = %listener.local_addr(), ptc_enabled = config.enabled, "ptc-sidecar serving");
    let state = AppState {
        config: Arc::new(config),
        snapshot: snapshot_rx,
    };
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        signal.cancel();
    });
    app::run(listener, state, shutdown).await?;
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
