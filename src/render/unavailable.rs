//! The note the `exec_code` description gives on the configured MCP servers that are not
//! running: which, what failed, and when each is tried again. `description` puts it after the
//! preamble at every level; what counts as not running is the MCP hub's to say (the catalog's
//! `unavailable`). Pure.

use super::ty::Lang;
use crate::catalog::Catalog;

/// Most MCP servers the note names one by one (the rest are counted): the note is paid on every
/// turn, however many servers are down.
pub const MAX_UNAVAILABLE_NAMED: usize = 5;

/// The note on the configured MCP servers that are not running, empty when none: the model
/// learns which tools are missing (or fail) and why, instead of meeting a `NameError`. Each
/// server's line is its name and what failed (one bounded line, [`Unavailable::new`]); when it
/// is tried again is said as the longest wait, not a time, so the text stays the same while
/// the retries go on. Said after the preamble, before the first `## `, where nothing reads it
/// as a signature.
///
/// [`Unavailable::new`]: crate::catalog::Unavailable::new
/// In `lang`'s words: Python raises, JavaScript throws.
pub fn note(catalog: &Catalog, lang: Lang) -> String {
    let down = &catalog.unavailable;
    let Some(within) = down.iter().map(|u| u.retry_within).max() else {
        return String::new();
    };
    let raise = match lang {
        Lang::Python => "raise",
        Lang::JavaScript => "throw",
    };
    let mut out = format!(
        "MCP servers not running now, so their tools are missing or {raise} ToolError (each is \
         tried again within {} s):",
        within.as_secs()
    );
    for u in down.iter().take(MAX_UNAVAILABLE_NAMED) {
        out.push_str(&format!("\n- {}: {}", u.server, u.error));
    }
    if down.len() > MAX_UNAVAILABLE_NAMED {
        out.push_str(&format!(
            "\n- and {} more servers",
            down.len() - MAX_UNAVAILABLE_NAMED
        ));
    }
    out
}
