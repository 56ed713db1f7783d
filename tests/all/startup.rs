//! Starting and stopping a sidecar: the runtime directory it makes for itself, and start-up
//! errors that say what to fix.

use crate::common::{TEST_TIMEOUT, TempDir, config};
use ptc_sidecar::app::{RUNTIME_DIR_PREFIX, Sidecar, StartError};
use ptc_sidecar::run::{ExecRequest, ExecStatus};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// The entries of a directory.
fn entries(dir: &TempDir) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn the_default_runtime_dir_is_private_fresh_and_removed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let tmp = TempDir::new("tmpdir");
        let vars = [
            ("PTC_ENABLED", "true"),
            ("PTC_WARM_WORKERS", "0"),
            ("TMPDIR", tmp.0.to_str().unwrap()),
        ];
        let first = Sidecar::start(config(&vars), &[]).await.unwrap();
        let second = Sidecar::start(config(&vars), &[]).await.unwrap();
        let dirs = entries(&tmp);
        assert_eq!(dirs.len(), 2, "one directory per sidecar: {dirs:?}");
        // Private to the sidecar; where code runs as another user, that user may traverse it
        // to its SDK and scratch directories (0711), never list it.
        let switches = first.state.runner.as_ref().unwrap().run_user().is_some();
        let private = if switches { 0o711 } else { 0o700 };
        for dir in &dirs {
            let name = dir.file_name().unwrap().to_str().unwrap();
            let suffix = name
                .strip_prefix(&format!("{RUNTIME_DIR_PREFIX}-"))
                .unwrap_or_else(|| panic!("{name}"));
            assert!(
                suffix.len() >= 8 && suffix.chars().all(|c| c.is_ascii_hexdigit()),
                "a random suffix, not the pid: {name}"
            );
            let meta = std::fs::symlink_metadata(dir).unwrap();
            assert!(meta.is_dir());
            assert_eq!(meta.permissions().mode() & 0o777, private, "{name}");
        }
        let runner = first.state.runner.clone().unwrap();
        let r = runner
            .exec(ExecRequest {
                code: "print(1)".into(),
                ..ExecRequest::default()
            })
            .await;
        assert_eq!(
            (r.status, r.stdout.as_str()),
            (ExecStatus::Ok, "1\n"),
            "{}",
            r.stderr
        );
        drop(runner);
        drop(first);
        assert_eq!(entries(&tmp).len(), 1, "the first one's directory is gone");
        drop(second);
        assert_eq!(entries(&tmp), Vec::<PathBuf>::new());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn start_errors_are_typed_and_say_what_to_fix() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let c = config(&[("PTC_ENABLED", "true"), ("TMPDIR", "/nonexistent/tmp")]);
        let err = Sidecar::start(c, &[]).await.err().unwrap();
        assert!(matches!(err, StartError::RuntimeDir { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("cannot make a runtime directory in /nonexistent/tmp (TMPDIR): "),
            "{err}"
        );

        let c = config(&[("PTC_TOOLS_FILE", "/nonexistent/tools.json")]);
        let err = Sidecar::start(c, &[]).await.err().unwrap();
        assert!(matches!(err, StartError::Tools(_)), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("PTC_TOOLS_FILE: cannot read /nonexistent/tools.json"),
            "{err}"
        );

        let dir = TempDir::new("startup");
        let mcp = dir.write("mcp.json", r#"{"servers": {}}"#);
        let c = config(&[("PTC_MCP_CONFIG", mcp.to_str().unwrap())]);
        let err = Sidecar::start(c, &[]).await.err().unwrap();
        assert!(matches!(err, StartError::McpConfig(_)), "{err:?}");
        assert!(err.to_string().contains(r#"has no "mcpServers""#), "{err}");
    })
    .await
    .unwrap();
}
