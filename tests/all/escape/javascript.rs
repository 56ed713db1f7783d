//! The attacks in JavaScript (`lang: "javascript"`): the same walls must hold for node as for
//! Python and bash, as root and as the unprivileged sidecar. Each script of `tests/escape/*.mjs`
//! runs after `const ARGS = {...}`, the JavaScript prelude (`_prelude.mjs`: `attempt`,
//! `checkpoint`) and a first checkpoint, as one ES module.

use super::metadata::{meta, sdk_dir};
use super::other_runs::start_session;
use super::reach::Listeners;
use super::script::Run;
use super::stage::StageInner;
use super::{Opts, Verdict, against_both, attack, broken};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) fn escape_script(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/escape")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The code of a JavaScript run of `script`. A script's own `import`s go first: an ES module
/// takes them anywhere, and they are hoisted all the same.
pub(super) fn js_code(script: &str, args: &Value) -> String {
    format!(
        "const ARGS = {args};\n{}\nawait checkpoint();\n{}",
        escape_script("_prelude.mjs"),
        escape_script(script)
    )
}

pub(super) async fn attack_js(
    s: &Arc<StageInner>,
    script: &str,
    args: Value,
) -> Result<Run, super::Failure> {
    s.attack_body(json!({"code": js_code(script, &args), "lang": "javascript"}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_any_other_address_from_javascript_is_refused() {
    against_both(
        "javascript_reach_anywhere",
        Opts::default(),
        |s| async move {
            let listeners = Listeners::open(&s, "escape-js.sock");
            let run = attack_js(&s, "reach_anywhere.mjs", listeners.args(&s.mark)).await;
            listeners.nothing_arrived()?;
            let run = run?;
            if run.status() != "ok" {
                return Err(broken(format!("{}\n{}", run.stdout, run.stderr)));
            }
            run.all_refused(5)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_outside_scratch_are_out_of_reach_of_javascript() {
    against_both(
        "javascript_outside_scratch",
        Opts::default(),
        |s| async move {
            let args = json!({"tmp_target": s.tmp_target, "open_dir": s.open_dir, "mark": s.mark,
                          "runtime_dir": s.dir.0.join("runtime"), "sidecar_pid": s.pid});
            let run = attack_js(&s, "persist_outside_scratch.mjs", args).await?;
            let verdict: Verdict = match run.stdout.contains("SCRATCH_WRITE fine") {
                true => Ok(()),
                false => Err(broken(format!("writing in scratch failed: {}", run.stdout))),
            };
            verdict?;
            run.all_refused(6)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_cannot_touch_files_but_its_own() {
    against_both("js_files", Opts::default(), |s| async move {
        let (_, session_dir) = start_session(&s, "js-victim").await?;
        let worker = s
            .warm_workers()
            .into_iter()
            .filter_map(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).ok())
            .next()
            .ok_or_else(|| broken("no warm worker is waiting"))?;
        let sdk = sdk_dir(&s).ok_or_else(|| broken("no fork server, so no SDK folder"))?;
        let runtime = s.dir.0.join("runtime");
        let folders: Vec<(&str, PathBuf)> = vec![
            ("a waiting warm worker's scratch folder", worker),
            ("a session's folder", PathBuf::from(&session_dir)),
        ];
        let readable: Vec<(&str, PathBuf)> = vec![("the SDK", sdk), ("the runtime dir", runtime)];
        let all: Vec<PathBuf> = folders
            .iter()
            .chain(&readable)
            .map(|(_, p)| p.clone())
            .collect();
        let before: Vec<_> = all.iter().map(|p| meta(p)).collect();
        if before.iter().any(Option::is_none) {
            return Err(broken(format!("a target is missing: {all:?}")));
        }
        let outside = vec![s.open_dir.clone(), PathBuf::from("/tmp")];
        let run = attack_js(
            &s,
            "js_files.mjs",
            json!({"folders": folders, "readable": readable,
                   "secret_files": [s.tools_file, s.mcp_config],
                   "outside_dirs": outside, "mark": s.mark}),
        )
        .await?;
        for (i, path) in all.iter().enumerate() {
            // The warm worker may have been the run itself (its folder is gone with it).
            if i == 0 && !path.exists() {
                continue;
            }
            let after = meta(path);
            if after != before[i] {
                return Err(attack(format!(
                    "{} changed: {:?} -> {after:?}",
                    path.display(),
                    before[i]
                )));
            }
        }
        for dir in &outside {
            if dir.join(format!("{}.js", s.mark)).exists() {
                return Err(attack(format!("a file was written in {}", dir.display())));
            }
        }
        if !run.stdout.contains("SCRATCH_WRITE fine") {
            return Err(broken(format!("writing in scratch failed: {}", run.stdout)));
        }
        // Per folder: list, write, chmod, utimes, chown, fchmod; per readable folder the five
        // changes; each secret file; each outside folder.
        run.all_refused(2 * 6 + 2 * 5 + 2 + 2)?;
        s.check_a_run_works("after the JavaScript file attacks")
            .await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_starts_no_program_signals_nothing_and_loads_no_native_code() {
    against_both("js_processes", Opts::default(), |s| async move {
        let mcp = s.mcp_pid().ok_or_else(|| broken("no MCP server process"))?;
        let server = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        // A shared library every run may read (the system's), copied into scratch by the run.
        let library = [
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/lib/aarch64-linux-gnu/libm.so.6",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or_else(|| broken("no libm.so.6 to copy"))?;
        let run = attack_js(
            &s,
            "js_processes.mjs",
            json!({"sidecar_pid": s.pid, "fork_server_pid": server, "mcp_pid": mcp,
                   "library": library}),
        )
        .await?;
        if !s.alive() {
            return Err(attack("the sidecar was killed"));
        }
        for (what, pid) in [("the fork server", server), ("the MCP server", mcp)] {
            if !crate::procs::is_alive(pid) {
                return Err(attack(format!("{what} {pid} was killed")));
            }
        }
        if !run.stdout.contains("ENV {") {
            return Err(broken(format!(
                "the run printed no environment: {}",
                run.stdout
            )));
        }
        run.all_refused(2 + 3 + 1 + 1)
    })
    .await;
}
