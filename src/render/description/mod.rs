//! The `exec_code` description: a short fixed preamble, a note on the configured MCP servers
//! that are not running (when any is not), the named shapes, then one signature line per PTC
//! tool, grouped by MCP server (host tools first).
//!
//! Every token here is paid on every LLM turn, so the text is tight: shapes that repeat across
//! tools are named once (`Entity = {…}`) where that is shorter than writing them out, and the
//! details of each parameter are left to `describe()`. Three levels, the richest that fits the
//! catalog's token budget: rich (whole first sentences and parameter notes), compact (summaries
//! cut at 44 characters), budgeted (some signatures, the rest by name for `search_tools`).
//!
//! In Python or in JavaScript with TypeScript signatures ([`render_in`]): one lowering, one
//! sharing of shapes and one choice of level for both, the language a parameter of the
//! printing and of the words (`prose`). `budget` makes the budgeted level, `shapes` names the
//! shapes that repeat.

mod budget;
mod prose;
mod shapes;

pub use prose::{PREAMBLE, PREAMBLE_JS, SEARCH_NOTE, SEARCH_NOTE_JS, preamble, search_note};

use super::lower::Shapes;
use super::signature::{rich_summary, signature};
use super::tokens;
use super::ty::{Lang, Print, Signature, Ty, definition};
use super::unavailable::note as unavailable_note;
use crate::catalog::names::is_identifier;
use crate::catalog::{Catalog, Tool};
use budget::budgeted;
use shapes::share_shapes;

/// Said instead of the signatures when no tool is callable from code.
pub const NO_TOOLS: &str = "No tools are callable from code right now.";

/// Header of the named-shapes section.
pub const TYPES_HEADER: &str = "## types";
/// A section header ending in this is a prefix of every name in the section (`## github__`).
pub const SECTION_PREFIX_END: &str = "__";
/// Header of the host tools' section.
pub const HOST_HEADER: &str = "## tools";

/// Starts the line of a section's tools listed by name only.
pub const MORE: &str = "more: ";

/// The catalog as the model reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The whole `exec_code` description.
    pub description: String,
    /// The language it is written for.
    pub lang: Lang,
    /// `(tool name, signature line)` for each PTC tool, in catalog order, with the whole name
    /// code calls it by (the description leaves a section's prefix out). The same tools in the
    /// same order in every language.
    pub lines: Vec<(String, String)>,
    /// Named shapes, as `Name = type` lines (TypeScript: `type Name = type`).
    pub definitions: Vec<(String, Ty)>,
    /// Things the renderer had to simplify, per tool.
    pub notes: Vec<String>,
    /// How many of `lines` the description shows in full: all of them, unless the catalog's
    /// description budget left some to `search_tools`.
    pub listed: usize,
}

impl Rendered {
    pub fn line(&self, tool: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, line)| line.as_str())
    }
}

/// One section of the description: a server's tools (or the host's).
struct Section {
    /// `## github__`, `## github` or `## tools`.
    header: String,
    /// The indexes into [`Rendered::lines`] of its tools.
    tools: std::ops::Range<usize>,
    /// Bytes of the section prefix each line leaves out.
    prefix: usize,
}

/// Renders the description of a catalog at the richest level that fits the catalog's
/// description budget: [`rich`] (whole first sentences and parameter notes) when it fits, else
/// every signature with its summary cut at [`MAX_SUMMARY_CHARS`], else [`budgeted`]. Without a
/// budget, the compact whole: code that renders with no budget sees what it always saw.
///
/// [`MAX_SUMMARY_CHARS`]: super::signature::MAX_SUMMARY_CHARS
pub fn render(catalog: &Catalog) -> Rendered {
    render_in(catalog, Lang::Python)
}

/// [`render`] in `lang`: the same tools, shapes and level rules, in its words and signatures.
pub fn render_in(catalog: &Catalog, lang: Lang) -> Rendered {
    let (mut rendered, sections, sigs) = render_full(catalog, lang);
    let Some(budget) = catalog.description_budget else {
        return rendered;
    };
    // Loaded only if a count is needed, dropped when this rendering ends.
    let _vocabulary = tokens::scope();
    // The compact whole first: the rich one says all it says and more, so when the compact one
    // is over, the rich one is too, and a large catalog is counted once, not twice.
    if !tokens::within(&rendered.description, budget) {
        let note = unavailable_note(catalog, lang);
        let (description, listed) = budgeted(&rendered, &sections, budget, &note);
        rendered.description = description;
        rendered.listed = listed;
    } else {
        let rich = rich(catalog, &rendered, &sections, &sigs);
        if tokens::within(&rich, budget) {
            rendered.description = rich;
        }
    }
    rendered
}

/// The rich description: the compact whole with each line's summary replaced by the whole
/// first sentence and the parameter notes ([`rich_summary`]). Its lines read back as the same
/// signatures: the summary is the rest of a line after ` — ` (TypeScript: ` // `).
fn rich(catalog: &Catalog, full: &Rendered, sections: &[Section], sigs: &[Signature]) -> String {
    let lines: Vec<String> = catalog
        .ptc()
        .zip(sigs)
        .map(|(tool, sig)| {
            let summary = rich_summary(tool, sig);
            Signature {
                summary,
                ..sig.clone()
            }
            .in_lang(full.lang)
            .to_string()
        })
        .collect();
    whole(
        full.lang,
        &full.definitions,
        sections,
        &lines,
        &unavailable_note(catalog, full.lang),
    )
}

/// Appends `note` as a paragraph of its own, unless it is empty.
fn push_note(out: &mut String, note: &str) {
    if !note.is_empty() {
        out.push_str("\n\n");
        out.push_str(note);
    }
}

/// A whole description: the preamble, the note on servers not running, the named shapes, every
/// section with every line.
fn whole(
    lang: Lang,
    definitions: &[(String, Ty)],
    sections: &[Section],
    lines: &[String],
    note: &str,
) -> String {
    let mut out = String::from(preamble(lang));
    if lines.is_empty() {
        out.push_str("\n\n");
        out.push_str(NO_TOOLS);
    }
    push_note(&mut out, note);
    if !definitions.is_empty() {
        out.push_str("\n\n");
        out.push_str(TYPES_HEADER);
        for (name, ty) in definitions {
            out.push('\n');
            out.push_str(&definition(name, ty, lang));
        }
    }
    for section in sections {
        out.push_str("\n\n");
        out.push_str(&section.header);
        for line in &lines[section.tools.clone()] {
            out.push('\n');
            // The section header says the prefix once; each line leaves it out.
            out.push_str(&line[section.prefix..]);
        }
    }
    out
}

/// The compact whole, its sections, and each tool's signature (in catalog order).
fn render_full(catalog: &Catalog, lang: Lang) -> (Rendered, Vec<Section>, Vec<Signature>) {
    let mut shapes = Shapes::default();
    let mut notes = Vec::new();
    let mut sigs: Vec<Signature> = Vec::new();
    let tools: Vec<_> = catalog.ptc().collect();
    for tool in &tools {
        let (mut sig, tool_notes) = signature(tool, &mut shapes);
        sig.name = code_name(tool, lang);
        notes.extend(
            tool_notes
                .into_iter()
                .map(|n| format!("tool {:?}: {n}", tool.name)),
        );
        sigs.push(sig);
    }
    let mut definitions = shapes.definitions;
    share_shapes(&mut sigs, &mut definitions);

    let lines: Vec<(String, String)> = tools
        .iter()
        .zip(&sigs)
        .map(|(tool, sig)| (tool.name.clone(), sig.in_lang(lang).to_string()))
        .collect();
    let mut sections = Vec::new();
    let mut start = 0;
    while start < tools.len() {
        let server = tools[start].server();
        let end = start
            + tools[start..]
                .iter()
                .take_while(|t| t.server() == server)
                .count();
        let prefix = server
            .and_then(|_| section_prefix(&sigs[start..end]))
            .unwrap_or("");
        let header = match (server, prefix) {
            (_, p) if !p.is_empty() => format!("## {p}"),
            (Some(server), _) => format!("## {server}"),
            (None, _) => HOST_HEADER.to_string(),
        };
        sections.push(Section {
            header,
            tools: start..end,
            prefix: prefix.len(),
        });
        start = end;
    }
    let texts: Vec<String> = lines.iter().map(|(_, line)| line.clone()).collect();
    let rendered = Rendered {
        description: whole(
            lang,
            &definitions,
            &sections,
            &texts,
            &unavailable_note(catalog, lang),
        ),
        lang,
        listed: lines.len(),
        lines,
        definitions,
        notes,
    };
    (rendered, sections, sigs)
}

/// The name code calls a tool by in `lang`: its Python name, or its JavaScript name (the same
/// but for a word JavaScript has taken, `catalog::names::js_name`).
pub fn code_name(tool: &Tool, lang: Lang) -> String {
    match lang {
        Lang::Python => tool.python_name.clone(),
        Lang::JavaScript => tool.js_name.clone(),
    }
}

/// The `server__` prefix all names of a server's section share, when each name is an
/// identifier without it; `None` means the lines keep their whole names.
fn section_prefix(sigs: &[Signature]) -> Option<&str> {
    let first = &sigs.first()?.name;
    let prefix = &first[..first.find(SECTION_PREFIX_END)? + SECTION_PREFIX_END.len()];
    sigs.iter()
        .all(|s| s.name.strip_prefix(prefix).is_some_and(is_identifier))
        .then_some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::ToolDef;
    use crate::catalog::{CatalogInput, Policy, ServerTools, Unavailable};
    use crate::render::unavailable::MAX_UNAVAILABLE_NAMED;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn catalog(budget: Option<usize>) -> Catalog {
        catalog_down(budget, Vec::new())
    }

    /// The test catalog with these servers not running.
    fn catalog_down(budget: Option<usize>, unavailable: Vec<Unavailable>) -> Catalog {
        let def = |name: &str, description: &str| ToolDef {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema: json!({"type": "object", "properties": {
                "id": {"type": "integer", "minimum": 1}, "assignee": {"type": "string"},
                "milestone": {"type": "string"}, "due_date": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}}
            }, "required": ["id"]}),
            output_schema: None,
            annotations: None,
        };
        let servers = vec![
            ServerTools {
                server: "tickets".into(),
                tools: vec![
                    def("open_ticket", "Open a ticket."),
                    def("close_ticket", "Close a ticket."),
                    def("assign_ticket", "Assign a ticket."),
                    def("label_ticket", "Label a ticket."),
                ],
            },
            ServerTools {
                server: "wiki".into(),
                tools: vec![
                    def("read_page", "Read a page."),
                    def("edit_page", "Edit a page."),
                    def("delete_page", "Delete a page."),
                    def("move_page", "Move a page."),
                ],
            },
        ];
        let policy = Policy {
            ptc_enabled: true,
            description_budget: budget,
            ..Policy::default()
        };
        let input = CatalogInput {
            servers,
            unavailable,
            ..CatalogInput::default()
        };
        Catalog::build(input, &policy, 1)
    }

    #[test]
    fn servers_not_running_are_named_after_the_preamble_at_every_level() {
        let _vocabulary = tokens::scope();
        let minute = std::time::Duration::from_secs(60);
        let down = |n: usize| -> Vec<Unavailable> {
            (0..n)
                .map(|i| Unavailable::new(&format!("s{i}"), "cannot start \"x\": gone", minute))
                .collect()
        };
        let note = "MCP servers not running now, so their tools are missing or raise ToolError \
                    (each is tried again within 60 s):\n- s0: cannot start \"x\": gone\n\
                    - s1: cannot start \"x\": gone";
        let whole = render(&catalog(None)).description;
        let c = catalog_down(None, down(2));
        let r = render(&c);
        let rest = whole.strip_prefix(PREAMBLE).unwrap();
        assert_eq!(r.description, format!("{PREAMBLE}\n\n{note}{rest}"));
        // Before the first `## `: the description still reads back whole.
        assert_eq!(
            super::super::lossless::check_catalog(&c, &r.description),
            Vec::<String>::new()
        );
        // Budgeted, it is part of the floor, after the search note.
        let r = render(&catalog_down(Some(1), down(2)));
        assert!(
            r.description
                .starts_with(&format!("{PREAMBLE}\n\n{SEARCH_NOTE}\n\n{note}\n\n")),
            "{}",
            r.description
        );
        // With no tool at all, after the line that says so.
        let empty = Catalog::build(
            CatalogInput {
                unavailable: down(1),
                ..CatalogInput::default()
            },
            &Policy {
                ptc_enabled: true,
                ..Policy::default()
            },
            1,
        );
        let first = note.split("\n- s1").next().unwrap();
        assert_eq!(
            render(&empty).description,
            format!("{PREAMBLE}\n\n{NO_TOOLS}\n\n{first}")
        );
        // Bounded: five named, the rest counted.
        let many = unavailable_note(&catalog_down(None, down(9)), Lang::Python);
        assert_eq!(many.lines().count(), 1 + MAX_UNAVAILABLE_NAMED + 1);
        assert!(many.ends_with("\n- s4: cannot start \"x\": gone\n- and 4 more servers"));
        assert_eq!(unavailable_note(&catalog(None), Lang::Python), "");
    }

    /// The description after the preamble and, when budgeted, the search note.
    fn body(budget: Option<usize>) -> (String, usize) {
        let r = render(&catalog(budget));
        let head = if r.listed < r.lines.len() {
            format!("{PREAMBLE}\n\n{SEARCH_NOTE}\n\n")
        } else {
            format!("{PREAMBLE}\n\n")
        };
        let d = r
            .description
            .strip_prefix(&head)
            .expect("the head")
            .to_string();
        (d, r.listed)
    }

    #[test]
    fn within_the_budget_the_description_is_whole() {
        let _vocabulary = tokens::scope();
        let sig = "(id: int, assignee?, milestone?, due_date?, labels?: list[str])";
        let whole = format!(
            "## tickets__\nassign_ticket{sig} — Assign a ticket.\nclose_ticket{sig} — Close a ticket.\n\
             label_ticket{sig} — Label a ticket.\nopen_ticket{sig} — Open a ticket.\n\n\
             ## wiki__\ndelete_page{sig} — Delete a page.\nedit_page{sig} — Edit a page.\n\
             move_page{sig} — Move a page.\nread_page{sig} — Read a page."
        );
        assert_eq!(body(None), (whole.clone(), 8));
        let full = tokens::count(&render(&catalog(None)).description);
        assert_eq!(body(Some(full)), (whole, 8));
    }

    #[test]
    fn the_rich_description_when_it_fits() {
        let _vocabulary = tokens::scope();
        let sig = "(id: int, assignee?, milestone?, due_date?, labels?: list[str])";
        let line = |name: &str, what: &str| format!("{name}{sig} — {what} a ticket. [id: >= 1]");
        let rich = format!(
            "## tickets__\n{}\n{}\n{}\n{}\n\n## wiki__\n{}\n{}\n{}\n{}",
            line("assign_ticket", "Assign"),
            line("close_ticket", "Close"),
            line("label_ticket", "Label"),
            line("open_ticket", "Open"),
            line("delete_page", "Delete").replace("ticket", "page"),
            line("edit_page", "Edit").replace("ticket", "page"),
            line("move_page", "Move").replace("ticket", "page"),
            line("read_page", "Read").replace("ticket", "page"),
        );
        let size = tokens::count(&format!("{PREAMBLE}\n\n{rich}"));
        // A budget of exactly its size: rich. One less: the compact whole, as without a budget.
        assert_eq!(body(Some(size)), (rich, 8));
        assert_eq!(body(Some(size - 1)), body(None));
        assert!(tokens::count(&render(&catalog(None)).description) < size - 1);
        // The lines (search, describe, the SDK) are the compact ones at every level.
        assert_eq!(
            render(&catalog(Some(size))).lines,
            render(&catalog(None)).lines
        );
        // The rich description reads back: every signature, nothing lost.
        let c = catalog(Some(size));
        let r = render(&c);
        assert_eq!(
            super::super::lossless::check_catalog(&c, &r.description),
            Vec::<String>::new()
        );
    }

    #[test]
    fn past_the_budget_signatures_in_catalog_order_then_names_then_headers() {
        let _vocabulary = tokens::scope();
        let full = tokens::count(&render(&catalog(Some(1 << 20))).description);
        let head = format!("{PREAMBLE}\n\n{SEARCH_NOTE}\n\n");
        let cases = [
            (
                "## tickets__ (4 tools)\nassign_ticket(id: int, assignee?, milestone?, due_date?, labels?: list[str]) — Assign a ticket.\nmore: close_ticket, label_ticket, open_ticket\n\n## wiki__ (4 tools)\nmore: delete_page, edit_page, move_page, read_page",
                1,
            ),
            (
                "## tickets__ (4 tools)\nmore: assign_ticket, close_ticket, label_ticket, open_ticket\n\n## wiki__ (4 tools)\nmore: delete_page, edit_page, move_page, read_page",
                0,
            ),
            (
                "## tickets__ (4 tools)\nmore: assign_ticket, close_ticket, label_ticket, open_ticket\n\n## wiki__ (4 tools)",
                0,
            ),
            ("(2 more sections, 8 tools: find them with search_tools)", 0),
        ];
        for (text, listed) in cases {
            // The largest description that fits a budget of exactly its size is this one.
            let budget = tokens::count(&format!("{head}{text}"));
            assert!(budget < full, "{budget} {full}");
            assert_eq!(
                body(Some(budget)),
                (text.to_string(), listed),
                "budget {budget}"
            );
            assert!(tokens::count(&render(&catalog(Some(budget))).description) <= budget);
            // One less: less is shown. The last is the floor, given over any smaller budget.
            if listed > 0 || text.starts_with("##") {
                assert_ne!(body(Some(budget - 1)).0, text, "budget {budget} - 1");
            } else {
                assert_eq!(body(Some(budget / 2)).0, text);
            }
        }
    }

    #[test]
    fn the_javascript_description_says_the_same_in_typescript() {
        let _vocabulary = tokens::scope();
        let sig = "({id: int, assignee?, milestone?, due_date?, labels?: string[]})";
        let line = |name: &str, what: &str| format!("{name}{sig} // {what}.");
        let whole = format!(
            "{PREAMBLE_JS}\n\n## tickets__\n{}\n{}\n{}\n{}\n\n## wiki__\n{}\n{}\n{}\n{}",
            line("assign_ticket", "Assign a ticket"),
            line("close_ticket", "Close a ticket"),
            line("label_ticket", "Label a ticket"),
            line("open_ticket", "Open a ticket"),
            line("delete_page", "Delete a page"),
            line("edit_page", "Edit a page"),
            line("move_page", "Move a page"),
            line("read_page", "Read a page"),
        );
        let c = catalog(None);
        let js = render_in(&c, Lang::JavaScript);
        assert_eq!(js.description, whole);
        assert_eq!(js.lang, Lang::JavaScript);
        // The same tools in the same order as in Python: a search hit's index finds either.
        let py = render(&c);
        let names = |r: &Rendered| r.lines.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&js), names(&py));
        assert_eq!(
            js.line("tickets__open_ticket"),
            Some(format!("tickets__{}", line("open_ticket", "Open a ticket")).as_str())
        );
        // Same input, same bytes; and it reads back, nothing lost, at every level.
        assert_eq!(render_in(&c, Lang::JavaScript), js);
        let check = |c: &Catalog| {
            let r = render_in(c, Lang::JavaScript);
            let problems = super::super::lossless::check_catalog_in(c, &r.description, r.lang);
            assert_eq!(problems, Vec::<String>::new(), "{}", r.description);
            r
        };
        check(&c);
        let rich = check(&catalog(Some(1 << 20)));
        assert!(
            rich.description.contains("[id: >= 1]"),
            "{}",
            rich.description
        );
        // Budgeted: the search note and the count of what is left out, in JavaScript's words;
        // the lines it shows read back.
        let shown = |c: &Catalog| {
            let r = render_in(c, Lang::JavaScript);
            let lines = r.description.lines().skip_while(|l| !l.starts_with("## "));
            let sigs =
                lines.filter(|l| !l.is_empty() && !l.starts_with("## ") && !l.starts_with(MORE));
            for line in sigs.clone() {
                crate::render::ty::parse_signature_in(line, r.lang).unwrap();
            }
            assert_eq!(sigs.count(), r.listed, "{}", r.description);
            r
        };
        let floor = shown(&catalog(Some(1)));
        assert_eq!(
            floor.description,
            format!(
                "{PREAMBLE_JS}\n\n{SEARCH_NOTE_JS}\n\n\
                 (2 more sections, 8 tools: find them with searchTools)"
            )
        );
        let budget = tokens::count(&format!(
            "{PREAMBLE_JS}\n\n{SEARCH_NOTE_JS}\n\n## tickets__ (4 tools)\n{}\n\
             more: close_ticket, label_ticket, open_ticket\n\n## wiki__ (4 tools)\n\
             more: delete_page, edit_page, move_page, read_page",
            line("assign_ticket", "Assign a ticket")
        ));
        let some = shown(&catalog(Some(budget)));
        assert_eq!(some.listed, 1);
        assert!(tokens::count(&some.description) <= budget);
        // A server not running: JavaScript throws.
        let down = vec![Unavailable::new(
            "s0",
            "gone",
            std::time::Duration::from_secs(60),
        )];
        let r = render_in(&catalog_down(None, down), Lang::JavaScript);
        assert!(
            r.description.starts_with(&format!(
                "{PREAMBLE_JS}\n\nMCP servers not running now, so their tools are missing or \
                 throw ToolError"
            )),
            "{}",
            r.description
        );
    }
}
