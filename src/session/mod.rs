//! The session store: folders that live across the runs naming the same session id
//! (LibreChat's code API "session", later the sidecar's own). Runs write files into a session;
//! the control API lists, uploads and downloads them.
//!
//! Owns the session root ([`SessionConfig::root`](crate::session::SessionConfig::root)), one
//! folder per session in it and one record beside each (whose the session is and when it was
//! last used), the one-run-at-a-time lock, and the sweeper that removes idle sessions. It must
//! not know runs or HTTP, and imports only [`crate::util`].
//!
//! The run user writes into its session folder while a run lives, and that code is hostile:
//! every access inside a session goes through `fs`, which walks from directory descriptors and
//! never follows a link (its module doc says how). The root is the sidecar's, mode 0711: the
//! run user can pass through it to its session but cannot list it or replace `root/<id>` or
//! `root/<id>.owner`, so those entries are ours; everything below `root/<id>` is not, and
//! nothing the store decides (an owner, an idle time) is read from there, not even the
//! folder's mtime.
//!
//! Every method but [`Session::lock`](crate::session::Session::lock) makes blocking file system
//! calls: async code calls them through `spawn_blocking`.
//!
//! The files, each importing only from those before it and from this one:
//! - `fs`: the descriptor walker every access goes through;
//! - `names`: what a session id, a file name and a file id may be (pure);
//! - `record`: a session's record in the root — its owner, last use and uid — read without
//!   trusting it and replaced whole;
//! - `held`: one [`Session`] — its folder, lock, idle time, and reading its files;
//! - `write`: writing a file into a session within its quota, into a temporary renamed over
//!   the file's name once whole (so a failed write loses nothing), writers at once exact
//!   against each other;
//! - `store`: [`Sessions`] — making, holding, adopting and sweeping sessions.
//!
//! This file keeps what all of them share: [`SessionConfig`] and [`SessionError`].

mod fs;
mod held;
mod names;
mod record;
mod store;
#[cfg(test)]
mod testing;
mod write;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use held::{FileInfo, RunGuard, Session, Snapshot};
pub use names::{
    ID_LEN, MAX_COMPONENT_BYTES, MAX_COMPONENTS, MAX_ID_LEN, MAX_NAME_BYTES, MOUNT_PREFIX,
    check_name, file_id,
};
pub use store::Sessions;
pub use write::Writer;

/// Where sessions live and how much each may hold.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The folder holding one folder per session; made with mode 0711 when missing.
    pub root: PathBuf,
    /// Idle time after which the sweeper removes a session (`PTC_SESSION_TTL`).
    pub ttl: Duration,
    /// Bytes of regular files a session may hold, for the store's own writes
    /// (`PTC_SESSION_MAX_MB` << 20).
    pub max_bytes: u64,
    /// Entries (files, folders, links) a walk of a session visits before it stops with
    /// [`SessionError::TooManyFiles`] (`PTC_SESSION_MAX_FILES`).
    pub max_files: u64,
    /// The uid and gid (the run user's) that session folders and the files the store writes
    /// are given to; `None` leaves them to the sidecar's user.
    pub owner: Option<(u32, u32)>,
    /// A uid of its own for each new session (`PTC_SANDBOX_UIDS`; its gid the same number),
    /// in place of `owner`: leased when the session is made, kept in its record, held again
    /// at a restart and given back once its folder is removed. A session made without one
    /// keeps `owner`. `None`: every session is `owner`'s.
    pub uids: Option<Arc<dyn SessionUids>>,
    /// Bytes all sessions of the store may hold together (`PTC_ARTIFACT_MAX_MB` << 20 for the
    /// artifacts); a write past it is [`SessionError::StoreFull`]. Counted from what the store
    /// finds at start and what it writes and removes, so it is meant for a store nobody else
    /// writes into (the artifacts: runs never write there). `None`: no such bound.
    pub max_total_bytes: Option<u64>,
}

/// Where sessions' own uids come from (the sandbox's range, `sandbox::Uids`).
pub trait SessionUids: Send + Sync + std::fmt::Debug {
    /// A uid no run and no other session has, held until [`release`](Self::release)d.
    fn lease(&self) -> io::Result<u32>;
    /// Holds a session's uid read back at a restart; false when it cannot be its own (outside
    /// the range, or held already).
    fn hold(&self, uid: u32) -> bool;
    /// Gives back the uid of a session whose folder is gone.
    fn release(&self, uid: u32);
}

/// Why a session operation failed; every message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A session id that is not 1 to 64 characters of `[A-Za-z0-9_-]`.
    #[error("session id {id:?}: {why}")]
    BadId { id: String, why: String },
    /// A file name [`check_name`] refuses, or one whose path holds a link, a file where a
    /// folder should be, or something that is not a plain file.
    #[error("file name {name:?}: {why}")]
    BadName { name: String, why: String },
    /// A write that would take the session past `max_bytes` (`used`: what else it holds, a
    /// file being replaced and other writes under way included).
    #[error(
        "writing {name:?} would take session {id} past its quota of {max_bytes} bytes \
         (PTC_SESSION_MAX_MB): the session holds {used} bytes (a file being replaced counts \
         until its replacement is whole, and so do other writes under way) and the file has \
         at least {incoming}; delete files from the session, or raise PTC_SESSION_MAX_MB"
    )]
    Quota {
        id: String,
        name: String,
        used: u64,
        incoming: u64,
        max_bytes: u64,
    },
    /// A write that would take the whole store past `max_total_bytes`.
    #[error(
        "{name:?} was not kept: the store of run files is full ({max_total_bytes} bytes, \
         PTC_ARTIFACT_MAX_MB); the files of earlier runs go PTC_ARTIFACT_TTL after they were \
         made: save fewer or smaller files, or raise PTC_ARTIFACT_MAX_MB"
    )]
    StoreFull { name: String, max_total_bytes: u64 },
    /// A session whose folder cannot be measured, which counts as over its quota.
    #[error(
        "session {id} cannot be measured ({why}), and what cannot be measured counts as over \
         its quota (PTC_SESSION_MAX_MB): keep its files in fewer, shallower folders"
    )]
    Unmeasurable {
        id: String,
        why: crate::util::tree::Unmeasurable,
    },
    /// A session with more entries than `max_files` (a walk stops there), or a write that
    /// would make it so (a file being written takes one until it is whole, replacing or not).
    #[error(
        "session {id} holds more than {max_files} files, folders and links, or would with \
         this file (one being written counts until it is whole) (PTC_SESSION_MAX_FILES): \
         delete some, keep fewer larger files (an archive), or raise PTC_SESSION_MAX_FILES"
    )]
    TooManyFiles { id: String, max_files: u64 },
    /// The session (its id here) has no folder any more.
    #[error(
        "session {0:?} does not exist (a session is removed after PTC_SESSION_TTL without \
         use): start a new session and upload its files again"
    )]
    NotFound(String),
    /// A file system call failed: `context` says on what.
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> SessionError {
    move |source| SessionError::Io {
        context: context.into(),
        source,
    }
}
