//! The tool files' parsers on any bytes: the manifest (`PTC_TOOLS_FILE`), a saved tool list
//! and the MCP config (`PTC_MCP_CONFIG`). Never a panic; an error names the file; an accepted
//! manifest renders and reads back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ptc_sidecar::catalog::source::{parse_manifest, parse_tool_list};
use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy};
use ptc_sidecar::mcp;
use ptc_sidecar::render::{self, lossless};
use serde_json::Value;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let path = Path::new("fuzzed.json");
    match parse_manifest(path, &value) {
        Ok((manifest, _)) => {
            let policy = Policy {
                ptc_enabled: true,
                ..Policy::default()
            };
            let input = CatalogInput {
                host_tools: manifest.tools,
                ..CatalogInput::default()
            };
            let catalog = Catalog::build(input, &policy, 1);
            let rendered = render::render(&catalog);
            assert!(lossless::parse_description(&rendered.description).is_ok());
        }
        Err(e) => assert!(e.to_string().contains("fuzzed.json"), "{e}"),
    }
    let _ = parse_tool_list("fuzzed", &value);
    if let Err(e) = mcp::config::parse(path, &value) {
        assert!(e.to_string().contains("fuzzed.json"), "{e}");
    }
});
