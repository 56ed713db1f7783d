//! The escape suite of issue 9: the real `ptc-sidecar serve` binary, attacked by the Python
//! scripts of `tests/escape/` the way hostile code would, once with the sidecar running as root
//! and once as the unprivileged user `ptc-test` (scripts/test creates it; so does `ptc-run`,
//! the user code runs as when the sidecar may switch users).
//!
//! Each sidecar is started with secrets planted where the issue found them leaking: `PTC_API_KEY`,
//! a `REDIS_URL` with a password (a real `redis-server` with `requirepass`), a tools manifest
//! whose callback carries an `Authorization` header (a host tool server of ours, whose direct
//! tool `complete` counts its calls), an MCP config whose demo server has a secret in its `env`,
//! and an HTTP MCP server whose URL carries `?api_key=` and fails to start.
//!
//! One test per attempt of the issue. A script prints `ATTEMPT <what>` before each forbidden
//! step and `REFUSED <exception> errno=<name>`, `GOT <what it obtained>` or `BROKEN <error>` after
//! it (tests/escape/_prelude.py), so a test tells a refusal from an attack that got through and
//! from a script that failed for another reason. Every test also checks what the attack leaves:
//! no secret in the run's output, no process of the run alive afterwards, no file written
//! outside its scratch dir. Next to the attacks, what must keep working under the sandbox.
//!
//! Each test prints one `escape-verdict <test> <who>: PASS | ATTACK ... | BROKEN ...` line per
//! sidecar (`cargo test escape:: -- --nocapture | grep escape-verdict`).
//!
//! Must not leave anything behind even when an attack gets through: every sidecar, its children,
//! every process a script reports, Redis and the temp dirs are killed or removed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{HostServer, HostTool, TempDir, tool, unique};
use crate::procs::{SETTLE, children, cmdline, descendants, is_alive, processes, wait_dead};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

const SIDECAR: &str = env!("CARGO_BIN_EXE_ptc-sidecar");
const DEMO: &str = env!("CARGO_BIN_EXE_ptc-demo-mcp");
/// Debian's interpreter, which every user can read (a pyenv install under /root is not).
const PYTHON: &str = "/usr/bin/python3";
/// The user of the second, unprivileged sidecar (scripts/test creates it).
const TEST_USER: &str = "ptc-test";
/// The user code runs as when the sidecar may switch users (`PTC_SANDBOX_USER`'s default).
const SANDBOX_USER: &str = "ptc-run";
/// The user of the attack on the process budget, in both roles (scripts/test creates it): every
/// run of a user shares one `RLIMIT_NPROC`, so a flood as `ptc-run` or `ptc-test` would keep the
/// other tests' runs, going on at the same time, from starting.
const FLOOD_USER: &str = "ptc-flood";
/// `PTC_SCRATCH_MAX_MB` of the sidecars under attack: small, so the quota attack is quick.
const SCRATCH_MAX_MB: u64 = 16;
/// `PTC_SCRATCH_MAX_FILES` of the sidecars under attack: small, for the same reason.
const SCRATCH_MAX_FILES: u64 = 2000;
/// One test, both sidecars included: the attacks are quick, a hang must not be.
const ESCAPE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a sidecar gets to print that it is serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Longer than the hot-reload debounce (250 ms of quiet, 2 s at most): a rewritten config
/// would have been picked up by then.
const RELOAD_WINDOW: Duration = Duration::from_millis(2500);

/// The `/healthz` report of the sandbox this suite expects, in one place for the sandbox's
/// authors to align with: `sandbox: {mode, landlock: "abi N", seccomp, uid, missing}`.
///
/// - `mode`: `PTC_SANDBOX` (`strict`, `best-effort` (the default), `off`).
/// - `landlock`: `"abi N"`, the ABI in force (the kernel's best; this machine's is probed), or
///   `null` when Landlock is unavailable.
/// - `seccomp`: whether the seccomp filter is installed in children.
/// - `uid`: the user code runs as (`"ptc-run"`), `null` when the sidecar cannot switch users.
/// - `missing`: the layers best-effort had to leave out; `["uid"]` for a sidecar that cannot
///   switch users, empty when everything is on.
fn expected_sandbox(who: &Who) -> Value {
    let landlock = landlock_abi().map(|abi| format!("abi {abi}"));
    let unprivileged = |uid: u32| {
        json!({
            "mode": "best-effort",
            "landlock": landlock,
            "seccomp": true,
            "uid": uid.to_string(),
            "subprocess": false,
            "missing": [format!(
                "user switch to \"{SANDBOX_USER}\": the sidecar is not root and lacks CAP_SETUID \
                 and CAP_SETGID, so code runs as the sidecar's uid {uid}"
            )],
        })
    };
    match who {
        Who::Root => json!({
            "mode": "best-effort",
            "landlock": landlock,
            "seccomp": true,
            "uid": SANDBOX_USER,
            "subprocess": false,
            "missing": [],
        }),
        Who::User { uid, .. } => unprivileged(*uid),
        // SAFETY: getuid cannot fail.
        Who::Current => unprivileged(unsafe { libc::getuid() }),
    }
}

/// The kernel's Landlock ABI (`landlock_create_ruleset(NULL, 0, VERSION)`), if it has one.
fn landlock_abi() -> Option<i64> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 this call only reports the ABI version.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (abi > 0).then_some(abi)
}

// ---------------------------------------------------------------------------------------------
// Who runs the sidecar

#[derive(Debug, Clone)]
enum Who {
    /// The test process is root: the sidecar too.
    Root,
    /// An unprivileged user, switched to before exec.
    User { name: String, uid: u32, gid: u32 },
    /// The test process is not root: the sidecar runs as whoever we are.
    Current,
}

impl Who {
    fn label(&self) -> &str {
        match self {
            Who::Root => "root",
            Who::User { name, .. } => name,
            Who::Current => "current-user",
        }
    }

    fn ids(&self) -> Option<(u32, u32)> {
        match self {
            Who::User { uid, gid, .. } => Some((*uid, *gid)),
            _ => None,
        }
    }
}

/// Root and the unprivileged test user, as CI runs the suite; just ourselves when not root.
fn identities(user: Option<&str>) -> Vec<Who> {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "escape: not root, so the sidecar runs only as the current user (CI runs as root)"
        );
        return vec![Who::Current];
    }
    let name = user.unwrap_or(TEST_USER);
    let (uid, gid) = user_ids(name)
        .unwrap_or_else(|| panic!("user {name} is missing: run scripts/test, which creates it"));
    vec![
        Who::Root,
        Who::User {
            name: name.into(),
            uid,
            gid,
        },
    ]
}

/// uid and gid of a user, from /etc/passwd.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

// ---------------------------------------------------------------------------------------------
// Verdicts

/// Why a test failed against one sidecar.
#[derive(Debug)]
enum Failure {
    /// The attack got through (what it obtained).
    Attack(String),
    /// The attack could not be judged: the script or the harness failed for another reason.
    Broken(String),
}

type Verdict = Result<(), Failure>;

fn attack(message: impl Into<String>) -> Failure {
    Failure::Attack(message.into())
}

fn broken(message: impl Into<String>) -> Failure {
    Failure::Broken(message.into())
}

/// Runs `body` against a fresh sidecar as each identity, prints a verdict line per sidecar and
/// fails with all of them when one is not a pass.
async fn against_both<F, Fut>(test: &str, opts: Opts, body: F)
where
    F: Fn(Stage) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let all = async {
        let mut lines = Vec::new();
        let mut failed = false;
        for who in identities(opts.user) {
            let verdict = match StageInner::start(who.clone(), opts).await {
                Ok(stage) => {
                    let v = body(stage.clone()).await;
                    stage.stop().await;
                    v
                }
                Err(e) => Err(e),
            };
            let line = match verdict {
                Ok(()) => format!("escape-verdict {test} {}: PASS", who.label()),
                Err(Failure::Attack(m)) => {
                    failed = true;
                    format!(
                        "escape-verdict {test} {}: ATTACK SUCCEEDED: {m}",
                        who.label()
                    )
                }
                Err(Failure::Broken(m)) => {
                    failed = true;
                    format!("escape-verdict {test} {}: BROKEN: {m}", who.label())
                }
            };
            eprintln!("{line}");
            lines.push(line);
        }
        assert!(!failed, "\n{}", lines.join("\n"));
    };
    tokio::time::timeout(ESCAPE_TIMEOUT, all)
        .await
        .unwrap_or_else(|_| panic!("escape test {test} did not finish within {ESCAPE_TIMEOUT:?}"));
}

// ---------------------------------------------------------------------------------------------
// The sidecar under attack

#[derive(Debug, Clone, Copy)]
struct Opts {
    warm: usize,
    allow_subprocess: bool,
    /// Another user in both roles: root's sidecar runs code as it (`PTC_SANDBOX_USER`), the
    /// unprivileged sidecar runs as it.
    user: Option<&'static str>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            warm: 2,
            allow_subprocess: false,
            user: None,
        }
    }
}

/// The secrets planted in one sidecar's environment and files.
#[derive(Debug, Clone)]
struct Secrets {
    api_key: String,
    redis_password: String,
    callback_auth: String,
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
    fn leaked_in(&self, text: &str) -> Option<&'static str> {
        let bare = |s: &str| s.trim_start_matches("Bearer ").to_string();
        self.all()
            .into_iter()
            .find(|(_, s)| text.contains(&bare(s)))
            .map(|(name, _)| name)
    }
}

/// A `redis-server` with a password, on a free port, stopped on drop.
struct Redis {
    port: u16,
    password: String,
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
    async fn stream(&self, key: &str) -> String {
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

/// One running sidecar under attack and everything it talks to.
type Stage = Arc<StageInner>;

struct StageInner {
    who: Who,
    opts: Opts,
    child: Mutex<Option<std::process::Child>>,
    pid: i32,
    addr: SocketAddr,
    http: reqwest::Client,
    secrets: Secrets,
    mark: String,
    agent_id: String,
    tools_file: PathBuf,
    mcp_config: PathBuf,
    /// World-writable, outside any scratch dir: only the sandbox keeps code out of it.
    open_dir: PathBuf,
    /// A path in /tmp that must never appear.
    tmp_target: PathBuf,
    redis: Redis,
    host: HostServer,
    complete_calls: Arc<AtomicUsize>,
    parked: Arc<Mutex<Vec<i32>>>,
    release: CancellationToken,
    log: Arc<Mutex<String>>,
    /// Processes to kill on drop if still alive with the same command line (what an attack
    /// that got through may have left).
    tracked: Mutex<Vec<(i32, String)>>,
    // Last: removed after everything above is stopped.
    dir: TempDir,
}

impl StageInner {
    async fn start(who: Who, opts: Opts) -> Result<Stage, Failure> {
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
        let parked = Arc::new(Mutex::new(Vec::new()));
        let release = CancellationToken::new();
        let host = HostServer::start(host_tools(&complete_calls, &parked, &release)).await;

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
                                                 "hold": {"type": "boolean", "default": true}},
                                  "required": ["pid"]}},
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
            .env("PTC_MCP_START_TIMEOUT", "5")
            .env("PTC_TIMEOUT", "30")
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
        let mut child = cmd
            .spawn()
            .map_err(|e| broken(format!("cannot start {}: {e}", sidecar.display())))?;
        let pid = child.id() as i32;
        let log = Arc::new(Mutex::new(String::new()));
        let (serving_tx, serving_rx) = tokio::sync::oneshot::channel();
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
            parked,
            release,
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
        stage.addr = listen_addr(&line)
            .ok_or_else(|| broken(format!("no listen= in the serving line: {line}")))?;
        let stage = Arc::new(stage);
        stage.wait_until_ready().await?;
        Ok(stage)
    }
}

/// The address of `listen=ADDR` in the sidecar's serving line.
fn listen_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listen=").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

fn set_mode(path: &Path, mode: u32) {
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
/// `park`, which records the caller's pid and holds the call until the test releases it.
fn host_tools(
    complete_calls: &Arc<AtomicUsize>,
    parked: &Arc<Mutex<Vec<i32>>>,
    release: &CancellationToken,
) -> Vec<(&'static str, HostTool)> {
    let calls = complete_calls.clone();
    let parked = parked.clone();
    let release = release.clone();
    let park: HostTool = Arc::new(move |input: Value| {
        let parked = parked.clone();
        let release = release.clone();
        Box::pin(async move {
            parked
                .lock()
                .unwrap()
                .push(input["pid"].as_i64().unwrap_or(0) as i32);
            if input["hold"].as_bool().unwrap_or(true) {
                tokio::select! {
                    _ = release.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(20)) => {}
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
    fn log_tail(&self) -> String {
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

    async fn get(&self, path: &str) -> Result<Value, Failure> {
        let r = self
            .http
            .get(self.url(path))
            .header("X-API-Key", &self.secrets.api_key)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| broken(format!("GET {path}: {e}")))?;
        r.json()
            .await
            .map_err(|e| broken(format!("GET {path}: {e}")))
    }

    /// `GET /healthz` as anyone may (no key), raw text.
    async fn health_text(&self) -> Result<String, Failure> {
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

    /// `POST /v1/exec_code`; an error when the sidecar does not answer.
    async fn exec(&self, code: &str) -> Result<Value, String> {
        self.exec_body(json!({"code": code})).await
    }

    /// `POST /v1/exec_code` with this body.
    async fn exec_body(&self, body: Value) -> Result<Value, String> {
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

    fn alive(&self) -> bool {
        let mut child = self.child.lock().unwrap();
        matches!(child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The fork server: the descendant running `ptc_zygote.py` whose parent does not.
    fn fork_server(&self) -> Option<i32> {
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

    /// The waiting warm workers: the fork server's children (cold ones: the sidecar's
    /// `ptc_bootstrap.py` children), when no run is in flight.
    fn warm_workers(&self) -> Vec<i32> {
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
    fn mcp_pid(&self) -> Option<i32> {
        let needle = format!("PTC_TEST_MARK={}", self.mark);
        descendants(&processes(), self.pid).into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
    }

    fn track(&self, pid: i32) {
        if let Some(cmd) = cmdline(pid) {
            self.tracked.lock().unwrap().push((pid, cmd));
        }
    }

    /// Runs an attack script with its facts in `ARGS`, and checks what every attack must
    /// leave: no secret in its output, no process of it alive afterwards, no file outside its
    /// scratch dir.
    async fn attack(&self, script: &str, args: Value) -> Result<Run, Failure> {
        let before = files(&self.dir.0);
        let result = self.exec(&script_code(script, &args)).await.map_err(|e| {
            attack(format!(
                "the sidecar stopped answering during {script}: {e}\n{}",
                self.log_tail()
            ))
        })?;
        let run = Run::parse(result);
        for pid in run.pid.iter().chain(&run.spawned) {
            self.track(*pid);
        }
        if let Some(name) = self
            .secrets
            .leaked_in(&format!("{}{}", run.stdout, run.stderr))
        {
            return Err(attack(format!(
                "{name} leaked into the run's output:\n{}",
                run.stdout
            )));
        }
        self.check_nothing_left(&run, &before).await?;
        Ok(run)
    }

    async fn check_nothing_left(
        &self,
        run: &Run,
        before: &BTreeMap<PathBuf, (u64, i128)>,
    ) -> Result<(), Failure> {
        let pids: Vec<i32> = run.pid.iter().chain(&run.spawned).copied().collect();
        let deadline = Instant::now() + SETTLE;
        loop {
            let alive: Vec<String> = pids
                .iter()
                .filter(|p| is_alive(**p))
                .map(|p| format!("{p}: {}", cmdline(*p).unwrap_or_default()))
                .collect();
            if alive.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(attack(format!(
                    "processes of the run outlived it: {alive:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let after = files(&self.dir.0);
        let scratch = run.scratch.as_deref().map(Path::new);
        let changed: Vec<String> = after
            .iter()
            .filter(|(path, meta)| before.get(*path) != Some(meta))
            .map(|(path, _)| path)
            .chain(before.keys().filter(|p| !after.contains_key(*p)))
            .filter(|path| !scratch.is_some_and(|s| path.starts_with(s)))
            .map(|p| p.display().to_string())
            .collect();
        if !changed.is_empty() {
            return Err(attack(format!(
                "files changed outside the run's scratch dir: {changed:?}"
            )));
        }
        if self.tmp_target.exists() {
            return Err(attack(format!("{} was written", self.tmp_target.display())));
        }
        Ok(())
    }

    /// Starts `script` (victim.py or sleeper.py) as a run in flight and waits for its pid.
    async fn start_victim(
        self: &Arc<Self>,
        script: &str,
    ) -> Result<(i32, tokio::task::JoinHandle<Result<Value, String>>), Failure> {
        let known = self.parked.lock().unwrap().len();
        let stage = self.clone();
        let code = script_code(script, &json!({}));
        let task = tokio::spawn(async move { stage.exec(&code).await });
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(pid) = self.parked.lock().unwrap().get(known).copied() {
                self.track(pid);
                return Ok((pid, task));
            }
            if task.is_finished() {
                return Err(broken(format!(
                    "the victim ended before parking: {:?}",
                    task.await
                )));
            }
            if Instant::now() > deadline {
                return Err(broken("the victim never parked"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Releases the parked victim and returns its result.
    async fn finish_victim(
        &self,
        victim: i32,
        task: tokio::task::JoinHandle<Result<Value, String>>,
    ) -> Result<Run, Failure> {
        self.release.cancel();
        let result = task
            .await
            .map_err(|e| broken(e.to_string()))?
            .map_err(|e| attack(format!("the victim's run failed: {e}")))?;
        if !wait_dead(&[victim]).await.is_empty() {
            return Err(attack(format!("the victim {victim} outlived its run")));
        }
        Ok(Run::parse(result))
    }

    /// Stops the sidecar (SIGTERM, then SIGKILL), and everything it or an attack left running.
    async fn stop(&self) {
        self.release.cancel();
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
        self.release.cancel();
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

/// The code of a run: `ARGS`, the prelude, the script.
fn script_code(script: &str, args: &Value) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/escape");
    let prelude = std::fs::read_to_string(dir.join("_prelude.py")).unwrap();
    let body = std::fs::read_to_string(dir.join(script)).unwrap();
    // A JSON string literal is a Python string literal too.
    let literal = serde_json::to_string(&args.to_string()).unwrap();
    format!("ARGS = json.loads({literal})\n{prelude}\n{body}")
}

/// A finished run of a script, with its prelude lines parsed.
#[derive(Debug)]
struct Run {
    result: Value,
    stdout: String,
    stderr: String,
    pid: Option<i32>,
    scratch: Option<String>,
    spawned: Vec<i32>,
    /// `(what was attempted, its outcome line)`, in order; the outcome is empty when the
    /// script stopped before printing one.
    attempts: Vec<(String, String)>,
}

impl Run {
    fn parse(result: Value) -> Run {
        let stdout = result["stdout"].as_str().unwrap_or_default().to_string();
        let stderr = result["stderr"].as_str().unwrap_or_default().to_string();
        let mut run = Run {
            result,
            stdout: stdout.clone(),
            stderr,
            pid: None,
            scratch: None,
            spawned: Vec::new(),
            attempts: Vec::new(),
        };
        let mut open: Option<usize> = None;
        for line in stdout.lines() {
            if let Some(p) = line.strip_prefix("PID ") {
                run.pid = p.trim().parse().ok();
            } else if let Some(s) = line.strip_prefix("SCRATCH ") {
                run.scratch = Some(s.trim().to_string());
            } else if let Some(p) = line.strip_prefix("SPAWNED ") {
                run.spawned.extend(p.trim().parse::<i32>().ok());
            } else if let Some(what) = line.strip_prefix("ATTEMPT ") {
                run.attempts.push((what.to_string(), String::new()));
                open = Some(run.attempts.len() - 1);
            } else if ["REFUSED ", "GOT ", "BROKEN "]
                .iter()
                .any(|p| line.starts_with(p))
                && let Some(i) = open.take()
            {
                run.attempts[i].1 = line.to_string();
            }
        }
        run
    }

    fn status(&self) -> &str {
        self.result["status"].as_str().unwrap_or_default()
    }

    /// The script ran to its end and made `n` attempts, every one refused.
    fn all_refused(&self, n: usize) -> Verdict {
        self.ran_to_the_end()?;
        if self.attempts.len() != n {
            return Err(broken(format!(
                "expected {n} attempts, saw {}:\n{}",
                self.attempts.len(),
                self.stdout
            )));
        }
        let got: Vec<&(String, String)> = self
            .attempts
            .iter()
            .filter(|(_, o)| o.starts_with("GOT "))
            .collect();
        if !got.is_empty() {
            return Err(attack(format!("{got:?}")));
        }
        let other: Vec<&(String, String)> = self
            .attempts
            .iter()
            .filter(|(_, o)| !o.starts_with("REFUSED "))
            .collect();
        if !other.is_empty() {
            return Err(broken(format!("{other:?}\nstderr: {}", self.stderr)));
        }
        Ok(())
    }

    fn ran_to_the_end(&self) -> Verdict {
        if self.status() != "ok" {
            return Err(broken(format!(
                "the script did not finish (status {}): {:?}\nstdout: {}\nstderr: {}",
                self.status(),
                self.result["exit_code"],
                self.stdout,
                self.stderr
            )));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Processes and files, read from /proc and the disk as root sees them

/// Every regular file under `dir` (redis's own dir aside), with its size and mtime.
fn files(dir: &Path) -> BTreeMap<PathBuf, (u64, i128)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if path != dir.join("redis") {
                    todo.push(path);
                }
            } else if meta.is_file() {
                use std::os::unix::fs::MetadataExt;
                let mtime =
                    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
                out.insert(path, (meta.len(), mtime));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Secrets

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_proc_environ_are_refused() {
    against_both("secrets_environ", Opts::default(), |s| async move {
        let mcp = s.mcp_pid().ok_or_else(|| broken("no MCP server process"))?;
        let run = s
            .attack(
                "secrets_environ.py",
                json!({"sidecar_pid": s.pid, "mcp_pid": mcp}),
            )
            .await?;
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_config_files_are_refused() {
    against_both("secrets_files", Opts::default(), |s| async move {
        let run = s
            .attack(
                "secrets_files.py",
                json!({"tools_file": s.tools_file, "mcp_config": s.mcp_config}),
            )
            .await?;
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_errors_redact_urls() {
    against_both("healthz_redacts", Opts::default(), |s| async move {
        // The attempt: the open /healthz once the remote server has failed to start.
        let deadline = Instant::now() + Duration::from_secs(10);
        let text = loop {
            let text = s.health_text().await?;
            let h: Value = serde_json::from_str(&text).unwrap_or_default();
            let remote = &h["mcp_servers"]["remote"];
            if ["failed", "restarting"].contains(&remote["state"].as_str().unwrap_or_default())
                && remote["error"].is_string()
            {
                break text;
            }
            if Instant::now() > deadline {
                return Err(broken(format!("the remote server never failed: {text}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if let Some(name) = s.secrets.leaked_in(&text) {
            return Err(attack(format!("/healthz shows {name}: {text}")));
        }
        if let Some(name) = s.secrets.leaked_in(&s.log_tail()) {
            return Err(attack(format!("the log shows {name}: {}", s.log_tail())));
        }
        Ok(())
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Reach

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_the_control_api_is_refused() {
    against_both("reach_control_api", Opts::default(), |s| async move {
        let run = s
            .attack(
                "reach_control_api.py",
                json!({"control": [s.addr.ip().to_string(), s.addr.port()], "api_key": s.secrets.api_key}),
            )
            .await?;
        run.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_redis_is_refused() {
    against_both("reach_redis", Opts::default(), |s| async move {
        let run = s
            .attack(
                "reach_redis.py",
                json!({"redis_port": s.redis.port, "redis_password": s.redis.password,
                       "agent_id": s.agent_id, "mark": s.mark}),
            )
            .await?;
        let stream = s.redis.stream(&format!("ptc:stream:{}", s.agent_id)).await;
        if stream.contains(&s.mark) {
            return Err(attack(format!("a forged event is in the stream: {stream}")));
        }
        run.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_the_host_callback_is_refused() {
    against_both("reach_callback", Opts::default(), |s| async move {
        let run = s
            .attack(
                "reach_callback.py",
                json!({"callback": [s.host.addr.ip().to_string(), s.host.addr.port(), "/tools"],
                       "callback_auth": s.secrets.callback_auth, "mark": s.mark}),
            )
            .await?;
        let calls = s.complete_calls.load(Ordering::SeqCst);
        if calls > 0 {
            return Err(attack(format!(
                "the direct tool complete was called {calls} time(s)"
            )));
        }
        run.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_any_other_address_is_refused() {
    against_both("reach_anywhere", Opts::default(), |s| async move {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let unix_path = s.open_dir.join("escape.sock");
        let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        unix.set_nonblocking(true).unwrap();
        set_mode(&unix_path, 0o777);
        let run = s
            .attack(
                "reach_anywhere.py",
                json!({"tcp_port": tcp.local_addr().unwrap().port(),
                       "udp_port": udp.local_addr().unwrap().port(),
                       "unix_path": unix_path, "mark": s.mark}),
            )
            .await;
        let mut arrived = Vec::new();
        if tcp.accept().is_ok() {
            arrived.push("a TCP connection");
        }
        if udp.recv(&mut [0u8; 256]).is_ok() {
            arrived.push("a UDP datagram");
        }
        if unix.accept().is_ok() {
            arrived.push("a Unix connection");
        }
        drop(unix);
        let _ = std::fs::remove_file(&unix_path);
        if !arrived.is_empty() {
            return Err(attack(format!("{arrived:?} arrived")));
        }
        run?.all_refused(4)
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Other runs

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_another_runs_memory_is_refused() {
    against_both("other_runs_memory", Opts::default(), |s| async move {
        let (victim, task) = s.start_victim("victim.py").await?;
        let run = s
            .attack("other_runs_memory.py", json!({"victim_pid": victim}))
            .await;
        let v = s.finish_victim(victim, task).await?;
        v.ran_to_the_end()?;
        run?.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_another_runs_stdout_is_refused() {
    against_both("other_runs_stdout", Opts::default(), |s| async move {
        let (victim, task) = s.start_victim("victim.py").await?;
        let run = s
            .attack(
                "other_runs_stdout.py",
                json!({"victim_pid": victim, "mark": s.mark}),
            )
            .await;
        let v = s.finish_victim(victim, task).await?;
        if v.stdout.contains("INJECTED") {
            return Err(attack(format!("the victim's stdout: {}", v.stdout)));
        }
        v.ran_to_the_end()?;
        run?.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_a_warm_workers_stdin_is_refused() {
    against_both("other_runs_warm_stdin", Opts::default(), |s| async move {
        let warm = s.warm_workers();
        if warm.is_empty() {
            return Err(broken("no warm worker is waiting"));
        }
        let run = s
            .attack(
                "other_runs_warm_stdin.py",
                json!({"warm_pids": warm, "mark": s.mark}),
            )
            .await?;
        // The next runs are the ones a hijack would take over.
        for _ in 0..3 {
            let next = s
                .exec("print('next run')")
                .await
                .map_err(|e| attack(format!("the next run failed: {e}")))?;
            if next["status"] != "ok" || next["stdout"] != "next run\n" {
                return Err(attack(format!("the next run was taken over: {next}")));
            }
        }
        if run.attempts.is_empty() {
            return Err(broken(format!("no worker was attacked: {}", run.stdout)));
        }
        run.all_refused(run.attempts.len())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_another_sessions_files_and_globals_is_refused() {
    against_both("other_sessions", Opts::default(), |s| async move {
        let session = |code: String| s.exec_body(json!({"code": code, "session_id": "victim-s"}));
        let setup = format!(
            "import os\nSECRET = {:?}\nopen('secret.txt', 'w').write(SECRET)\n\
             print(os.getpid(), os.getcwd().replace('/', '|'))",
            s.mark
        );
        let victim = session(setup)
            .await
            .map_err(|e| broken(format!("the session did not start: {e}")))?;
        let out = victim["stdout"].as_str().unwrap_or_default().to_string();
        let Some((pid, dir)) = out.trim().split_once(' ') else {
            return Err(broken(format!("the session printed no pid: {victim}")));
        };
        let pid: i32 = pid.parse().map_err(|_| broken(out.clone()))?;
        s.track(pid);
        let run = s
            .attack(
                "other_sessions.py",
                json!({"victim_pid": pid, "victim_dir": dir.replace('|', "/"), "mark": s.mark}),
            )
            .await;
        let after = session("print(SECRET, open('secret.txt').read())".into())
            .await
            .map_err(|e| attack(format!("the session's next run failed: {e}")))?;
        let both = format!("{} {}\n", s.mark, s.mark);
        if after["stdout"] != both.as_str() || after["session"]["state"] != "kept" {
            return Err(attack(format!("the session was changed: {after}")));
        }
        run?.all_refused(4)
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The process guard

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_guard_does_not_fall() {
    against_both("process_guard", Opts::default(), |s| async move {
        let run = s.attack("process_guard.py", json!({})).await?;
        run.all_refused(3)
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Persistence and escalation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_outside_scratch_is_refused() {
    against_both("persist_outside_scratch", Opts::default(), |s| async move {
        let run = s
            .attack(
                "persist_outside_scratch.py",
                json!({"open_dir": s.open_dir, "tmp_target": s.tmp_target, "mark": s.mark}),
            )
            .await?;
        if !run.stdout.contains("SCRATCH_WRITE fine") {
            return Err(broken(format!("writing in scratch failed: {}", run.stdout)));
        }
        run.all_refused(3)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisoning_the_sdk_and_killing_the_fork_server_is_refused() {
    against_both("persist_sdk", Opts::default(), |s| async move {
        let zygote = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        let run = s
            .attack(
                "persist_sdk.py",
                json!({"fork_server_pid": zygote, "mark": s.mark}),
            )
            .await?;
        if !is_alive(zygote) {
            return Err(attack(format!("the fork server {zygote} was killed")));
        }
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_the_configs_is_refused() {
    against_both("persist_config", Opts::default(), |s| async move {
        let run = s
            .attack(
                "persist_config.py",
                json!({"tools_file": s.tools_file, "mcp_config": s.mcp_config,
                       "tmp_target": s.tmp_target, "mark": s.mark,
                       "mark_py": s.mark.replace('-', "_")}),
            )
            .await?;
        tokio::time::sleep(RELOAD_WINDOW).await;
        let tools = s.get("/v1/tools").await?.to_string();
        if tools.contains(&s.mark.replace('-', "_")) {
            return Err(attack("the model's tool list now has the attacker's tool"));
        }
        let health = s.health_text().await?;
        if health.contains("\"escape\"") {
            return Err(attack(format!(
                "the sidecar started the attacker's MCP server: {health}"
            )));
        }
        if s.tmp_target.exists() {
            return Err(attack("the attacker's MCP command ran"));
        }
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_an_mcp_servers_stdin_is_refused() {
    against_both("persist_mcp_stdin", Opts::default(), |s| async move {
        let mcp = s.mcp_pid().ok_or_else(|| broken("no MCP server process"))?;
        let run = s
            .attack("persist_mcp_stdin.py", json!({"mcp_pid": mcp}))
            .await?;
        run.all_refused(1)
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Lifetime and resources

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_sidecar_and_its_servers_is_refused() {
    against_both("lifetime_kill", Opts::default(), |s| async move {
        let mcp = s.mcp_pid().ok_or_else(|| broken("no MCP server process"))?;
        let run = s
            .attack(
                "lifetime_kill.py",
                json!({"mcp_pid": mcp, "sidecar_pid": s.pid}),
            )
            .await?;
        if !s.alive() {
            return Err(attack("the sidecar was killed"));
        }
        if !is_alive(mcp) {
            return Err(attack(format!("the MCP server {mcp} was killed")));
        }
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_processes_are_refused_by_default() {
    against_both("lifetime_detach_refused", Opts::default(), |s| async move {
        let run = s.attack("lifetime_detach.py", json!({})).await?;
        run.all_refused(2)
    })
    .await;
}

/// Only with `PTC_ALLOW_SUBPROCESS=true` (off by default, where `setsid` and `fork` are
/// refused: `detached_processes_are_refused_by_default`), through the fork server (a subreaper
/// that kills what a run leaves behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_processes_die_with_the_run_when_allowed() {
    let opts = Opts {
        allow_subprocess: true,
        ..Opts::default()
    };
    against_both("lifetime_detach_allowed", opts, check_detached).await;
}

/// The same for a cold run (a request's own catalog, or `PTC_WARM_WORKERS=0`): with
/// subprocesses allowed it is forked by a fork server of its own, the subreaper that kills what
/// it leaves behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_processes_die_with_a_cold_run_when_allowed() {
    let opts = Opts {
        warm: 0,
        allow_subprocess: true,
        ..Opts::default()
    };
    against_both("lifetime_detach_allowed_cold", opts, check_detached).await;
}

async fn check_detached(s: Stage) -> Verdict {
    {
        // attack() checks that every SPAWNED process is gone once the run is over.
        let run = s.attack("lifetime_detach.py", json!({})).await?;
        run.ran_to_the_end()?;
        let bad: Vec<_> = run
            .attempts
            .iter()
            .filter(|(_, o)| !o.starts_with("GOT "))
            .collect();
        if run.attempts.len() != 2 || !bad.is_empty() || run.spawned.len() != 3 {
            return Err(broken(format!(
                "expected a setsid child, a child and a grandchild: {}",
                run.stdout
            )));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_killed_sidecar() {
    against_both("lifetime_sidecar_killed", Opts::default(), |s| {
        check_sidecar_killed(s, "sleeper.py")
    })
    .await;
}

/// With subprocesses allowed, a run's `setsid` process is not in its group and has no death
/// signal: the fork server, seeing its sidecar gone, kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_killed_sidecar_when_subprocesses_are_allowed() {
    let opts = Opts {
        allow_subprocess: true,
        ..Opts::default()
    };
    against_both("lifetime_sidecar_killed_detached", opts, |s| {
        check_sidecar_killed(s, "detached_sleeper.py")
    })
    .await;
}

/// Starts `script` (a victim that parks with the pid of what should die), kills the sidecar
/// with SIGKILL and checks that every descendant it had is gone.
async fn check_sidecar_killed(s: Stage, script: &str) -> Verdict {
    {
        let (sleeper, task) = s.start_victim(script).await?;
        let table = processes();
        let family = descendants(&table, s.pid);
        if !family.contains(&sleeper) {
            return Err(broken(format!(
                "the sleeping run {sleeper} is not a descendant of the sidecar"
            )));
        }
        let all = family;
        for p in &all {
            s.track(*p);
        }
        // SAFETY: kill(2) signals the sidecar we started; no memory is involved.
        unsafe { libc::kill(s.pid, libc::SIGKILL) };
        let _ = task.await;
        let left = wait_dead(&all).await;
        if !left.is_empty() {
            let named: Vec<String> = left
                .iter()
                .map(|p| format!("{p}: {}", cmdline(*p).unwrap_or_default()))
                .collect();
            return Err(attack(format!("outlived the sidecar: {named:?}")));
        }
        Ok(())
    }
}

/// The budget is one for every run of the code's user: while the flood holds it, later runs may
/// not start (and say why), but none is taken over, and the fork server outlives the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_threads_are_refused_and_take_no_run_over() {
    let opts = Opts {
        user: Some(FLOOD_USER),
        ..Opts::default()
    };
    against_both("resources_threads", opts, |s| async move {
        let server = s.fork_server();
        let (victim, task) = s.start_victim("resources_threads.py").await?;
        // The flood holds its threads now. Warm children forked before it still run.
        let mut spent = 0;
        for _ in 0..4 {
            let next = s
                .exec("print('next run')")
                .await
                .map_err(|e| attack(format!("the sidecar stopped answering: {e}")))?;
            let said_why = next["stderr"]
                .as_str()
                .is_some_and(|e| e.contains("retry when other runs end"));
            match next["status"].as_str() {
                Some("ok") if next["stdout"] == "next run\n" => {}
                Some("error") if said_why => spent += 1,
                _ => return Err(attack(format!("a run during the flood: {next}"))),
            }
        }
        let run = s.finish_victim(victim, task).await?;
        run.all_refused(1)?;
        if !run.stdout.contains("threads released") {
            return Err(broken(format!("the flood did not end: {}", run.stdout)));
        }
        // Root's fork server runs as the code's user, under its budget; an unprivileged
        // sidecar's does not (it sets no limit on itself), so its forks succeed.
        if matches!(s.who, Who::Root) && spent == 0 {
            return Err(broken(format!(
                "no run met the spent budget: {}",
                run.stdout
            )));
        }
        let after = s
            .exec("print('after')")
            .await
            .map_err(|e| attack(format!("no run after the flood: {e}")))?;
        if after["status"] != "ok" || after["stdout"] != "after\n" {
            return Err(attack(format!("the run after the flood: {after}")));
        }
        if s.fork_server() != server {
            return Err(attack(format!(
                "the fork server did not outlive the flood ({server:?}, now {:?})",
                s.fork_server()
            )));
        }
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scratch_quota_holds() {
    against_both("resources_scratch", Opts::default(), |s| async move {
        let run = s
            .attack(
                "resources_scratch.py",
                json!({"scratch_max_mb": SCRATCH_MAX_MB, "scratch_max_files": SCRATCH_MAX_FILES}),
            )
            .await?;
        // One file past the size quota meets RLIMIT_FSIZE (EFBIG); the file flood meets the
        // sidecar's watch, which stops the run with PTC_SCRATCH_MAX_FILES in its error.
        let got: Vec<_> = run
            .attempts
            .iter()
            .filter(|(_, o)| o.starts_with("GOT "))
            .collect();
        if !got.is_empty() {
            return Err(attack(format!("{got:?}")));
        }
        let stopped = run.status() == "error" && run.stderr.contains("PTC_SCRATCH_MAX_FILES");
        match run.attempts.as_slice() {
            [(_, big), (_, many)] if big.starts_with("REFUSED ") && many.is_empty() && stopped => {
                Ok(())
            }
            _ if run.status() == "ok" => Err(attack(format!(
                "the run finished within its quota:\n{}",
                run.stdout
            ))),
            _ => Err(broken(format!(
                "expected the big file refused and the run stopped during the file flood \
                 (status {}):\nstdout: {}\nstderr: {}",
                run.status(),
                run.stdout,
                run.stderr
            ))),
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// What must keep working

const WORKS_STDOUT: &str = "\
sdk a b c d
gather 1225
mcp 5
json {\"k\": [1, 2]}
re a#b#
zoneinfo 2:00:00
sqlite3 6
tempfile temp True
scratch kept in scratch {'ok': True} ['notes.txt', 'scratch.db', 'sub']
";

async fn check_works(s: &StageInner) -> Verdict {
    let zygote = s.fork_server();
    if (s.opts.warm > 0) != zygote.is_some() {
        return Err(broken(format!(
            "warm workers {}, fork server {zygote:?}",
            s.opts.warm
        )));
    }
    let run = s.attack("works.py", json!({})).await?;
    run.ran_to_the_end()?;
    let out: String = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with("PID ") && !l.starts_with("SCRATCH "))
        .map(|l| format!("{l}\n"))
        .collect();
    if out != WORKS_STDOUT {
        return Err(broken(format!(
            "expected\n{WORKS_STDOUT}got\n{out}stderr: {}",
            run.stderr
        )));
    }
    if let Some(z) = zygote
        && !is_alive(z)
    {
        return Err(broken("the fork server died"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_stdlib_mcp_and_scratch_work_with_the_fork_server() {
    against_both("works_fork_server", Opts::default(), |s| async move {
        check_works(&s).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_stdlib_mcp_and_scratch_work_cold() {
    let opts = Opts {
        warm: 0,
        ..Opts::default()
    };
    against_both("works_cold", opts, |s| async move { check_works(&s).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_works_when_allowed_and_its_children_die_with_the_run() {
    let opts = Opts {
        allow_subprocess: true,
        ..Opts::default()
    };
    against_both("works_subprocess", opts, |s| async move {
        let run = s.attack("works_subprocess.py", json!({})).await?;
        run.ran_to_the_end()?;
        if !run.stdout.contains("ls 0 True\n")
            || !run.stdout.contains("left running True\n")
            || run.spawned.len() != 1
        {
            return Err(broken(format!(
                "stdout: {}\nstderr: {}",
                run.stdout, run.stderr
            )));
        }
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_the_sandbox_and_code_runs_as_its_user() {
    against_both("healthz_sandbox", Opts::default(), |s| async move {
        let h: Value =
            serde_json::from_str(&s.health_text().await?).map_err(|e| broken(e.to_string()))?;
        let expected = expected_sandbox(&s.who);
        if h["sandbox"] != expected {
            return Err(attack(format!(
                "/healthz sandbox: expected {expected}, got {}",
                h["sandbox"]
            )));
        }
        let r = s
            .exec("import os; print(os.getuid(), os.geteuid())")
            .await
            .map_err(broken)?;
        let code_uid = match &s.who {
            Who::Root => user_ids(SANDBOX_USER).map(|(u, _)| u),
            Who::User { uid, .. } => Some(*uid),
            // SAFETY: getuid cannot fail.
            Who::Current => Some(unsafe { libc::getuid() }),
        }
        .ok_or_else(|| broken(format!("user {SANDBOX_USER} is missing: run scripts/test")))?;
        if r["stdout"] != format!("{code_uid} {code_uid}\n") {
            return Err(attack(format!(
                "code runs as {}, not uid {code_uid}",
                r["stdout"]
            )));
        }
        Ok(())
    })
    .await;
}
