//! The SDK a run loads: the Python files of `sdk-template/` and the JavaScript SDK
//! (`ptc_sdk.mjs`), embedded in the binary, written with the catalog's `catalog.json` into one
//! directory per catalog version.
//!
//! Rust only fills in the catalog; everything the child does is in the SDK's own files.

use crate::catalog::Catalog;
use crate::render::Snapshot;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// `ptc_sandbox.py`, which the sandbox's startup probe also runs (`confine::setup`).
pub const SANDBOX_PY: &str = include_str!("../../sdk-template/ptc_sandbox.py");

/// The JavaScript SDK's file in an SDK directory: what `node` starts a JavaScript run with
/// (`javascript::program`).
pub const JS_SDK_FILE: &str = "ptc_sdk.mjs";

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
        "ptc_files.py",
        include_str!("../../sdk-template/ptc_files.py"),
    ),
    (
        "ptc_zygote.py",
        include_str!("../../sdk-template/ptc_zygote.py"),
    ),
    (JS_SDK_FILE, include_str!("../../sdk-template/ptc_sdk.mjs")),
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
                "js_name": t.js_name,
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
    match dir.join("catalog.json").try_exists() {
        Ok(true) => return Ok(dir),
        Ok(false) => {}
        // A directory of that name we cannot read (its mode changed): not ours as written.
        Err(_) => remove(&dir),
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

/// A keyed hash of every file under an SDK directory, names, modes and contents (and every
/// folder's mode), to notice that the directory changed after it was written (code that got
/// write access, where the sandbox's read-only rule is missing, or changed a mode). The key is
/// random per sidecar process, so whoever changes the files cannot make the hash come out the
/// same. Blocking; reads the whole directory.
pub fn digest(dir: &Path) -> std::io::Result<u64> {
    use std::hash::{BuildHasher, Hash, Hasher, RandomState};
    use std::os::unix::fs::PermissionsExt;
    static KEY: OnceLock<RandomState> = OnceLock::new();
    let mode = |path: &Path| -> std::io::Result<u32> {
        Ok(std::fs::symlink_metadata(path)?.permissions().mode())
    };
    let mut entries = vec![(PathBuf::new(), mode(dir)?)];
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let rel = rel.join(entry.file_name());
            entries.push((rel.clone(), mode(&dir.join(&rel))?));
            if entry.file_type()?.is_dir() {
                pending.push(rel);
            }
        }
    }
    entries.sort();
    let mut hasher = KEY.get_or_init(RandomState::new).build_hasher();
    for (rel, mode) in entries {
        rel.hash(&mut hasher);
        mode.hash(&mut hasher);
        if mode & libc::S_IFMT != libc::S_IFDIR {
            std::fs::read(dir.join(&rel))?.hash(&mut hasher);
        }
    }
    Ok(hasher.finish())
}

/// Removes an SDK directory whatever its folders' modes became (its owner may always give a
/// folder back the rights to list and empty it). Best effort, blocking.
pub fn remove(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let is_dir = std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir());
        if !is_dir {
            continue;
        }
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            pending.push(entry.path());
        }
    }
    let _ = std::fs::remove_dir_all(dir);
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
