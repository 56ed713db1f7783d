//! Parameter notes: the constraints a parameter's schema carries that its signature does not
//! show (ranges, lengths, formats, short patterns, units), as one compact text for the rich
//! description: `ms: 0..60000 ms; q: len 1..64`.
//!
//! Only the top-level parameters, in signature order, and only their own keywords (a `$ref`
//! is followed once); nested constraints stay in `describe()`. A note is never a fact the
//! lossless check compares: it is read as part of the summary. Must not panic on any JSON.

use super::schema::{resolve_pointer, types_of};
use super::ty::Params;
use serde_json::{Map, Value};

/// Longest `pattern` shown; a longer regex costs more tokens than it tells at a glance.
pub const MAX_PATTERN_CHARS: usize = 24;

/// Longest `format` shown; a custom format longer than this is prose, not a name.
pub const MAX_FORMAT_CHARS: usize = 24;

/// A bound at or past this magnitude (2^53 - 1, JavaScript's `Number.MAX_SAFE_INTEGER`) only
/// restates the number type's own limit: it is left out rather than spent as 7 tokens.
pub const UNBOUNDED: f64 = 9_007_199_254_740_991.0;

/// Unit words looked for in a numeric parameter's description, and how the note writes them.
/// Plurals and abbreviations only: `second` is as often an ordinal as a unit.
pub const UNITS: &[(&str, &str)] = &[
    ("milliseconds", "ms"),
    ("millis", "ms"),
    ("ms", "ms"),
    ("seconds", "seconds"),
    ("secs", "seconds"),
    ("minutes", "minutes"),
    ("hours", "hours"),
    ("days", "days"),
    ("bytes", "bytes"),
    ("kilobytes", "KB"),
    ("kb", "KB"),
    ("megabytes", "MB"),
    ("mb", "MB"),
    ("pixels", "px"),
    ("px", "px"),
    ("percent", "%"),
    ("percentage", "%"),
];

/// The notes of a tool's parameters, `name: note; name: note`, empty when none has one.
pub fn notes(input_schema: &Value, params: &Params) -> String {
    let Params::Fields(fields) = params else {
        return String::new();
    };
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
        return String::new();
    };
    fields
        .iter()
        .filter_map(|f| {
            let note = param_note(input_schema, &f.name, properties.get(&f.name)?);
            (!note.is_empty()).then(|| format!("{}: {note}", f.name))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One parameter's note: range and unit, length, format, pattern, joined by `, `.
fn param_note(root: &Value, name: &str, schema: &Value) -> String {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(pointer) => resolve_pointer(root, pointer).unwrap_or(schema),
        None => schema,
    };
    let Some(obj) = schema.as_object() else {
        return String::new();
    };
    let mut parts = Vec::new();
    let range = bounds(
        obj,
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    );
    let numeric = types_of(obj)
        .iter()
        .any(|t| matches!(*t, "integer" | "number"));
    let unit = if numeric { unit(obj, name) } else { None };
    match (range, unit) {
        (Some(r), Some(u)) => parts.push(format!("{r} {u}")),
        (Some(r), None) => parts.push(r),
        (None, Some(u)) => parts.push(u.to_string()),
        (None, None) => {}
    }
    for (min, max) in [("minLength", "maxLength"), ("minItems", "maxItems")] {
        if let Some(r) = bounds(obj, min, max, "", "") {
            parts.push(format!("len {r}"));
        }
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str).filter(|f| {
        !f.is_empty() && f.chars().count() <= MAX_FORMAT_CHARS && !f.contains(char::is_whitespace)
    }) {
        parts.push(format.to_string());
    }
    if let Some(pattern) = obj.get("pattern").and_then(Value::as_str).filter(|p| {
        !p.is_empty()
            && p.chars().count() <= MAX_PATTERN_CHARS
            && !p.contains(|c: char| c.is_whitespace() || c.is_control())
    }) {
        parts.push(format!("pattern {pattern}"));
    }
    parts.join(", ")
}

/// `1..100`, `>= 1`, `> 0, <= 1`: the bounds of the named keywords, if any is a number. An
/// exclusive keyword is a number (2019-09) or `true` beside its inclusive one (draft 4).
fn bounds(
    obj: &Map<String, Value>,
    min: &str,
    max: &str,
    xmin: &str,
    xmax: &str,
) -> Option<String> {
    let side = |inclusive: &str, exclusive: &str| -> Option<(String, bool)> {
        let number = |k: &str| {
            obj.get(k)
                .filter(|v| v.as_f64().is_some_and(|n| n.abs() < UNBOUNDED))
                .map(Value::to_string)
        };
        match (number(exclusive), number(inclusive)) {
            (Some(x), _) => Some((x, true)),
            (None, Some(n)) => Some((n, obj.get(exclusive) == Some(&Value::Bool(true)))),
            (None, None) => None,
        }
    };
    match (side(min, xmin), side(max, xmax)) {
        (None, None) => None,
        (Some((lo, false)), Some((hi, false))) => Some(format!("{lo}..{hi}")),
        (lo, hi) => {
            let lo = lo.map(|(n, x)| format!("{} {n}", if x { ">" } else { ">=" }));
            let hi = hi.map(|(n, x)| format!("{} {n}", if x { "<" } else { "<=" }));
            Some(lo.into_iter().chain(hi).collect::<Vec<_>>().join(", "))
        }
    }
}

/// The first unit word of the parameter's description, unless its name already says it
/// (`timeout_ms`).
fn unit(obj: &Map<String, Value>, name: &str) -> Option<&'static str> {
    let description = obj.get("description").and_then(Value::as_str)?;
    let (word, shown) = description
        .split(|c: char| !c.is_alphanumeric())
        .find_map(|w| {
            let w = w.to_ascii_lowercase();
            UNITS.iter().find(|(u, _)| *u == w).copied()
        })?;
    let said = [word, &shown.to_ascii_lowercase()]
        .iter()
        .any(|w| ends_with_word(name, w));
    (!said).then_some(shown)
}

/// Whether `name`'s last word (after `_`, `-` or a capital: `timeout_ms`, `timeoutMs`) is `word`.
fn ends_with_word(name: &str, word: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let Some(start) = lower.len().checked_sub(word.len()) else {
        return false;
    };
    lower.ends_with(word)
        && (start == 0
            || name[..start].ends_with(['_', '-'])
            || name[start..].starts_with(|c: char| c.is_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::lower::{Lowerer, Shapes};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// The notes of a one-parameter tool whose parameter `p` has `schema`.
    fn note(schema: Value) -> String {
        let input = json!({"type": "object", "properties": {"p": schema}});
        let mut shapes = Shapes::default();
        let params = Lowerer::new(&input, "t", &mut shapes).params();
        notes(&input, &params)
    }

    #[test]
    fn ranges() {
        assert_eq!(
            note(json!({"type": "integer", "minimum": 1, "maximum": 100})),
            "p: 1..100"
        );
        assert_eq!(note(json!({"type": "integer", "minimum": 1})), "p: >= 1");
        assert_eq!(note(json!({"type": "number", "maximum": 1.5})), "p: <= 1.5");
        assert_eq!(
            note(json!({"type": "number", "exclusiveMinimum": 0, "maximum": 1})),
            "p: > 0, <= 1"
        );
        assert_eq!(
            note(json!({"type": "number", "exclusiveMaximum": 1})),
            "p: < 1"
        );
        // Draft 4: a boolean beside the bound.
        assert_eq!(
            note(json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 10})),
            "p: > 0, <= 10"
        );
        assert_eq!(note(json!({"type": "integer", "minimum": "1"})), "");
        // A bound that is only the type's limit says nothing.
        assert_eq!(
            note(json!({"type": "integer", "minimum": 1, "maximum": 9_007_199_254_740_991_u64})),
            "p: >= 1"
        );
        assert_eq!(note(json!({"type": "integer", "maximum": i64::MAX})), "");
    }

    #[test]
    fn lengths_formats_patterns() {
        assert_eq!(
            note(json!({"type": "string", "minLength": 1, "maxLength": 64})),
            "p: len 1..64"
        );
        assert_eq!(
            note(json!({"type": "string", "maxLength": 64})),
            "p: len <= 64"
        );
        assert_eq!(
            note(json!({"type": "array", "items": {"type": "string"}, "minItems": 1})),
            "p: len >= 1"
        );
        assert_eq!(
            note(json!({"type": "string", "format": "date-time"})),
            "p: date-time"
        );
        assert_eq!(note(json!({"type": "string", "format": "uri"})), "p: uri");
        assert_eq!(
            note(json!({"type": "string", "format": "email"})),
            "p: email"
        );
        assert_eq!(
            note(json!({"type": "string", "pattern": "^[a-z0-9-]+$"})),
            "p: pattern ^[a-z0-9-]+$"
        );
        // Too long to read at a glance, or not one token of text: left to describe().
        assert_eq!(
            note(json!({"type": "string", "pattern": "x".repeat(25)})),
            ""
        );
        assert_eq!(note(json!({"type": "string", "pattern": "a b"})), "");
        assert_eq!(
            note(json!({"type": "string", "format": "a long custom format"})),
            ""
        );
        assert_eq!(
            note(json!({"type": "string", "minLength": 1, "format": "email", "pattern": "@"})),
            "p: len >= 1, email, pattern @"
        );
    }

    #[test]
    fn units() {
        assert_eq!(
            note(json!({"type": "integer", "minimum": 0, "maximum": 60000,
                        "description": "How long to wait, in milliseconds."})),
            "p: 0..60000 ms"
        );
        assert_eq!(
            note(json!({"type": "number", "description": "Timeout (seconds)"})),
            "p: seconds"
        );
        assert_eq!(
            note(json!({"type": "integer", "description": "Size in MB"})),
            "p: MB"
        );
        // Only numbers have units; the ordinal `second` is not one.
        assert_eq!(
            note(json!({"type": "string", "description": "In seconds"})),
            ""
        );
        assert_eq!(
            note(json!({"type": "integer", "description": "The second one"})),
            ""
        );
        // A name that says its unit already.
        let input = json!({"type": "object", "properties": {
            "timeout_ms": {"type": "integer", "description": "Timeout in milliseconds"},
            "delayMs": {"type": "integer", "description": "Delay in milliseconds"},
            "items": {"type": "integer", "description": "How many, in ms"},
            "delay": {"type": "integer", "minimum": 0, "description": "Delay in seconds"}
        }, "required": ["delay"]});
        let params = Lowerer::new(&input, "t", &mut Shapes::default()).params();
        assert_eq!(notes(&input, &params), "delay: >= 0 seconds; items: ms");
    }

    #[test]
    fn refs_open_params_and_odd_json() {
        let input = json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}},
                           "$defs": {"N": {"type": "integer", "maximum": 9}}});
        let params = Lowerer::new(&input, "t", &mut Shapes::default()).params();
        assert_eq!(notes(&input, &params), "n: <= 9");
        let open = json!({"type": "object"});
        let params = Lowerer::new(&open, "t", &mut Shapes::default()).params();
        assert_eq!(notes(&open, &params), "");
        assert_eq!(note(json!(true)), "");
        assert_eq!(note(json!({"type": "integer", "description": 5})), "");
    }
}
