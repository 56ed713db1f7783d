//! The JavaScript SDK's IPC client (`sdk-template/ptc_sdk.mjs`, HTTP/1.1 over `node:net`)
//! against a bridge of the test's that answers as the sidecar never does: in chunks, a byte at
//! a time, too long, not at all, or closing its connections while they are idle. node runs the
//! SDK directly (no sandbox, no sidecar); the job points it at the fake bridge.

use crate::common::{TEST_TIMEOUT, TempDir};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Serves one connection: each request's answer by the `mode` of its arguments.
async fn serve(stream: TcpStream, number: usize) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.unwrap();
        if head.starts_with("POST /file") {
            // A lookup's answer longer than the SDK reads (MAX_LOOKUP_ANSWER).
            let answer = json!({"ok": true, "file": "x".repeat(300_000)}).to_string();
            let _ = write(&mut stream, &answer).await;
            return;
        }
        let call: Value = serde_json::from_slice(&body).unwrap();
        let args = &call["args"];
        let result = match args["mode"].as_str() {
            Some("connection") => json!(number),
            Some("long") => json!("y".repeat(args["n"].as_u64().unwrap() as usize)),
            _ => args["value"].clone(),
        };
        let answer = json!({"ok": true, "result": result}).to_string();
        match args["mode"].as_str() {
            Some("silent") => std::future::pending::<()>().await,
            Some("chunked") => {
                let mut out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_string();
                for piece in answer.as_bytes().chunks(3) {
                    let piece = std::str::from_utf8(piece).unwrap();
                    out.push_str(&format!("{:x};ext=1\r\n{piece}\r\n", piece.len()));
                }
                out.push_str("0\r\nTrailer: t\r\n\r\n");
                // A byte at a time: heads, chunk lines and data cut anywhere.
                for byte in out.as_bytes() {
                    stream.write_all(&[*byte]).await.unwrap();
                    stream.flush().await.unwrap();
                }
            }
            Some("then_close") => {
                write(&mut stream, &answer).await.unwrap();
                return;
            }
            _ => write(&mut stream, &answer).await.unwrap(),
        }
    }
}

/// An answer with its Content-Length.
async fn write(stream: &mut BufReader<TcpStream>, body: &str) -> std::io::Result<()> {
    let out = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(out.as_bytes()).await?;
    stream.flush().await
}

/// Runs `code` as a script in node with the SDK, pointed at a fake bridge: its stdout, stderr.
async fn run(code: &str, call_timeout: f64) -> (String, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let bridge = tokio::spawn(async move {
        for number in 1.. {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(serve(stream, number));
        }
    });
    let dir = TempDir::new("javascript-client");
    dir.write(
        "ptc_sdk.mjs",
        include_str!("../../sdk-template/ptc_sdk.mjs"),
    );
    let tool = json!({"name": "t", "js_name": "t", "description": "", "input_schema": {}});
    dir.write("catalog.json", &json!({"tools": [tool]}).to_string());
    let mut node = tokio::process::Command::new("node")
        .arg(dir.0.join("ptc_sdk.mjs"))
        .current_dir(&dir.0)
        .env("TMPDIR", &dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let job = json!({"code": code, "script": true, "ipc": format!("127.0.0.1:{port}"),
        "token": "t0k", "call_timeout": call_timeout});
    let mut stdin = node.stdin.take().unwrap();
    stdin.write_all(job.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = node.wait_with_output().await.unwrap();
    bridge.abort();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr))
}

/// Answers in chunks a byte at a time, one longer than a socket's read, more calls at once than
/// the SDK's connections (each one's own), a closed idle connection replaced, a lookup's answer
/// too long and a silent bridge, each as the SDK's error.
#[tokio::test]
async fn the_sdks_client_reads_what_http_allows_and_bounds_it() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let code = r#"
console.log(await t({value: 1}));
console.log(await t({mode: "chunked", value: "in chunks"}));
console.log((await t({mode: "long", n: 3000000})).length);
const many = await Promise.all(Array.from({length: 200}, (_, i) => t({value: i})));
console.log(many.length, many[199]);
const conns = await Promise.all(Array.from({length: 100}, () => t({mode: "connection"})));
console.log(new Set(conns).size <= 32);
console.log(await t({mode: "then_close", value: 2}));
await new Promise((resolve) => setTimeout(resolve, 100));
console.log(await t({value: 3}));
try { await saveFile("a.txt", "x"); } catch (e) { console.log(e.type, e.message); }
try { await t({mode: "silent"}); } catch (e) { console.log(e.type, e.message); }
console.log(await t({value: 4}));
"#;
        let (stdout, stderr) = run(code, 0.5).await;
        assert_eq!(
            stdout,
            "1\nin chunks\n3000000\n200 199\ntrue\n2\n3\n\
             ipc the sidecar's answer to saveFile is too long\n\
             timeout no answer from the sidecar within 0.5s\n4\n",
            "{stderr}"
        );
    })
    .await
    .unwrap();
}
