//! The `exec_code` description: a short fixed preamble, a note on the configured MCP servers
//! that are not running (when any is not), the named shapes, then one signature line per PTC
//! tool, grouped by MCP server (host tools first).
//!
//! Every token here is paid on every LLM turn, so the text is tight: shapes that repeat across
//! tools are named once (`Entity = {…}`) where that is shorter than writing them out, and the
//! details of each parameter are left to `describe()`. Three levels, the richest that fits the
//! catalog's token budget: rich (whole first sentences and parameter notes), compact (summaries
//! cut at 44 characters), budgeted (some signatures, the rest by name for `search_tools`).

use super::lower::{Shapes, is_reserved, shape_name};
use super::signature::{rich_summary, signature};
use super::tokens;
use super::ty::{Params, Signature, Ty};
use super::unavailable::note as unavailable_note;
use crate::catalog::Catalog;
use crate::catalog::names::is_identifier;
use std::collections::HashMap;

/// What the model is told once, before the signatures.
pub const PREAMBLE: &str = "\
Python with the tools below as async functions (top-level `await` works; run independent calls \
together with `asyncio.gather`). Only printed output comes back: print just what is needed. \
Failed calls raise ToolError (bad arguments: ToolInputError). `describe(\"name\")` prints a \
tool's full schema and docs; `save_file(name, data)` hands the user a file. Signatures: `?` optional, bare name = str, `{k: T}` a dict with \
those keys, no `->`: returns what the tool gives, often a str. Under `## s__`, call `f` as \
`s__f`. asyncio, json, re are imported.";

/// Said instead of the signatures when no tool is callable from code.
pub const NO_TOOLS: &str = "No tools are callable from code right now.";

/// Header of the named-shapes section.
pub const TYPES_HEADER: &str = "## types";
/// A section header ending in this is a prefix of every name in the section (`## github__`).
pub const SECTION_PREFIX_END: &str = "__";
/// Header of the host tools' section.
pub const HOST_HEADER: &str = "## tools";

/// Said after the preamble when the description leaves signatures out for the budget.
pub const SEARCH_NOTE: &str = "\
Not every signature fits here: a section lists some tools in full and the rest by name after \
`more:`. `search_tools(\"what you need\", limit=5)` returns the best matches, each a dict with \
its `signature` and `summary` (print it); `describe(\"name\")` prints one tool's docs. Every \
listed name is callable.";

/// Starts the line of a section's tools listed by name only.
pub const MORE: &str = "more: ";

/// The catalog as the model reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The whole `exec_code` description.
    pub description: String,
    /// `(tool name, signature line)` for each PTC tool, in catalog order, with its whole
    /// Python name (the description leaves a section's prefix out).
    pub lines: Vec<(String, String)>,
    /// Named shapes, as `Name = type` lines.
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
    let (mut rendered, sections, sigs) = render_full(catalog);
    let Some(budget) = catalog.description_budget else {
        return rendered;
    };
    // Loaded only if a count is needed, dropped when this rendering ends.
    let _vocabulary = tokens::scope();
    // The compact whole first: the rich one says all it says and more, so when the compact one
    // is over, the rich one is too, and a large catalog is counted once, not twice.
    if !tokens::within(&rendered.description, budget) {
        let note = unavailable_note(catalog);
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
/// signatures: the summary is the rest of a line after ` — `.
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
            .to_string()
        })
        .collect();
    whole(
        &full.definitions,
        sections,
        &lines,
        &unavailable_note(catalog),
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
    definitions: &[(String, Ty)],
    sections: &[Section],
    lines: &[String],
    note: &str,
) -> String {
    let mut out = String::from(PREAMBLE);
    if lines.is_empty() {
        out.push_str("\n\n");
        out.push_str(NO_TOOLS);
    }
    push_note(&mut out, note);
    if !definitions.is_empty() {
        out.push_str("\n\n");
        out.push_str(TYPES_HEADER);
        for (name, ty) in definitions {
            out.push_str(&format!("\n{name} = {ty}"));
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
fn render_full(catalog: &Catalog) -> (Rendered, Vec<Section>, Vec<Signature>) {
    let mut shapes = Shapes::default();
    let mut notes = Vec::new();
    let mut sigs: Vec<Signature> = Vec::new();
    let tools: Vec<_> = catalog.ptc().collect();
    for tool in &tools {
        let (sig, tool_notes) = signature(tool, &mut shapes);
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
        .map(|(tool, sig)| (tool.name.clone(), sig.to_string()))
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
        description: whole(&definitions, &sections, &texts, &unavailable_note(catalog)),
        listed: lines.len(),
        lines,
        definitions,
        notes,
    };
    (rendered, sections, sigs)
}

/// The description within `budget` tokens, and how many signatures it shows. Always: the
/// preamble, [`SEARCH_NOTE`], the note on servers not running (`note`), every section's header
/// with its tool count. Then, while they
/// fit, every section's tool names (`more: a, b`); then full signatures in catalog order (so
/// the text depends on the catalog alone, never on usage), each with the named shapes it
/// uses. When not even the names fit, the sections keep their names in order while they fit;
/// when not even the headers fit, the last line counts the sections left out. The preamble, the
/// notes and that line are the floor: a budget under it gets them anyway (the configuration
/// allows no budget that small).
fn budgeted(full: &Rendered, sections: &[Section], budget: usize, note: &str) -> (String, usize) {
    let refs = references(full);
    let fits = |plan: &Plan| tokens::within(&plan.assemble(full, sections, &refs, note), budget);
    // Each step is the largest that fits, found by bisection on the real count (more shown is
    // more tokens); whatever it settles on was measured to fit, or is the floor.
    let largest = |most: usize, plan: &dyn Fn(usize) -> Plan| -> usize {
        let (mut lo, mut hi) = (0, most);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits(&plan(mid)) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    let all = sections.len();
    let headers = largest(all, &|h| Plan {
        headers: h,
        names: 0,
        signatures: 0,
    });
    let names = if headers == all {
        largest(all, &|n| Plan {
            headers,
            names: n,
            signatures: 0,
        })
    } else {
        0
    };
    let signatures = if names == all {
        largest(full.lines.len(), &|k| Plan {
            headers,
            names,
            signatures: k,
        })
    } else {
        0
    };
    let plan = Plan {
        headers,
        names,
        signatures,
    };
    (plan.assemble(full, sections, &refs, note), plan.signatures)
}

/// How much of the catalog a budgeted description shows: the first `headers` sections, the
/// names of the first `names`, the signatures of the first `signatures` tools.
struct Plan {
    headers: usize,
    names: usize,
    signatures: usize,
}

impl Plan {
    fn assemble(
        &self,
        full: &Rendered,
        sections: &[Section],
        refs: &References,
        note: &str,
    ) -> String {
        let mut shown = vec![false; full.definitions.len()];
        for i in 0..self.signatures {
            for d in refs.of_line(i) {
                shown[d] = true;
            }
        }
        let mut out = format!("{PREAMBLE}\n\n{SEARCH_NOTE}");
        push_note(&mut out, note);
        if shown.iter().any(|&s| s) {
            out.push_str("\n\n");
            out.push_str(TYPES_HEADER);
            for ((name, ty), _) in full.definitions.iter().zip(&shown).filter(|(_, s)| **s) {
                out.push_str(&format!("\n{name} = {ty}"));
            }
        }
        for (n, section) in sections.iter().enumerate().take(self.headers) {
            out.push_str("\n\n");
            out.push_str(&heading(section));
            let mut more = Vec::new();
            for i in section.tools.clone() {
                let line = &full.lines[i].1;
                if i < self.signatures {
                    out.push('\n');
                    out.push_str(&line[section.prefix..]);
                } else {
                    more.push(short_name(line, section.prefix));
                }
            }
            if n < self.names && !more.is_empty() {
                out.push('\n');
                out.push_str(MORE);
                out.push_str(&more.join(", "));
            }
        }
        if self.headers < sections.len() {
            let left: usize = sections[self.headers..].iter().map(|s| s.tools.len()).sum();
            out.push_str(&format!(
                "\n\n({} more sections, {left} tools: find them with search_tools)",
                sections.len() - self.headers
            ));
        }
        out
    }
}

/// A section's header in a budgeted description: `## github__ (26 tools)`.
fn heading(section: &Section) -> String {
    let n = section.tools.len();
    format!(
        "{} ({n} tool{})",
        section.header,
        if n == 1 { "" } else { "s" }
    )
}

/// A signature line's Python name without the section prefix.
fn short_name(line: &str, prefix: usize) -> String {
    let name = line.split('(').next().unwrap_or(line);
    name.get(prefix..).unwrap_or(name).to_string()
}

/// Which named shapes each line and each shape uses, transitively.
struct References {
    by_line: Vec<Vec<usize>>,
}

impl References {
    fn of_line(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.by_line[i].iter().copied()
    }
}

fn references(full: &Rendered) -> References {
    let defs = &full.definitions;
    let texts: Vec<String> = defs.iter().map(|(_, ty)| ty.to_string()).collect();
    let direct = |text: &str| -> Vec<usize> {
        (0..defs.len())
            .filter(|&d| mentions(text, &defs[d].0))
            .collect()
    };
    let def_refs: Vec<Vec<usize>> = texts.iter().map(|t| direct(t)).collect();
    let by_line = full
        .lines
        .iter()
        .map(|(_, line)| {
            let mut found = direct(line);
            let mut i = 0;
            while i < found.len() {
                for &d in &def_refs[found[i]] {
                    if !found.contains(&d) {
                        found.push(d);
                    }
                }
                i += 1;
            }
            found.sort_unstable();
            found
        })
        .collect();
    References { by_line }
}

/// Whether `text` has `name` as a whole word.
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(word)
            && !text[i + name.len()..].chars().next().is_some_and(word)
    })
}

/// The `server__` prefix all Python names of a server's section share, when each name is an
/// identifier without it; `None` means the lines keep their whole names.
fn section_prefix(sigs: &[Signature]) -> Option<&str> {
    let first = &sigs.first()?.name;
    let prefix = &first[..first.find(SECTION_PREFIX_END)? + SECTION_PREFIX_END.len()];
    sigs.iter()
        .all(|s| s.name.strip_prefix(prefix).is_some_and(is_identifier))
        .then_some(prefix)
}

/// Names object shapes that repeat, while naming one saves characters: greedily, the best
/// saving first, until none saves. Deterministic: ties go to the shape seen first.
fn share_shapes(sigs: &mut [Signature], definitions: &mut Vec<(String, Ty)>) {
    loop {
        let mut seen = ShapeCounts::default();
        for sig in sigs.iter() {
            match &sig.params {
                Params::Fields(fields) => {
                    for f in fields {
                        seen.visit(&f.ty, &f.name);
                    }
                }
                Params::Open(Some(ty)) => seen.visit(ty, &sig.name),
                Params::Open(None) => {}
            }
            if let Some(ret) = &sig.returns {
                let hint = match ret {
                    Ty::Object(fields) if fields.len() == 1 => fields[0].name.clone(),
                    _ => sig.name.rsplit('_').next().unwrap_or("Result").to_string(),
                };
                seen.visit_return(ret, &hint);
            }
        }
        for (_, ty) in definitions.iter() {
            if let Ty::Object(fields) = ty {
                for f in fields {
                    seen.visit(&f.ty, &f.name);
                }
            }
        }
        let taken: Vec<&str> = definitions.iter().map(|(n, _)| n.as_str()).collect();
        let best = seen
            .shapes
            .iter()
            .map(|s| {
                let name = unique_name(&s.hint, s.is_return, &taken);
                let (n, len, m) = (s.count as i64, s.text.len() as i64, name.len() as i64);
                // Inline: n·len. Named: a definition line (m + len + 4) and n·m.
                (n * len - (m + len + 4) - n * m, name, s)
            })
            .filter(|(saving, _, _)| *saving > 0)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.2.first.cmp(&a.2.first)));
        let Some((_, name, shape)) = best else {
            return;
        };
        let (text, ty) = (shape.text.clone(), shape.ty.clone());
        for sig in sigs.iter_mut() {
            match &mut sig.params {
                Params::Fields(fields) => {
                    for f in fields {
                        replace(&mut f.ty, &text, &name);
                    }
                }
                Params::Open(Some(ty)) => replace(ty, &text, &name),
                Params::Open(None) => {}
            }
            if let Some(ret) = &mut sig.returns {
                replace(ret, &text, &name);
            }
        }
        for (_, def) in definitions.iter_mut() {
            if let Ty::Object(fields) = def {
                for f in fields {
                    replace(&mut f.ty, &text, &name);
                }
            }
        }
        definitions.push((name, ty));
    }
}

fn unique_name(hint: &str, is_return: bool, taken: &[&str]) -> String {
    let mut base = shape_name(hint);
    // A result shape named after its tool (`delete_entities`) must not pass for the thing the
    // tool works on (`Entity`).
    if is_return && taken.contains(&base.as_str()) {
        base.push_str("Result");
    }
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name.as_str()) || is_reserved(&name) {
        name = format!("{base}{n}");
        n += 1;
    }
    name
}

fn replace(ty: &mut Ty, text: &str, name: &str) {
    if matches!(ty, Ty::Object(_)) && ty.to_string() == text {
        *ty = Ty::Named(name.to_string());
        return;
    }
    match ty {
        Ty::Object(fields) => fields
            .iter_mut()
            .for_each(|f| replace(&mut f.ty, text, name)),
        Ty::List(Some(inner)) | Ty::Dict(Some(inner)) => replace(inner, text, name),
        Ty::Union(members) => members.iter_mut().for_each(|m| replace(m, text, name)),
        _ => {}
    }
}

struct Shape {
    text: String,
    ty: Ty,
    hint: String,
    /// First seen as a tool's whole return type, its hint taken from the tool's name.
    is_return: bool,
    count: usize,
    first: usize,
}

#[derive(Default)]
struct ShapeCounts {
    shapes: Vec<Shape>,
    index: HashMap<String, usize>,
}

impl ShapeCounts {
    fn visit_return(&mut self, ty: &Ty, hint: &str) {
        let known = self.shapes.len();
        self.visit(ty, hint);
        if let Some(shape) = self.shapes.get_mut(known)
            && shape.text == ty.to_string()
        {
            shape.is_return = true;
        }
    }

    fn visit(&mut self, ty: &Ty, hint: &str) {
        match ty {
            Ty::Object(fields) => {
                let text = ty.to_string();
                match self.index.get(&text) {
                    Some(&i) => self.shapes[i].count += 1,
                    None => {
                        let first = self.shapes.len();
                        self.index.insert(text.clone(), first);
                        self.shapes.push(Shape {
                            text,
                            ty: ty.clone(),
                            hint: hint.to_string(),
                            is_return: false,
                            count: 1,
                            first,
                        });
                    }
                }
                for f in fields {
                    self.visit(&f.ty, &f.name);
                }
            }
            Ty::List(Some(inner)) | Ty::Dict(Some(inner)) => self.visit(inner, hint),
            Ty::Union(members) => members.iter().for_each(|m| self.visit(m, hint)),
            _ => {}
        }
    }
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
        let many = unavailable_note(&catalog_down(None, down(9)));
        assert_eq!(many.lines().count(), 1 + MAX_UNAVAILABLE_NAMED + 1);
        assert!(many.ends_with("\n- s4: cannot start \"x\": gone\n- and 4 more servers"));
        assert_eq!(unavailable_note(&catalog(None)), "");
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
}
