//! ptc-sidecar: programmatic tool calling for any agent runtime.
//!
//! Data flows one way: [`config`] → [`catalog`] (sources, classification, Python names) →
//! [`render`] (signatures, the `exec_code` description, provider tool lists) → [`api`] (the
//! control API). [`app`] wires them together; `main` parses the command line.

pub mod api;
pub mod app;
pub mod catalog;
pub mod config;
pub mod events;
pub mod mcp;
pub mod reload;
pub mod render;
pub mod run;
