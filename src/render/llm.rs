//! The tool list an agent runtime hands its LLM, in the provider's shape: the direct tools with
//! their full schemas, plus `exec_code` when PTC is on; or, for native PTC (the provider runs
//! the model's code: [`native_tools`]), the direct tools, the provider's code tool and every
//! PTC tool with its full schema, callable from that code.

use super::description::Rendered;
use super::ty::Lang;
use crate::catalog::{Catalog, Class, Tool};
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

/// The version of Anthropic's code execution tool native lists offer, and the caller that
/// `allowed_callers` names.
pub const ANTHROPIC_CODE_EXECUTION: &str = "code_execution_20260120";

/// A `?ptc=` that is not `native`, or `native` for a format no provider runs code for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NativeError {
    #[error("unknown ptc {0:?}; expected native (or leave it out for exec_code)")]
    Unknown(String),
    #[error("ptc=native is for format=anthropic or format=openai: no provider runs code for mcp")]
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

/// The input schema of `exec_code` for code in `lang`; `timeout` is capped by `PTC_TIMEOUT`.
pub fn exec_code_schema(max_timeout: Duration, lang: Lang) -> Value {
    let max = max_timeout.as_secs().max(1);
    let code = match lang {
        Lang::Python => "Python source to run.",
        Lang::JavaScript => "JavaScript source to run.",
    };
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": code},
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
            &exec_code_schema(max_timeout, rendered.lang),
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

/// The name a tool is offered by: a direct tool's own, a PTC tool's Python name (what code
/// calls it by, in the sidecar's runs and in a provider's container alike). A runtime's call
/// may name it by either (`run::native::lookup`).
pub fn offered_name(tool: &Tool) -> &str {
    match tool.class {
        Class::Ptc => &tool.python_name,
        Class::Direct => &tool.name,
    }
}

/// The tool list for native PTC (`GET /v1/tools?ptc=native`): the direct tools as
/// [`llm_tools`] has them, then, when there are PTC tools, the provider's code tool and each
/// PTC tool with its whole input schema, callable only from the provider's code. Anthropic:
/// `{"type": "code_execution_20260120", "name": "code_execution"}` and
/// `allowed_callers: ["code_execution_20260120"]`; OpenAI (Responses API function tools,
/// `{type: "function", name, description, parameters, strict: false}`):
/// `{"type": "programmatic_tool_calling"}` and `allowed_callers: ["programmatic"]`. No
/// `exec_code`: the provider runs the code.
pub fn native_tools(catalog: &Catalog, format: Format) -> Result<Value, NativeError> {
    let entry = |t: &Tool, callers: Option<&str>| {
        let name = offered_name(t);
        let mut e = match format {
            Format::Anthropic => {
                json!({"name": name, "description": t.description, "input_schema": t.input_schema})
            }
            // Not strict: a catalog's schemas are whatever its servers wrote, and strict mode
            // takes only a subset of JSON Schema; the sidecar checks every call's arguments.
            _ => json!({
                "type": "function", "name": name, "description": t.description,
                "parameters": t.input_schema, "strict": false
            }),
        };
        if let Some(caller) = callers {
            e["allowed_callers"] = json!([caller]);
        }
        e
    };
    let (code_tool, caller) = match format {
        Format::Anthropic => (
            json!({"type": ANTHROPIC_CODE_EXECUTION, "name": "code_execution"}),
            ANTHROPIC_CODE_EXECUTION,
        ),
        Format::Openai => (json!({"type": "programmatic_tool_calling"}), "programmatic"),
        Format::Mcp => return Err(NativeError::Mcp),
    };
    let mut tools: Vec<Value> = catalog.direct().map(|t| entry(t, None)).collect();
    if catalog.ptc().next().is_some() {
        tools.push(code_tool);
        tools.extend(catalog.ptc().map(|t| entry(t, Some(caller))));
    }
    Ok(Value::Array(tools))
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
