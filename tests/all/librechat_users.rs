//! LibreChat's current server (issue 24): per-user JWTs on LibreChat's routes, minted the way
//! LibreChat mints them (keys made here, `tests/support/jwt.rs`), and each user's sessions and
//! files kept apart, through real HTTP, real python3 and a real Redis for the events.

use crate::common::support::jwt::{
    self, LIBRECHAT_KID, SigningKey, claims, hs256, swap_payload, unsigned, with,
};
use crate::common::{TEST_TIMEOUT, TempDir, TestRedis, TestSidecar, unique};
use crate::librechat::{PROGRAMMATIC, answer_all, cont, drive_client, real_client, sidecar, tools};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const KEY: &str = "operator-key";

/// A header that authenticates a request: its name and value.
type Auth = (&'static str, String);

/// Someone who is not the session's owner, and how they authenticate.
type Other = (&'static str, fn() -> Auth);

fn ed() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| SigningKey::ed25519(LIBRECHAT_KID))
}

fn rsa() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| SigningKey::rsa("lc-codeapi-rsa"))
}

/// LibreChat's two keys as a JWKS (rotation from RSA to Ed25519, say).
fn jwks() -> String {
    json!({"keys": [ed().jwk, rsa().jwk]}).to_string()
}

/// A sidecar with LibreChat's keys and the operator's key.
async fn users_sidecar(extra: &[(&str, &str)]) -> TestSidecar {
    let keys = jwks();
    let mut vars = vec![
        ("PTC_LIBRECHAT_JWT_PUBLIC_KEY", keys.as_str()),
        ("PTC_API_KEY", KEY),
    ];
    vars.extend_from_slice(extra);
    sidecar(&vars).await
}

/// A fresh token of `sub` in `tenant`, as LibreChat mints one per request.
fn token(sub: &str, tenant: &str) -> String {
    ed().mint(&claims(sub, tenant))
}

fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
}

async fn send(
    s: &TestSidecar,
    method: reqwest::Method,
    path: &str,
    auth: &Auth,
    body: Option<reqwest::Body>,
    content_type: Option<String>,
) -> (u16, Value) {
    let mut r = s.http.request(method, s.url(path)).header(auth.0, &auth.1);
    if let Some(ct) = content_type {
        r = r.header("content-type", ct);
    }
    if let Some(body) = body {
        r = r.body(body);
    }
    let response = r.send().await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

async fn post(s: &TestSidecar, path: &str, auth: &Auth, body: &Value) -> (u16, Value) {
    let ct = Some("application/json".to_string());
    send(
        s,
        reqwest::Method::POST,
        path,
        auth,
        Some(body.to_string().into()),
        ct,
    )
    .await
}

async fn get(s: &TestSidecar, path: &str, auth: &Auth) -> (u16, Value) {
    send(s, reqwest::Method::GET, path, auth, None, None).await
}

/// `POST /upload` of one file, into `session` when given.
async fn upload(
    s: &TestSidecar,
    auth: &Auth,
    session: Option<&str>,
    name: &str,
    bytes: &[u8],
) -> (u16, Value) {
    let boundary = "ptc-users-boundary";
    let mut body = Vec::new();
    if let Some(id) = session {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"session_id\"\r\n\r\n{id}\r\n").as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let ct = Some(format!("multipart/form-data; boundary={boundary}"));
    send(
        s,
        reqwest::Method::POST,
        "/upload",
        auth,
        Some(body.into()),
        ct,
    )
    .await
}

/// Every refusal the issue lists, on `/exec` with code that would leave a mark: each is a 401
/// whose message names the failed check and never the token, no run starts (no `ptc_runs`),
/// and each is counted by its reason. Tokens within the leeway, of either key, and the
/// operator's key are let in.
#[tokio::test]
async fn each_bad_token_is_refused_with_what_failed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = users_sidecar(&[]).await;
        let now = jwt::now();
        let good = claims("u1", "legacy");
        let other = SigningKey::ed25519(LIBRECHAT_KID);
        let no_kid = ed().mint_without_kid(&good);
        let cases: Vec<(&str, Option<String>, &str, &str)> = vec![
            ("no header", None, "no token", "missing"),
            (
                "expired",
                Some(ed().mint(&with(good.clone(), "exp", json!(now - 120)))),
                "has expired",
                "expired",
            ),
            (
                "not yet valid",
                Some(ed().mint(&with(good.clone(), "nbf", json!(now + 600)))),
                "not valid yet",
                "not_yet_valid",
            ),
            (
                "wrong aud",
                Some(ed().mint(&with(good.clone(), "aud", json!("other-api")))),
                "aud is not \"codeapi\"",
                "audience",
            ),
            (
                "wrong iss",
                Some(ed().mint(&with(good.clone(), "iss", json!("not-librechat")))),
                "iss is not \"librechat\"",
                "issuer",
            ),
            (
                "another key",
                Some(other.mint(&good)),
                "signature does not verify",
                "signature",
            ),
            (
                "alg none",
                Some(unsigned(&good)),
                "alg \"none\" is refused",
                "algorithm",
            ),
            (
                "HS256 keyed with the public key",
                Some(hs256(ed().public_pem.as_bytes(), LIBRECHAT_KID, &good)),
                "alg \"HS256\" is refused",
                "algorithm",
            ),
            (
                "a swapped payload",
                Some(swap_payload(
                    &token("u1", "legacy"),
                    &claims("admin", "legacy"),
                )),
                "signature does not verify",
                "signature",
            ),
            (
                "a kid not in the set",
                Some(SigningKey::ed25519("lc-old").mint(&good)),
                "kid \"lc-old\" is not in",
                "kid",
            ),
            ("no kid, two keys", Some(no_kid), "names no kid", "kid"),
            ("not a JWT", Some("sekret".into()), "not a JWT", "malformed"),
        ];
        let marker = s.runtime.0.join("ran");
        let code = format!(
            "open({:?}, 'w').write('x')\nprint('ran')",
            marker.display().to_string()
        );
        for (case, token, says, _) in &cases {
            let auth = match token {
                Some(t) => bearer(t),
                None => ("x-nothing", String::new()),
            };
            let (status, r) = post(&s, "/exec", &auth, &json!({"code": code})).await;
            assert_eq!(status, 401, "{case}: {r}");
            assert_eq!(r["error"]["type"], "unauthorized", "{case}");
            let message = r["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{case}: {message}");
            if let Some(t) = token.as_deref().filter(|t| t.len() > 20) {
                assert!(
                    !message.contains(t) && !message.contains(&t[..20]),
                    "{case} repeats the token"
                );
            }
        }
        assert!(!marker.exists(), "a refused request ran code");
        let text = s.metrics(Some(KEY)).await;
        assert!(
            !text.contains("ptc_runs_total{"),
            "a refused request started a run:\n{text}"
        );
        for reason in [
            "missing",
            "expired",
            "not_yet_valid",
            "audience",
            "issuer",
            "signature",
            "algorithm",
            "kid",
            "malformed",
        ] {
            let n = cases.iter().filter(|c| c.3 == reason).count();
            let line = format!("ptc_librechat_tokens_total{{outcome=\"{reason}\"}} {n}");
            assert!(text.contains(&line), "{line} in\n{text}");
        }

        // Let in: both keys, 30 s either side of the window, and the operator's key.
        let in_leeway = with(
            with(good.clone(), "exp", json!(now - 30)),
            "nbf",
            json!(now - 400),
        );
        let early = with(good.clone(), "nbf", json!(now + 30));
        for (case, auth) in [
            ("Ed25519", bearer(&ed().mint(&good))),
            ("RSA", bearer(&rsa().mint(&good))),
            ("expired 30 s ago", bearer(&ed().mint(&in_leeway))),
            ("valid in 30 s", bearer(&rsa().mint(&early))),
            ("the operator's key", ("x-api-key", KEY.to_string())),
        ] {
            let (status, r) = post(&s, "/exec", &auth, &json!({"code": "print(6 * 7)"})).await;
            assert_eq!(
                (status, r["stdout"].as_str()),
                (200, Some("42\n")),
                "{case}: {r}"
            );
        }
        // A user's token opens LibreChat's routes, not the rest of the control API.
        let (status, _) = get(&s, "/v1/tools", &bearer(&token("u1", "legacy"))).await;
        assert_eq!(status, 401);
        let health = s.health().await;
        assert_eq!(health["auth"]["mode"], "api_key+librechat_jwt");
        assert_eq!(
            health["auth"]["librechat_jwt"]["keys"][0]["kid"],
            LIBRECHAT_KID
        );
    })
    .await
    .unwrap();
}

/// Two users of one tenant, and one `sub` in two tenants: none of them, nor the operator's
/// key, lists, downloads, uploads into, runs in or takes input files from another's session;
/// each of them meets what a session that does not exist meets. The owner does all of it. The
/// owner's runs' events carry its sub and tenant, never the token.
#[tokio::test]
async fn users_and_tenants_are_kept_apart() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = TestRedis::any();
        let agent = unique("users");
        let s = users_sidecar(&[("REDIS_URL", &redis.url), ("PTC_AGENT_ID", &agent)]).await;
        let alice = || bearer(&token("alice", "acme"));
        let (status, up) = upload(&s, &alice(), None, "secret.txt", b"alice's secret").await;
        assert_eq!(status, 200, "{up}");
        let session = up["session_id"].as_str().unwrap().to_string();
        let file = up["files"][0]["fileId"].as_str().unwrap().to_string();

        let read = "print(open('secret.txt').read())";
        let others: Vec<Other> = vec![
            ("bob of the same tenant", || bearer(&token("bob", "acme"))),
            ("alice of another tenant", || {
                bearer(&token("alice", "globex"))
            }),
            ("the operator's key", || ("x-api-key", KEY.to_string())),
        ];
        for (who, auth) in &others {
            let (status, listed) = get(&s, &format!("/files/{session}"), &auth()).await;
            assert_eq!((status, listed.clone()), (200, json!([])), "{who} lists");
            let (status, body) = get(&s, &format!("/download/{session}/{file}"), &auth()).await;
            assert_eq!(status, 404, "{who} downloads: {body}");
            assert!(!body.to_string().contains("alice's secret"));
            let (status, _) =
                get(&s, &format!("/sessions/{session}/objects/{file}"), &auth()).await;
            assert_eq!(status, 404, "{who} reads the file's facts");
            let (status, body) = upload(&s, &auth(), Some(&session), "planted.txt", b"x").await;
            assert_eq!(status, 404, "{who} uploads into it: {body}");
            let (status, body) = post(
                &s,
                "/exec",
                &auth(),
                &json!({"code": read, "session_id": session}),
            )
            .await;
            assert_eq!(status, 404, "{who} runs in it: {body}");
            let (status, body) = post(
                &s,
                PROGRAMMATIC,
                &auth(),
                &json!({"code": read, "tools": tools(), "session_id": session}),
            )
            .await;
            assert_eq!(status, 404, "{who} runs tools in it: {body}");
            // Named as an input file's session: gone, as an expired one is.
            let files = json!([{"id": file, "session_id": session, "name": "secret.txt"}]);
            let (status, r) = post(
                &s,
                "/exec",
                &auth(),
                &json!({"code": "import os\nprint(os.path.exists('secret.txt'))", "files": files}),
            )
            .await;
            assert_eq!(
                (status, r["stdout"].as_str()),
                (200, Some("False\n")),
                "{who} takes it as input: {r}"
            );
            assert!(r["stderr"].as_str().unwrap().contains("is gone"), "{r}");
        }
        // Nothing was planted, and alice does all four.
        let (status, listed) = get(&s, &format!("/files/{session}"), &alice()).await;
        assert_eq!(status, 200);
        let names: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["filename"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["secret.txt"]);
        let (status, body) = get(&s, &format!("/download/{session}/{file}"), &alice()).await;
        assert_eq!(
            (status, body),
            (200, Value::String("alice's secret".into()))
        );
        let (status, _) = upload(&s, &alice(), Some(&session), "more.txt", b"more").await;
        assert_eq!(status, 200);
        let (status, r) = post(
            &s,
            "/exec",
            &alice(),
            &json!({"code": read, "session_id": session}),
        )
        .await;
        assert_eq!(
            (status, r["stdout"].as_str()),
            (200, Some("alice's secret\n")),
            "{r}"
        );

        // Her run's events say who it was for, and no token.
        let mut conn = redis.connection().await;
        let deadline = Instant::now() + Duration::from_secs(20);
        let finished = loop {
            let hers: Vec<Value> = redis
                .stream_events(&mut conn, &agent)
                .await
                .into_iter()
                .filter(|e| e["session_id"] == session.as_str() && e["type"] == "exec.finished")
                .collect();
            if let Some(last) = hers.last() {
                break last.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no exec.finished of alice's session"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            (finished["sub"].as_str(), finished["tenant_id"].as_str()),
            (Some("alice"), Some("acme")),
            "{finished}"
        );
        assert!(
            !finished.to_string().contains("eyJ"),
            "an event carries a token: {finished}"
        );
        let text = s.metrics(Some(KEY)).await;
        assert!(
            text.contains("ptc_tenant_runs_total{tenant=\"acme\"}"),
            "{text}"
        );
        assert!(
            !text.contains("alice"),
            "a metric is labelled by user:\n{text}"
        );
    })
    .await
    .unwrap();
}

/// A continuation and a cancel belong to the principal whose run it is: another user holding
/// the token or the request id gets nowhere, and the run's owner goes on.
#[tokio::test]
async fn another_users_continuation_and_cancel_are_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = users_sidecar(&[]).await;
        let (alice, bob) = (
            || bearer(&token("alice", "acme")),
            || bearer(&token("bob", "acme")),
        );
        let body =
            json!({"code": "print(await add(a=1, b=2))", "tools": tools(), "timeout": 20000});
        let mut request = s
            .http
            .post(s.url(PROGRAMMATIC))
            .header(alice().0, alice().1)
            .header("x-librechat-code-request-id", "req-1")
            .json(&body);
        let r: Value = request.send().await.unwrap().json().await.unwrap();
        request = s
            .http
            .post(s.url("/exec/programmatic/cancel"))
            .header(bob().0, bob().1)
            .json(&json!({"request_id": "req-1"}));
        assert_eq!(
            request.send().await.unwrap().status(),
            404,
            "bob cancels alice's run"
        );
        assert_eq!(r["status"], "tool_call_required", "{r}");
        let token_value = &r["continuation_token"];
        let (status, refused) =
            post(&s, PROGRAMMATIC, &bob(), &cont(token_value, answer_all(&r))).await;
        assert_eq!(
            (status, refused["error"]["type"].as_str()),
            (403, Some("invalid_token")),
            "{refused}"
        );
        let (status, done) = post(
            &s,
            PROGRAMMATIC,
            &alice(),
            &cont(token_value, answer_all(&r)),
        )
        .await;
        assert_eq!(
            (status, done["status"].as_str()),
            (200, Some("completed")),
            "{done}"
        );
    })
    .await
    .unwrap();
}

/// The owner is kept with `PTC_SESSION_DIR`: after a restart the session is still alice's.
#[tokio::test]
async fn owners_survive_a_restart() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("user-sessions");
        let root = dir.0.join("sessions");
        let root = root.to_str().unwrap();
        let alice = || bearer(&token("alice", "acme"));
        let (session, file) = {
            let s = users_sidecar(&[("PTC_SESSION_DIR", root)]).await;
            let (status, up) = upload(&s, &alice(), None, "kept.txt", b"kept").await;
            assert_eq!(status, 200, "{up}");
            (
                up["session_id"].as_str().unwrap().to_string(),
                up["files"][0]["fileId"].as_str().unwrap().to_string(),
            )
        };
        let s = users_sidecar(&[("PTC_SESSION_DIR", root)]).await;
        let (status, _) = get(
            &s,
            &format!("/download/{session}/{file}"),
            &bearer(&token("bob", "acme")),
        )
        .await;
        assert_eq!(status, 404);
        let (status, body) = get(&s, &format!("/download/{session}/{file}"), &alice()).await;
        assert_eq!((status, body), (200, Value::String("kept".into())));
    })
    .await
    .unwrap();
}

/// Nothing a run can touch decides whose a session is or when it was last used (issue 34).
/// What a run could once do to the session root it passes through, the test does here from
/// outside (a run can no longer: seccomp refuses metadata calls by path, so the test stands in
/// for a run that somehow did): one of alice's session folders gets mtime 0, another's record
/// mode 0000, a third's record is replaced by a folder. After a restart and longer than the
/// sweeper's interval, the first is still hers (its last use is the sidecar's record, not the
/// folder's mtime); the other two are nobody's — alice, bob and the key's holder all get 404
/// (an unreadable record is never the key's), the sweeper leaves them, `GET /v1/sessions` lists
/// them as unreadable and `ptc_session_records_unreadable` counts them, until the key's
/// `DELETE` removes them.
#[tokio::test]
async fn what_a_run_could_touch_decides_no_session() {
    use std::os::unix::fs::PermissionsExt;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("user-records");
        let root = dir.0.join("sessions");
        let root_text = root.to_str().unwrap();
        // A TTL of 20 s: the sweeper runs every 5 s.
        let vars = [("PTC_SESSION_DIR", root_text), ("PTC_SESSION_TTL", "20")];
        let alice = || bearer(&token("alice", "acme"));
        let key = || ("x-api-key", KEY.to_string());
        let made: Vec<(String, String)> = {
            let s = users_sidecar(&vars).await;
            let mut made = Vec::new();
            for name in ["touched", "chmodded", "replaced"] {
                let (status, up) = upload(&s, &alice(), None, name, name.as_bytes()).await;
                assert_eq!(status, 200, "{up}");
                made.push((
                    up["session_id"].as_str().unwrap().to_string(),
                    up["files"][0]["fileId"].as_str().unwrap().to_string(),
                ));
            }
            made
        };
        let [(touched, touched_file), (chmodded, _), (replaced, _)] = &made[..] else {
            unreachable!()
        };
        std::fs::File::open(root.join(touched))
            .unwrap()
            .set_modified(std::time::SystemTime::UNIX_EPOCH)
            .unwrap();
        let record = |id: &str| root.join(format!("{id}.owner"));
        std::fs::set_permissions(record(chmodded), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::remove_file(record(replaced)).unwrap();
        std::fs::create_dir(record(replaced)).unwrap();

        let s = users_sidecar(&vars).await;
        tokio::time::sleep(Duration::from_secs(6)).await;
        let download = |id: &str, file: &str| format!("/download/{id}/{file}");
        let (status, body) = get(&s, &download(touched, touched_file), &alice()).await;
        assert_eq!(
            (status, body),
            (200, Value::String("touched".into())),
            "the session whose folder's mtime is 0 was swept"
        );
        // The key first: read as the empty owner, a user's session would be the key's.
        for (id, file) in made[1..].iter().rev() {
            let path = download(id, file);
            let everyone: [(&str, Auth); 3] = [
                ("the key", key()),
                ("alice", alice()),
                ("bob", bearer(&token("bob", "acme"))),
            ];
            for (who, auth) in &everyone {
                let (status, body) = get(&s, &path, auth).await;
                assert_eq!(status, 404, "{who} downloads from {id}: {body}");
                let (status, body) = upload(&s, auth, Some(id), "planted.txt", b"x").await;
                assert_eq!(status, 404, "{who} uploads into {id}: {body}");
            }
            assert!(root.join(id).is_dir(), "{id} was swept");
        }
        let listed = s
            .http
            .get(s.url("/v1/sessions"))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        let unreadable: Vec<&str> = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["unreadable"].is_string())
            .map(|e| e["id"].as_str().unwrap())
            .collect();
        let mut held_out = vec![chmodded.as_str(), replaced.as_str()];
        held_out.sort();
        assert_eq!(unreadable, held_out, "{listed}");
        let text = s.metrics(Some(KEY)).await;
        assert!(
            text.contains("ptc_session_records_unreadable 2\n"),
            "{text}"
        );

        // Housekeeping: the key removes one, folder and record.
        let removed = s
            .http
            .delete(s.url(&format!("/v1/sessions/{chmodded}")))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(removed.status(), 204);
        assert!(!root.join(chmodded).exists() && !record(chmodded).exists());
        let text = s.metrics(Some(KEY)).await;
        assert!(
            text.contains("ptc_session_records_unreadable 1\n"),
            "{text}"
        );
    })
    .await
    .unwrap();
}

/// Bad key material stops startup with the variable named and the key not repeated; a key
/// alone may open a listener beyond loopback, where the rest of the API then needs the key
/// it does not have.
#[test]
fn bad_keys_stop_startup_and_a_jwt_key_alone_opens_only_librechat() {
    use ptc_sidecar::config::Config;
    let vars = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let err = Config::from_vars(vars(&[("PTC_LIBRECHAT_JWT_PUBLIC_KEY", &ed().private_pem)]))
        .unwrap_err();
    assert_eq!(err.variable, "PTC_LIBRECHAT_JWT_PUBLIC_KEY");
    assert!(err.expected.contains("private key"), "{err}");
    assert!(
        !err.to_string().contains("BEGIN"),
        "the key is repeated: {err}"
    );
    let err = Config::from_vars(vars(&[("PTC_LISTEN", "0.0.0.0:7400")])).unwrap_err();
    assert!(
        err.expected.contains("PTC_LIBRECHAT_JWT_PUBLIC_KEY"),
        "{err}"
    );
    let c = Config::from_vars(vars(&[
        ("PTC_LISTEN", "0.0.0.0:7400"),
        ("PTC_LIBRECHAT_JWT_PUBLIC_KEY", &ed().public_pem),
    ]))
    .unwrap();
    assert!(c.librechat_jwt.is_some() && c.api_key.is_none());
}

/// The real `@librechat/agents` client with `authHeaders` a function minting a fresh token per
/// request, as LibreChat's server gives it: its Python runner with the Ed25519 key, its bash
/// runner with the RSA key, every scenario of `the_real_librechat_client`. Skipped, with the
/// reason printed, where node or the npm install is missing.
#[tokio::test]
async fn the_real_librechat_client_with_per_request_tokens() {
    let Some(dir) = real_client() else { return };
    tokio::time::timeout(TEST_TIMEOUT, async {
        // No PTC_API_KEY: LibreChat's tokens are the only way in.
        let keys = jwks();
        let s = sidecar(&[("PTC_LIBRECHAT_JWT_PUBLIC_KEY", &keys)]).await;
        for (script, scenarios, key) in [("drive.mjs", 10, ed()), ("drive-bash.mjs", 9, rsa())] {
            let env = [
                ("PTC_TEST_JWT_PRIVATE_KEY", key.private_pem.clone()),
                ("PTC_TEST_JWT_KID", key.kid.clone()),
                ("PTC_TEST_JWT_ALG", format!("{:?}", key.alg)),
            ];
            let stdout = drive_client(&dir, script, &s, &[], &env, scenarios).await;
            assert!(
                stdout.contains("ok - every request carried a fresh token"),
                "{stdout}"
            );
        }
        let text = s.metrics(None).await;
        assert!(
            !text.contains("outcome=\"signature\"")
                && text.contains("ptc_librechat_tokens_total{outcome=\"ok\"}"),
            "{text}"
        );
        crate::common::assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}
