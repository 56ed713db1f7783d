//! What an MCP host gets of a run: the text the code printed (then its stderr, then the status
//! when it failed, then its files), the images it saved as image content, its other files as
//! resource links it can read (`resources/read` of a `ptc://` URI), and the whole run result
//! as structured content.
//!
//! Pure but for reading a file back: it must not run anything.

use super::super::exec::ExecDoor;
use crate::run::{ExecResult, ExecStatus, RunFile};
use base64::Engine;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, ReadResourceResult, Resource, ResourceContents,
};
use std::io::Read;

/// The scheme of a run's file as a resource: `ptc://sessions/ID/PATH` (a session's folder) or
/// `ptc://artifacts/ID/NAME` (the files of a run without a session).
pub const FILE_SCHEME: &str = "ptc://";

/// Largest file `resources/read` gives back (base64 makes it a third bigger again).
pub const MAX_READ_BYTES: u64 = 16 << 20;

/// A run's result as an MCP tool result: the images among its files (`result.content`, the
/// API's image blocks) as image content, every file as a resource link.
pub fn result(result: &ExecResult) -> CallToolResult {
    let mut content = vec![ContentBlock::text(text(result))];
    for block in &result.content {
        let source = &block["source"];
        if let (Some(data), Some(mime)) = (source["data"].as_str(), source["media_type"].as_str()) {
            content.push(ContentBlock::image(data, mime));
        }
    }
    for file in &result.files {
        if let Some(uri) = uri_of(file) {
            let mut link = Resource::new(uri, file.name.clone());
            link.mime_type = Some(file.mime.clone());
            link.size = Some(file.size);
            content.push(ContentBlock::resource_link(link));
        }
    }
    let mut out = match result.status {
        ExecStatus::Ok => CallToolResult::success(content),
        _ => CallToolResult::error(content),
    };
    out.structured_content = serde_json::to_value(result).ok();
    out
}

/// What the code printed, then stderr and the status when there is something to say, then the
/// files (as `examples/ptc_client.py`'s `result_text` shapes it).
pub fn text(result: &ExecResult) -> String {
    let mut parts = Vec::new();
    if !result.stdout.is_empty() {
        parts.push(result.stdout.trim_end_matches('\n').to_string());
    }
    if !result.stderr.is_empty() {
        parts.push(format!("stderr:\n{}", result.stderr.trim_end_matches('\n')));
    }
    if result.status != ExecStatus::Ok {
        let status = match result.status {
            ExecStatus::Ok => "ok",
            ExecStatus::Error => "error",
            ExecStatus::Timeout => "timeout",
        };
        let code = result
            .exit_code
            .map_or("none".to_string(), |c| c.to_string());
        parts.push(format!("status: {status} (exit code {code})"));
    }
    for f in &result.files {
        let at = uri_of(f).unwrap_or_else(|| f.url.clone());
        parts.push(format!(
            "file: {} ({}, {} bytes) at {at}",
            f.name, f.mime, f.size
        ));
    }
    if parts.is_empty() {
        return "(the code printed nothing)".into();
    }
    parts.join("\n")
}

/// A run's file as a `ptc://` URI, from the control API path that serves it.
fn uri_of(file: &RunFile) -> Option<String> {
    if let Some(rest) = file.url.strip_prefix("/v1/sessions/") {
        let (id, path) = rest.split_once("/files/")?;
        return Some(format!("{FILE_SCHEME}sessions/{id}/{path}"));
    }
    let rest = file.url.strip_prefix("/v1/artifacts/")?;
    Some(format!("{FILE_SCHEME}artifacts/{rest}"))
}

/// `resources/read` of a run's file.
pub async fn read(uri: &str, door: &ExecDoor) -> Result<ReadResourceResult, ErrorData> {
    let unknown = || {
        ErrorData::resource_not_found(
            format!(
                "no file at {uri:?}: a run's files are {FILE_SCHEME}sessions/ID/PATH or \
                 {FILE_SCHEME}artifacts/ID/NAME, as its result links them"
            ),
            None,
        )
    };
    let rest = uri.strip_prefix(FILE_SCHEME).ok_or_else(unknown)?;
    let (store, rest) = match rest.split_once('/') {
        Some(("sessions", rest)) => (&door.sessions, rest),
        Some(("artifacts", rest)) => (&door.artifacts, rest),
        _ => return Err(unknown()),
    };
    let (id, path) = rest.split_once('/').ok_or_else(unknown)?;
    let name = percent_decode(path).ok_or_else(unknown)?;
    let session = store.get(id).ok_or_else(unknown)?;
    let (uri, name_for_mime) = (uri.to_string(), name.clone());
    let bytes = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>, ErrorData> {
        let failed = |e: &dyn std::fmt::Display| ErrorData::internal_error(e.to_string(), None);
        let Some((info, file)) = session.open_name(&name).map_err(|e| failed(&e))? else {
            return Ok(None);
        };
        if info.size > MAX_READ_BYTES {
            return Err(ErrorData::invalid_params(
                format!(
                    "{name} is {} bytes, more than the {MAX_READ_BYTES} a read gives; fetch it \
                     from the control API",
                    info.size
                ),
                None,
            ));
        }
        let mut bytes = Vec::with_capacity(info.size as usize);
        file.take(MAX_READ_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| failed(&e))?;
        Ok(Some(bytes))
    })
    .await
    .map_err(|e| ErrorData::internal_error(e.to_string(), None))??
    .ok_or_else(unknown)?;
    let mime = crate::util::mime_of(&name_for_mime).to_string();
    let contents = match std::str::from_utf8(&bytes) {
        Ok(text) if !mime.starts_with("image/") => ResourceContents::TextResourceContents {
            uri,
            mime_type: Some(mime),
            text: text.to_string(),
            meta: None,
        },
        _ => ResourceContents::BlobResourceContents {
            uri,
            mime_type: Some(mime),
            blob: base64::engine::general_purpose::STANDARD.encode(&bytes),
            meta: None,
        },
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// `%XX`-decoded path (as `util::url_path` encodes it), or `None` when it is not well formed.
fn percent_decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
