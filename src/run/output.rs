//! Output capture: a run's stdout and stderr read by one task each, kept in a [`CappedBuffer`]
//! (the head and the tail of a stream, with a count of what was cut between them, so a 50 MB
//! print costs at most `cap` bytes of memory and still shows how it began and ended), optionally
//! forwarded chunk by chunk as [`OutputChunk`]s, with the sidecar's own notes added to stderr.
//!
//! Owns the pipes' reading side only: it must not decide when a child stops (that is the
//! runner's) and must never wait on a pipe without bound (a grandchild may hold it open).

use super::files::{Files, MAX_SPILL_BYTES, NewFile, RunFile, human_bytes};
use crate::util::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long a child's pipes may stay open after it exited (a grandchild holding them) before
/// the run stops reading: a run must not hang on a stray process.
pub const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// Read size for a child's pipes once a read fills the buffer: a run printing a lot is read in
/// big pieces.
const PIPE_CHUNK: usize = 64 * 1024;
/// Read size a pipe starts with: most runs print little, and every run in flight has two pipes
/// read (at 64 KB each, 32 runs held 4 MB of buffers at the load bench's peak).
const PIPE_FIRST_CHUNK: usize = 4 * 1024;

/// A piece of a run's output, as it is printed.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputChunk {
    Stdout(String),
    Stderr(String),
}

/// What a run printed, capped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Captured {
    pub stdout: String,
    pub stderr: String,
    /// Either stream was cut.
    pub truncated: bool,
    /// The whole of a stream that was cut, saved ([`Spill`]).
    pub files: Vec<RunFile>,
}

impl Captured {
    fn of(buffers: [&CappedBuffer; 2]) -> Captured {
        Captured {
            truncated: buffers.iter().any(|b| b.truncated()),
            stdout: buffers[0].text(),
            stderr: buffers[1].text(),
            files: buffers
                .iter()
                .filter_map(|b| b.spilled().cloned())
                .collect(),
        }
    }
}

/// Each stream's [`Spill`] for a run `id` whose files go to `files`: `out-ID.txt` and
/// `err-ID.txt`.
pub fn spills(files: Option<&Files>, id: &str) -> [Option<Spill>; 2] {
    let spill = |name: String| files.map(|f| Spill::new(f.clone(), name));
    [
        spill(format!("out-{id}.txt")),
        spill(format!("err-{id}.txt")),
    ]
}

/// A run's two output streams being read.
pub struct Capture {
    stdout: Arc<Mutex<CappedBuffer>>,
    stderr: Arc<Mutex<CappedBuffer>>,
    readers: Vec<JoinHandle<()>>,
}

impl Capture {
    /// Starts reading both pipes, each kept to `cap` bytes; every chunk also goes to `forward`.
    pub fn start<R: AsyncRead + Send + Unpin + 'static>(
        stdout: Option<R>,
        stderr: Option<R>,
        cap: usize,
        forward: Option<mpsc::UnboundedSender<OutputChunk>>,
        spills: [Option<Spill>; 2],
    ) -> Capture {
        let [out, err] = spills;
        let buffers = (
            Arc::new(Mutex::new(CappedBuffer::spilling(cap, out))),
            Arc::new(Mutex::new(CappedBuffer::spilling(cap, err))),
        );
        let readers = [
            (
                stdout,
                buffers.0.clone(),
                OutputChunk::Stdout as fn(String) -> OutputChunk,
            ),
            (stderr, buffers.1.clone(), OutputChunk::Stderr),
        ]
        .into_iter()
        .filter_map(|(pipe, buffer, wrap)| {
            pipe.map(|pipe| tokio::spawn(drain(pipe, buffer, forward.clone(), wrap)))
        })
        .collect();
        Capture {
            stdout: buffers.0,
            stderr: buffers.1,
            readers,
        }
    }

    /// Adds a line of the sidecar's own to stderr (why a run stopped).
    pub fn note(&self, note: &str) {
        let mut b = lock(&self.stderr);
        let sep = if b.total() > 0 { "\n" } else { "" };
        b.push(format!("{sep}{note}\n").as_bytes());
    }

    /// What was captured once both pipes closed, or [`DRAIN_GRACE`] after the call for a pipe
    /// a stray process still holds.
    pub async fn finish(self) -> Captured {
        for reader in self.readers {
            let abort = reader.abort_handle();
            if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
                abort.abort();
            }
        }
        let (stdout, stderr) = (lock(&self.stdout), lock(&self.stderr));
        Captured::of([&stdout, &stderr])
    }
}

async fn drain(
    mut pipe: impl AsyncRead + Unpin,
    buffer: Arc<Mutex<CappedBuffer>>,
    forward: Option<mpsc::UnboundedSender<OutputChunk>>,
    wrap: fn(String) -> OutputChunk,
) {
    let mut chunk = vec![0u8; PIPE_FIRST_CHUNK];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                lock(&buffer).push(&chunk[..n]);
                if let Some(tx) = &forward {
                    let _ = tx.send(wrap(String::from_utf8_lossy(&chunk[..n]).into_owned()));
                }
                grow_when_full(&mut chunk, n);
            }
        }
    }
}

/// Grows a pipe's read buffer to [`PIPE_CHUNK`] once a read of `n` bytes filled it.
fn grow_when_full(chunk: &mut Vec<u8>, n: usize) {
    if n == chunk.len() && chunk.len() < PIPE_CHUNK {
        chunk.resize(PIPE_CHUNK, 0);
    }
}

/// What a session's interpreter writes after each run on both pipes: this, the run's nonce, a
/// space, the exit code (`0` on stderr) and a newline. Only the runner and the interpreter know
/// the nonce; code that forges its own run's marker only cuts its own output short.
pub const END_MARKER: &[u8] = b"\0ptc-end ";

/// Longest exit code after a marker: more is not a marker, and is read as output.
const MAX_CODE_DIGITS: usize = 12;

/// The output of a session's live interpreter: its pipes are read for as long as it lives, and
/// each run takes the part up to its end marker ([`END_MARKER`]). What is printed between runs
/// (a thread of an earlier run, just before the interpreter is stopped) belongs to no run and is
/// dropped.
pub struct LiveOutput {
    route: Arc<Mutex<Route>>,
    ended: Arc<tokio::sync::Notify>,
    readers: Vec<JoinHandle<()>>,
}

#[derive(Default)]
struct Route {
    run: Option<RunPart>,
    /// Each pipe reached its end: the interpreter is gone.
    closed: [bool; 2],
}

/// One run's part of a live interpreter's output.
struct RunPart {
    marker: Vec<u8>,
    buffers: [CappedBuffer; 2],
    forward: Option<mpsc::UnboundedSender<OutputChunk>>,
    /// Each stream's marker was read.
    ended: [bool; 2],
    code: Option<i32>,
}

impl RunPart {
    fn push(&mut self, stream: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.buffers[stream].push(bytes);
        if let Some(tx) = &self.forward {
            let text = String::from_utf8_lossy(bytes).into_owned();
            let _ = tx.send(match stream {
                0 => OutputChunk::Stdout(text),
                _ => OutputChunk::Stderr(text),
            });
        }
    }
}

impl LiveOutput {
    pub fn start<R: AsyncRead + Send + Unpin + 'static>(stdout: R, stderr: R) -> LiveOutput {
        let route = Arc::new(Mutex::new(Route::default()));
        let ended = Arc::new(tokio::sync::Notify::new());
        let readers = [(stdout, 0), (stderr, 1)]
            .into_iter()
            .map(|(pipe, stream)| {
                tokio::spawn(route_pipe(pipe, stream, route.clone(), ended.clone()))
            })
            .collect();
        LiveOutput {
            route,
            ended,
            readers,
        }
    }

    /// Starts taking a run's output, up to the markers with `nonce`; each stream kept to `cap`.
    pub fn begin(
        &self,
        nonce: &str,
        cap: usize,
        forward: Option<mpsc::UnboundedSender<OutputChunk>>,
        spills: [Option<Spill>; 2],
    ) {
        let [out, err] = spills;
        let mut marker = END_MARKER.to_vec();
        marker.extend_from_slice(nonce.as_bytes());
        marker.push(b' ');
        lock(&self.route).run = Some(RunPart {
            marker,
            buffers: [
                CappedBuffer::spilling(cap, out),
                CappedBuffer::spilling(cap, err),
            ],
            forward,
            ended: [false; 2],
            code: None,
        });
    }

    /// The run's exit code once both its markers were read, or `None` once the interpreter's
    /// pipes closed before that (it died).
    pub async fn ended(&self) -> Option<i32> {
        loop {
            let notified = self.ended.notified();
            {
                let route = lock(&self.route);
                if let Some(run) = &route.run
                    && run.ended == [true; 2]
                {
                    return run.code;
                }
                if route.closed == [true; 2] {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Adds a line of the sidecar's own to the run's stderr.
    pub fn note(&self, note: &str) {
        if let Some(run) = &mut lock(&self.route).run {
            let b = &mut run.buffers[1];
            let sep = if b.total() > 0 { "\n" } else { "" };
            b.push(format!("{sep}{note}\n").as_bytes());
        }
    }

    /// The run's output; after an interpreter died, once its pipes closed or [`DRAIN_GRACE`]
    /// passed. The next output belongs to no run until [`begin`](Self::begin).
    pub async fn finish(&self, died: bool) -> Captured {
        if died {
            let closed = async {
                while lock(&self.route).closed != [true; 2] {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            let _ = tokio::time::timeout(DRAIN_GRACE, closed).await;
        }
        let run = lock(&self.route).run.take();
        match run {
            Some(run) => Captured::of([&run.buffers[0], &run.buffers[1]]),
            None => Captured::default(),
        }
    }
}

impl Drop for LiveOutput {
    fn drop(&mut self) {
        for reader in &self.readers {
            reader.abort();
        }
    }
}

/// Reads one pipe of a live interpreter for as long as it is open, handing each run its part.
async fn route_pipe(
    mut pipe: impl AsyncRead + Unpin,
    stream: usize,
    route: Arc<Mutex<Route>>,
    ended: Arc<tokio::sync::Notify>,
) {
    let mut chunk = vec![0u8; PIPE_FIRST_CHUNK];
    // Read but not yet handed on: at most the start of a marker, kept until it is told apart.
    let mut held: Vec<u8> = Vec::new();
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => 0,
            Ok(n) => n,
        };
        let mut r = lock(&route);
        if n == 0 {
            if let Some(run) = &mut r.run
                && !run.ended[stream]
            {
                run.push(stream, &held);
            }
            r.closed[stream] = true;
            drop(r);
            ended.notify_waiters();
            return;
        }
        held.extend_from_slice(&chunk[..n]);
        grow_when_full(&mut chunk, n);
        let Some(run) = r.run.as_mut().filter(|run| !run.ended[stream]) else {
            held.clear(); // between runs, or after this run's marker: nobody's output
            continue;
        };
        if take(run, stream, &mut held) {
            drop(r);
            ended.notify_waiters();
        }
    }
}

/// Hands `run` what `held` holds of its output, up to its marker; true when the marker was read.
fn take(run: &mut RunPart, stream: usize, held: &mut Vec<u8>) -> bool {
    let mut from = 0;
    while let Some(at) = find(&held[from..], &run.marker).map(|at| at + from) {
        let rest = &held[at + run.marker.len()..];
        let Some(newline) = rest
            .iter()
            .take(MAX_CODE_DIGITS + 1)
            .position(|&b| b == b'\n')
        else {
            if rest.len() <= MAX_CODE_DIGITS {
                // The marker's line is not all here yet.
                let before = held[..at].to_vec();
                run.push(stream, &before);
                held.drain(..at);
                return false;
            }
            from = at + 1; // not a marker after all
            continue;
        };
        let Some(code) = std::str::from_utf8(&rest[..newline])
            .ok()
            .and_then(|c| c.parse::<i32>().ok())
        else {
            from = at + 1;
            continue;
        };
        let before = held[..at].to_vec();
        run.push(stream, &before);
        held.clear();
        run.ended[stream] = true;
        if stream == 0 {
            run.code = Some(code);
        }
        return true;
    }
    // Keep back a tail that may be the start of a marker; the rest is output.
    let keep = partial_marker(held, &run.marker);
    let out: Vec<u8> = held.drain(..held.len() - keep).collect();
    run.push(stream, &out);
    false
}

/// Where `needle` first occurs in `haystack` (looking only where its first byte does).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = haystack[from..].iter().position(|&b| b == needle[0]) {
        let at = from + at;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The length of the longest tail of `bytes` that begins `marker`.
fn partial_marker(bytes: &[u8], marker: &[u8]) -> usize {
    let longest = bytes.len().min(marker.len() - 1);
    (1..=longest)
        .rev()
        .find(|&n| bytes[bytes.len() - n..] == marker[..n])
        .unwrap_or(0)
}

/// What a capped stream shows where bytes were cut.
fn cut_marker(cut: u64) -> String {
    format!("\n[... {cut} bytes cut ...]\n")
}

fn cut_marker_plain(cut: &str) -> String {
    format!("\n[... {cut} cut ...]\n")
}

/// Where a stream's whole output is saved once it passes its cap, so that nothing is lost.
pub struct Spill {
    files: Files,
    name: String,
    state: SpillState,
}

enum SpillState {
    /// The stream is within its cap.
    Waiting,
    Writing(Box<dyn NewFile>, RunFile),
    /// [`MAX_SPILL_BYTES`], or what the store's quotas had room for, were saved; the rest is
    /// not.
    Full(RunFile),
    Failed(String),
}

impl Spill {
    /// Saves the stream as `name` in `files` if it passes its cap.
    pub fn new(files: Files, name: String) -> Spill {
        Spill {
            files,
            name,
            state: SpillState::Waiting,
        }
    }

    fn start(&mut self, so_far: &[u8]) {
        self.state = match self.files.create(&self.name) {
            Ok((file, info)) => SpillState::Writing(file, RunFile { size: 0, ..info }),
            Err(e) => SpillState::Failed(e.to_string()),
        };
        self.write(so_far);
    }

    fn write(&mut self, mut bytes: &[u8]) {
        let SpillState::Writing(file, info) = &mut self.state else {
            return;
        };
        let room = (MAX_SPILL_BYTES - info.size).min(file.room());
        let full = bytes.len() as u64 > room;
        if full {
            bytes = &bytes[..room as usize];
        }
        if let Err(e) = file.append(bytes) {
            self.state = SpillState::Failed(e.to_string());
            return;
        }
        info.size += bytes.len() as u64;
        if full {
            self.state = SpillState::Full(info.clone());
        }
    }

    /// The saved file, once there is one.
    fn file(&self) -> Option<&RunFile> {
        match &self.state {
            SpillState::Writing(_, f) | SpillState::Full(f) => Some(f),
            _ => None,
        }
    }

    /// What the cut marker says of where the whole stream is.
    fn marker(&self, cut: u64) -> String {
        let cut = human_bytes(cut);
        match &self.state {
            SpillState::Writing(_, f) => {
                format!(
                    "\n[... {cut} cut; full output: {} ...]\n",
                    self.files.locate(f)
                )
            }
            SpillState::Full(f) => format!(
                "\n[... {cut} cut; the first {} of the output: {} ...]\n",
                human_bytes(f.size),
                self.files.locate(f)
            ),
            SpillState::Failed(e) => {
                format!("\n[... {cut} cut; the full output could not be saved: {e} ...]\n")
            }
            SpillState::Waiting => cut_marker_plain(&cut),
        }
    }
}

/// A byte sink that keeps at most `cap` bytes: the first half and the last half; with a
/// [`Spill`], everything also goes to a file once it passes the cap.
pub struct CappedBuffer {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
    spill: Option<Spill>,
}

impl CappedBuffer {
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        CappedBuffer {
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            total: 0,
            spill: None,
        }
    }

    /// A buffer of `cap` bytes whose whole stream is saved by `spill` once it passes `cap`.
    pub fn spilling(cap: usize, spill: Option<Spill>) -> Self {
        CappedBuffer {
            spill,
            ..CappedBuffer::new(cap)
        }
    }

    /// The file the whole stream was saved to, if it was.
    pub fn spilled(&self) -> Option<&RunFile> {
        self.spill.as_ref().and_then(Spill::file)
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        if let Some(spill) = &mut self.spill {
            let cap = (self.head_cap + self.tail_cap) as u64;
            if matches!(spill.state, SpillState::Waiting) && self.total + bytes.len() as u64 > cap {
                // Nothing was cut yet: head and tail hold the whole stream so far.
                let mut so_far = self.head.clone();
                so_far.extend(self.tail.iter());
                spill.start(&so_far);
            }
            spill.write(bytes);
        }
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let n = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes seen in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text; invalid UTF-8 (a cut inside a character) shows as U+FFFD.
    pub fn text(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let kept = (self.head.len() + tail.len()) as u64;
        if self.total == kept {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        match &self.spill {
            Some(spill) => out.push_str(&spill.marker(self.total - kept)),
            None => out.push_str(&cut_marker(self.total - kept)),
        }
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn small_output_is_kept_whole() {
        let mut b = CappedBuffer::new(10);
        b.push(b"abc");
        b.push(b"defgh");
        assert_eq!(b.text(), "abcdefgh");
        assert!(!b.truncated());
    }

    #[test]
    fn large_output_keeps_head_and_tail_around_a_marker() {
        let mut b = CappedBuffer::new(10);
        for chunk in [&b"0123"[..], b"456789", b"abcdefghij", b"XYZ"] {
            b.push(chunk);
        }
        assert_eq!(b.text(), "01234\n[... 13 bytes cut ...]\nijXYZ");
        assert!(b.truncated());
        assert_eq!(b.total(), 23);
    }

    #[test]
    fn one_huge_chunk() {
        let mut b = CappedBuffer::new(8);
        b.push(&[b'x'; 1000]);
        assert_eq!(b.text(), format!("xxxx{}xxxx", cut_marker(992)));
    }

    #[test]
    fn exactly_full_is_not_truncated() {
        let mut b = CappedBuffer::new(6);
        b.push(b"abcdef");
        assert_eq!(b.text(), "abcdef");
        b.push(b"g");
        assert_eq!(b.text(), format!("abc{}efg", cut_marker(1)));
    }

    fn part(nonce: &str) -> RunPart {
        let mut marker = END_MARKER.to_vec();
        marker.extend_from_slice(nonce.as_bytes());
        marker.push(b' ');
        RunPart {
            marker,
            buffers: [CappedBuffer::new(1000), CappedBuffer::new(1000)],
            forward: None,
            ended: [false; 2],
            code: None,
        }
    }

    /// Feeds `chunks` to one stream of `run` as the pipe reader would.
    fn feed(run: &mut RunPart, stream: usize, chunks: &[&[u8]]) -> bool {
        let mut held = Vec::new();
        let mut ended = false;
        for chunk in chunks {
            held.extend_from_slice(chunk);
            ended = take(run, stream, &mut held);
        }
        ended
    }

    #[test]
    fn a_marker_split_across_chunks_ends_the_part_with_its_code() {
        let mut run = part("n0");
        let ended = feed(
            &mut run,
            0,
            &[b"hello\n\0ptc", b"-end n0 ", b"3", b"\nlater"],
        );
        assert!(ended);
        assert_eq!(
            (run.buffers[0].text(), run.code),
            ("hello\n".to_string(), Some(3))
        );
    }

    #[test]
    fn what_only_looks_like_a_marker_is_output() {
        let mut run = part("n1");
        // Another nonce, a marker cut short by other bytes, and a NUL at the very end.
        let ended = feed(
            &mut run,
            1,
            &[b"a\0ptc-end n9 0\nb", b"\0ptc-end n1 x\n", b"c\0", b"d"],
        );
        assert!(!ended);
        assert_eq!(
            run.buffers[1].text(),
            "a\0ptc-end n9 0\nb\0ptc-end n1 x\nc\0d"
        );
    }

    #[test]
    fn only_the_tail_that_may_begin_a_marker_is_held_back() {
        assert_eq!(partial_marker(b"abc\0pt", b"\0ptc-end n "), 3);
        assert_eq!(partial_marker(b"abc", b"\0ptc-end n "), 0);
        assert_eq!(partial_marker(b"\0", b"\0ptc-end n "), 1);
    }

    /// A store that writes into one directory, as the session store would.
    #[derive(Debug)]
    struct DirStore(std::path::PathBuf, u64);

    /// A file of [`DirStore`], with room for `room` bytes.
    struct DirFile(std::fs::File, u64);

    impl NewFile for DirFile {
        fn append(&mut self, bytes: &[u8]) -> Result<(), super::super::files::FileError> {
            use std::io::Write;
            assert!(
                bytes.len() as u64 <= self.1,
                "the spill wrote past the room"
            );
            self.1 -= bytes.len() as u64;
            self.0
                .write_all(bytes)
                .map_err(super::super::files::FileError::store)
        }

        fn room(&self) -> u64 {
            self.1
        }

        fn discard(self: Box<Self>) {}
    }

    impl super::super::files::FileStore for DirStore {
        fn create(
            &self,
            name: &str,
        ) -> Result<(Box<dyn NewFile>, RunFile), super::super::files::FileError> {
            let file = std::fs::File::create(self.0.join(name))
                .map_err(super::super::files::FileError::store)?;
            let info = RunFile {
                name: name.into(),
                size: 0,
                mime: "text/plain".into(),
                url: format!("/x/{name}"),
            };
            Ok((Box::new(DirFile(file, self.1)), info))
        }

        fn locate(&self, file: &RunFile) -> String {
            format!("files/{}", file.name)
        }

        fn read(&self, _: &str, _: u64) -> Option<Vec<u8>> {
            None
        }
    }

    #[test]
    fn a_stream_past_its_cap_is_saved_whole_and_the_marker_names_the_file() {
        let dir = std::env::temp_dir().join(format!("ptc-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store: Files = std::sync::Arc::new(DirStore(dir.clone(), 100));
        let mut b = CappedBuffer::spilling(10, Some(Spill::new(store, "out-r1.txt".into())));
        b.push(b"0123");
        assert_eq!(b.spilled(), None); // within the cap: nothing saved
        for chunk in [&b"456789"[..], b"abcdefghij", b"XYZ"] {
            b.push(chunk);
        }
        let saved = std::fs::read(dir.join("out-r1.txt")).unwrap();
        assert_eq!(saved, b"0123456789abcdefghijXYZ");
        assert_eq!(b.spilled().map(|f| f.size), Some(23));
        assert_eq!(
            b.text(),
            "01234\n[... 13 B cut; full output: files/out-r1.txt ...]\nijXYZ"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_spill_stops_where_the_store_has_no_more_room() {
        let dir = std::env::temp_dir().join(format!("ptc-spill-room-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store: Files = std::sync::Arc::new(DirStore(dir.clone(), 15));
        let mut b = CappedBuffer::spilling(10, Some(Spill::new(store, "out-r2.txt".into())));
        for chunk in [&b"0123456789"[..], b"abcdefghij", b"XYZ"] {
            b.push(chunk);
        }
        let saved = std::fs::read(dir.join("out-r2.txt")).unwrap();
        assert_eq!(saved, b"0123456789abcde");
        assert_eq!(b.spilled().map(|f| f.size), Some(15));
        assert_eq!(
            b.text(),
            "01234\n[... 13 B cut; the first 15 B of the output: files/out-r2.txt ...]\nijXYZ"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_pipe_buffer_grows_only_when_a_read_fills_it() {
        let mut chunk = vec![0u8; PIPE_FIRST_CHUNK];
        grow_when_full(&mut chunk, PIPE_FIRST_CHUNK - 1);
        assert_eq!(chunk.len(), PIPE_FIRST_CHUNK);
        grow_when_full(&mut chunk, PIPE_FIRST_CHUNK);
        assert_eq!(chunk.len(), PIPE_CHUNK);
        grow_when_full(&mut chunk, PIPE_CHUNK);
        assert_eq!(chunk.len(), PIPE_CHUNK);
    }

    #[tokio::test]
    async fn a_pipe_is_read_whole_past_its_first_buffer() {
        use tokio::io::AsyncWriteExt;
        let printed: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let (mut writer, reader) = tokio::io::duplex(PIPE_CHUNK);
        let buffer = Arc::new(Mutex::new(CappedBuffer::new(1 << 20)));
        let draining = tokio::spawn(drain(reader, buffer.clone(), None, OutputChunk::Stdout));
        writer.write_all(&printed).await.unwrap();
        drop(writer);
        draining.await.unwrap();
        assert_eq!(lock(&buffer).text().as_bytes(), &printed[..]);
    }
}
