//! The escape suite of the sandbox primitives (src/sandbox, sdk-template/ptc_sandbox.py): a real
//! `python3 -I` confines itself with a ruleset and filters built by the sidecar's code, then
//! tries each forbidden thing (tests/python/sandbox_driver.py). Every attempt runs unconfined
//! first: the baseline shows it reaches the kernel and would succeed, so a refusal in the
//! confined run is the sandbox's doing, not a broken attempt.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use crate::common::{TEST_TIMEOUT, TempDir};
use pretty_assertions::assert_eq;
use ptc_sidecar::sandbox::{self, Mode, Policy, RunAs, Sandbox};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

/// An interpreter every user can read (root's pyenv is not).
const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// The uid the unprivileged runs use: `nobody` exists everywhere.
const NOBODY: &str = "65534:65534";

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/sandbox_driver.py")
}

/// The real interpreter behind `python3` on PATH (a pyenv shim resolves to its binary).
fn project_python() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args(["-I", "-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    assert!(out.status.success());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Everything one escape run needs: the dirs, two listeners, a victim process, the filter file.
struct World {
    python: PathBuf,
    sdk: TempDir,
    scratch: TempDir,
    outside: TempDir,
    runtime: TempDir,
    allowed: std::net::TcpListener,
    other: std::net::TcpListener,
    victim: std::process::Child,
    run_as: Option<RunAs>,
}

impl World {
    fn new(python: PathBuf, run_as: Option<RunAs>) -> World {
        let sdk = TempDir::new("sb-sdk");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk-template/ptc_sandbox.py"),
            sdk.0.join("ptc_sandbox.py"),
        )
        .unwrap();
        let scratch = TempDir::new("sb-scratch");
        let outside = TempDir::new("sb-outside");
        outside.write("secret.txt", "the sidecar's secret");
        // Open to everyone, so that only the sandbox can refuse the writes and reads below.
        std::fs::set_permissions(&outside.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        for dir in [&sdk.0, &scratch.0] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        sandbox::user::prepare_scratch(&scratch.0, run_as.as_ref().map(|u| (u.uid, u.gid)))
            .unwrap();
        let mut victim = std::process::Command::new("sleep");
        victim.arg("60").stdin(Stdio::null());
        if let Some(user) = run_as.clone() {
            // SAFETY: RunAs::switch is async-signal-safe (see its doc).
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut victim, move || user.switch());
            }
        }
        World {
            python,
            sdk,
            scratch,
            outside,
            runtime: TempDir::new("sb-runtime"),
            allowed: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            other: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            victim: victim.spawn().unwrap(),
            run_as,
        }
    }

    fn policy(&self, allow_subprocess: bool) -> Policy {
        let mut policy = Policy::new(
            sandbox::interpreter_paths(&self.python).unwrap(),
            self.sdk.0.clone(),
            self.allowed.local_addr().unwrap().port(),
        );
        policy.allow_subprocess = allow_subprocess;
        policy.user = self.run_as.as_ref().map(|u| u.name.clone());
        policy
    }

    fn victim_alive(&mut self) -> bool {
        matches!(self.victim.try_wait(), Ok(None))
    }

    /// Runs the driver; `sandbox`: confine with it (a fresh ruleset for this world's scratch).
    async fn run(&self, sandbox: Option<&Sandbox>) -> (BTreeMap<String, Value>, String) {
        let mut ruleset: Option<OwnedFd> = None;
        let mut spec = Value::Null;
        if let Some(sandbox) = sandbox {
            let started = Instant::now();
            ruleset = sandbox.ruleset(&self.sdk.0, &[&self.scratch.0]).unwrap();
            eprintln!("ruleset built in {:?}", started.elapsed());
            let filters = self.runtime.0.join("ptc_seccomp.json");
            std::fs::write(&filters, sandbox.filters_json().unwrap().unwrap()).unwrap();
            spec = sandbox.spec(Some(&filters), Some(sandbox::COLD_RULESET_FD));
        }
        let cfg = json!({
            "sdk": self.sdk.0,
            "confine": spec,
            "scratch": self.scratch.0,
            "outside_file": self.outside.0.join("secret.txt"),
            "outside_dir": self.outside.0,
            "allowed_port": self.allowed.local_addr().unwrap().port(),
            "other_port": self.other.local_addr().unwrap().port(),
            "victim_pid": self.victim.id(),
            "parent_pid": std::process::id(),
            // The baseline only asks whether it may signal; the confined run tries to kill.
            "kill_signal": if sandbox.is_some() { libc::SIGKILL } else { 0 },
        });
        let output = spawn(self, &cfg, ruleset.as_ref(), self.run_as.clone()).await;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            output.status.success(),
            "driver failed: {:?}\n{stdout}\n{stderr}",
            output.status
        );
        (serde_json::from_str(&stdout).unwrap(), stderr)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
    }
}

/// `python -I -B driver.py CFG` as a cold child is started: cleared environment, cwd and HOME
/// and TMPDIR the scratch dir, the ruleset at fd 3, the user switched in pre_exec.
async fn spawn(
    world: &World,
    cfg: &Value,
    ruleset: Option<&OwnedFd>,
    run_as: Option<RunAs>,
) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(&world.python);
    cmd.arg("-I")
        .arg("-B")
        .arg(driver())
        .arg(cfg.to_string())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("HOME", &world.scratch.0)
        .env("TMPDIR", &world.scratch.0)
        .current_dir(&world.scratch.0)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let fd = ruleset.map(|f| f.as_raw_fd());
    // A descriptor left open by mistake (as the fork server's sockets would be): confine must
    // close it.
    let leaked = std::fs::File::open("/dev/null").unwrap();
    let leaked_fd = leaked.as_raw_fd();
    // SAFETY: inherit_fd and RunAs::switch are async-signal-safe (dup2, fcntl, set*id,
    // setrlimit only).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = fd {
                sandbox::inherit_fd(fd, sandbox::COLD_RULESET_FD)?;
            }
            sandbox::inherit_fd(leaked_fd, LEAKED_FD)?;
            if let Some(user) = &run_as {
                user.switch()?;
            }
            Ok(())
        });
    }
    let output = tokio::time::timeout(TEST_TIMEOUT, cmd.output())
        .await
        .expect("the driver hung")
        .unwrap();
    drop(leaked);
    output
}

/// Where [`spawn`] leaves an inherited descriptor.
const LEAKED_FD: i32 = 9;

fn outcomes(pairs: &[(&str, &str)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect()
}

/// What code may and may not do once confined, attempt by attempt.
fn confined_expected(subprocess: &str) -> Vec<(&'static str, String)> {
    let fork = if subprocess.starts_with("ok") {
        "ok"
    } else {
        "EPERM"
    };
    [
        ("read_outside", "EACCES"),
        ("write_outside", "EACCES"),
        ("write_scratch", "ok"),
        ("read_sdk", "ok"),
        ("write_sdk", "EACCES"),
        ("read_etc_passwd", "EACCES"),
        ("read_proc_parent_environ", "EACCES"),
        ("read_proc_victim_mem", "EACCES"),
        ("write_dev_null", "ok"),
        ("list_tmp", "EACCES"),
        ("connect_allowed", "ok"),
        ("connect_other", "EACCES"),
        ("fastopen_other", "EPERM"),
        ("bind_tcp", "EACCES"),
        ("udp_socket", "EPERM"),
        ("unix_socket", "EPERM"),
        ("netlink_socket", "EPERM"),
        ("raw_socket", "EPERM"),
        ("sctp_stream", "EPERM"),
        ("socketpair", "ok"),
        ("fork", fork),
        ("subprocess_ls", subprocess),
        ("kill_victim", "EPERM"),
        ("ptrace_victim", "EPERM"),
        ("process_vm_readv_parent", "EPERM"),
        ("unshare", "EPERM"),
        ("io_uring_setup", "EPERM"),
        ("keyctl", "EPERM"),
        ("clone3", "ENOSYS"),
        ("dumpable", "dumpable=0 no_new_privs=1"),
        ("undo_dumpable", "EPERM"),
        ("threads", "ok"),
        ("asyncio", "ok"),
        ("stdlib", "ok"),
        ("inherited_fds", "fds []"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect()
}

fn as_map(pairs: Vec<(&'static str, String)>) -> BTreeMap<String, Value> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::String(v)))
        .collect()
}

#[tokio::test]
async fn every_escape_attempt_succeeds_unconfined_and_is_refused_confined() {
    let mut world = World::new(project_python(), None);
    let (mut baseline, _) = world.run(None).await;
    // Unconfined, the leaked descriptor is there (and whatever else the test runner leaks).
    let fds = baseline.remove("inherited_fds").unwrap();
    assert!(
        fds.as_str().unwrap().contains(&LEAKED_FD.to_string()),
        "{fds}"
    );
    assert_eq!(
        baseline,
        outcomes(&[
            ("read_outside", "ok"),
            ("write_outside", "ok"),
            ("write_scratch", "ok"),
            ("read_sdk", "ok"),
            ("write_sdk", "ok"),
            ("read_etc_passwd", "ok"),
            ("read_proc_parent_environ", "ok"),
            // The open passed; address 0 of the victim is simply not mapped.
            ("read_proc_victim_mem", "EIO"),
            ("write_dev_null", "ok"),
            ("list_tmp", "ok"),
            ("connect_allowed", "ok"),
            ("connect_other", "ok"),
            // The SYN went out (a non-blocking Fast Open connect in progress).
            ("fastopen_other", "EINPROGRESS"),
            ("bind_tcp", "ok"),
            ("udp_socket", "ok"),
            ("unix_socket", "ok"),
            ("netlink_socket", "ok"),
            ("raw_socket", "ok"),
            ("sctp_stream", "EPROTONOSUPPORT"),
            ("socketpair", "ok"),
            ("fork", "ok"),
            ("subprocess_ls", "ok: renamed.txt sub"),
            ("kill_victim", "ok"),
            ("ptrace_victim", "ok"),
            // The permission check passed; address 8 of the parent is not mapped.
            ("process_vm_readv_parent", "EFAULT"),
            ("unshare", "ok"),
            ("io_uring_setup", "EFAULT"),
            ("keyctl", "ok"),
            ("clone3", "EFAULT"),
            ("dumpable", "dumpable=1 no_new_privs=0"),
            ("undo_dumpable", "ok"),
            ("threads", "ok"),
            ("asyncio", "ok"),
            ("stdlib", "ok"),
        ])
    );
    // A fresh scratch dir for the confined run (the baseline wrote into this one).
    world.scratch = TempDir::new("sb-scratch");
    std::fs::remove_file(world.outside.0.join("written-by-code")).unwrap();
    let sandbox = Sandbox::new(world.policy(false)).unwrap();
    let (confined, stderr) = world.run(Some(&sandbox)).await;
    assert_eq!(confined, as_map(confined_expected("EPERM")), "{stderr}");
    eprint!("{stderr}");
    assert!(
        world.victim_alive(),
        "the confined SIGKILL reached the victim"
    );
    assert!(!world.outside.0.join("written-by-code").exists());
}

#[tokio::test]
async fn allow_subprocess_lets_ls_run_and_keeps_the_rest() {
    let world = World::new(project_python(), None);
    let sandbox = Sandbox::new(world.policy(true)).unwrap();
    let (confined, stderr) = world.run(Some(&sandbox)).await;
    assert_eq!(
        confined,
        as_map(confined_expected("ok: renamed.txt sub")),
        "{stderr}"
    );
}

/// The same suite as an unprivileged user (`nobody`), with the Debian interpreter (root's pyenv
/// is not readable by other users): the uid switch of pre_exec, RLIMIT_NPROC, and every layer.
#[tokio::test]
async fn as_an_unprivileged_user_every_escape_is_refused() {
    if !sandbox::can_switch_users() {
        eprintln!("skipped: this test process cannot switch users");
        return;
    }
    if !Path::new(DEBIAN_PYTHON).exists() {
        eprintln!("skipped: {DEBIAN_PYTHON} is missing (scripts/test installs it)");
        return;
    }
    let run_as = sandbox::user::resolve(NOBODY, 500).unwrap();
    let mut world = World::new(PathBuf::from(DEBIAN_PYTHON), Some(run_as));
    let sandbox = Sandbox::new(world.policy(false)).unwrap();
    assert_eq!(sandbox.status().uid, NOBODY);
    let (confined, stderr) = world.run(Some(&sandbox)).await;
    assert_eq!(confined, as_map(confined_expected("EPERM")), "{stderr}");
    assert!(world.victim_alive());

    // Who it ran as, and its process limit, seen from inside.
    let mut cmd = tokio::process::Command::new(DEBIAN_PYTHON);
    cmd.args([
        "-I",
        "-c",
        "import os, resource; print(os.getuid(), os.getgid(), os.getgroups(), \
         resource.getrlimit(resource.RLIMIT_NPROC))",
    ])
    .env_clear()
    .kill_on_drop(true);
    let user = world.run_as.clone().unwrap();
    // SAFETY: RunAs::switch is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || user.switch());
    }
    let out = tokio::time::timeout(TEST_TIMEOUT, cmd.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "65534 65534 [] (500, 500)"
    );
}

/// A layer that was asked for and cannot be applied stops the child before any code runs.
#[tokio::test]
async fn a_layer_that_cannot_be_applied_fails_the_child_closed() {
    let world = World::new(project_python(), None);
    let filters = world.runtime.0.join("ptc_seccomp.json");
    std::fs::write(
        &filters,
        "{\"arch\": \"x86_64\", \"filters\": [{\"bpf\": \"zz\"}]}",
    )
    .unwrap();
    let cases = [
        // fd 3 is not a Landlock ruleset (nothing was inherited there).
        (
            json!({"landlock": true, "seccomp": false, "ruleset_fd": 3}),
            "ptc: sandbox: landlock_restrict_self: Bad file descriptor",
        ),
        (
            json!({"landlock": true, "seccomp": false, "ruleset_fd": null}),
            "ptc: sandbox: Landlock was asked for but no ruleset was passed",
        ),
        (
            json!({"landlock": false, "seccomp": true, "filters": filters}),
            "ptc: sandbox: cannot read the seccomp filter file",
        ),
        (
            json!({"landlock": false, "seccomp": true, "filters": null}),
            "ptc: sandbox: seccomp was asked for but no filter was passed",
        ),
    ];
    for (spec, message) in cases {
        let cfg = json!({"sdk": world.sdk.0, "confine": spec});
        let out = spawn(&world, &cfg, None, None).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        assert!(stderr.starts_with(message), "{spec}: {stderr}");
        assert!(out.stdout.is_empty(), "{spec}: the driver went on");
    }
}

#[test]
fn the_probe_reports_this_kernel() {
    let mut policy = Policy::new(vec![], PathBuf::from("/usr"), 1);
    policy.user = None;
    let status = sandbox::probe(&policy).unwrap();
    // The suite runs on kernels with Landlock ABI 6+ (Linux 6.12) and seccomp filters.
    let abi: i32 = status
        .landlock
        .strip_prefix("abi ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{status}"));
    assert!(abi >= sandbox::REQUIRED_LANDLOCK_ABI, "{status}");
    assert!(status.seccomp);
    // Without a user, code runs as the sidecar's own uid: said where it could have switched.
    let said = status
        .missing
        .iter()
        .all(|m| m.contains("PTC_SANDBOX_USER=none"));
    assert!(said && status.missing.len() <= 1, "{status}");
    let strict = Policy {
        mode: Mode::Strict,
        user: Some(NOBODY.into()),
        ..policy
    };
    let status = sandbox::probe(&strict).unwrap();
    assert_eq!(status.mode, Mode::Strict);
    // A named user that does not exist, where the sidecar could switch to it: strict and
    // best-effort both refuse (code would run as the sidecar's uid); the default user's
    // absence is filled by uid 65532 instead.
    if sandbox::can_switch_users() {
        let ghost = Policy {
            user: Some("surely-no-such-user-ptc".into()),
            user_is_default: false,
            ..strict
        };
        let e = sandbox::probe(&ghost).unwrap_err().to_string();
        assert!(e.contains("no such user"), "{e}");
        let lax = Policy {
            mode: Mode::BestEffort,
            ..ghost.clone()
        };
        let e = sandbox::probe(&lax).unwrap_err().to_string();
        assert!(e.contains("no such user"), "{e}");
        let default_missing = Policy {
            user_is_default: true,
            ..lax
        };
        let status = sandbox::probe(&default_missing).unwrap();
        assert_eq!(
            (status.uid.as_str(), status.missing.len()),
            ("65532", 0),
            "{status}"
        );
    }
}

/// Why the seccomp filter refuses `MSG_FASTOPEN`: Landlock's TCP rule hooks `connect(2)`, and a
/// Fast Open `sendto` connects without it. With Landlock alone (no seccomp) the connect to the
/// other port is refused but the Fast Open one reaches the listener (Linux 6.18, ABI 7).
#[tokio::test]
async fn tcp_fast_open_gets_past_landlock_alone() {
    let world = World::new(project_python(), None);
    let sandbox = Sandbox::new(world.policy(false)).unwrap();
    let ruleset = sandbox.ruleset(&world.sdk.0, &[&world.scratch.0]).unwrap();
    let cfg = json!({
        "sdk": world.sdk.0,
        "confine": {"landlock": true, "seccomp": false, "ruleset_fd": sandbox::COLD_RULESET_FD},
        "only": ["connect_other", "fastopen_other"],
        "allowed_port": world.allowed.local_addr().unwrap().port(),
        "other_port": world.other.local_addr().unwrap().port(),
    });
    let out = spawn(&world, &cfg, ruleset.as_ref(), None).await;
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["connect_other"], "EACCES");
    if got["fastopen_other"] == "EINPROGRESS" {
        world.other.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match world.other.accept() {
                Ok(_) => break,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("the Fast Open SYN never arrived: {e}"),
            }
        }
    } else {
        // A kernel that closed the hole: Landlock refuses it itself.
        assert_eq!(got["fastopen_other"], "EACCES");
    }
}

/// A forked child confined with `parent_pid` (the fork server's children) is SIGKILLed by the
/// kernel when that parent dies, even by SIGKILL: nothing of a run outlives its fork server.
#[tokio::test]
async fn a_forked_child_dies_with_its_parent() {
    use tokio::io::AsyncBufReadExt;
    let sdk = TempDir::new("sb-orphan");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk-template/ptc_sandbox.py"),
        sdk.0.join("ptc_sandbox.py"),
    )
    .unwrap();
    let mut parent = tokio::process::Command::new(project_python())
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/sandbox_orphan.py"))
        .arg(&sdk.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(parent.stdout.take().unwrap()).lines();
    let mut child = 0;
    let mut confined = false;
    while !(confined && child > 0) {
        let line = tokio::time::timeout(TEST_TIMEOUT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("the parent closed stdout early");
        match line.trim() {
            "confined" => confined = true,
            pid => child = pid.parse().unwrap(),
        }
    }
    let alive = |pid: i32| {
        // A zombie (state Z) is dead; it only waits for init to reap it.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
    };
    assert!(alive(child));
    parent.start_kill().unwrap();
    parent.wait().await.unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while alive(child) {
        if Instant::now() > deadline {
            // SAFETY: kill(2) only sends a signal; leave nothing behind.
            unsafe { libc::kill(child, libc::SIGKILL) };
            panic!("the child outlived its parent");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
