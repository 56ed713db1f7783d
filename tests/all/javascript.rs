//! JavaScript and TypeScript runs (`lang: "javascript"`, `"typescript"`) through
//! `POST /v1/exec_code`, in real node children in the sandbox, against the demo MCP server and
//! a host tool whose name is not its JavaScript name: tools as async functions, a gather, the
//! errors the code catches, an uncaught error at the user's line, TypeScript stripped in the
//! sidecar, the environment, and no processes.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, tool};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// A sidecar with the demo MCP server and the host tool `get-weather` (callback protocol).
struct Fixture {
    s: TestSidecar,
    _host: HostServer,
    _dir: TempDir,
}

async fn fixture(extra: &[(&str, &str)]) -> Fixture {
    let host = HostServer::start(vec![(
        "get-weather",
        tool(|input| json!({"result": {"city": input["city"], "temp_c": 21}})),
    )])
    .await;
    let dir = TempDir::new("javascript");
    let mcp = json!({"mcpServers": {"demo": {"command": env!("CARGO_BIN_EXE_ptc-demo-mcp")}}});
    let mcp = dir.write("mcp.json", &mcp.to_string());
    let city =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let manifest = json!({
        "callback": {"url": host.url()},
        "tools": [{"name": "get-weather", "description": "Weather for a city.", "input_schema": city}],
    });
    let manifest = dir.write("tools.json", &manifest.to_string());
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_MCP_CONFIG", mcp.to_str().unwrap()),
        ("PTC_TOOLS_FILE", manifest.to_str().unwrap()),
    ];
    vars.extend_from_slice(extra);
    let s = TestSidecar::start(&vars).await;
    Fixture {
        s,
        _host: host,
        _dir: dir,
    }
}

async fn run(s: &TestSidecar, lang: &str, code: &str) -> Value {
    s.exec_body(json!({"lang": lang, "code": code, "timeout_ms": 20000}))
        .await
}

fn out(r: &Value, stream: &str) -> String {
    r[stream].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn tools_are_async_functions_and_errors_are_the_sdks() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"
const sum = await demo__add({a: 1, b: 2});
console.log(sum, typeof tools.demo__add);
const country = await tools.demo__lookup_country({code: "fr"});
console.log(country.capital);
console.log((await callTool("get-weather", {city: "Rome"})).city, (await get_weather({city: "Oslo"})).city);
const sums = await Promise.all(Array.from({length: 20}, (_, i) => demo__add({a: i, b: 1})));
console.log(sums.join(","));
try { await demo__fail({message: "the disk is full"}); } catch (e) {
  console.log(e instanceof ToolError, e.name, e.type, e.message);
}
try { await demo__add({a: "one", b: 1}); } catch (e) {
  console.log(e instanceof ToolInputError, e instanceof ToolError, e.name, e.type);
}
try { await demo__add(1, 2); } catch (e) { console.log(e.name, e.type); }
try { tools.demo__ad; } catch (e) { console.log(e.type, e.message); }
try { await callTool("nope", {}); } catch (e) { console.log(e.type); }
"#;
        let r = run(&f.s, "javascript", code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            out(&r, "stdout"),
            "3 function\nParis\nRome Oslo\n1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20\n\
             true ToolError tool the disk is full\n\
             true true ToolInputError input\n\
             ToolInputError input\n\
             unknown_tool tools has no tool named demo__ad; did you mean demo__add?\n\
             unknown_tool\n",
            "{r}"
        );
        let calls = r["tool_calls"].as_array().unwrap();
        assert!(calls.len() >= 25, "{r}");
        assert!(calls.iter().any(|c| c["tool"] == "get-weather"), "{r}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_uncaught_error_shows_the_users_lines_only() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code =
            "console.log('before');\nfunction inner() {\n  throw new Error('boom');\n}\ninner();\n";
        let r = run(&f.s, "js", code).await;
        assert_eq!(
            (r["status"].clone(), r["exit_code"].clone()),
            (json!("error"), json!(1)),
            "{r}"
        );
        assert_eq!(out(&r, "stdout"), "before\n");
        let stderr = out(&r, "stderr");
        assert!(
            stderr.starts_with("Error: boom\n    at inner (<code>:3:9)\n"),
            "{stderr}"
        );
        assert!(stderr.contains("<code>:5:1"), "{stderr}");
        assert!(
            !stderr.contains("ptc_sdk") && !stderr.contains("node:internal"),
            "{stderr}"
        );
        assert!(
            !stderr.contains(f.s.runtime.0.to_str().unwrap()),
            "{stderr}"
        );

        // A failed call nobody caught: its error, at the line that awaited it.
        let r = run(&f.s, "js", "\nawait demo__fail({message: 'down'});\n").await;
        let stderr = out(&r, "stderr");
        assert!(stderr.starts_with("ToolError: down\n"), "{stderr}");
        assert!(stderr.contains("<code>:2:1"), "{stderr}");

        // A syntax error: node's own shape, at the user's line, and node never started.
        let r = run(&f.s, "javascript", "const a = 1;\nlet x = = 2;\n").await;
        assert_eq!(
            (r["status"].clone(), r["exit_code"].clone()),
            (json!("error"), json!(1)),
            "{r}"
        );
        let stderr = out(&r, "stderr");
        assert!(
            stderr.starts_with("<code>:2\nlet x = = 2;\n        ^\n\nSyntaxError: "),
            "{stderr}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn typescript_runs_with_its_types_stripped_and_errors_at_its_lines() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"interface Weather { city: string; temp_c: number }
const w: Weather = await get_weather({city: "Lima"}) as Weather;
enum Unit { C = "°C" }
const sums: number[] = await Promise.all([1, 2].map((i: number) => demo__add({a: i, b: i}))) as any;
console.log(`${w.city} ${w.temp_c}${Unit.C}`, sums.join("+"));
function fail(why: string): never {
  throw new Error(why);
}
fail("typed");
"#;
        let r = run(&f.s, "typescript", code).await;
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(out(&r, "stdout"), "Lima 21°C 2+4\n", "{r}");
        let stderr = out(&r, "stderr");
        assert!(
            stderr.starts_with("Error: typed\n    at fail (<code>:7:"),
            "{stderr}"
        );
        assert!(stderr.contains("<code>:9:"), "{stderr}");

        let r = run(&f.s, "ts", "const a: number = 1;\nconst b: = 2;\n").await;
        assert_eq!(r["status"], "error", "{r}");
        let stderr = out(&r, "stderr");
        assert!(stderr.starts_with("<code>:2\nconst b: = 2;\n"), "{stderr}");
        assert!(stderr.contains("SyntaxError: "), "{stderr}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_environment_is_a_runs_and_no_process_starts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[("PTC_API_KEY", "top-secret")]).await;
        let code = r#"import { execSync } from "node:child_process";
import cp from "node:child_process";
console.log(Object.keys(process.env).sort().join(","));
console.log(process.argv.join(" ").includes("top-secret"));
try { execSync("echo hi"); console.log("ran"); } catch (e) { console.log("refused", e.code); }
try { cp.spawnSync("/bin/echo", ["hi"]); console.log("ran"); } catch (e) { console.log("refused", e.code); }
// Under the SDK's words, the sandbox: the binding node's spawn uses is refused by the kernel.
const r = process.binding("spawn_sync").spawn({
  file: "/bin/echo", args: ["/bin/echo", "hi"], envPairs: [],
  stdio: [{type: "ignore"}, {type: "ignore"}, {type: "ignore"}],
});
console.log("binding", r.error);
// WebAssembly within the run's address-space limit (fetch parses HTTP with it), and fetch
// reaches nothing: the network is the IPC bridge's alone.
const wasm = await WebAssembly.instantiate(new Uint8Array([0,97,115,109,1,0,0,0,5,3,1,0,1]));
console.log("wasm", wasm.instance.exports !== undefined);
try { await fetch("http://127.0.0.1:47999/"); } catch (e) { console.log("fetch", e.cause?.code); }
"#;
        let r = f
            .s
            .http
            .post(f.s.url("/v1/exec_code"))
            .header("x-api-key", "top-secret")
            .json(&json!({"lang": "js", "code": code}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            out(&r, "stdout"),
            format!(
                "HOME,LANG,PATH,TMPDIR\nfalse\nrefused EPERM\nrefused EPERM\nbinding {}\nwasm true\nfetch EACCES\n",
                -libc::EPERM
            ),
            "{r}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn search_describe_and_save_file_are_there() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"const hits = await searchTools("country capital population");
// The JavaScript description's line (one object of named arguments), not Python's.
console.log(hits.some((h) => h.name === "demo__lookup_country"
  && h.signature.startsWith("demo__lookup_country({")));
await describe("get-weather");
const file = await saveFile("note.txt", "hello");
console.log(file.name, file.size);
"#;
        let r = run(&f.s, "javascript", code).await;
        assert_eq!(r["status"], "ok", "{r}");
        let stdout = out(&r, "stdout");
        // describe() shows the tool's line of the description in TypeScript.
        assert!(
            stdout.starts_with(
                "true\nget_weather({city}) // Weather for a city.\nDispatched as: get-weather\n"
            ),
            "{stdout}"
        );
        assert!(stdout.ends_with("note.txt 5\n"), "{stdout}");
        assert_eq!(r["files"][0]["name"], "note.txt", "{r}");
    })
    .await
    .unwrap();
}

/// With a `session_id` a JavaScript run works in the session's folder: its files pass from one
/// run to the next (in either language), its variables do not.
#[tokio::test]
async fn a_session_keeps_a_javascript_runs_files_not_its_state() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let session = "js-session-1";
        let first = json!({"lang": "ts", "session_id": session, "code":
            "import fs from \"node:fs\";\nconst n: number = 41;\nfs.writeFileSync(\"n.txt\", String(n + 1));\nglobalThis.kept = n;\n"});
        let r = f.s.exec_body(first).await;
        assert_eq!(r["status"], "ok", "{r}");
        let second = json!({"lang": "js", "session_id": session, "code":
            "import fs from \"node:fs\";\nconsole.log(fs.readFileSync(\"n.txt\", \"utf8\"), typeof globalThis.kept);\n"});
        let r = f.s.exec_body(second).await;
        assert_eq!(out(&r, "stdout"), "42 undefined\n", "{r}");
        let python = json!({"session_id": session, "code": "print(open('n.txt').read())"});
        let r = f.s.exec_body(python).await;
        assert_eq!(out(&r, "stdout"), "42\n", "{r}");
    })
    .await
    .unwrap();
}

/// Code that imports nothing runs as a script (the SDK compiles it in place of importing it as
/// a module): the same scope and lines as a module, and a run ends when nothing is left to do,
/// after what the code left running (a timer, a handler's own timer), with its exit code.
#[tokio::test]
async fn a_script_runs_as_a_module_would_until_nothing_is_left() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = "var v = 1;\nconsole.log(this, typeof globalThis.v, typeof v);\n\
            setTimeout(() => console.log(\"timer\"), 20);\n\
            process.once(\"beforeExit\", () => setTimeout(() => { console.log(\"handler\"); process.exitCode = 3; }, 20));\n";
        for lang in ["js", "ts"] {
            let r = run(&f.s, lang, code).await;
            assert_eq!(out(&r, "stdout"), "undefined undefined number\ntimer\nhandler\n", "{lang}: {r}");
            assert_eq!(r["exit_code"], 3, "{lang}: {r}");
        }
        // Where the code throws, the line is the user's either way.
        for code in ["const a = 1;\nnull.x;\n", "import fs from \"node:fs\";\nnull.x;\n"] {
            let r = run(&f.s, "js", code).await;
            assert!(out(&r, "stderr").contains("at <code>:2:"), "{r}");
            assert!(!out(&r, "stderr").contains("<code>:3:"), "{r}");
        }
    })
    .await
    .unwrap();
}

/// Eight Worker threads with default options run at the default `PTC_MEMORY_MB` (2,048), each
/// calling a tool's answer back: V8's 512 MB code range per isolate and glibc's 64 MB arena per
/// thread had made the third `new Worker()` abort the run ("Failed to reserve virtual memory
/// for CodeRange"). A Worker that asks for its own code range keeps it, and the environment
/// variable that bounds the arenas is not the code's.
#[tokio::test]
async fn workers_with_default_options_fit_the_default_memory_limit() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let f = fixture(&[]).await;
        let code = r#"import { Worker } from "node:worker_threads";
const echo = `require("node:worker_threads").parentPort.on("message", (m) => {
  require("node:worker_threads").parentPort.postMessage(m * 2); })`;
const made = [];
for (let i = 0; i < 8; i++) made.push(new Worker(echo, { eval: true }));
const own = new Worker(echo, { eval: true, resourceLimits: { codeRangeSizeMb: 32 } });
made.push(own);
const answers = await Promise.all(made.map((w, i) => new Promise((resolve, reject) => {
  w.once("message", resolve);
  w.once("error", reject);
  w.postMessage(i);
})));
console.log(answers.join(","), own.resourceLimits.codeRangeSizeMb, made[0].resourceLimits.codeRangeSizeMb);
console.log("MALLOC_ARENA_MAX" in process.env);
await Promise.all(made.map((w) => w.terminate()));
"#;
        let r = run(&f.s, "javascript", code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(out(&r, "stdout"), "0,2,4,6,8,10,12,14,16 32 64\nfalse\n", "{r}");
    })
    .await
    .unwrap();
}
