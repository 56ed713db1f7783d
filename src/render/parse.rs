//! Reads signature lines back into the type language of `ty`.
//!
//! Exists so that what we print can be checked against the source schema (`lossless`): a line
//! this parser cannot read is a bug in the printer. Knows nothing of JSON Schema.

use super::ty::{DefaultValue, Field, Params, SUMMARY_SEPARATOR, Signature, Ty};
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
            let mut p = Parser::new(&text);
            assert_eq!(p.python_value().unwrap(), v, "{text}");
        }
    }
}
