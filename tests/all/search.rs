//! Catalogs of any size: the description byte-identical across restarts and listing orders
//! (real MCP servers listing their tools in different orders), within PTC_DESCRIPTION_BUDGET;
//! `search_tools` and `describe` in real runs; result shapes learned from calls and kept in
//! PTC_STATE_DIR across a restart.

use crate::common::{HostServer, TEST_TIMEOUT, TempDir, TestSidecar, tool, unique};
use pretty_assertions::assert_eq;
use ptc_sidecar::render::tokens;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

/// The `exec_code` description of a sidecar with these MCP servers (the config's own JSON,
/// in the order given) once both servers' tools are in it.
async fn description(servers: Value, budget: &str) -> String {
    let dir = TempDir::new("search-mcp");
    let path = dir.write("mcp.json", &json!({"mcpServers": servers}).to_string());
    let s = TestSidecar::start(&[
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_MCP_CONFIG", path.to_str().unwrap()),
        ("PTC_DESCRIPTION_BUDGET", budget),
    ])
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tools = s.get_json("/v1/tools").await;
        let exec = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "exec_code")
            .unwrap();
        let text = exec["description"].as_str().unwrap().to_string();
        if ["alpha", "beta", "gamma", "delta"]
            .iter()
            .all(|server| text.contains(&format!("## {server}__")))
        {
            // The ETag is the catalog's fingerprint: equal too, so a client's cache holds.
            return format!("{}\n{text}", tools["etag"]);
        }
        assert!(Instant::now() < deadline, "servers never listed: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn demo(reverse: bool) -> Value {
    let args: Vec<&str> = if reverse {
        vec!["--reverse-tools"]
    } else {
        vec![]
    };
    json!({"command": DEMO, "args": args})
}

#[tokio::test]
async fn the_description_is_byte_identical_whatever_the_listing_and_start_order() {
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        for budget in ["1000000", "500"] {
            let first = description(
                json!({"alpha": demo(false), "beta": demo(true), "gamma": demo(false), "delta": demo(true)}),
                budget,
            )
            .await;
            // Another start: the servers configured in another order, each listing its tools
            // in the other order.
            let second = description(
                json!({"delta": demo(false), "gamma": demo(true), "beta": demo(false), "alpha": demo(true)}),
                budget,
            )
            .await;
            assert_eq!(first, second, "budget {budget}");
            let description = first.split_once('\n').unwrap().1;
            assert!(tokens::count(description) <= budget.parse::<usize>().unwrap());
            if budget == "500" {
                assert!(first.contains("search_tools("), "{first}");
                assert!(first.contains("\nmore: "), "{first}");
            } else {
                assert!(!first.contains("\nmore: "), "{first}");
            }
        }
    })
    .await
    .unwrap();
}

/// A sidecar whose host tools (answered by `host`) are `get_issue` and `archive_note`, without
/// output schemas, keeping what it learns in `state`.
async fn host_sidecar(host: &HostServer, dir: &TempDir, state: &str) -> TestSidecar {
    let manifest = json!({
        "callback": {"url": host.url()},
        "tools": [
            {"name": "get_issue", "description": "Fetch one issue of the tracker by its number.",
             "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}},
            {"name": "archive_note", "description": "Move a note to the archive.",
             "input_schema": {"type": "object", "properties": {"note_id": {"type": "string"}}, "required": ["note_id"]}}
        ]
    });
    let path = dir.write("tools.json", &manifest.to_string());
    TestSidecar::start(&[
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_TOOLS_FILE", path.to_str().unwrap()),
        ("PTC_STATE_DIR", state),
    ])
    .await
}

fn issue_host() -> impl std::future::Future<Output = HostServer> {
    HostServer::start(vec![
        (
            "get_issue",
            tool(|input| {
                let n = input["number"].as_i64().unwrap_or(0);
                if n == 1 {
                    json!({"result": {"number": 1, "title": "crash", "labels": ["bug"]}})
                } else {
                    json!({"result": {"number": n, "title": "slow", "labels": [], "closed": true}})
                }
            }),
        ),
        ("archive_note", tool(|_| json!({"result": "ok"}))),
    ])
}

#[tokio::test]
async fn search_tools_ranks_the_catalog_and_describe_shows_learned_shapes_across_restarts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = issue_host().await;
        let dir = TempDir::new("search-host");
        let state = dir.0.join(unique("state"));
        let state = state.to_str().unwrap().to_string();
        let s = host_sidecar(&host, &dir, &state).await;

        let r = s
            .exec(
                r#"
hits = search_tools("fetch a ticket by its number")
print([(h["name"], h["signature"], h["summary"], h.get("returns")) for h in hits])
await get_issue(number=1)
await get_issue(number=2)
print(search_tools("issue", limit=1)[0]["returns"])
describe("get_issue")
describe("archive_note")
for bad in ("", "x" * 501):
    try:
        search_tools(bad)
    except ToolInputError as e:
        print("refused:", str(e)[:40])
"#,
            )
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        let out = r["stdout"].as_str().unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "[('get_issue', 'get_issue(number: int) — Fetch one issue of the tracker by its…', 'Fetch one issue of the tracker by its number.', None)]"
        );
        let shape = "{number: int, title: str, labels: [str], closed?: bool}";
        assert_eq!(lines[1], shape);
        assert!(
            out.contains(&format!(
                "Returns (learned from 2 calls, no output schema): {shape}"
            )),
            "{out}"
        );
        // Never called: nothing learned, nothing said.
        assert!(!out.contains("Returns (learned from 0"), "{out}");
        assert!(
            out.contains("refused: search_tools(query, limit=5): query must\n"),
            "{out}"
        );
        assert!(out.contains("refused: the query is over 500 characters"), "{out}");

        // A restart with the same PTC_STATE_DIR knows the shape before any call.
        let file = std::path::Path::new(&state).join("shapes.json");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&file).is_ok_and(|t| t.contains("closed")) {
            assert!(Instant::now() < deadline, "{} never written", file.display());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let again = host_sidecar(&host, &dir, &state).await;
        let r = again.exec(r#"describe("get_issue")"#).await;
        assert!(
            r["stdout"]
                .as_str()
                .unwrap()
                .contains(&format!("Returns (learned from 2 calls, no output schema): {shape}")),
            "{r}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_search_route_wants_the_run_token_and_a_small_body() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let host = issue_host().await;
        let dir = TempDir::new("search-auth");
        let s = host_sidecar(&host, &dir, "").await;
        // From inside a run: no token, a wrong token, a body over the limit.
        let r = s
            .exec(
                r#"
import ptc_sdk, socket
c = ptc_sdk._client
def post(path, token, body):
    head = ("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (path, token, len(body))).encode()
    with socket.create_connection((c.host, c.port)) as sock:
        sock.sendall(head + body)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n")[0].decode()
print(post("/search", "nope", b'{"query": "issue"}'))
print(post("/describe", "nope", b'{"tool": "get_issue"}'))
print(post("/search", c.token, b'{"query": "' + b"a" * 20000 + b'"}'))
print(post("/search", c.token, b'{"q": 1}'))
print(post("/describe", c.token, b'{"tool": "nothing"}'))
"#,
            )
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            r["stdout"].as_str().unwrap(),
            "HTTP/1.1 401 Unauthorized\nHTTP/1.1 401 Unauthorized\nHTTP/1.1 413 Payload Too Large\n\
             HTTP/1.1 400 Bad Request\nHTTP/1.1 404 Not Found\n"
        );
    })
    .await
    .unwrap();
}

/// A synthetic 1,000-tool catalog (the bench's generator): the description within the budget,
/// the same whatever order the servers and their tools come in, and a tool it leaves out found
/// by the search.
#[test]
fn a_thousand_tools_stay_within_the_budget_and_are_found() {
    use crate::common::{corpus, synthetic};
    use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy};
    use ptc_sidecar::render::Snapshot;

    let build = |reverse: bool| {
        let mut servers = synthetic::catalog(&corpus(), 1_000);
        if reverse {
            servers.reverse();
            servers.iter_mut().for_each(|s| s.tools.reverse());
        }
        let policy = Policy {
            ptc_enabled: true,
            description_budget: Some(2_000),
            ..Policy::default()
        };
        let input = CatalogInput {
            servers,
            ..CatalogInput::default()
        };
        Snapshot::new(Catalog::build(input, &policy, 1))
    };
    let (a, b) = (build(false), build(true));
    assert_eq!(a.rendered.description, b.rendered.description);
    assert!(tokens::count(&a.rendered.description) <= 2_000);
    assert!(a.rendered.listed < 1_000);
    let wanted = "wonka_github__create_issue_wonka";
    assert!(!a.rendered.description.contains("create_issue_wonka"));
    let hits: Vec<&str> = a
        .search
        .search("open a bug report in the wonka workspace on GitHub", 3)
        .iter()
        .map(|h| a.rendered.lines[h.tool].0.as_str())
        .collect();
    // Among the first three (the bench's measure): the copies of 15 other workspaces are not.
    assert!(hits.contains(&wanted), "{hits:?}");
    assert!(hits.iter().all(|h| h.ends_with("_wonka")), "{hits:?}");
}
