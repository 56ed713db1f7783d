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
