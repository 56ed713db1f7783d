//! `POST /v1/exec_code/preview` end to end: a sidecar with host tools (a callback server the
//! test serves and counts), the demo MCP server and a direct tool, previewing Python and bash
//! through the real analyzer run (real python3, confined) and `bash -n`. Known tools with their
//! lines, unknown names with suggestions, dynamic calls, syntax errors, hostile input, and
//! never a run, never a call.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, tool};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::Duration;

const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

struct Fixture {
    s: TestSidecar,
    host: HostServer,
    _dir: TempDir,
}

/// Host tools `get-weather` and `noop` (PTC) and `complete` (direct by default), and the demo
/// MCP server's tools as `demo__*`.
async fn fixture(extra: &[(&str, &str)]) -> Fixture {
    let host = HostServer::start(vec![
        (
            "get-weather",
            tool(|input| json!({"result": {"city": input["city"]}})),
        ),
        ("noop", tool(|_| json!({"result": null}))),
    ])
    .await;
    let dir = TempDir::new("preview");
    let open = json!({"type": "object", "properties": {}});
    let manifest = json!({
        "callback": {"url": host.url()},
        "tools": [
            {"name": "get-weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"name": "noop", "input_schema": open},
            {"name": "complete", "input_schema": open},
        ]
    });
    let tools = dir.write("tools.json", &manifest.to_string());
    let mcp = dir.write(
        "mcp.json",
        &json!({"mcpServers": {"demo": {"command": DEMO}}}).to_string(),
    );
    let (tools, mcp) = (tools.to_str().unwrap(), mcp.to_str().unwrap());
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_TOOLS_FILE", tools),
        ("PTC_MCP_CONFIG", mcp),
    ];
    vars.extend_from_slice(extra);
    let s = TestSidecar::start(&vars).await;
    Fixture { s, host, _dir: dir }
}

/// `POST /v1/exec_code/preview` with `body`: the status and the JSON answer.
async fn preview_body(s: &TestSidecar, body: Value) -> (u16, Value) {
    let r = s
        .http
        .post(s.url("/v1/exec_code/preview"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A preview that must succeed, without its `catalog_version`.
async fn preview(s: &TestSidecar, code: &str, lang: &str) -> Value {
    let (status, mut answer) = preview_body(s, json!({"code": code, "lang": lang})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["catalog_version"].is_u64(), "{answer}");
    answer.as_object_mut().unwrap().remove("catalog_version");
    answer
}

const DYNAMIC: &str = "a tool chosen at run time cannot be previewed";

#[tokio::test]
async fn python_known_unknown_and_dynamic_tools_with_their_lines() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Each listed tool says whether it waits for a person and its limits.
        let limits = r#"{"demo__*": {"max_concurrent": 4}, "demo__add": {"max_per_run": 3, "max_concurrent": 8}}"#;
        let f = fixture(&[("PTC_APPROVE_TOOLS", "get-*"), ("PTC_TOOL_LIMITS", limits)]).await;
        let code = r#"import asyncio
w = await get_weather(city="Paris")
s = await demo__add(a=1, b=2)
from tools import noop as nothing
await nothing()
r = await asyncio.gather(tools.demo__multiply(a=2, b=3), get_wether(city="x"))
await call_tool("get-weather", city="Lima")
name = "noop"
await getattr(tools, name)()
await call_tool(name)
await complete(answer="done")
def helper(x):
    return len(x)
print(helper([1]), describe, json.dumps({}))
f = demo__stats
await f(numbers=[1])
await tools.demo__nope()
"#;
        let mut answer = preview(&f.s, code, "python").await;
        // The closest names, nearest first: the first is the one meant.
        let mut meant = Vec::new();
        for u in answer["unknown"].as_array_mut().unwrap() {
            if let Some(close) = u.get_mut("did_you_mean") {
                meant.push(close.get(0).cloned().unwrap_or(Value::Null));
                *close = json!([]);
            }
        }
        assert_eq!(meant, [json!("get_weather"), Value::Null, json!("demo__noop")]);
        assert_eq!(
            answer,
            json!({
                "lang": "python",
                "tools": [
                    {"name": "get-weather", "python": "get_weather", "lines": [2, 7], "approval": true, "limits": null},
                    {"name": "demo__add", "python": "demo__add", "lines": [3], "approval": false,
                     "limits": {"max_concurrent": 4, "per_second": null, "max_per_run": 3}},
                    {"name": "noop", "python": "noop", "lines": [4, 5], "approval": false, "limits": null},
                    {"name": "demo__multiply", "python": "demo__multiply", "lines": [6], "approval": false,
                     "limits": {"max_concurrent": 4, "per_second": null, "max_per_run": null}},
                    {"name": "demo__stats", "python": "demo__stats", "lines": [15], "approval": false,
                     "limits": {"max_concurrent": 4, "per_second": null, "max_per_run": null}},
                ],
                "unknown": [
                    {"name": "get_wether", "line": 6, "lines": [6], "did_you_mean": []},
                    {"name": null, "line": 9, "dynamic": true, "what": "getattr(tools, <a name chosen at run time>)", "note": DYNAMIC},
                    {"name": null, "line": 10, "dynamic": true, "what": "call_tool(<a name chosen at run time>)", "note": DYNAMIC},
                    {"name": "complete", "line": 11, "lines": [11], "did_you_mean": [], "direct": true,
                     "note": "a direct tool: the model calls it itself, code cannot"},
                    {"name": "demo__nope", "line": 17, "lines": [17], "did_you_mean": []},
                ],
                "syntax_error": null,
                "truncated": false,
            })
        );

        // Other ways to a tool chosen at run time.
        let code = "g = globals()\nt = tools\nawait tools.__dict__[name]()\nexec(src)\nawait vars(tools)['noop']()\n";
        let answer = preview(&f.s, code, "python").await;
        let dynamic: Vec<(u64, &str)> = answer["unknown"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (u["line"].as_u64().unwrap(), u["what"].as_str().unwrap()))
            .collect();
        assert_eq!(
            dynamic,
            [
                (1, "the code's globals kept or passed around"),
                (2, "the tools module kept or passed around (tools)"),
                (3, "tools[...]"),
                (4, "exec(...): code run from a string"),
            ]
        );
        assert_eq!(
            answer["tools"],
            json!([{"name": "noop", "python": "noop", "lines": [5], "approval": false, "limits": null}])
        );
        assert_eq!(f.host.calls.load(std::sync::atomic::Ordering::Relaxed), 0);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn syntax_errors_name_their_line() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let answer = preview(&f.s, "x = 1\nawait noop()\nif x:\nprint(x)\n", "python").await;
        assert_eq!(answer["syntax_error"]["line"], 4, "{answer}");
        let message = answer["syntax_error"]["message"].as_str().unwrap();
        assert!(message.contains("expected an indented block"), "{message}");
        assert_eq!(answer["tools"], json!([]));

        let answer = preview(&f.s, "ok = 1\nprint('unclosed\n", "python").await;
        assert_eq!(answer["syntax_error"]["line"], 2, "{answer}");

        let answer = preview(&f.s, "noop '{}'\nif true; then\n  echo\nfi fi\n", "bash").await;
        assert_eq!(
            answer["syntax_error"],
            json!({"line": 4, "message": "syntax error near unexpected token `fi'"})
        );
        assert_eq!(answer["syntax_checked"], true);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bash_scripts_list_the_tool_functions_they_name() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"w=$(get_weather '{"city": "Paris"}')
echo "$w" | jq .city
demo__add '{"a": 1, "b": 2}' > sum.json
# noop, in a comment, is no call
xargs -I{} bash -c 'noop' < /dev/null
echo get_weather demo__multiply
cat <<EOF
demo__stats in a here-document is text
EOF
if demo__noop; then echo "$(demo__fail '{}')"; fi
"#;
        let answer = preview(&f.s, code, "bash").await;
        let note = answer["note"].as_str().unwrap().to_string();
        assert!(note.contains("none is reported as unknown"), "{note}");
        assert_eq!(
            answer,
            json!({
                "lang": "bash",
                "tools": [
                    {"name": "get-weather", "python": "get_weather", "lines": [1], "approval": false, "limits": null},
                    {"name": "demo__add", "python": "demo__add", "lines": [3], "approval": false, "limits": null},
                    {"name": "noop", "python": "noop", "lines": [5], "approval": false, "limits": null},
                    {"name": "demo__fail", "python": "demo__fail", "lines": [10], "approval": false, "limits": null},
                    {"name": "demo__noop", "python": "demo__noop", "lines": [10], "approval": false, "limits": null},
                ],
                "unknown": [],
                "syntax_error": null,
                "syntax_checked": true,
                "truncated": false,
                "note": note,
            })
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn hostile_and_bad_input_get_clear_answers_and_hurt_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_API_KEY", "k-preview")]).await;
        let s = &f.s;
        let post = |body: Value, key: Option<&'static str>| {
            let mut r = s.http.post(s.url("/v1/exec_code/preview")).json(&body);
            if let Some(key) = key {
                r = r.header("X-API-Key", key);
            }
            async move {
                let r = r.send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            }
        };
        let key = Some("k-preview");

        let (status, _) = post(json!({"code": "await noop()"}), None).await;
        assert_eq!(status, 401);

        // Deep nesting: Python refuses each, and so does the analyzer, as a syntax error.
        let parens = "(".repeat(100_000) + &")".repeat(100_000);
        let minus = "- ".repeat(100_000) + "x";
        let dots = "x".to_string() + &".a".repeat(100_000);
        for (code, said) in [
            (parens, "too many nested parentheses"),
            (minus, "nested too deeply"),
            (dots, "nested too deeply"),
        ] {
            let (status, answer) = post(json!({"code": code}), key).await;
            assert_eq!(status, 200, "{answer}");
            let message = answer["syntax_error"]["message"].as_str().unwrap();
            assert!(message.contains(said), "{message}");
            assert_eq!(answer["tools"], json!([]));
        }
        // Deep nesting in bash: bounded by the scanner's depth, checked by bash -n.
        let deep = "echo ".to_string() + &"$(".repeat(20_000) + "noop" + &")".repeat(20_000);
        let (status, answer) = post(json!({"code": deep, "lang": "bash"}), key).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["tools"], json!([]));
        let message = answer["syntax_error"]["message"].as_str().unwrap();
        assert!(message.contains("nested too deeply for bash"), "{message}");

        // Over the body limit, a lang that is not run, no code.
        let huge = "x = 1\n".repeat(200_000);
        let (status, answer) = post(json!({"code": huge}), key).await;
        assert_eq!(
            (status, &answer["error"]["type"]),
            (413, &json!("too_large"))
        );
        let (status, answer) = post(json!({"code": "1", "lang": "ruby"}), key).await;
        assert_eq!(status, 400);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("use \"python\""), "{message}");
        let (status, answer) = post(json!({"source": "1"}), key).await;
        assert_eq!(status, 400);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(r#"{"code": "...""#), "{message}");

        // The sidecar is as it was: it previews and runs.
        let (status, answer) = post(json!({"code": "await noop()"}), key).await;
        assert_eq!((status, &answer["tools"][0]["name"]), (200, &json!("noop")));
        let r = s
            .http
            .post(s.url("/v1/exec_code"))
            .header("X-API-Key", "k-preview")
            .json(&json!({"code": "print(await noop())"}))
            .send()
            .await
            .unwrap();
        let r: Value = r.json().await.unwrap();
        assert_eq!(
            (r["status"].as_str(), r["stdout"].as_str()),
            (Some("ok"), Some("None\n"))
        );
    })
    .await
    .unwrap();
}

/// Events the sidecar emitted since the last drain.
fn drain(events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<str>>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(e) = events.try_recv() {
        let v: Value = serde_json::from_str(&e).unwrap();
        out.push(v["type"].as_str().unwrap_or_default().to_string());
    }
    out
}

async fn runs_total(s: &TestSidecar) -> Vec<String> {
    let text = s.http.get(s.url("/metrics")).send().await.unwrap();
    let text = text.text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("ptc_runs_total") || l.starts_with("ptc_tool_calls_total"))
        .map(str::to_string)
        .collect()
}

/// The code would print, write a file and call a host tool: run, it does all three (the
/// control); previewed, none, and no event says a run or a call happened. The sandbox is off
/// so that the control run can write where the test looks.
#[tokio::test]
async fn a_preview_is_never_a_run_and_never_a_call() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_SANDBOX", "off")]).await;
        let out = TempDir::new("preview-proof");
        let proof = out.0.join("proof.txt");
        let python = format!(
            "print('ran')\nopen({:?}, 'w').write('ran')\nawait noop()\nawait get_weather(city='x')\n",
            proof.to_str().unwrap()
        );
        let bash = format!(
            "echo ran > {}\nnoop '{{}}'\n",
            proof.to_str().unwrap()
        );
        let mut events = f.s.sidecar.state.events.subscribe();
        // The dashboard's board starts with its first request: from here it sees every run.
        let board = f.s.get_json("/v1/dashboard/state").await;
        assert_eq!(board["runs"], json!([]), "{board}");
        let calls = || f.host.calls.load(std::sync::atomic::Ordering::Relaxed);

        // The control: run, the code does what it says.
        let r = f.s.exec(&python).await;
        assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("ran\n")), "{r}");
        assert!(proof.exists());
        assert_eq!(calls(), 2);
        std::fs::remove_file(&proof).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seen = drain(&mut events);
        assert!(seen.contains(&"exec.started".to_string()), "{seen:?}");
        assert!(seen.contains(&"tool_call.started".to_string()), "{seen:?}");
        let before = runs_total(&f.s).await;
        assert!(!before.is_empty());

        // Previewed: the tools are found, nothing happens.
        let answer = preview(&f.s, &python, "python").await;
        let names: Vec<&str> = answer["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["noop", "get-weather"]);
        let answer = preview(&f.s, &bash, "bash").await;
        assert_eq!(answer["tools"][0]["name"], "noop", "{answer}");
        assert_eq!(answer["syntax_error"], Value::Null);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(calls(), 2, "a preview called a tool");
        assert!(!proof.exists(), "a preview ran the code");
        assert_eq!(drain(&mut events), Vec::<String>::new());
        assert_eq!(runs_total(&f.s).await, before);
        let board = f.s.get_json("/v1/dashboard/state").await;
        let runs = board["runs"].as_array().map_or(0, Vec::len);
        assert_eq!(runs, 1, "{board}");
    })
    .await
    .unwrap();
}

/// JavaScript and TypeScript are read in the sidecar: the tools named, by JavaScript name,
/// `tools.x` or `callTool`, an unknown name with the closest tools, a direct tool, a place
/// chosen at run time; code nested too deeply is a syntax error and hurts nothing.
#[tokio::test]
async fn javascript_known_unknown_and_dynamic_tools_with_their_lines() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = "const w = await get_weather({city: \"Paris\"});\n\
                    const s = await tools.demo__add({a: 1, b: 2});\n\
                    await callTool(\"noop\", {});\n\
                    await get_wether({city: \"x\"});\n\
                    await complete({});\n\
                    const name = \"noop\";\nawait callTool(name, {});\n";
        for lang in ["javascript", "typescript"] {
            let answer = preview(&f.s, code, lang).await;
            assert_eq!(answer["lang"], lang);
            let tools: Vec<(&str, Value)> = answer["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t["name"].as_str().unwrap(), t["lines"].clone()))
                .collect();
            assert_eq!(
                tools,
                [
                    ("get-weather", json!([1])),
                    ("demo__add", json!([2])),
                    ("noop", json!([3]))
                ],
                "{answer}"
            );
            let unknown = &answer["unknown"];
            assert_eq!(unknown[0]["name"], "get_wether", "{answer}");
            assert_eq!(unknown[0]["did_you_mean"][0], "get_weather", "{answer}");
            assert_eq!(unknown[1]["name"], "complete", "{answer}");
            assert_eq!(unknown[1]["direct"], true, "{answer}");
            assert_eq!(unknown[2]["dynamic"], true, "{answer}");
            assert_eq!(unknown[2]["line"], 7, "{answer}");
            assert_eq!(answer["syntax_error"], Value::Null);
        }
        // Nested past what may be read: a syntax error at its line, for a preview and a run.
        let deep = "const a = 1;\n".to_string() + &"(".repeat(100_000) + &")".repeat(100_000);
        let answer = preview(&f.s, &deep, "javascript").await;
        assert_eq!(answer["syntax_error"]["line"], 2, "{answer}");
        let message = answer["syntax_error"]["message"].as_str().unwrap();
        assert!(message.contains("nested too deeply"), "{message}");
        let r =
            f.s.exec_body(json!({"lang": "js", "code": "!".repeat(500_000) + "x"}))
                .await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(
            r["stderr"].as_str().unwrap().contains("nested too deeply"),
            "{r}"
        );
        // The sidecar is as it was.
        let r =
            f.s.exec_body(json!({"lang": "js", "code": "console.log(1 + 1)"}))
                .await;
        assert_eq!(r["stdout"], "2\n", "{r}");
    })
    .await
    .unwrap();
}

/// A gauge of `/metrics` (`ptc_runs_queued`, …) once it reads `value`, polled for at most 10 s.
async fn gauge_reaches(s: &TestSidecar, gauge: &str, value: i64) {
    let line = format!("{gauge} {value}");
    for _ in 0..200 {
        let text = s.http.get(s.url("/metrics")).send().await.unwrap();
        if text.text().await.unwrap().lines().any(|l| l == line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{gauge} never read {value}");
}

/// The attack: previews sent to read JavaScript on the sidecar's own threads while the runs
/// use every slot. Reading is a run's work, so a JavaScript preview takes one of the
/// `PTC_MAX_RUNS` slots as the Python analyzer's run does: with one slot, held by a run, the
/// preview waits in the run queue (`ptc_runs_queued` 1) and is answered only after the run's
/// code has ended (the run prints the wall clock as it ends; the answer comes later). So
/// previews, however many, never read code on more threads than there are runs.
#[tokio::test]
async fn a_javascript_preview_takes_a_run_slot() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_MAX_RUNS", "1")]).await;
        let s = &f.s;
        let now = || {
            let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            since.unwrap().as_secs_f64()
        };
        let run = s.exec("import time\ntime.sleep(2)\nprint(time.time())");
        let previewed = async {
            gauge_reaches(s, "ptc_runs_in_flight", 1).await;
            let answer = async {
                let a = preview(s, "await noop({})", "javascript").await;
                (a, now())
            };
            let (answered, ()) = tokio::join!(answer, gauge_reaches(s, "ptc_runs_queued", 1));
            answered
        };
        let (result, (answer, read)) = tokio::join!(run, previewed);
        let ended: f64 = result["stdout"].as_str().unwrap().trim().parse().unwrap();
        assert!(
            read > ended,
            "the preview was answered at {read} while the run held the only slot (its code ended at {ended})"
        );
        assert_eq!(answer["tools"][0]["name"], "noop", "{answer}");
        gauge_reaches(s, "ptc_runs_queued", 0).await;
    })
    .await
    .unwrap();
}
