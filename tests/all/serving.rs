//! A `ptc-sidecar serve` process of our own (the binary, not the library in-process): for the
//! tests about what only a whole process shows, its signals, its exit, its children, and what it
//! holds after many runs (fds, memory).

use super::common::{TempDir, TestRedis, unique};
use super::procs;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

const SIDECAR: &str = env!("CARGO_BIN_EXE_ptc-sidecar");
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");
/// How long the sidecar gets to say it is serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a sidecar told to stop may take to exit: the grace of the test, the stopped runs'
/// wait, the requests' grace and the last flush, with room for a loaded machine.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// A `ptc-sidecar serve` of our own, killed (with its process group) when dropped.
pub struct Serving {
    pub child: tokio::process::Child,
    pub pid: i32,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<String>>,
    pub http: reqwest::Client,
    pub agent: String,
    /// Where the default runtime directory is made (`TMPDIR`).
    pub tmp: std::path::PathBuf,
}

impl Serving {
    pub async fn start(dir: &TempDir, redis: &TestRedis, vars: &[(&str, &str)]) -> Serving {
        let mcp = dir.write(
            "mcp.json",
            &json!({"mcpServers": {"demo": {"command": DEMO}}}).to_string(),
        );
        let tmp = dir.0.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let agent = unique("serving");
        let mut cmd = tokio::process::Command::new(SIDECAR);
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &dir.0)
            .env("TMPDIR", &tmp)
            .env("RUST_LOG", "info,rmcp=warn")
            .env("PTC_ENABLED", "true")
            .env("PTC_LISTEN", "127.0.0.1:0")
            .env("PTC_PYTHON", "/usr/bin/python3")
            .env("PTC_MCP_CONFIG", &mcp)
            .env("REDIS_URL", &redis.url)
            .env("PTC_AGENT_ID", &agent)
            .envs(vars.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id().unwrap() as i32;
        let log = Arc::new(Mutex::new(String::new()));
        let (serving_tx, serving_rx) = tokio::sync::oneshot::channel();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log_w = log.clone();
        tokio::spawn(async move {
            let mut serving = Some(serving_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("ptc-sidecar serving")
                    && let Some(tx) = serving.take()
                {
                    let _ = tx.send(line.clone());
                }
                let mut log = log_w.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let line = match tokio::time::timeout(START_TIMEOUT, serving_rx).await {
            Ok(Ok(line)) => line,
            _ => panic!("the sidecar did not serve: {}", log.lock().unwrap()),
        };
        let addr = line
            .split("listen=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no listen= in {line}"));
        Serving {
            child,
            pid,
            addr,
            log,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            agent,
            tmp,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `POST /v1/exec_code` as its own task: its status code and body.
    pub fn exec(&self, code: &str) -> tokio::task::JoinHandle<reqwest::Result<(u16, Value)>> {
        let request = self
            .http
            .post(self.url("/v1/exec_code"))
            .json(&json!({ "code": code }));
        tokio::spawn(async move {
            let response = request.send().await?;
            let status = response.status().as_u16();
            Ok((status, response.json().await?))
        })
    }

    /// Waits until a run is going on (the gauge of `/metrics`).
    pub async fn until_running(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = self
                .http
                .get(self.url("/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if text.lines().any(|l| l == "ptc_runs_in_flight 1") {
                return;
            }
            assert!(Instant::now() < deadline, "no run started: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The sidecar's descendants once they include a process of each of `expect` (a run counts
    /// as in flight before its child is started, so the child may not be there yet).
    pub async fn family_with(&self, expect: &[&str]) -> Vec<(i32, String)> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let family = self.family();
            if expect
                .iter()
                .all(|what| family.iter().any(|(_, cmd)| cmd.contains(what)))
            {
                return family;
            }
            assert!(
                Instant::now() < deadline,
                "not all of {expect:?} among the sidecar's processes: {family:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The sidecar's descendants now, with their command lines.
    pub fn family(&self) -> Vec<(i32, String)> {
        let table = procs::processes();
        procs::descendants(&table, self.pid)
            .into_iter()
            .map(|p| {
                (
                    p,
                    table.get(&p).map_or(String::new(), |p| p.cmdline.clone()),
                )
            })
            .collect()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) sends a signal to our own child; no memory is involved.
        assert_eq!(unsafe { libc::kill(self.pid, signal) }, 0);
    }

    pub async fn exit_code(&mut self) -> Option<i32> {
        match tokio::time::timeout(EXIT_TIMEOUT, self.child.wait()).await {
            Ok(status) => status.unwrap().code(),
            Err(_) => panic!(
                "the sidecar did not exit within {EXIT_TIMEOUT:?}: {}",
                self.log.lock().unwrap()
            ),
        }
    }

    /// The runtime directories left under `TMPDIR`.
    pub fn runtime_dirs(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ptc-sidecar"))
            .collect()
    }
}
