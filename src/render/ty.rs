//! The compact Python-flavoured type language of signature lines: its AST and its printer (the
//! parser, which reads what we print back, is in `parse`).
//!
//! Lowering (schema → [`Ty`]) lives in `lower`; this module knows nothing of JSON Schema. The
//! parser exists so that what we print can be read back and checked against the source schema
//! (`lossless`): a line the parser cannot read is a bug in the printer.

pub use super::parse::{ParseError, parse_definition, parse_signature, parse_ty};
use crate::catalog::names::is_identifier;
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

/// Separates the call from the summary on a signature line.
pub const SUMMARY_SEPARATOR: &str = " — ";

// ---------------------------------------------------------------------------------------------
// Printing

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Any => f.write_str("Any"),
            Ty::Str => f.write_str("str"),
            Ty::Int => f.write_str("int"),
            Ty::Float => f.write_str("float"),
            Ty::Bool => f.write_str("bool"),
            Ty::Null => f.write_str("None"),
            Ty::List(None) => f.write_str("list"),
            Ty::List(Some(item)) => write!(f, "list[{item}]"),
            Ty::Dict(None) => f.write_str("dict"),
            Ty::Dict(Some(value)) => write!(f, "dict[str, {value}]"),
            Ty::Object(fields) => {
                f.write_char('{')?;
                write_fields(f, fields)?;
                f.write_char('}')
            }
            Ty::Literal(values) => {
                f.write_str("Literal[")?;
                for (i, value) in values.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_python_value(f, value)?;
                }
                f.write_char(']')
            }
            Ty::Union(members) => {
                for (i, member) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{member}")?;
                }
                Ok(())
            }
            Ty::Named(name) => f.write_str(name),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_name(f, &self.name)?;
        if !self.required {
            f.write_char('?')?;
        }
        // The commonest type goes unwritten: a bare name is a `str`.
        if self.ty != Ty::Str {
            write!(f, ": {}", self.ty)?;
        }
        match &self.default {
            None => Ok(()),
            Some(DefaultValue::Elided) => f.write_str(" = ..."),
            Some(DefaultValue::Value(v)) => {
                f.write_str(" = ")?;
                write_python_value(f, v)
            }
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Params::Fields(fields) => write_fields(f, fields),
            Params::Open(None) => f.write_str("**kwargs"),
            Params::Open(Some(ty)) => write!(f, "**kwargs: {ty}"),
        }
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name, self.params)?;
        if let Some(ret) = &self.returns {
            write!(f, " -> {ret}")?;
        }
        if !self.summary.is_empty() {
            write!(f, "{SUMMARY_SEPARATOR}{}", self.summary)?;
        }
        Ok(())
    }
}

fn write_fields(f: &mut fmt::Formatter<'_>, fields: &[Field]) -> fmt::Result {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{field}")?;
    }
    Ok(())
}

/// Identifiers print bare; anything else (`x-api-key`, `$ref`) prints as a Python string.
fn write_name(f: &mut impl Write, name: &str) -> fmt::Result {
    if is_identifier(name) {
        f.write_str(name)
    } else {
        write_python_str(f, name)
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
