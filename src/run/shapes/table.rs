//! The table of learned shapes: one agent's (`PTC_AGENT_ID`), by the tool's dispatched name,
//! kept in `PTC_STATE_DIR/shapes.json` when that is set, and nothing at all with
//! `PTC_LEARN_SHAPES=false`.
//!
//! The file holds every agent's table, `{"version": 2, "agents": {agent: {tool: learned}}}`,
//! so sidecars of several agents may share a state directory without one agent's runs
//! choosing what another's read: a sidecar reads its own agent's table and, when it writes,
//! replaces only that (under a lock, so two sidecars never drop each other's). A file of format 1
//! (one table for every agent, learned before the echo rule) is not used: it is logged and
//! replaced at the first write. Learned shapes are a help, never a reason not to start: a file
//! that cannot be used is logged, never an error.

use super::Shape;
use super::echo::{ChosenWords, Echo};
use crate::util::lock;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Tools whose shapes are kept: a catalog that keeps changing must not grow the table forever.
pub const MAX_TOOLS: usize = 10_000;
/// The file in `PTC_STATE_DIR`.
pub const FILE_NAME: &str = "shapes.json";
/// The file's format. 1 was one table for every agent (before the echo rule); 2 is a table
/// per agent. A sidecar never writes over a format newer than its own.
pub const FILE_VERSION: u64 = 2;

/// What a sidecar learns, and for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapesConfig {
    /// `PTC_LEARN_SHAPES`: off, nothing is recorded, kept or shown.
    pub learn: bool,
    /// `PTC_AGENT_ID`: whose table this sidecar reads and writes.
    pub agent: String,
    /// `PTC_STATE_DIR`: where the file is; `None`: in memory only.
    pub state_dir: Option<PathBuf>,
}

/// What is known of one tool's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    pub shape: Shape,
    /// Successful calls it was learned from.
    pub calls: u64,
}

/// The shared table of learned shapes of this sidecar's agent.
#[derive(Clone)]
pub struct Shapes {
    inner: Arc<Inner>,
}

struct Inner {
    /// `PTC_LEARN_SHAPES`.
    learn: bool,
    agent: String,
    table: Mutex<BTreeMap<String, Learned>>,
    /// `PTC_STATE_DIR/shapes.json`; `None`: in memory only (or a file that must not be
    /// written over).
    file: Option<PathBuf>,
    /// One write at a time, each of the table as it is then: the last write is the newest.
    writing: Mutex<()>,
}

impl Shapes {
    /// The table `cfg` says: its agent's shapes read from the file when there is one.
    pub fn load(cfg: ShapesConfig) -> Shapes {
        let mut file = cfg
            .state_dir
            .filter(|_| cfg.learn)
            .map(|d| d.join(FILE_NAME));
        let mut table = BTreeMap::new();
        if let Some(path) = &file {
            match read(path) {
                Stored::Nothing => {}
                Stored::Agents(mut agents) => match agents.remove(&cfg.agent) {
                    None => {}
                    Some(ours) => match serde_json::from_value(ours) {
                        Ok(ours) => table = ours,
                        Err(e) => tracing::warn!(
                            "{}: the shapes of agent {} are not a table ({e}); starting empty",
                            path.display(),
                            cfg.agent
                        ),
                    },
                },
                Stored::Unused { why, overwrite } => {
                    let then = if overwrite {
                        "replaced at the first shape learned"
                    } else {
                        "left as it is; what is learned stays in memory"
                    };
                    tracing::warn!("{}: {why}: not used, {then}", path.display());
                    if !overwrite {
                        file = None;
                    }
                }
            }
        }
        Shapes {
            inner: Arc::new(Inner {
                learn: cfg.learn,
                agent: cfg.agent,
                table: Mutex::new(table),
                file,
                writing: Mutex::new(()),
            }),
        }
    }

    /// Whether calls teach shapes at all (`PTC_LEARN_SHAPES`).
    pub fn learning(&self) -> bool {
        self.inner.learn
    }

    /// What is known of a tool's results.
    pub fn get(&self, tool: &str) -> Option<Learned> {
        lock(&self.inner.table).get(tool).cloned()
    }

    /// Learns from one result of `tool`, unless it echoes the words its call `chose`. Returns
    /// whether the shape changed (and so whether the file needs writing).
    pub fn record(&self, tool: &str, chose: &ChosenWords, value: &Value) -> bool {
        if !self.inner.learn {
            return false;
        }
        let shape = match lesson(value, chose) {
            Ok(shape) => shape,
            Err(echo) => {
                tracing::debug!(tool, ?echo, "a result echoing its call: not learned");
                return false;
            }
        };
        let mut table = lock(&self.inner.table);
        let room = table.len() < MAX_TOOLS;
        match table.get_mut(tool) {
            Some(learned) => {
                learned.calls += 1;
                let merged = learned
                    .shape
                    .clone()
                    .merge(shape)
                    .limit(&mut { super::MAX_NODES });
                let changed = merged != learned.shape;
                learned.shape = merged;
                changed
            }
            None if room => {
                table.insert(tool.to_string(), Learned { shape, calls: 1 });
                true
            }
            None => false,
        }
    }

    /// Writes this agent's table into its file (blocking: call it off the async workers):
    /// under the file's lock, the file read again, this agent's table replaced, the whole
    /// written to a temporary file renamed over the old one, so a reader never sees half a
    /// file and another agent's table is kept as it was.
    pub fn save(&self) {
        let Some(path) = &self.inner.file else {
            return;
        };
        let _one_at_a_time = lock(&self.inner.writing);
        if let Err(e) = path.parent().map_or(Ok(()), std::fs::create_dir_all) {
            tracing::warn!("cannot write {}: {e}", path.display());
            return;
        }
        let _across_sidecars = match FileLock::take(path) {
            Ok(held) => Some(held),
            Err(e) => {
                tracing::warn!("cannot lock {}: {e}; writing without", path.display());
                None
            }
        };
        let mut agents = match read(path) {
            Stored::Nothing
            | Stored::Unused {
                overwrite: true, ..
            } => Map::new(),
            Stored::Agents(agents) => agents,
            Stored::Unused { why, .. } => {
                tracing::warn!(
                    "{}: {why}: the shapes learned are not written",
                    path.display()
                );
                return;
            }
        };
        let ours = match serde_json::to_value(&*lock(&self.inner.table)) {
            Ok(ours) => ours,
            Err(e) => {
                tracing::warn!("cannot serialise the learned shapes: {e}");
                return;
            }
        };
        agents.insert(self.inner.agent.clone(), ours);
        let whole = json!({"version": FILE_VERSION, "agents": agents});
        // Of this process: two sidecars never write one temporary file.
        let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let written =
            std::fs::write(&temp, whole.to_string()).and_then(|()| std::fs::rename(&temp, path));
        if let Err(e) = written {
            tracing::warn!("cannot write {}: {e}", path.display());
        }
    }
}

/// The shape one result teaches, or why it teaches nothing: it records a key its call chose.
pub fn lesson(value: &Value, chose: &ChosenWords) -> Result<Shape, Echo> {
    let shape = Shape::of(value);
    match chose.echoed_in(&shape) {
        Some(echo) => Err(echo),
        None => Ok(shape),
    }
}

/// What a shapes file holds.
enum Stored {
    /// There is no file yet.
    Nothing,
    /// Every agent's table, as JSON (another agent's is kept as it is).
    Agents(Map<String, Value>),
    /// A file this version does not use: why, and whether it may be written over.
    Unused { why: String, overwrite: bool },
}

fn read(path: &Path) -> Stored {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Stored::Nothing,
        // Written over, it would lose every agent's shapes for a passing fault.
        Err(e) => {
            return Stored::Unused {
                why: format!("cannot be read ({e})"),
                overwrite: false,
            };
        }
    };
    let not_shapes = |why: String| Stored::Unused {
        why,
        overwrite: true,
    };
    let mut whole = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(whole)) => whole,
        Ok(_) => return not_shapes("not a shapes file (not an object)".into()),
        Err(e) => return not_shapes(format!("not a shapes file ({e})")),
    };
    match whole.get("version").map(Value::as_u64) {
        Some(Some(FILE_VERSION)) => match whole.remove("agents") {
            Some(Value::Object(agents)) => Stored::Agents(agents),
            _ => not_shapes("not a shapes file (no agents)".into()),
        },
        Some(Some(newer)) if newer > FILE_VERSION => Stored::Unused {
            why: format!("written by a newer sidecar (format {newer})"),
            overwrite: false,
        },
        // Format 1 had no version: a tool of that name would have held an object.
        None | Some(None) => not_shapes(
            "shapes learned before they were kept per agent and checked for echoes (format 1)"
                .into(),
        ),
        Some(Some(older)) => not_shapes(format!("an unknown format ({older})")),
    }
}

/// `flock(LOCK_EX)` on the lock file beside the shapes file while it lives: two sidecars
/// sharing the file never interleave a read and a write (each would drop the other's newest
/// shapes).
struct FileLock {
    _held: std::fs::File,
}

impl FileLock {
    fn take(path: &Path) -> std::io::Result<FileLock> {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path.with_extension("json.lock"))?;
        // SAFETY: flock on a descriptor this File owns and keeps open; no memory is passed.
        // The lock goes with the descriptor when the File is dropped.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock { _held: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn config(agent: &str, dir: &Path) -> ShapesConfig {
        ShapesConfig {
            learn: true,
            agent: agent.into(),
            state_dir: Some(dir.to_path_buf()),
        }
    }

    fn words(args: Value) -> ChosenWords {
        ChosenWords::of(&args, &json!({}))
    }

    fn shown(shapes: &Shapes, tool: &str) -> Option<(String, u64)> {
        shapes.get(tool).map(|l| (l.shape.show(), l.calls))
    }

    fn temp_dir() -> PathBuf {
        std::env::temp_dir().join(format!("ptc-shapes-{}", crate::run::new_token()))
    }

    #[test]
    fn the_table_survives_a_restart() {
        let dir = temp_dir();
        let none = words(json!({}));
        let shapes = Shapes::load(config("a", &dir));
        assert!(shapes.record("t", &none, &json!({"a": 1})));
        assert!(!shapes.record("t", &none, &json!({"a": 2})));
        assert!(shapes.record("t", &none, &json!({"a": 2, "b": "x"})));
        shapes.save();
        let again = Shapes::load(config("a", &dir));
        assert_eq!(shown(&again, "t"), Some(("{a: int, b?: str}".into(), 3)));
        std::fs::write(dir.join(FILE_NAME), "not json").unwrap();
        assert_eq!(Shapes::load(config("a", &dir)).get("t"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn agents_sharing_a_file_keep_their_own_tables() {
        let dir = temp_dir();
        let none = words(json!({}));
        let a = Shapes::load(config("agent-a", &dir));
        let b = Shapes::load(config("agent-b", &dir));
        a.record("t", &none, &json!({"from_a": 1}));
        a.save();
        b.record("t", &none, &json!({"from_b": 1}));
        b.save();
        // b's write kept a's table; neither sees the other's.
        assert_eq!(
            shown(&Shapes::load(config("agent-a", &dir)), "t"),
            Some(("{from_a: int}".into(), 1))
        );
        assert_eq!(
            shown(&Shapes::load(config("agent-b", &dir)), "t"),
            Some(("{from_b: int}".into(), 1))
        );
        assert_eq!(Shapes::load(config("agent-c", &dir)).get("t"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_old_file_is_not_used_and_a_newer_one_not_written_over() {
        let dir = temp_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(FILE_NAME);
        let none = words(json!({}));
        // Format 1: one table for every agent, maybe taught by an echo.
        let old = json!({"t": {"shape": {"kind": "int"}, "calls": 4}}).to_string();
        std::fs::write(&file, &old).unwrap();
        let shapes = Shapes::load(config("a", &dir));
        assert_eq!(shapes.get("t"), None);
        shapes.record("u", &none, &json!(1));
        shapes.save();
        let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            written,
            json!({"version": 2, "agents": {"a": {"u": {"shape": {"kind": "int"}, "calls": 1}}}})
        );
        // A newer format: read by nobody here, and left as it is.
        let newer = json!({"version": 3, "tables": []}).to_string();
        std::fs::write(&file, &newer).unwrap();
        let shapes = Shapes::load(config("a", &dir));
        shapes.record("u", &none, &json!(1));
        shapes.save();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), newer);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn learning_off_records_keeps_and_shows_nothing() {
        let dir = temp_dir();
        let none = words(json!({}));
        let on = Shapes::load(config("a", &dir));
        on.record("t", &none, &json!({"a": 1}));
        on.save();
        let off = Shapes::load(ShapesConfig {
            learn: false,
            ..config("a", &dir)
        });
        assert!(!off.learning());
        assert_eq!(off.get("t"), None, "what the file holds is not shown");
        assert!(!off.record("u", &none, &json!({"b": 1})));
        assert_eq!(off.get("u"), None);
        off.save();
        assert_eq!(shown(&Shapes::load(config("a", &dir)), "u"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_echoing_call_teaches_nothing_and_others_still_do() {
        let shapes = Shapes::load(ShapesConfig {
            learn: true,
            agent: "a".into(),
            state_dir: None,
        });
        let sent = words(json!({"tell_the_model_to_x": 1}));
        assert!(!shapes.record("echo", &sent, &json!({"tell_the_model_to_x": 1})));
        assert_eq!(shapes.get("echo"), None);
        assert!(shapes.record("echo", &words(json!({"q": "y"})), &json!({"said": "y"})));
        assert_eq!(shown(&shapes, "echo"), Some(("{said: str}".into(), 1)));
        assert_eq!(
            lesson(&json!([{"tell_the_model_to_x": 1}]), &sent),
            Err(Echo::Key("tell_the_model_to_x".into()))
        );
    }
}
