//! The runner as a library, driven without the HTTP layer: `Runner::start` with a config built
//! here, real python3 children. What only shows at this level: preparing a new catalog's SDK
//! (a `python -m py_compile`) must not hold up runs of catalogs that are already prepared.

use crate::common::{TEST_TIMEOUT, TempDir};
use crate::procs::{processes, wait_dead};
use pretty_assertions::assert_eq;
use ptc_sidecar::catalog::source::ToolDef;
use ptc_sidecar::catalog::{Catalog, CatalogInput, Policy};
use ptc_sidecar::render::Snapshot;
use ptc_sidecar::run::child::{Limits, resolve_python};
use ptc_sidecar::run::{
    Backends, ExecRequest, ExecResult, ExecStatus, Runner, RunnerConfig, SandboxSettings,
    ScratchQuota, ShapesConfig,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long the SDK compile of a "slow" catalog takes: far longer than a few cold runs.
const SLOW_COMPILE: Duration = Duration::from_secs(8);

/// An interpreter that is the real python3, except that `-m py_compile` (the SDK's one-time
/// compile, and nothing else) first logs itself to `compiles` and, while a `slow` file exists,
/// sleeps with a `compiling` file present.
fn slow_compiling_python(dir: &TempDir, real: &Path) -> PathBuf {
    let d = dir.0.display();
    let script = format!(
        "#!/bin/sh\n\
         case \" $* \" in\n\
         *' py_compile '*)\n\
           echo x >> '{d}/compiles'\n\
           if [ -e '{d}/slow' ]; then touch '{d}/compiling'; sleep {secs}; rm -f '{d}/compiling'; fi ;;\n\
         esac\n\
         exec '{real}' \"$@\"\n",
        secs = SLOW_COMPILE.as_secs(),
        real = real.display(),
    );
    let path = dir.write("python", &script);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn compiles(dir: &TempDir) -> usize {
    std::fs::read_to_string(dir.0.join("compiles")).map_or(0, |s| s.lines().count())
}

/// A PTC catalog of one host tool: distinct names give distinct catalogs.
fn snapshot(tool: &str) -> Arc<Snapshot> {
    let def = ToolDef {
        name: tool.into(),
        title: None,
        description: format!("The {tool} tool."),
        input_schema: serde_json::json!({"type": "object", "properties": {}}),
        output_schema: None,
        annotations: None,
    };
    let input = CatalogInput {
        host_tools: vec![def],
        ..CatalogInput::default()
    };
    let policy = Policy {
        ptc_enabled: true,
        ..Policy::default()
    };
    Arc::new(Snapshot::new(Catalog::build(input, &policy, 1)))
}

fn config(python: PathBuf, runtime_dir: PathBuf) -> RunnerConfig {
    RunnerConfig {
        python,
        timeout: Duration::from_secs(30),
        tool_timeout: Duration::from_secs(5),
        max_output_bytes: 1 << 20,
        runtime_dir,
        warm_workers: 0,
        max_runs: 8,
        max_calls_per_run: 100,
        max_in_flight_per_run: 8,
        limits: Limits {
            address_space: 2 << 30,
            cpu_secs: 60,
            file_size: 1 << 20,
            open_files: 256,
            processes: 1024,
        },
        path_env: std::env::var("PATH").unwrap_or_default(),
        allow_subprocess: false,
        // Code runs as this test's uid, explicitly: the interpreter is a wrapper in a temp dir
        // only we can read, and these tests are about preparation, not confinement.
        sandbox: SandboxSettings {
            user: None,
            ..SandboxSettings::default()
        },
        scratch_quota: ScratchQuota {
            max_bytes: 1 << 20,
            max_files: 100,
        },
        max_sessions: 32,
        session_idle_ttl: Duration::from_secs(1800),
        shapes: ShapesConfig {
            learn: true,
            agent: "runner-test".into(),
            state_dir: None,
        },
    }
}

/// A runner of `cfg` serving `current`; the catalog's sender (kept, as a sidecar keeps it:
/// the refill loop watches it) and the token that stops the runner.
async fn start(
    cfg: RunnerConfig,
    current: Arc<Snapshot>,
) -> (Runner, watch::Sender<Arc<Snapshot>>, CancellationToken) {
    let (tx, rx) = watch::channel(current);
    let shutdown = CancellationToken::new();
    let runner = Runner::start(
        cfg,
        rx,
        Backends::new(Duration::from_secs(5)),
        shutdown.clone(),
    )
    .await
    .unwrap();
    (runner, tx, shutdown)
}

fn request(code: &str, snapshot: Option<&Arc<Snapshot>>) -> ExecRequest {
    ExecRequest {
        code: code.into(),
        snapshot: snapshot.cloned(),
        ..ExecRequest::default()
    }
}

fn assert_ok(r: &ExecResult, stdout: &str) {
    assert_eq!(
        (r.status, r.stdout.as_str()),
        (ExecStatus::Ok, stdout),
        "{r:?}"
    );
}

#[tokio::test]
async fn runs_keep_flowing_while_a_new_catalog_is_prepared() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("prepare");
        let real = resolve_python("python3").await.unwrap();
        let python = slow_compiling_python(&dir, &real);
        let (runner, _tx, shutdown) =
            start(config(python, dir.0.join("rt")), snapshot("alpha")).await;

        // The current catalog and one per-request catalog, prepared while compiles are fast.
        let prepared = snapshot("beta");
        assert_ok(&runner.exec(request("print('c')", None)).await, "c\n");
        assert_ok(
            &runner.exec(request("print('p')", Some(&prepared))).await,
            "p\n",
        );
        let before = compiles(&dir);

        // Two runs of a new catalog: its compile is slow from here on.
        dir.write("slow", "");
        let started = Instant::now();
        let new = snapshot("gamma");
        let slow: Vec<_> = (0..2)
            .map(|i| {
                let (runner, new) = (runner.clone(), new.clone());
                tokio::spawn(async move {
                    runner
                        .exec(request(&format!("print('new', {i})"), Some(&new)))
                        .await
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while compiles(&dir) == before {
            assert!(
                Instant::now() < deadline,
                "the new catalog's compile never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Meanwhile: runs of the current catalog and of the prepared per-request one finish.
        let flowing: Vec<_> = (0..4)
            .map(|i| {
                let runner = runner.clone();
                // The last one runs against the per-request catalog prepared above.
                let snap = (i == 3).then(|| prepared.clone());
                tokio::spawn(async move {
                    runner
                        .exec(request(&format!("print({i})"), snap.as_ref()))
                        .await
                })
            })
            .collect();
        for (i, task) in flowing.into_iter().enumerate() {
            assert_ok(&task.await.unwrap(), &format!("{i}\n"));
        }
        assert!(
            dir.0.join("compiling").exists(),
            "the runs finished only after the new catalog's compile ({:?}): they waited for it",
            started.elapsed()
        );

        // The new catalog's runs waited for one preparation, shared.
        for (i, task) in slow.into_iter().enumerate() {
            assert_ok(&task.await.unwrap(), &format!("new {i}\n"));
        }
        assert_eq!(
            compiles(&dir),
            before + 1,
            "one compile for the new catalog"
        );
        shutdown.cancel();
    })
    .await
    .unwrap();
}

/// The pids of live processes whose command line holds every one of `words`.
fn processes_with(words: &[&str]) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, p)| words.iter().all(|w| p.cmdline.contains(w)))
        .map(|(pid, _)| pid)
        .collect()
}

/// The attack where the sandbox's read-only SDK rule is missing (an old kernel): code appends
/// to the SDK and kills the fork server, so that every later run starts from its code. The
/// sidecar checks the SDK directory against what it wrote before a fork server starts from it;
/// a changed one is removed and prepared again, and no run ever executes the planted line.
#[tokio::test]
async fn a_fork_server_never_restarts_from_a_changed_sdk() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("runner-sdk-check");
        let python = resolve_python("python3").await.unwrap();
        let rt = dir.0.join("rt");
        let mut cfg = config(python, rt.clone());
        cfg.warm_workers = 1;
        let (runner, _tx, shutdown) = start(cfg, snapshot("alpha")).await;
        assert_ok(&runner.exec(request("print('a')", None)).await, "a\n");

        // The fork server of this catalog, started for the warm pool.
        let rt_text = rt.display().to_string();
        // Its forked children keep its command line; the server is the one whose parent is
        // not one of them.
        let deadline = Instant::now() + Duration::from_secs(20);
        let zygote = loop {
            let table = processes();
            let forked = processes_with(&["ptc_zygote.py", &rt_text]);
            let servers: Vec<i32> = forked
                .iter()
                .copied()
                .filter(|pid| table.get(pid).is_some_and(|p| !forked.contains(&p.ppid)))
                .collect();
            if let [pid] = servers[..] {
                break pid;
            }
            assert!(Instant::now() < deadline, "no fork server started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let sdk_dirs = |rt: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(rt)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("sdk-"))
                .collect()
        };
        let [sdk] = &sdk_dirs(&rt)[..] else {
            panic!("expected one SDK directory in {rt_text}");
        };
        let mut planted = std::fs::read_to_string(sdk.join("ptc_sdk.py")).unwrap();
        planted.push_str("\nprint('PLANTED')\n");
        std::fs::write(sdk.join("ptc_sdk.py"), planted).unwrap();
        // SAFETY: kill(2) of the fork server this test found; no memory is involved.
        assert_eq!(unsafe { libc::kill(zygote, libc::SIGKILL) }, 0);

        // Runs go on: one may fail while the changed directory is replaced, none runs the
        // planted line, and they come back to normal.
        let mut results = Vec::new();
        for i in 0..6 {
            let r = runner.exec(request(&format!("print({i})"), None)).await;
            assert!(!r.stdout.contains("PLANTED"), "{r:?}");
            results.push(r);
        }
        let last = results.last().unwrap();
        assert_ok(last, "5\n");
        let [fresh] = &sdk_dirs(&rt)[..] else {
            panic!("expected one SDK directory in {rt_text}");
        };
        let sdk_text = std::fs::read_to_string(fresh.join("ptc_sdk.py")).unwrap();
        assert!(
            !sdk_text.contains("PLANTED"),
            "the changed SDK is still there"
        );
        shutdown.cancel();
    })
    .await
    .unwrap();
}

/// With subprocesses allowed, a cold run whose caller goes away (its future dropped) leaves
/// nothing behind: its own fork server, told to go, kills the run's `setsid` process too.
#[tokio::test]
async fn a_cancelled_cold_run_leaves_no_detached_process() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("runner-cancelled");
        let python = resolve_python("python3").await.unwrap();
        let mut cfg = config(python, dir.0.join("rt"));
        cfg.allow_subprocess = true;
        let (runner, _tx, shutdown) = start(cfg, snapshot("alpha")).await;
        // A sleep no other test starts, so that it can be found by its command line.
        let marker = format!("61.{}", std::process::id() % 1000);
        let code = format!(
            "import subprocess, time\n\
             subprocess.Popen(['sleep', '{marker}'], start_new_session=True,\n\
             \x20   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)\n\
             time.sleep(60)\n"
        );
        let run = {
            let runner = runner.clone();
            tokio::spawn(async move { runner.exec(request(&code, None)).await })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let detached = loop {
            if let [pid] = processes_with(&["sleep", &marker])[..] {
                break pid;
            }
            assert!(!run.is_finished(), "the run ended: {:?}", run.await);
            assert!(
                Instant::now() < deadline,
                "the detached sleep never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        run.abort();
        let _ = run.await;
        assert!(
            wait_dead(&[detached]).await.is_empty(),
            "the run's detached sleep {detached} outlived the cancelled run"
        );
        shutdown.cancel();
    })
    .await
    .unwrap();
}
