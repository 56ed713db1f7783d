//! Reads signature lines back into the type language of `ty`, in either language it prints.
//!
//! Exists so that what we print can be checked against the source schema (`lossless`): a line
//! this parser cannot read is a bug in the printer. Knows nothing of JSON Schema.
//!
//! TypeScript reads back as the same [`Ty`] but for two spellings it has one of: a union of
//! literal types is one `Literal` (`"a" | "b"`, whether the schema said one `enum` or two), and
//! `null` is always `Null` (Python's `Literal['a', None]` and `Literal['a'] | None` are one
//! type too). The facts the lossless check compares are the same either way.

use super::ty::{DefaultValue, Field, Lang, Params, Signature, Ty, summary_separator};
use crate::catalog::names::is_identifier;
use serde_json::Value;

/// Why a line could not be read back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at byte {at}: {message} in {line:?}")]
pub struct ParseError {
    pub at: usize,
    pub message: String,
    pub line: String,
}

/// Reads a Python signature line back: `name(params) -> ret — summary`.
pub fn parse_signature(line: &str) -> Result<Signature, ParseError> {
    parse_signature_in(line, Lang::Python)
}

/// Reads a signature line of `lang` back (TypeScript: `name({…}): ret // summary`).
pub fn parse_signature_in(line: &str, lang: Lang) -> Result<Signature, ParseError> {
    let mut p = Parser::new(line, lang);
    let name = p.identifier()?;
    p.expect("(")?;
    let params = p.params()?;
    p.expect(")")?;
    let arrow = match lang {
        Lang::Python => " -> ",
        Lang::JavaScript => ": ",
    };
    let returns = if p.eat(arrow) { Some(p.ty()?) } else { None };
    let summary = if p.eat(summary_separator(lang)) {
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

/// Reads a Python named-shape definition back: `Name = type`.
pub fn parse_definition(line: &str) -> Result<(String, Ty), ParseError> {
    parse_definition_in(line, Lang::Python)
}

/// Reads a named-shape definition of `lang` back (TypeScript: `type Name = type`).
pub fn parse_definition_in(line: &str, lang: Lang) -> Result<(String, Ty), ParseError> {
    let mut p = Parser::new(line, lang);
    if lang == Lang::JavaScript {
        p.expect("type ")?;
    }
    let name = p.identifier()?;
    p.expect(" = ")?;
    let ty = p.ty()?;
    p.end()?;
    Ok((name, ty))
}

/// Reads one Python type.
pub fn parse_ty(text: &str) -> Result<Ty, ParseError> {
    parse_ty_in(text, Lang::Python)
}

/// Reads one type of `lang`.
pub fn parse_ty_in(text: &str, lang: Lang) -> Result<Ty, ParseError> {
    let mut p = Parser::new(text, lang);
    let ty = p.ty()?;
    p.end()?;
    Ok(ty)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    lang: Lang,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, lang: Lang) -> Self {
        Parser { text, pos: 0, lang }
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
        match self.lang {
            Lang::Python if self.rest().starts_with('\'') => self.python_str(),
            Lang::JavaScript if self.rest().starts_with('"') => match self.json_value()? {
                Value::String(name) => Ok(name),
                _ => self.error("expected a property name"),
            },
            _ => self.identifier(),
        }
    }

    /// What a tool takes: Python's fields or `**kwargs`; TypeScript's one object, as its type.
    fn params(&mut self) -> Result<Params, ParseError> {
        if self.lang == Lang::Python {
            if self.eat("**kwargs") {
                let ty = if self.eat(": ") {
                    Some(Box::new(self.ty()?))
                } else {
                    None
                };
                return Ok(Params::Open(ty));
            }
            return Ok(Params::Fields(self.fields(')')?));
        }
        if self.rest().starts_with(')') {
            return Ok(Params::Fields(Vec::new()));
        }
        Ok(match self.ty()? {
            Ty::Object(fields) => Params::Fields(fields),
            Ty::Dict(value) => Params::Open(value),
            other => Params::Open(Some(Box::new(other))),
        })
    }

    /// A default value, or `...` for one too long to print.
    fn default_value(&mut self) -> Result<DefaultValue, ParseError> {
        if self.eat("...") {
            return Ok(DefaultValue::Elided);
        }
        Ok(DefaultValue::Value(match self.lang {
            Lang::Python => self.python_value()?,
            Lang::JavaScript => self.json_value()?,
        }))
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
                Some(self.default_value()?)
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
            let member = self.atom()?;
            // TypeScript's `"a" | "b"` is one `Literal` (Python prints it `Literal['a', 'b']`).
            match (members.last_mut(), member) {
                (Some(Ty::Literal(values)), Ty::Literal(more)) if self.lang == Lang::JavaScript => {
                    values.extend(more)
                }
                (_, member) => members.push(member),
            }
        }
        Ok(if members.len() == 1 {
            members.remove(0)
        } else {
            Ty::Union(members)
        })
    }

    fn atom(&mut self) -> Result<Ty, ParseError> {
        if self.lang == Lang::JavaScript {
            return self.ts_atom();
        }
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

    /// A TypeScript type without a ` | ` at its top, `[]` after it as many times as it is a list.
    fn ts_atom(&mut self) -> Result<Ty, ParseError> {
        let mut ty = if self.eat("(") {
            let ty = self.ty()?;
            self.expect(")")?;
            ty
        } else if self.rest().starts_with("{\"") && self.is_json_object() {
            Ty::Literal(vec![self.json_value()?])
        } else if self.eat("{") {
            let fields = self.fields('}')?;
            self.expect("}")?;
            Ty::Object(fields)
        } else if self
            .rest()
            .starts_with(|c: char| matches!(c, '"' | '[' | '-') || c.is_ascii_digit())
        {
            Ty::Literal(vec![self.json_value()?])
        } else if self.eat("Record<string, ") {
            let value = self.ty()?;
            self.expect(">")?;
            Ty::Dict(Some(Box::new(value)))
        } else {
            let word = self.identifier()?;
            match word.as_str() {
                "any" => Ty::Any,
                "string" => Ty::Str,
                "int" => Ty::Int,
                "number" => Ty::Float,
                "boolean" => Ty::Bool,
                "null" => Ty::Null,
                "object" => Ty::Dict(None),
                "true" => Ty::Literal(vec![Value::Bool(true)]),
                "false" => Ty::Literal(vec![Value::Bool(false)]),
                _ => Ty::Named(word),
            }
        };
        while self.eat("[]") {
            ty = match ty {
                Ty::Any => Ty::List(None),
                item => Ty::List(Some(Box::new(item))),
            };
        }
        Ok(ty)
    }

    /// Whether the text here is a JSON object (an `enum` value), not an object type whose first
    /// property name is quoted: JSON has no space after the key's colon, a type always has one.
    fn is_json_object(&self) -> bool {
        let mut stream =
            serde_json::Deserializer::from_str(&self.rest()[1..]).into_iter::<String>();
        match stream.next() {
            Some(Ok(_)) => {
                self.rest()[1 + stream.byte_offset()..].starts_with(':')
                    && !self.rest()[1 + stream.byte_offset()..].starts_with(": ")
            }
            _ => false,
        }
    }

    /// One JSON value (TypeScript's literals and defaults are JSON).
    fn json_value(&mut self) -> Result<Value, ParseError> {
        if self
            .rest()
            .starts_with(|c: char| c == '-' || c.is_ascii_digit())
        {
            // Read here, not by serde_json, which wants a delimiter it knows after a number
            // (`(1 | 2)[]` has a bracket).
            return self.number();
        }
        let mut stream = serde_json::Deserializer::from_str(self.rest()).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => {
                self.pos += stream.byte_offset();
                Ok(value)
            }
            _ => self.error("expected a JSON value"),
        }
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
        self.number()
    }

    /// A number, as both languages write it.
    fn number(&mut self) -> Result<Value, ParseError> {
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
            .unwrap_or(rest.len());
        match serde_json::from_str::<serde_json::Number>(&rest[..len]) {
            Ok(n) if len > 0 => {
                self.pos += len;
                Ok(Value::Number(n))
            }
            _ => self.error("expected a literal"),
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
    use crate::render::ty::python_value;
    use serde_json::json;

    #[test]
    fn python_values_round_trip() {
        for v in [
            json!({"k": [1, 2.5, "s\n", null, true]}),
            json!(-3),
            json!("é'\\"),
        ] {
            let text = python_value(&v);
            let mut p = Parser::new(&text, Lang::Python);
            assert_eq!(p.python_value().unwrap(), v, "{text}");
        }
    }
}
