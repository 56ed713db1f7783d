//! The store's start: making the session root when it is missing, and adopting what a
//! previous sidecar left in it — each session folder as its record says, or held out when its
//! record cannot be read ([`Sessions::unreadable`]) — while deleting what a crash left behind
//! (trash, records without a folder, half-written records and files).
//!
//! Owns only what [`Sessions::new`] does once before the store is shared; the store's life after
//! that is the parent's.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use super::super::fs;
use super::super::held::{Session, Shared};
use super::super::record::{self, Durability, Found, RECORD_SUFFIX, Record, TEMP_PREFIX};
use super::{Map, Sessions, TRASH_PREFIX};

/// Why a session folder found at start is held out: its record cannot be read or parsed (the
/// reason [`record::read_at`] gives, kept as [`Sessions::unreadable`] lists it).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UnreadableRecord(String);

/// Makes the root with mode 0711 when missing. The root comes from configuration and is
/// trusted: links in its path are followed.
pub(super) fn make_root(root: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(root)?;
            // The umask may have taken bits away.
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
        }
        Err(e) => Err(e),
        Ok(meta) if !meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "it is not a folder; point the session root at a folder",
        )),
        Ok(meta) => {
            if meta.permissions().mode() & 0o022 != 0 {
                tracing::warn!(
                    root = %root.display(),
                    "the session root is writable by others; make it mode 0711"
                );
            }
            Ok(())
        }
    }
}

/// The session folders under the root, each as its record says or held out when the record
/// cannot be read; trash, records whose folder is gone, records a crash left half written and
/// the temporaries of writes a crash cut short (in the sessions adopted) are deleted, anything
/// else left alone.
pub(super) fn adopt(shared: &Arc<Shared>) -> io::Result<Map> {
    let root = shared.root.as_fd();
    let mut entries = fs::DirStream::new(fs::open_dir_at(root, c".")?)?;
    // The sidecar's own clock, never a time a file carries.
    let now = SystemTime::now();
    let mut map = Map::default();
    let mut recorded = Vec::new();
    while let Some(name) = entries.next_name()? {
        let Ok(id) = name.to_str() else { continue };
        if id.starts_with(TRASH_PREFIX) {
            shared.empty_trash(id, &name);
            continue;
        }
        if id.starts_with(TEMP_PREFIX) {
            let _ = fs::unlink_at(root, &name, false);
            continue;
        }
        if let Some(of) = id.strip_suffix(RECORD_SUFFIX) {
            recorded.push(of.to_string());
            continue;
        }
        if Sessions::check_id(id).is_err() {
            continue;
        }
        match fs::stat_at(root, &name) {
            Ok(st) if st.is_dir() => {
                match adopt_one(shared, id, now) {
                    Ok(session) => {
                        // Files a crash left half written: never the user's, gone before
                        // the store counts what the session holds.
                        let removed = session.remove_leftovers();
                        if removed > 0 {
                            tracing::info!(
                                session = id,
                                removed,
                                "deleted files left half written by a crash"
                            );
                        }
                        map.held.insert(id.to_string(), Arc::new(session));
                    }
                    Err(UnreadableRecord(why)) => {
                        map.unreadable.insert(id.to_string(), why);
                    }
                }
                shared
                    .stored
                    .fetch_add(shared.bytes_in(&name), Ordering::Relaxed);
            }
            _ => tracing::warn!(
                entry = id,
                "the session root holds something that is not a folder; left alone"
            ),
        }
    }
    // A record whose folder is gone: a crash between the two, or a failed removal.
    for id in recorded
        .iter()
        .filter(|id| !map.held.contains_key(*id) && !map.unreadable.contains_key(*id))
    {
        shared.forget_record(id);
    }
    Ok(map)
}

/// The session folder `id`, as its record says; a record of an older sidecar (an owner alone,
/// or none for the empty owner) counts as used `now` and is written again in this format.
/// Why it cannot be adopted when its record cannot be read, logged here, once.
fn adopt_one(shared: &Arc<Shared>, id: &str, now: SystemTime) -> Result<Session, UnreadableRecord> {
    let owner = match record::read_at(shared.root.as_fd(), id) {
        Found::Record(record) => {
            if let (Some(uids), Some(uid)) = (&shared.cfg.uids, record.uid)
                && !uids.hold(uid)
            {
                tracing::warn!(
                    session = id,
                    uid,
                    "the session's uid is not one PTC_SANDBOX_UIDS can give it (outside the \
                     range, or another session's); its runs will not start until it is removed"
                );
            }
            return Ok(Session::new(shared, id, &record, now));
        }
        Found::Legacy(owner) => owner,
        Found::Missing => String::new(),
        Found::Unreadable(why) => {
            tracing::warn!(
                session = id,
                record = %shared.cfg.root.join(format!("{id}{RECORD_SUFFIX}")).display(),
                "the session's record cannot be read ({why}): nobody can use the session, and \
                 it is not swept; repair the record and restart, or remove the session \
                 (DELETE /v1/sessions/{id})"
            );
            return Err(UnreadableRecord(why));
        }
    };
    let record = Record::new(&owner, now, None);
    let session = Session::new(shared, id, &record, now);
    if let Err(e) = shared.write_record(id, &record, Durability::Synced) {
        // Kept in memory all the same; the sweeper writes it again.
        session.unrecorded();
        tracing::warn!(session = id, "cannot write the session's record again: {e}");
    }
    Ok(session)
}
