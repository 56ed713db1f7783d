//! Secrets: the sidecar's and an MCP server's environments, the configs on disk, and what
//! `/healthz` and the log show.

use super::{Opts, against_both, attack, broken};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

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
