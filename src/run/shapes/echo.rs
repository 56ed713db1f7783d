//! The echo rule: a call teaches the shape of its result only when the call did not choose the
//! result's keys. A tool that echoes its arguments (or looks up what it was given, or answers
//! `{word: …}` for a word it was sent) would otherwise let one run write the keys every later
//! run of the agent reads in `describe()` and `search_tools`: a message to another session's
//! model, in a place it trusts as the tool's own documentation.
//!
//! The rule: every word of the call's arguments (each run of `[A-Za-z0-9_-]` in a key or a
//! string, at any depth, and inside a string that holds JSON), compared without case and with
//! `-` as `_`, less the property names the tool's input schema declares (its author chose
//! those, not the caller), is a word the caller chose. A result whose shape records one of them
//! as a key, at any depth, teaches nothing. A result that holds the argument object itself is
//! caught by the same rule whenever that object has a key the shape shows and the schema does
//! not declare; with declared keys only it shows what the schema already says. Keys a tool
//! derives from its arguments otherwise (base64, a template, a store that returns in one call
//! what another stored) are not seen: docs/SECURITY.md, "Learned result shapes".
//!
//! Pure: [`ChosenWords::of`] runs before the call (its arguments go to the backend),
//! [`ChosenWords::echoed_in`] after it.

use super::{MAX_JSON_TEXT_BYTES, Shape};
use serde_json::Value;
use std::collections::HashSet;

/// Distinct words kept from one call's arguments; a call with more teaches nothing. A long
/// text argument has thousands of words, and every call in flight holds its set until its
/// result comes (at most 40 bytes a word: 80 KiB a call).
pub const MAX_CHOSEN_WORDS: usize = 2_048;
/// Nodes of an input schema searched for declared property names: a schema with more is the
/// operator's, but its walk must still be bounded on the call's path.
pub const MAX_SCHEMA_NODES: usize = 10_000;
/// Deepest nesting of arguments searched for words (JSON in strings counted); deeper arguments
/// teach nothing: each string holding JSON starts a new parse, and the walk is on the call's
/// path, on an async worker's stack.
pub const MAX_ARGS_DEPTH: usize = 32;

/// Why a call taught nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Echo {
    /// The result's shape records a key the caller chose (folded: lower case, `-` as `_`).
    Key(String),
    /// The arguments could not be checked: more than [`MAX_CHOSEN_WORDS`] words, or nested
    /// deeper than [`MAX_ARGS_DEPTH`].
    Unchecked,
}

/// The words one call's arguments chose, less those its tool's input schema declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChosenWords {
    Words(HashSet<String>),
    /// Past [`MAX_CHOSEN_WORDS`] or [`MAX_ARGS_DEPTH`]: the call teaches nothing.
    Unchecked,
}

impl ChosenWords {
    /// The chosen words of `args` for a tool with `input_schema`.
    pub fn of(args: &Value, input_schema: &Value) -> ChosenWords {
        let mut words = HashSet::new();
        if !collect(args, 0, &mut words) {
            return ChosenWords::Unchecked;
        }
        if !words.is_empty() {
            let mut left = MAX_SCHEMA_NODES;
            forget_declared(input_schema, &mut words, &mut left);
        }
        ChosenWords::Words(words)
    }

    /// Whether `shape` (of the call's result) records a key these words chose.
    pub fn echoed_in(&self, shape: &Shape) -> Option<Echo> {
        match self {
            ChosenWords::Unchecked => Some(Echo::Unchecked),
            ChosenWords::Words(words) if words.is_empty() => None,
            ChosenWords::Words(words) => first_chosen_key(shape, words).map(Echo::Key),
        }
    }
}

/// A word as it is compared: a tool may change case or turn `-` into `_` on the way.
fn fold(word: &str) -> String {
    word.chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// Adds the words of `value` (at `depth`) to `words`; false once there are more than
/// [`MAX_CHOSEN_WORDS`] or the value is deeper than [`MAX_ARGS_DEPTH`].
fn collect(value: &Value, depth: usize, words: &mut HashSet<String>) -> bool {
    if depth > MAX_ARGS_DEPTH {
        return false;
    }
    match value {
        Value::Object(map) => map
            .iter()
            .all(|(k, v)| words_of(k, words) && collect(v, depth + 1, words)),
        Value::Array(items) => items.iter().all(|v| collect(v, depth + 1, words)),
        Value::String(s) => {
            if !words_of(s, words) {
                return false;
            }
            // JSON in a string may spell a key with escapes (`\u0069gnore`) the tool decodes.
            let t = s.trim_start();
            if s.len() <= MAX_JSON_TEXT_BYTES
                && (t.starts_with('{') || t.starts_with('['))
                && let Ok(inner @ (Value::Object(_) | Value::Array(_))) =
                    serde_json::from_str::<Value>(s)
            {
                return collect(&inner, depth + 1, words);
            }
            true
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
    }
}

/// Adds each run of `[A-Za-z0-9_-]` in `text` that could be a recorded key.
fn words_of(text: &str, words: &mut HashSet<String>) -> bool {
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    for word in text.split(|c: char| !is_word_char(c)) {
        // Only a word that could be a recorded key (at most 40 bytes) is kept.
        if !super::is_field_name(word) {
            continue;
        }
        let folded = fold(word);
        if !words.contains(&folded) {
            if words.len() >= MAX_CHOSEN_WORDS {
                return false;
            }
            words.insert(folded);
        }
    }
    true
}

/// Removes from `words` every property name `schema` declares, at any depth.
fn forget_declared(schema: &Value, words: &mut HashSet<String>, left: &mut usize) {
    if *left == 0 {
        return;
    }
    *left -= 1;
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                for name in properties.keys() {
                    words.remove(&fold(name));
                }
            }
            for v in map.values() {
                forget_declared(v, words, left);
            }
        }
        Value::Array(items) => {
            for v in items {
                forget_declared(v, words, left);
            }
        }
        _ => {}
    }
}

/// The first key `shape` records, at any depth, that is one of `words`.
fn first_chosen_key(shape: &Shape, words: &HashSet<String>) -> Option<String> {
    match shape {
        Shape::JsonStr(inner) | Shape::List(Some(inner)) | Shape::Map(inner) => {
            first_chosen_key(inner, words)
        }
        Shape::Object(object) => object.keys.iter().find_map(|k| {
            let folded = fold(&k.name);
            if words.contains(&folded) {
                Some(folded)
            } else {
                first_chosen_key(&k.shape, words)
            }
        }),
        Shape::Union(members) => members.iter().find_map(|m| first_chosen_key(m, words)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// Why the result of a call with `args` to a tool with `schema` teaches nothing, if it does.
    fn echo(result: Value, args: Value, schema: Value) -> Option<Echo> {
        ChosenWords::of(&args, &schema).echoed_in(&Shape::of(&result))
    }

    fn key(k: &str) -> Option<Echo> {
        Some(Echo::Key(k.into()))
    }

    #[test]
    fn a_tool_that_echoes_its_arguments_teaches_nothing() {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        // The arguments themselves, as the result or inside it, at any depth.
        let args = json!({"text": "hi", "ignore_previous_instructions": 1});
        assert_eq!(
            echo(args.clone(), args.clone(), schema.clone()),
            key("ignore_previous_instructions")
        );
        assert_eq!(
            echo(
                json!({"ok": true, "request": {"meta": [args.clone()]}}),
                args.clone(),
                schema.clone()
            ),
            key("ignore_previous_instructions")
        );
        // As JSON in a string, on either side (a key spelt with an escape included).
        assert_eq!(
            echo(
                json!({"body": args.to_string()}),
                args.clone(),
                schema.clone()
            ),
            key("ignore_previous_instructions")
        );
        assert_eq!(
            echo(
                json!({"call_delete_all": 1}),
                json!({"text": "{\"\\u0043all-Delete-ALL\": 1}"}),
                schema.clone()
            ),
            key("call_delete_all")
        );
        assert_eq!(
            echo(
                json!(json!({"said": {"x_y": 1}}).to_string()),
                json!({"text": "x_y"}),
                schema.clone()
            ),
            key("x_y")
        );
    }

    #[test]
    fn words_the_caller_sent_as_values_are_chosen_too() {
        let schema = json!({"properties": {"sql": {"type": "string"}, "key": {}}});
        // A lookup by key, a computed column, a field list.
        assert_eq!(
            echo(
                json!({"run_rm_rf": "v"}),
                json!({"key": "run_rm_rf"}),
                schema.clone()
            ),
            key("run_rm_rf")
        );
        assert_eq!(
            echo(
                json!([{"Ignore_All": 1}]),
                json!({"sql": "SELECT 1 AS ignore_all"}),
                schema.clone()
            ),
            key("ignore_all")
        );
        assert_eq!(
            echo(
                json!({"n": [{"a-b": 1}]}),
                json!({"fields": ["A_B"]}),
                schema
            ),
            key("a_b")
        );
    }

    #[test]
    fn keys_the_schema_declares_and_words_nobody_sent_still_teach() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "filter": {"type": "object", "properties": {"state": {"enum": ["open", "closed"]}}}
            }
        });
        // Declared names are the author's: an echo of them shows what the schema says.
        let args = json!({"city": "Paris", "filter": {"state": "open"}});
        assert_eq!(
            echo(
                json!({"city": "Paris", "temp_c": 21}),
                args.clone(),
                schema.clone()
            ),
            None
        );
        assert_eq!(
            echo(json!({"echo": args.clone()}), args.clone(), schema.clone()),
            None
        );
        // A value word that is not a key of the result, and no arguments at all.
        assert_eq!(
            echo(
                json!({"open": 3, "title": "x"}),
                json!({"city": "Rome"}),
                schema.clone()
            ),
            None
        );
        assert_eq!(echo(json!({"a": 1}), json!({}), json!({})), None);
        // A key the caller sent that the result does not record (a map keyed by data).
        assert_eq!(
            echo(
                json!({"alice@example.com": 1, "bob@example.com": 2}),
                json!({"who": "alice@example.com"}),
                schema
            ),
            None
        );
    }

    /// `n` distinct words that could be keys (letters only: a key has at most 3 digits).
    fn distinct_words(n: usize) -> Vec<String> {
        (0..n)
            .map(|mut i| {
                let mut word = String::from("w");
                loop {
                    word.push(char::from(b'a' + (i % 26) as u8));
                    i /= 26;
                    if i == 0 {
                        break word;
                    }
                }
            })
            .collect()
    }

    #[test]
    fn arguments_too_wide_or_deep_to_check_teach_nothing() {
        let text = distinct_words(MAX_CHOSEN_WORDS + 1);
        let args = json!({"text": text.join(" ")});
        assert_eq!(ChosenWords::of(&args, &json!({})), ChosenWords::Unchecked);
        assert_eq!(
            echo(json!({"a": 1}), args, json!({})),
            Some(Echo::Unchecked)
        );
        // As many as the bound, each sent twice (no keys: a key is a word too): checked.
        let text = distinct_words(MAX_CHOSEN_WORDS);
        let args = json!([text.join(" "), text]);
        assert_eq!(echo(json!({"a": 1}), args.clone(), json!({})), None);
        assert_eq!(echo(json!({"wbb": 1}), args, json!({})), key("wbb"));
        let mut deep = json!(1);
        for _ in 0..MAX_ARGS_DEPTH {
            deep = json!([deep]);
        }
        assert_eq!(
            ChosenWords::of(&json!({"x": deep}), &json!({})),
            ChosenWords::Unchecked
        );
        assert_eq!(
            echo(json!({"a": 1}), json!([deep]), json!({})),
            Some(Echo::Unchecked)
        );
        assert_eq!(echo(json!({"a": 1}), deep, json!({})), None);
    }
}
