//! Names and ids: what a session id, a file name and a file id may be. A client's or the
//! model's name is the one thing from outside that becomes a path in a session, so every rule
//! that keeps it inside (no `..`, no absolute path, no control character, bounded length and
//! depth) is here, in one place, tested on exact strings.
//!
//! Also the name a file has while it is being written ([`writing_name`]): one that no name
//! [`check_name`] lets through can take, and no listing shows.
//!
//! No file system call and no state (`new_id` and `writing_name` only draw random bytes). It must not decide what
//! a session holds or whether a file exists; `held` and `store` do, with the names this file
//! lets through.

use sha2::{Digest, Sha256};

use super::SessionError;
use super::fs;

/// Characters of a new session id and of a file id: LibreChat's download route accepts
/// exactly 21 of `[A-Za-z0-9_-]` (a nanoid).
pub const ID_LEN: usize = 21;

/// Longest session id accepted from a client.
pub const MAX_ID_LEN: usize = 64;

/// Longest file name, in bytes, so a name fits in a path buffer with the root before it.
pub const MAX_NAME_BYTES: usize = 1024;

/// Longest component of a file name, in bytes (what Linux file systems allow).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Components a file name may have: the walk holds one descriptor per folder and goes no
/// deeper, so a file further down is neither listed nor written.
pub const MAX_COMPONENTS: usize = fs::MAX_DEPTH;

/// Where LibreChat tells the model its files live: a name under it is that name in the session.
pub const MOUNT_PREFIX: &str = "/mnt/data/";

/// Characters of a client's id or name an error message repeats (a 1 MB name is not echoed).
const SHOWN_CHARS: usize = 80;

/// The URL-safe base64 alphabet: ids are 6 random or hashed bits per character.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

pub(super) const NAME_EXAMPLE: &str = r#"name a file inside the session, like "out/report.csv""#;

/// At most [`SHOWN_CHARS`] of `text`, for an error message.
pub(super) fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// What a file being written is called, in the folder of the name it will have, until it is
/// whole and renamed over that name (`write`): this, then 16 random hex digits. The backslash
/// is in no name [`check_name`] takes and in no component [`component_ok`] lets a listing show,
/// so a user's file can never be given this name, nor a temporary be listed, served or opened
/// by name. The '.' hides it from a plain `ls` of the run user.
pub(super) const WRITING_PREFIX: &str = ".ptc-writing\\";

/// A fresh name for a file being written ([`WRITING_PREFIX`] and 64 random bits).
pub(super) fn writing_name() -> String {
    let mut random = [0u8; 8];
    rand::fill(&mut random);
    format!("{WRITING_PREFIX}{}", crate::util::hex(&random))
}

/// Whether an entry's name is one [`writing_name`] gives.
pub(super) fn is_writing(name: &[u8]) -> bool {
    name.starts_with(WRITING_PREFIX.as_bytes())
}

/// A fresh session id: [`ID_LEN`] random characters of `[A-Za-z0-9_-]`, 126 bits.
pub(super) fn new_id() -> String {
    let mut random = [0u8; ID_LEN];
    rand::fill(&mut random);
    // 64 divides 256, so every character is equally likely.
    random
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 63)]))
        .collect()
}

/// Checks a session id from a client: 1 to [`MAX_ID_LEN`] characters of `[A-Za-z0-9_-]`,
/// so it is one safe path component.
pub(super) fn check_id(id: &str) -> Result<(), SessionError> {
    let bad = |why: String| SessionError::BadId { id: shown(id), why };
    const FIX: &str = "use the session_id a previous run returned, or none to start a new session";
    if id.is_empty() {
        return Err(bad(format!("is empty: {FIX}")));
    }
    if id.len() > MAX_ID_LEN {
        return Err(bad(format!(
            "is {} bytes long; an id is at most {MAX_ID_LEN} characters: {FIX}",
            id.len()
        )));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(bad(format!(
            "contains {c:?}; an id has only letters, digits, '_' and '-': {FIX}"
        )));
    }
    Ok(())
}

/// The id under which a session serves the file `name`: 21 characters of `[A-Za-z0-9_-]`,
/// the URL-safe base64 of SHA-256(`session_id` "/" `name`) cut to 126 bits. The same name in
/// the same session always has the same id, so an id handed out before a run still finds the
/// file after it; a session id has no '/', so no two pairs hash the same input.
pub fn file_id(session_id: &str, name: &str) -> String {
    let digest = Sha256::new()
        .chain_update(session_id.as_bytes())
        .chain_update(b"/")
        .chain_update(name.as_bytes())
        .finalize();
    let mut id = base64url(&digest[..16]);
    id.truncate(ID_LEN);
    id
}

/// Unpadded URL-safe base64.
fn base64url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(char::from(ALPHABET[((acc >> bits) & 63) as usize]));
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (6 - bits)) & 63) as usize]));
    }
    out
}

/// Checks a file name from a client or the model and returns it normalized: a relative path,
/// components joined by one '/', a leading `./` dropped, and a leading [`MOUNT_PREFIX`]
/// (`/mnt/data/`) dropped. Refused: empty, absolute, a `.` or `..` component, a control
/// character (NUL included), a backslash, a trailing '/', a component over
/// [`MAX_COMPONENT_BYTES`], more than [`MAX_COMPONENTS`] folders, over [`MAX_NAME_BYTES`] in all.
pub fn check_name(name: &str) -> Result<String, SessionError> {
    let bad = |why: String| SessionError::BadName {
        name: shown(name),
        why,
    };
    // Bounds the work below for a name of any length.
    if name.len() > MOUNT_PREFIX.len() + 2 * MAX_NAME_BYTES {
        return Err(bad(format!(
            "is {} bytes long; a name is at most {MAX_NAME_BYTES} bytes: {NAME_EXAMPLE}",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(bad(format!(
            "contains the control character {c:?}: {NAME_EXAMPLE}"
        )));
    }
    if name.contains('\\') {
        return Err(bad(format!(
            r#"contains a backslash; folders are separated by "/": {NAME_EXAMPLE}"#
        )));
    }
    let relative = name.strip_prefix(MOUNT_PREFIX).unwrap_or(name);
    if relative.starts_with('/') {
        return Err(bad(format!(
            r#"is an absolute path: {NAME_EXAMPLE} (or "/mnt/data/out/report.csv")"#
        )));
    }
    if relative.ends_with('/') {
        return Err(bad(format!(
            "ends with \"/\", so it names a folder: {NAME_EXAMPLE}"
        )));
    }
    let mut parts = Vec::new();
    for part in relative.split('/') {
        match part {
            // Duplicate '/' and a leading "./" change nothing.
            "" => {}
            "." if parts.is_empty() => {}
            "." | ".." => return Err(bad(format!("{part:?} is not allowed: {NAME_EXAMPLE}"))),
            _ if part.len() > MAX_COMPONENT_BYTES => {
                return Err(bad(format!(
                    "has a component of {} bytes; each is at most {MAX_COMPONENT_BYTES}: \
                     {NAME_EXAMPLE}",
                    part.len()
                )));
            }
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(bad(format!("names no file: {NAME_EXAMPLE}")));
    }
    if parts.len() > MAX_COMPONENTS {
        return Err(bad(format!(
            "is {} components deep; a name has at most {MAX_COMPONENTS}: {NAME_EXAMPLE}",
            parts.len()
        )));
    }
    let normalized = parts.join("/");
    if normalized.len() > MAX_NAME_BYTES {
        return Err(bad(format!(
            "is {} bytes long; a name is at most {MAX_NAME_BYTES} bytes: {NAME_EXAMPLE}",
            normalized.len()
        )));
    }
    Ok(normalized)
}

/// Whether an entry name read from a session folder is a component [`check_name`] accepts, so
/// a listed file can be opened by its name.
pub(super) fn component_ok(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part.len() <= MAX_COMPONENT_BYTES
        && !part.chars().any(|c| c.is_control() || c == '\\')
}

/// A checked name's folders and its last component.
pub(super) fn split_name(name: &str) -> (Vec<&str>, &str) {
    let mut parts: Vec<&str> = name.split('/').collect();
    let leaf = parts.pop().unwrap_or(name);
    (parts, leaf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::collections::HashSet;

    #[test]
    fn new_ids_are_21_url_safe_characters_and_unique() {
        let ids: HashSet<String> = (0..1000).map(|_| new_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), ID_LEN, "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{id}"
            );
            check_id(id).unwrap();
        }
        // 21,000 characters: every one of the 64 shows up unless the mapping is skewed.
        let used: HashSet<char> = ids.iter().flat_map(|id| id.chars()).collect();
        assert_eq!(used.len(), 64);
    }

    #[test]
    fn check_id_takes_url_safe_ids_up_to_64_characters() {
        let long_ok = "x".repeat(64);
        for good in ["a", "A-z_09", "abc-DEF_123", long_ok.as_str()] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        let too_long = "x".repeat(65);
        for bad in [
            "",
            "../x",
            "a/b",
            too_long.as_str(),
            "a.b",
            "a b",
            "é",
            "a\0b",
            ".",
        ] {
            assert!(
                matches!(check_id(bad), Err(SessionError::BadId { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            check_id("a/b").unwrap_err().to_string(),
            "session id \"a/b\": contains '/'; an id has only letters, digits, '_' and '-': \
             use the session_id a previous run returned, or none to start a new session"
        );
    }

    #[test]
    fn check_name_normalizes_good_names() {
        let long_part = "p".repeat(255);
        let deepest = vec!["d"; 64].join("/");
        let cases = [
            ("a.txt", "a.txt"),
            ("/mnt/data/a.txt", "a.txt"),
            ("/mnt/data/out/r.csv", "out/r.csv"),
            ("./a.txt", "a.txt"),
            ("././a.txt", "a.txt"),
            ("out//x///y.csv", "out/x/y.csv"),
            (".hidden", ".hidden"),
            ("a..b/..c", "a..b/..c"),
            ("mnt/data/a", "mnt/data/a"),
            ("ünï/cödé.txt", "ünï/cödé.txt"),
            (long_part.as_str(), long_part.as_str()),
            (deepest.as_str(), deepest.as_str()),
        ];
        for (name, normalized) in cases {
            assert_eq!(check_name(name).unwrap(), normalized, "{name:?}");
        }
    }

    #[test]
    fn check_name_refuses_what_could_leave_the_session() {
        let long_part = "p".repeat(256);
        let too_deep = vec!["d"; 65].join("/");
        let too_long = vec!["q".repeat(250); 5].join("/");
        let huge = "h".repeat(1 << 20);
        let bad = [
            "",
            ".",
            "./",
            "..",
            "../x",
            "a/../b",
            "a/./b",
            "a/..",
            "/etc/passwd",
            "/mnt/data/",
            "/mnt/data/../x",
            "/mnt/data//etc/passwd",
            "a\\b",
            "..\\x",
            "a\0b",
            "a\nb",
            "a\u{7f}b",
            "a\u{85}b",
            "dir/",
            long_part.as_str(),
            too_deep.as_str(),
            too_long.as_str(),
            huge.as_str(),
        ];
        for name in bad {
            match check_name(name) {
                Err(SessionError::BadName {
                    name: shown_name,
                    why,
                }) => {
                    assert!(shown_name.len() <= 4 * SHOWN_CHARS + 3, "{shown_name}");
                    assert!(why.contains("like \"out/report.csv\""), "{name:?}: {why}");
                }
                other => panic!("{name:?} gave {other:?}"),
            }
        }
        assert_eq!(
            check_name("../x").unwrap_err().to_string(),
            r#"file name "../x": ".." is not allowed: name a file inside the session, like "out/report.csv""#
        );
        assert_eq!(
            check_name("a\0b").unwrap_err().to_string(),
            r#"file name "a\0b": contains the control character '\0': name a file inside the session, like "out/report.csv""#
        );
    }

    /// Breaks when the prefix loses its backslash: a user's file could then take a temporary's
    /// name, and a temporary would be listed.
    #[test]
    fn a_writing_name_is_no_name_a_user_or_a_listing_can_have() {
        let name = writing_name();
        assert!(is_writing(name.as_bytes()), "{name}");
        assert_eq!(name.len(), WRITING_PREFIX.len() + 16);
        assert_ne!(writing_name(), name);
        assert!(check_name(&name).is_err(), "{name}");
        assert!(check_name(&format!("out/{name}")).is_err(), "{name}");
        assert!(!component_ok(&name), "{name}");
        assert!(!is_writing(b".ptc-writing") && !is_writing(b"a.txt"));
    }

    #[test]
    fn file_ids_are_deterministic_url_safe_hashes() {
        // base64url(SHA-256("sess1/a.txt"))[..21], computed with Python's hashlib and base64.
        assert_eq!(file_id("sess1", "a.txt"), "YhGHXcz94DrKQASFzCg0B");
        assert_eq!(file_id("abc", "out/report.csv"), "aqn5hIlr3GBXHfh60-IBh");
        assert_eq!(file_id("sess1", "a.txt"), file_id("sess1", "a.txt"));
        assert_ne!(file_id("sess1", "a.txt"), file_id("sess2", "a.txt"));
        assert_ne!(file_id("sess1", "a.txt"), file_id("sess1", "b.txt"));
        let ids: HashSet<String> = (0..1000).map(|i| file_id("s", &format!("f{i}"))).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), ID_LEN);
            check_id(id).unwrap();
        }
    }
}
