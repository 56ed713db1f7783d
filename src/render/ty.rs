//! The compact type language of signature lines: its AST and its printer, in Python
//! (`read(path, limit?: int) -> {text}`) or TypeScript (`read({path, limit?: int}): {text}`),
//! one AST and one printer with the language a parameter. Both leave the commonest type
//! unwritten (a bare name is a string); TypeScript writes a tool's one object of named
//! arguments as its shape, without the parameter's name, and its result without the
//! `Promise<…>` every tool's has (the preamble says so): every token is paid on every turn, and
//! the JavaScript form must cost no more than the Python one within 10%.
//! The parser, which reads what we print back in either language, is in `parse`.
//!
//! Lowering (schema → [`Ty`]) lives in `lower`; this module knows nothing of JSON Schema. The
//! parser exists so that what we print can be read back and checked against the source schema
//! (`lossless`): a line the parser cannot read is a bug in the printer.

pub use super::parse::{
    ParseError, parse_definition, parse_definition_in, parse_signature, parse_signature_in,
    parse_ty, parse_ty_in,
};
use crate::catalog::names::is_identifier;
pub use crate::config::Lang;
use serde_json::Value;
use std::fmt::{self, Write};

/// A type as the model reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// No constraint at all: `Any`.
    Any,
    Str,
    Int,
    Float,
    Bool,
    /// JSON null, printed `None`.
    Null,
    /// `list` or `list[T]`.
    List(Option<Box<Ty>>),
    /// `dict` or `dict[str, T]`.
    Dict(Option<Box<Ty>>),
    /// An object with known fields: `{a: str, b?: int}`.
    Object(Vec<Field>),
    /// `Literal['a', 1, True, None]`: enum and const values.
    Literal(Vec<Value>),
    /// `A | B`: anyOf, oneOf, type arrays, nullable.
    Union(Vec<Ty>),
    /// A shape named once in the description (`Entity`), for shared or recursive shapes.
    Named(String),
}

/// One parameter of a signature, or one field of an object shape. A field of type `str` prints
/// bare (`owner`, `sha?`): strings are most parameters, and `: str` costs two tokens each.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub required: bool,
    pub ty: Ty,
    /// The schema's `default`, when it gives one and it is short enough to print; a longer one
    /// prints as `...` and parses back as `DefaultValue::Elided`.
    pub default: Option<DefaultValue>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DefaultValue {
    Value(Value),
    Elided,
}

/// A parsed signature line: `name(params) -> ret — summary`.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub name: String,
    pub params: Params,
    pub returns: Option<Ty>,
    pub summary: String,
}

/// What a tool takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    /// Named parameters, required first.
    Fields(Vec<Field>),
    /// The schema does not list properties: `(**kwargs)` or `(**kwargs: T)`.
    Open(Option<Box<Ty>>),
}

/// Separates the call from the summary on a Python signature line.
pub const SUMMARY_SEPARATOR: &str = " — ";

/// Separates the call from the summary on a TypeScript signature line: the summary is a comment.
pub const TS_SUMMARY_SEPARATOR: &str = " // ";

/// Separates the call from the summary on a signature line in `lang`.
pub fn summary_separator(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => SUMMARY_SEPARATOR,
        Lang::JavaScript => TS_SUMMARY_SEPARATOR,
    }
}

// ---------------------------------------------------------------------------------------------
// Printing: one printer, the language a parameter. `Display` is the Python form.

/// A type, field, parameter list or signature as printed in one language.
pub struct Printed<'a, T> {
    item: &'a T,
    lang: Lang,
}

/// What the printer prints in either language.
pub trait Print: Sized {
    fn print(&self, f: &mut fmt::Formatter<'_>, lang: Lang) -> fmt::Result;

    /// This, printed in `lang` (`sig.in_lang(Lang::JavaScript).to_string()`).
    fn in_lang(&self, lang: Lang) -> Printed<'_, Self> {
        Printed { item: self, lang }
    }
}

impl<T: Print> fmt::Display for Printed<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.item.print(f, self.lang)
    }
}

macro_rules! display_as_python {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.print(f, Lang::Python)
            }
        }
    )*};
}
display_as_python!(Ty, Field, Params, Signature);

impl Print for Ty {
    fn print(&self, f: &mut fmt::Formatter<'_>, lang: Lang) -> fmt::Result {
        let py = lang == Lang::Python;
        match self {
            Ty::Any => f.write_str(if py { "Any" } else { "any" }),
            Ty::Str => f.write_str(if py { "str" } else { "string" }),
            // TypeScript has no integer type; the preamble says what `int` is.
            Ty::Int => f.write_str("int"),
            Ty::Float => f.write_str(if py { "float" } else { "number" }),
            Ty::Bool => f.write_str(if py { "bool" } else { "boolean" }),
            Ty::Null => f.write_str(if py { "None" } else { "null" }),
            Ty::List(None) => f.write_str(if py { "list" } else { "any[]" }),
            Ty::List(Some(item)) if py => write!(f, "list[{item}]"),
            Ty::List(Some(item)) => {
                if item.is_ts_union() {
                    write!(f, "({})[]", item.in_lang(lang))
                } else {
                    write!(f, "{}[]", item.in_lang(lang))
                }
            }
            Ty::Dict(None) => f.write_str(if py { "dict" } else { "object" }),
            Ty::Dict(Some(value)) if py => write!(f, "dict[str, {value}]"),
            Ty::Dict(Some(value)) => write!(f, "Record<string, {}>", value.in_lang(lang)),
            Ty::Object(fields) => write_object(f, fields, lang),
            Ty::Literal(values) => {
                // Python: `Literal['a', 1]`; TypeScript: a union of literal types, `"a" | 1`.
                let (open, between, close) = if py {
                    ("Literal[", ", ", "]")
                } else {
                    ("", " | ", "")
                };
                f.write_str(open)?;
                for (i, value) in values.iter().enumerate() {
                    if i > 0 {
                        f.write_str(between)?;
                    }
                    write_value(f, value, lang)?;
                }
                f.write_str(close)
            }
            Ty::Union(members) => {
                for (i, member) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" | ")?;
                    }
                    member.print(f, lang)?;
                }
                Ok(())
            }
            Ty::Named(name) => f.write_str(name),
        }
    }
}

impl Ty {
    /// Whether TypeScript prints this with a ` | ` at its top (a list of it needs brackets).
    fn is_ts_union(&self) -> bool {
        match self {
            Ty::Union(_) => true,
            Ty::Literal(values) => values.len() > 1,
            _ => false,
        }
    }
}

impl Print for Field {
    fn print(&self, f: &mut fmt::Formatter<'_>, lang: Lang) -> fmt::Result {
        write_name(f, &self.name, lang)?;
        if !self.required {
            f.write_char('?')?;
        }
        // The commonest type goes unwritten: a bare name is a `str` (a `string`).
        if self.ty != Ty::Str {
            write!(f, ": {}", self.ty.in_lang(lang))?;
        }
        match &self.default {
            None => Ok(()),
            Some(DefaultValue::Elided) => f.write_str(" = ..."),
            Some(DefaultValue::Value(v)) => {
                f.write_str(" = ")?;
                write_value(f, v, lang)
            }
        }
    }
}

impl Print for Params {
    fn print(&self, f: &mut fmt::Formatter<'_>, lang: Lang) -> fmt::Result {
        match (self, lang) {
            (Params::Fields(fields), Lang::Python) => write_fields(f, fields, lang),
            (Params::Open(None), Lang::Python) => f.write_str("**kwargs"),
            (Params::Open(Some(ty)), Lang::Python) => write!(f, "**kwargs: {ty}"),
            // TypeScript: the one object of named arguments, written as its shape (`f({path})`).
            (Params::Fields(fields), _) if fields.is_empty() => Ok(()),
            (Params::Fields(fields), _) => write_object(f, fields, lang),
            (Params::Open(None), _) => Ty::Dict(None).print(f, lang),
            // `**kwargs: T` is every argument a T, unless T is itself the object's shape.
            (Params::Open(Some(ty)), _) => match ty.as_ref() {
                Ty::Object(_) | Ty::Union(_) | Ty::Named(_) => ty.print(f, lang),
                other => Ty::Dict(Some(Box::new(other.clone()))).print(f, lang),
            },
        }
    }
}

impl Print for Signature {
    fn print(&self, f: &mut fmt::Formatter<'_>, lang: Lang) -> fmt::Result {
        write!(f, "{}({})", self.name, self.params.in_lang(lang))?;
        match (&self.returns, lang) {
            (None, _) => {}
            (Some(ret), Lang::Python) => write!(f, " -> {ret}")?,
            // The preamble says every tool is async: `Promise<T>` would say it on every line.
            (Some(ret), _) => write!(f, ": {}", ret.in_lang(lang))?,
        }
        if !self.summary.is_empty() {
            write!(f, "{}{}", summary_separator(lang), self.summary)?;
        }
        Ok(())
    }
}

/// A named shape's definition line: `Name = T`, in TypeScript `type Name = T`.
pub fn definition(name: &str, ty: &Ty, lang: Lang) -> String {
    match lang {
        Lang::Python => format!("{name} = {ty}"),
        Lang::JavaScript => format!("type {name} = {}", ty.in_lang(lang)),
    }
}

/// `{a, b?: int}`: an object shape (in TypeScript, a tool's parameters too).
fn write_object(f: &mut fmt::Formatter<'_>, fields: &[Field], lang: Lang) -> fmt::Result {
    f.write_char('{')?;
    write_fields(f, fields, lang)?;
    f.write_char('}')
}

fn write_fields(f: &mut fmt::Formatter<'_>, fields: &[Field], lang: Lang) -> fmt::Result {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        field.print(f, lang)?;
    }
    Ok(())
}

/// Identifiers print bare; anything else (`x-api-key`, `$ref`) prints as a string of the
/// language (TypeScript allows a reserved word as a property name, as Python allows a keyword
/// as a dict key).
fn write_name(f: &mut impl Write, name: &str, lang: Lang) -> fmt::Result {
    if is_identifier(name) {
        f.write_str(name)
    } else {
        write_value(f, &Value::String(name.to_string()), lang)
    }
}

/// A JSON value as a literal of `lang`.
fn write_value(f: &mut impl Write, value: &Value, lang: Lang) -> fmt::Result {
    match lang {
        Lang::Python => write_python_value(f, value),
        // JSON is JavaScript (since ES2019 even U+2028 in a string).
        Lang::JavaScript => f.write_str(&value.to_string()),
    }
}

/// A JSON value as a Python literal: `'a'`, `True`, `None`, `[1, 2]`, `{'k': 'v'}`.
pub fn write_python_value(f: &mut impl Write, value: &Value) -> fmt::Result {
    match value {
        Value::Null => f.write_str("None"),
        Value::Bool(true) => f.write_str("True"),
        Value::Bool(false) => f.write_str("False"),
        Value::Number(n) => write!(f, "{n}"),
        Value::String(s) => write_python_str(f, s),
        Value::Array(items) => {
            f.write_char('[')?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_python_value(f, item)?;
            }
            f.write_char(']')
        }
        Value::Object(map) => {
            f.write_char('{')?;
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_python_str(f, k)?;
                f.write_str(": ")?;
                write_python_value(f, v)?;
            }
            f.write_char('}')
        }
    }
}

pub fn python_value(value: &Value) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_python_value(&mut out, value);
    out
}

fn write_python_str(f: &mut impl Write, s: &str) -> fmt::Result {
    f.write_char('\'')?;
    for c in s.chars() {
        match c {
            '\'' => f.write_str("\\'")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if c.is_control() => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('\'')
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn field(name: &str, required: bool, ty: Ty) -> Field {
        Field {
            name: name.into(),
            required,
            ty,
            default: None,
        }
    }

    #[test]
    fn prints_and_parses_every_form() {
        let sig = Signature {
            name: "fs__edit_file".into(),
            params: Params::Fields(vec![
                field("path", true, Ty::Str),
                field(
                    "edits",
                    true,
                    Ty::List(Some(Box::new(Ty::Object(vec![
                        field("oldText", true, Ty::Str),
                        field("newText", true, Ty::Str),
                    ])))),
                ),
                Field {
                    default: Some(DefaultValue::Value(json!(false))),
                    ..field("dryRun", false, Ty::Bool)
                },
                field(
                    "x-mode",
                    false,
                    Ty::Union(vec![
                        Ty::Literal(vec![json!("a'b"), json!(1), json!(null)]),
                        Ty::Null,
                    ]),
                ),
                field("meta", false, Ty::Dict(Some(Box::new(Ty::Int)))),
                Field {
                    default: Some(DefaultValue::Elided),
                    ..field("node", false, Ty::Named("Node".into()))
                },
            ]),
            returns: Some(Ty::Object(vec![field("content", true, Ty::Str)])),
            summary: "Edit a file.".into(),
        };
        let line = sig.to_string();
        assert_eq!(
            line,
            "fs__edit_file(path, edits: list[{oldText, newText}], \
             dryRun?: bool = False, 'x-mode'?: Literal['a\\'b', 1, None] | None, \
             meta?: dict[str, int], node?: Node = ...) -> {content} — Edit a file."
        );
        assert_eq!(parse_signature(&line).unwrap(), sig);
        // The same signature in TypeScript. It reads back as the same signature but for the
        // `null` among the literals, which TypeScript has as the type `null` (the same facts).
        let ts = sig.in_lang(Lang::JavaScript).to_string();
        assert_eq!(
            ts,
            "fs__edit_file({path, edits: {oldText, newText}[], dryRun?: boolean = false, \
             \"x-mode\"?: \"a'b\" | 1 | null | null, meta?: Record<string, int>, \
             node?: Node = ...}): {content} // Edit a file."
        );
        let back = parse_signature_in(&ts, Lang::JavaScript).unwrap();
        let Params::Fields(fields) = &back.params else {
            panic!("{back:?}")
        };
        assert_eq!(
            fields[3].ty,
            Ty::Union(vec![
                Ty::Literal(vec![json!("a'b"), json!(1)]),
                Ty::Null,
                Ty::Null
            ])
        );
        assert_eq!(back.in_lang(Lang::JavaScript).to_string(), ts);
    }

    #[test]
    fn typescript_forms_round_trip() {
        for line in [
            "f()",
            "f(object)",
            "f(Record<string, int>)",
            "f({a} | {b: int})",
            "f({a?}): any[]",
            "f({a: (\"x\" | \"y\")[], b?: string[][] | null, c?: Shape}) // Sum.",
            "f({\"$ref\": number = 1.5, e?: [1,2] | {\"k\":true}, t?: true | false})",
            "f(): object // Just // that.",
            "f({limit?: int = 10, q? = \"x\"}): Record<string, boolean | null>",
        ] {
            let sig = parse_signature_in(line, Lang::JavaScript).unwrap();
            assert_eq!(sig.in_lang(Lang::JavaScript).to_string(), line);
        }
        assert_eq!(
            definition(
                "Node",
                &parse_ty("{next?: Node}").unwrap(),
                Lang::JavaScript
            ),
            "type Node = {next?: Node}"
        );
        assert_eq!(
            parse_definition_in("type Node = {next?: Node}", Lang::JavaScript).unwrap(),
            ("Node".to_string(), parse_ty("{next?: Node}").unwrap())
        );
        for bad in [
            "f(a: string)",
            "f({a: })",
            "f(): Record<string, any",
            "f({a}) -> x",
        ] {
            assert!(parse_signature_in(bad, Lang::JavaScript).is_err(), "{bad}");
        }
    }

    #[test]
    fn open_params_and_no_summary() {
        for line in [
            "f(**kwargs)",
            "f(**kwargs: int)",
            "f()",
            "f() -> list",
            "f(a, b? = 'x')",
        ] {
            assert_eq!(parse_signature(line).unwrap().to_string(), line);
        }
    }

    #[test]
    fn parse_errors_say_where() {
        let err = parse_signature("f(a str)").unwrap_err();
        assert_eq!(err.at, 3);
        assert!(parse_signature("f(a:str)").is_err());
        assert!(parse_signature("f(a: str").is_err());
        assert!(parse_ty("list[str").is_err());
        assert!(parse_ty("Literal['x]").is_err());
    }
}
