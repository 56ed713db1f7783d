//! JSON Schema → lowering → rendering → reading back → the lossless check. The input is a
//! schema, or a tool list (`{"tools": [...]}`, as `tests/corpus/` holds) whose schemas are used.
//! Never a panic; the description is the same twice and every line of it parses back.
//! (Lossless is not asserted: arbitrary JSON holds contradictions, such as an allOf of a string
//! and a number, that no rendering can state; `tests/all/props.rs` asserts it over schemas as
//! servers write them.)

#![no_main]

use libfuzzer_sys::fuzz_target;
use ptc_sidecar::catalog::source::ToolDef;
use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy};
use ptc_sidecar::render::{self, lossless};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let schemas: Vec<Value> = match value.get("tools").and_then(Value::as_array) {
        Some(tools) => tools
            .iter()
            .map(|t| t.get("inputSchema").cloned().unwrap_or(Value::Null))
            .collect(),
        None => vec![value],
    };
    let host_tools = schemas
        .into_iter()
        .enumerate()
        .map(|(i, input_schema)| ToolDef {
            name: format!("t{i}"),
            title: None,
            description: String::new(),
            input_schema,
            output_schema: None,
            annotations: None,
        })
        .collect();
    let policy = Policy {
        ptc_enabled: true,
        ..Policy::default()
    };
    let input = CatalogInput {
        host_tools,
        ..CatalogInput::default()
    };
    let catalog = Catalog::build(input, &policy, 1);
    let rendered = render::render(&catalog);
    assert_eq!(rendered.description, render::render(&catalog).description);
    let parsed = lossless::parse_description(&rendered.description);
    assert!(
        parsed.is_ok(),
        "{:?}\n{}",
        parsed.err(),
        rendered.description
    );
    let _ = lossless::check_catalog(&catalog, &rendered.description);
});
