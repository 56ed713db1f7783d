//! JSON Schema look-ups the lowering needs: `$ref` pointers, type lists, nullability,
//! required names. Plain functions over `serde_json` values; nothing here renders.

use super::lower::TYPE_KEYWORDS;
use serde_json::{Map, Value};

/// Resolves a local JSON pointer (`#/$defs/Node`, `#/definitions/a~1b`, `#`).
pub fn resolve_pointer<'v>(root: &'v Value, pointer: &str) -> Option<&'v Value> {
    let path = pointer.strip_prefix('#')?;
    if path.is_empty() {
        return Some(root);
    }
    let decoded: String = percent_decode(path);
    root.pointer(&decoded)
}

fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `anyOf`/`oneOf` branches of a schema, when they describe types.
pub fn type_branches(obj: &Map<String, Value>) -> Option<&Vec<Value>> {
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| obj.get(*k).and_then(Value::as_array))
        .find(|branches| {
            !branches.is_empty()
                && branches.iter().any(|b| match b {
                    Value::Object(b) => TYPE_KEYWORDS.iter().any(|k| b.contains_key(*k)),
                    _ => false,
                })
        })
}

/// The `type` keyword as a list, inferred from `properties`/`items` when absent.
pub fn types_of(obj: &Map<String, Value>) -> Vec<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if obj.contains_key("properties") || obj.contains_key("additionalProperties") => {
            vec!["object"]
        }
        _ if obj.contains_key("items") => vec!["array"],
        _ => vec![],
    }
}

/// OpenAPI's `nullable: true`.
pub fn is_nullable(obj: &Map<String, Value>) -> bool {
    obj.get("nullable") == Some(&Value::Bool(true))
}

pub fn required_of(obj: &Map<String, Value>) -> Vec<&str> {
    obj.get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}
