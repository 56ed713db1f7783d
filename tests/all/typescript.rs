//! The `exec_code` description in JavaScript (TypeScript signatures, issue 39) over the 15 real
//! catalogs: every line reads back against its schema with nothing lost, it costs no more than
//! the Python one within 10%, the same catalog gives the same bytes; `GET /v1/tools?lang=` and
//! `PTC_LANG`.

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, config, corpus, corpus_all};
use pretty_assertions::assert_eq;
use ptc_sidecar::catalog::Catalog;
use ptc_sidecar::render::description::PREAMBLE_JS;
use ptc_sidecar::render::{Lang, lossless, render_in, tokens};
use ptc_sidecar::sources;
use serde_json::{Value, json};

/// The JavaScript form may cost this much more than the Python one (issue 39: within 10%).
const MAX_EXTRA: f64 = 0.10;

fn lossless_in(catalog: &Catalog, lang: Lang) -> Vec<String> {
    let r = render_in(catalog, lang);
    lossless::check_catalog_in(catalog, &r.description, lang)
}

#[test]
fn the_corpus_reads_back_losslessly_in_typescript() {
    let c = config(&[("PTC_ENABLED", "true")]);
    // The seven together, within the default budget: the rich level.
    let snapshot = sources::first_snapshot(&c, &corpus(), None).unwrap();
    let rich = snapshot.rendered_in(Lang::JavaScript);
    assert!(
        rich.description
            .contains(" // Read the complete contents of a file as text.\n"),
        "not the rich level"
    );
    assert_eq!(
        lossless::check_catalog_in(&snapshot.catalog, &rich.description, Lang::JavaScript),
        Vec::<String>::new()
    );
    // Each of the 15 alone, rich (within the budget) and compact, as lossless as in Python.
    for saved in corpus_all() {
        let s = sources::first_snapshot(&c, std::slice::from_ref(&saved), None).unwrap();
        let mut compact = s.catalog.clone();
        compact.description_budget = None;
        for catalog in [&s.catalog, &compact] {
            for lang in [Lang::Python, Lang::JavaScript] {
                assert_eq!(
                    lossless_in(catalog, lang),
                    Vec::<String>::new(),
                    "{} {lang}",
                    saved.server
                );
            }
        }
    }
}

#[test]
fn the_corpus_costs_no_more_in_typescript_and_renders_the_same_bytes() {
    let _vocabulary = tokens::scope();
    let c = config(&[("PTC_ENABLED", "true")]);
    let (mut python, mut javascript) = (0, 0);
    let mut over = Vec::new();
    for saved in corpus_all() {
        let s = sources::first_snapshot(&c, std::slice::from_ref(&saved), None).unwrap();
        let mut compact = s.catalog.clone();
        compact.description_budget = None;
        for (level, catalog) in [("budgeted", &s.catalog), ("compact", &compact)] {
            let py = tokens::count(&render_in(catalog, Lang::Python).description);
            let js_rendered = render_in(catalog, Lang::JavaScript);
            let js = tokens::count(&js_rendered.description);
            // Same input, same bytes.
            assert_eq!(render_in(catalog, Lang::JavaScript), js_rendered);
            eprintln!(
                "{:<20} {level:<8} python {py:>6} javascript {js:>6}",
                saved.server
            );
            if level == "budgeted" {
                python += py;
                javascript += js;
            }
            if js as f64 > py as f64 * (1.0 + MAX_EXTRA) {
                over.push(format!("{} {level}: {js} > {py} + 10%", saved.server));
            }
        }
    }
    eprintln!("all 15 python {python} javascript {javascript}");
    assert_eq!(over, Vec::<String>::new());
}

#[test]
fn the_budget_holds_in_typescript() {
    let _vocabulary = tokens::scope();
    let c = config(&[("PTC_ENABLED", "true"), ("PTC_DESCRIPTION_BUDGET", "2000")]);
    let s = sources::first_snapshot(&c, &corpus_all(), None).unwrap();
    let js = s.rendered_in(Lang::JavaScript);
    assert!(tokens::count(&js.description) <= 2000);
    assert!(js.listed < js.lines.len(), "{}", js.description);
    assert!(js.description.contains("searchTools"), "{}", js.description);
    // The lines are the same tools, in the same order, as Python's (search hits index both).
    let tools = |r: &ptc_sidecar::render::Rendered| -> Vec<String> {
        r.lines.iter().map(|(name, _)| name.clone()).collect()
    };
    assert_eq!(tools(js), tools(&s.rendered));
}

fn manifest(dir: &TempDir) -> String {
    dir.write(
        "tools.json",
        &json!({"tools": [
            {"name": "lookup", "description": "Look a thing up.", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
        ]})
        .to_string(),
    )
    .to_string_lossy()
    .into_owned()
}

async fn tools(s: &TestSidecar, query: &str) -> (u16, String, Value) {
    let r = s
        .http
        .get(s.url(&format!("/v1/tools{query}")))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let etag = r
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, etag, r.json().await.unwrap_or(Value::Null))
}

fn exec_code(body: &Value) -> (&str, &str) {
    let tool = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "exec_code")
        .unwrap();
    (
        tool["description"].as_str().unwrap(),
        tool["input_schema"]["properties"]["code"]["description"]
            .as_str()
            .unwrap(),
    )
}

#[tokio::test]
async fn tools_in_either_language_by_query_or_by_default() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("ts");
        let m = manifest(&dir);
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_TOOLS_FILE", &m)]).await;
        let (status, python_etag, body) = tools(&s, "").await;
        assert_eq!((status, body["lang"].as_str()), (200, Some("python")));
        assert!(
            exec_code(&body)
                .0
                .contains("\nlookup(q) — Look a thing up.")
        );
        for lang in ["javascript", "js", "typescript", "ts"] {
            let (status, etag, body) = tools(&s, &format!("?lang={lang}")).await;
            assert_eq!((status, body["lang"].as_str()), (200, Some("javascript")));
            let (description, code) = exec_code(&body);
            assert!(
                description.contains("\nlookup({q}) // Look a thing up."),
                "{description}"
            );
            assert_eq!(code, "JavaScript source to run.");
            // Another description of the same catalog: another entity tag.
            assert_ne!(etag, python_etag);
        }
        let (status, _, body) = tools(&s, "?lang=ruby").await;
        assert_eq!(status, 400);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("python, javascript (also js, typescript, ts)"),
            "{body}"
        );
        // PTC_LANG sets the default; `?lang=python` still gives Python.
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", &m),
            ("PTC_LANG", "javascript"),
        ])
        .await;
        let (_, etag, body) = tools(&s, "").await;
        assert!(
            exec_code(&body)
                .0
                .contains("\nlookup({q}) // Look a thing up.")
        );
        let (_, _, same) = tools(&s, "?lang=ts").await;
        assert_eq!(same, body);
        let r = s
            .http
            .get(s.url("/v1/tools"))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 304);
        let (_, _, body) = tools(&s, "?lang=python").await;
        assert!(
            exec_code(&body)
                .0
                .contains("\nlookup(q) — Look a thing up.")
        );
        // The MCP front door's `exec_code` takes the default too.
        let listed = mcp_tools_list(&s).await;
        let tool = &listed["result"]["tools"][0];
        assert_eq!(tool["name"], "exec_code", "{listed}");
        assert!(
            tool["description"]
                .as_str()
                .unwrap()
                .starts_with(PREAMBLE_JS),
            "{listed}"
        );
        assert_eq!(
            tool["inputSchema"]["properties"]["code"]["description"],
            "JavaScript source to run."
        );
        // And a call that names no `lang` runs JavaScript, there and on the runtime's door.
        assert_eq!(
            tool["inputSchema"]["properties"]["lang"]["default"],
            "javascript"
        );
        let r = s
            .exec_body(json!({"code": "console.log(typeof tools, [1, 2].length)"}))
            .await;
        assert_eq!(r["stdout"], "object 2\n", "{r}");
        let r = s
            .exec_body(json!({"code": "print(1)", "lang": "python"}))
            .await;
        assert_eq!(r["stdout"], "1\n", "{r}");
    })
    .await
    .expect("in time");
}

/// The MCP front door's `tools/list`, after the handshake, over streamable HTTP.
async fn mcp_tools_list(s: &TestSidecar) -> Value {
    let mut session = None;
    let mut last = Value::Null;
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "typescript-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ] {
        let mut r = s
            .http
            .post(s.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&message);
        if let Some(id) = &session {
            r = r.header("mcp-session-id", id);
        }
        let r = r.send().await.unwrap();
        if let Some(id) = r.headers().get("mcp-session-id") {
            session = Some(id.to_str().unwrap().to_string());
        }
        let text = r.text().await.unwrap();
        // An event stream's first event may be an empty one (a priming event).
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:").map(str::trim))
            .find(|d| !d.is_empty());
        let is_stream = text.starts_with("data:") || text.starts_with("id:");
        if let Some(data) =
            data.or((!is_stream && !text.trim().is_empty()).then_some(text.as_str()))
        {
            last = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {text}"));
        }
    }
    last
}
