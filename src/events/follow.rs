//! Reading events back from Redis: [`watch`] prints one agent's (or every agent's) live events
//! for `ptc-sidecar events`, and [`follow_all`] feeds `ptc-sidecar dashboard` every agent's
//! stored history, then the live ones. [`readable`] is the one-line form a person reads.
//!
//! Each opens its own connection and only reads: the sidecar's one writing connection is
//! [`super::writer`]'s, and nothing here may publish. Errors are shown with URLs redacted and
//! their Redis causes not chained (a Redis URL may carry a password).

use crate::util::redact_urls;
use serde_json::Value;

/// Why `ptc-sidecar events` stopped watching (causes redacted and not chained, as above).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("REDIS_URL={:?}: {}", redact_urls(url), redact_urls(&error.to_string()))]
    Url {
        url: String,
        error: redis::RedisError,
    },
    #[error("cannot connect to Redis at {}: {}", redact_urls(url), redact_urls(&error.to_string()))]
    Connect {
        url: String,
        error: redis::RedisError,
    },
    #[error("cannot subscribe: {}", redact_urls(&.0.to_string()))]
    Subscribe(redis::RedisError),
    #[error("the Redis connection ended")]
    Ended,
}

/// One event as a line for a person: time, agent, type, ids, tool, outcome.
/// `17:30:00.123 agent-1 tool_call.finished r3/r3-0 github__list_issues ok 12.5ms`
pub fn readable(event: &Value) -> String {
    let ts = event["ts"].as_u64().unwrap_or(0);
    let (h, m, sec, ms) = (
        (ts / 3_600_000) % 24,
        (ts / 60_000) % 60,
        (ts / 1000) % 60,
        ts % 1000,
    );
    let mut line = format!(
        "{h:02}:{m:02}:{sec:02}.{ms:03} {} {}",
        event["agent_id"].as_str().unwrap_or("?"),
        event["type"].as_str().unwrap_or("?")
    );
    let ids: Vec<&str> = ["exec_id", "call_id"]
        .iter()
        .filter_map(|k| event[*k].as_str())
        .collect();
    if !ids.is_empty() {
        line.push(' ');
        line.push_str(&ids.join("/"));
    }
    for key in ["tool", "status"] {
        if let Some(v) = event[key].as_str() {
            line.push(' ');
            line.push_str(v);
        }
    }
    match event["ok"].as_bool() {
        Some(true) if event["status"].is_null() => line.push_str(" ok"),
        Some(false) if event["status"].is_null() => line.push_str(" failed"),
        _ => {}
    }
    if let Some(d) = event["duration_ms"].as_f64() {
        line.push_str(&format!(" {d:.1}ms"));
    }
    if let Some(msg) = event["error"]["message"].as_str() {
        line.push_str(&format!(" error: {msg}"));
    }
    if let Some(v) = event["version"].as_u64() {
        line.push_str(&format!(" v{v}"));
        for key in ["added", "removed", "changed"] {
            if let Some(names) = event[key].as_array().filter(|a| !a.is_empty()) {
                let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
                line.push_str(&format!(" {key}: {}", names.join(",")));
            }
        }
        if let Some(down) = event["unavailable"].as_array().filter(|a| !a.is_empty()) {
            let names: Vec<&str> = down.iter().filter_map(|u| u["server"].as_str()).collect();
            line.push_str(&format!(" not running: {}", names.join(",")));
        }
    }
    line
}

/// Subscribes to one agent's channel (or every agent's, with a pattern) and writes each event
/// as a line, readable or raw JSON, until the connection ends.
pub async fn watch(
    redis_url: &str,
    agent: Option<&str>,
    json: bool,
    mut out: impl std::io::Write,
) -> Result<(), WatchError> {
    use futures_util::StreamExt;
    let client = redis::Client::open(redis_url).map_err(|error| WatchError::Url {
        url: redis_url.to_string(),
        error,
    })?;
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .map_err(|error| WatchError::Connect {
            url: redis_url.to_string(),
            error,
        })?;
    match agent {
        Some(agent) => pubsub.subscribe(format!("ptc:events:{agent}")).await,
        None => pubsub.psubscribe("ptc:events:*").await,
    }
    .map_err(WatchError::Subscribe)?;
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let payload: String = msg.get_payload().unwrap_or_default();
        let line = if json {
            payload
        } else {
            match serde_json::from_str::<Value>(&payload) {
                Ok(v) => readable(&v),
                Err(_) => payload,
            }
        };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
    }
    Err(WatchError::Ended)
}

/// Most events read back from each agent's stream at start (`ptc-sidecar dashboard`): the
/// dashboard keeps the latest runs only, and a stream of 100,000 events must not be read whole.
pub const HISTORY_PER_AGENT: usize = 5000;

/// Most agents' streams read back at start.
pub const HISTORY_AGENTS: usize = 1000;

/// Every agent's events from Redis, oldest first: up to [`HISTORY_PER_AGENT`] of each of up to
/// [`HISTORY_AGENTS`] streams (`ptc:stream:*`) read back, then the live ones (`ptc:events:*`),
/// each handed to `sink` as JSON text, until the connection ends. Subscribes before it reads
/// the history, so no event falls between the two (one may come twice: a consumer keyed by
/// `seq` sees it as such). `ready` is called once the history is in and live events flow.
pub async fn follow_all(
    redis_url: &str,
    mut sink: impl FnMut(&str),
    ready: impl FnOnce(),
) -> Result<(), WatchError> {
    use futures_util::StreamExt;
    let client = redis::Client::open(redis_url).map_err(|error| WatchError::Url {
        url: redis_url.to_string(),
        error,
    })?;
    let connect = |error| WatchError::Connect {
        url: redis_url.to_string(),
        error,
    };
    let mut pubsub = client.get_async_pubsub().await.map_err(connect)?;
    pubsub
        .psubscribe("ptc:events:*")
        .await
        .map_err(WatchError::Subscribe)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(connect)?;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("ptc:stream:*")
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await
            .map_err(WatchError::Subscribe)?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 || keys.len() >= HISTORY_AGENTS {
            break;
        }
    }
    keys.truncate(HISTORY_AGENTS);
    let mut history: Vec<(u64, String)> = Vec::new();
    for key in keys {
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
            .arg(&key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(HISTORY_PER_AGENT)
            .query_async(&mut conn)
            .await
            .map_err(WatchError::Subscribe)?;
        // XREVRANGE gives the newest first: each agent's events go in oldest first.
        for (_, fields) in entries.into_iter().rev() {
            for (field, json) in fields {
                if field == "event" {
                    let ts = serde_json::from_str::<Value>(&json)
                        .ok()
                        .and_then(|v| v["ts"].as_u64())
                        .unwrap_or(0);
                    history.push((ts, json));
                }
            }
        }
    }
    // Oldest first across agents; a stable sort keeps each agent's own order.
    history.sort_by_key(|(ts, _)| *ts);
    for (_, json) in &history {
        sink(json);
    }
    drop(history);
    let mut messages = pubsub.on_message();
    ready();
    while let Some(msg) = messages.next().await {
        let payload: String = msg.get_payload().unwrap_or_default();
        sink(&payload);
    }
    Err(WatchError::Ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_lines() {
        let e = serde_json::json!({"v": 1, "type": "tool_call.finished", "ts": 1_763_832_600_123u64,
            "agent_id": "a1", "exec_id": "r3", "call_id": "r3-0", "tool": "github__list_issues",
            "ok": false, "duration_ms": 12.54, "error": {"type": "tool", "message": "boom"}});
        assert_eq!(
            readable(&e),
            "17:30:00.123 a1 tool_call.finished r3/r3-0 github__list_issues failed 12.5ms error: boom"
        );
        let e = serde_json::json!({"type": "exec.finished", "ts": 0, "agent_id": "a1", "exec_id": "r3", "status": "timeout", "ok": false});
        assert_eq!(readable(&e), "00:00:00.000 a1 exec.finished r3 timeout");
        let e = serde_json::json!({"type": "catalog.reloaded", "ts": 0, "agent_id": "a1", "version": 4, "added": ["x"], "removed": [], "changed": ["y", "z"]});
        assert_eq!(
            readable(&e),
            "00:00:00.000 a1 catalog.reloaded v4 added: x changed: y,z"
        );
        let e = serde_json::json!({"type": "catalog.reloaded", "ts": 0, "agent_id": "a1", "ok": true, "version": 1, "added": [], "unavailable": [{"server": "gh", "error": "cannot start"}]});
        assert_eq!(
            readable(&e),
            "00:00:00.000 a1 catalog.reloaded ok v1 not running: gh"
        );
    }
}
