//! Result shapes: what the results of a tool without an output schema look like (keys and
//! types, merged across calls, bounded), learned from its calls and shown by `describe()` and
//! `search_tools`, never in the description (whose bytes must not change with usage: the
//! providers' prompt caches).
//!
//! What one run teaches, later runs of the same agent read, other sessions' included: learned
//! shapes are a channel between runs, and this module keeps it narrow (docs/SECURITY.md,
//! "Learned result shapes"):
//!
//! - only key names and kinds, never values; an object with a key that does not read as a
//!   field name (an email, a UUID, a path: `is_field_name`) is recorded as `dict[str, T]`
//!   without its keys;
//! - never from a call that chose the result's keys: the echo rule (`echo.rs`), a result that
//!   records as a key any word of its call's arguments that the input schema does not declare
//!   teaches nothing;
//! - per agent (`PTC_AGENT_ID`), also in a file several agents' sidecars share (`table.rs`);
//! - not at all with `PTC_LEARN_SHAPES=false`.
//!
//! [`Shape::of`] and [`Shape::merge`] are pure and tested on exact strings, as is the echo rule;
//! [`Shapes`] is the shared table, kept in `PTC_STATE_DIR/shapes.json` when that is set. It
//! must not decide which tools are recorded (the calls handle records those without an output
//! schema).

mod echo;
mod table;

pub use echo::{ChosenWords, Echo, MAX_CHOSEN_WORDS};
pub use table::{FILE_NAME, FILE_VERSION, Learned, MAX_TOOLS, Shapes, ShapesConfig, lesson};

use crate::render::Lang;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Deepest nesting recorded: below it a value is `any`; a result 50 levels deep must not make
/// a shape 50 levels deep.
pub const MAX_DEPTH: usize = 4;
/// Keys recorded per object; past them `…` (a map keyed by ids would grow without end).
pub const MAX_KEYS: usize = 24;
/// Elements of a list whose shapes are merged: a 100,000-element result costs no more.
pub const MAX_ELEMENTS: usize = 20;
/// Nodes (types and keys) one shape keeps, first come first kept; past it `any`: the depth
/// and key bounds alone would still allow 24⁴ keys in one shape.
pub const MAX_NODES: usize = 256;
/// Kinds a union keeps before it becomes `any`.
pub const MAX_UNION: usize = 4;
/// Longest text searched for JSON inside a `str` result (many MCP tools return JSON as text):
/// parsing is on the call's path, and 64 KiB costs a fraction of a millisecond.
pub const MAX_JSON_TEXT_BYTES: usize = 64 << 10;
/// Longest shape shown, in characters; a deeper rendering is cut a level at a time.
pub const MAX_SHOWN_CHARS: usize = 600;

/// The shape of JSON values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "of")]
pub enum Shape {
    Any,
    Null,
    Bool,
    Int,
    Float,
    Str,
    /// A string holding a JSON object or array: `json.loads` it.
    JsonStr(Box<Shape>),
    /// A list of elements of this shape (`None`: only empty lists seen).
    List(Option<Box<Shape>>),
    /// An object keyed by data (a key that does not read as a field name: `alice@example.com`,
    /// a UUID): its values' shape, never its keys, which are another caller's data.
    Map(Box<Shape>),
    Object(Object),
    Union(Vec<Shape>),
}

/// An object's keys in the order first seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Object {
    pub keys: Vec<Key>,
    /// Keys were left out (past [`MAX_KEYS`]).
    pub more: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Key {
    pub name: String,
    pub shape: Shape,
    /// In every result seen; otherwise shown with `?`.
    pub always: bool,
}

impl Shape {
    /// The shape of one value, within [`MAX_NODES`].
    pub fn of(value: &Value) -> Shape {
        Shape::at(value, 0, &mut { MAX_NODES })
    }

    fn at(value: &Value, depth: usize, left: &mut usize) -> Shape {
        if depth > MAX_DEPTH || *left == 0 {
            return Shape::Any;
        }
        *left -= 1;
        match value {
            Value::Null => Shape::Null,
            Value::Bool(_) => Shape::Bool,
            Value::Number(n) if n.is_i64() || n.is_u64() => Shape::Int,
            Value::Number(_) => Shape::Float,
            Value::String(s) => {
                let t = s.trim_start();
                if s.len() <= MAX_JSON_TEXT_BYTES
                    && (t.starts_with('{') || t.starts_with('['))
                    && let Ok(inner @ (Value::Object(_) | Value::Array(_))) =
                        serde_json::from_str::<Value>(s)
                {
                    Shape::JsonStr(Box::new(Shape::at(&inner, depth + 1, left)))
                } else {
                    Shape::Str
                }
            }
            Value::Array(items) => Shape::List(
                items
                    .iter()
                    .take(MAX_ELEMENTS)
                    .map(|v| Shape::at(v, depth + 1, left))
                    .reduce(Shape::merge)
                    .map(Box::new),
            ),
            Value::Object(map) if !map.keys().all(|k| is_field_name(k)) => Shape::Map(Box::new(
                map.values()
                    .take(MAX_ELEMENTS)
                    .map(|v| Shape::at(v, depth + 1, left))
                    .reduce(Shape::merge)
                    .unwrap_or(Shape::Any),
            )),
            Value::Object(map) => {
                let mut keys = Vec::new();
                for (k, v) in map.iter().take(MAX_KEYS) {
                    if *left == 0 {
                        break;
                    }
                    keys.push(Key {
                        name: k.clone(),
                        shape: Shape::at(v, depth + 1, left),
                        always: true,
                    });
                }
                let more = map.len() > keys.len();
                Shape::Object(Object { keys, more })
            }
        }
    }

    /// One shape that both values fit.
    pub fn merge(self, other: Shape) -> Shape {
        match (self, other) {
            (a, b) if a == b => a,
            (Shape::Any, _) | (_, Shape::Any) => Shape::Any,
            (Shape::Int, Shape::Float) | (Shape::Float, Shape::Int) => Shape::Float,
            (Shape::JsonStr(a), Shape::JsonStr(b)) => Shape::JsonStr(Box::new(a.merge(*b))),
            (Shape::List(a), Shape::List(b)) => Shape::List(match (a, b) {
                (Some(a), Some(b)) => Some(Box::new(a.merge(*b))),
                (a, b) => a.or(b),
            }),
            (Shape::Object(a), Shape::Object(b)) => Shape::Object(a.merge(b)),
            (Shape::Map(a), Shape::Map(b)) => Shape::Map(Box::new(a.merge(*b))),
            // Keyed by data once: a map from then on, its known keys forgotten.
            (Shape::Map(a), Shape::Object(o)) | (Shape::Object(o), Shape::Map(a)) => Shape::Map(
                Box::new(o.keys.into_iter().fold(*a, |m, k| m.merge(k.shape))),
            ),
            (Shape::Union(members), other) | (other, Shape::Union(members)) => {
                let mut out = members;
                add_member(&mut out, other);
                union(out)
            }
            (a, b) => union(vec![a, b]),
        }
    }

    /// This shape within `left` nodes, first come first kept (a merge may pass the bound).
    pub fn limit(self, left: &mut usize) -> Shape {
        if *left == 0 {
            return Shape::Any;
        }
        *left -= 1;
        match self {
            Shape::JsonStr(inner) => Shape::JsonStr(Box::new(inner.limit(left))),
            Shape::List(inner) => Shape::List(inner.map(|i| Box::new(i.limit(left)))),
            Shape::Map(inner) => Shape::Map(Box::new(inner.limit(left))),
            Shape::Object(object) => {
                let total = object.keys.len();
                let mut keys = Vec::new();
                for k in object.keys {
                    if *left == 0 {
                        break;
                    }
                    keys.push(Key {
                        shape: k.shape.limit(left),
                        ..k
                    });
                }
                let more = object.more || keys.len() < total;
                Shape::Object(Object { keys, more })
            }
            Shape::Union(members) => {
                Shape::Union(members.into_iter().map(|m| m.limit(left)).collect())
            }
            other => other,
        }
    }

    /// The shape as text, within [`MAX_SHOWN_CHARS`]: `{id: int, labels?: [str], …}`.
    pub fn show(&self) -> String {
        self.show_in(Lang::Python)
    }

    /// The shape as text in `lang`'s notation: Python's, or TypeScript's for JavaScript
    /// (`{id: number, labels?: string[], …}`).
    pub fn show_in(&self, lang: Lang) -> String {
        (1..=MAX_DEPTH + 2)
            .rev()
            .map(|depth| Shown(self, depth, lang).to_string())
            .find(|text| text.chars().count() <= MAX_SHOWN_CHARS)
            .unwrap_or_else(|| "{…}".to_string())
    }
}

impl Object {
    fn merge(self, other: Object) -> Object {
        let mut keys = self.keys;
        let mut more = self.more || other.more;
        for key in keys.iter_mut() {
            if !other.keys.iter().any(|k| k.name == key.name) {
                key.always = false;
            }
        }
        for theirs in other.keys {
            match keys.iter().position(|k| k.name == theirs.name) {
                Some(i) => {
                    let ours = &mut keys[i];
                    let shape = std::mem::replace(&mut ours.shape, Shape::Any);
                    ours.shape = shape.merge(theirs.shape);
                    ours.always &= theirs.always;
                }
                None if keys.len() < MAX_KEYS => keys.push(Key {
                    always: false,
                    ..theirs
                }),
                None => more = true,
            }
        }
        Object { keys, more }
    }
}

/// Whether an object key reads as a field name rather than as data: a letter or `_` first,
/// then letters, digits, `_` or `-`, at most 40 characters, and at most 3 digits (`line2`,
/// `sha256` are names; `user_8b1f42c9`, emails, paths and sentences are data).
fn is_field_name(key: &str) -> bool {
    let mut chars = key.chars();
    key.len() <= 40
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && key.chars().filter(char::is_ascii_digit).count() <= 3
}

/// Adds a kind to a union's members, merged into a member of its kind when there is one.
fn add_member(members: &mut Vec<Shape>, shape: Shape) {
    if let Shape::Union(more) = shape {
        more.into_iter().for_each(|m| add_member(members, m));
        return;
    }
    let same_kind = |m: &Shape| std::mem::discriminant(m) == std::mem::discriminant(&shape);
    match members.iter_mut().find(|m| same_kind(m)) {
        Some(m) => {
            let old = std::mem::replace(m, Shape::Any);
            *m = old.merge(shape);
        }
        None => members.push(shape),
    }
}

fn union(members: Vec<Shape>) -> Shape {
    let mut out = Vec::new();
    members.into_iter().for_each(|m| add_member(&mut out, m));
    if out.len() > MAX_UNION {
        Shape::Any
    } else if out.len() == 1 {
        out.remove(0)
    } else {
        Shape::Union(out)
    }
}

/// A shape shown down to a depth (below it objects are `{…}`).
/// A shape shown to a depth, in a language's notation.
struct Shown<'a>(&'a Shape, usize, Lang);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Shown(shape, depth, lang) = *self;
        let ts = lang == Lang::JavaScript;
        let str = if ts { "string" } else { "str" };
        match shape {
            Shape::Any => write!(f, "any"),
            Shape::Null => write!(f, "{}", if ts { "null" } else { "None" }),
            Shape::Bool => write!(f, "{}", if ts { "boolean" } else { "bool" }),
            Shape::Int if ts => write!(f, "number"),
            Shape::Int => write!(f, "int"),
            Shape::Float if ts => write!(f, "number"),
            Shape::Float => write!(f, "float"),
            Shape::Str => write!(f, "{str}"),
            Shape::JsonStr(inner) => write!(f, "{str} of JSON {}", Shown(inner, depth, lang)),
            Shape::List(None) => write!(f, "{}", if ts { "never[]" } else { "[]" }),
            Shape::List(Some(inner)) if ts => match **inner {
                Shape::Union(_) => write!(f, "({})[]", Shown(inner, depth, lang)),
                _ => write!(f, "{}[]", Shown(inner, depth, lang)),
            },
            Shape::List(Some(inner)) => write!(f, "[{}]", Shown(inner, depth, lang)),
            Shape::Map(inner) if ts => write!(f, "Record<string, {}>", Shown(inner, depth, lang)),
            Shape::Map(inner) => write!(f, "dict[str, {}]", Shown(inner, depth, lang)),
            Shape::Object(_) if depth == 0 => write!(f, "{{…}}"),
            Shape::Object(object) => {
                write!(f, "{{")?;
                for (i, key) in object.keys.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    let optional = if key.always { "" } else { "?" };
                    write!(
                        f,
                        "{}{optional}: {}",
                        key.name,
                        Shown(&key.shape, depth - 1, lang)
                    )?;
                }
                if object.more {
                    write!(f, "{}…", if object.keys.is_empty() { "" } else { ", " })?;
                }
                write!(f, "}}")
            }
            Shape::Union(members) => {
                for (i, m) in members.iter().enumerate() {
                    if i > 0 {
                        write!(f, " | ")?;
                    }
                    write!(f, "{}", Shown(m, depth, lang))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn learned(values: &[Value]) -> String {
        values
            .iter()
            .map(Shape::of)
            .reduce(Shape::merge)
            .unwrap()
            .show()
    }

    #[test]
    fn shapes_merge_across_results() {
        assert_eq!(
            learned(&[
                json!({"id": 1, "title": "a", "labels": ["x"], "closed_at": null}),
                json!({"id": 2, "title": "b", "labels": [], "closed_at": "2026-01-01", "draft": true}),
            ]),
            "{id: int, title: str, labels: [str], closed_at: None | str, draft?: bool}"
        );
        assert_eq!(learned(&[json!([1, 2.5]), json!([])]), "[float]");
        assert_eq!(learned(&[json!("plain text")]), "str");
        assert_eq!(
            learned(&[json!("{\"rows\": [{\"n\": 1}]}"), json!("[1]")]),
            "str of JSON {rows: [{n: int}]} | [int]"
        );
        assert_eq!(
            learned(&[json!(1), json!("a"), json!(true), json!(null), json!([])]),
            "any"
        );
    }

    #[test]
    fn shapes_show_in_typescript_for_javascript() {
        let shape = [
            json!({"id": 1, "labels": ["x"], "closed_at": null, "by": {"a@b.c": 1.5, "d@e.f": 2}}),
            json!({"id": 2, "labels": [], "closed_at": "2026-01-01", "mixed": [1, "a"], "raw": "[1]"}),
        ]
        .iter()
        .map(Shape::of)
        .reduce(Shape::merge)
        .unwrap();
        assert_eq!(
            shape.show_in(Lang::JavaScript),
            "{id: number, labels: string[], closed_at: null | string, by?: Record<string, number>, \
             mixed?: (number | string)[], raw?: string of JSON number[]}"
        );
        assert_eq!(Shape::List(None).show_in(Lang::JavaScript), "never[]");
        assert_eq!(shape.show(), shape.show_in(Lang::Python));
    }

    #[test]
    fn keys_that_are_data_are_never_kept() {
        assert_eq!(
            learned(&[
                json!({"alice@example.com": {"role": "admin"}, "bob@example.com": {"role": "dev"}}),
                json!({"f47ac10b-58cc-4372-a567-0e02b2c3d479": {"role": "ops", "since": 2020}}),
            ]),
            "dict[str, {role: str, since?: int}]"
        );
        assert_eq!(
            learned(&[
                json!({"line2": "x", "sha256": "y"}),
                json!({"user_8b1f42c9": "z"})
            ]),
            "dict[str, str]"
        );
    }

    #[test]
    fn shapes_are_bounded() {
        let wide: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let text = learned(&[Value::Object(wide)]);
        assert!(text.ends_with(", k023: int, …}"), "{text}");
        let mut deep = json!(1);
        for _ in 0..50 {
            deep = json!({ "a": deep });
        }
        assert_eq!(learned(&[deep]), "{a: {a: {a: {a: {a: any}}}}}");
        // 24 keys of 24 keys of 24 keys: bounded by nodes, not only by keys and depth.
        let level = |inner: Value| -> Value {
            Value::Object((0..24).map(|i| (format!("k{i}"), inner.clone())).collect())
        };
        let wide_and_deep = level(level(level(json!([1]))));
        let shape = Shape::of(&wide_and_deep);
        assert!(nodes(&shape) <= MAX_NODES, "{}", nodes(&shape));
        let merged = shape
            .clone()
            .merge(Shape::of(&level(json!("x"))))
            .limit(&mut { MAX_NODES });
        assert!(nodes(&merged) <= MAX_NODES, "{}", nodes(&merged));
        let long: serde_json::Map<String, Value> = (0..24)
            .map(|i| {
                (
                    format!("a_rather_long_key_name_{i}"),
                    json!({"inner_key": [1]}),
                )
            })
            .collect();
        let text = learned(&[Value::Object(long)]);
        assert!(text.chars().count() <= MAX_SHOWN_CHARS, "{text}");
    }

    /// Nodes charged against [`MAX_NODES`] (an `any` put where the budget ran out is free).
    fn nodes(shape: &Shape) -> usize {
        if *shape == Shape::Any {
            return 0;
        }
        1 + match shape {
            Shape::JsonStr(inner) | Shape::List(Some(inner)) | Shape::Map(inner) => nodes(inner),
            Shape::Object(o) => o.keys.iter().map(|k| nodes(&k.shape)).sum(),
            Shape::Union(members) => members.iter().map(nodes).sum(),
            _ => 0,
        }
    }
}
