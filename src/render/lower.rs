//! Lowering: a JSON Schema to the [`Ty`] the model reads.
//!
//! Owns the meaning we give to schema keywords (`type`, `enum`, `const`, `anyOf`/`oneOf`,
//! `allOf`, `$ref`/`$defs`, `nullable`, `items`, `properties`, `additionalProperties`). It keeps
//! every parameter name, its requiredness, its type and every enum/const value; the `lossless`
//! module checks that independently. Validation-only keywords (`minimum`, `format`, `pattern`…)
//! are left to `describe()`, to argument validation and to the rich description's notes
//! (`notes`).
//!
//! Must not panic on any JSON: unknown keywords are ignored, a cyclic `$ref` becomes a named
//! shape, and nesting beyond [`MAX_DEPTH`] degrades to `Any` with a note.

pub use super::schema::{is_nullable, required_of, resolve_pointer, type_branches, types_of};
use super::ty::{DefaultValue, Field, Params, Ty, python_value};
use serde_json::{Map, Value};

/// Deepest nesting rendered inline; past it a shape prints as `Any`, so a pathological schema
/// cannot produce an unbounded line.
pub const MAX_DEPTH: usize = 12;

/// Longest default printed literally; longer ones print as `= ...` (the value is in `describe()`).
pub const MAX_DEFAULT_CHARS: usize = 32;

/// Keywords that make an `anyOf`/`oneOf` branch describe a type rather than add a constraint.
pub const TYPE_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "items",
    "enum",
    "const",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
];

/// Named shapes found while lowering: recursive `$ref` targets, which cannot be written inline.
/// Shared across the tools of one catalog so that names are unique in one description.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Shapes {
    /// `(name, definition)` in the order they were found.
    pub definitions: Vec<(String, Ty)>,
    /// `(owner, pointer)` of each definition, so one tool's `#/$defs/Node` and another's get
    /// different names when they differ.
    keys: Vec<(String, String)>,
}

impl Shapes {
    fn name_for(&mut self, owner: &str, pointer: &str) -> String {
        if let Some(i) = self
            .keys
            .iter()
            .position(|k| k.0 == owner && k.1 == pointer)
        {
            return self.definitions[i].0.clone();
        }
        let hint = pointer.rsplit('/').next().unwrap_or("Shape");
        let base = shape_name(hint);
        let mut name = base.clone();
        let mut n = 2;
        while self.definitions.iter().any(|(taken, _)| *taken == name) || is_reserved(&name) {
            name = format!("{base}{n}");
            n += 1;
        }
        self.keys.push((owner.to_string(), pointer.to_string()));
        self.definitions.push((name.clone(), Ty::Any));
        name
    }

    fn forget(&mut self, name: &str) {
        if let Some(i) = self.definitions.iter().position(|(n, _)| n == name) {
            self.definitions.remove(i);
            self.keys.remove(i);
        }
    }

    fn define(&mut self, name: &str, ty: Ty) {
        if let Some(slot) = self.definitions.iter_mut().find(|(n, _)| n == name) {
            slot.1 = ty;
        }
    }
}

/// Type words of the signature language, which a shape may not be named.
pub fn is_reserved(name: &str) -> bool {
    matches!(
        name,
        "Any" | "str" | "int" | "float" | "bool" | "None" | "list" | "dict" | "Literal"
    )
}

/// `entities` → `Entity`, `file-info` → `FileInfo`: a readable PascalCase name from a hint.
pub fn shape_name(hint: &str) -> String {
    let singular = if let Some(stem) = hint.strip_suffix("ies") {
        format!("{stem}y")
    } else if hint.ends_with("ss") || hint.ends_with("us") || hint.len() < 4 {
        hint.to_string()
    } else if let Some(stem) = hint.strip_suffix('s') {
        stem.to_string()
    } else {
        hint.to_string()
    };
    let mut out = String::new();
    let mut upper = true;
    for c in singular.chars() {
        if c.is_ascii_alphanumeric() {
            if upper {
                out.extend(c.to_uppercase());
            } else {
                out.push(c);
            }
            upper = false;
        } else {
            upper = true;
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "Shape");
    }
    out
}

/// Lowers the schemas of one tool. `owner` names the tool, for naming its recursive shapes.
pub struct Lowerer<'a> {
    root: &'a Value,
    owner: &'a str,
    shapes: &'a mut Shapes,
    /// `$ref` pointers being expanded, outermost first: a repeat is a cycle.
    expanding: Vec<String>,
    /// Pointers found to be recursive while expanding.
    recursive: Vec<String>,
    /// Things worth telling the catalog's owner (unresolvable refs, depth cut).
    pub notes: Vec<String>,
}

impl<'a> Lowerer<'a> {
    pub fn new(root: &'a Value, owner: &'a str, shapes: &'a mut Shapes) -> Self {
        Lowerer {
            root,
            owner,
            shapes,
            expanding: Vec::new(),
            recursive: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// A tool's input schema as call parameters, required first.
    pub fn params(&mut self) -> Params {
        match self.lower(self.root, 0) {
            Ty::Object(mut fields) => {
                // Stable: required keep their order, then optional keep theirs.
                fields.sort_by_key(|f| !f.required);
                Params::Fields(fields)
            }
            Ty::Dict(value) => Params::Open(value),
            Ty::Any => Params::Open(None),
            other => Params::Open(Some(Box::new(other))),
        }
    }

    /// Any schema as a type.
    pub fn lower(&mut self, schema: &Value, depth: usize) -> Ty {
        if depth > MAX_DEPTH {
            self.note(format!(
                "nesting deeper than {MAX_DEPTH} levels is shown as Any"
            ));
            return Ty::Any;
        }
        let obj = match schema {
            Value::Object(obj) => obj,
            // `true`, `false` and anything malformed constrain nothing we can show.
            _ => return Ty::Any,
        };
        if let Some(pointer) = obj.get("$ref").and_then(Value::as_str) {
            return self.lower_ref(pointer, obj, depth);
        }
        if let Some(members) = obj.get("allOf").and_then(Value::as_array) {
            let merged = self.merge_all_of(obj, members);
            return self.lower(&Value::Object(merged), depth + 1);
        }

        let mut members = Vec::new();
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            // `[null]` is `None` alone (found by the property tests: it was shown as `Any`).
            if values.iter().any(|v| !v.is_null()) || values.is_empty() {
                members.push(literal(values.iter().filter(|v| !v.is_null()).cloned()));
            }
            if values.iter().any(Value::is_null) {
                members.push(Ty::Null);
            }
        } else if let Some(value) = obj.get("const") {
            members.push(if value.is_null() {
                Ty::Null
            } else {
                Ty::Literal(vec![value.clone()])
            });
        } else if let Some(branches) = type_branches(obj) {
            for branch in branches {
                members.push(self.lower(branch, depth + 1));
            }
        } else {
            for kind in types_of(obj) {
                members.push(self.lower_kind(kind, obj, depth));
            }
        }
        // `nullable` adds null to the types a schema names; one that names none allows any
        // value already (found by the property tests: `{"nullable": true}` was shown as `None`).
        if is_nullable(obj) && !members.is_empty() {
            members.push(Ty::Null);
        }
        union(members)
    }

    fn lower_kind(&mut self, kind: &str, obj: &Map<String, Value>, depth: usize) -> Ty {
        match kind {
            "string" => Ty::Str,
            "integer" => Ty::Int,
            "number" => Ty::Float,
            "boolean" => Ty::Bool,
            "null" => Ty::Null,
            "array" => match obj.get("items") {
                Some(Value::Array(tuple)) => {
                    let items = tuple.iter().map(|s| self.lower(s, depth + 1)).collect();
                    Ty::List(Some(Box::new(union(items))))
                }
                Some(items @ Value::Object(_)) => match self.lower(items, depth + 1) {
                    Ty::Any => Ty::List(None),
                    item => Ty::List(Some(Box::new(item))),
                },
                _ => Ty::List(None),
            },
            "object" => self.lower_object(obj, depth),
            _ => {
                self.note(format!("unknown type {kind:?} is shown as Any"));
                Ty::Any
            }
        }
    }

    fn lower_object(&mut self, obj: &Map<String, Value>, depth: usize) -> Ty {
        // `properties: {}` beside `additionalProperties` names no key: the values' type is
        // what there is to show (found by the property tests: it was shown as `{}`). Alone,
        // it is a tool without parameters.
        let Some(properties) = obj
            .get("properties")
            .and_then(Value::as_object)
            .filter(|p| {
                !p.is_empty() || !matches!(obj.get("additionalProperties"), Some(Value::Object(_)))
            })
        else {
            return match obj.get("additionalProperties") {
                Some(value @ Value::Object(_)) => match self.lower(value, depth + 1) {
                    Ty::Any => Ty::Dict(None),
                    value => Ty::Dict(Some(Box::new(value))),
                },
                _ => Ty::Dict(None),
            };
        };
        let required = required_of(obj);
        let fields = properties
            .iter()
            .map(|(name, schema)| {
                let resolved = self.resolve_shallow(schema);
                Field {
                    name: name.clone(),
                    required: required.contains(&name.as_str()),
                    ty: self.lower(schema, depth + 1),
                    default: resolved.and_then(|s| s.get("default")).map(short_default),
                }
            })
            .collect();
        Ty::Object(fields)
    }

    fn lower_ref(&mut self, pointer: &str, obj: &Map<String, Value>, depth: usize) -> Ty {
        if self.expanding.iter().any(|p| p == pointer) {
            if !self.recursive.iter().any(|p| p == pointer) {
                self.recursive.push(pointer.to_string());
            }
            let named = Ty::Named(self.shapes.name_for(self.owner, pointer));
            // Found by the property tests: `{"$ref": <itself>, "nullable": true}` lost its None.
            return match is_nullable(obj) {
                true => union(vec![named, Ty::Null]),
                false => named,
            };
        }
        let Some(target) = resolve_pointer(self.root, pointer) else {
            self.note(format!(
                "$ref {pointer:?} does not resolve and is shown as Any"
            ));
            return Ty::Any;
        };
        self.expanding.push(pointer.to_string());
        let mut ty = self.lower(target, depth + 1);
        self.expanding.pop();
        if self.recursive.iter().any(|p| p == pointer) {
            let name = self.shapes.name_for(self.owner, pointer);
            if matches!(&ty, Ty::Named(n) if *n == name) {
                // `A → B → A` with nothing in between: a cycle of aliases describes no shape.
                self.shapes.forget(&name);
                self.note(format!(
                    "$ref {pointer:?} only refers to itself and is shown as Any"
                ));
                return Ty::Any;
            }
            self.shapes.define(&name, ty);
            ty = Ty::Named(name);
        }
        // Siblings of `$ref` (2019-09+ allows them): only nullability changes the type.
        if is_nullable(obj) {
            ty = union(vec![ty, Ty::Null]);
        }
        ty
    }

    /// `allOf` as one schema: properties and required lists merged, the first type kept.
    fn merge_all_of(&mut self, obj: &Map<String, Value>, members: &[Value]) -> Map<String, Value> {
        let mut merged = obj.clone();
        merged.remove("allOf");
        let mut seen = Vec::new();
        self.merge_members(&mut merged, members, &mut seen);
        merged
    }

    fn merge_members(
        &mut self,
        merged: &mut Map<String, Value>,
        members: &[Value],
        seen: &mut Vec<String>,
    ) {
        for member in members {
            let Some(member) = self.resolve_all(member, seen) else {
                continue;
            };
            merge_into(merged, member);
            if let Some(nested) = member.get("allOf").and_then(Value::as_array) {
                self.merge_members(merged, nested, seen);
            }
        }
    }

    /// Follows `$ref`s to an object schema, at most once per pointer.
    fn resolve_all<'v>(
        &mut self,
        mut schema: &'v Value,
        seen: &mut Vec<String>,
    ) -> Option<&'v Map<String, Value>>
    where
        'a: 'v,
    {
        while let Some(pointer) = schema.get("$ref").and_then(Value::as_str) {
            if seen.iter().any(|p| p == pointer) {
                return None;
            }
            seen.push(pointer.to_string());
            schema = resolve_pointer(self.root, pointer)?;
        }
        schema.as_object()
    }

    fn resolve_shallow<'v>(&mut self, schema: &'v Value) -> Option<&'v Map<String, Value>>
    where
        'a: 'v,
    {
        self.resolve_all(schema, &mut Vec::new())
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

fn merge_into(merged: &mut Map<String, Value>, member: &Map<String, Value>) {
    for (key, value) in member {
        match (key.as_str(), merged.get_mut(key)) {
            ("properties", Some(Value::Object(props))) => {
                if let Value::Object(more) = value {
                    for (k, v) in more {
                        match props.get_mut(k) {
                            None => {
                                props.insert(k.clone(), v.clone());
                            }
                            // Declared by two members: it must satisfy both (found by the
                            // property tests: the first was kept, `{}` hid an object).
                            Some(kept) if kept != v => {
                                *kept = serde_json::json!({"allOf": [kept.clone(), v.clone()]});
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
            ("required", Some(Value::Array(req))) => {
                if let Value::Array(more) = value {
                    for r in more {
                        if !req.contains(r) {
                            req.push(r.clone());
                        }
                    }
                }
            }
            ("allOf" | "$ref" | "$defs" | "definitions", _) => {}
            (_, Some(_)) => {}
            (_, None) => {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
}

fn short_default(value: &Value) -> DefaultValue {
    if python_value(value).chars().count() <= MAX_DEFAULT_CHARS {
        DefaultValue::Value(value.clone())
    } else {
        DefaultValue::Elided
    }
}

fn literal(values: impl Iterator<Item = Value>) -> Ty {
    let values: Vec<Value> = values.collect();
    if values.is_empty() {
        Ty::Any
    } else {
        Ty::Literal(values)
    }
}

/// A union with nested unions flattened, duplicates dropped, `Any` absorbing everything and
/// `None` last.
pub fn union(members: Vec<Ty>) -> Ty {
    let mut flat: Vec<Ty> = Vec::new();
    let mut null = false;
    for member in members {
        let parts = match member {
            Ty::Union(parts) => parts,
            other => vec![other],
        };
        for part in parts {
            match part {
                Ty::Null => null = true,
                Ty::Any => return Ty::Any,
                part if !flat.contains(&part) => flat.push(part),
                _ => {}
            }
        }
    }
    if null {
        flat.push(Ty::Null);
    }
    match flat.len() {
        0 => Ty::Any,
        1 => flat.remove(0),
        _ => Ty::Union(flat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn lower(schema: Value) -> (String, Vec<(String, Ty)>) {
        let mut shapes = Shapes::default();
        let mut l = Lowerer::new(&schema, "t", &mut shapes);
        let ty = l.lower(&schema, 0);
        let defs = shapes
            .definitions
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        (ty.to_string(), defs)
    }

    #[test]
    fn scalars_enums_and_unions() {
        let cases = [
            (json!({"type": "string"}), "str"),
            (json!({"type": ["string", "null"]}), "str | None"),
            (json!({"type": "integer", "nullable": true}), "int | None"),
            (
                json!({"enum": ["a", "b", null]}),
                "Literal['a', 'b'] | None",
            ),
            (json!({"const": 3}), "Literal[3]"),
            (
                json!({"anyOf": [{"type": "number"}, {"type": "null"}]}),
                "float | None",
            ),
            (
                json!({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
                "str | list[str]",
            ),
            (json!({"type": ["boolean", "string"]}), "bool | str"),
            (json!({}), "Any"),
            (json!(true), "Any"),
            (json!({"type": "array"}), "list"),
            (json!({"type": "object"}), "dict"),
            (
                json!({"type": "object", "additionalProperties": {"type": "integer"}}),
                "dict[str, int]",
            ),
            (json!({"type": "frobnicate"}), "Any"),
            // Null added to no type at all is still any value, not only None.
            (json!({"nullable": true}), "Any"),
            (json!({"allOf": [{}], "nullable": true}), "Any"),
            (json!({"enum": [null]}), "None"),
            (
                json!({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}),
                "dict[str, str]",
            ),
        ];
        for (schema, want) in cases {
            assert_eq!(lower(schema.clone()).0, want, "{schema}");
        }
    }

    #[test]
    fn objects_keep_names_requiredness_and_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {
                "edits": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                    "required": ["oldText", "newText"]
                }},
                "dryRun": {"type": "boolean", "default": false},
                "url": {"type": "string", "default": "https://example.com/a/very/long/default/value"}
            },
            "required": ["edits"]
        });
        assert_eq!(
            lower(schema).0,
            "{edits: list[{oldText, newText}], dryRun?: bool = False, url? = ...}"
        );
    }

    #[test]
    fn refs_resolve_and_cycles_become_named_shapes() {
        let schema = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/TreeNodes"}, "meta": {"$ref": "#/$defs/Meta"}},
            "$defs": {
                "TreeNodes": {"type": "object", "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/TreeNodes"}}
                }, "required": ["value"]},
                "Meta": {"type": "object", "properties": {"k": {"type": "string"}}}
            }
        });
        let (ty, defs) = lower(schema);
        assert_eq!(ty, "{root?: TreeNode, meta?: {k?}}");
        assert_eq!(defs.len(), 1);
        assert_eq!(defs[0].0, "TreeNode");
        assert_eq!(
            defs[0].1.to_string(),
            "{value: int, children?: list[TreeNode]}"
        );
    }

    /// Found by the property tests: a recursive reference marked nullable lost its `None`.
    #[test]
    fn a_nullable_recursive_reference_keeps_its_none() {
        let schema = json!({"$ref": "#/$defs/D", "$defs": {"D": {"type": "object", "properties": {
            "next": {"$ref": "#/$defs/D", "nullable": true}}}}});
        let (ty, defs) = lower(schema);
        assert_eq!(ty, "D");
        assert_eq!(defs[0].1.to_string(), "{next?: D | None}");
    }

    #[test]
    fn self_reference_to_root_and_dangling_refs() {
        let (ty, defs) = lower(json!({"type": "object", "properties": {"next": {"$ref": "#"}}}));
        // The root is written out once; its self-reference is the named shape.
        assert_eq!(ty, "{next?: Shape}");
        assert_eq!(defs[0].1.to_string(), "{next?: Shape}");
        assert_eq!(lower(json!({"$ref": "#/$defs/Nope"})).0, "Any");
        assert_eq!(
            lower(json!({"$ref": "https://example.com/s.json"})).0,
            "Any"
        );
    }

    #[test]
    fn all_of_merges_objects() {
        let schema = json!({
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"$ref": "#/$defs/B"}
            ],
            "$defs": {"B": {"properties": {"b": {"type": "integer"}}}}
        });
        assert_eq!(lower(schema).0, "{a, b?: int}");
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let mut schema = json!({"type": "string"});
        for _ in 0..50 {
            schema = json!({"type": "array", "items": schema});
        }
        let (ty, _) = lower(schema);
        assert!(ty.len() < 200, "{ty}");
        assert!(ty.ends_with("list]]]]]]]]]]]]"), "{ty}");
    }

    #[test]
    fn shape_names() {
        assert_eq!(shape_name("entities"), "Entity");
        assert_eq!(shape_name("edits"), "Edit");
        assert_eq!(shape_name("file-info"), "FileInfo");
        assert_eq!(shape_name("status"), "Status");
        assert_eq!(shape_name("Node"), "Node");
        assert_eq!(shape_name("123"), "Shape123");
    }
}
