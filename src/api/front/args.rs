//! The input of the front door's `exec_code`: its schema as the host's model reads it
//! (`POST /v1/exec_code`'s tool, with a `lang` and a `session_id`) and its checked arguments.
//!
//! Owns what a call may pass and what a bad argument is told. It must not run anything.

use crate::api::exec::{LANGS, MAX_EXEC_BYTES, default_lang, lang_named};
use crate::render::Lang as Described;
use crate::render::llm::exec_code_schema;
use crate::run::Lang;
use crate::session::Sessions;
use rmcp::model::ErrorData;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The `lang` argument, for the model: the description's signatures are Python's, and how they
/// read in JavaScript.
const LANG_NOTE: &str = "The language of code: python, bash (each tool a function \
taking one JSON string), javascript or typescript (an ES module with top-level await; each tool \
an async function taking one object of named arguments, `await demo__add({a: 1, b: 2})`, also \
`tools.<name>`; Promise.all for calls together; console.log prints).";

const SESSION_ID_NOTE: &str = "Keep state across calls: pass the session.id of an earlier \
result (in its structured content) to run in that session again; without it, calls of one \
MCP session share one.";

/// `exec_code`'s input schema with the longest timeout `max`, its description written in
/// `described` (`code` is source in that language unless `lang` says another).
pub fn input_schema(max: Duration, described: Described) -> Map<String, Value> {
    let mut schema = exec_code_schema(max, described);
    if let Some(props) = schema["properties"].as_object_mut() {
        props.insert(
            "lang".into(),
            json!({"type": "string", "enum": ["python", "bash", "javascript", "typescript"],
                   "default": default_lang(described).1, "description": LANG_NOTE}),
        );
        props.insert(
            "session_id".into(),
            json!({"type": "string", "maxLength": 64, "description": SESSION_ID_NOTE}),
        );
    }
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The arguments of an `exec_code` call, checked.
pub struct Args {
    pub code: String,
    pub lang: Lang,
    pub timeout: Option<Duration>,
    pub session_id: Option<String>,
}

impl Args {
    pub fn parse(
        args: Option<Map<String, Value>>,
        max: Duration,
        described: Described,
    ) -> Result<Args, ErrorData> {
        let bad = |what: &str| {
            ErrorData::invalid_params(
                format!(
                    "exec_code takes {{\"code\": str, \"lang\"?: str, \"timeout\"?: int \
                     (seconds, 1 to {}), \"session_id\"?: str}}: {what}",
                    max.as_secs()
                ),
                None,
            )
        };
        let args = args.unwrap_or_default();
        let code = match args.get("code") {
            Some(Value::String(code)) => code.clone(),
            Some(_) => return Err(bad("code must be a string")),
            None => return Err(bad("code is missing")),
        };
        if code.len() > MAX_EXEC_BYTES {
            return Err(bad(&format!(
                "code is {} bytes, more than {}",
                code.len(),
                MAX_EXEC_BYTES
            )));
        }
        let lang = match args.get("lang") {
            None | Some(Value::Null) => default_lang(described).0,
            Some(Value::String(name)) => match lang_named(name) {
                Some(lang) => lang,
                None => return Err(bad(&format!("lang {name:?} is not run here: use {LANGS}"))),
            },
            Some(_) => return Err(bad("lang must be a string")),
        };
        let timeout = match args.get("timeout") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(s) if s >= 1 => Some(Duration::from_secs(s)),
                _ => return Err(bad("timeout must be a whole number of seconds, at least 1")),
            },
        };
        let session_id = match args.get("session_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => {
                Sessions::check_id(id).map_err(|e| bad(&e.to_string()))?;
                Some(id.clone())
            }
            Some(_) => return Err(bad("session_id must be a string")),
        };
        if let Some(other) = args
            .keys()
            .find(|k| !["code", "lang", "timeout", "session_id"].contains(&k.as_str()))
        {
            return Err(bad(&format!("{other:?} is not one of its arguments")));
        }
        Ok(Args {
            code,
            lang,
            timeout,
            session_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn parse(args: Value) -> Result<Args, String> {
        let Value::Object(args) = args else {
            unreachable!()
        };
        Args::parse(Some(args), Duration::from_secs(60), Described::Python)
            .map_err(|e| e.message.to_string())
    }

    #[test]
    fn lang_is_python_by_default_and_any_door_name_of_a_language_run_here() {
        assert_eq!(parse(json!({"code": "1"})).unwrap().lang, Lang::Python);
        for (name, lang) in [
            ("bash", Lang::Bash),
            ("javascript", Lang::JavaScript),
            ("js", Lang::JavaScript),
            ("typescript", Lang::TypeScript),
            ("ts", Lang::TypeScript),
        ] {
            assert_eq!(
                parse(json!({"code": "1", "lang": name})).unwrap().lang,
                lang
            );
        }
        let ruby = parse(json!({"code": "1", "lang": "ruby"})).err().unwrap();
        assert!(
            ruby.ends_with(&format!("lang \"ruby\" is not run here: use {LANGS}")),
            "{ruby}"
        );
        let number = parse(json!({"code": "1", "lang": 3})).err().unwrap();
        assert!(number.ends_with("lang must be a string"), "{number}");
    }

    #[test]
    fn the_schema_offers_every_language() {
        let schema = input_schema(Duration::from_secs(60), Described::Python);
        assert_eq!(
            schema["properties"]["lang"]["enum"],
            json!(["python", "bash", "javascript", "typescript"])
        );
        assert_eq!(schema["properties"]["lang"]["default"], "python");
        assert_eq!(schema["required"], json!(["code"]));
    }

    #[test]
    fn with_a_javascript_description_a_call_runs_javascript_unless_it_says() {
        let schema = input_schema(Duration::from_secs(60), Described::JavaScript);
        assert_eq!(schema["properties"]["lang"]["default"], "javascript");
        let parse = |args: Value| {
            let Value::Object(args) = args else {
                unreachable!()
            };
            Args::parse(Some(args), Duration::from_secs(60), Described::JavaScript).ok()
        };
        assert_eq!(parse(json!({"code": "1"})).unwrap().lang, Lang::JavaScript);
        let python = parse(json!({"code": "1", "lang": "python"})).unwrap();
        assert_eq!(python.lang, Lang::Python);
    }
}
