//! Tool sources: the host manifest (`PTC_TOOLS_FILE`) and MCP `tools/list` results.
//!
//! Owns reading and checking what others wrote. A file that cannot be used at all is a
//! [`SourceError`] naming the file; a single bad tool is a [`Problem`] naming the file, the
//! tool's index and name, and is skipped without hiding the good ones. Accepts tool entries in
//! Anthropic (`input_schema`), OpenAI (`parameters`, or `{type: "function", function: {...}}`)
//! and MCP (`inputSchema`) shapes.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Largest tool file read; a manifest is a few hundred kB even for hundreds of tools, so a
/// bigger file is a mistake (a log, a binary) that would otherwise be held in memory.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Longest tool name accepted; providers cap names at 64–128 characters.
pub const MAX_NAME_CHARS: usize = 256;

/// One tool as a source describes it, in one shape whatever the source's dialect.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub annotations: Option<Value>,
}

/// Where the runtime wants host tool calls POSTed (host protocol 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Callback {
    pub url: String,
    pub headers: BTreeMap<String, String>,
}

/// The parsed `PTC_TOOLS_FILE`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostManifest {
    pub callback: Option<Callback>,
    pub tools: Vec<ToolDef>,
}

/// Something wrong with one tool, or worth knowing about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The file, or `mcp server NAME`.
    pub origin: String,
    pub index: Option<usize>,
    pub tool: Option<String>,
    pub message: String,
    /// The tool was left out; otherwise it is kept and this is a warning.
    pub skipped: bool,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        match (self.index, &self.tool) {
            (Some(i), Some(name)) => write!(f, ": tool #{i} {name:?}")?,
            (Some(i), None) => write!(f, ": tool #{i}")?,
            (None, Some(name)) => write!(f, ": tool {name:?}")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.message)?;
        if self.skipped {
            f.write_str(" (skipped)")?;
        }
        Ok(())
    }
}

/// A tool file that cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit for a tool file")]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: {message}")]
    Shape { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Callback {
        path: PathBuf,
        source: CallbackError,
    },
    #[error("{path}: {source}")]
    ToolList {
        path: PathBuf,
        source: ToolListError,
    },
}

/// A `"tools"` value that is not a list of tools at all (single bad tools are [`Problem`]s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(r#""tools" is a JSON {kind}, expected an array"#)]
pub struct ToolListError {
    pub kind: &'static str,
}

/// A manifest `"callback"` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    #[error(r#""callback" is a JSON {0}; expected {{"url": "http://...", "headers": {{...}}}}"#)]
    NotObject(&'static str),
    #[error(r#""callback.url" {:?} must start with http:// or https://"#, crate::util::redact_urls(.0))]
    UrlScheme(String),
    #[error(r#""callback" needs a "url" string"#)]
    NoUrl,
    #[error(r#""callback.headers" must map header names to strings"#)]
    HeaderValue,
    #[error(r#""callback.headers" is a JSON {0}, expected an object"#)]
    Headers(&'static str),
}

/// Reads a tool file with the size cap.
pub fn read_json(path: &Path) -> Result<Value, SourceError> {
    let read_err = |source| SourceError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.is_dir() {
        return Err(SourceError::Shape {
            path: path.to_path_buf(),
            message: "is a directory, expected a JSON file".into(),
        });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(SourceError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    serde_json::from_str(&text).map_err(|source| SourceError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads and checks `PTC_TOOLS_FILE`.
pub fn read_manifest(path: &Path) -> Result<(HostManifest, Vec<Problem>), SourceError> {
    parse_manifest(path, &read_json(path)?)
}

/// `{"callback": {"url", "headers"}?, "tools": [...]}`; a bare array of tools is accepted too.
pub fn parse_manifest(
    path: &Path,
    value: &Value,
) -> Result<(HostManifest, Vec<Problem>), SourceError> {
    let shape = |message: String| SourceError::Shape {
        path: path.to_path_buf(),
        message,
    };
    let (callback, tools) = match value {
        Value::Array(_) => (None, value),
        Value::Object(obj) => {
            let tools = obj.get("tools").ok_or_else(|| {
                shape(
                    r#"has no "tools" array; expected {"callback": {...}?, "tools": [...]}"#.into(),
                )
            })?;
            let callback = match obj.get("callback") {
                None | Some(Value::Null) => None,
                Some(cb) => Some(parse_callback(cb).map_err(|source| SourceError::Callback {
                    path: path.to_path_buf(),
                    source,
                })?),
            };
            (callback, tools)
        }
        other => {
            return Err(shape(format!(
                r#"is a JSON {}; expected {{"callback": {{...}}?, "tools": [...]}}"#,
                kind(other)
            )));
        }
    };
    let (tools, problems) = tool_list_of(path, tools)?;
    Ok((HostManifest { callback, tools }, problems))
}

/// Reads a saved MCP `tools/list` result (`{"tools": [...]}`), as from `../shared/corpus/`.
pub fn read_saved_tool_list(path: &Path) -> Result<(Vec<ToolDef>, Vec<Problem>), SourceError> {
    let value = read_json(path)?;
    let shape = |message: String| SourceError::Shape {
        path: path.to_path_buf(),
        message,
    };
    let tools = match &value {
        Value::Object(obj) => obj.get("tools").ok_or_else(|| {
            shape(r#"has no "tools" array; expected a tools/list result {"tools": [...]}"#.into())
        })?,
        Value::Array(_) => &value,
        other => {
            return Err(shape(format!(
                r#"is a JSON {}; expected a tools/list result {{"tools": [...]}}"#,
                kind(other)
            )));
        }
    };
    tool_list_of(path, tools)
}

/// [`parse_tool_list`] for a file: the file is the problems' origin and the error's subject.
fn tool_list_of(path: &Path, tools: &Value) -> Result<(Vec<ToolDef>, Vec<Problem>), SourceError> {
    parse_tool_list(&path.display().to_string(), tools).map_err(|source| SourceError::ToolList {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses an array of tool entries; bad entries become problems.
pub fn parse_tool_list(
    origin: &str,
    tools: &Value,
) -> Result<(Vec<ToolDef>, Vec<Problem>), ToolListError> {
    let Value::Array(entries) = tools else {
        return Err(ToolListError { kind: kind(tools) });
    };
    let mut defs = Vec::with_capacity(entries.len());
    let mut problems = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        match parse_tool(entry) {
            Ok((def, warnings)) => {
                problems.extend(warnings.into_iter().map(|message| Problem {
                    origin: origin.to_string(),
                    index: Some(index),
                    tool: Some(def.name.clone()),
                    message,
                    skipped: false,
                }));
                defs.push(def);
            }
            Err((tool, message)) => problems.push(Problem {
                origin: origin.to_string(),
                index: Some(index),
                tool,
                message,
                skipped: true,
            }),
        }
    }
    Ok((defs, problems))
}

/// Why one tool entry is skipped: the tool's name when it has one, and what is wrong.
type Refused = (Option<String>, String);

/// One tool and its warnings, or why it is skipped.
type ToolResult = Result<(ToolDef, Vec<String>), Refused>;

fn parse_tool(entry: &Value) -> ToolResult {
    let obj = tool_object(entry)?;
    let name = tool_name(obj)?;
    let mut warnings = Vec::new();
    let input_schema = input_schema(obj, &name, &mut warnings)?;
    let output_schema = output_schema(obj, &mut warnings);
    let description = description(obj, &mut warnings);
    let title = obj.get("title").and_then(Value::as_str).map(str::to_string);
    let annotations = match obj.get("annotations") {
        Some(a @ Value::Object(_)) => Some(a.clone()),
        _ => None,
    };
    Ok((
        ToolDef {
            name,
            title,
            description,
            input_schema,
            output_schema,
            annotations,
        },
        warnings,
    ))
}

/// The entry's object, unwrapped from OpenAI chat-completions' `{"type": "function",
/// "function": {...}}`.
fn tool_object(entry: &Value) -> Result<&Map<String, Value>, Refused> {
    let Value::Object(obj) = entry else {
        return Err((
            None,
            format!("is a JSON {}, expected an object", kind(entry)),
        ));
    };
    Ok(match obj.get("function") {
        Some(Value::Object(inner))
            if obj.get("type").and_then(Value::as_str) == Some("function") =>
        {
            inner
        }
        _ => obj,
    })
}

/// The tool's name: a non-empty string of at most [`MAX_NAME_CHARS`].
fn tool_name(obj: &Map<String, Value>) -> Result<String, Refused> {
    match obj.get("name") {
        Some(Value::String(name)) if name.trim().is_empty() => {
            Err((None, "has an empty name".into()))
        }
        Some(Value::String(name)) if name.chars().count() > MAX_NAME_CHARS => Err((
            Some(name.chars().take(40).collect::<String>() + "…"),
            format!("has a name longer than {MAX_NAME_CHARS} characters"),
        )),
        Some(Value::String(name)) => Ok(name.clone()),
        Some(other) => Err((
            None,
            format!(r#""name" is a JSON {}, expected a string"#, kind(other)),
        )),
        None => Err((None, r#"has no "name""#.into())),
    }
}

/// The input schema under whichever of its three keys comes first (a warning when several
/// are given); none is a tool without arguments, and its type must be an object.
fn input_schema(
    obj: &Map<String, Value>,
    name: &str,
    warnings: &mut Vec<String>,
) -> Result<Value, Refused> {
    let fail = |message: String| Err((Some(name.to_string()), message));
    let schema_keys = ["input_schema", "inputSchema", "parameters"];
    let given: Vec<&str> = schema_keys
        .iter()
        .copied()
        .filter(|k| obj.contains_key(*k))
        .collect();
    if given.len() > 1 {
        warnings.push(format!(
            "gives {}; using {:?}",
            given.join(" and "),
            given[0]
        ));
    }
    let input_schema = match given.first().and_then(|k| obj.get(*k)) {
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(Value::Bool(true)) => json!({"type": "object"}),
        Some(other) => {
            return fail(format!(
                "input schema is a JSON {}, expected a JSON Schema object",
                kind(other)
            ));
        }
        None => {
            warnings.push(
                "has no input schema (input_schema, inputSchema or parameters); \
                 treated as taking no arguments"
                    .into(),
            );
            json!({"type": "object", "properties": {}})
        }
    };
    if let Some(t) = input_schema.get("type").and_then(Value::as_str)
        && t != "object"
    {
        return fail(format!(
            r#"input schema has "type": {t:?}; a tool's arguments must be an "object""#
        ));
    }
    Ok(input_schema)
}

/// The output schema when it is an object; anything else is ignored with a warning.
fn output_schema(obj: &Map<String, Value>, warnings: &mut Vec<String>) -> Option<Value> {
    match obj.get("output_schema").or_else(|| obj.get("outputSchema")) {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => Some(schema.clone()),
        Some(other) => {
            warnings.push(format!("output schema is a JSON {}, ignored", kind(other)));
            None
        }
    }
}

/// The description when it is a string; anything else is ignored with a warning.
fn description(obj: &Map<String, Value>, warnings: &mut Vec<String>) -> String {
    match obj.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(d)) => d.clone(),
        Some(other) => {
            warnings.push(format!(
                r#""description" is a JSON {}, ignored"#,
                kind(other)
            ));
            String::new()
        }
    }
}

fn parse_callback(value: &Value) -> Result<Callback, CallbackError> {
    let Value::Object(obj) = value else {
        return Err(CallbackError::NotObject(kind(value)));
    };
    let url = match obj.get("url") {
        Some(Value::String(url)) if url.starts_with("http://") || url.starts_with("https://") => {
            url.clone()
        }
        Some(Value::String(url)) => return Err(CallbackError::UrlScheme(url.clone())),
        _ => return Err(CallbackError::NoUrl),
    };
    let headers = match obj.get("headers") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(h)) => string_map(h).ok_or(CallbackError::HeaderValue)?,
        Some(other) => return Err(CallbackError::Headers(kind(other))),
    };
    Ok(Callback { url, headers })
}

fn string_map(map: &Map<String, Value>) -> Option<BTreeMap<String, String>> {
    map.iter()
        .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// A JSON value's kind, for messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn manifest(value: Value) -> Result<(HostManifest, Vec<Problem>), SourceError> {
        parse_manifest(Path::new("tools.json"), &value)
    }

    #[test]
    fn accepts_every_dialect() {
        let (m, problems) = manifest(json!({
            "callback": {"url": "http://127.0.0.1:9/tools", "headers": {"X-Key": "k"}},
            "tools": [
                {"name": "a", "description": "A.", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}},
                {"name": "b", "parameters": {"type": "object"}},
                {"type": "function", "function": {"name": "c", "parameters": {"type": "object"}}},
                {"name": "d", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"},
                 "annotations": {"readOnlyHint": true}, "title": "Dee"}
            ]
        }))
        .unwrap();
        assert_eq!(problems, vec![]);
        let names: Vec<_> = m.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(m.callback.unwrap().headers["X-Key"], "k");
        assert_eq!(m.tools[3].title.as_deref(), Some("Dee"));
        assert!(m.tools[3].output_schema.is_some());
    }

    #[test]
    fn one_bad_tool_is_skipped_and_named() {
        let (m, problems) = manifest(json!({"tools": [
            {"name": "good", "input_schema": {"type": "object"}},
            {"name": "bad", "input_schema": "nope"},
            {"description": "no name"},
            7,
            {"name": "arr", "input_schema": {"type": "array"}},
            {"name": "noschema"}
        ]}))
        .unwrap();
        assert_eq!(m.tools.len(), 2);
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                r#"tools.json: tool #1 "bad": input schema is a JSON string, expected a JSON Schema object (skipped)"#,
                r#"tools.json: tool #2: has no "name" (skipped)"#,
                r#"tools.json: tool #3: is a JSON number, expected an object (skipped)"#,
                r#"tools.json: tool #4 "arr": input schema has "type": "array"; a tool's arguments must be an "object" (skipped)"#,
                r#"tools.json: tool #5 "noschema": has no input schema (input_schema, inputSchema or parameters); treated as taking no arguments"#,
            ]
        );
    }

    #[test]
    fn whole_file_errors_say_what_to_fix() {
        let err = manifest(json!({"tool": []})).unwrap_err().to_string();
        assert!(err.contains(r#"has no "tools" array"#), "{err}");
        let err = manifest(json!("x")).unwrap_err().to_string();
        assert!(err.contains("is a JSON string"), "{err}");
        let err = manifest(json!({"tools": [], "callback": {"url": "ftp://x"}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("must start with http://"), "{err}");
        let err = manifest(json!({"tools": {}})).unwrap_err().to_string();
        assert!(err.contains("expected an array"), "{err}");
    }

    #[test]
    fn reads_files_with_clear_errors() {
        let dir = std::env::temp_dir().join(format!("ptc-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"tools\": [").unwrap();
        let err = read_manifest(&bad).unwrap_err().to_string();
        assert!(err.contains("bad.json is not valid JSON"), "{err}");
        let err = read_manifest(&dir.join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot read"), "{err}");
        let err = read_manifest(&dir).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
