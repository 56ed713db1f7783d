//! The compact Python-flavoured type language of signature lines: its AST, its printer and its
//! parser.
//!
//! Lowering (schema → [`Ty`]) lives in `lower`; this module knows nothing of JSON Schema. The
//! parser exists so that what we print can be read back and checked against the source schema
//! (`lossless`): a line the parser cannot read is a bug in the printer.

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

pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

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

// ---------------------------------------------------------------------------------------------
// Parsing

/// Why a line could not be read back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at byte {at}: {message} in {line:?}")]
pub struct ParseError {
    pub at: usize,
    pub message: String,
    pub line: String,
}

/// Reads a signature line back: `name(params) -> ret — summary`.
pub fn parse_signature(line: &str) -> Result<Signature, ParseError> {
    let mut p = Parser::new(line);
    let name = p.identifier()?;
    p.expect("(")?;
    let params = if p.eat("**kwargs") {
        let ty = if p.eat(": ") {
            Some(Box::new(p.ty()?))
        } else {
            None
        };
        Params::Open(ty)
    } else {
        Params::Fields(p.fields(')')?)
    };
    p.expect(")")?;
    let returns = if p.eat(" -> ") { Some(p.ty()?) } else { None };
    let summary = if p.eat(SUMMARY_SEPARATOR) {
        p.rest().to_string()
    } else {
        p.end()?;
        String::new()
    };
    Ok(Signature {
        name,
        params,
        returns,
        summary,
    })
}

/// Reads a named-shape definition back: `Name = type`.
pub fn parse_definition(line: &str) -> Result<(String, Ty), ParseError> {
    let mut p = Parser::new(line);
    let name = p.identifier()?;
    p.expect(" = ")?;
    let ty = p.ty()?;
    p.end()?;
    Ok((name, ty))
}

/// Reads one type.
pub fn parse_ty(text: &str) -> Result<Ty, ParseError> {
    let mut p = Parser::new(text);
    let ty = p.ty()?;
    p.end()?;
    Ok(ty)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser { text, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn error<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            at: self.pos,
            message: message.into(),
            line: self.text.to_string(),
        })
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), ParseError> {
        if self.eat(token) {
            Ok(())
        } else {
            self.error(format!("expected {token:?}"))
        }
    }

    fn end(&self) -> Result<(), ParseError> {
        if self.rest().is_empty() {
            Ok(())
        } else {
            self.error("unexpected trailing text")
        }
    }

    fn identifier(&mut self) -> Result<String, ParseError> {
        let len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest().len());
        let ident = &self.rest()[..len];
        if !is_identifier(ident) {
            return self.error("expected an identifier");
        }
        self.pos += len;
        Ok(ident.to_string())
    }

    fn name(&mut self) -> Result<String, ParseError> {
        if self.rest().starts_with('\'') {
            self.python_str()
        } else {
            self.identifier()
        }
    }

    fn fields(&mut self, close: char) -> Result<Vec<Field>, ParseError> {
        let mut fields = Vec::new();
        if self.rest().starts_with(close) {
            return Ok(fields);
        }
        loop {
            let name = self.name()?;
            let required = !self.eat("?");
            let ty = if self.eat(": ") { self.ty()? } else { Ty::Str };
            let default = if self.eat(" = ") {
                if self.eat("...") {
                    Some(DefaultValue::Elided)
                } else {
                    Some(DefaultValue::Value(self.python_value()?))
                }
            } else {
                None
            };
            fields.push(Field {
                name,
                required,
                ty,
                default,
            });
            if !self.eat(", ") {
                return Ok(fields);
            }
        }
    }

    fn ty(&mut self) -> Result<Ty, ParseError> {
        let mut members = vec![self.atom()?];
        while self.eat(" | ") {
            members.push(self.atom()?);
        }
        Ok(if members.len() == 1 {
            members.remove(0)
        } else {
            Ty::Union(members)
        })
    }

    fn atom(&mut self) -> Result<Ty, ParseError> {
        if self.eat("{") {
            let fields = self.fields('}')?;
            self.expect("}")?;
            return Ok(Ty::Object(fields));
        }
        if self.eat("Literal[") {
            let mut values = vec![self.python_value()?];
            while self.eat(", ") {
                values.push(self.python_value()?);
            }
            self.expect("]")?;
            return Ok(Ty::Literal(values));
        }
        if self.eat("list[") {
            let item = self.ty()?;
            self.expect("]")?;
            return Ok(Ty::List(Some(Box::new(item))));
        }
        if self.eat("dict[str, ") {
            let value = self.ty()?;
            self.expect("]")?;
            return Ok(Ty::Dict(Some(Box::new(value))));
        }
        let word = self.identifier()?;
        Ok(match word.as_str() {
            "Any" => Ty::Any,
            "str" => Ty::Str,
            "int" => Ty::Int,
            "float" => Ty::Float,
            "bool" => Ty::Bool,
            "None" => Ty::Null,
            "list" => Ty::List(None),
            "dict" => Ty::Dict(None),
            _ => Ty::Named(word),
        })
    }

    fn python_value(&mut self) -> Result<Value, ParseError> {
        let rest = self.rest();
        if rest.starts_with('\'') {
            return Ok(Value::String(self.python_str()?));
        }
        if self.eat("[") {
            let mut items = Vec::new();
            if !self.eat("]") {
                loop {
                    items.push(self.python_value()?);
                    if self.eat("]") {
                        break;
                    }
                    self.expect(", ")?;
                }
            }
            return Ok(Value::Array(items));
        }
        if self.eat("{") {
            let mut map = serde_json::Map::new();
            if !self.eat("}") {
                loop {
                    let key = self.python_str()?;
                    self.expect(": ")?;
                    map.insert(key, self.python_value()?);
                    if self.eat("}") {
                        break;
                    }
                    self.expect(", ")?;
                }
            }
            return Ok(Value::Object(map));
        }
        for (word, value) in [
            ("True", Value::Bool(true)),
            ("False", Value::Bool(false)),
            ("None", Value::Null),
        ] {
            if self.eat(word) {
                return Ok(value);
            }
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
            .unwrap_or(rest.len());
        match serde_json::from_str::<serde_json::Number>(&rest[..len]) {
            Ok(n) if len > 0 => {
                self.pos += len;
                Ok(Value::Number(n))
            }
            _ => self.error("expected a Python literal"),
        }
    }

    fn python_str(&mut self) -> Result<String, ParseError> {
        self.expect("'")?;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\'' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 'r')) => out.push('\r'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, 'u')) => {
                        let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(c) => out.push(c),
                            None => return self.error("bad \\u escape"),
                        }
                    }
                    Some((_, c)) => out.push(c),
                    None => break,
                },
                c => out.push(c),
            }
        }
        self.error("unterminated string")
    }
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

    #[test]
    fn python_values_round_trip() {
        for v in [
            json!({"k": [1, 2.5, "s\n", null, true]}),
            json!(-3),
            json!("é'\\"),
        ] {
            let text = python_value(&v);
            let mut p = Parser::new(&text);
            assert_eq!(p.python_value().unwrap(), v, "{text}");
        }
    }
}
