//! What the exec, load and soak benchmarks share, included by each with `#[path]`: the no-op
//! host tool server, the release sidecar as a process of its own (with the demo MCP server),
//! what a process holds (memory, fds), the command line's numbers and the figures' arithmetic.
//! Must stay free of any one benchmark's workload.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a sidecar gets to print its serving line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The host tool server: `POST /tools` answers every call with `{"result": null}`.
pub async fn start_host() -> std::net::SocketAddr {
    use axum::{Json, Router, routing::post};
    let router = Router::new().route(
        "/tools",
        post(|Json(_): Json<Value>| async { Json(json!({"result": null})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind host tool server");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A sidecar process, killed (and its directory removed) when dropped.
pub struct Sidecar {
    pub child: std::process::Child,
    pub pid: u32,
    pub url: String,
    dir: PathBuf,
}

impl Sidecar {
    /// Its `PTC_RUNTIME_DIR`.
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join("rt")
    }

    /// Its manifest and MCP config (`tools.json`, `mcp.json`): another sidecar process (the
    /// MCP front door on stdio) can serve the same tools.
    pub fn tool_files(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("tools.json"), self.dir.join("mcp.json"))
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The release sidecar on `127.0.0.1:0` (its serving line says the port it got) with the no-op
/// host tool `noop` (callback protocol, at `host`), the demo MCP server over stdio (`demo__noop`)
/// and `env` on top; `label` names its directory and agent id. Its log after the serving line
/// goes to our stderr when it warns.
pub fn start_sidecar_with(
    host: std::net::SocketAddr,
    label: &str,
    env: &[(&str, String)],
) -> Sidecar {
    use std::io::BufRead;
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("{label}-{}-{n}", std::process::id());
    let dir = std::env::temp_dir().join(format!("ptc-{id}"));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let manifest = json!({
        "callback": {"url": format!("http://{host}/tools")},
        "tools": [{"name": "noop", "description": "Does nothing.", "input_schema": {"type": "object", "properties": {}}}]
    });
    let tools = dir.join("tools.json");
    std::fs::write(&tools, manifest.to_string()).expect("write manifest");
    let mcp = dir.join("mcp.json");
    let servers = json!({"mcpServers": {"demo": {"command": env!("CARGO_BIN_EXE_ptc-demo-mcp")}}});
    std::fs::write(&mcp, servers.to_string()).expect("write MCP config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptc-sidecar"))
        .arg("serve")
        .env("PTC_ENABLED", "true")
        .env("PTC_TOOLS_FILE", &tools)
        .env("PTC_MCP_CONFIG", &mcp)
        .env("PTC_LISTEN", "127.0.0.1:0")
        .env("PTC_RUNTIME_DIR", dir.join("rt"))
        .env("PTC_WARM_WORKERS", "2")
        .env("RUST_LOG", "warn,ptc_sidecar=info")
        .env("PTC_AGENT_ID", &id)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ptc-sidecar");
    let pid = child.id();
    let stderr = std::io::BufReader::new(child.stderr.take().expect("piped stderr"));
    // Owned from here: a failure below kills it (Drop) instead of leaving it running.
    let mut sidecar = Sidecar {
        child,
        pid,
        url: String::new(),
        dir,
    };
    let (serving_tx, serving_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut serving = Some(serving_tx);
        for line in stderr.lines().map_while(Result::ok) {
            match serving.take() {
                Some(tx) if line.contains("ptc-sidecar serving") => {
                    let _ = tx.send(line);
                }
                waiting => {
                    serving = waiting;
                    if line.contains("WARN") || line.contains("ERROR") {
                        eprintln!("{line}");
                    }
                }
            }
        }
    });
    let line = serving_rx
        .recv_timeout(START_TIMEOUT)
        .expect("ptc-sidecar did not print its serving line");
    let addr = line
        .split("listen=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("listen= in the serving line");
    sidecar.url = format!("http://{addr}");
    sidecar
}

/// A process's peak RSS (VmHWM) in MB.
pub fn vm_hwm_mb(pid: u32) -> Option<f64> {
    status_mb(pid, "VmHWM:")
}

/// A process's RSS now (VmRSS) in MB.
pub fn vm_rss_mb(pid: u32) -> Option<f64> {
    status_mb(pid, "VmRSS:")
}

/// A figure of `/proc/PID/status` given in kB, in MB.
fn status_mb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Open fds of a process.
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Open fds of a process by what they are (`socket`, `pipe`, `anon_inode`, a file's path).
pub fn fd_kinds(pid: u32) -> std::collections::BTreeMap<String, usize> {
    let mut kinds = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target =
            std::fs::read_link(entry.path()).map_or("?".into(), |t| t.display().to_string());
        let kind = target.split(':').next().unwrap_or("?").to_string();
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
}

/// The number after `name` on the command line (`--secs 60`), else `default`.
pub fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p`th percentile of `v` (sorted in place), NaN when empty.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

pub fn median(v: &mut [f64]) -> f64 {
    percentile(v, 50.0)
}

/// Three decimals, for the printed figures.
pub fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// One run over `POST /v1/exec_code`: its answer, or what went wrong with the request.
pub async fn exec(http: &reqwest::Client, url: &str, code: &str) -> Result<Value, String> {
    let response = http
        .post(format!("{url}/v1/exec_code"))
        .json(&json!({ "code": code }))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    response.json::<Value>().await.map_err(|e| e.to_string())
}
