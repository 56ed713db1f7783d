//! The integration tests: one binary, real parts (python3, the sidecar's own HTTP servers,
//! a host tool server started by the test, Redis and MCP servers where the module says so).

// Helpers outside `#[test]` functions fail the test the same way: unwrap/expect are assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents;
mod api;
mod approvals;
mod bash;
mod bounds;
mod bridge;
mod catalog;
mod common;
mod dashboard;
mod escape;
mod events;
mod exec;
mod faults;
mod files;
mod first_hour;
mod front;
mod front_javascript;
mod host;
mod javascript;
mod javascript_client;
mod javascript_sessions;
mod librechat;
mod librechat_users;
mod limits;
mod mcp;
mod mcp_failed;
mod metrics;
mod native;
mod native_agents;

use common::support::procs;

mod preview;
mod props;
mod readme;
mod reload;
mod runner;
mod sandbox;
mod search;
mod search_model;
mod search_share;
mod serving;
mod sessions;
mod shapes;
mod shutdown;
mod soak;
mod startup;
mod typescript;
