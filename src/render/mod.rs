//! Rendering: what the model sees of the catalog.
//!
//! `ty` is the signature language (`parse` reads it back), `lower` turns JSON Schema into it
//! (`schema` holds the JSON Schema look-ups it needs), `signature` makes one
//! line per tool (`notes` the parameter notes of its rich form), `description` the whole `exec_code` description (within the catalog's token
//! budget, counted by `tokens`; `unavailable` its note on MCP servers not running), `llm` the provider-shaped tool list, `search` the index behind
//! `search_tools`, and `lossless` checks that nothing a call needs was lost. All pure.

pub mod description;
pub mod llm;
pub mod lossless;
pub mod lower;
pub mod notes;
pub mod parse;
pub mod query;
pub mod schema;
pub mod search;
pub mod signature;
pub mod tokens;
pub mod ty;
pub mod unavailable;

pub use description::{Rendered, render};
pub use llm::{
    EXEC_CODE, Format, NativeError, SESSIONS_NOTE, llm_tools, native_tools, note_sessions,
    offered_name,
};

use crate::catalog::Catalog;

/// One catalog version and what the model sees of it; immutable, shared as `Arc<Snapshot>`.
#[derive(Debug)]
pub struct Snapshot {
    pub catalog: Catalog,
    pub rendered: Rendered,
    /// What `search_tools` searches.
    pub search: search::Index,
}

impl Snapshot {
    pub fn new(catalog: Catalog) -> Snapshot {
        let rendered = render(&catalog);
        let search = search::Index::build(&catalog, &rendered);
        Snapshot {
            catalog,
            rendered,
            search,
        }
    }
}
