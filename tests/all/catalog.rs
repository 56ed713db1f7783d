//! The catalog and what the model sees of it: the lossless check over the real corpus and
//! hand-written schemas, bad input, and the `tools` command.

use crate::common::{TempDir, config, corpus, names};
use pretty_assertions::assert_eq;
use ptc_sidecar::catalog::source::ToolDef;
use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy};
use ptc_sidecar::render::{self, lossless};
use ptc_sidecar::sources::{self, SavedCatalog};
use serde_json::{Value, json};

fn ptc() -> Policy {
    Policy {
        ptc_enabled: true,
        direct_tools: vec!["complete".into(), "fail".into()],
        ..Policy::default()
    }
}

fn host(tools: Value) -> CatalogInput {
    let defs = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| ToolDef {
            name: t["name"].as_str().unwrap().into(),
            title: None,
            description: t["description"].as_str().unwrap_or("").into(),
            input_schema: t["input_schema"].clone(),
            output_schema: t.get("output_schema").cloned(),
            annotations: None,
        })
        .collect();
    CatalogInput {
        host_tools: defs,
        ..CatalogInput::default()
    }
}

#[test]
fn the_whole_corpus_renders_losslessly() {
    let c = config(&[("PTC_ENABLED", "true")]);
    let snapshot = sources::first_snapshot(&c, &corpus(), None).unwrap();
    assert_eq!(snapshot.catalog.ptc().count(), 76);
    assert_eq!(snapshot.catalog.report(), Vec::<String>::new());
    // The default budget holds the rich description of the whole corpus: its notes and whole
    // first sentences leave every signature reading back.
    assert!(
        snapshot
            .rendered
            .description
            .contains(" [paths: len >= 1]\n"),
        "not the rich level"
    );
    let problems = lossless::check_catalog(&snapshot.catalog, &snapshot.rendered.description);
    assert_eq!(problems, Vec::<String>::new());
    // The compact whole too.
    let mut unbudgeted = snapshot.catalog.clone();
    unbudgeted.description_budget = None;
    let compact = render::render(&unbudgeted);
    assert_ne!(compact.description, snapshot.rendered.description);
    assert_eq!(
        lossless::check_catalog(&snapshot.catalog, &compact.description),
        Vec::<String>::new()
    );
    // Each catalog alone too (shapes are named per description).
    for saved in corpus() {
        let s = sources::first_snapshot(&c, std::slice::from_ref(&saved), None).unwrap();
        assert_eq!(
            lossless::check_catalog(&s.catalog, &s.rendered.description),
            Vec::<String>::new(),
            "{}",
            saved.server
        );
    }
}

#[test]
fn the_corpus_description_is_what_we_expect() {
    let c = config(&[("PTC_ENABLED", "true")]);
    let saved: Vec<SavedCatalog> = corpus()
        .into_iter()
        .filter(|s| s.server == "filesystem")
        .collect();
    let snapshot = sources::first_snapshot(&c, &saved, None).unwrap();
    let d = &snapshot.rendered.description;
    assert!(d.contains("## types\nContent = {content}\n"), "{d}");
    // The server's tools by name, not in the order it lists them.
    assert!(
        d.contains("\n## filesystem__\ncreate_directory(path) "),
        "{d}"
    );
    // Within the default budget: the rich level, whole first sentences and parameter notes.
    assert!(d.contains("\nread_file(path, tail?: float, head?: float) -> Content — Read the complete contents of a file as text.\n"), "{d}");
    assert!(d.contains("\nread_multiple_files(paths: list[str]) -> Content — Read the contents of multiple files simultaneously. [paths: len >= 1]\n"), "{d}");
    assert!(d.contains("\nedit_file(path, edits: list[{oldText, newText}], dryRun?: bool = False) -> Content — Make line-based edits to a text file.\n"), "{d}");
    assert_eq!(
        snapshot.rendered.line("filesystem__move_file"),
        Some(
            "filesystem__move_file(source, destination) -> Content — Move or rename files and directories."
        )
    );
}

/// Schemas that exercise every construct the renderer must keep.
fn hard_schemas() -> Value {
    json!([
        {"name": "refs", "input_schema": {
            "type": "object",
            "properties": {"user": {"$ref": "#/$defs/User"}, "tags": {"type": "array", "items": {"$ref": "#/definitions/Tag"}}},
            "required": ["user"],
            "$defs": {"User": {"type": "object", "properties": {"id": {"type": "integer"}, "email": {"type": ["string", "null"]}}, "required": ["id"]}},
            "definitions": {"Tag": {"type": "string", "enum": ["a", "b", "c"]}}
        }},
        {"name": "tree", "input_schema": {
            "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}, "required": ["label"]}}
        }},
        {"name": "unions", "input_schema": {
            "type": "object",
            "properties": {
                "any_of": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
                "one_of": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
                    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind", "side"]}
                ]},
                "nullable": {"type": "string", "nullable": true},
                "const_only": {"const": 42},
                "enum_mixed": {"enum": [1, "two", true, null]},
                "type_array": {"type": ["boolean", "string"]}
            },
            "required": ["one_of"]
        }},
        {"name": "objects-in-arrays", "input_schema": {
            "type": "object",
            "properties": {
                "rows": {"type": "array", "items": {"type": "object", "properties": {"cells": {"type": "array", "items": {"type": "object", "properties": {"v": {"type": "number"}, "note": {"type": "string"}}, "required": ["v"]}}}, "required": ["cells"]}},
                "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                "meta": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}
            },
            "required": ["rows"]
        }},
        {"name": "API-get-user", "input_schema": {
            "type": "object",
            "properties": {"x-api-key": {"type": "string"}, "for": {"type": "integer"}, "user id": {"type": "string"}, "$expand": {"type": "boolean"}},
            "required": ["x-api-key"]
        }},
        {"name": "all-of", "input_schema": {
            "allOf": [{"$ref": "#/$defs/Base"}, {"type": "object", "properties": {"extra": {"type": "boolean"}}, "required": ["extra"]}],
            "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}
        }},
        {"name": "with-output", "input_schema": {"type": "object", "properties": {}},
         "output_schema": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}, "state": {"enum": ["on", "off"]}}, "required": ["id", "state"]}}}, "required": ["items"]}}
    ])
}

#[test]
fn hand_written_schemas_render_losslessly() {
    let catalog = Catalog::build(host(hard_schemas()), &ptc(), 1);
    let rendered = render::render(&catalog);
    assert_eq!(
        lossless::check_catalog(&catalog, &rendered.description),
        Vec::<String>::new(),
        "{}",
        rendered.description
    );
    let lines: Vec<&str> = rendered.lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "refs(user: {id: int, email?: str | None}, tags?: list[Literal['a', 'b', 'c']])",
            "tree(root?: Node)",
            "unions(one_of: {kind: Literal['circle'], r: float} | {kind: Literal['square'], side: float}, any_of?: str | int | None, nullable?: str | None, const_only?: Literal[42], enum_mixed?: Literal[1, 'two', True] | None, type_array?: bool | str)",
            "objects_in_arrays(rows: list[{cells: list[{v: float, note?}]}], matrix?: list[list[int]], meta?: dict[str, list[str]])",
            "API_get_user('x-api-key', for?: int, 'user id'?, '$expand'?: bool)",
            "all_of(id, extra: bool)",
            "with_output() -> {items: list[{id: int, state: Literal['on', 'off']}]}",
        ]
    );
    assert!(
        rendered
            .description
            .contains("## types\nNode = {label, children?: list[Node]}"),
        "{}",
        rendered.description
    );
}

#[test]
fn the_check_catches_a_lossy_rendering() {
    let catalog = Catalog::build(host(hard_schemas()), &ptc(), 1);
    let rendered = render::render(&catalog);
    for (from, to) in [
        (
            "tags?: list[Literal['a', 'b', 'c']]",
            "tags?: list[Literal['a', 'b']]",
        ),
        ("user: {id: int", "user?: {id: int"),
        ("{v: float, note?}", "{v: float}"),
        ("matrix?: list[list[int]]", "matrix?: list[list]"),
        ("dict[str, list[str]]", "dict"),
        ("children?: list[Node]", "children?: list[dict]"),
    ] {
        assert!(rendered.description.contains(from), "{from}");
        let broken = rendered.description.replace(from, to);
        assert!(
            !lossless::check_catalog(&catalog, &broken).is_empty(),
            "{from} -> {to} went unnoticed"
        );
    }
}

#[test]
fn bad_input_gets_a_clear_message_or_a_sensible_rendering() {
    let long = "Does a thing. ".to_string() + &"x".repeat(10_000);
    let tools = json!([
        {"name": "unknown-keywords", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "x-vendor": 1, "if": {}, "then": {}, "patternProperties": {}}}, "frobnicate": true}},
        {"name": "cyclic", "input_schema": {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}},
        {"name": "dangling", "input_schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}},
        {"name": "long", "description": long, "input_schema": {"type": "object", "properties": {}}},
        {"name": "get weather", "input_schema": {"type": "object", "properties": {}}},
        {"name": "get-weather", "input_schema": {"type": "object", "properties": {}}},
        {"name": "get-weather", "input_schema": {"type": "object", "properties": {}}},
        {"name": "123", "input_schema": {"type": "object", "properties": {}}},
        {"name": "class", "input_schema": {"type": "object", "properties": {}}}
    ]);
    let catalog = Catalog::build(host(tools), &ptc(), 1);
    let rendered = render::render(&catalog);
    let lines: Vec<&str> = rendered.lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "unknown_keywords(a?)",
            "cyclic(**kwargs)",
            "dangling(a?: Any)",
            "long() — Does a thing.",
            "get_weather()",
            "get_weather_2()",
            "_123()",
            "class_tool()",
        ]
    );
    assert_eq!(
        catalog.report(),
        [
            "host tools: tool \"get-weather\": duplicates an earlier tool of the same name; the first is kept (skipped)",
            "tool \"get-weather\" is called get_weather_2 in code: its Python name collides with \"get weather\"",
        ]
    );
    assert!(
        rendered
            .notes
            .iter()
            .any(|n| n.contains("\"dangling\"") && n.contains("does not resolve")),
        "{:?}",
        rendered.notes
    );
}

#[test]
fn an_empty_catalog_still_offers_exec_code() {
    let catalog = Catalog::build(CatalogInput::default(), &ptc(), 1);
    let rendered = render::render(&catalog);
    assert!(
        rendered
            .description
            .ends_with("No tools are callable from code right now.")
    );
    let tools = render::llm_tools(
        &catalog,
        &rendered,
        render::Format::Anthropic,
        std::time::Duration::from_secs(60),
    );
    assert_eq!(tools.as_array().unwrap().len(), 1);
    assert_eq!(tools[0]["name"], "exec_code");
    assert_eq!(
        tools[0]["input_schema"]["properties"]["timeout"]["maximum"],
        60
    );
}

#[test]
fn malformed_manifests_name_the_file_and_the_fix() {
    let dir = TempDir::new("manifest");
    let cases = [
        (
            "not-json.json",
            "{\"tools\": [",
            "not-json.json is not valid JSON",
        ),
        ("no-tools.json", "{\"tool\": []}", "has no \"tools\" array"),
        ("string.json", "\"tools\"", "is a JSON string"),
        (
            "bad-callback.json",
            "{\"callback\": {\"url\": \"ftp://x\"}, \"tools\": []}",
            "must start with http://",
        ),
    ];
    for (name, text, want) in cases {
        let path = dir.write(name, text);
        let c = config(&[("PTC_TOOLS_FILE", path.to_str().unwrap())]);
        let err = sources::first_snapshot(&c, &[], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{name}: {err}");
    }
    let c = config(&[("PTC_TOOLS_FILE", "/nonexistent/tools.json")]);
    let err = sources::first_snapshot(&c, &[], None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot read /nonexistent/tools.json"),
        "{err}"
    );
}

fn cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn the_tools_command_prints_what_the_llm_gets() {
    let dir = TempDir::new("cli");
    let manifest = dir.write(
        "tools.json",
        &json!({"tools": [
            {"name": "complete", "description": "Finish.", "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}},
            {"name": "get-weather", "description": "Weather for a city. More text.", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            {"name": "broken", "input_schema": 5}
        ]})
        .to_string(),
    );
    let m = manifest.to_str().unwrap();
    let fs = format!(
        "fs={}",
        crate::common::corpus_dir()
            .join("filesystem.json")
            .display()
    );

    let out = cli(
        &["tools", "--mcp-catalog", &fs],
        &[("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", m)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(names(&tools), ["complete", "exec_code"]);
    assert_eq!(tools[0]["input_schema"]["required"], json!(["answer"]));
    let description = tools[1]["description"].as_str().unwrap();
    assert!(
        description.contains("\n## tools\nget_weather(city) — Weather for a city.\n"),
        "{description}"
    );
    assert!(
        description.contains("\n## fs__\ncreate_directory(path"),
        "{description}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tool #2 \"broken\": input schema is a JSON number"),
        "{stderr}"
    );

    let out = cli(
        &["tools", "--format", "openai"],
        &[("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", m)],
    );
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tools[1]["type"], "function");
    assert_eq!(tools[1]["function"]["name"], "exec_code");

    let out = cli(
        &["tools", "--format", "description"],
        &[("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", m)],
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Python with the tools below"));

    // PTC off: every tool direct, no exec_code.
    let out = cli(&["tools", "--format", "mcp"], &[("PTC_TOOLS_FILE", m)]);
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(names(&tools), ["complete", "get-weather"]);
    assert!(tools[1]["inputSchema"].is_object());

    // Bad input: clear message, exit 2, nothing on stdout.
    for (args, env, want) in [
        (
            vec!["tools", "--format", "xml"],
            vec![],
            "--format: unknown format \"xml\"",
        ),
        (
            vec!["tools"],
            vec![("PTC_TIMEOUT", "soon")],
            "PTC_TIMEOUT=\"soon\" is not valid",
        ),
        (
            vec!["tools", "--mcp-catalog", "a__b=x.json"],
            vec![],
            "must be non-empty",
        ),
    ] {
        let out = cli(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
