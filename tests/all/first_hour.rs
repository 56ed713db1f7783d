//! A newcomer's first hour (issue 37): the `.env` they copied from `.env.example` is read, a
//! misspelt variable is named with the one they meant, a start that fails names the variable
//! and shows its value as they wrote it, and `tools --format description` prints without
//! `PTC_ENABLED`. Each through the real binary, in a directory of the test's own (the `.env`
//! read is the working directory's), with a cleared environment.

use crate::common::{TEST_TIMEOUT, TempDir, config, corpus_dir};
use ptc_sidecar::app::{Sidecar, StartError};
use serde_json::{Value, json};
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `ptc-sidecar ARGS` in `dir` with only `PATH` and `env`, killed past [`TEST_TIMEOUT`] (a
/// `serve` that did not fail would otherwise never end).
fn sidecar(dir: &TempDir, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"));
    cmd.args(args)
        .current_dir(&dir.0)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PTC_RUNTIME_DIR", dir.0.join("rt"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::fs::create_dir_all(dir.0.join("rt")).unwrap();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // Drained while it runs: a full pipe must not hold the child up.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        stdout.read_to_end(&mut b).map(|_| b)
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        stderr.read_to_end(&mut b).map(|_| b)
    });
    let deadline = Instant::now() + TEST_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("ptc-sidecar {args:?} still running after {TEST_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap().unwrap(),
        stderr: err.join().unwrap().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A host tool manifest with one tool besides `complete`, in `dir`.
fn manifest(dir: &TempDir) -> std::path::PathBuf {
    dir.write(
        "tools.json",
        &json!({"tools": [
            {"name": "complete", "description": "Finish.", "input_schema": {"type": "object", "properties": {}}},
            {"name": "get_weather", "description": "Weather for a city.", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
        ]})
        .to_string(),
    )
}

/// The names of a printed tool list.
fn tool_names(out: &Output) -> Vec<String> {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_dotenv_in_the_working_directory_is_read_below_the_environment() {
    let dir = TempDir::new("dotenv");
    manifest(&dir);
    let tools = ["tools", "--format", "anthropic"];
    // No .env: PTC is off, no manifest, no tools.
    assert_eq!(
        tool_names(&sidecar(&dir, &tools, &[])),
        Vec::<String>::new()
    );

    // The file's values count, a relative path in it against the working directory, RUST_LOG
    // included (the log then says which names came from the file, never their values).
    dir.write(
        ".env",
        "# copied from .env.example\nPTC_ENABLED=true\nPTC_TOOLS_FILE=tools.json\n\
         export PTC_API_KEY=\"s3cret-in-dotenv\"\nRUST_LOG=info\n",
    );
    let out = sidecar(&dir, &tools, &[]);
    assert_eq!(tool_names(&out), ["complete", "exec_code"]);
    let stderr = text(&out.stderr);
    let path = dir.0.join(".env");
    assert!(
        stderr.contains(&format!(
            "read {} (the environment's own values win): PTC_ENABLED, PTC_TOOLS_FILE, \
             PTC_API_KEY, RUST_LOG",
            path.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");

    // The environment wins over the file, name by name.
    let out = sidecar(&dir, &tools, &[("PTC_ENABLED", "false")]);
    assert_eq!(tool_names(&out), ["complete", "get_weather"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("(the environment's own values win): PTC_TOOLS_FILE, PTC_API_KEY"),
        "{stderr}"
    );

    // A line that does not parse stops the start, naming the file and the line.
    dir.write(
        ".env",
        "PTC_ENABLED=true\nPTC_TIMEOUT 30\nPTC_API_KEY=\"s3cret\n",
    );
    let out = sidecar(&dir, &tools, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "ptc-sidecar: cannot read {}: line 2 (PTC_TIMEOUT) is not KEY=value (with \
             quotes closed)\n",
            path.display()
        )
    );
    assert!(out.stdout.is_empty());
    // Nor is a value with an open quote repeated.
    dir.write(".env", "PTC_API_KEY=\"s3cret\n");
    let out = sidecar(&dir, &tools, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("(PTC_API_KEY) is not KEY=value"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[test]
fn a_misspelt_variable_is_named_with_the_closest_known_one() {
    let dir = TempDir::new("misspelt");
    let description = ["tools", "--format", "description"];
    let out = sidecar(
        &dir,
        &description,
        &[
            ("PTC_ENABELD", "true"),
            ("PTC_URL", "http://127.0.0.1:7400"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "PTC_ENABELD is not a variable ptc-sidecar reads; did you mean PTC_ENABLED? \
             (PTC_STRICT_CONFIG=true makes this an error)"
        ),
        "{stderr}"
    );
    // PTC_URL is the example agents' (read beside the sidecar, not by it): not named.
    assert!(!stderr.contains("PTC_URL"), "{stderr}");

    // From the .env too, said so; and under PTC_STRICT_CONFIG an error, nothing printed.
    dir.write(".env", "PTC_TIMOUT=1\n");
    let out = sidecar(&dir, &description, &[]);
    assert!(
        text(&out.stderr).contains(
            "PTC_TIMOUT is not a variable ptc-sidecar reads (in .env); did you mean PTC_TIMEOUT?"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = sidecar(&dir, &description, &[("PTC_STRICT_CONFIG", "true")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "ptc-sidecar: PTC_STRICT_CONFIG=true and PTC_TIMOUT is not a variable ptc-sidecar \
         reads (in .env); did you mean PTC_TIMEOUT?\n"
    );

    // A value refused: the unknown name is said first, as it may be why.
    let out = sidecar(
        &dir,
        &description,
        &[("PTC_MAX_RUNS", "0"), ("PTC_SANBOX", "off")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "ptc-sidecar: warning: PTC_SANBOX is not a variable ptc-sidecar reads; did you \
             mean PTC_SANDBOX?"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("ptc-sidecar: PTC_MAX_RUNS=\"0\" is not valid"),
        "{stderr}"
    );
}

#[test]
fn a_busy_port_is_said_as_the_variable_is_written() {
    let dir = TempDir::new("busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = sidecar(&dir, &["serve"], &[("PTC_LISTEN", &addr)]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "ptc-sidecar: cannot listen on PTC_LISTEN={addr}: Address already in use"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("Tcp("), "{stderr}");

    let socket = dir.0.join("no-such-dir/ptc.sock");
    let listen = format!("unix:{}", socket.display());
    let out = sidecar(&dir, &["serve"], &[("PTC_LISTEN", &listen)]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on PTC_LISTEN={listen}: ")),
        "{stderr}"
    );
}

#[test]
fn a_missing_tool_file_names_its_variable() {
    let dir = TempDir::new("missing-tools");
    let out = sidecar(
        &dir,
        &["tools"],
        &[("PTC_TOOLS_FILE", "/nonexistent/tools.json")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "ptc-sidecar: PTC_TOOLS_FILE: cannot read /nonexistent/tools.json: No such file or \
         directory (os error 2)\n"
    );
    let out = sidecar(
        &dir,
        &["tools", "--mcp-catalog", "github=/nonexistent/github.json"],
        &[],
    );
    assert_eq!(
        text(&out.stderr),
        "ptc-sidecar: --mcp-catalog github: cannot read /nonexistent/github.json: No such \
         file or directory (os error 2)\n"
    );
}

#[tokio::test]
async fn start_errors_name_the_variable() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let c = config(&[("PTC_TOOLS_FILE", "/nonexistent/tools.json")]);
        let err = Sidecar::start(c, &[]).await.err().unwrap();
        assert!(matches!(err, StartError::Tools(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "PTC_TOOLS_FILE: cannot read /nonexistent/tools.json: No such file or directory \
             (os error 2)"
        );

        // A session folder that cannot be made: the variable first, then the folder.
        let dir = TempDir::new("session-dir");
        let file = dir.write("a-file", "");
        let sessions = file.join("sessions");
        let c = config(&[
            ("PTC_ENABLED", "true"),
            ("PTC_WARM_WORKERS", "0"),
            ("PTC_RUNTIME_DIR", dir.0.to_str().unwrap()),
            ("PTC_SESSION_DIR", sessions.to_str().unwrap()),
        ]);
        let err = Sidecar::start(c, &[]).await.err().unwrap().to_string();
        assert!(
            err.starts_with(&format!(
                "PTC_SESSION_DIR: session root {}",
                sessions.display()
            )),
            "{err}"
        );
    })
    .await
    .unwrap();
}

#[test]
fn the_tools_command_prints_the_description_without_ptc_enabled() {
    let dir = TempDir::new("description");
    let github = format!("github={}", corpus_dir().join("github.json").display());
    for env in [vec![], vec![("PTC_ENABLED", "false")]] {
        let out = sidecar(
            &dir,
            &["tools", "--format", "description", "--mcp-catalog", &github],
            &env,
        );
        assert!(out.status.success(), "{env:?}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("Python with the tools below"),
            "{stdout}"
        );
        assert!(stdout.contains("\n## github__\n"), "{stdout}");
    }
    // PTC_LANG=javascript: the description for JavaScript, TypeScript signatures.
    let out = sidecar(
        &dir,
        &["tools", "--format", "description", "--mcp-catalog", &github],
        &[("PTC_LANG", "javascript")],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("JavaScript with the tools below"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nget_issue({owner, repo, issue_number: number}) // "),
        "{stdout}"
    );
    // The tool lists still follow PTC_ENABLED: off, the tools are offered directly.
    let out = sidecar(&dir, &["tools", "--mcp-catalog", &github], &[]);
    let names = tool_names(&out);
    assert!(!names.contains(&"exec_code".to_string()), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("github__")), "{names:?}");
}

/// `ptc-sidecar tools … | head -1`: a reader that goes away ends the output quietly, exit 0,
/// never a panic ("failed printing to stdout: Broken pipe" with a backtrace, before).
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let dir = TempDir::new("broken-pipe");
    let github = format!("github={}", corpus_dir().join("github.json").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
        .args(["tools", "--format", "description", "--mcp-catalog", &github])
        .current_dir(&dir.0)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is printed.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status:?}: {stderr}");
}
