//! Persistence and escalation: files outside scratch, the SDK (and the fork server that would
//! reload it), the configs the sidecar reloads, an MCP server's stdin, and the process guard.

use super::{Opts, against_both, attack, broken};
use crate::procs::is_alive;
use serde_json::json;
use std::time::Duration;

/// Longer than the hot-reload debounce (250 ms of quiet, 2 s at most): a rewritten config
/// would have been picked up by then.
const RELOAD_WINDOW: Duration = Duration::from_millis(2500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_guard_does_not_fall() {
    against_both("process_guard", Opts::default(), |s| async move {
        let run = s.attack("process_guard.py", json!({})).await?;
        run.all_refused(3)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_outside_scratch_is_refused() {
    against_both("persist_outside_scratch", Opts::default(), |s| async move {
        let run = s
            .attack(
                "persist_outside_scratch.py",
                json!({"open_dir": s.open_dir, "tmp_target": s.tmp_target, "mark": s.mark}),
            )
            .await?;
        if !run.stdout.contains("SCRATCH_WRITE fine") {
            return Err(broken(format!("writing in scratch failed: {}", run.stdout)));
        }
        run.all_refused(3)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisoning_the_sdk_and_killing_the_fork_server_is_refused() {
    against_both("persist_sdk", Opts::default(), |s| async move {
        let zygote = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        let run = s
            .attack(
                "persist_sdk.py",
                json!({"fork_server_pid": zygote, "mark": s.mark}),
            )
            .await?;
        if !is_alive(zygote) {
            return Err(attack(format!("the fork server {zygote} was killed")));
        }
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_the_configs_is_refused() {
    against_both("persist_config", Opts::default(), |s| async move {
        let run = s
            .attack(
                "persist_config.py",
                json!({"tools_file": s.tools_file, "mcp_config": s.mcp_config,
                       "tmp_target": s.tmp_target, "mark": s.mark,
                       "mark_py": s.mark.replace('-', "_")}),
            )
            .await?;
        tokio::time::sleep(RELOAD_WINDOW).await;
        let tools = s.get("/v1/tools").await?.to_string();
        if tools.contains(&s.mark.replace('-', "_")) {
            return Err(attack("the model's tool list now has the attacker's tool"));
        }
        let health = s.health_text().await?;
        if health.contains("\"escape\"") {
            return Err(attack(format!(
                "the sidecar started the attacker's MCP server: {health}"
            )));
        }
        if s.tmp_target.exists() {
            return Err(attack("the attacker's MCP command ran"));
        }
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_an_mcp_servers_stdin_is_refused() {
    against_both("persist_mcp_stdin", Opts::default(), |s| async move {
        let mcp = s.mcp_pid().ok_or_else(|| broken("no MCP server process"))?;
        let run = s
            .attack("persist_mcp_stdin.py", json!({"mcp_pid": mcp}))
            .await?;
        run.all_refused(1)
    })
    .await;
}
