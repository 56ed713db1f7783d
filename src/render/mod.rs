//! Rendering: what the model sees of the catalog.
//!
//! In Python or JavaScript (TypeScript signatures): one lowering, one printer and one parser,
//! with the language ([`Lang`]) a parameter.
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

pub use description::{Rendered, render, render_in};
pub use llm::{
    EXEC_CODE, Format, NativeError, SESSIONS_NOTE, llm_tools, native_tools, note_sessions,
    offered_name,
};
pub use ty::Lang;

use crate::catalog::Catalog;
use std::sync::OnceLock;

/// One catalog version and what the model sees of it; immutable, shared as `Arc<Snapshot>`.
#[derive(Debug)]
pub struct Snapshot {
    pub catalog: Catalog,
    /// In Python: what the Python SDK, `describe()` and `search_tools` show, and the
    /// description of a sidecar with `PTC_LANG=python`.
    pub rendered: Rendered,
    /// In JavaScript, rendered the first time it is asked for ([`Snapshot::rendered_in`]): a
    /// sidecar that never shows it never pays for it.
    javascript: OnceLock<Rendered>,
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
            javascript: OnceLock::new(),
            search,
        }
    }

    /// What the model sees of this catalog in `lang`. Its `lines` are the same tools in the
    /// same order as [`Snapshot::rendered`]'s, so a search hit's index finds its line in either.
    pub fn rendered_in(&self, lang: Lang) -> &Rendered {
        match lang {
            Lang::Python => &self.rendered,
            Lang::JavaScript => self
                .javascript
                .get_or_init(|| render_in(&self.catalog, lang)),
        }
    }
}
