//! JavaScript and TypeScript through the MCP front door's `exec_code` (its `lang` argument),
//! with the official SDK clients of tests/all/front.rs as the hosts, on both wires: a
//! `Promise.all` of 20 demo MCP calls beside a callback host tool, TypeScript, an uncaught
//! error at the user's line, bash, and a language that is not run.

use crate::common::TEST_TIMEOUT;
use crate::front::{Door, Host, Wire, client, end_sessions, every_host, text};
use serde_json::json;

async fn javascript(host: Host, wire: Wire) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let door = Door::open().await;
        let mut spec = door.spec(wire, "runs");
        spec["runs"] = json!([
            {"name": "gather", "lang": "javascript", "code":
                "const rs = await Promise.all(Array.from({length: 20}, (_, i) => demo__add({a: i, b: 1})));\n\
                 const d = await tools.double({x: 21});\n\
                 console.log(rs.reduce((s, r) => s + Number(r), 0), d);\n"},
            {"name": "typescript", "lang": "typescript", "code":
                "const n: number = await double({x: 2});\nconsole.log(n as number);\n"},
            {"name": "failing", "lang": "js", "code":
                "console.log('before');\nthrow new Error('boom-' + 'marker');\n"},
            {"name": "bash", "lang": "bash", "code": "echo from-bash\n"},
            {"name": "ruby", "lang": "ruby", "code": "puts 1\n"},
        ]);
        let seen = client(host, spec).await;

        // 20 MCP calls together and the callback tool: every one a call of the run.
        let gather = &seen["gather"];
        assert_eq!(text(gather), "210 42", "{gather}");
        assert_eq!(gather["isError"], false);
        let calls = gather["structured"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 21, "{gather}");
        assert!(calls.iter().all(|c| c["ok"] == true), "{gather}");

        assert_eq!(text(&seen["typescript"]), "4", "{}", seen["typescript"]);

        // An uncaught error: isError, what it printed, the stack at the user's line.
        let failing = &seen["failing"];
        assert_eq!(failing["isError"], true, "{failing}");
        let t = text(failing);
        assert!(t.starts_with("before\nstderr:\n"), "{t}");
        assert!(t.contains("Error: boom-marker\n    at <code>:2:7"), "{t}");
        assert!(t.ends_with("status: error (exit code 1)"), "{t}");

        assert_eq!(text(&seen["bash"]), "from-bash", "{}", seen["bash"]);

        // A language not run: invalid params, saying which are.
        let error = seen["ruby"]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("lang \"ruby\" is not run here: use \"python\" (the default), \"bash\", \"javascript\" or \"typescript\""),
            "{}",
            seen["ruby"]
        );

        end_sessions(&door, host, wire, &seen).await;
        door.assert_nothing_left().await;
    })
    .await
    .unwrap();
}

every_host!(javascript);
