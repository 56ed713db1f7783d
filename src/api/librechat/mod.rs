//! Host tool protocol 3, "continuation": the wire contract of the LibreChat agents client
//! (`@librechat/agents` 3.9.x, see docs/protocols.md).
//!
//! `POST /exec/programmatic` (first request and continuations), `POST /exec` (code without
//! tools) and `POST /exec/programmatic/cancel`. A run is one live child (python3, bash or
//! node, by the request's `lang`): its host tool calls wait as `PendingCall`s while the client
//! runs the tools, so nothing is replayed.
//! Continuation tokens are HMAC-SHA256 with a random key per server, bound to run, round and
//! session, expiring at the run's deadline, single-use.
//!
//! Split by job, imports one way: [`handlers`] (the routes and every answer the client reads)
//! uses [`rounds`] (the open runs, gathering a round's calls, checking and delivering its
//! results) and [`tokens`] (claims, mint, verify); neither of those imports the other.
//!
//! It must not decide what a call does (that is `run::dispatch`) nor how code runs (the
//! runner): it turns the request's `tools` into a per-request catalog and hands the run to the
//! runner with `ExecRequest { snapshot, host }`.

mod files;
mod handlers;
mod rounds;
mod tokens;

pub use handlers::router;
