//! README's quickstart, run as README writes it (issue 37): a newcomer copies these commands,
//! so each must work as written and print what README shows.
//!
//! - Each ```` ```console ```` block after a `<!-- readme-test: commands -->` marker is run a
//!   command at a time: `$ ` lines are commands for bash, the lines after one are what it must
//!   print on stdout. A command ending in `&` is started in the background (a server): with
//!   `PTC_LISTEN=127.0.0.1:0`, so a port in use cannot fail it, and the later commands' `localhost:7400`
//!   becomes the address it says it serves on.
//! - The JSON after `<!-- readme-test: mcp-host -->` is started as an MCP host would start it,
//!   by the official Python `mcp` SDK from another directory (`/`), its `/home/me/...` paths
//!   pointed at this build, and its `exec_code` called.
//!
//! The commands run in a folder laid out as the repository is after `cargo install --path .`:
//! `examples/`'s files, and `target/release/ptc-demo-mcp` (this build's), with this build's
//! binaries first on `PATH` (where `cargo install` puts them).

use crate::common::{TEST_TIMEOUT, TempDir};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SIDECAR: &str = env!("CARGO_BIN_EXE_ptc-sidecar");
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The fenced blocks that follow `<!-- readme-test: KIND -->`, without their fences.
fn blocks(text: &str, kind: &str) -> Vec<String> {
    let marker = format!("<!-- readme-test: {kind} -->");
    text.split(&marker)
        .skip(1)
        .map(|after| {
            let start = after.find("```").expect("a fenced block after the marker");
            let body = &after[start..];
            let body = &body[body.find('\n').unwrap() + 1..];
            body[..body.find("\n```").unwrap()].to_string()
        })
        .collect()
}

/// A command and what it must print.
struct Step {
    command: String,
    expected: String,
}

fn steps(block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push(Step {
                command: command.to_string(),
                expected: String::new(),
            }),
            None => {
                let step = steps.last_mut().expect("a block starts with a command");
                step.expected.push_str(line);
                step.expected.push('\n');
            }
        }
    }
    steps
}

/// The repository's layout after `cargo install --path .`, in a temp folder.
fn layout(dir: &Path) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    std::fs::create_dir_all(dir.join("examples")).unwrap();
    for entry in std::fs::read_dir(&examples).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir.join("examples").join(entry.file_name())).unwrap();
        }
    }
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(DEMO, dir.join("target/release/ptc-demo-mcp")).unwrap();
}

/// `PATH` with this build's binaries first, as `cargo install` leaves it.
fn path() -> String {
    let bin = Path::new(SIDECAR).parent().unwrap().display().to_string();
    format!("{bin}:{}", std::env::var("PATH").unwrap_or_default())
}

/// A command run as a newcomer's shell runs it, in `dir`, with no `PTC_*` of ours.
fn shell(dir: &Path, command: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", command])
        .current_dir(dir)
        .env_clear()
        .env("PATH", path())
        .env("HOME", dir)
        .env("LANG", "C.UTF-8")
        .stdin(std::process::Stdio::null());
    cmd
}

/// A background command's server: its address, from the log its command writes (`2>FILE`).
fn served_at(dir: &Path, command: &str) -> String {
    let log = command
        .split_whitespace()
        .find_map(|w| w.strip_prefix("2>"))
        .expect("a background command sends its log to a file (2>FILE)");
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        if let Some(at) = text.split("serving listen=").nth(1) {
            return at.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "`{command}` did not say it serves: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills a background server's process group when the test ends, however it ends.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        // SAFETY: kill with the group of a child we started in its own group.
        unsafe { libc::kill(-pid, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

#[test]
fn the_quickstart_commands_print_what_readme_shows() {
    let text = readme();
    let blocks = blocks(&text, "commands");
    assert!(blocks.len() >= 2, "README's quickstart blocks are marked");
    let dir = TempDir::new("readme");
    layout(&dir.0);
    let started = Instant::now();
    let mut servers = Vec::new();
    let mut at: Option<String> = None;
    for block in &blocks {
        for step in steps(block) {
            let mut command = step.command.clone();
            if let Some(addr) = &at {
                command = command.replace("localhost:7400", addr);
            }
            if let Some(background) = command.strip_suffix('&') {
                use std::os::unix::process::CommandExt;
                let mut cmd = shell(&dir.0, background);
                cmd.env("PTC_LISTEN", "127.0.0.1:0").process_group(0);
                servers.push(Background(cmd.spawn().unwrap()));
                at = Some(served_at(&dir.0, background));
                continue;
            }
            let out = shell(&dir.0, &command).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                stdout.trim_end(),
                step.expected.trim_end(),
                "README's `{}` printed something else (stderr: {})",
                step.command,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "`{}` failed: {out:?}", step.command);
        }
    }
    assert!(
        started.elapsed() < TEST_TIMEOUT,
        "README's commands took too long"
    );
    drop(servers);
}

#[test]
fn the_mcp_host_entry_starts_from_another_directory() {
    let text = readme();
    let entry = blocks(&text, "mcp-host")
        .pop()
        .expect("README's MCP host entry");
    let dir = TempDir::new("readme-host");
    layout(&dir.0);
    let ours = format!("{}/", dir.0.display());
    let entry = entry
        .replace("/home/me/.cargo/bin/ptc-sidecar", SIDECAR)
        .replace("/home/me/ptc-sidecar/", &ours);
    let entry: Value = serde_json::from_str(&entry).expect("README's MCP host entry is JSON");
    let server = &entry["mcpServers"]["ptc"];
    let spec = json!({
        "transport": "stdio",
        "mode": "auto",
        "scenario": "run",
        "command": server["command"],
        "args": server["args"],
        "env": server["env"],
        "code": "print(await demo__add(a=2, b=3))",
    });
    let client: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_hosts/client.py");
    let out = std::process::Command::new("python3")
        .arg(&client)
        .arg(spec.to_string())
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python3 starts (scripts/test installs the mcp SDK)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| {
            panic!(
                "the host printed no JSON ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(seen["tools"], json!(["exec_code"]), "{seen}");
    let shown = seen["shown"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(shown.trim(), "5", "{seen}");
}
