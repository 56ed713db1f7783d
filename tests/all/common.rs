//! Shared test harness: temp dirs, configs built from variables (never the process
//! environment, beyond the `PATH`, `HOME` and `TMPDIR` a sidecar inherits), an in-process
//! sidecar on port 0, and a host tool server. What the benchmarks use too (a Redis of our own,
//! the corpus) is in `tests/support`.

#![allow(dead_code)]

#[path = "../support/mod.rs"]
pub mod support;

pub use support::{TestRedis, synthetic};

use ptc_sidecar::app::{self, Listener, Sidecar};
use ptc_sidecar::config::{Config, Listen};
use ptc_sidecar::sources::SavedCatalog;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Every test is bounded: nothing in this suite may wait longer than this.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

pub fn corpus() -> Vec<SavedCatalog> {
    support::saved_catalogs_in(&corpus_dir())
}

/// The 15 real catalogs of `tests/corpus` and `tests/corpus-search` (255 tools).
pub fn corpus_all() -> Vec<SavedCatalog> {
    let mut all = corpus();
    let more = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus-search");
    all.extend(support::saved_catalogs_in(&more));
    all
}

/// The `name`s of a tool list (the array itself, or the `tools` of a `/v1/tools` answer).
pub fn names(tools: &Value) -> Vec<&str> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ptc-test-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config from variables, as the process would read them: the test process's `PATH`, `HOME`
/// and `TMPDIR` (what a sidecar inherits; `vars` may override them) and `vars`.
pub fn config(vars: &[(&str, &str)]) -> Config {
    let inherited = ["PATH", "HOME", "TMPDIR"]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)));
    let given = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::from_vars(inherited.chain(given)).unwrap()
}

/// A running sidecar with its control API on a random loopback port.
pub struct TestSidecar {
    pub sidecar: Sidecar,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub runtime: TempDir,
}

impl TestSidecar {
    pub async fn start(vars: &[(&str, &str)]) -> TestSidecar {
        Self::start_with(vars, &[]).await
    }

    pub async fn start_with(vars: &[(&str, &str)], saved: &[SavedCatalog]) -> TestSidecar {
        Self::start_in(TempDir::new("runtime"), vars, saved).await
    }

    /// With `runtime` as its runtime directory (where the runs' scratch directories are).
    pub async fn start_in(
        runtime: TempDir,
        vars: &[(&str, &str)],
        saved: &[SavedCatalog],
    ) -> TestSidecar {
        let mut c = config(vars);
        c.listen = Listen::Tcp("127.0.0.1:0".parse().unwrap());
        c.runtime_dir = Some(runtime.0.clone());
        let sidecar = Sidecar::start(c, saved).await.expect("sidecar starts");
        let listener = Listener::bind(&Listen::Tcp("127.0.0.1:0".parse().unwrap()))
            .await
            .unwrap();
        let addr: SocketAddr = listener.local_addr().parse().unwrap();
        tokio::spawn(app::run(
            listener,
            sidecar.state.clone(),
            sidecar.shutdown.clone(),
        ));
        TestSidecar {
            sidecar,
            addr,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            runtime,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET` a JSON endpoint of the control API.
    pub async fn get_json(&self, path: &str) -> Value {
        self.http
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// `GET /metrics`'s text, with `key` as `X-API-Key` when given.
    pub async fn metrics(&self, key: Option<&str>) -> String {
        let mut request = self.http.get(self.url("/metrics"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request.send().await.unwrap().text().await.unwrap()
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Value {
        self.get_json("/healthz").await
    }

    pub async fn exec(&self, code: &str) -> Value {
        self.exec_body(json!({"code": code})).await
    }

    pub async fn exec_body(&self, body: Value) -> Value {
        let response = self
            .http
            .post(self.url("/v1/exec_code"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }
}

/// A minimal SSE reader over a streaming reqwest response: an attached run
/// (`Accept: text/event-stream`) as its events.
pub struct Sse {
    response: reqwest::Response,
    buffer: String,
}

impl Sse {
    pub async fn open(s: &TestSidecar, code: &str) -> Sse {
        Sse::open_body(s, json!({ "code": code })).await
    }

    /// With a whole `exec_code` body (a `session_id`, a `timeout_ms`).
    pub async fn open_body(s: &TestSidecar, body: Value) -> Sse {
        let response = s
            .http
            .post(s.url("/v1/exec_code"))
            .header("Accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let ct = response.headers()["content-type"].to_str().unwrap();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Sse {
            response,
            buffer: String::new(),
        }
    }

    /// The next event as (name, data); `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut data) = (String::new(), Vec::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if name.is_empty() && data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some((name, serde_json::from_str(&data.join("\n")).unwrap()));
            }
            match self.response.chunk().await.unwrap() {
                Some(bytes) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                None => return None,
            }
        }
    }
}

/// A host tool server for the callback protocol: tools by name, each a function of the input.
pub struct HostServer {
    pub addr: SocketAddr,
    pub calls: Arc<AtomicUsize>,
    /// The `traceparent` header of each call, in order.
    pub traceparents: Arc<std::sync::Mutex<Vec<Option<String>>>>,
    shutdown: tokio_util::sync::CancellationToken,
}

type HostState = (
    Arc<std::collections::HashMap<&'static str, HostTool>>,
    Arc<AtomicUsize>,
    Arc<std::sync::Mutex<Vec<Option<String>>>>,
);

pub type HostTool = Arc<
    dyn Fn(Value) -> std::pin::Pin<Box<dyn std::future::Future<Output = Value> + Send>>
        + Send
        + Sync,
>;

impl HostServer {
    /// Each answer is the raw JSON body the callback returns.
    pub async fn start(tools: Vec<(&'static str, HostTool)>) -> HostServer {
        use axum::{Json, Router, extract::State, routing::post};
        let tools: Arc<std::collections::HashMap<&'static str, HostTool>> =
            Arc::new(tools.into_iter().collect());
        let calls = Arc::new(AtomicUsize::new(0));
        let traceparents = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state = (tools, calls.clone(), traceparents.clone());
        let router = Router::new()
            .route(
                "/tools",
                post(
                    |State((tools, calls, traced)): State<HostState>,
                     headers: axum::http::HeaderMap,
                     Json(body): Json<Value>| async move {
                        calls.fetch_add(1, Ordering::Relaxed);
                        let tp = headers.get("traceparent").and_then(|v| v.to_str().ok());
                        traced.lock().unwrap().push(tp.map(str::to_string));
                        let name = body["tool"].as_str().unwrap_or_default();
                        match tools.get(name) {
                            Some(f) => Json(f(body["input"].clone()).await),
                            None => Json(json!({"error": format!("no host tool {name}")})),
                        }
                    },
                ),
            )
            .with_state(state);
        let (addr, shutdown) = serve(router).await;
        HostServer {
            addr,
            calls,
            traceparents,
            shutdown,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/tools", self.addr)
    }
}

/// Serves `router` on `127.0.0.1:0` until the returned token is cancelled.
pub async fn serve(router: axum::Router) -> (SocketAddr, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .unwrap();
    });
    (addr, shutdown)
}

impl Drop for HostServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn tool(f: impl Fn(Value) -> Value + Send + Sync + 'static) -> HostTool {
    let f = Arc::new(f);
    Arc::new(move |input| {
        let f = f.clone();
        Box::pin(async move { f(input) })
    })
}

/// Processes whose command line contains `needle` (to check nothing was left behind).
pub fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// A name no other test uses (Redis keys, agent ids).
pub fn unique(label: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{label}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Waits until this sidecar has no live run and no child process left (at most 5 s).
pub async fn assert_nothing_left(s: &TestSidecar) {
    let runner = s.sidecar.state.runner.clone().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let procs = processes_with(s.runtime.0.to_str().unwrap());
        if procs.is_empty() && runner.live_runs() == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {} runs, {procs:#?}",
            runner.live_runs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a folder holds, read from outside as an operator would: `du -sb` (every entry's
/// apparent size, the folder's own included, at any depth), and every entry under it (links not
/// followed) with the size of each file, sorted; what cannot be read (a path past `PATH_MAX`) is
/// listed as such rather than failing the test.
pub fn held(dir: &std::path::Path) -> (u64, Vec<(String, u64)>) {
    let du = std::process::Command::new("du")
        .arg("-sb")
        .arg(dir)
        .output()
        .unwrap();
    let bytes = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("du -sb {}: {du:?}", dir.display()));
    let mut entries = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let name = |path: &std::path::Path| path.strip_prefix(dir).unwrap().display().to_string();
        let listed = match std::fs::read_dir(&d) {
            Ok(listed) => listed,
            Err(e) => {
                entries.push((format!("{}/ unreadable: {e}", name(&d)), 0));
                continue;
            }
        };
        for entry in listed.flatten() {
            let path = entry.path();
            match path.symlink_metadata() {
                Ok(meta) if meta.is_dir() => {
                    entries.push((name(&path) + "/", 0));
                    pending.push(path);
                }
                Ok(meta) => {
                    entries.push((name(&path), if meta.is_file() { meta.len() } else { 0 }))
                }
                Err(e) => entries.push((format!("{} unreadable: {e}", name(&path)), 0)),
            }
        }
    }
    entries.sort();
    (bytes, entries)
}
