//! The escape suite of issues 9 and 21: the real `ptc-sidecar serve` binary, attacked by the
//! Python, bash and JavaScript scripts of `tests/escape/` the way hostile code would, once with the sidecar
//! running as root and once as the unprivileged user `ptc-test` (scripts/test creates it; so
//! does `ptc-run`, the user code runs as when the sidecar may switch users).
//!
//! Each sidecar is started with secrets planted where issue 9 found them leaking: `PTC_API_KEY`,
//! a `REDIS_URL` with a password (a real `redis-server` with `requirepass`), a tools manifest
//! whose callback carries an `Authorization` header (a host tool server of ours, whose direct
//! tool `complete` counts its calls), an MCP config whose demo server has a secret in its `env`,
//! and an HTTP MCP server whose URL carries `?api_key=` and fails to start.
//!
//! One test per attempt of the issues. A script prints `ATTEMPT <what>` before each forbidden
//! step and `REFUSED <exception> errno=<name>`, `GOT <what it obtained>` or `BROKEN <error>` after
//! it (tests/escape/_prelude.py, _prelude.sh, _prelude.mjs), so a test tells a refusal from an attack that got
//! through and from a script that failed for another reason. Every test also checks what the
//! attack leaves: no secret in the run's output, no process of the run alive afterwards, no file
//! written outside its scratch dir (but the files the sidecar saved for it, its result's
//! `files`). Next to the attacks, what must keep working under the sandbox.
//!
//! A run lives in namespaces of its own: the pids it prints are its own PID namespace's (its
//! first process is 1), not ours. So the harness finds a run's processes from outside: a script
//! stops at checkpoints (the host tool `park`, held while the harness looks), where the harness
//! lists the processes that have the run's scratch directory mounted (`procs::of_run`), notes
//! their pids as we see them, and the run's PID namespace. "Nothing of the run outlives it" is
//! then read from the process table: every process seen is gone, and so is every process of the
//! run's PID namespace (`seen.rs`). Attacks on other processes (another run, a session's
//! interpreter, the fork server, the sidecar) are given those outer pids, so they are really
//! attempted.
//!
//! The families: `secrets`, `reach` (the control plane, Redis, the callback, any other address,
//! the IPC port on any other address), `other_runs` (memory, stdout, a warm worker's stdin,
//! sessions, limits and scheduling), `persist` (files, the SDK, the configs, an MCP server's
//! stdin, the process guard), `lifetime` (killing, detaching, `setsid` chains, a killed or
//! terminated sidecar), `resources` (threads, the scratch quota, a session's quota at the end of
//! a run), `gaps` (new namespaces by
//! `clone`, datagram socket pairs, code written to scratch or to memory), `works` (what must keep
//! working, and `/healthz`), `javascript` (reach, files, processes and native code from node),
//! `javascript_resources` (memory, the scratch quota, descriptors, Worker threads, CPU, outliving
//! the run, stdout, calls and connections past a run's share, a rate, from node). The harness: `stage` (the sidecar under attack), `script` (a run of
//! a script and its verdict), `seen` (a run's processes from outside).
//!
//! Each test prints one `escape-verdict <test> <who>: PASS | ATTACK ... | BROKEN ...` line per
//! sidecar (`cargo test escape:: -- --nocapture | grep escape-verdict`).
//!
//! Must not leave anything behind even when an attack gets through: every sidecar, its children,
//! every process the harness saw of a run, Redis and the temp dirs are killed or removed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod gaps;
mod javascript;
mod javascript_resources;
mod lifetime;
mod metadata;
mod other_runs;
mod persist;
mod reach;
mod resources;
mod script;
mod secrets;
mod seen;
mod shares;
mod stage;
mod works;

use serde_json::{Value, json};
use stage::StageInner;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Debian's interpreter, which every user can read (a pyenv install under /root is not).
const PYTHON: &str = "/usr/bin/python3";
/// The user of the second, unprivileged sidecar (scripts/test creates it).
const TEST_USER: &str = "ptc-test";
/// The user code runs as when the sidecar may switch users (`PTC_SANDBOX_USER`'s default).
const SANDBOX_USER: &str = "ptc-run";
/// `PTC_SANDBOX_UIDS`' default: the uids root's runs each get one of.
const RUN_UIDS: std::ops::Range<u32> = 2_000_000_000..2_000_065_536;
/// The user of the attack on the process budget, in both roles (scripts/test creates it). Each
/// run has a budget of its own now (its own user namespace), but should that ever break, a
/// flood as `ptc-run` or `ptc-test` would keep the other tests' runs, going on at the same
/// time, from starting.
const FLOOD_USER: &str = "ptc-flood";
/// `PTC_SCRATCH_MAX_MB` of the sidecars under attack: small, so the quota attack is quick.
const SCRATCH_MAX_MB: u64 = 16;
/// `PTC_SCRATCH_MAX_FILES` of the sidecars under attack: small, for the same reason.
const SCRATCH_MAX_FILES: u64 = 2000;
/// `PTC_SESSION_MAX_MB` of the sidecars under attack: small, so the session quota attack is
/// quick.
const SESSION_MAX_MB: u64 = 16;
/// One test, both sidecars included: the attacks are quick, a hang must not be.
const ESCAPE_TIMEOUT: Duration = Duration::from_secs(120);
/// The namespaces every run gets where the kernel allows (this machine's does, as root and as
/// an unprivileged user), in the order `/healthz` lists them.
const NAMESPACES: [&str; 6] = ["user", "pid", "net", "ipc", "uts", "mount"];

/// The `/healthz` report of the sandbox this suite expects, in one place for the sandbox's
/// authors to align with: `sandbox: {mode, landlock: "abi N", seccomp, uid, namespaces,
/// subprocess, missing}`.
///
/// - `mode`: `PTC_SANDBOX` (`strict`, `best-effort` (the default), `off`).
/// - `landlock`: `"abi N"`, the ABI in force (the kernel's best; this machine's is probed), or
///   `null` when Landlock is unavailable.
/// - `seccomp`: whether the seccomp filter is installed in children.
/// - `uid`: the user code runs as (`"ptc-run"`), its uid when the sidecar cannot switch users.
/// - `uids`: `"per run FIRST-LAST"`, each run and session a uid of its own from
///   `PTC_SANDBOX_UIDS`, or `"shared"`.
/// - `namespaces`: the namespaces each run gets (a user namespace even as root: the run's own
///   process budget).
/// - `missing`: the layers best-effort had to leave out; the user switch for a sidecar that
///   cannot switch users, empty when everything is on.
fn expected_sandbox(who: &Who) -> Value {
    let landlock = landlock_abi().map(|abi| format!("abi {abi}"));
    let unprivileged = |uid: u32| {
        json!({
            "mode": "best-effort",
            "landlock": landlock,
            "seccomp": true,
            "uid": uid.to_string(),
            "uids": "shared",
            "namespaces": NAMESPACES,
            "subprocess": false,
            "missing": [format!(
                "user switch to \"{SANDBOX_USER}\": the sidecar is not root and lacks CAP_SETUID \
                 and CAP_SETGID, so code runs as the sidecar's uid {uid}"
            )],
        })
    };
    // An unprivileged sidecar with subordinate ids: root in a user namespace of its own, its
    // runs each a uid of the grant, the run user the grant's next-to-last id.
    let subordinate = |range: std::ops::Range<u32>| {
        json!({
            "mode": "best-effort",
            "landlock": landlock,
            "seccomp": true,
            "uid": range.end.to_string(),
            "uids": format!("per run {}-{} (subordinate)", range.start, range.end - 1),
            "namespaces": NAMESPACES,
            "subprocess": false,
            "missing": [],
        })
    };
    match (who, who.run_uids()) {
        (Who::Root, _) => json!({
            "mode": "best-effort",
            "landlock": landlock,
            "seccomp": true,
            "uid": SANDBOX_USER,
            "uids": "per run 2000000000-2000065535",
            "namespaces": NAMESPACES,
            "subprocess": false,
            "missing": [],
        }),
        (_, Some(range)) => subordinate(range),
        (Who::User { uid, .. }, None) => unprivileged(*uid),
        // SAFETY: getuid cannot fail.
        (Who::Current, None) => unprivileged(unsafe { libc::getuid() }),
    }
}

/// The uids an unprivileged sidecar of user `name` gives its runs: the ids `/etc/subuid` and
/// `/etc/subgid` grant it less the last two (the run user's and the sidecar's group), where
/// they grant it at least 66 and newuidmap is installed (scripts/test grants `ptc-test`
/// 65,536); `None` where its runs share its uid.
fn subordinate_uids(name: &str, uid: u32) -> Option<std::ops::Range<u32>> {
    let grant = |file: &str| {
        let text = std::fs::read_to_string(file).ok()?;
        text.lines().find_map(|line| {
            let f: Vec<&str> = line.trim().split(':').collect();
            (f.len() == 3 && (f[0] == name || f[0] == uid.to_string()))
                .then(|| Some((f[1].parse::<u32>().ok()?, f[2].parse::<u32>().ok()?)))?
        })
    };
    let (first, count) = grant("/etc/subuid")?;
    let (_, gid_count) = grant("/etc/subgid")?;
    let count = count.min(gid_count);
    let helpers = ["/usr/bin/newuidmap", "/usr/bin/newgidmap"];
    (count >= 66 && helpers.iter().all(|p| std::path::Path::new(p).exists()))
        .then(|| first..first + count - 2)
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

    /// The uids this sidecar's runs each get one of (`PTC_SANDBOX_UIDS` as root, the
    /// subordinate ids of an unprivileged user), or `None` where its runs share a uid.
    fn run_uids(&self) -> Option<std::ops::Range<u32>> {
        match self {
            Who::Root => Some(RUN_UIDS),
            Who::User { name, uid, .. } => subordinate_uids(name, *uid),
            Who::Current => {
                // SAFETY: getuid cannot fail.
                let uid = unsafe { libc::getuid() };
                let name = user_name(uid)?;
                subordinate_uids(&name, uid)
            }
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

/// The name /etc/passwd gives `uid`.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[2] == uid.to_string()).then(|| f[0].to_string())
    })
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

/// One running sidecar under attack and everything it talks to.
type Stage = Arc<StageInner>;

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

/// How a sidecar under attack is configured.
#[derive(Debug, Clone, Copy)]
struct Opts {
    warm: usize,
    allow_subprocess: bool,
    /// Another user in both roles: root's sidecar runs code as it (`PTC_SANDBOX_USER`), the
    /// unprivileged sidecar runs as it.
    user: Option<&'static str>,
    /// More of the sidecar's environment, after (and over) the stage's own.
    env: &'static [(&'static str, &'static str)],
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            warm: 2,
            allow_subprocess: false,
            user: None,
            env: &[],
        }
    }
}

impl Opts {
    fn subprocess() -> Opts {
        Opts {
            allow_subprocess: true,
            ..Opts::default()
        }
    }
}
