//! Output capture: a run's stdout and stderr read by one task each, kept in a [`CappedBuffer`]
//! (the head and the tail of a stream, with a count of what was cut between them, so a 50 MB
//! print costs at most `cap` bytes of memory and still shows how it began and ended), optionally
//! forwarded chunk by chunk as [`OutputChunk`]s, with the sidecar's own notes added to stderr.
//!
//! Owns the pipes' reading side only: it must not decide when a child stops (that is the
//! runner's) and must never wait on a pipe without bound (a grandchild may hold it open).

use crate::util::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long a child's pipes may stay open after it exited (a grandchild holding them) before
/// the run stops reading: a run must not hang on a stray process.
pub const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// Read size for a child's pipes.
const PIPE_CHUNK: usize = 64 * 1024;

/// A piece of a run's output, as it is printed.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputChunk {
    Stdout(String),
    Stderr(String),
}

/// What a run printed, capped.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    pub stdout: String,
    pub stderr: String,
    /// Either stream was cut.
    pub truncated: bool,
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
    ) -> Capture {
        let buffers = (
            Arc::new(Mutex::new(CappedBuffer::new(cap))),
            Arc::new(Mutex::new(CappedBuffer::new(cap))),
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
        Captured {
            truncated: stdout.truncated() || stderr.truncated(),
            stdout: stdout.text(),
            stderr: stderr.text(),
        }
    }
}

async fn drain(
    mut pipe: impl AsyncRead + Unpin,
    buffer: Arc<Mutex<CappedBuffer>>,
    forward: Option<mpsc::UnboundedSender<OutputChunk>>,
    wrap: fn(String) -> OutputChunk,
) {
    let mut chunk = vec![0u8; PIPE_CHUNK];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                lock(&buffer).push(&chunk[..n]);
                if let Some(tx) = &forward {
                    let _ = tx.send(wrap(String::from_utf8_lossy(&chunk[..n]).into_owned()));
                }
            }
        }
    }
}

/// What a capped stream shows where bytes were cut.
fn cut_marker(cut: u64) -> String {
    format!("\n[... {cut} bytes cut ...]\n")
}

/// A byte sink that keeps at most `cap` bytes: the first half and the last half.
#[derive(Debug, Clone)]
pub struct CappedBuffer {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
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
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
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
        out.push_str(&cut_marker(self.total - kept));
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
}
