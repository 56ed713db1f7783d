//! ptc-sidecar: programmatic tool calling for any agent runtime.
//!
//! Data flows one way: [`config`] → [`sandbox`] (how a run is confined) → [`catalog`] (sources,
//! classification, Python names) → [`render`] (signatures, the `exec_code` description,
//! provider tool lists) → [`run`] (runs, IPC, dispatch) → the backends ([`mcp`], [`events`]) →
//! [`sources`] (the configured sources read into a snapshot) → [`reload`] → [`api`] (the
//! control API). A module imports only from modules before it ([`util`] from none), with one
//! exception: [`run`] emits its events through [`events`], a leaf that imports only [`util`],
//! [`trace`] and [`identity`] (itself a leaf: who a request speaks for)
//! (docs/ARCHITECTURE.md). [`app`] wires them together and nothing in the library imports it;
//! `main` parses the command line.

pub mod api;
pub mod app;
pub mod catalog;
pub mod config;
/// The dashboard's model: runs, calls and tool statistics folded from events, bounded.
pub mod dashboard;
/// The sentence-embedding model of tool search (`PTC_SEARCH_MODEL`) and its tool vectors
/// (imports [`util`] and the rendered catalog).
pub mod embed;
pub mod events;
/// Who a request speaks for: the API key's holder or a LibreChat user of a verified JWT (imports
/// only [`util`]).
pub mod identity;
pub mod mcp;
/// Prometheus metrics, observed from [`events`] and scraped at `/metrics` (imports `events`
/// and [`util`]).
pub mod metrics;
/// OTLP export of the runs' and calls' spans, observed from [`events`].
pub mod otel;
pub mod reload;
pub mod render;
pub mod run;
pub mod sandbox;
/// Session folders kept across runs, never following a link inside them (imports only [`util`]).
pub mod session;
pub mod sources;
/// W3C trace context: a run is a span of its caller's trace, each tool call a child span.
pub mod trace;
pub mod util;
