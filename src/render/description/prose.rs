//! What the description says in words, in each language: the preamble every description
//! starts with, the note a budgeted one adds, the line that counts the sections left out.
//!
//! The same facts in both languages (how to call, how to run calls together, what comes back,
//! the errors, `describe`, saving a file, how to read a signature), each in the words of its
//! language and its SDK; everything else in the description is the catalog's.

use super::super::ty::Lang;

/// What the model is told once, before the signatures (Python).
pub const PREAMBLE: &str = "\
Python with the tools below as async functions (top-level `await` works; run independent calls \
together with `asyncio.gather`). Only printed output comes back: print just what is needed. \
Failed calls raise ToolError (bad arguments: ToolInputError). `describe(\"name\")` prints a \
tool's full schema and docs; `save_file(name, data)` hands the user a file. Signatures: `?` optional, bare name = str, `{k: T}` a dict with \
those keys, no `->`: returns what the tool gives, often a str. Under `## s__`, call `f` as \
`s__f`. asyncio, json, re are imported.";

/// What the model is told once, before the signatures (JavaScript, TypeScript signatures).
pub const PREAMBLE_JS: &str = "\
JavaScript with the tools below as async functions of one object (top-level `await` works; run \
independent calls together with `Promise.all`). Only `console.log` output comes back: log just \
what is needed. Failed calls throw ToolError (bad arguments: ToolInputError; denied: \
ToolDenied). `await describe(\"name\")` prints a tool's full schema and docs; `saveFile(name, \
data)` hands the user a file; `callTool(name, args)` takes the original name. Signatures: `?` \
optional, bare name = string, `int` an integer, no `: T`: resolves to what the tool gives, \
often a string. Under `## s__`, call `f` as `s__f`.";

/// Said after the preamble when the description leaves signatures out for the budget (Python).
pub const SEARCH_NOTE: &str = "\
Not every signature fits here: a section lists some tools in full and the rest by name after \
`more:`. `search_tools(\"what you need\", limit=5)` returns the best matches, each a dict with \
its `signature` and `summary` (print it); `describe(\"name\")` prints one tool's docs. Every \
listed name is callable.";

/// Said after the preamble when the description leaves signatures out for the budget
/// (JavaScript).
pub const SEARCH_NOTE_JS: &str = "\
Not every signature fits here: a section lists some tools in full and the rest by name after \
`more:`. `await searchTools(\"what you need\", 5)` returns the best matches, each an object \
with its `signature` and `summary` (log it); `await describe(\"name\")` prints one tool's \
docs. Every listed name is callable.";

pub fn preamble(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => PREAMBLE,
        Lang::JavaScript => PREAMBLE_JS,
    }
}

pub fn search_note(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => SEARCH_NOTE,
        Lang::JavaScript => SEARCH_NOTE_JS,
    }
}

/// The last line of a budgeted description without room for every section's header.
pub fn sections_left_out(lang: Lang, sections: usize, tools: usize) -> String {
    let search = match lang {
        Lang::Python => "search_tools",
        Lang::JavaScript => "searchTools",
    };
    format!("({sections} more sections, {tools} tools: find them with {search})")
}
