//! The lossless check: reads a rendered description back (in Python or in JavaScript, the
//! language a parameter of the parser) and compares what each line says with the tool's source
//! schema.
//!
//! Deliberately independent of `lower`: both sides are reduced to *facts* — for every path
//! (`.edits[].oldText`), the JSON types allowed there, whether the property is required, and
//! the enum/const values — and the two fact sets must be equal. A parameter lost, made
//! optional, retyped or missing an enum value anywhere is a difference. Validation-only keywords
//! (`minimum`, `format`, …) and descriptions are not facts: `describe()` carries them (and the
//! rich description's bracketed notes, which read back as part of the summary).
//!
//! The schema's side is [`from_schema`]; reading the description back, the line's side
//! ([`ty_facts`]) and the comparison are here.

mod from_schema;

pub use from_schema::schema_facts;

use super::description::{SECTION_PREFIX_END, TYPES_HEADER, code_name};
use super::ty::{Lang, Params, ParseError, Signature, Ty, parse_definition_in, parse_signature_in};
use crate::catalog::Catalog;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Deepest path compared; matches the renderer's own bound with room to spare.
const MAX_DEPTH: usize = 64;

/// The fact recorded where a shape refers back to itself, so that a recursive reference and a
/// plain `dict` at that point differ.
const RECURSION: &str = "<recursion>";

/// What a description says, read back.
#[derive(Debug, Default)]
pub struct ParsedDescription {
    pub definitions: HashMap<String, Ty>,
    /// By the name code calls the tool by.
    pub signatures: BTreeMap<String, Signature>,
}

/// Reads the catalog part of a Python `exec_code` description (everything after the first
/// `## `).
pub fn parse_description(text: &str) -> Result<ParsedDescription, ParseError> {
    parse_description_in(text, Lang::Python)
}

/// Reads the catalog part of an `exec_code` description in `lang`.
pub fn parse_description_in(text: &str, lang: Lang) -> Result<ParsedDescription, ParseError> {
    let mut parsed = ParsedDescription::default();
    let mut section: Option<&str> = None;
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("## ") {
            section = Some(header);
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        match section {
            None => {}
            Some(header) if format!("## {header}") == TYPES_HEADER => {
                let (name, ty) = parse_definition_in(line, lang)?;
                parsed.definitions.insert(name, ty);
            }
            Some(header) => {
                let mut sig = parse_signature_in(line, lang)?;
                if header.ends_with(SECTION_PREFIX_END) {
                    sig.name.insert_str(0, header);
                }
                parsed.signatures.insert(sig.name.clone(), sig);
            }
        }
    }
    Ok(parsed)
}

/// Checks every PTC tool of a catalog against its Python description; returns the
/// differences, none when the description is lossless.
pub fn check_catalog(catalog: &Catalog, description: &str) -> Vec<String> {
    check_catalog_in(catalog, description, Lang::Python)
}

/// [`check_catalog`] for a description in `lang`.
pub fn check_catalog_in(catalog: &Catalog, description: &str, lang: Lang) -> Vec<String> {
    let parsed = match parse_description_in(description, lang) {
        Ok(parsed) => parsed,
        Err(e) => return vec![format!("the description does not parse: {e}")],
    };
    let mut problems = Vec::new();
    let mut expected = BTreeSet::new();
    for tool in catalog.ptc() {
        let name = code_name(tool, lang);
        let Some(sig) = parsed.signatures.get(&name) else {
            problems.push(format!("{}: no signature line", tool.name));
            continue;
        };
        let found = params_facts(&sig.params, &parsed.definitions);
        let want = input_facts(&tool.input_schema);
        problems.extend(compare(&tool.name, "input", &want, &found));
        match (&tool.output_schema, &sig.returns) {
            (Some(schema), Some(ret)) => {
                let found = ty_facts(ret, &parsed.definitions);
                problems.extend(compare(&tool.name, "output", &schema_facts(schema), &found));
            }
            (Some(_), None) => problems.push(format!("{}: output schema not shown", tool.name)),
            (None, Some(_)) => problems.push(format!("{}: shows an output it has not", tool.name)),
            (None, None) => {}
        }
        expected.insert(name);
    }
    for name in parsed.signatures.keys() {
        if !expected.contains(name.as_str()) {
            problems.push(format!("{name}: a line for a tool code cannot call"));
        }
    }
    problems
}

/// The facts of a tool's input schema. A call's arguments are always an object (MCP's
/// `arguments`), so a schema that allows anything at its root (`{}`, only a `$schema`: real
/// servers send it) allows an object of any keys, which is what the line says.
fn input_facts(schema: &Value) -> Facts {
    let mut facts = schema_facts(schema);
    if let Some(root) = facts.get_mut(&Vec::new())
        && only_any(root)
    {
        root.types = BTreeSet::from(["object"]);
    }
    facts
}

/// Facts at one path.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fact {
    pub types: BTreeSet<&'static str>,
    pub required: BTreeSet<bool>,
    pub values: BTreeSet<String>,
}

pub type Facts = BTreeMap<Vec<String>, Fact>;

fn compare(tool: &str, side: &str, want: &Facts, found: &Facts) -> Vec<String> {
    let (want, found) = (&collapse_any(want), &collapse_any(found));
    let mut out = Vec::new();
    for path in want.keys().chain(found.keys()).collect::<BTreeSet<_>>() {
        // Items or values of any type say nothing: `list` and `dict` are `list[Any]` and
        // `dict[str, Any]`, whether the schema says `{}` or a `$ref` to a schema that allows all.
        let element = matches!(path.last().map(String::as_str), Some("[]" | ".*"));
        let says = |fact: &Fact| !(element && only_any(fact));
        let (w, f) = (
            want.get(path).filter(|x| says(x)),
            found.get(path).filter(|x| says(x)),
        );
        if w != f {
            out.push(format!(
                "{tool} {side} at {:?}: schema says {w:?}, line says {f:?}",
                path.concat()
            ));
        }
    }
    out
}

/// The facts with every union that holds `any` made just `any`: a value that may be anything
/// may be anything, whatever else the union lists (its values and the fields below it say
/// nothing more). What a property's `required` says stays.
fn collapse_any(facts: &Facts) -> Facts {
    let mut out = Facts::new();
    let mut anything: Vec<&Vec<String>> = Vec::new();
    // Sorted, so a path comes before the paths below it.
    for (path, fact) in facts {
        if anything
            .iter()
            .any(|p| path.len() > p.len() && path.starts_with(p))
        {
            continue;
        }
        let mut fact = fact.clone();
        if fact.types.contains("any") {
            fact.types = BTreeSet::from(["any"]);
            fact.values.clear();
            anything.push(path);
        }
        out.insert(path.clone(), fact);
    }
    out
}

/// Any type, nothing more: what `{}` says.
fn only_any(fact: &Fact) -> bool {
    fact.types.len() == 1
        && fact.types.contains("any")
        && fact.required.is_empty()
        && fact.values.is_empty()
}

/// The facts at `path`, created empty on first use.
fn fact<'f>(facts: &'f mut Facts, path: &[String]) -> &'f mut Fact {
    facts.entry(path.to_vec()).or_default()
}

fn record_value(facts: &mut Facts, path: &[String], value: &Value) {
    let fact = facts.entry(path.to_vec()).or_default();
    fact.types.insert(value_type(value));
    if !value.is_null() {
        fact.values.insert(value.to_string());
    }
}

fn value_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------
// Facts of a parsed line

fn params_facts(params: &Params, defs: &HashMap<String, Ty>) -> Facts {
    match params {
        Params::Fields(fields) => ty_facts(&Ty::Object(fields.clone()), defs),
        Params::Open(None) => ty_facts(&Ty::Dict(None), defs),
        Params::Open(Some(ty)) => {
            // `**kwargs: T`: T is the type of every argument when T is not itself an object.
            match ty.as_ref() {
                Ty::Object(_) | Ty::Union(_) | Ty::Named(_) => ty_facts(ty, defs),
                other => ty_facts(&Ty::Dict(Some(Box::new(other.clone()))), defs),
            }
        }
    }
}

pub fn ty_facts(ty: &Ty, defs: &HashMap<String, Ty>) -> Facts {
    let mut facts = Facts::new();
    TyWalk {
        defs,
        stack: Vec::new(),
    }
    .walk(ty, &mut Vec::new(), &mut facts, 0, false);
    facts
}

struct TyWalk<'a> {
    defs: &'a HashMap<String, Ty>,
    stack: Vec<String>,
}

impl TyWalk<'_> {
    fn walk(
        &mut self,
        ty: &Ty,
        path: &mut Vec<String>,
        facts: &mut Facts,
        depth: usize,
        cut: bool,
    ) {
        if depth > MAX_DEPTH {
            return;
        }
        let add = |t: &'static str, facts: &mut Facts| {
            fact(facts, path).types.insert(t);
        };
        match ty {
            Ty::Any => add("any", facts),
            Ty::Str => add("string", facts),
            Ty::Int => add("integer", facts),
            Ty::Float => add("number", facts),
            Ty::Bool => add("boolean", facts),
            Ty::Null => add("null", facts),
            // `list` and `dict` hold items of any type: said, so that a union with a typed
            // `list[str]` says any too (found by the property tests).
            Ty::List(item) => {
                add("array", facts);
                if !cut {
                    self.child(
                        item.as_deref().unwrap_or(&Ty::Any),
                        path,
                        "[]",
                        facts,
                        depth,
                    );
                }
            }
            Ty::Dict(value) => {
                add("object", facts);
                if !cut {
                    self.child(
                        value.as_deref().unwrap_or(&Ty::Any),
                        path,
                        ".*",
                        facts,
                        depth,
                    );
                }
            }
            Ty::Object(fields) => {
                add("object", facts);
                if !cut {
                    for f in fields {
                        let seg = format!(".{}", f.name);
                        path.push(seg.clone());
                        fact(facts, path).required.insert(f.required);
                        path.pop();
                        self.child(&f.ty, path, &seg, facts, depth);
                    }
                }
            }
            Ty::Literal(values) => {
                for v in values {
                    record_value(facts, path, v);
                }
            }
            Ty::Union(members) => {
                for m in members {
                    self.walk(m, path, facts, depth + 1, cut);
                }
            }
            Ty::Named(name) => match self.defs.get(name) {
                None => add("undefined shape", facts),
                Some(def) => {
                    let again = self.stack.iter().any(|n| n == name);
                    if again {
                        fact(facts, path).values.insert(RECURSION.into());
                    }
                    self.stack.push(name.clone());
                    self.walk(def, path, facts, depth + 1, cut || again);
                    self.stack.pop();
                }
            },
        }
    }

    fn child(
        &mut self,
        ty: &Ty,
        path: &mut Vec<String>,
        seg: &str,
        facts: &mut Facts,
        depth: usize,
    ) {
        path.push(seg.to_string());
        self.walk(ty, path, facts, depth + 1, false);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::ty::parse_ty;
    use serde_json::json;

    fn facts_equal(schema: Value, line_ty: &str) -> bool {
        let ty = parse_ty(line_ty).unwrap();
        schema_facts(&schema) == ty_facts(&ty, &HashMap::new())
    }

    #[test]
    fn a_lost_anything_is_a_difference() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "enum": ["x", "y"]},
            "b": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "integer"}}, "required": ["c"]}}
        }, "required": ["a"]});
        assert!(facts_equal(
            schema.clone(),
            "{a: Literal['x', 'y'], b?: list[{c: int}]}"
        ));
        // Each of these loses or changes one fact.
        for wrong in [
            "{a: Literal['x'], b?: list[{c: int}]}",
            "{a?: Literal['x', 'y'], b?: list[{c: int}]}",
            "{a: Literal['x', 'y'], b?: list[{c?: int}]}",
            "{a: Literal['x', 'y'], b?: list[{c: float}]}",
            "{a: Literal['x', 'y'], b?: list[dict]}",
            "{a: Literal['x', 'y'], b?: list}",
            "{a: Literal['x', 'y']}",
            "{a: str, b?: list[{c: int}]}",
            "{a: Literal['x', 'y'], b?: list[{c: int}], d?: str}",
        ] {
            assert!(!facts_equal(schema.clone(), wrong), "{wrong} should differ");
        }
    }

    /// Found by `props::generated_schemas_render_read_back_and_are_lossless`: a union with a
    /// branch that constrains nothing (`{}`) accepts anything, as `Any` says; the check took
    /// only the typed branches and called the rendering lossy.
    #[test]
    fn a_union_with_an_unconstrained_branch_is_any() {
        let schema = json!({"type": "object", "properties": {
            "a": {"anyOf": [{"anyOf": [{"type": "string"}, {}]}]},
            "b": {"oneOf": [{"type": "integer"}, true]},
        }});
        assert!(facts_equal(schema.clone(), "{a?: Any, b?: Any}"));
        assert!(!facts_equal(schema, "{a?: str, b?: int}"));
        // Also found by it: values of a `$ref` to a schema that allows all are a plain `dict`.
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "object", "additionalProperties": {"$ref": "#/$defs/D"}},
        }, "$defs": {"D": {"oneOf": [{}]}}});
        let catalog_line = parse_ty("{a?: dict}").unwrap();
        let problems = compare(
            "t",
            "input",
            &schema_facts(&schema),
            &ty_facts(&catalog_line, &HashMap::new()),
        );
        assert_eq!(problems, Vec::<String>::new());
        let wrong = parse_ty("{a?: dict[str, int]}").unwrap();
        assert_ne!(
            compare(
                "t",
                "input",
                &schema_facts(&schema),
                &ty_facts(&wrong, &HashMap::new())
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn cycles_are_compared_up_to_the_recursion_point() {
        let schema = json!({"$ref": "#/$defs/N", "$defs": {"N": {"type": "object",
            "properties": {"next": {"$ref": "#/$defs/N"}, "v": {"type": "integer"}}}}});
        let defs: HashMap<String, Ty> =
            [("N".to_string(), parse_ty("{next?: N, v?: int}").unwrap())].into();
        assert_eq!(
            schema_facts(&schema),
            ty_facts(&Ty::Named("N".into()), &defs)
        );
        let wrong: HashMap<String, Ty> =
            [("N".to_string(), parse_ty("{next?: N, v?: str}").unwrap())].into();
        assert_ne!(
            schema_facts(&schema),
            ty_facts(&Ty::Named("N".into()), &wrong)
        );
    }
}
