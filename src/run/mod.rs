//! Running code: one `exec_code` run from code to result, and each tool call its code makes.
//! See docs/runner-protocol.md for the child's side.
//!
//! The modules, each importing only from the ones listed before it (no circle):
//!
//! | module | owns | may import (within `run/`) |
//! |---|---|---|
//! | `output` | capped capture of a child's stdout/stderr, [`OutputChunk`] | — |
//! | `sdk` | the SDK files and `catalog.json` written per catalog | — |
//! | `child` | how one python3 child starts (confined by the `sandbox` layer) and stops, [`Limits`], [`resolve_python`] | — |
//! | `scratch` | the scratch quota: measuring a run's scratch directory while it runs; a session's quota at a run's end ([`scratch::hold_session`]) | — |
//! | `confine` | the runner's [`Sandbox`](crate::sandbox::Sandbox) built once at startup, [`SandboxSettings`] | — |
//! | `files` | a run's files ([`RunFile`]), where they go ([`FileStore`]) within their quotas ([`NewFile`], [`Budgeted`]) | — |
//! | `budget` | a run's budget: its share of everything runs share, named in one place, [`budget::Lender`], refusals by resource | — |
//! | `clock` | a run's deadline, standing still while a call waits for a person, for `PTC_APPROVAL_TIMEOUT` per run at most | — |
//! | `approval` | the calls that wait for a person (`PTC_APPROVE_*`), [`Approval`], [`Approvals::decide`], each run's share of the waiting | `budget` |
//! | `limits` | the limits per tool (`PTC_TOOL_LIMITS`) and their counters across runs, [`Limiter`] | — |
//! | `dispatch` | what one call does on its backend, [`CallError`], [`Backends`] | `approval`, `limits` |
//! | `shapes` | the result shapes learned from calls, per agent, never from a call that chose the keys, [`shapes::Shapes`] (`PTC_LEARN_SHAPES`, `PTC_STATE_DIR`) | — |
//! | `zygote` | the fork server of one catalog, [`zygote::Program`] (what a forked child may become) | `child` |
//! | `bash` | bash runs: tools as bash functions, what bash is started with, how a result prints | `zygote` |
//! | `javascript` | JavaScript and TypeScript runs: the code read (a syntax error at its line, TypeScript's types stripped), what node is started with | `sdk`, `zygote` |
//! | `prepare` | the prepared-SDK cache, one [`prepare::CatalogKey`] for every catalog | `sdk`, `dispatch` |
//! | `pool` | where a child comes from: warm (Python, or node for JavaScript), forked or cold; the refill loop | `child`, `zygote`, `javascript`, `prepare` |
//! | `calls` | the live runs by token, [`calls::RunCtx`], [`CallRecord`], `call(run, tool, args)`: limits, approval, dispatch | `approval`, `clock`, `dispatch`, `limits`, `prepare`, `shapes` |
//! | `ipc` | the IPC bridge (`/call`, `/tool_call`, `/bash/{tool}`, `/file`, `/search`, `/describe`): the loopback listener and each run's own ([`ipc::Bridge`]), their bounds | `calls`, `dispatch`, `bash`, `files`, `shapes` |
//! | `native` | a runtime's call (native PTC, `POST /v1/tools/call`) through `calls`' path: which run it belongs to (the provider's program, or the call alone), [`native::lookup`] of any catalog tool | `approval`, `calls`, `clock`, `dispatch`, `limits`, `prepare`, `shapes` |
//! | `live` | the sessions' live interpreters: which run takes which, eviction, idle expiry, [`live::Lost`] | `child`, `ipc`, `output`, `prepare` |
//! | `request` | what a run is asked and gives back: [`RunnerConfig`], [`ExecRequest`], [`ExecResult`], the `/mnt/data` rewrite | `calls`, `child`, `confine`, `dispatch`, `files`, `live`, `output`, `scratch`, `shapes` |
//! | `turn` | a run's turn on an interpreter: a fresh child or a session's live one, its end of the bridge, how its output ends | `child`, `clock`, `files`, `ipc`, `live`, `output`, `pool`, `prepare`, `request`, `zygote` |
//! | `guards` | the count of runs waiting for a slot, a run's one `exec.finished` ([`guards::FinishGuard`]) | `request` |
//! | `runner` | a run's lifecycle, one path for every run: [`Runner`] | all of the above |
//!
//! `child` and `zygote` take a child's confinement from `crate::sandbox` (docs/SECURITY.md);
//! the child applies it, in the namespaces a fork server's child makes
//! (`sdk-template/ptc_sandbox.py` `isolate`).
//!
//! Outside `run/`, use what this module re-exports rather than reaching into its submodules.

pub mod approval;
pub mod bash;
pub mod budget;
pub mod calls;
pub mod child;
pub mod clock;
pub mod confine;
pub mod cpu;
pub mod dispatch;
pub mod files;
pub mod guards;
pub mod ipc;
pub mod javascript;
pub mod limits;
pub mod live;
pub mod native;
pub mod output;
pub mod pool;
pub mod prepare;
pub mod request;
pub mod runner;
pub mod scratch;
pub mod sdk;
pub mod shapes;
pub mod turn;
pub mod zygote;

pub use approval::{Approval, Approvals, Decision, NotWaiting};
pub use calls::{CallLimits, CallRecord, new_token};
pub use child::{Limits, PythonError, resolve_python};
pub use confine::SandboxSettings;
pub use dispatch::{Backends, CallError, McpCaller, PendingCall, closest, host_error};
pub use files::{Budgeted, ChunkReader, FileError, FileStore, Files, NewFile, RunFile};
pub use limits::Limiter;
pub use live::{LiveInfo, Lost};
pub use native::{Caller, Native, RuntimeCall};
pub use output::OutputChunk;
pub use request::{
    ExecRequest, ExecResult, ExecStatus, Lang, MODEL_DATA_DIR, RunnerConfig, SessionState,
    StateChange, Workspace,
};
pub use runner::{Runner, SCRATCH_DIR, ShuttingDown};
pub use scratch::ScratchQuota;
pub use shapes::ShapesConfig;
