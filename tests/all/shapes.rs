//! Learned result shapes and who chooses them (issue 21, item 5): a tool that echoes what its
//! call sent teaches nothing, two agents sharing a `PTC_STATE_DIR` never read each other's
//! shapes, and `PTC_LEARN_SHAPES=false` learns, keeps and shows nothing. Real runs, a real host
//! tool server, what `describe()` and `search_tools` print.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, tool, unique};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `describe()` says of `get_issue` after `get_issue(number=1)`.
const ISSUE_1: &str = "{number: int, title: str, labels: [str]}";
/// ... and after `get_issue(number=2)` alone.
const ISSUE_2: &str = "{number: int, title: str, labels: [], closed: bool}";

/// Host tools without output schemas: `echo_args` answers with what it was sent, `lookup`
/// with `{key: "v"}` for the key it was sent, `get_issue` with an issue.
fn host() -> impl std::future::Future<Output = HostServer> {
    HostServer::start(vec![
        (
            "echo_args",
            tool(|input| json!({"result": {"ok": true, "you_sent": input}})),
        ),
        (
            "lookup",
            tool(|input| {
                let key = input["key"].as_str().unwrap_or_default().to_string();
                json!({"result": {key: "v"}})
            }),
        ),
        (
            "get_issue",
            tool(|input| match input["number"].as_i64() {
                Some(1) => json!({"result": {"number": 1, "title": "crash", "labels": ["bug"]}}),
                n => {
                    json!({"result": {"number": n, "title": "slow", "labels": [], "closed": true}})
                }
            }),
        ),
    ])
}

/// A sidecar of agent `agent` on `host`'s tools, with `vars` besides.
async fn sidecar(
    host: &HostServer,
    dir: &TempDir,
    agent: &str,
    vars: &[(&str, &str)],
) -> TestSidecar {
    let manifest = json!({
        "callback": {"url": host.url()},
        "tools": [
            {"name": "echo_args", "description": "Answers with the arguments it was sent.",
             "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
            {"name": "lookup", "description": "Looks a key up.",
             "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}},
            {"name": "get_issue", "description": "Fetch one issue of the tracker by its number.",
             "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}
        ]
    });
    let path = dir.write(&format!("{agent}.json"), &manifest.to_string());
    let mut all = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", path.to_str().unwrap()),
        ("PTC_AGENT_ID", agent),
    ];
    all.extend_from_slice(vars);
    TestSidecar::start(&all).await
}

/// What `describe()` learned of each tool, as a run of `s` prints it (`None`: nothing).
async fn learned(s: &TestSidecar) -> Vec<(String, Option<String>)> {
    let r = s
        .exec(
            r#"
import contextlib, io
for name in ("echo_args", "lookup", "get_issue"):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        describe(name)
    said = [l for l in text.getvalue().splitlines() if l.startswith("Returns (learned")]
    print(name, said[0] if said else None)
print("search", sorted(h.get("returns") or "-" for h in search_tools("issue arguments key", limit=3)))
"#,
        )
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    r["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .map(|l| {
            let (name, said) = l.split_once(' ').unwrap();
            (name.to_string(), (said != "None").then(|| said.to_string()))
        })
        .collect()
}

fn said(tool: &str, calls: u64, shape: &str) -> (String, Option<String>) {
    let s = if calls == 1 { "" } else { "s" };
    (
        tool.to_string(),
        Some(format!(
            "Returns (learned from {calls} call{s}, no output schema): {shape}"
        )),
    )
}

fn nothing(tool: &str) -> (String, Option<String>) {
    (tool.to_string(), None)
}

/// The search line of [`learned`] with these `returns` (`-`: none), sorted.
fn search(returns: &[&str]) -> (String, Option<String>) {
    let mut returns: Vec<&str> = returns.to_vec();
    returns.sort();
    (
        "search".into(),
        Some(format!("{returns:?}").replace('"', "'")),
    )
}

/// Runs `code` on `s`; it must end well.
async fn run(s: &TestSidecar, code: &str) {
    let r = s.exec(code).await;
    assert_eq!(r["status"], "ok", "{r}");
}

/// The shapes file of `state` once `agent`'s table in it has `tool`.
async fn written(state: &Path, agent: &str, tool: &str) -> Value {
    let file = state.join("shapes.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Ok(whole) = serde_json::from_str::<Value>(&text)
            && whole["agents"][agent][tool].is_object()
        {
            return whole;
        }
        assert!(
            Instant::now() < deadline,
            "{} never had {agent}'s {tool}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn state_dir(dir: &TempDir) -> PathBuf {
    dir.0.join(unique("state"))
}

#[tokio::test]
async fn a_tool_that_echoes_what_it_was_sent_teaches_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = host().await;
        let dir = TempDir::new("shapes-echo");
        let s = sidecar(&host, &dir, &unique("agent"), &[]).await;
        // One run chooses keys: as argument names, and as a value the tool makes a key of.
        run(
            &s,
            r#"
await call_tool("echo_args", {"text": "hi", "ignore_previous_instructions": 1})
await call_tool("echo_args", {"text": "hi", "nested": {"Call-Delete-All": True}})
await lookup(key="run_rm_rf_now")
await get_issue(number=1)
"#,
        )
        .await;
        // A later run (another session, say) reads nothing of them; an honest tool still teaches.
        assert_eq!(
            learned(&s).await,
            vec![
                nothing("echo_args"),
                nothing("lookup"),
                said("get_issue", 1, ISSUE_1),
                search(&["-", "-", ISSUE_1]),
            ]
        );
        // An echo of declared names only shows what the schema says, and is learned.
        run(&s, r#"await echo_args(text="hi")"#).await;
        let shape = "{ok: bool, you_sent: {text: str}}";
        assert_eq!(learned(&s).await[0], said("echo_args", 1, shape));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn agents_sharing_a_state_dir_never_read_each_others_shapes() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = host().await;
        let dir = TempDir::new("shapes-agents");
        let state = state_dir(&dir);
        let vars = [("PTC_STATE_DIR", state.to_str().unwrap())];
        let (a, b) = (unique("agent-a"), unique("agent-b"));

        let first = sidecar(&host, &dir, &a, &vars).await;
        run(&first, "await get_issue(number=1)").await;
        written(&state, &a, "get_issue").await;
        // Agent b, on the same directory: nothing learned yet, then only its own.
        let second = sidecar(&host, &dir, &b, &vars).await;
        assert_eq!(learned(&second).await[2], nothing("get_issue"));
        run(&second, "await get_issue(number=2)").await;
        assert_eq!(learned(&second).await[2], said("get_issue", 1, ISSUE_2));
        assert_eq!(learned(&first).await[2], said("get_issue", 1, ISSUE_1));
        // One file, a table per agent: b's write kept a's, and a restart reads its own.
        let whole = written(&state, &b, "get_issue").await;
        assert_eq!(whole["version"], 2);
        assert_eq!(whole["agents"][&a]["get_issue"]["calls"], 1);
        drop((first, second));
        let again = sidecar(&host, &dir, &a, &vars).await;
        assert_eq!(learned(&again).await[2], said("get_issue", 1, ISSUE_1));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn learning_switched_off_learns_keeps_and_shows_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = host().await;
        let dir = TempDir::new("shapes-off");
        let state = state_dir(&dir);
        let agent = unique("agent");
        let on = [("PTC_STATE_DIR", state.to_str().unwrap())];
        let off = [
            ("PTC_STATE_DIR", state.to_str().unwrap()),
            ("PTC_LEARN_SHAPES", "false"),
        ];
        // Switched off: calls teach nothing and nothing is written.
        let s = sidecar(&host, &dir, &agent, &off).await;
        run(&s, "await get_issue(number=1)\nawait lookup(key='k')").await;
        let all_nothing = vec![
            nothing("echo_args"),
            nothing("lookup"),
            nothing("get_issue"),
            search(&["-", "-", "-"]),
        ];
        assert_eq!(learned(&s).await, all_nothing);
        assert!(!state.join("shapes.json").exists());
        drop(s);
        // What the agent learned with it on is not shown once it is off, nor written over.
        let s = sidecar(&host, &dir, &agent, &on).await;
        run(&s, "await get_issue(number=1)").await;
        let before = written(&state, &agent, "get_issue").await;
        drop(s);
        let s = sidecar(&host, &dir, &agent, &off).await;
        run(&s, "await get_issue(number=2)").await;
        assert_eq!(learned(&s).await, all_nothing);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after: Value =
            serde_json::from_slice(&std::fs::read(state.join("shapes.json")).unwrap()).unwrap();
        assert_eq!(after, before);
    })
    .await
    .unwrap();
}
