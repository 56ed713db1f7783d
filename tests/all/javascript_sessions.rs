//! A session that runs several languages (`POST /v1/exec_code` with `session_id`, as the MCP
//! front door's calls of one MCP session do): a JavaScript or TypeScript run between two Python
//! runs leaves the session's live Python interpreter as it was. (That a node run shares the
//! session's files and keeps no state of its own is `javascript.rs`'s.)

use crate::common::{TEST_TIMEOUT, TestSidecar, assert_nothing_left, unique};
use pretty_assertions::assert_eq;
use serde_json::json;

#[tokio::test]
async fn a_javascript_run_leaves_the_sessions_python_state() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_WARM_WORKERS", "0")]).await;
        let session = unique("js-session");
        let run = |lang: &str, code: &str| {
            json!({"lang": lang, "code": code, "session_id": session, "timeout_ms": 20000})
        };
        let r = s.exec_body(run("python", "x = 41\n")).await;
        assert_eq!(r["status"], "ok", "{r}");
        let r = s.exec_body(run("javascript", "console.log(typeof x);\n")).await;
        assert_eq!(r["stdout"], "undefined\n", "{r}");
        let r = s.exec_body(run("ts", "const n: number = 1;\nconsole.log(n);\n")).await;
        assert_eq!(r["stdout"], "1\n", "{r}");
        let r = s.exec_body(run("python", "print(x + 1)\n")).await;
        assert_eq!(r["stdout"], "42\n", "{r}");
        let response = s
            .http
            .delete(s.url(&format!("/v1/sessions/{session}")))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}
