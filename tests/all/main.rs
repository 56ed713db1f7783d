//! The integration tests: one binary, real parts (python3, the sidecar's own HTTP servers,
//! a host tool server started by the test, Redis and MCP servers where the module says so).

mod api;
mod catalog;
mod common;
mod events;
mod exec;
mod host;
mod librechat;
mod mcp;
mod reload;
