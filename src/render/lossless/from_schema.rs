//! The facts of a tool's JSON Schema, for the lossless check ([`super::check_catalog`]): for
//! every path, the JSON types allowed there, whether the property is required, and the
//! enum/const values, found by walking the schema (`$ref`s resolved, recursion cut, `allOf`
//! members met, `anyOf`/`oneOf` branches pooled).
//!
//! Reads the schema as JSON Schema says, not as `lower` renders it: the check is worth only as
//! much as this side's independence from the renderer, so nothing here may call `lower` beyond
//! resolving a JSON pointer.

use super::{Fact, Facts, MAX_DEPTH, RECURSION, fact, record_value};
use crate::render::lower::resolve_pointer;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Keywords that make a schema say something about type.
const TYPEFUL: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "items",
    "additionalProperties",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "nullable",
];

/// Whether a schema object says something about type.
fn typeful(obj: &Map<String, Value>) -> bool {
    TYPEFUL.iter().any(|k| obj.contains_key(*k))
}

/// What holds where both `a` and `b` hold (allOf): where one allows any type, the other's
/// types; a property required by either is required. Types that contradict (a string that
/// is a number) are kept side by side: no value satisfies them, and no line can say so.
fn meet(mut a: Facts, b: Facts) -> Facts {
    // No types: a name another member's `required` lists, which says only that.
    let any_type = |f: &Fact| f.types.is_empty() || (f.types.len() == 1 && f.types.contains("any"));
    for (path, fb) in b {
        let Some(fa) = a.get_mut(&path) else {
            a.insert(path, fb);
            continue;
        };
        if any_type(fa) {
            if !fb.types.is_empty() {
                fa.types = fb.types;
            }
        } else if !any_type(&fb) {
            fa.types.extend(fb.types);
        }
        if fa.required.contains(&true) || fb.required.contains(&true) {
            fa.required = BTreeSet::from([true]);
        } else {
            fa.required.extend(fb.required);
        }
        fa.values.extend(fb.values);
    }
    a
}

pub fn schema_facts(schema: &Value) -> Facts {
    let mut facts = Facts::new();
    SchemaWalk {
        root: schema,
        stack: Vec::new(),
        member: false,
    }
    .walk(schema, &mut Vec::new(), &mut facts, 0, false);
    // A name `required` lists that no `properties` (of any allOf member) declares.
    facts.retain(|_, f| !f.types.is_empty());
    facts
}

struct SchemaWalk<'a> {
    root: &'a Value,
    stack: Vec<String>,
    /// The schema walked next is an allOf member (through `$ref`s): its `required` names
    /// count for the other members' properties too.
    member: bool,
}

impl<'a> SchemaWalk<'a> {
    /// Records facts of `schema` at `path`; with `cut`, only its own types (a recursion point).
    fn walk(
        &mut self,
        schema: &Value,
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        cut: bool,
    ) {
        let member = std::mem::take(&mut self.member);
        if depth > MAX_DEPTH {
            return;
        }
        let Some(obj) = schema.as_object().filter(|o| typeful(o)) else {
            fact(facts, path).types.insert("any");
            return;
        };
        if obj.get("nullable") == Some(&Value::Bool(true)) {
            fact(facts, path).types.insert("null");
        }
        if let Some(pointer) = obj.get("$ref").and_then(Value::as_str) {
            self.walk_ref(pointer, path, facts, depth, cut, member);
            return;
        }
        if let Some(members) = obj.get("allOf").and_then(Value::as_array) {
            self.walk_all_of(obj, members, path, facts, depth, cut);
            return;
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            for v in values {
                record_value(facts, path, v);
            }
            return;
        }
        if let Some(v) = obj.get("const") {
            record_value(facts, path, v);
            return;
        }
        if self.walk_union(obj, path, facts, depth, cut) {
            return;
        }
        self.walk_types(obj, path, facts, depth, cut, member);
    }

    /// A `$ref`: the target's facts at the same path, or a recursion point when the target is
    /// already being walked; a pointer that resolves to nothing allows any type.
    fn walk_ref(
        &mut self,
        pointer: &str,
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        cut: bool,
        member: bool,
    ) {
        let Some(target) = resolve_pointer(self.root, pointer) else {
            fact(facts, path).types.insert("any");
            return;
        };
        let again = self.stack.iter().any(|p| p == pointer);
        if again {
            fact(facts, path).values.insert(RECURSION.into());
        }
        self.stack.push(pointer.to_string());
        self.member = member;
        self.walk(target, path, facts, depth + 1, cut || again);
        self.stack.pop();
    }

    /// `allOf` (with the schema's other keywords as one more member): each member walked alone
    /// and the facts met, not pooled.
    fn walk_all_of(
        &mut self,
        obj: &Map<String, Value>,
        members: &[Value],
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        cut: bool,
    ) {
        let mut rest = obj.clone();
        rest.remove("allOf");
        // Recorded above: beside allOf it adds null to the members' types, no type of its own.
        rest.remove("nullable");
        // A member that constrains no type (`{}`) adds nothing to the others.
        let typed: Vec<Value> = members
            .iter()
            .chain(std::iter::once(&Value::Object(rest)))
            .filter(|m| m.as_object().is_some_and(typeful))
            .cloned()
            .collect();
        if typed.is_empty() {
            fact(facts, path).types.insert("any");
        }
        // Every member holds: each is walked alone and the facts are met, not pooled.
        let mut met: Option<Facts> = None;
        for m in &typed {
            let mut own = Facts::new();
            self.member = true;
            self.walk(m, path, &mut own, depth + 1, cut);
            met = Some(match met {
                None => own,
                Some(acc) => meet(acc, own),
            });
        }
        // A required name no member declares says nothing beyond this allOf.
        for (p, f) in met.unwrap_or_default() {
            if f.types.is_empty() {
                continue;
            }
            let into = facts.entry(p).or_default();
            into.types.extend(f.types);
            into.required.extend(f.required);
            into.values.extend(f.values);
        }
    }

    /// `anyOf` and `oneOf`: the facts of every typed branch at the same path. False when there
    /// is no typed branch (the schema's `type` says what it is).
    fn walk_union(
        &mut self,
        obj: &Map<String, Value>,
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        cut: bool,
    ) -> bool {
        let every: Vec<&Value> = ["anyOf", "oneOf"]
            .iter()
            .filter_map(|k| obj.get(*k).and_then(Value::as_array))
            .flatten()
            .collect();
        let branches: Vec<&Value> = every
            .iter()
            .copied()
            .filter(|b| b.as_object().is_some_and(typeful))
            .collect();
        if branches.is_empty() {
            return false;
        }
        // A branch that constrains no type (`{}`, `true`) lets any value through the union.
        if branches.len() < every.len() {
            fact(facts, path).types.insert("any");
            return true;
        }
        for b in branches {
            self.walk(b, path, facts, depth + 1, cut);
        }
        true
    }

    /// The declared types (or those `properties` and `items` imply), and below an object's
    /// properties or an array's items unless `cut`.
    fn walk_types(
        &mut self,
        obj: &Map<String, Value>,
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        cut: bool,
        member: bool,
    ) {
        let declared: Vec<&str> = match obj.get("type") {
            Some(Value::String(t)) => vec![t],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if obj.contains_key("properties") || obj.contains_key("additionalProperties") => {
                vec!["object"]
            }
            _ if obj.contains_key("items") => vec!["array"],
            _ => vec![],
        };
        if declared.is_empty() {
            fact(facts, path).types.insert("any");
        }
        for t in declared {
            let t = json_type(t);
            fact(facts, path).types.insert(t);
            if cut {
                continue;
            }
            match t {
                "object" => self.walk_object(obj, path, facts, depth, member),
                "array" => match obj.get("items") {
                    Some(Value::Array(items)) => {
                        for item in items {
                            self.child(item, path, "[]", facts, depth);
                        }
                    }
                    Some(item @ Value::Object(o)) if typeful(o) => {
                        self.child(item, path, "[]", facts, depth)
                    }
                    // Items of any type, as `list` says.
                    _ => self.child(&Value::Bool(true), path, "[]", facts, depth),
                },
                _ => {}
            }
        }
    }

    fn walk_object(
        &mut self,
        obj: &Map<String, Value>,
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        member: bool,
    ) {
        match obj
            .get("properties")
            .and_then(Value::as_object)
            .filter(|p| {
                !p.is_empty() || !matches!(obj.get("additionalProperties"), Some(Value::Object(_)))
            }) {
            Some(props) => {
                let required: Vec<&str> = obj
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                // Required here and declared by another allOf member: `meet` joins them.
                let undeclared = required
                    .iter()
                    .filter(|n| member && !props.contains_key(**n));
                for name in undeclared {
                    path.push(format!(".{name}"));
                    fact(facts, path).required.insert(true);
                    path.pop();
                }
                for (name, prop) in props {
                    let seg = format!(".{name}");
                    path.push(seg);
                    fact(facts, path)
                        .required
                        .insert(required.contains(&name.as_str()));
                    path.pop();
                    self.child(prop, path, &format!(".{name}"), facts, depth);
                }
            }
            None => match obj.get("additionalProperties") {
                Some(extra @ Value::Object(o)) if typeful(o) => {
                    self.child(extra, path, ".*", facts, depth);
                }
                // Values of any type, as `dict` says.
                _ => self.child(&Value::Bool(true), path, ".*", facts, depth),
            },
        }
    }

    fn child(
        &mut self,
        schema: &Value,
        path: &mut Vec<String>,
        seg: &str,
        facts: &mut Facts,
        depth: usize,
    ) {
        path.push(seg.to_string());
        self.walk(schema, path, facts, depth + 1, false);
        path.pop();
    }
}

fn json_type(t: &str) -> &'static str {
    match t {
        "string" => "string",
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "null" => "null",
        "array" => "array",
        "object" => "object",
        _ => "any",
    }
}
