//! The SDK a run loads: the Python files of `sdk-template/`, embedded in the binary, written
//! with the catalog's `catalog.json` into one directory per catalog version.
//!
//! Rust only fills in the catalog; everything the child does is in the Python files.

use crate::catalog::Catalog;
use crate::render::Snapshot;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// `ptc_sandbox.py`, which the sandbox's startup probe also runs (`confine::setup`).
pub const SANDBOX_PY: &str = include_str!("../../sdk-template/ptc_sandbox.py");

/// The SDK's files, as shipped in this binary.
const FILES: &[(&str, &str)] = &[
    (
        "ptc_bootstrap.py",
        include_str!("../../sdk-template/ptc_bootstrap.py"),
    ),
    ("ptc_sdk.py", include_str!("../../sdk-template/ptc_sdk.py")),
    ("ptc_sandbox.py", SANDBOX_PY),
    (
        "ptc_guard.py",
        include_str!("../../sdk-template/ptc_guard.py"),
    ),
    (
        "ptc_zygote.py",
        include_str!("../../sdk-template/ptc_zygote.py"),
    ),
];

/// What `catalog.json` holds: the tools code may call, with everything the stubs need.
fn catalog_json(snapshot: &Snapshot) -> Value {
    let catalog: &Catalog = &snapshot.catalog;
    let tools: Vec<Value> = catalog
        .ptc()
        .map(|t| {
            json!({
                "name": t.name,
                "python_name": t.python_name,
                "signature": snapshot.rendered.line(&t.name).unwrap_or_default(),
                "description": t.description,
                "input_schema": t.input_schema,
                "output_schema": t.output_schema,
            })
        })
        .collect();
    json!({"version": catalog.version, "tools": tools})
}

/// Writes the SDK for a snapshot under `root` and returns its directory. Idempotent: the
/// directory is named by version and content, and written through a temporary name then
/// renamed, so a child never sees half a directory. Blocking (file writes and a compile of
/// ~100 ms): call it off the async workers.
pub fn write(root: &Path, snapshot: &Snapshot, python: &Path) -> std::io::Result<PathBuf> {
    let name = format!(
        "sdk-v{}-{:016x}",
        snapshot.catalog.version, snapshot.catalog.fingerprint
    );
    let dir = root.join(&name);
    if dir.join("catalog.json").exists() {
        return Ok(dir);
    }
    // Unique per call: a writer whose run went away may still be writing when the next one
    // starts, and each must own its temporary directory.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let tmp = root.join(format!(
        ".{name}.{}.{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    for (file, text) in FILES {
        std::fs::write(tmp.join(file), text)?;
    }
    let mut f = std::fs::File::create(tmp.join("catalog.json"))?;
    f.write_all(catalog_json(snapshot).to_string().as_bytes())?;
    f.sync_all()?;
    precompile(python, &tmp);
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another writer won the race with the same content.
        Err(_) if dir.join("catalog.json").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

/// A keyed hash of every file under an SDK directory, names and contents, to notice that the
/// directory changed after it was written (code that got write access, where the sandbox's
/// read-only rule is missing). The key is random per sidecar process, so whoever changes the
/// files cannot make the hash come out the same. Blocking; reads the whole directory.
pub fn digest(dir: &Path) -> std::io::Result<u64> {
    use std::hash::{BuildHasher, Hash, Hasher, RandomState};
    static KEY: OnceLock<RandomState> = OnceLock::new();
    let mut files = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let rel = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                pending.push(rel);
            } else {
                files.push(rel);
            }
        }
    }
    files.sort();
    let mut hasher = KEY.get_or_init(RandomState::new).build_hasher();
    for rel in files {
        rel.hash(&mut hasher);
        std::fs::read(dir.join(&rel))?.hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// Compiles the SDK's modules to `__pycache__` once, so children (run with `-B`, which still
/// reads `.pyc`) skip ~10 ms of compiling each cold start. Best effort: without it children
/// compile from source.
fn precompile(python: &Path, dir: &Path) {
    let modules: Vec<PathBuf> = FILES
        .iter()
        .filter(|(name, _)| *name != "ptc_bootstrap.py" && *name != "ptc_zygote.py")
        .map(|(name, _)| dir.join(name))
        .collect();
    let status = std::process::Command::new(python)
        .args(["-I", "-m", "py_compile"])
        .args(&modules)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        tracing::debug!("could not precompile the SDK in {}", dir.display());
    }
}
