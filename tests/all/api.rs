//! The control API over real HTTP: tool lists, caching, auth, errors.

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, names};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn manifest(dir: &TempDir) -> String {
    dir.write(
        "tools.json",
        &json!({"tools": [
            {"name": "complete", "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}}},
            {"name": "lookup", "description": "Look a thing up.", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
        ]})
        .to_string(),
    )
    .to_string_lossy()
    .into_owned()
}

#[tokio::test]
async fn tools_in_every_format_with_etag() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("api");
        let m = manifest(&dir);
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", &m),
            ("PTC_TIMEOUT", "45"),
        ])
        .await;

        let r = s.http.get(s.url("/v1/tools")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let etag = r.headers()["etag"].to_str().unwrap().to_string();
        assert_eq!(r.headers()["x-catalog-version"], "1");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["version"], 1);
        assert_eq!(body["etag"], etag.as_str());
        assert_eq!(names(&body["tools"]), ["complete", "exec_code"]);
        assert_eq!(
            body["tools"][1]["input_schema"]["properties"]["timeout"]["maximum"],
            45
        );
        assert!(
            body["tools"][1]["description"]
                .as_str()
                .unwrap()
                .contains("\nlookup(q) — Look a thing up.")
        );

        for (format, key) in [
            ("openai", "function"),
            ("mcp", "inputSchema"),
            ("anthropic", "input_schema"),
        ] {
            let body: Value = s
                .http
                .get(s.url(&format!("/v1/tools?format={format}")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert!(body["tools"][0].get(key).is_some(), "{format}: {body}");
        }

        let r = s
            .http
            .get(s.url("/v1/tools"))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 304);
        assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
        let r = s
            .http
            .get(s.url("/v1/tools"))
            .header("if-none-match", "\"other\"")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);

        let r = s
            .http
            .get(s.url("/v1/tools?format=xml"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "bad_request");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("anthropic, openai or mcp")
        );

        let r = s.http.get(s.url("/nope")).send().await.unwrap();
        assert_eq!(r.status(), 404);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "not_found");

        let health = s.health().await;
        assert_eq!(health["status"], "ok");
        assert_eq!(health["catalog"]["ptc_tools"], 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn api_key_is_required_when_set() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = TestSidecar::start(&[("PTC_ENABLED", "true"), ("PTC_API_KEY", "s3cret")]).await;
        for (header, value, want) in [
            (None, "", 401),
            (Some("x-api-key"), "wrong", 401),
            (Some("x-api-key"), "s3cret", 200),
            (Some("authorization"), "Bearer s3cret", 200),
            (Some("authorization"), "Bearer s3cre", 401),
        ] {
            let mut r = s.http.get(s.url("/v1/tools"));
            if let Some(h) = header {
                r = r.header(h, value);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status().as_u16(), want, "{header:?} {value}");
        }
        let r = s
            .http
            .post(s.url("/v1/exec_code"))
            .json(&json!({"code": "print(1)"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "exec_code is protected too");
        // Health stays open for probes.
        assert_eq!(
            s.http.get(s.url("/healthz")).send().await.unwrap().status(),
            200
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn ptc_off_means_direct_tools_and_409_for_exec() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("api-off");
        let m = manifest(&dir);
        let s = TestSidecar::start(&[("PTC_TOOLS_FILE", &m)]).await;
        let body: Value = s
            .http
            .get(s.url("/v1/tools"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(names(&body["tools"]), ["complete", "lookup"]);
        let r = s
            .http
            .post(s.url("/v1/exec_code"))
            .json(&json!({"code": "print(1)"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "ptc_disabled");
    })
    .await
    .unwrap();
}

/// Every error answer of the control API and the LibreChat routes, byte for byte: status,
/// content type and body are the wire contract (clients branch on them).
#[tokio::test]
async fn error_answers_are_byte_exact() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        async fn raw(
            s: &TestSidecar,
            method: &str,
            path: &str,
            headers: &[(&str, &str)],
            body: Option<&str>,
        ) -> (u16, String, String) {
            let mut r = match method {
                "GET" => s.http.get(s.url(path)),
                _ => s.http.post(s.url(path)),
            };
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            if let Some(body) = body {
                r = r
                    .header("content-type", "application/json")
                    .body(body.to_string());
            }
            let r = r.send().await.unwrap();
            let status = r.status().as_u16();
            let kind = r
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            (status, kind, r.text().await.unwrap())
        }
        const JSON: &str = "application/json";
        let key = [("x-api-key", "k")];

        let on = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_API_KEY", "k"),
            ("PTC_WARM_WORKERS", "0"),
        ])
        .await;
        let big = format!("{{\"code\": \"{}\"}}", "x".repeat((1 << 20) + 1));
        // (method, path, headers, body, status, exact body)
        type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], Option<&'a str>, u16, &'a str);
        let cases: Vec<Case> = vec![
            ("GET", "/nope", &[], None, 404,
             r#"{"error":{"type":"not_found","message":"no such endpoint; see README.md for the API"}}"#),
            ("GET", "/v1/tools", &[], None, 401,
             r#"{"error":{"type":"unauthorized","message":"this sidecar requires its API key as X-API-Key or Authorization: Bearer"}}"#),
            ("POST", "/exec/programmatic", &[("x-api-key", "no")], Some("{}"), 401,
             r#"{"error":{"type":"unauthorized","message":"this sidecar requires its API key as X-API-Key or Authorization: Bearer"}}"#),
            ("GET", "/v1/tools?format=xml", &key, None, 400,
             r#"{"error":{"type":"bad_request","message":"unknown format \"xml\"; expected anthropic, openai or mcp"}}"#),
            ("POST", "/v1/exec_code", &key, Some(r#"{"code": "1", "timeout_ms": 0}"#), 400,
             r#"{"error":{"type":"bad_request","message":"timeout_ms must be at least 1"}}"#),
            ("POST", "/v1/exec_code", &key, Some(r#"{"cod": "1"}"#), 400,
             r#"{"error":{"type":"bad_request","message":"expected {\"code\": \"...\", \"timeout_ms\"?: N, \"lang\"?: \"python\" | \"bash\" | \"javascript\" | \"typescript\", \"session_id\"?: \"...\", \"reset\"?: bool}: missing field `code` at line 1 column 12"}}"#),
            ("POST", "/v1/exec_code", &key, Some(&big), 413,
             r#"{"error":{"type":"too_large","message":"the body is limited to 1048576 bytes"}}"#),
            ("POST", "/v1/exec/xnope/results", &key, Some(r#"{"results": []}"#), 404,
             r#"{"error":{"type":"not_found","message":"no open attached run \"xnope\" (it may be over)"}}"#),
            ("POST", "/exec/programmatic", &key, Some(r#"{"code": " ", "tools": []}"#), 400,
             r#"{"error":{"type":"bad_request","message":"\"code\" is empty"}}"#),
            ("POST", "/exec/programmatic", &key, Some(r#"{"code": "1", "tools": {}}"#), 400,
             r#"{"error":{"type":"bad_request","message":"\"tools\" is a JSON object, expected an array"}}"#),
            ("POST", "/exec/programmatic", &key, Some(r#"{"code": "1", "lang": "ruby"}"#), 422,
             r#"{"error":"unsupported_capability","message":"ptc-sidecar runs Python, bash, JavaScript and TypeScript, not \"ruby\""}"#),
            ("POST", "/exec", &key, Some(r#"{"code": "1", "lang": "go"}"#), 422,
             r#"{"error":"unsupported_capability","message":"ptc-sidecar runs Python, bash, JavaScript and TypeScript, not \"go\""}"#),
            ("POST", "/v1/exec_code", &key, Some(r#"{"code": "1", "lang": "ruby"}"#), 400,
             r#"{"error":{"type":"bad_request","message":"lang \"ruby\" is not run here: use \"python\" (the default), \"bash\", \"javascript\" or \"typescript\""}}"#),
            ("POST", "/exec/programmatic", &key, Some(r#"{"continuation_token": "00.00"}"#), 403,
             r#"{"error":{"type":"invalid_token","message":"the continuation token is not one this sidecar issued (malformed or forged)"}}"#),
            ("POST", "/exec/programmatic", &key, Some(r#"{"continuation_token": 1}"#), 400,
             r#"{"error":{"type":"bad_request","message":"expected {\"code\": \"...\", \"tools\": [...], \"timeout\"?: ms, \"session_id\"?: \"...\"} or {\"continuation_token\": \"...\", \"tool_results\": [...]}: invalid type: integer `1`, expected a string"}}"#),
            ("POST", "/exec/programmatic/cancel", &key, Some(r#"{"request_id": "r"}"#), 404,
             r#"{"error":{"type":"not_found","message":"no open run has a request with this id (it may be over)"}}"#),
        ];
        for (method, path, headers, body, status, want) in cases {
            let got = raw(&on, method, path, headers, body).await;
            assert_eq!(got, (status, JSON.into(), want.into()), "{method} {path}");
        }

        let off = TestSidecar::start(&[]).await;
        for (path, want) in [
            ("/v1/exec_code",
             r#"{"error":{"type":"ptc_disabled","message":"PTC_ENABLED is false on this sidecar: every tool is direct and there is no exec_code"}}"#),
            ("/exec/programmatic",
             r#"{"error":{"type":"ptc_disabled","message":"PTC_ENABLED is false on this sidecar: there is no code execution"}}"#),
            ("/exec",
             r#"{"error":{"type":"ptc_disabled","message":"PTC_ENABLED is false on this sidecar: there is no code execution"}}"#),
        ] {
            let got = raw(&off, "POST", path, &[], Some(r#"{"code": "1"}"#)).await;
            assert_eq!(got, (409, JSON.into(), want.into()), "{path}");
        }
    })
    .await
    .unwrap();
}
