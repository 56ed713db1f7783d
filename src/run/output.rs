//! Output capping: keeps the head and the tail of a stream and counts what was cut between them,
//! so a 50 MB print costs at most `cap` bytes of memory and still shows how it began and ended.

/// What a capped stream shows where bytes were cut.
pub fn cut_marker(cut: u64) -> String {
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
