//! W3C trace context (`traceparent`, https://www.w3.org/TR/trace-context/): a run is a span of
//! the trace its caller names (or of a new trace), and each tool call a child span of the run.
//! The ids go into the events and, as `traceparent`, to host callbacks.
//!
//! Owns parsing and formatting the header and making ids. A header that does not parse is
//! ignored, as the standard says: the run starts a trace of its own. Imports nothing of the
//! crate but `util`.

use crate::util::hex;

/// The header's name.
pub const TRACEPARENT: &str = "traceparent";

/// One span's place in a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// 16 lowercase hex digits, not all zero: this span.
    pub span_id: String,
    /// The span this one is a child of, when it has one.
    pub parent_span_id: Option<String>,
    /// The caller's sampled flag (`01`), passed on.
    pub sampled: bool,
}

impl SpanContext {
    /// The span of a run: a child of the span `traceparent` names, or the root of a new trace
    /// when there is none or it does not parse.
    pub fn for_run(traceparent: Option<&str>) -> SpanContext {
        match traceparent.and_then(parse) {
            Some((trace_id, parent, sampled)) => SpanContext {
                trace_id,
                span_id: new_id(8),
                parent_span_id: Some(parent),
                sampled,
            },
            None => SpanContext {
                trace_id: new_id(16),
                span_id: new_id(8),
                parent_span_id: None,
                sampled: true,
            },
        }
    }

    /// A new span, child of this one (a tool call of the run).
    pub fn child(&self) -> SpanContext {
        SpanContext {
            trace_id: self.trace_id.clone(),
            span_id: new_id(8),
            parent_span_id: Some(self.span_id.clone()),
            sampled: self.sampled,
        }
    }

    /// This span as a `traceparent` value, for whatever it calls.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{}",
            self.trace_id,
            self.span_id,
            if self.sampled { "01" } else { "00" }
        )
    }
}

/// The `traceparent` header of a request, if it has one that is text.
pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `(trace id, parent span id, sampled)` of a `traceparent` value: version `00` exactly as the
/// standard lays it out, or a later version's first four fields.
fn parse(value: &str) -> Option<(String, String, bool)> {
    let value = value.trim();
    let mut parts = value.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next();
    let lower_hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
        return None;
    }
    if !lower_hex(trace, 32) || !lower_hex(span, 16) || !lower_hex(flags, 2) {
        return None;
    }
    if trace.bytes().all(|b| b == b'0') || span.bytes().all(|b| b == b'0') {
        return None;
    }
    let sampled = u8::from_str_radix(flags, 16).ok()? & 1 == 1;
    Some((trace.to_string(), span.to_string(), sampled))
}

/// `bytes` random bytes as lowercase hex, never all zero.
fn new_id(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    loop {
        rand::fill(&mut buf[..]);
        if buf.iter().any(|&b| b != 0) {
            return hex(&buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";

    #[test]
    fn a_run_is_a_child_of_the_callers_span() {
        let run = SpanContext::for_run(Some(&format!("00-{TRACE}-{PARENT}-01")));
        assert_eq!(
            (
                run.trace_id.as_str(),
                run.parent_span_id.as_deref(),
                run.sampled
            ),
            (TRACE, Some(PARENT), true)
        );
        assert_eq!(run.span_id.len(), 16);
        let call = run.child();
        assert_eq!(
            (call.trace_id.as_str(), call.parent_span_id.as_deref()),
            (TRACE, Some(run.span_id.as_str()))
        );
        assert_ne!(call.span_id, run.span_id);
        assert_eq!(
            call.traceparent(),
            format!("00-{TRACE}-{}-01", call.span_id)
        );
    }

    #[test]
    fn a_header_that_does_not_parse_starts_a_trace_of_its_own() {
        for bad in [
            "",
            "garbage",
            &format!("00-{}-{PARENT}-01", "0".repeat(32)),
            &format!("00-{TRACE}-{}-01", "0".repeat(16)),
            &format!("00-{}-{PARENT}-01", TRACE.to_uppercase()),
            &format!("ff-{TRACE}-{PARENT}-01"),
            &format!("00-{TRACE}-{PARENT}-01-extra"),
            &format!("00-{TRACE}-{PARENT}"),
        ] {
            let run = SpanContext::for_run(Some(bad));
            assert_eq!(run.parent_span_id, None, "{bad:?}");
            assert_ne!(run.trace_id, TRACE, "{bad:?}");
            assert_eq!(run.trace_id.len(), 32);
        }
        // A later version may add fields; the first four still count. Unsampled stays so.
        let run = SpanContext::for_run(Some(&format!("01-{TRACE}-{PARENT}-00-more")));
        assert_eq!((run.trace_id.as_str(), run.sampled), (TRACE, false));
        assert!(run.traceparent().ends_with("-00"));
    }
}
