//! A run of an attack script: its code (`ARGS`, the prelude and the script, in Python or bash),
//! the run followed through its checkpoints (where the harness looks at its processes from
//! outside), its output read as attempts and outcomes, and what every attack must leave: no
//! secret in its output, no process of it alive, no file changed outside its scratch dir.

use super::seen::Seen;
use super::stage::StageInner;
use super::{Failure, Verdict, attack, broken};
use crate::procs::SETTLE;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long a victim may take to park (a cold start, a thread flood).
const VICTIM_PARK_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the harness looks for a new park.
const PARK_POLL: Duration = Duration::from_millis(10);

fn escape_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/escape")
}

fn read_script(name: &str) -> String {
    std::fs::read_to_string(escape_dir().join(name))
        .unwrap_or_else(|e| panic!("tests/escape/{name}: {e}"))
}

/// The Python of a script: `ARGS`, the prelude, with `await checkpoint()` after it when
/// `checkpoint` (a Python run: the harness sees the run's process before the script does
/// anything; python3 in a bash run has no SDK to call `park` with), the script.
fn python_source(script: &str, args: &Value, checkpoint: bool) -> String {
    // A JSON string literal is a Python string literal too.
    let literal = serde_json::to_string(&args.to_string()).unwrap();
    format!(
        "import json\nARGS = json.loads({literal})\n{}\n{}{}",
        read_script("_prelude.py"),
        if checkpoint {
            "await checkpoint()\n"
        } else {
            ""
        },
        read_script(script)
    )
}

/// The code of a Python run of `script`.
pub fn script_code(script: &str, args: &Value) -> String {
    python_source(script, args, true)
}

/// `ARGS` as bash variables (`ARG_name='value'`, strings and numbers; lists space-separated).
fn bash_args(args: &Value) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\'', r"'\''"));
    let scalar = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = String::new();
    for (k, v) in args.as_object().into_iter().flatten() {
        let text = match v {
            Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(" "),
            other => scalar(other),
        };
        out.push_str(&format!("ARG_{k}={}\n", quote(&text)));
    }
    out
}

/// The code of a bash run: `ARGS` as variables, the bash prelude (with the first checkpoint),
/// the script.
pub fn bash_code(script: &str, args: &Value) -> String {
    format!(
        "{}{}\n{}",
        bash_args(args),
        read_script("_prelude.sh"),
        read_script(script)
    )
}

/// The code of a bash run that runs a Python script with the system's `python3` (no SDK, no
/// audit hook, no seccomp program against processes: a bash run's sandbox).
pub fn python_in_bash(script: &str, args: &Value) -> String {
    format!(
        "{}{}\npython3 - <<'PTC_ESCAPE_PY'\n{}\nPTC_ESCAPE_PY\n",
        bash_args(args),
        read_script("_prelude.sh"),
        python_source(script, args, false)
    )
}

/// A run in flight, followed through its parks.
pub struct InFlight {
    task: JoinHandle<Result<Value, String>>,
    pub seen: Seen,
    /// Our pid of the run's first process (its PID 1), once the harness has seen it.
    pub outer: Option<i32>,
    /// The park the run waits in as a victim, once it does.
    victim_park: Option<usize>,
}

/// A finished run of a script, with its prelude lines parsed.
#[derive(Debug)]
pub struct Run {
    pub result: Value,
    pub stdout: String,
    pub stderr: String,
    /// The script's directory (its first `SCRATCH` line).
    pub scratch: Option<String>,
    /// The pids the script printed as `SPAWNED` (its own PID namespace's: counted, never
    /// looked up).
    pub spawned: Vec<i32>,
    /// `(what was attempted, its outcome line)`, in order; the outcome is empty when the
    /// script stopped before printing one.
    pub attempts: Vec<(String, String)>,
    /// What the harness saw of the run's processes.
    pub seen: Seen,
    /// Our pid of the run's first process (its PID 1), once the harness has seen it.
    pub outer: Option<i32>,
}

impl StageInner {
    /// Starts a run of `body` (`POST /v1/exec_code`).
    pub fn start_run(self: &Arc<Self>, body: Value) -> InFlight {
        let stage = self.clone();
        InFlight {
            task: tokio::spawn(async move { stage.exec_body(body).await }),
            seen: Seen::default(),
            outer: None,
            victim_park: None,
        }
    }

    /// Follows `run` through its parks until it ends, or, with `until_victim`, until it parks
    /// as a victim: at each park the harness looks at the run's processes, then releases it (a
    /// victim stays parked until [`StageInner::finish`]).
    pub async fn follow(&self, run: &mut InFlight, until_victim: bool) -> Result<(), Failure> {
        let deadline = Instant::now() + VICTIM_PARK_TIMEOUT;
        loop {
            while let Some((index, inner, dir, role)) = self.parks.claim(run.seen.dir.as_deref()) {
                let now = run.seen.look(&dir);
                for pid in now.values() {
                    self.track(*pid);
                }
                // The run's first process: PID 1 of its own namespace, else the one that parked.
                if run.outer.is_none() {
                    run.outer = now.get(&1).or(now.get(&inner)).copied();
                }
                if role == "victim" {
                    run.victim_park = Some(index);
                    if until_victim {
                        return match run.outer {
                            Some(_) => Ok(()),
                            None => Err(broken(format!(
                                "the victim parked but none of its processes was found in {dir}"
                            ))),
                        };
                    }
                }
                self.parks.release(index);
            }
            if run.task.is_finished() {
                return match until_victim {
                    true => Err(broken("the victim ended before parking")),
                    false => Ok(()),
                };
            }
            if until_victim && Instant::now() > deadline {
                return Err(broken("the victim never parked"));
            }
            tokio::time::sleep(PARK_POLL).await;
        }
    }

    /// Lets `run` go on to its end (a victim leaves its park) and reads its result.
    pub async fn finish(&self, mut run: InFlight) -> Result<Run, Failure> {
        if let Some(index) = run.victim_park.take() {
            self.parks.release(index);
        }
        self.follow(&mut run, false).await?;
        let result = run
            .task
            .await
            .map_err(|e| broken(e.to_string()))?
            .map_err(|e| {
                attack(format!(
                    "the sidecar stopped answering: {e}\n{}",
                    self.log_tail()
                ))
            })?;
        Ok(Run::parse(result, run.seen, run.outer))
    }

    /// Runs an attack script with its facts in `ARGS`, and checks what every attack must
    /// leave: no secret in its output, no process of it alive afterwards, no file outside its
    /// scratch dir.
    pub async fn attack(self: &Arc<Self>, script: &str, args: Value) -> Result<Run, Failure> {
        self.attack_body(json!({"code": script_code(script, &args)}))
            .await
    }

    /// [`StageInner::attack`] for a bash script.
    pub async fn attack_bash(self: &Arc<Self>, script: &str, args: Value) -> Result<Run, Failure> {
        self.attack_body(json!({"code": bash_code(script, &args), "lang": "bash"}))
            .await
    }

    /// [`StageInner::attack`] for a Python script run by `python3` in a bash run.
    pub async fn attack_python_in_bash(
        self: &Arc<Self>,
        script: &str,
        args: Value,
    ) -> Result<Run, Failure> {
        self.attack_body(json!({"code": python_in_bash(script, &args), "lang": "bash"}))
            .await
    }

    /// [`StageInner::attack`] in the session `id`, whose folder `dir` is the run's cwd (its
    /// output names it `/mnt/data`): what the run changes there is its own, as in its scratch
    /// dir, and judged by the test.
    pub async fn attack_in_session(
        self: &Arc<Self>,
        script: &str,
        args: Value,
        id: &str,
        dir: &Path,
    ) -> Result<Run, Failure> {
        let body = json!({"code": script_code(script, &args), "session_id": id});
        self.attack_body_in_session(body, dir).await
    }

    /// [`StageInner::attack_in_session`] of a whole request `body` (its `session_id` the
    /// session whose folder is `dir`).
    pub async fn attack_body_in_session(
        self: &Arc<Self>,
        body: Value,
        dir: &Path,
    ) -> Result<Run, Failure> {
        let before = files(&self.dir.0);
        let run = self.start_run(body);
        let mut run = self.finish(run).await?;
        self.check_leaks(&run)?;
        run.scratch = Some(dir.display().to_string());
        self.check_nothing_left(&run, &before).await?;
        Ok(run)
    }

    /// Runs `body`, following its checkpoints, and checks what it leaves.
    pub async fn attack_body(self: &Arc<Self>, body: Value) -> Result<Run, Failure> {
        let before = files(&self.dir.0);
        let run = self.start_run(body);
        let run = self.finish(run).await?;
        self.check_leaks(&run)?;
        self.check_nothing_left(&run, &before).await?;
        Ok(run)
    }

    /// No secret in the run's output.
    fn check_leaks(&self, run: &Run) -> Verdict {
        if let Some(name) = self
            .secrets
            .leaked_in(&format!("{}{}", run.stdout, run.stderr))
        {
            return Err(attack(format!(
                "{name} leaked into the run's output:\n{}",
                run.stdout
            )));
        }
        Ok(())
    }

    /// Nothing of the run alive (every process the harness saw, and its PID namespace), no
    /// file changed outside its scratch dir.
    pub async fn check_nothing_left(
        &self,
        run: &Run,
        before: &BTreeMap<PathBuf, (u64, i128)>,
    ) -> Verdict {
        if run.seen.procs.is_empty() {
            return Err(broken(format!(
                "the harness never saw the run's processes (no checkpoint reached): {}\n{}",
                run.result, run.stderr
            )));
        }
        let left = run.seen.survivors_after(SETTLE).await;
        if !left.is_empty() {
            return Err(attack(format!(
                "processes of the run outlived it: {left:?}"
            )));
        }
        let after = files(&self.dir.0);
        let scratch = run.scratch.as_deref().map(Path::new);
        // What the sidecar saved for the run (its result's `files`: `save_file`, the whole of a
        // cut stream) is the sidecar's writing, in its artifact store: a folder the file's URL
        // names, and that folder's `.owner`.
        let urls: Vec<&str> = run.result["files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["url"].as_str())
            .collect();
        let artifacts = self.dir.0.join("runtime/artifacts");
        let saved_for_run = |path: &Path| {
            let Some(first) = path
                .strip_prefix(&artifacts)
                .ok()
                .and_then(|rest| rest.components().next())
            else {
                return false;
            };
            let folder = first.as_os_str().to_string_lossy();
            let folder = folder.trim_end_matches(".owner");
            !folder.is_empty() && urls.iter().any(|u| u.contains(&format!("/{folder}/")))
        };
        let changed: Vec<String> = after
            .iter()
            .filter(|(path, meta)| before.get(*path) != Some(meta))
            .map(|(path, _)| path)
            .chain(before.keys().filter(|p| !after.contains_key(*p)))
            .filter(|path| !scratch.is_some_and(|s| path.starts_with(s)))
            .filter(|path| !saved_for_run(path))
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

    /// Starts `script` (a Python victim: it parks as `victim`) as a run in flight with its
    /// facts in `ARGS`, and returns once it waits in its park, its processes seen.
    pub async fn start_victim(
        self: &Arc<Self>,
        script: &str,
        args: Value,
    ) -> Result<InFlight, Failure> {
        self.start_victim_body(json!({"code": script_code(script, &args)}))
            .await
    }

    /// [`StageInner::start_victim`] for a bash victim.
    pub async fn start_bash_victim(
        self: &Arc<Self>,
        script: &str,
        args: Value,
    ) -> Result<InFlight, Failure> {
        self.start_victim_body(json!({"code": bash_code(script, &args), "lang": "bash"}))
            .await
    }

    /// [`StageInner::start_victim`] of a whole request `body` (a JavaScript victim's).
    pub async fn start_victim_body(self: &Arc<Self>, body: Value) -> Result<InFlight, Failure> {
        let mut run = self.start_run(body);
        self.follow(&mut run, true).await?;
        Ok(run)
    }

    /// Starts a run of `body` that parks as a victim unless it ends first: the run in flight,
    /// and whether it parked (else it has ended, and [`StageInner::finish`] reads it).
    pub async fn start_victim_or_end(
        self: &Arc<Self>,
        body: Value,
    ) -> Result<(InFlight, bool), Failure> {
        let mut run = self.start_run(body);
        match self.follow(&mut run, true).await {
            Ok(()) => Ok((run, true)),
            Err(_) if run.task.is_finished() => Ok((run, false)),
            Err(e) => Err(e),
        }
    }

    /// Releases the parked victim, returns its result, and checks nothing of it outlived it.
    pub async fn finish_victim(&self, victim: InFlight) -> Result<Run, Failure> {
        let run = self.finish(victim).await.map_err(|e| match e {
            Failure::Attack(m) => attack(format!("the victim's run failed: {m}")),
            other => other,
        })?;
        let left = run.seen.survivors_after(SETTLE).await;
        if !left.is_empty() {
            return Err(attack(format!("the victim outlived its run: {left:?}")));
        }
        Ok(run)
    }
}

impl Run {
    fn parse(result: Value, seen: Seen, outer: Option<i32>) -> Run {
        let stdout = result["stdout"].as_str().unwrap_or_default().to_string();
        let stderr = result["stderr"].as_str().unwrap_or_default().to_string();
        let mut run = Run {
            result,
            stdout: stdout.clone(),
            stderr,
            scratch: None,
            spawned: Vec::new(),
            attempts: Vec::new(),
            seen,
            outer,
        };
        let mut open: Option<usize> = None;
        for line in stdout.lines() {
            if let Some(s) = line.strip_prefix("SCRATCH ") {
                run.scratch.get_or_insert_with(|| s.trim().to_string());
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

    pub fn status(&self) -> &str {
        self.result["status"].as_str().unwrap_or_default()
    }

    /// The script ran to its end and made `n` attempts, every one refused.
    pub fn all_refused(&self, n: usize) -> Verdict {
        self.ran_to_the_end()?;
        if self.attempts.len() != n {
            return Err(broken(format!(
                "expected {n} attempts, saw {}:\n{}\nstderr: {}",
                self.attempts.len(),
                self.stdout,
                self.stderr
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

    pub fn ran_to_the_end(&self) -> Verdict {
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

    /// The value of the script's `NAME value` line, if it printed one.
    pub fn said(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name} ");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
    }
}

/// Every regular file under `dir` (redis's own dir aside), with its size and mtime.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, (u64, i128)> {
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
