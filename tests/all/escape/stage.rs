//! The sidecar under attack: the real binary started as root or as an unprivileged user, with
//! secrets planted, a Redis with a password, a host tool server and an MCP server; how to talk
//! to it, find its processes (fork server, warm workers, MCP server) and stop it, leaving
//! nothing behind.

use super::{
    Failure, Opts, PYTHON, SCRATCH_MAX_FILES, SCRATCH_MAX_MB, SESSION_MAX_MB, Stage, Who, broken,
};
use crate::common::{HostServer, HostTool, TempDir, tool, unique};
use crate::procs::{SETTLE, children, cmdline, descendants, is_alive, processes};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

const SIDECAR: &str = env!("CARGO_BIN_EXE_ptc-sidecar");
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");
/// How long a sidecar gets to print that it is serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// `PTC_SHUTDOWN_GRACE` of the sidecars under attack.
const SHUTDOWN_GRACE_SECS: u64 = 2;
/// How long a sidecar may take to exit after SIGTERM: its runs' grace, its requests' grace
/// (3 s), and room for a busy machine.
const EXIT_TIMEOUT: Duration = Duration::from_secs(SHUTDOWN_GRACE_SECS + 8);
/// The longest a run waits in `park` for the harness: a harness that forgot it must not hold
/// the run until its timeout.
const PARK_TIMEOUT: Duration = Duration::from_secs(20);

/// The secrets planted in one sidecar's environment and files.
#[derive(Debug, Clone)]
pub struct Secrets {
    pub api_key: String,
    redis_password: String,
    pub callback_auth: String,
    mcp_env: String,
    http_api_key: String,
}

impl Secrets {
    fn new() -> Secrets {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let s = |kind: &str| format!("S3CR3T{kind}{:x}{nanos:x}", std::process::id());
        Secrets {
            api_key: s("apikey"),
            redis_password: s("redispw"),
            callback_auth: format!("Bearer {}", s("callback")),
            mcp_env: s("mcpenv"),
            http_api_key: s("httpkey"),
        }
    }

    fn all(&self) -> [(&'static str, &str); 5] {
        [
            ("PTC_API_KEY", &self.api_key),
            ("the Redis password", &self.redis_password),
            ("the callback's Authorization", &self.callback_auth),
            ("the MCP server's env", &self.mcp_env),
            ("the HTTP MCP server's api_key", &self.http_api_key),
        ]
    }

    /// The first secret found in `text`.
    pub fn leaked_in(&self, text: &str) -> Option<&'static str> {
        let bare = |s: &str| s.trim_start_matches("Bearer ").to_string();
        self.all()
            .into_iter()
            .find(|(_, s)| text.contains(&bare(s)))
            .map(|(name, _)| name)
    }
}

/// A `redis-server` with a password, on a free port, stopped on drop.
pub struct Redis {
    pub port: u16,
    pub password: String,
    child: std::process::Child,
}

impl Redis {
    async fn start(dir: &Path, password: &str) -> Result<Redis, Failure> {
        let port = free_port();
        std::fs::create_dir_all(dir).map_err(|e| broken(format!("redis dir: {e}")))?;
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--requirepass", password])
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| broken(format!("redis-server (scripts/test installs it): {e}")))?;
        let redis = Redis {
            port,
            password: password.into(),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(broken("redis-server did not start"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(redis)
    }

    fn url(&self) -> String {
        format!("redis://:{}@127.0.0.1:{}/0", self.password, self.port)
    }

    /// Every entry of a stream, as text.
    pub async fn stream(&self, key: &str) -> String {
        let client = redis::Client::open(self.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let v: redis::Value = redis::cmd("XRANGE")
            .arg(key)
            .arg("-")
            .arg("+")
            .query_async(&mut c)
            .await
            .unwrap();
        format!("{v:?}")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A call of the host tool `park`: a run waiting for the harness, which meanwhile looks at the
/// run's processes from outside.
pub struct Park {
    /// The run's own pid and directory, as it sees them.
    pub pid: i32,
    pub dir: String,
    /// `"checkpoint"` (released as soon as the harness has looked) or `"victim"` (a run the
    /// harness keeps in flight while it attacks it).
    pub role: String,
    claimed: bool,
    release: Option<oneshot::Sender<()>>,
}

/// Every call of `park` of one sidecar, in order.
#[derive(Clone, Default)]
pub struct Parks(Arc<Mutex<Vec<Park>>>);

impl Parks {
    /// The first park not yet claimed, of the run in `dir` when given: marked claimed, with its
    /// index for [`Parks::release`].
    pub fn claim(&self, dir: Option<&str>) -> Option<(usize, i32, String, String)> {
        let mut all = self.0.lock().unwrap();
        let (i, p) = all
            .iter_mut()
            .enumerate()
            .find(|(_, p)| !p.claimed && dir.is_none_or(|d| d == p.dir))?;
        p.claimed = true;
        Some((i, p.pid, p.dir.clone(), p.role.clone()))
    }

    /// Lets the run of park `index` go on.
    pub fn release(&self, index: usize) {
        if let Some(tx) = self
            .0
            .lock()
            .unwrap()
            .get_mut(index)
            .and_then(|p| p.release.take())
        {
            let _ = tx.send(());
        }
    }
}

/// A sidecar under attack.
pub struct StageInner {
    pub who: Who,
    pub opts: Opts,
    child: Mutex<Option<std::process::Child>>,
    pub pid: i32,
    pub addr: SocketAddr,
    /// The sidecar's own end of the IPC bridge (`ipc=` of its serving line): its port is the
    /// one every run's Landlock rule allows.
    pub ipc: SocketAddr,
    http: reqwest::Client,
    pub secrets: Secrets,
    pub mark: String,
    pub agent_id: String,
    pub tools_file: PathBuf,
    pub mcp_config: PathBuf,
    /// World-writable, outside any scratch dir: only the sandbox keeps code out of it.
    pub open_dir: PathBuf,
    /// A path in /tmp that must never appear.
    pub tmp_target: PathBuf,
    pub redis: Redis,
    pub host: HostServer,
    pub complete_calls: Arc<AtomicUsize>,
    pub parks: Parks,
    /// Releases every park for good (the stage is stopping).
    release_all: CancellationToken,
    log: Arc<Mutex<String>>,
    /// Processes to kill on drop if still alive with the same command line (what an attack
    /// that got through may have left).
    tracked: Mutex<Vec<(i32, String)>>,
    // Last: removed after everything above is stopped.
    pub dir: TempDir,
}

impl StageInner {
    pub async fn start(who: Who, opts: Opts) -> Result<Stage, Failure> {
        let mark = unique("esc");
        let secrets = Secrets::new();
        let dir = TempDir::new("escape");
        let ids = who.ids();
        let own = |path: &Path| {
            if let Some((uid, gid)) = ids {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
            }
        };
        set_mode(&dir.0, 0o755);
        own(&dir.0);
        let open_dir = dir.0.join("open");
        std::fs::create_dir(&open_dir).unwrap();
        set_mode(&open_dir, 0o777);

        let redis = Redis::start(&dir.0.join("redis"), &secrets.redis_password).await?;
        let complete_calls = Arc::new(AtomicUsize::new(0));
        let parks = Parks::default();
        let release_all = CancellationToken::new();
        let host = HostServer::start(host_tools(&complete_calls, &parks, &release_all)).await;

        let manifest = json!({
            "callback": {"url": host.url(), "headers": {"Authorization": secrets.callback_auth}},
            "tools": [
                {"name": "complete", "description": "Finish with an answer.",
                 "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}}},
                {"name": "echo", "description": "Returns its input.",
                 "input_schema": {"type": "object", "properties": {"text": {"type": "string"}},
                                  "required": ["text"]}},
                {"name": "noop", "input_schema": {"type": "object", "properties": {}}},
                {"name": "park", "description": "Holds the call until the test releases it.",
                 "input_schema": {"type": "object",
                                  "properties": {"pid": {"type": "integer"},
                                                 "dir": {"type": "string"},
                                                 "role": {"type": "string"},
                                                 "hold": {"type": "boolean", "default": true}},
                                  "required": ["pid", "dir"]}},
            ]
        });
        let demo = reachable_binary(DEMO, &dir.0, ids);
        let mcp = json!({"mcpServers": {
            "demo": {"command": demo, "env": {"DEMO_SECRET": secrets.mcp_env, "PTC_TEST_MARK": mark}},
            // Nothing listens there: it fails to start, and its error must not show the key.
            "remote": {"url": format!("http://127.0.0.1:{}/mcp?api_key={}", free_port(), secrets.http_api_key)},
        }});
        let tools_file = dir.write("tools.json", &manifest.to_string());
        let mcp_config = dir.write("mcp.json", &mcp.to_string());
        for f in [&tools_file, &mcp_config] {
            set_mode(f, 0o600);
            own(f);
        }

        let agent_id = unique("escape-agent");
        let sidecar = reachable_binary(SIDECAR, &dir.0, ids);
        let mut cmd = std::process::Command::new(&sidecar);
        cmd.arg("serve")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &dir.0)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info,rmcp=warn")
            .env("PTC_ENABLED", "true")
            .env("PTC_LISTEN", "127.0.0.1:0")
            .env("PTC_API_KEY", &secrets.api_key)
            .env("REDIS_URL", redis.url())
            .env("PTC_AGENT_ID", &agent_id)
            .env("PTC_PYTHON", PYTHON)
            .env("PTC_TOOLS_FILE", &tools_file)
            .env("PTC_MCP_CONFIG", &mcp_config)
            .env("PTC_RUNTIME_DIR", dir.0.join("runtime"))
            .env("PTC_WARM_WORKERS", opts.warm.to_string())
            .env("PTC_ALLOW_SUBPROCESS", opts.allow_subprocess.to_string())
            .env("PTC_SCRATCH_MAX_MB", SCRATCH_MAX_MB.to_string())
            .env("PTC_SCRATCH_MAX_FILES", SCRATCH_MAX_FILES.to_string())
            .env("PTC_SESSION_MAX_MB", SESSION_MAX_MB.to_string())
            .env("PTC_MCP_START_TIMEOUT", "5")
            .env("PTC_TIMEOUT", "30")
            // A run in flight when the sidecar is told to stop gets this long before it is
            // killed: the tests that stop a sidecar under a parked run wait no longer.
            .env("PTC_SHUTDOWN_GRACE", SHUTDOWN_GRACE_SECS.to_string())
            .current_dir(&dir.0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        if let Some((uid, gid)) = ids {
            cmd.uid(uid).gid(gid);
        }
        if let (Who::Root, Some(user)) = (&who, opts.user) {
            cmd.env("PTC_SANDBOX_USER", user);
        }
        cmd.envs(opts.env.iter().copied());
        let mut child = cmd
            .spawn()
            .map_err(|e| broken(format!("cannot start {}: {e}", sidecar.display())))?;
        let pid = child.id() as i32;
        let log = Arc::new(Mutex::new(String::new()));
        let (serving_tx, serving_rx) = oneshot::channel();
        let stderr = child.stderr.take().unwrap();
        let log_w = log.clone();
        std::thread::spawn(move || {
            let mut serving = Some(serving_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
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
        let mut stage = StageInner {
            who,
            opts,
            child: Mutex::new(Some(child)),
            pid,
            addr: "127.0.0.1:0".parse().unwrap(),
            ipc: "127.0.0.1:0".parse().unwrap(),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            secrets,
            agent_id,
            tools_file,
            mcp_config,
            open_dir,
            tmp_target: std::env::temp_dir().join(format!("ptc-escape-{mark}")),
            mark,
            redis,
            host,
            complete_calls,
            parks,
            release_all,
            log,
            tracked: Mutex::new(Vec::new()),
            dir,
        };
        let line = match tokio::time::timeout(START_TIMEOUT, serving_rx).await {
            Ok(Ok(line)) => line,
            _ => {
                return Err(broken(format!(
                    "the sidecar did not start serving: {}",
                    stage.log_tail()
                )));
            }
        };
        stage.addr = field_addr(&line, "listen=")
            .ok_or_else(|| broken(format!("no listen= in the serving line: {line}")))?;
        stage.ipc = field_addr(&line, "ipc=")
            .ok_or_else(|| broken(format!("no ipc= in the serving line: {line}")))?;
        let stage = Arc::new(stage);
        stage.wait_until_ready().await?;
        Ok(stage)
    }
}

/// The address of `NAME=ADDR` in the sidecar's serving line.
fn field_addr(line: &str, name: &str) -> Option<SocketAddr> {
    let rest = line.split(name).nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

pub fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `bin` if every user can run it where it is, else a copy in a 0755 dir under `dir`.
fn reachable_binary(bin: &str, dir: &Path, ids: Option<(u32, u32)>) -> PathBuf {
    let path = PathBuf::from(bin);
    let world = |p: &Path, bits: u32| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & bits == bits)
            .unwrap_or(false)
    };
    let reachable = world(&path, 0o005) && path.ancestors().skip(1).all(|a| world(a, 0o001));
    if ids.is_none() || reachable {
        return path;
    }
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    set_mode(&bin_dir, 0o755);
    let copy = bin_dir.join(path.file_name().unwrap());
    std::fs::copy(&path, &copy).unwrap();
    set_mode(&copy, 0o755);
    copy
}

/// The host's tools: `complete` (direct; counts calls, which must stay 0), `echo`, `noop`, and
/// `park`, which records the caller and holds the call until the harness releases it.
fn host_tools(
    complete_calls: &Arc<AtomicUsize>,
    parks: &Parks,
    release_all: &CancellationToken,
) -> Vec<(&'static str, HostTool)> {
    let calls = complete_calls.clone();
    let parks = parks.clone();
    let release_all = release_all.clone();
    let park: HostTool = Arc::new(move |input: Value| {
        let parks = parks.clone();
        let release_all = release_all.clone();
        Box::pin(async move {
            let hold = input["hold"].as_bool().unwrap_or(true);
            let (tx, rx) = oneshot::channel();
            parks.0.lock().unwrap().push(Park {
                pid: input["pid"].as_i64().unwrap_or(0) as i32,
                dir: input["dir"].as_str().unwrap_or_default().to_string(),
                role: input["role"].as_str().unwrap_or("checkpoint").to_string(),
                claimed: false,
                release: hold.then_some(tx),
            });
            if hold {
                tokio::select! {
                    _ = rx => {}
                    _ = release_all.cancelled() => {}
                    _ = tokio::time::sleep(PARK_TIMEOUT) => {}
                }
            }
            json!({"result": "released"})
        })
    });
    vec![
        (
            "complete",
            tool(move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                json!({"result": "completed"})
            }),
        ),
        ("echo", tool(|input| json!({"result": input}))),
        ("noop", tool(|_| json!({"result": null}))),
        ("park", park),
    ]
}

impl StageInner {
    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        let start = log.len().saturating_sub(2000);
        let start = (start..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(log.len());
        log[start..].to_string()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `method path` with the API key, sent: a broken failure naming the request when it got
    /// no answer.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<reqwest::Response, Failure> {
        let mut request = self
            .http
            .request(method.clone(), self.url(path))
            .header("X-API-Key", &self.secrets.api_key)
            .timeout(Duration::from_secs(10));
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().await.map_err(|e| {
            broken(format!(
                "{method} {path}: {e} ({:?})",
                std::error::Error::source(&e)
            ))
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        let r = self.send(reqwest::Method::GET, path, None).await?;
        r.json()
            .await
            .map_err(|e| broken(format!("GET {path}: {e}")))
    }

    /// `POST path` with the API key and a JSON body: the status and the body (`null` when not
    /// JSON).
    pub async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), Failure> {
        let r = self.send(reqwest::Method::POST, path, Some(body)).await?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }

    /// `DELETE path` with the API key: the status.
    pub async fn delete(&self, path: &str) -> Result<u16, Failure> {
        let r = self.send(reqwest::Method::DELETE, path, None).await?;
        Ok(r.status().as_u16())
    }

    /// `GET path` with the API key, raw text (`/metrics`).
    pub async fn get_text(&self, path: &str) -> Result<String, Failure> {
        let r = self.send(reqwest::Method::GET, path, None).await?;
        r.text()
            .await
            .map_err(|e| broken(format!("GET {path}: {e}")))
    }

    /// `GET /healthz` as anyone may (no key), raw text.
    pub async fn health_text(&self) -> Result<String, Failure> {
        let r = self
            .http
            .get(self.url("/healthz"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| broken(format!("GET /healthz: {e}")))?;
        r.text()
            .await
            .map_err(|e| broken(format!("GET /healthz: {e}")))
    }

    /// `/healthz` says the sidecar is ok; an attack failure when it does not.
    pub async fn check_healthy(&self, after: &str) -> Result<(), Failure> {
        let text = self.health_text().await?;
        let h: Value = serde_json::from_str(&text).unwrap_or_default();
        if h["status"] != "ok" {
            return Err(super::attack(format!("/healthz after {after}: {text}")));
        }
        Ok(())
    }

    /// `POST /v1/exec_code`; an error when the sidecar does not answer.
    pub async fn exec(&self, code: &str) -> Result<Value, String> {
        self.exec_body(json!({"code": code})).await
    }

    /// `POST /v1/exec_code` with this body.
    pub async fn exec_body(&self, body: Value) -> Result<Value, String> {
        let r = self
            .http
            .post(self.url("/v1/exec_code"))
            .header("X-API-Key", &self.secrets.api_key)
            .json(&body)
            .timeout(Duration::from_secs(45))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status();
        let body: Value = r.json().await.map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("{status}: {body}"));
        }
        Ok(body)
    }

    /// A plain run that must work (`print(...)` and nothing else): an attack failure when it
    /// does not, saying `when`.
    pub async fn check_a_run_works(&self, when: &str) -> Result<(), Failure> {
        let r = self
            .exec("print('still works')")
            .await
            .map_err(|e| super::attack(format!("no run {when}: {e}")))?;
        if r["status"] != "ok" || r["stdout"] != "still works\n" {
            return Err(super::attack(format!("the run {when}: {r}")));
        }
        Ok(())
    }

    /// Waits until the demo MCP server is ready, one run has gone through (a cold sidecar
    /// writes its SDK then, which must not count as a file written by an attack) and the warm
    /// pool is full.
    async fn wait_until_ready(&self) -> Result<(), Failure> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut warmed_up = false;
        loop {
            let h: Value = serde_json::from_str(&self.health_text().await?).unwrap_or_default();
            let demo_ready = h["mcp_servers"]["demo"]["state"] == "ready";
            if demo_ready && !warmed_up {
                let r = self.exec("pass").await.map_err(|e| {
                    broken(format!("the first run failed: {e}\n{}", self.log_tail()))
                })?;
                if r["status"] != "ok" {
                    return Err(broken(format!("the first run failed: {r}")));
                }
                warmed_up = true;
            }
            let warm_ready = self.opts.warm == 0 || self.warm_workers().len() >= self.opts.warm;
            if demo_ready && warmed_up && warm_ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                let table = processes();
                let tree: Vec<String> = descendants(&table, self.pid)
                    .into_iter()
                    .map(|p| format!("{p} (parent {}) {}", table[&p].ppid, table[&p].cmdline))
                    .collect();
                return Err(broken(format!(
                    "not ready (demo ready: {demo_ready}, warm workers: {:?}): {h}\n\
                     the sidecar's processes:\n{}\n{}",
                    self.warm_workers(),
                    tree.join("\n"),
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn alive(&self) -> bool {
        let mut child = self.child.lock().unwrap();
        matches!(child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The fork server: the descendant running `ptc_zygote.py` whose parent does not.
    pub fn fork_server(&self) -> Option<i32> {
        let table = processes();
        descendants(&table, self.pid).into_iter().find(|p| {
            let zygote = |pid: &i32| {
                table
                    .get(pid)
                    .is_some_and(|p| p.cmdline.contains("ptc_zygote.py"))
            };
            zygote(p) && !table.get(p).is_some_and(|q| zygote(&q.ppid))
        })
    }

    /// The waiting warm workers (our pids): the fork server's children (cold ones: the
    /// sidecar's `ptc_bootstrap.py` children), when no run is in flight.
    pub fn warm_workers(&self) -> Vec<i32> {
        let table = processes();
        match self.fork_server() {
            Some(z) => children(&table, z),
            None => children(&table, self.pid)
                .into_iter()
                .filter(|p| table[p].cmdline.contains("ptc_bootstrap.py"))
                .collect(),
        }
    }

    /// The demo MCP server's pid (its env carries our mark).
    pub fn mcp_pid(&self) -> Option<i32> {
        let needle = format!("PTC_TEST_MARK={}", self.mark);
        descendants(&processes(), self.pid).into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
    }

    /// Kills `pid` on drop if it is still alive with the same command line.
    pub fn track(&self, pid: i32) {
        if let Some(cmd) = cmdline(pid) {
            let mut tracked = self.tracked.lock().unwrap();
            if !tracked.iter().any(|(p, c)| *p == pid && *c == cmd) {
                tracked.push((pid, cmd));
            }
        }
    }

    /// Sends `signal` to the sidecar and waits (at most [`EXIT_TIMEOUT`]) for it to exit;
    /// whether it did. [`StageInner::stop`] still runs afterwards, and kills what is left.
    pub async fn signal_and_wait(&self, signal: libc::c_int) -> bool {
        let mut taken = self.child.lock().unwrap().take();
        let Some(child) = taken.as_mut() else {
            return true;
        };
        // SAFETY: kill(2) signals the sidecar we started; no memory is involved.
        unsafe { libc::kill(self.pid, signal) };
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let mut exited = false;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                exited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        *self.child.lock().unwrap() = taken;
        exited
    }

    /// Stops the sidecar (SIGTERM, then SIGKILL), and everything it or an attack left running.
    pub async fn stop(&self) {
        self.release_all.cancel();
        let mut table = processes();
        let mut left: Vec<(i32, String)> = descendants(&table, self.pid)
            .into_iter()
            .map(|p| (p, table.remove(&p).map(|p| p.cmdline).unwrap_or_default()))
            .collect();
        left.extend(self.tracked.lock().unwrap().drain(..));
        let child = self.child.lock().unwrap().take();
        if let Some(mut child) = child {
            // SAFETY: kill(2) signals a process; no memory is involved.
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
            let deadline = Instant::now() + SETTLE;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // SAFETY: as above; the sidecar's own group (process_group(0)).
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_if_same(&left);
    }
}

impl Drop for StageInner {
    fn drop(&mut self) {
        // stop() ran unless the test panicked; then at least kill what we know of.
        self.release_all.cancel();
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let table = processes();
        let mut left: Vec<(i32, String)> = descendants(&table, self.pid)
            .into_iter()
            .map(|p| (p, table[&p].cmdline.clone()))
            .collect();
        left.extend(self.tracked.lock().unwrap().drain(..));
        kill_if_same(&left);
        let _ = std::fs::remove_file(&self.tmp_target);
    }
}

/// SIGKILLs each process still running the same command line (not a reused pid).
fn kill_if_same(procs: &[(i32, String)]) {
    for (pid, cmd) in procs {
        if is_alive(*pid) && cmdline(*pid).as_deref() == Some(cmd.as_str()) {
            // SAFETY: kill(2) signals a process; no memory is involved.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
    }
}
