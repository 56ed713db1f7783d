//! Small pieces every layer uses: a poison-tolerant lock, hex, the wall clock in milliseconds,
//! the process-group kill guard, children tied to the sidecar's life (`spawn_tied`), URL
//! redaction for messages, private temporary directories, text cut to a bound with the cut
//! said ([`cut`]), folders through descriptors ([`dirfd`]), a tree measured through them at
//! any depth ([`tree`]) and put back after a run to what it held before ([`rollback`]).
//!
//! Owns nothing of the product's logic and imports nothing of the crate: any module may use it.

pub mod dirfd;
pub mod rollback;
pub mod tree;

use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Locks `m`, taking the value over if a thread panicked while holding it: every value behind
/// our locks stays consistent between statements, so a poisoned lock must not stop the sidecar.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The bytes of a hex string, or `None` when it is not one.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A time as RFC 3339 in UTC with milliseconds (`2026-11-23T16:10:00.123Z`), what JavaScript's
/// `new Date()` reads; times before 1970 are given as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Milliseconds of a duration, rounded to microseconds (how results and events report time).
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// SIGKILL to a whole process group, and to its leader in case it has not made the group yet;
/// a group already gone is fine.
pub fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) only sends a signal; no memory is involved.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
            libc::kill(pgid, libc::SIGKILL);
        }
    }
}

/// `signal` to a whole process group; a group already gone is fine.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) only sends a signal; no memory is involved.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Kills a whole process group when dropped. tokio and rmcp kill only the pid they started;
/// `npx`, shell wrappers and code that forks leave grandchildren that this reaches.
#[derive(Debug)]
pub struct GroupKill(pub i32);

impl GroupKill {
    /// The group a child started with `process_group(0)` leads (its pid; 0 when it has none).
    pub fn of(pid: Option<u32>) -> GroupKill {
        GroupKill(pid.map_or(0, |p| p as i32))
    }

    pub fn kill(&self) {
        kill_group(self.0);
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A job for the spawning thread.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// Starts `cmd` so that it dies with the sidecar: `PR_SET_PDEATHSIG` with `signal`, set last
/// before exec (a change of user clears it, so it comes after any switch the caller's own
/// `pre_exec` makes). The kernel sends the signal when the *thread* that forked exits, not the
/// process; tokio's blocking threads come and go, so every child is forked by one thread that
/// lives as long as the process ([`spawning_thread`]), with the caller's runtime entered; the
/// caller awaits its answer, so no worker of the runtime waits on a fork.
/// A sidecar killed with SIGKILL leaves no child of this behind.
pub async fn spawn_tied(
    mut cmd: tokio::process::Command,
    signal: i32,
) -> std::io::Result<tokio::process::Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only prctl and getppid, both
    // async-signal-safe; it allocates nothing (an error is a raw errno).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Gone before the prctl: nothing would ever send the signal.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: SpawnJob = Box::new(move || {
        let _entered = runtime.enter();
        let _ = tx.send(cmd.spawn());
    });
    let gone = || std::io::Error::other("the thread that starts child processes is gone");
    spawning_thread()
        .ok_or_else(gone)?
        .send(job)
        .map_err(|_| gone())?;
    rx.await.map_err(|_| gone())?
}

/// The one thread every child is forked from ([`spawn_tied`]); it never exits. `None` when it
/// could not be started.
fn spawning_thread() -> Option<&'static std::sync::mpsc::Sender<SpawnJob>> {
    static THREAD: std::sync::OnceLock<Option<std::sync::mpsc::Sender<SpawnJob>>> =
        std::sync::OnceLock::new();
    THREAD
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
            std::thread::Builder::new()
                .name("ptc-spawner".into())
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// `text` with every URL's userinfo (`user:pass@`), query string (`?api_key=...`) and fragment
/// removed: what an error message or a log line may show of a URL that can carry a secret
/// (a Redis password, an MCP server token). Anything else in the text is left as it is.
///
/// A URL is `scheme://` followed by anything up to whitespace or a quote or bracket. Its
/// userinfo is what comes before an `@` in the authority; also before an `@` after a `/` when a
/// `:` precedes it, since people put unencoded `/` in passwords (`redis://:ab/cd@host`).
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let bytes = rest.as_bytes();
        // The scheme: the ASCII run before `://` (ASCII bytes never sit inside a multi-byte
        // character, so every index below is a character boundary).
        let mut start = at;
        while start > 0 && is_scheme_byte(bytes[start - 1]) {
            start -= 1;
        }
        while start < at && !bytes[start].is_ascii_alphabetic() {
            start += 1;
        }
        let body = at + 3;
        let end = rest[body..]
            .find(|c: char| {
                c.is_whitespace()
                    || matches!(
                        c,
                        '"' | '\''
                            | '`'
                            | '<'
                            | '>'
                            | '('
                            | ')'
                            | '['
                            | ']'
                            | '{'
                            | '}'
                            | '|'
                            | '\\'
                    )
            })
            .map_or(rest.len(), |i| body + i);
        if start == at {
            // `://` without a scheme: not a URL.
            out.push_str(&rest[..body]);
            rest = &rest[body..];
            continue;
        }
        let url = &rest[body..end];
        // Query and fragment go whole; the userinfo is looked for before them.
        let kept = &url[..url.find(['?', '#']).unwrap_or(url.len())];
        let authority_end = kept.find('/').unwrap_or(kept.len());
        let userinfo_end = match kept[..authority_end].rfind('@') {
            Some(i) => Some(i + 1),
            None => kept
                .rfind('@')
                .filter(|&i| kept[..i].contains(':'))
                .map(|i| i + 1),
        };
        out.push_str(&rest[..body]);
        out.push_str(&kept[userinfo_end.unwrap_or(0)..]);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The log's writer: standard error, each event with its URLs passed through [`redact_urls`].
/// Our own messages redact what they say, but a dependency's may not (rmcp logs a failed
/// HTTP request's URL, query string and all), and a log ends up where secrets must not.
#[derive(Clone, Copy, Default)]
pub struct RedactedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = RedactedEvent;

    fn make_writer(&'a self) -> RedactedEvent {
        RedactedEvent(Vec::new())
    }
}

/// One event as it is formatted; written to standard error, redacted, when dropped.
pub struct RedactedEvent(Vec<u8>);

impl std::io::Write for RedactedEvent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedEvent {
    fn drop(&mut self) {
        let text = redact_urls(&String::from_utf8_lossy(&self.0));
        // A log line that cannot be written has nowhere else to go.
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    }
}

fn is_scheme_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-')
}

/// Creates a fresh directory `parent/PREFIX-XXXXXXXX` (random suffix) with mode 0700, the way
/// `mkdtemp(3)` does: created in one step that fails if the name exists, so nobody can have
/// prepared it (a symlink, a directory they can write) for us to use. Tries a few names.
pub fn private_dir(parent: &std::path::Path, prefix: &str) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    /// Names tried before giving up: a clash is one in 2^40 per try, unless someone is racing.
    const ATTEMPTS: usize = 16;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let mut random = [0u8; 5];
        rand::fill(&mut random);
        let suffix = hex(&random);
        let dir = parent.join(format!("{prefix}-{suffix}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no name left to try")))
}

/// `text` within about `max` bytes: whole when it fits, else its first `max` bytes (back to a
/// character boundary) and `… [cut: N more bytes]`, so whoever reads it knows it is not all.
pub fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}… [cut: {} more bytes]",
        &text[..end],
        text.len() - end
    ))
}

/// `value` as JSON, [`cut`] to about `max` bytes, without ever holding more than `max` bytes
/// of it: a value of megabytes is written through a counter, not into a string.
pub fn json_excerpt(value: &serde_json::Value, max: usize) -> String {
    /// Keeps the first `max` bytes written (and up to 3 more, to end on a whole character),
    /// counts the rest.
    struct Head {
        kept: Vec<u8>,
        max: usize,
        total: usize,
    }
    impl std::io::Write for Head {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = (self.max + 3).saturating_sub(self.kept.len());
            self.kept.extend_from_slice(&buf[..buf.len().min(room)]);
            self.total += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut head = Head {
        kept: Vec::new(),
        max,
        total: 0,
    };
    // Writing a Value into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut head, value);
    if head.total <= max {
        return String::from_utf8_lossy(&head.kept).into_owned();
    }
    let mut end = max;
    // JSON is UTF-8; step back to the start of a character.
    while end > 0 && head.kept.get(end).is_some_and(|b| b & 0xC0 == 0x80) {
        end -= 1;
    }
    format!(
        "{}… [cut: {} more bytes]",
        String::from_utf8_lossy(&head.kept[..end]),
        head.total - end
    )
}

/// A file name as a URL path: each `/`-separated component percent-encoded but for the
/// characters a path segment may hold as they are.
pub fn url_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The content type of a file name, for the few kinds a browser should show as such. Never
/// one a browser would run (HTML, SVG): LibreChat passes these headers on to the user's
/// browser, and what code wrote must not become a page of LibreChat's origin.
pub fn mime_of(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "csv" => "text/csv; charset=utf-8",
        "txt" | "md" | "log" => "text/plain; charset=utf-8",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A child that takes a while to exec (its pre_exec sleeps): the task that started it
    /// awaits the spawning thread, so other tasks of a one-thread runtime go on meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_spawn_holds_up_no_other_task() {
        const SLOW_EXEC: std::time::Duration = std::time::Duration::from_millis(400);
        const TICK: std::time::Duration = std::time::Duration::from_millis(10);
        let mut cmd = tokio::process::Command::new("true");
        // SAFETY: nanosleep is async-signal-safe and the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: SLOW_EXEC.as_nanos() as libc::c_long,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
                Ok(())
            });
        }
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(TICK).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        let mut child = spawn_tied(cmd, libc::SIGKILL).await.unwrap();
        let during = ticks.load(std::sync::atomic::Ordering::Relaxed);
        ticker.abort();
        assert!(child.wait().await.unwrap().success());
        // A blocked thread would have ticked 0 times; allow for a slow machine.
        assert!(
            during >= 10,
            "only {during} ticks during a {SLOW_EXEC:?} spawn"
        );
    }

    #[test]
    fn redact_urls_removes_credentials_and_queries() {
        let cases = [
            (
                "cannot connect to redis://user:s3cret@db.internal:6379/0: refused",
                "cannot connect to redis://db.internal:6379/0: refused",
            ),
            ("REDIS_URL=\"rediss://:pw@h\"", "REDIS_URL=\"rediss://h\""),
            (
                "GET https://api.example.com/mcp?api_key=abc&x=1 failed",
                "GET https://api.example.com/mcp failed",
            ),
            (
                "https://t@h/p#access_token=abc and http://plain:8080/x",
                "https://h/p and http://plain:8080/x",
            ),
            ("redis://:ab/cd@host:6379", "redis://host:6379"),
            (
                "redis+unix:///run/r.sock?pass=x",
                "redis+unix:///run/r.sock",
            ),
            ("(see http://u:p@h/)", "(see http://h/)"),
            (
                "no url here: a://, ://x, é://y",
                "no url here: a://, ://x, é://y",
            ),
            ("ünï http://h/ä?q=ü ok", "ünï http://h/ä ok"),
            ("", ""),
        ];
        for (text, want) in cases {
            assert_eq!(redact_urls(text), want, "{text}");
        }
    }

    #[test]
    fn times_read_as_rfc_3339() {
        use std::time::Duration;
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(at(1_795_449_600, 123)), "2026-11-23T16:00:00.123Z");
        assert_eq!(rfc3339(at(4_102_444_799, 999)), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn private_dirs_are_fresh_and_closed() {
        use std::os::unix::fs::PermissionsExt;
        let parent = std::env::temp_dir();
        let a = private_dir(&parent, "ptc-util-test").unwrap();
        let b = private_dir(&parent, "ptc-util-test").unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(
            a.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("ptc-util-test-")
        );
        std::fs::remove_dir(&a).unwrap();
        std::fs::remove_dir(&b).unwrap();
        let err = private_dir(std::path::Path::new("/nonexistent/dir"), "x").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn hex_round_trips() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&bytes), "0001abff");
        assert_eq!(unhex("0001abff"), Some(bytes.to_vec()));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("é1"), None);
    }

    #[test]
    fn a_poisoned_lock_still_opens() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }

    #[test]
    fn cut_keeps_short_text_and_says_what_it_cut() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("0123456789abc", 10), "0123456789… [cut: 3 more bytes]");
        // Never inside a character: "é" is two bytes.
        assert_eq!(cut("aé", 2), "a… [cut: 2 more bytes]");
        let big = serde_json::json!({"k": "x".repeat(1 << 20)});
        let shown = json_excerpt(&big, 16);
        assert_eq!(
            shown,
            format!(
                "{{\"k\":\"xxxxxxxxxx… [cut: {} more bytes]",
                (1 << 20) + 8 - 16
            )
        );
        assert_eq!(json_excerpt(&serde_json::json!([1, "é"]), 100), "[1,\"é\"]");
        assert_eq!(
            json_excerpt(&serde_json::json!("éé"), 3),
            "\"é… [cut: 3 more bytes]"
        );
    }
}
