//! Sessions and files over LibreChat's code API, through real HTTP with real python3 and bash
//! children: files a run writes come back and stay for the session's next run, uploads reach
//! code, downloads are byte-identical, sessions are apart, and bad input is refused with
//! nothing kept. The real client's file scenarios are in `tests/librechat/drive-bash.mjs`.

use crate::common::{TEST_TIMEOUT, TestSidecar, assert_nothing_left};
use crate::librechat::{PROGRAMMATIC, post, sidecar};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// Every byte value, twice: a download that is not byte-identical shows.
fn binary() -> Vec<u8> {
    (0..512u32).map(|i| (i % 256) as u8).collect()
}

async fn exec(s: &TestSidecar, body: Value) -> Value {
    let (status, r) = post(s, "/exec", &body).await;
    assert_eq!(status, 200, "{r}");
    r
}

/// `POST /upload` with one `file` part (and a `session_id` part first when given).
async fn upload(s: &TestSidecar, session: Option<&str>, name: &str, bytes: &[u8]) -> (u16, Value) {
    upload_to(s, "/upload", session, name, bytes).await
}

/// [`upload`] to `path` (`/upload` or `/upload/batch`).
async fn upload_to(
    s: &TestSidecar,
    path: &str,
    session: Option<&str>,
    name: &str,
    bytes: &[u8],
) -> (u16, Value) {
    let boundary = "ptc-test-boundary-7f3a";
    let mut body = Vec::new();
    if let Some(id) = session {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"session_id\"\r\n\r\n{id}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"entity_id\"\r\n\r\nagent-1\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = s
        .http
        .post(s.url(path))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn download(s: &TestSidecar, session: &str, file: &str) -> (u16, Vec<u8>, String) {
    let r = s
        .http
        .get(s.url(&format!("/download/{session}/{file}")))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let disposition = r
        .headers()
        .get("content-disposition")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, r.bytes().await.unwrap().to_vec(), disposition)
}

async fn get_json(s: &TestSidecar, path: &str) -> Value {
    let r = s.http.get(s.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {path}");
    r.json().await.unwrap()
}

fn is_id(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 21
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

#[tokio::test]
async fn a_run_s_files_come_back_stay_and_download_byte_identical() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        // Python writes under /mnt/data (what the client tells the model) and prints the path.
        let code = "import os\n\
                    os.makedirs('/mnt/data/out', exist_ok=True)\n\
                    open('/mnt/data/out/data.bin', 'wb').write(bytes(range(256)) * 2)\n\
                    open('notes.txt', 'w').write('hello')\n\
                    print(os.getcwd(), os.environ['LIBRECHAT_CODE_DATA_DIR'] == os.getcwd())";
        let r = exec(&s, json!({"lang": "py", "code": code})).await;
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["stdout"], "/mnt/data True\n", "the data directory shows as /mnt/data");
        let session = r["session_id"].as_str().unwrap().to_string();
        assert!(is_id(&r["session_id"]), "{r}");
        let files = r["files"].as_array().unwrap();
        let names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["notes.txt", "out/data.bin"]);
        let data = files.iter().find(|f| f["name"] == "out/data.bin").unwrap();
        assert!(is_id(&data["id"]), "{data}");
        assert_eq!(data["path"], "/mnt/data/out/data.bin");
        assert_eq!(data["size"], 512);

        // The next run of the session (bash this time) finds them, and only what it changes
        // comes back.
        let r = exec(
            &s,
            json!({"lang": "bash", "session_id": session,
                   "code": "cat notes.txt; echo; wc -c < /mnt/data/out/data.bin; echo more >> notes.txt"}),
        )
        .await;
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["stdout"], "hello\n512\n");
        let names: Vec<&Value> = r["files"].as_array().unwrap().iter().map(|f| &f["name"]).collect();
        assert_eq!(names, vec!["notes.txt"]);

        // LibreChat's listing and download.
        let listing = get_json(&s, &format!("/files/{session}?detail=full")).await;
        let listed = listing.as_array().unwrap();
        assert_eq!(listed.len(), 2, "{listing}");
        let item = listed.iter().find(|f| f["filename"] == "out/data.bin").unwrap();
        assert_eq!(item["name"], format!("{session}/{}", data["id"].as_str().unwrap()));
        assert_eq!(item["metadata"]["original-filename"], "out/data.bin");
        assert!(item["lastModified"].as_str().unwrap().ends_with('Z'), "{item}");
        let (status, bytes, disposition) =
            download(&s, &session, data["id"].as_str().unwrap()).await;
        assert_eq!(status, 200);
        assert_eq!(bytes, binary());
        assert_eq!(disposition, "attachment; filename=\"data.bin\"");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_upload_reaches_code_and_files_move_between_sessions_by_id() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let (status, up) = upload(&s, None, "input.csv", b"a,b\n1,2\n").await;
        assert_eq!(status, 200, "{up}");
        assert_eq!(up["message"], "success");
        assert_eq!(up["session_id"], up["storage_session_id"]);
        let (from, file) = (
            up["session_id"].as_str().unwrap().to_string(),
            up["files"][0]["fileId"].as_str().unwrap().to_string(),
        );
        assert_eq!(up["files"][0]["filename"], "input.csv");
        // The batch form (LibreChat's /upload/batch) into the same session.
        let (status, batch) = upload_to(&s, "/upload/batch", Some(&from), "more.txt", b"m").await;
        assert_eq!(status, 200, "{batch}");
        assert_eq!(batch["session_id"], from.as_str());
        assert_eq!(
            (&batch["succeeded"], &batch["failed"]),
            (&json!(1), &json!(0))
        );
        assert_eq!(batch["files"][0]["status"], "success");
        // A run of another session names the upload's session and file, as LibreChat does.
        let r = exec(
            &s,
            json!({"lang": "py",
                   "files": [{"id": file, "session_id": from, "name": "data/input.csv"}],
                   "code": "print(open('/mnt/data/data/input.csv').read().splitlines()[1])"}),
        )
        .await;
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["stdout"], "1,2\n");
        assert_ne!(r["session_id"], from.as_str());
        // A file that is gone does not fail the run: stderr says so.
        let r = exec(
            &s,
            json!({"lang": "bash",
                   "files": [{"id": "AAAAAAAAAAAAAAAAAAAAA", "session_id": from, "name": "x.txt"}],
                   "code": "ls"}),
        )
        .await;
        assert_eq!(r["status"], "completed", "{r}");
        assert!(r["stderr"].as_str().unwrap().contains("\"x.txt\""), "{r}");
        assert!(
            r["stderr"].as_str().unwrap().contains("upload it again"),
            "{r}"
        );
    })
    .await
    .unwrap();
}

/// Code reaches no other session's directory, even by its path; the request must name a
/// session (and a file id in it) to bring its files along.
#[tokio::test]
async fn sessions_are_apart() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let status = s.sidecar.state.runner.as_ref().unwrap().sandbox_status().clone();
        let (_, up) = upload(&s, None, "secret.txt", b"only mine").await;
        let other = up["session_id"].as_str().unwrap();
        let r = exec(&s, json!({"lang": "bash", "code": "pwd"})).await;
        assert_eq!(r["stdout"], "/mnt/data\n");
        let dir = s.sidecar.state.sessions.as_ref().unwrap().get(other).unwrap().dir.clone();
        let r = exec(
            &s,
            json!({"lang": "bash", "code": format!("cat {}/secret.txt 2>&1; echo \" status $?\"", dir.display())}),
        )
        .await;
        if status.landlock.starts_with("abi") {
            // Both directories belong to the run user: only Landlock keeps code out.
            let out = r["stdout"].as_str().unwrap();
            assert!(out.contains("Permission denied") && out.ends_with(" status 1\n"), "{r}");
        } else {
            println!("not checked: this kernel has no Landlock ({status})");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bad_file_input_is_refused_and_keeps_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_SESSION_MAX_MB", "1")]).await;
        // Names that leave the session.
        for name in ["../escape.txt", "/etc/passwd", "a/../../b"] {
            let (status, r) = post(
                &s,
                "/exec",
                &json!({"lang": "bash", "code": "ls",
                        "files": [{"id": "AAAAAAAAAAAAAAAAAAAAA", "session_id": "s1", "name": name}]}),
            )
            .await;
            assert_eq!(status, 400, "{name}: {r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(name), "{r}");
        }
        let (status, r) = upload(&s, None, "../up.txt", b"x").await;
        assert_eq!(status, 400, "{r}");
        // A session id that is not one.
        let (status, r) =
            post(&s, PROGRAMMATIC, &json!({"lang": "bash", "code": "ls", "tools": [], "session_id": "../x"})).await;
        assert_eq!(status, 400, "{r}");
        // Over the session's quota: refused, and nothing of it kept.
        let (status, r) = upload(&s, Some("quota-test"), "big.bin", &vec![7u8; 2 << 20]).await;
        assert_eq!(status, 413, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("PTC_SESSION_MAX_MB"), "{r}");
        let listing = get_json(&s, "/files/quota-test").await;
        assert_eq!(listing, json!([]));
        // Unknown sessions and files.
        let (status, _, _) = download(&s, "no-such-session", "AAAAAAAAAAAAAAAAAAAAA").await;
        assert_eq!(status, 404);
        let listing = get_json(&s, "/files/no-such-session").await;
        assert_eq!(listing, json!([]));
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// A run's link to a file outside its session is neither listed nor served, though the run
/// could make it.
#[tokio::test]
async fn links_out_of_a_session_are_not_followed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let outside = std::env::temp_dir().join(format!("ptc-outside-{}", std::process::id()));
        std::fs::write(&outside, "the sidecar's secret").unwrap();
        let code = format!(
            "ln -s {} link.txt; mkdir d; ln -s / d/root; ln {} hard.txt 2>/dev/null; echo ok > real.txt",
            outside.display(),
            outside.display()
        );
        let r = exec(&s, json!({"lang": "bash", "code": code})).await;
        assert_eq!(r["status"], "completed", "{r}");
        let names: Vec<&Value> = r["files"].as_array().unwrap().iter().map(|f| &f["name"]).collect();
        assert_eq!(names, vec!["real.txt"], "{r}");
        let session = r["session_id"].as_str().unwrap();
        let link_id = ptc_sidecar::session::file_id(session, "link.txt");
        let (status, body, _) = download(&s, session, &link_id).await;
        assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
        std::fs::remove_file(&outside).unwrap();
    })
    .await
    .unwrap();
}

/// A session no request names for `PTC_SESSION_TTL` is removed with its files; one in use is
/// not.
#[tokio::test]
async fn an_idle_session_expires_with_its_files() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_SESSION_TTL", "1")]).await;
        let r = exec(&s, json!({"lang": "bash", "code": "echo x > kept.txt"})).await;
        let session = r["session_id"].as_str().unwrap().to_string();
        let dir = s
            .sidecar
            .state
            .sessions
            .as_ref()
            .unwrap()
            .get(&session)
            .unwrap()
            .dir
            .clone();
        // A run that lasts past the TTL keeps its session.
        let r = exec(
            &s,
            json!({"lang": "bash", "session_id": session, "code": "sleep 2.5; cat kept.txt"}),
        )
        .await;
        assert_eq!(r["stdout"], "x\n", "{r}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while dir.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} outlived its TTL",
                dir.display()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(get_json(&s, &format!("/files/{session}")).await, json!([]));
    })
    .await
    .unwrap();
}

/// One run at a time uses a session: the next waits for it within its own timeout, and one
/// whose timeout passes while waiting is refused, saying why.
#[tokio::test]
async fn runs_of_one_session_take_turns() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = std::sync::Arc::new(sidecar(&[]).await);
        let session = "turns-test";
        let first = {
            let s = s.clone();
            tokio::spawn(async move {
                exec(
                    &s,
                    json!({"lang": "bash", "session_id": session, "timeout": 20000,
                           "code": "sleep 3; echo first > order.txt"}),
                )
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let (status, busy) = post(
            &s,
            "/exec",
            &json!({"lang": "bash", "session_id": session, "timeout": 1000, "code": "echo never"}),
        )
        .await;
        assert_eq!(status, 409, "{busy}");
        assert_eq!(busy["error"]["type"], "busy", "{busy}");
        assert!(busy["error"]["message"].as_str().unwrap().contains(session), "{busy}");
        let second = exec(
            &s,
            json!({"lang": "bash", "session_id": session, "timeout": 20000, "code": "cat order.txt"}),
        )
        .await;
        assert_eq!(second["stdout"], "first\n", "the second run waited for the first: {second}");
        assert_eq!(first.await.unwrap()["status"], "completed");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn save_file_and_a_cut_streams_whole_output_land_among_the_runs_files() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_MAX_OUTPUT_BYTES", "2048")]).await;
        let code = "save_file('report.md', '# done')\nfor i in range(1000):\n    print('row', i)";
        let r = exec(&s, json!({"lang": "py", "code": code})).await;
        assert_eq!(r["status"], "completed", "{r}");
        let mut names: Vec<(&str, &str)> = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["name"].as_str().unwrap(), f["path"].as_str().unwrap()))
            .collect();
        names.sort();
        let out = names
            .iter()
            .find(|(n, _)| n.starts_with("out-"))
            .map(|(n, _)| n.to_string())
            .unwrap();
        assert_eq!(names.len(), 2, "{r}");
        assert!(names.contains(&("report.md", "/mnt/data/report.md")), "{r}");
        assert!(
            r["stdout"].as_str().unwrap().contains(&format!(
                "full output: {out} in the session's working directory"
            )),
            "{r}"
        );
    })
    .await
    .unwrap();
}

/// An upload into a session a run holds waits for the run, but not without a bound: past
/// `FILES_WAIT` (30 s) it gets 409 `busy` naming the session, and nothing it sent is kept.
#[tokio::test]
async fn an_upload_into_a_session_a_run_holds_too_long_is_refused_as_busy() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = std::sync::Arc::new(sidecar(&[]).await);
        let session = "upload-busy-test";
        let run = {
            let s = s.clone();
            tokio::spawn(async move {
                exec(
                    &s,
                    json!({"lang": "bash", "session_id": session, "timeout": 40000,
                           "code": "sleep 34; ls"}),
                )
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let started = std::time::Instant::now();
        let (status, busy) = upload(&s, Some(session), "late.txt", b"late").await;
        let waited = started.elapsed();
        assert_eq!(status, 409, "{busy}");
        assert_eq!(busy["error"]["type"], "busy", "{busy}");
        assert!(
            busy["error"]["message"].as_str().unwrap().contains(session),
            "{busy}"
        );
        assert!(
            waited >= std::time::Duration::from_secs(29),
            "it waited {waited:?}"
        );
        // The run did not see the file: the upload kept nothing.
        let r = run.await.unwrap();
        assert_eq!(r["status"], "completed", "{r}");
        assert!(!r["stdout"].as_str().unwrap().contains("late.txt"), "{r}");
    })
    .await
    .unwrap();
}

/// A run of a client that names no session gets a session of its own; left empty, it goes with
/// the run (kept, every such run held a folder and ~400 bytes for a day), while one the run
/// wrote into stays, and a named session stays even empty.
#[tokio::test]
async fn a_session_made_for_a_run_that_leaves_it_empty_goes_with_the_run() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let store = s.sidecar.state.sessions.as_ref().unwrap();
        let root = store.config().root.clone();
        let folders = || std::fs::read_dir(&root).unwrap().count();
        let before = folders();
        for (lang, code) in [("py", "print('hi')"), ("bash", "echo hi")] {
            let r = exec(&s, json!({"lang": lang, "code": code})).await;
            assert_eq!(
                (&r["status"], &r["stdout"]),
                (&json!("completed"), &json!("hi\n"))
            );
            let empty = r["session_id"].as_str().unwrap();
            assert!(store.get(empty).is_none(), "{lang}: {r}");
            assert!(!root.join(empty).exists(), "{lang}: {r}");
        }
        // Through the continuation protocol too, answered or not.
        let (status, r) = post(&s, PROGRAMMATIC, &json!({"code": "print(1)", "tools": []})).await;
        assert_eq!((status, &r["status"]), (200, &json!("completed")), "{r}");
        assert!(
            !root.join(r["session_id"].as_str().unwrap()).exists(),
            "{r}"
        );
        assert_eq!(
            folders(),
            before,
            "no folder left by the runs that wrote nothing"
        );

        let r = exec(
            &s,
            json!({"lang": "py", "code": "open('kept.txt', 'w').write('x')"}),
        )
        .await;
        let kept = r["session_id"].as_str().unwrap();
        assert!(store.get(kept).is_some(), "{r}");
        let listing = get_json(&s, &format!("/files/{kept}")).await;
        assert_eq!(listing.as_array().unwrap().len(), 1, "{listing}");

        let r = exec(
            &s,
            json!({"lang": "py", "session_id": "named-1", "code": "print(1)"}),
        )
        .await;
        assert_eq!(r["session_id"], "named-1", "{r}");
        assert!(store.get("named-1").is_some() && root.join("named-1").is_dir());
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// Issue 34 over LibreChat's code API (a fresh python3 child in the session): a run that grows
/// an uploaded file and adds another past `PTC_SESSION_MAX_MB` ends with an error saying so,
/// and the session is as it was before the run, read from outside: the new file gone, the old
/// one cut back to its size and its bytes.
#[tokio::test]
async fn a_run_past_the_session_quota_leaves_the_session_as_it_was() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_SESSION_MAX_MB", "16")]).await;
        let data = vec![b'd'; 1 << 20];
        let (status, r) = upload(&s, Some("lc-quota"), "data.csv", &data).await;
        assert_eq!(status, 200, "{r}");
        let dir = s.runtime.0.join("sessions/lc-quota");
        let before = crate::common::held(&dir);
        let code = "open('data.csv', 'ab').write(b'x' * (20 << 20))\n\
                    open('new.bin', 'wb').write(b'n' * (2 << 20))\nprint('wrote')";
        let r = exec(
            &s,
            json!({"lang": "py", "code": code, "session_id": "lc-quota"}),
        )
        .await;
        assert_eq!(crate::common::held(&dir), before, "{r}");
        assert_eq!(std::fs::read(dir.join("data.csv")).unwrap(), data);
        assert_eq!(r["status"], "error", "{r}");
        let stderr = r["stderr"].as_str().unwrap();
        assert!(
            stderr.contains("past its quota of 16 MiB (PTC_SESSION_MAX_MB)")
                && stderr.contains("What the run wrote there was removed"),
            "{r}"
        );
        let listing = get_json(&s, "/files/lc-quota").await;
        let names: Vec<&Value> = listing
            .as_array()
            .unwrap()
            .iter()
            .map(|f| &f["filename"])
            .collect();
        assert_eq!(names, [&json!("data.csv")], "{listing}");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}
