//! Reading the configured sources into a catalog snapshot: the host manifest
//! (`PTC_TOOLS_FILE`), saved MCP `tools/list` results (`--mcp-catalog NAME=FILE`) and the live
//! MCP servers of `PTC_MCP_CONFIG`, with the problems found on the way.
//!
//! Startup (`app`), hot reload (`reload`) and the `tools` command all build a catalog here, so
//! they cannot drift apart. Owns the order of precedence (a live server replaces a saved
//! catalog of the same name) and how a snapshot's problems are logged. Parsing one file is
//! `catalog::source`'s job, classification is `catalog`'s; this module must not serve, watch
//! files or hold state.

use crate::catalog::source::{self, SourceError};
use crate::catalog::{Catalog, CatalogInput, Policy, ServerTools};
use crate::config::Config;
use crate::mcp::{self, Hub, HubOptions, McpConfigError, ServerNameError};
use crate::render::Snapshot;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Beyond the start timeout, how long startup and reload wait for the MCP servers' first
/// round: each actor reports within its own timeout, so this only covers scheduling.
pub const MCP_STARTUP_SLACK: Duration = Duration::from_secs(1);

/// A saved MCP `tools/list` result standing in for a server (`--mcp-catalog NAME=FILE`).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedCatalog {
    pub server: String,
    pub path: PathBuf,
}

/// A `--mcp-catalog` argument that is not `NAME=FILE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SavedCatalogError {
    #[error("{0:?} is not NAME=FILE (e.g. github=corpus/github.json)")]
    NoEquals(String),
    #[error(transparent)]
    Name(#[from] ServerNameError),
    #[error("{0:?} names no file after '='")]
    NoFile(String),
}

impl std::str::FromStr for SavedCatalog {
    type Err = SavedCatalogError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (server, path) = s
            .split_once('=')
            .ok_or_else(|| SavedCatalogError::NoEquals(s.to_string()))?;
        mcp::check_server_name(server)?;
        if path.is_empty() {
            return Err(SavedCatalogError::NoFile(s.to_string()));
        }
        Ok(SavedCatalog {
            server: server.to_string(),
            path: PathBuf::from(path),
        })
    }
}

/// Reads the host manifest and any saved MCP catalogs.
pub fn load_input(config: &Config, saved: &[SavedCatalog]) -> Result<CatalogInput, SourceError> {
    let mut input = CatalogInput::default();
    if let Some(path) = &config.tools_file {
        let (manifest, problems) = source::read_manifest(path)?;
        input.host_tools = manifest.tools;
        input.callback = manifest.callback;
        input.problems.extend(problems);
    }
    for s in saved {
        let (tools, problems) = source::read_saved_tool_list(&s.path)?;
        input.problems.extend(problems);
        input.servers.push(ServerTools {
            server: s.server.clone(),
            tools,
        });
    }
    Ok(input)
}

/// Builds a catalog from the read sources and the running MCP servers' tools (a live server
/// replaces a saved catalog of the same name). Startup and hot reload both build this way.
pub fn build_catalog(
    config: &Config,
    mut input: CatalogInput,
    hub: Option<&Hub>,
    version: u64,
) -> Catalog {
    if let Some(hub) = hub {
        let (servers, problems) = hub.catalog_servers();
        input
            .servers
            .retain(|s| !servers.iter().any(|live| live.server == s.server));
        input.servers.extend(servers);
        input.problems.extend(problems);
        input.unavailable = hub.unavailable();
    }
    Catalog::build(input, &Policy::from(config), version)
}

/// The first snapshot (version 1): the configured files, the saved catalogs, and the tools of
/// the running MCP servers when there is a hub.
pub fn first_snapshot(
    config: &Config,
    saved: &[SavedCatalog],
    hub: Option<&Hub>,
) -> Result<Snapshot, SourceError> {
    let input = load_input(config, saved)?;
    Ok(snapshot(config, build_catalog(config, input, hub, 1)))
}

/// A snapshot of `catalog` with its description in `PTC_LANG` made now, where catalogs are
/// made, not by the first request that asks for it.
pub fn snapshot(config: &Config, catalog: Catalog) -> Snapshot {
    let snapshot = Snapshot::new(catalog);
    snapshot.rendered_in(config.lang);
    snapshot
}

/// Starts the servers of `PTC_MCP_CONFIG` (when set) and waits for their first attempt, at
/// most the start timeout plus [`MCP_STARTUP_SLACK`].
pub async fn start_mcp(
    config: &Config,
    shutdown: CancellationToken,
) -> Result<Option<Hub>, McpConfigError> {
    let Some(path) = &config.mcp_config else {
        return Ok(None);
    };
    let hub = Hub::from_file(path, HubOptions::from_config(config, shutdown))?;
    hub.wait_started(config.mcp_start_timeout + MCP_STARTUP_SLACK)
        .await;
    Ok(Some(hub))
}

/// Logs what a person should know about a snapshot.
pub fn log_report(snapshot: &Snapshot) {
    for line in snapshot.catalog.report() {
        tracing::warn!("{line}");
    }
    for note in &snapshot.rendered.notes {
        tracing::info!("{note}");
    }
    let rendered = &snapshot.rendered;
    if rendered.listed < rendered.lines.len() {
        tracing::info!(
            "the exec_code description shows {} of {} signatures within PTC_DESCRIPTION_BUDGET \
             ({} tokens); code finds the others with search_tools",
            rendered.listed,
            rendered.lines.len(),
            snapshot.catalog.description_budget.unwrap_or_default()
        );
    }
}

/// A tool file that cannot be used, with the variable or argument that named it: a person
/// sees `PTC_TOOLS_FILE: cannot read /etc/tools.json: ...`, not a path alone.
#[derive(Debug, thiserror::Error)]
#[error("{named_by}: {source}")]
pub struct ToolFileError {
    /// `PTC_TOOLS_FILE`, or `--mcp-catalog NAME` for a saved catalog.
    pub named_by: String,
    pub source: SourceError,
}

/// `source`, an error reading one of the sources of `config` and `saved`, with what named the
/// file (at start, in the `tools` command and at a reload).
pub fn named(config: &Config, saved: &[SavedCatalog], source: SourceError) -> ToolFileError {
    let path = match &source {
        SourceError::Read { path, .. }
        | SourceError::TooLarge { path, .. }
        | SourceError::Json { path, .. }
        | SourceError::Shape { path, .. }
        | SourceError::Callback { path, .. }
        | SourceError::ToolList { path, .. } => path,
    };
    let named_by = match saved.iter().find(|s| &s.path == path) {
        Some(s) if config.tools_file.as_ref() != Some(path) => {
            format!("--mcp-catalog {}", s.server)
        }
        _ => "PTC_TOOLS_FILE".to_string(),
    };
    ToolFileError { named_by, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn saved_catalog_arguments() {
        assert_eq!(
            "github=corpus/github.json".parse::<SavedCatalog>(),
            Ok(SavedCatalog {
                server: "github".into(),
                path: "corpus/github.json".into()
            })
        );
        let errors: Vec<String> = ["github", "a__b=x.json", "github="]
            .iter()
            .map(|s| s.parse::<SavedCatalog>().unwrap_err().to_string())
            .collect();
        assert_eq!(
            errors,
            [
                r#""github" is not NAME=FILE (e.g. github=corpus/github.json)"#,
                r#"MCP server name "a__b" must be non-empty, use only A-Z a-z 0-9 - _ . and not contain "__""#,
                r#""github=" names no file after '='"#,
            ]
        );
    }
}
