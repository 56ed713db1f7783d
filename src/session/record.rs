//! A session's record: `root/<id>.owner`, the sidecar's own file beside the session's folder,
//! saying whose the session is, when it was last used, and (for a layer that runs each session
//! under a uid of its own) that uid. Nothing a run can touch decides these: the run user can
//! neither write the root nor open this file, and the folder's own metadata (its mtime, which
//! a run could set) is not read at all.
//!
//! Owns the record's format, reading one without trusting it — no link followed, a plain file
//! of mode 0600 with one name, at most [`MAX_RECORD_BYTES`], parsed strictly — and replacing
//! one whole (a temporary file in the root, synced, renamed over it), so a crash leaves the old
//! record or the new one and never half of one (but see [`Durability`]). It must not know
//! sessions in memory (`held` and `store` do), nor decide what an unreadable record means
//! (`store` does: the session is held out).
//!
//! The format: one JSON object, `{"v":1,"owner":"…","last_used_ms":…}`, with `"uid":…` when one
//! is kept. Fields this version does not know are ignored, so a later version may add some
//! without a new `v`. An older sidecar kept the owner alone, as the file's whole text, and no
//! file for the empty owner: both are still read ([`Found::Legacy`], [`Found::Missing`]), and
//! the store writes them again in this format.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::fs::{self, Refused};

/// `root/<id>` + this is the session's record. '.' is not in an id, so it is never taken for a
/// session. (The name older sidecars gave the owner file, so they read a record as an owner no
/// principal has: a session is closed to them, never opened to another.)
pub(super) const RECORD_SUFFIX: &str = ".owner";

/// A record being written is `root/` + this + random hex until it is renamed over the record;
/// one a crash left behind is deleted at the next start. '.' is not in an id.
pub(super) const TEMP_PREFIX: &str = ".record-";

/// The format this sidecar writes and reads.
const VERSION: u32 = 1;

/// Longest owner string kept: the caller's (a tenant and a user id, each bounded).
pub(super) const MAX_OWNER_BYTES: usize = 1024;

/// Longest record read: an owner of [`MAX_OWNER_BYTES`] each escaped as JSON (at most six
/// bytes a byte, `\u0000`), and room for the other fields. A longer file was not written by
/// the sidecar, and reading it whole could cost without bound.
pub(super) const MAX_RECORD_BYTES: usize = 6 * MAX_OWNER_BYTES + 1024;

/// The mode the sidecar gives a record. A record with another was changed by something else
/// (a run once could `chmod` it by path), and is not trusted even where it can still be read
/// (root reads a file of mode 0000).
const RECORD_MODE: u32 = 0o600;

/// Whether writing a record waits for the disk before the rename makes it the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durability {
    /// Synced first (`fdatasync`): a power cut leaves the old record or the new one. For the
    /// writes off a request's path (a sweep's uses, a restart's rewrites, a uid).
    Synced,
    /// Not synced: a new session's record, made on the path of the request that names it
    /// (a LibreChat run without a session makes one each time), where a sync would cost the
    /// run 5 to 7 ms (measured on an ext4 disk of a busy VM: temp file, write, fdatasync,
    /// rename), more when other writes queue before it; without it, 0.5 to 0.8 ms. A power
    /// cut may leave the record empty, which reads as unreadable: the session is held out,
    /// never opened to another owner.
    Unsynced,
}

/// What the sidecar keeps of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Record {
    /// [`VERSION`].
    pub v: u32,
    /// The caller's opaque owner string; empty for the API key's holder.
    pub owner: String,
    /// When the session was last used, by the sidecar's clock: milliseconds since the Unix
    /// epoch.
    pub last_used_ms: u64,
    /// The uid the session's runs get, for a layer that gives each session its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

impl Record {
    /// A record of `owner`, last used at `used`.
    pub fn new(owner: &str, used: SystemTime, uid: Option<u32>) -> Record {
        Record {
            v: VERSION,
            owner: owner.to_string(),
            last_used_ms: unix_ms(used),
            uid,
        }
    }

    /// When the session was last used.
    pub fn last_used(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.last_used_ms)
    }
}

/// What the root holds for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// A record.
    Record(Record),
    /// An older sidecar's owner file: the owner alone.
    Legacy(String),
    /// No record: an older sidecar kept none for the empty owner.
    Missing,
    /// Something under the record's name that cannot be read or parsed, and why.
    Unreadable(String),
}

/// The name of session `id`'s record in the root.
pub(super) fn name(id: &str) -> io::Result<CString> {
    fs::cstring(&format!("{id}{RECORD_SUFFIX}"))
}

/// The record of session `id` in `root`, never trusted: see [`Found`].
pub(super) fn read_at(root: BorrowedFd<'_>, id: &str) -> Found {
    let Ok(name) = name(id) else {
        return Found::Unreadable("the session id is not a file name".into());
    };
    let (file, st) = match fs::open_file_at(root, &name) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Found::Missing,
        Err(Refused::NotRegular) => {
            return Found::Unreadable(
                "it is a link, a folder or another kind of file, not a plain file".into(),
            );
        }
        Err(Refused::HardLink) => {
            return Found::Unreadable("it has another name too (a hard link)".into());
        }
        Err(Refused::Io(e)) => return Found::Unreadable(format!("it cannot be opened: {e}")),
    };
    if st.mode & 0o7777 != RECORD_MODE {
        return Found::Unreadable(format!(
            "its mode is {:04o}, not the {RECORD_MODE:04o} the sidecar gives it: something else \
             changed it",
            st.mode & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file
        .take(MAX_RECORD_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
    {
        return Found::Unreadable(format!("it cannot be read: {e}"));
    }
    match parse(&bytes) {
        Ok(found) => found,
        Err(why) => Found::Unreadable(why.to_string()),
    }
}

/// Why a record's bytes are not a record (nor an older sidecar's owner): what
/// [`Found::Unreadable`] says.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotARecord {
    /// Longer than the sidecar ever writes.
    #[error("it is longer than {MAX_RECORD_BYTES} bytes")]
    TooLong,
    /// A write cut short: the sidecar never writes an empty one.
    #[error("it is empty")]
    Empty,
    /// A JSON object that is not a record of this format.
    #[error("it is not a record this sidecar can read: {0}")]
    Json(serde_json::Error),
    /// A record of another format version.
    #[error(
        "it is in format version {0}, and this sidecar reads version {VERSION} (was it \
         written by a newer one?)"
    )]
    Version(u32),
    /// An owner past [`MAX_OWNER_BYTES`].
    #[error("its owner is longer than {MAX_OWNER_BYTES} bytes")]
    OwnerTooLong,
    /// Neither JSON nor an older sidecar's owner text.
    #[error("it is not UTF-8 text")]
    NotUtf8,
}

/// A record's bytes: a record of this format ([`Found::Record`]), an older sidecar's owner
/// ([`Found::Legacy`]), or why it is neither.
pub(super) fn parse(bytes: &[u8]) -> Result<Found, NotARecord> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(NotARecord::TooLong);
    }
    if bytes.is_empty() {
        // The sidecar never writes an empty one (an older one kept no file for the empty
        // owner): a write cut short, which must not read as the API key's holder.
        return Err(NotARecord::Empty);
    }
    if bytes[0] == b'{' {
        let record: Record = serde_json::from_slice(bytes).map_err(NotARecord::Json)?;
        if record.v != VERSION {
            return Err(NotARecord::Version(record.v));
        }
        if record.owner.len() > MAX_OWNER_BYTES {
            return Err(NotARecord::OwnerTooLong);
        }
        return Ok(Found::Record(record));
    }
    // An owner string is the caller's (`Principal::owner`: a JSON array), never an object.
    let owner = std::str::from_utf8(bytes).map_err(|_| NotARecord::NotUtf8)?;
    if owner.len() > MAX_OWNER_BYTES {
        return Err(NotARecord::OwnerTooLong);
    }
    Ok(Found::Legacy(owner.to_string()))
}

/// Replaces the record of session `id` in `root` whole: [`Written::new`], then
/// [`Written::rename`].
pub(super) fn write_at(
    root: BorrowedFd<'_>,
    id: &str,
    record: &Record,
    durability: Durability,
) -> io::Result<()> {
    Written::new(root, record, durability)?.rename(id)
}

/// A record written to a temporary file in the root, not yet the record of any session; the
/// temporary file is deleted when this is dropped unrenamed. Split in two so the slow half
/// (the write and its sync) can run outside the store's lock and the rename, which decides,
/// under it.
pub(super) struct Written<'a> {
    root: BorrowedFd<'a>,
    temp: CString,
    renamed: bool,
}

impl<'a> Written<'a> {
    /// `record` written to a temporary file (mode 0600, the sidecar's) and synced as
    /// `durability` says.
    pub fn new(
        root: BorrowedFd<'a>,
        record: &Record,
        durability: Durability,
    ) -> io::Result<Written<'a>> {
        let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
        let mut random = [0u8; 8];
        rand::fill(&mut random);
        let temp = fs::cstring(&format!("{TEMP_PREFIX}{}", crate::util::hex(&random)))?;
        let (mut file, _) = fs::create_file_at(root, &temp, None).map_err(|e| match e {
            Refused::Io(e) => e,
            _ => io::Error::other("something that is not a plain file holds its name"),
        })?;
        // From here on a failure deletes the temporary file (its drop).
        let written = Written {
            root,
            temp,
            renamed: false,
        };
        file.write_all(&bytes)?;
        if durability == Durability::Synced {
            // Before the rename: renamed first, a crash could leave the new name on an empty
            // file.
            file.sync_data()?;
        }
        Ok(written)
    }

    /// Makes it the record of session `id`, replacing any.
    pub fn rename(mut self, id: &str) -> io::Result<()> {
        fs::rename_at(self.root, &self.temp, self.root, &name(id)?)?;
        self.renamed = true;
        Ok(())
    }
}

impl Drop for Written<'_> {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = fs::unlink_at(self.root, &self.temp, false);
        }
    }
}

/// Deletes the record of session `id` from `root` (nothing when there is none). A folder in
/// its place (nothing the sidecar made) goes too, without following a link.
pub(super) fn remove_at(root: BorrowedFd<'_>, id: &str) -> io::Result<()> {
    let name = name(id)?;
    match fs::unlink_at(root, &name, false) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => fs::remove_tree(root, &name),
        other => other,
    }
}

/// Milliseconds since the Unix epoch (0 for a time before it).
fn unix_ms(t: SystemTime) -> u64 {
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_record_is_one_json_object_read_back_strictly() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let record = Record::new(r#"["t1","alice"]"#, at, None);
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"owner":"[\"t1\",\"alice\"]","last_used_ms":1700000000123}"#
        );
        assert_eq!(
            parse(text.as_bytes()).unwrap(),
            Found::Record(record.clone())
        );
        assert_eq!(record.last_used(), at);
        let with_uid = Record::new("", at, Some(100_042));
        let text = serde_json::to_string(&with_uid).unwrap();
        assert!(text.ends_with(r#","uid":100042}"#), "{text}");
        assert_eq!(parse(text.as_bytes()).unwrap(), Found::Record(with_uid));
        // A field a later version adds is ignored.
        assert_eq!(
            parse(br#"{"v":1,"owner":"","last_used_ms":5,"later":[1,2]}"#).unwrap(),
            Found::Record(Record {
                v: 1,
                owner: String::new(),
                last_used_ms: 5,
                uid: None
            })
        );
        // An older sidecar's owner file is the owner alone.
        assert_eq!(
            parse(br#"["t1","alice"]"#).unwrap(),
            Found::Legacy(r#"["t1","alice"]"#.into())
        );
    }

    #[test]
    fn what_is_not_a_record_says_why() {
        let long_owner = format!(
            r#"{{"v":1,"owner":"{}","last_used_ms":1}}"#,
            "x".repeat(MAX_OWNER_BYTES + 1)
        );
        let cases: [(&[u8], &str); 8] = [
            (b"", "it is empty"),
            (b"{", "not a record this sidecar can read"),
            (br#"{"v":1,"owner":""}"#, "missing field `last_used_ms`"),
            (br#"{"v":1,"owner":7,"last_used_ms":1}"#, "invalid type"),
            (
                br#"{"v":2,"owner":"","last_used_ms":1}"#,
                "format version 2",
            ),
            (b"\xff\xfe", "not UTF-8"),
            (
                &[b'a'; MAX_OWNER_BYTES + 1],
                "owner is longer than 1024 bytes",
            ),
            (long_owner.as_bytes(), "owner is longer than 1024 bytes"),
        ];
        for (bytes, says) in cases {
            let why = parse(bytes).unwrap_err().to_string();
            assert!(
                why.contains(says),
                "{:?}: {why}",
                String::from_utf8_lossy(bytes)
            );
        }
        let huge = vec![b'{'; MAX_RECORD_BYTES + 1];
        assert_eq!(
            parse(&huge).unwrap_err().to_string(),
            format!("it is longer than {MAX_RECORD_BYTES} bytes")
        );
    }
}
