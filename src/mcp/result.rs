//! What an MCP `tools/call` result becomes in Python: a pure function over the result, tested on
//! exact values.
//!
//! `isError` → [`CallError::Tool`] with the text; `structuredContent` → that value (a dict);
//! only text blocks → one `str` (blocks joined with `"\n"`); anything else (image, audio,
//! resource) → each block as a dict with its `"type"`, one dict for one block or a list of them.
//! A result bigger than the cap is refused rather than handed to the script.

use crate::run::CallError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

/// Maps one result of `server__tool`; `max_bytes` caps the value handed to code.
pub fn map_result(
    server: &str,
    tool: &str,
    result: CallToolResult,
    max_bytes: usize,
) -> Result<Value, CallError> {
    let CallToolResult {
        content,
        structured_content,
        is_error,
        ..
    } = result;
    let value = if is_error == Some(true) {
        let text = joined_text(&content).unwrap_or_else(|| {
            if content.is_empty() {
                format!("{server}__{tool} failed and gave no message")
            } else {
                serde_json::to_string(&content).unwrap_or_default()
            }
        });
        return Err(CallError::Tool(cap_message(text, max_bytes)));
    } else if let Some(structured) = structured_content {
        structured
    } else if let Some(text) = joined_text(&content) {
        Value::String(text)
    } else {
        let mut blocks: Vec<Value> = content
            .iter()
            .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
            .collect();
        match blocks.len() {
            0 => Value::Null,
            1 => blocks.remove(0),
            _ => Value::Array(blocks),
        }
    };
    let size = json_size(&value, max_bytes);
    if size > max_bytes {
        return Err(CallError::Tool(format!(
            "the result of {server}__{tool} is over the {max_bytes}-byte limit for one tool result"
        )));
    }
    Ok(value)
}

/// All blocks' text joined with newlines, when every block is text.
fn joined_text(content: &[ContentBlock]) -> Option<String> {
    if content.is_empty() {
        return None;
    }
    let texts: Option<Vec<&str>> = content
        .iter()
        .map(|b| b.as_text().map(|t| t.text.as_str()))
        .collect();
    texts.map(|t| t.join("\n"))
}

fn cap_message(mut text: String, max_bytes: usize) -> String {
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("… [cut: over the result size limit]");
    }
    text
}

/// The serialized size of `value`, counting no further than just past `limit`.
fn json_size(value: &Value, limit: usize) -> usize {
    struct Counter {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.limit {
                // Stops serializing a huge value as soon as it is known to be too big.
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { n: 0, limit };
    let _ = serde_json::to_writer(&mut counter, value);
    counter.n
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    fn map(value: Value) -> Result<Value, CallError> {
        map_result("s", "t", result(value), 1000)
    }

    #[test]
    fn each_shape_maps_as_documented() {
        assert_eq!(
            map(
                json!({"content": [{"type": "text", "text": "{\"a\":1}"}], "structuredContent": {"a": 1}})
            ),
            Ok(json!({"a": 1}))
        );
        assert_eq!(
            map(
                json!({"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]})
            ),
            Ok(json!("one\ntwo"))
        );
        assert_eq!(
            map(json!({"content": [{"type": "text", "text": ""}]})),
            Ok(json!(""))
        );
        assert_eq!(map(json!({"content": []})), Ok(Value::Null));
        assert_eq!(
            map(json!({"content": [{"type": "text", "text": "bad code"}], "isError": true})),
            Err(CallError::Tool("bad code".into()))
        );
        assert_eq!(
            map(json!({"content": [], "isError": true})),
            Err(CallError::Tool("s__t failed and gave no message".into()))
        );
        assert_eq!(
            map(json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]})),
            Ok(json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}))
        );
        assert_eq!(
            map(json!({"content": [
                {"type": "text", "text": "see"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}}
            ]})),
            Ok(json!([
                {"type": "text", "text": "see"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}}
            ]))
        );
    }

    #[test]
    fn big_results_are_refused() {
        let big = "x".repeat(2000);
        assert_eq!(
            map(json!({"content": [{"type": "text", "text": big}]})),
            Err(CallError::Tool(
                "the result of s__t is over the 1000-byte limit for one tool result".into()
            ))
        );
        let Err(CallError::Tool(message)) =
            map(json!({"content": [{"type": "text", "text": big}], "isError": true}))
        else {
            panic!("an error result stays an error");
        };
        assert!(message.ends_with("[cut: over the result size limit]"));
    }
}
