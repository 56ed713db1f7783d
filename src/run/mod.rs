//! Running code: the python3 child (`child`), the SDK it loads (`sdk`), its capped output
//! (`output`), the IPC bridge it calls (`ipc`), what a call does (`dispatch`) and the runner
//! that ties one run together (`runner`). See docs/runner-protocol.md for the child's side.

pub mod child;
pub mod dispatch;
pub mod ipc;
pub mod output;
pub mod runner;
pub mod sdk;
pub mod zygote;

pub use dispatch::{Backends, CallError, PendingCall};
pub use runner::{ExecRequest, ExecResult, ExecStatus, Runner, RunnerConfig};
