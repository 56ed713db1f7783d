//! The tool list an agent runtime hands its LLM, in the provider's shape: the direct tools with
//! their full schemas, plus `exec_code` when PTC is on.

use super::description::Rendered;
use crate::catalog::Catalog;
use serde_json::{Value, json};
use std::str::FromStr;
use std::time::Duration;

/// The tool the model runs code with.
pub const EXEC_CODE: &str = "exec_code";

/// Provider shapes of a tool list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `[{name, description, input_schema}]`
    Anthropic,
    /// `[{type: "function", function: {name, description, parameters}}]` (chat completions)
    Openai,
    /// `[{name, description, inputSchema}]` (MCP `tools/list`)
    Mcp,
}

/// A tool-list format name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {0:?}; expected anthropic, openai or mcp")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "anthropic" => Ok(Format::Anthropic),
            "openai" => Ok(Format::Openai),
            "mcp" => Ok(Format::Mcp),
            other => Err(UnknownFormat(other.to_string())),
        }
    }
}

/// The input schema of `exec_code`; `timeout` is capped by `PTC_TIMEOUT`.
pub fn exec_code_schema(max_timeout: Duration) -> Value {
    let max = max_timeout.as_secs().max(1);
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python source to run."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": max,
                "description": format!("Seconds before the run is stopped (default and maximum {max}).")
            }
        },
        "required": ["code"]
    })
}

/// The tool list for the LLM.
pub fn llm_tools(
    catalog: &Catalog,
    rendered: &Rendered,
    format: Format,
    max_timeout: Duration,
) -> Value {
    let mut tools: Vec<Value> = catalog
        .direct()
        .map(|t| shape(format, &t.name, &t.description, &t.input_schema))
        .collect();
    if catalog.ptc_enabled {
        tools.push(shape(
            format,
            EXEC_CODE,
            &rendered.description,
            &exec_code_schema(max_timeout),
        ));
    }
    Value::Array(tools)
}

/// What the `exec_code` description adds for a runtime that runs code in sessions
/// (`GET /v1/tools?sessions=true`).
pub const SESSIONS_NOTE: &str = "\n\nState persists within this conversation: variables, \
imports and functions of one exec_code call are there in the next, and so are the files in the \
working directory. A note on stderr says when the state was reset.";

/// `tools` (as [`llm_tools`] made them) with [`SESSIONS_NOTE`] after the `exec_code`
/// description.
pub fn note_sessions(tools: &mut Value) {
    for tool in tools.as_array_mut().into_iter().flatten() {
        let (name, description) = match tool.get_mut("function") {
            Some(f) => (f["name"].clone(), f.get_mut("description")),
            None => (tool["name"].clone(), tool.get_mut("description")),
        };
        if name == EXEC_CODE
            && let Some(Value::String(d)) = description
        {
            d.push_str(SESSIONS_NOTE);
        }
    }
}

fn shape(format: Format, name: &str, description: &str, schema: &Value) -> Value {
    match format {
        Format::Anthropic => {
            json!({"name": name, "description": description, "input_schema": schema})
        }
        Format::Openai => json!({
            "type": "function",
            "function": {"name": name, "description": description, "parameters": schema}
        }),
        Format::Mcp => json!({"name": name, "description": description, "inputSchema": schema}),
    }
}
