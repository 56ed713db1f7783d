//! Hot reload: rebuilds the catalog when `PTC_TOOLS_FILE` or `PTC_MCP_CONFIG` changes on disk
//! or an MCP server says its tool list changed, and swaps the new snapshot in whole; re-reads
//! the limits per tool when `PTC_TOOL_LIMITS` names a file and it changed.
//!
//! Owns the file watching (the parent directories, so editors that save by rename and
//! Kubernetes ConfigMap symlink swaps are seen), the debouncing, and the comparison that decides
//! whether anything the model sees changed. A broken file keeps the last good catalog; what went
//! wrong goes to the log, to `/healthz` and into a `catalog.reloaded` event with `ok: false`.
//! Runs in flight keep the snapshot they started with.
//!
//! A change to `PTC_MCP_CONFIG` also reconfigures the hub: added servers start, removed ones
//! stop, changed ones restart (see [`Hub::reconfigure`]); a broken file changes nothing.
//!
//! A configured MCP server that stops or starts running, as the description tells the model
//! (`mcp` module docs), is a change too: the hub moves `tools_changed`, the catalog is rebuilt
//! and its `catalog.reloaded` event lists the servers not running (`unavailable`). When the
//! first catalog already names some, the reloader says so at its start with one such event for
//! that catalog's version, so a server that could not start is in the events too.
//!
//! Reads the sources exactly as startup does, through [`sources`]; must not build catalogs
//! any other way.

use crate::catalog::{Catalog, Tool};
use crate::config::{Config, LimitRules, LimitsError, LimitsSource};
use crate::events::{Event, Events};
use crate::mcp::{self, Hub, McpConfigError};
use crate::render::Snapshot;
use crate::run::Limiter;
use crate::sources::{self, SavedCatalog};
use crate::util::{lock, redact_urls};
use notify::Watcher;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Quiet time after the last change before rebuilding: one save is often several writes.
pub const DEBOUNCE: Duration = Duration::from_millis(250);
/// Longest a rebuild waits for quiet: a server sending list_changed in a loop still gets at
/// most one rebuild per this interval.
pub const MAX_DELAY: Duration = Duration::from_secs(2);
/// File events buffered between the watcher thread and the reloader; more are redundant.
const EVENT_BUFFER: usize = 64;

/// What changed between two catalogs, by tool name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// Tools added, removed, and changed in anything the model sees or a call depends on.
pub fn diff(old: &Catalog, new: &Catalog) -> Diff {
    let index = |c: &Catalog| -> BTreeMap<String, Tool> {
        c.tools()
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect()
    };
    let (old, new) = (index(old), index(new));
    let mut d = Diff::default();
    for (name, tool) in &new {
        match old.get(name) {
            None => d.added.push(name.clone()),
            Some(before) if before != tool => d.changed.push(name.clone()),
            Some(_) => {}
        }
    }
    d.removed = old
        .keys()
        .filter(|n| !new.contains_key(*n))
        .cloned()
        .collect();
    d
}

/// Why a reload kept the current catalog.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Tools(#[from] sources::ToolFileError),
    #[error("PTC_TOOL_LIMITS: {0}")]
    Limits(#[from] LimitsError),
    #[error(transparent)]
    Mcp(#[from] McpConfigError),
}

/// Why the reloader could not start watching.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch tool files: {0}")]
    Watcher(#[source] notify::Error),
    #[error("cannot watch {}: {source}", .dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// The last reload's outcome, for `/healthz`.
#[derive(Debug, Default, Clone)]
pub struct ReloadStatus {
    pub reloads: u64,
    /// Reloads that kept the old catalog (every attempt, not only distinct errors).
    pub failures: u64,
    pub last_error: Option<String>,
}

/// Everything the reloader needs.
pub struct Reloader {
    pub config: Arc<Config>,
    pub saved: Vec<SavedCatalog>,
    pub mcp: Option<Hub>,
    pub snapshots: watch::Sender<Arc<Snapshot>>,
    pub events: Events,
    pub status: Arc<Mutex<ReloadStatus>>,
    /// The limits per tool, re-read from `PTC_TOOL_LIMITS`'s file when it names one (none
    /// without a runner).
    pub limiter: Option<Arc<Limiter>>,
}

impl Reloader {
    /// Watches until `shutdown`. Fails only when a watcher cannot be set up at all.
    pub fn spawn(self, shutdown: CancellationToken) -> Result<(), WatchError> {
        let (tx, rx) = mpsc::channel::<()>(EVENT_BUFFER);
        let files: Vec<PathBuf> = [
            &self.config.tools_file,
            &self.config.mcp_config,
            &self.limits_file().cloned(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        let watcher = if files.is_empty() {
            None
        } else {
            let sender = tx.clone();
            let mut watcher =
                notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                    // Which file it was does not matter: a rebuild compares content anyway.
                    if event.is_ok() {
                        let _ = sender.try_send(());
                    }
                })
                .map_err(WatchError::Watcher)?;
            for dir in watch_dirs(&files) {
                if let Err(source) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
                    return Err(WatchError::Dir { dir, source });
                }
            }
            Some(watcher)
        };
        if let Some(hub) = &self.mcp {
            let mut changed = hub.tools_changed();
            let tx = tx.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        r = changed.changed() => if r.is_err() { return },
                        _ = stop.cancelled() => return,
                    }
                    let _ = tx.try_send(());
                }
            });
        }
        drop(tx);
        self.announce_unavailable();
        tokio::spawn(async move {
            // The watcher lives as long as this task.
            let _watcher = watcher;
            self.run(rx, shutdown).await;
        });
        Ok(())
    }

    async fn run(self, mut rx: mpsc::Receiver<()>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                got = rx.recv() => if got.is_none() { return },
                _ = shutdown.cancelled() => return,
            }
            settle(&mut rx).await;
            self.reload().await;
        }
    }

    /// Re-reads the MCP config (reconfiguring the hub) and rebuilds the catalog now; swaps it
    /// in when anything changed. A broken tools file or MCP config changes nothing.
    pub async fn reload(&self) {
        let version = self.snapshots.borrow().catalog.version;
        // Like the tools file: a broken limits file changes nothing, the catalog included.
        if let Err(e) = self.reload_limits() {
            return self.fail(&e, version);
        }
        // The tools file first: when it is broken the hub is left alone too.
        let input = match sources::load_input(&self.config, &self.saved) {
            Ok(input) => input,
            Err(e) => {
                let named = sources::named(&self.config, &self.saved, e);
                return self.fail(&ReloadError::from(named), version);
            }
        };
        if let Err(e) = self.reconfigure_mcp().await {
            return self.fail(&e, version);
        }
        // Taken after the wait above: the version goes up from what is current now.
        let current = self.snapshots.borrow().clone();
        let catalog = sources::build_catalog(
            &self.config,
            input,
            self.mcp.as_ref(),
            current.catalog.version + 1,
        );
        let mut status = lock(&self.status);
        status.last_error = None;
        if catalog.fingerprint == current.catalog.fingerprint {
            return;
        }
        let d = diff(&current.catalog, &catalog);
        let snapshot = Arc::new(sources::snapshot(&self.config, catalog));
        sources::log_report(&snapshot);
        let down: Vec<&str> = (snapshot.catalog.unavailable.iter())
            .map(|u| u.server.as_str())
            .collect();
        tracing::info!(
            version = snapshot.catalog.version,
            added = ?d.added, removed = ?d.removed, changed = ?d.changed, unavailable = ?down,
            "catalog reloaded"
        );
        let mut event = Event::new("catalog.reloaded");
        event.ok = Some(true);
        event.version = Some(snapshot.catalog.version);
        event.added = Some(d.added);
        event.removed = Some(d.removed);
        event.changed = Some(d.changed);
        event.unavailable = Some(self.unavailable(&snapshot.catalog));
        self.snapshots.send_replace(snapshot);
        status.reloads += 1;
        self.events.emit(event);
    }

    /// The servers `catalog` names as not running, as a `catalog.reloaded` event lists them:
    /// what the description says, and the outage's times from the hub.
    fn unavailable(&self, catalog: &Catalog) -> Vec<Value> {
        let status = self.mcp.as_ref().map(Hub::status).unwrap_or_default();
        catalog
            .unavailable
            .iter()
            .map(|u| {
                let mut entry = json!({"server": u.server, "error": u.error});
                if let Some(down) = status.get(&u.server).and_then(|s| s.down.as_ref()) {
                    entry["down_since_ms"] = json!(down.since_ms);
                    if let Some(at) = down.next_attempt_ms {
                        entry["next_attempt_ms"] = json!(at);
                    }
                    if let Some(died) = &down.died {
                        entry["died"] = json!(died);
                    }
                }
                entry
            })
            .collect()
    }

    /// At the start: when the first catalog names servers that are not running, one
    /// `catalog.reloaded` for its version lists them (nothing added, removed or changed).
    fn announce_unavailable(&self) {
        let current = self.snapshots.borrow().clone();
        if current.catalog.unavailable.is_empty() {
            return;
        }
        let mut event = Event::new("catalog.reloaded");
        event.ok = Some(true);
        event.version = Some(current.catalog.version);
        event.added = Some(Vec::new());
        event.removed = Some(Vec::new());
        event.changed = Some(Vec::new());
        event.unavailable = Some(self.unavailable(&current.catalog));
        self.events.emit(event);
    }

    /// The file `PTC_TOOL_LIMITS` names, when it names one.
    fn limits_file(&self) -> Option<&PathBuf> {
        match &self.config.control.tool_limits {
            Some(LimitsSource::File(path)) => Some(path),
            _ => None,
        }
    }

    /// Re-reads the limits file and swaps its rules in when they changed (calls already let
    /// through keep what let them through).
    fn reload_limits(&self) -> Result<(), ReloadError> {
        let (Some(path), Some(limiter)) = (self.limits_file(), &self.limiter) else {
            return Ok(());
        };
        let rules = LimitRules::read(path)?;
        if *limiter.rules() != rules {
            tracing::info!(rules = rules.rules.len(), "tool limits reloaded");
            limiter.set_rules(rules);
        }
        Ok(())
    }

    /// Keeps the current catalog (and servers) and says why: log, `/healthz`, and a
    /// `catalog.reloaded` event with `ok: false`, each once per distinct error.
    fn fail(&self, error: &ReloadError, version: u64) {
        // A callback or server URL in the message may carry a token.
        let message = redact_urls(&format!("{error}; keeping catalog version {version}"));
        let mut status = lock(&self.status);
        status.failures += 1;
        if status.last_error.as_deref() != Some(message.as_str()) {
            tracing::warn!("reload failed: {message}");
            let mut event = Event::new("catalog.reloaded");
            event.ok = Some(false);
            event.version = Some(version);
            event.error = Some(json!({"type": "reload", "message": message}));
            self.events.emit(event);
        }
        status.last_error = Some(message);
    }

    /// Re-reads `PTC_MCP_CONFIG` and makes the hub run what it lists; waits (at most the start
    /// timeout, plus scheduling slack) for new servers' first round so their tools make this
    /// rebuild. A broken file leaves the hub as it is.
    ///
    /// `Sidecar::start` builds a hub whenever `PTC_MCP_CONFIG` is set, even when the file
    /// lists no servers, so servers added to an empty file start here too. Without a hub
    /// (a `Reloader` built by hand with `mcp: None`) there is nothing to reconfigure.
    async fn reconfigure_mcp(&self) -> Result<(), ReloadError> {
        let (Some(path), Some(hub)) = (&self.config.mcp_config, &self.mcp) else {
            return Ok(());
        };
        let specs = mcp::config::read(path)?;
        let done = hub.reconfigure(specs);
        if done.is_empty() {
            return Ok(());
        }
        tracing::info!(
            started = ?done.started, stopped = ?done.stopped, restarted = ?done.restarted,
            "MCP servers reconfigured"
        );
        if !done.started.is_empty() || !done.restarted.is_empty() {
            hub.wait_started(hub.start_timeout() + sources::MCP_STARTUP_SLACK)
                .await;
        }
        Ok(())
    }
}

/// Waits until no new trigger came for [`DEBOUNCE`], or [`MAX_DELAY`] passed.
async fn settle(rx: &mut mpsc::Receiver<()>) {
    let deadline = tokio::time::Instant::now() + MAX_DELAY;
    loop {
        let quiet = (tokio::time::Instant::now() + DEBOUNCE).min(deadline);
        match tokio::time::timeout_at(quiet, rx.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < deadline => continue,
            _ => return,
        }
    }
}

/// The directories holding the files, each once.
fn watch_dirs(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .map(|f| {
            let abs = std::path::absolute(f).unwrap_or_else(|_| f.clone());
            abs.parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."))
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::ToolDef;
    use crate::catalog::{CatalogInput, Policy};

    fn catalog(tools: &[(&str, &str)]) -> Catalog {
        let defs = tools
            .iter()
            .map(|(name, description)| ToolDef {
                name: name.to_string(),
                title: None,
                description: description.to_string(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            })
            .collect();
        let policy = Policy {
            ptc_enabled: true,
            ..Policy::default()
        };
        Catalog::build(
            CatalogInput {
                host_tools: defs,
                ..CatalogInput::default()
            },
            &policy,
            1,
        )
    }

    #[test]
    fn diff_names_what_changed() {
        let old = catalog(&[("a", "A"), ("b", "B"), ("c", "C")]);
        let new = catalog(&[("a", "A"), ("b", "B2"), ("d", "D")]);
        assert_eq!(
            diff(&old, &new),
            Diff {
                added: vec!["d".into()],
                removed: vec!["c".into()],
                changed: vec!["b".into()]
            }
        );
        assert!(diff(&old, &old).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn settling_waits_for_quiet_but_not_forever() {
        let (tx, mut rx) = mpsc::channel(8);
        // A burst, then quiet: returns one debounce after the last trigger.
        let start = tokio::time::Instant::now();
        let burst = tokio::spawn(async move {
            for _ in 0..3 {
                tx.send(()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tx
        });
        settle(&mut rx).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(300) + DEBOUNCE - Duration::from_millis(100)
        );
        // A trigger every 100 ms forever: settles at MAX_DELAY.
        let tx = burst.await.unwrap();
        let start = tokio::time::Instant::now();
        let storm = tokio::spawn(async move {
            loop {
                if tx.send(()).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        settle(&mut rx).await;
        assert_eq!(start.elapsed(), MAX_DELAY);
        storm.abort();
    }
}
