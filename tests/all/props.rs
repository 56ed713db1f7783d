//! Property tests (proptest), bounded for CI: generated JSON Schemas through lowering,
//! rendering and the lossless check; generated JSON through the manifest, tool-list and MCP
//! config parsers; generated bodies against the control API and the IPC bridge of a real
//! sidecar. The `cargo fuzz` targets in `fuzz/` run the same entry points for as long as one
//! likes (README, "Reliability").

use crate::common::{TEST_TIMEOUT, TestSidecar, corpus};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use ptc_sidecar::catalog::source::{ToolDef, parse_manifest, parse_tool_list};
use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy};
use ptc_sidecar::mcp;
use ptc_sidecar::render::{self, Lang, lossless};
use serde_json::{Map, Value, json};
use std::path::Path;

/// Cases per property: a few seconds each in a debug build on this machine.
const CASES: u32 = 256;
/// Requests per endpoint in the HTTP properties (each may start a Python run).
const HTTP_CASES: u32 = 48;

/// `cases`, or `PROPTEST_CASES` for a longer run (README, "Reliability").
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // A failure is saved by the test's name in the output, not in files under tests/.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Names that trip a renderer: Python keywords, JavaScript's reserved words and globals,
/// spaces, dashes, digits first, `$`, non-ASCII.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "a",
            "b",
            "id",
            "kind",
            "for",
            "class",
            "None",
            "self",
            "x-api-key",
            "user id",
            "$expand",
            "1st",
            "é",
            "",
            "a.b",
            "type",
            "items",
            "__init__",
            "delete",
            "default",
            "console",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z_][a-zA-Z0-9_-]{0,10}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        name().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
    ]
}

/// JSON Schemas as MCP servers publish them, and as they should not.
fn schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(json!({})),
        Just(json!(true)),
        prop::sample::select(vec![
            "string", "integer", "number", "boolean", "null", "object", "array", "bogus",
        ])
        .prop_map(|t| json!({ "type": t })),
        prop::collection::vec(scalar(), 1..4).prop_map(|v| json!({ "enum": v })),
        scalar().prop_map(|v| json!({ "const": v })),
        Just(json!({"$ref": "#/$defs/D"})),
        Just(json!({"$ref": "#/$defs/Missing"})),
        Just(json!({"type": ["string", "null"]})),
        Just(json!({"type": "string", "format": "date-time", "minLength": 1})),
        scalar(),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            (
                prop::collection::btree_map(name(), inner.clone(), 0..5),
                prop::collection::vec(name(), 0..3),
            )
                .prop_map(|(props, required)| json!({
                    "type": "object",
                    "properties": props,
                    "required": required,
                })),
            inner
                .clone()
                .prop_map(|i| json!({"type": "array", "items": i})),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({ "anyOf": v })),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({ "oneOf": v })),
            // allOf as servers use it, to combine object shapes: each member names its own
            // properties. Members of other types, or that give one property two types,
            // contradict each other (no value has two types) and no rendering can be exact;
            // a member with no properties (any keys) met with one that has some is beyond
            // what the lossless check's facts can tell apart.
            (
                prop::collection::btree_map(name(), inner.clone(), 2..5),
                prop::collection::vec(name(), 0..3),
            )
                .prop_map(|(props, required)| {
                    let mut members = vec![Map::new(), Map::new()];
                    for (i, (k, v)) in props.into_iter().enumerate() {
                        members[i % 2].insert(k, v);
                    }
                    json!({ "allOf": members
                        .into_iter()
                        .map(|props| json!({"type": "object", "properties": props, "required": required}))
                        .collect::<Vec<_>>() })
                }),
            inner
                .clone()
                .prop_map(|i| json!({"type": "object", "additionalProperties": i})),
            (inner.clone(), "[ -~]{0,40}").prop_map(|(mut i, d)| {
                if let Value::Object(o) = &mut i {
                    o.insert("description".into(), d.into());
                    o.insert("nullable".into(), true.into());
                }
                i
            }),
        ]
    })
}

/// A tool's input schema: an object of generated properties, with `$defs` for the `$ref`s.
fn input_schema() -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_map(name(), schema(), 0..5),
        prop::collection::vec(name(), 0..3),
        prop::collection::btree_map(name(), schema(), 0..3),
    )
        .prop_map(|(props, required, def)| {
            // `D` is an object, so a `$ref` cycle goes through a property (a tree's
            // children), as in real schemas; a cycle of nothing but references (`D = D`)
            // allows any value and is shown as Any, which the check cannot tell from a loss.
            json!({
                "type": "object",
                "properties": props,
                "required": required,
                "$defs": {"D": {"type": "object", "properties": def}},
            })
        })
}

fn tools() -> impl Strategy<Value = Vec<ToolDef>> {
    prop::collection::vec((name(), "[ -~]{0,60}", input_schema()), 1..4).prop_map(|tools| {
        tools
            .into_iter()
            .map(|(name, description, input_schema)| ToolDef {
                name,
                title: None,
                description,
                input_schema,
                output_schema: None,
                annotations: None,
            })
            .collect()
    })
}

fn ptc_policy() -> Policy {
    Policy {
        ptc_enabled: true,
        ..Policy::default()
    }
}

/// Every generated catalog renders the same twice, reads back line by line (each signature
/// and each shape definition parses), has one signature per PTC tool, and passes the
/// lossless check, in Python and in JavaScript.
#[test]
fn generated_schemas_render_read_back_and_are_lossless() {
    let mut runner = TestRunner::new(config(CASES));
    runner
        .run(&tools(), |tools| {
            let input = CatalogInput {
                host_tools: tools,
                ..CatalogInput::default()
            };
            let catalog = Catalog::build(input, &ptc_policy(), 1);
            for lang in [Lang::Python, Lang::JavaScript] {
                let rendered = render::render_in(&catalog, lang);
                let again = render::render_in(&catalog, lang);
                prop_assert_eq!(&rendered.description, &again.description);
                prop_assert_eq!(&rendered.lines, &again.lines);
                let parsed = lossless::parse_description_in(&rendered.description, lang);
                prop_assert!(
                    parsed.is_ok(),
                    "{:?}\n{}",
                    parsed.err(),
                    rendered.description
                );
                let parsed = parsed.unwrap_or_default();
                prop_assert_eq!(
                    parsed.signatures.len(),
                    catalog.ptc().count(),
                    "{}",
                    rendered.description
                );
                // Past the renderer's depth bound a type is shown as Any, on purpose and with
                // a note; only then may the check find a difference.
                let deep = rendered
                    .notes
                    .iter()
                    .any(|n| n.contains("nesting deeper than"));
                let problems = lossless::check_catalog_in(&catalog, &rendered.description, lang);
                prop_assert!(
                    deep || problems.is_empty(),
                    "{problems:#?}\n{}",
                    rendered.description
                );
            }
            Ok(())
        })
        .unwrap();
}

/// Keys the tool-file and MCP config parsers look at, so generated JSON reaches their depths.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "tools",
            "callback",
            "url",
            "headers",
            "name",
            "description",
            "input_schema",
            "inputSchema",
            "parameters",
            "function",
            "type",
            "properties",
            "mcpServers",
            "command",
            "args",
            "env",
            "disabled",
            "transport",
            "annotations",
            "readOnlyHint",
            "outputSchema",
            "title",
        ])
        .prop_map(str::to_string),
        name(),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A corpus tool list with one value somewhere replaced by generated JSON.
fn mutated_corpus() -> impl Strategy<Value = Value> {
    let lists: Vec<Value> = corpus()
        .into_iter()
        .map(|saved| {
            let text = std::fs::read_to_string(&saved.path).unwrap();
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    (prop::sample::select(lists), any::<u64>(), json_value()).prop_map(|(mut list, at, with)| {
        replace_nth(&mut list, at, with);
        list
    })
}

/// Replaces the `n % count`th value of a depth-first walk of `value` with `with`.
fn replace_nth(value: &mut Value, n: u64, with: Value) {
    fn count(v: &Value) -> u64 {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
    fn walk(v: &mut Value, n: &mut u64, with: &mut Option<Value>) {
        if *n == 0 {
            if let Some(w) = with.take() {
                *v = w;
            }
            return;
        }
        *n -= 1;
        match v {
            Value::Array(a) => a.iter_mut().for_each(|c| walk(c, n, with)),
            Value::Object(o) => o.values_mut().for_each(|c| walk(c, n, with)),
            _ => {}
        }
    }
    let mut n = n % count(value);
    walk(value, &mut n, &mut Some(with));
}

/// Whatever the JSON, the parsers answer (a value or an error that says something) and what
/// they accept renders; never a panic.
#[test]
fn tool_files_and_mcp_configs_are_parsed_or_refused_clearly() {
    let mut runner = TestRunner::new(config(CASES));
    let any_json = prop_oneof![json_value(), mutated_corpus()];
    runner
        .run(&any_json, |value| {
            let path = Path::new("generated.json");
            match parse_manifest(path, &value) {
                Ok((manifest, _problems)) => {
                    let input = CatalogInput {
                        host_tools: manifest.tools,
                        ..CatalogInput::default()
                    };
                    let catalog = Catalog::build(input, &ptc_policy(), 1);
                    let rendered = render::render(&catalog);
                    prop_assert!(
                        lossless::parse_description(&rendered.description).is_ok(),
                        "{}",
                        rendered.description
                    );
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            if let Err(e) = parse_tool_list("generated", &value) {
                prop_assert!(!e.to_string().is_empty());
            }
            if let Err(e) = mcp::config::parse(path, &value) {
                prop_assert!(e.to_string().contains("generated.json"), "{e}");
            }
            Ok(())
        })
        .unwrap();
}

/// Bodies for the control API: generated JSON with the keys the endpoints read, or bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let keys = prop::sample::select(vec![
        "code",
        "timeout_ms",
        "timeout",
        "lang",
        "session_id",
        "continuation_token",
        "tool_results",
        "call_id",
        "result",
        "is_error",
        "files",
        "tools",
        "id",
        "name",
    ]);
    let fields = prop::collection::btree_map(
        keys.prop_map(str::to_string),
        prop_oneof![
            json_value(),
            // Code that runs: quick, and some of it calls a tool that does not exist.
            prop::sample::select(vec![
                "print(1)",
                "raise SystemExit(3)",
                "await nope()",
                "",
                "x = 1 +",
            ])
            .prop_map(Value::from),
            (1u64..2000).prop_map(Value::from),
        ],
        0..6,
    );
    prop_oneof![
        fields.prop_map(|m| serde_json::to_vec(&m).unwrap()),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

/// No body makes the control API or the IPC bridge answer 5xx (or not answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_bodies_get_4xx_or_an_answer_never_5xx() {
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_WARM_WORKERS", "1"),
            ("PTC_TIMEOUT", "5"),
        ])
        .await;
        let ipc = s.sidecar.state.runner.as_ref().unwrap().ipc_addr();
        let mut targets: Vec<(String, String)> = [
            "/v1/exec_code",
            "/v1/exec/r0/results",
            "/exec/programmatic",
            "/exec/programmatic/cancel",
            "/exec",
        ]
        .iter()
        .map(|p| (s.url(p), String::new()))
        .collect();
        for route in ["/call", "/tool_call", "/bash/x"] {
            targets.push((format!("http://{ipc}{route}"), "Bearer forged".into()));
        }
        let mut runner = TestRunner::new(config(HTTP_CASES));
        for (url, auth) in targets {
            for _ in 0..HTTP_CASES {
                let body = body().new_tree(&mut runner).unwrap().current();
                let mut request = s.http.post(&url).body(body.clone());
                if !auth.is_empty() {
                    request = request.header("authorization", &auth);
                }
                let response = request.send().await.unwrap();
                let status = response.status();
                let text = response.text().await.unwrap();
                assert!(
                    !status.is_server_error(),
                    "{url} answered {status} {text} to {}",
                    String::from_utf8_lossy(&body)
                );
            }
        }
    })
    .await
    .unwrap();
}

/// Bodies for the IPC bridge: generated JSON with the keys its routes read (naming a tool of
/// the catalog, one it lacks, or a generated name), or bytes.
fn ipc_body() -> impl Strategy<Value = Vec<u8>> {
    let keys = prop::sample::select(vec!["tool", "args", "input", "query", "limit", "name"]);
    let tool = prop::sample::select(vec!["echo", "done", "nope", "", "echo\u{0}", "__init__"])
        .prop_map(Value::from);
    let fields = prop::collection::btree_map(
        keys.prop_map(str::to_string),
        prop_oneof![json_value(), tool, (0u64..100_000).prop_map(Value::from)],
        0..4,
    );
    prop_oneof![
        fields.prop_map(|m| serde_json::to_vec(&m).unwrap()),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

/// With a live run's own token, generated bodies reach the IPC routes' parsing and the tools
/// behind them: never a 5xx, a body over the limit refused before it is read, and the run that
/// lent its token goes on undisturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_ipc_bodies_with_a_runs_token_get_4xx_or_an_answer_never_5xx() {
    use crate::common::{HostServer, TempDir, tool};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let token: Arc<Mutex<Option<String>>> = Arc::default();
        let finished = Arc::new(AtomicBool::new(false));
        let host = {
            let (token, finished) = (token.clone(), finished.clone());
            HostServer::start(vec![
                (
                    "lend_token",
                    tool(move |input| {
                        let lent = input["token"].as_str().map(str::to_string);
                        token.lock().unwrap().get_or_insert_with(|| lent.unwrap_or_default());
                        json!({"result": "ok"})
                    }),
                ),
                (
                    "done",
                    tool(move |_| json!({"result": finished.load(Ordering::SeqCst)})),
                ),
                ("echo", tool(|input| json!({"result": input}))),
            ])
            .await
        };
        let object = json!({"type": "object"});
        let manifest = json!({
            "callback": {"url": host.url()},
            "tools": [
                {"name": "lend_token", "description": "Hand the run's token to the test.",
                 "input_schema": {"type": "object", "properties": {"token": {"type": "string"}},
                                  "required": ["token"]}},
                {"name": "done", "description": "Whether the test is done.", "input_schema": object},
                {"name": "echo", "description": "Answer the input.", "input_schema": object},
            ]
        });
        let dir = TempDir::new("props-ipc");
        let path = dir.write("tools.json", &manifest.to_string());
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_WARM_WORKERS", "0"),
            ("PTC_TIMEOUT", "100"),
            ("PTC_TOOLS_FILE", path.to_str().unwrap()),
        ])
        .await;
        let ipc = s.sidecar.state.runner.as_ref().unwrap().ipc_addr();
        let lender = {
            let (http, url) = (s.http.clone(), s.url("/v1/exec_code"));
            let code = "import ptc_sdk, asyncio\n\
                        await lend_token(token=ptc_sdk._client.token)\n\
                        while not await done():\n    await asyncio.sleep(0.05)\n\
                        print('undisturbed')\n";
            tokio::spawn(async move {
                let body = json!({"code": code, "timeout_ms": 100_000});
                let response = http.post(url).json(&body).send().await.unwrap();
                response.json::<Value>().await.unwrap()
            })
        };
        let token = loop {
            if let Some(t) = token.lock().unwrap().clone() {
                break t;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert!(!token.is_empty(), "the run lent no token");
        let auth = format!("Bearer {token}");
        let routes = [
            "/call",
            "/tool_call",
            "/bash/echo",
            "/bash/nope",
            "/file?name=out.txt",
            "/file?name=../x",
            "/file",
            "/search",
            "/describe",
        ];
        let mut runner = TestRunner::new(config(HTTP_CASES));
        let mut answered = std::collections::BTreeMap::<u16, usize>::new();
        for route in routes {
            let url = format!("http://{ipc}{route}");
            for _ in 0..HTTP_CASES {
                let body = ipc_body().new_tree(&mut runner).unwrap().current();
                let response = s
                    .http
                    .post(&url)
                    .header("authorization", &auth)
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                let status = response.status();
                let text = response.text().await.unwrap();
                assert!(
                    !status.is_server_error(),
                    "{route} answered {status} {text} to {}",
                    String::from_utf8_lossy(&body)
                );
                *answered.entry(status.as_u16()).or_default() += 1;
            }
        }
        eprintln!("IPC answers by status: {answered:?}");
        // The bodies got past the token: some were answered, some refused for what they said.
        assert!(answered.contains_key(&200), "{answered:?}");
        assert!(answered.contains_key(&400), "{answered:?}");
        assert!(!answered.contains_key(&401), "{answered:?}");
        // Over the limit: refused, not buffered.
        let huge = vec![b' '; ptc_sidecar::run::ipc::MAX_CALL_BYTES + 1];
        let response = s
            .http
            .post(format!("http://{ipc}/call"))
            .header("authorization", &auth)
            .body(huge)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 413);

        finished.store(true, Ordering::SeqCst);
        let r = lender.await.unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["stdout"], "undisturbed\n", "{r}");
        let r = s.exec("print(1)").await;
        assert_eq!(r["stdout"], "1\n", "{r}");
    })
    .await
    .unwrap();
}

/// One generated result: for the pending call (or another id), the result, `is_error`.
type GeneratedResult = (bool, Value, Value);

/// One generated continuation: results, and what to spoil (0: nothing, 1: the token's last
/// character, 2: `tool_results` replaced by the generated JSON, 3: the body by the bytes).
fn continuation() -> impl Strategy<Value = (Vec<GeneratedResult>, u8, Value, Vec<u8>)> {
    let is_error = prop_oneof![any::<bool>().prop_map(Value::from), json_value()];
    (
        prop::collection::vec((any::<bool>(), json_value(), is_error), 0..3),
        0u8..4,
        json_value(),
        prop::collection::vec(any::<u8>(), 0..100),
    )
}

/// The continuation protocol with real tokens: generated results for the pending call, spoilt
/// tokens and junk bodies are answered (the run goes on) or refused with a 4xx, never a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_continuations_with_real_tokens_get_4xx_or_an_answer_never_5xx() {
    use crate::librechat::{PROGRAMMATIC, post, sidecar, tools};
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let s = sidecar(&[]).await;
        let first = json!({
            "code": "for i in range(100):\n    try:\n        print(await add(a=i, b=1))\n    except ToolError as e:\n        print(e)\n",
            "tools": tools(),
            "timeout": 20000,
        });
        let mut runner = TestRunner::new(config(HTTP_CASES * 2));
        let mut answered = std::collections::BTreeMap::<u16, usize>::new();
        let mut pending = Value::Null;
        for _ in 0..HTTP_CASES * 2 {
            if pending["status"] != "tool_call_required" {
                let (status, r) = post(&s, PROGRAMMATIC, &first).await;
                assert_eq!(status, 200, "{r}");
                pending = r;
            }
            let (results, spoil, junk, bytes) =
                continuation().new_tree(&mut runner).unwrap().current();
            let id = &pending["tool_calls"][0]["id"];
            let results: Vec<Value> = results
                .into_iter()
                .map(|(real, result, is_error)| {
                    let call_id = if real { id.clone() } else { json!("call_nope") };
                    json!({"call_id": call_id, "result": result, "is_error": is_error})
                })
                .collect();
            let mut token = pending["continuation_token"].as_str().unwrap().to_string();
            if spoil == 1 {
                let last = token.pop().unwrap();
                token.push(if last == 'a' { 'b' } else { 'a' });
            }
            let mut body = json!({"continuation_token": token, "tool_results": results});
            if spoil == 2 {
                body["tool_results"] = junk;
            }
            let request = s.http.post(s.url(PROGRAMMATIC));
            let request = if spoil == 3 {
                request.body(bytes.clone())
            } else {
                request.json(&body)
            };
            let response = request.send().await.unwrap();
            let status = response.status();
            let text = response.text().await.unwrap();
            assert!(
                !status.is_server_error(),
                "{status} {text} to {body} (spoil {spoil})"
            );
            *answered.entry(status.as_u16()).or_default() += 1;
            if status == 200 {
                pending = serde_json::from_str(&text).unwrap();
            }
        }
        eprintln!("continuation answers by status: {answered:?}");
        // Some rounds went on with the real token, and some bodies were refused.
        assert!(answered.get(&200).is_some_and(|n| *n > 1), "{answered:?}");
        assert!(answered.keys().any(|s| (400..500).contains(s)), "{answered:?}");
    })
    .await
    .unwrap();
}
