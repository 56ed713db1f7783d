//! The `exec_code` description: a short fixed preamble, the named shapes, then one signature line
//! per PTC tool, grouped by MCP server (host tools first).
//!
//! Every token here is paid on every LLM turn, so the text is tight: shapes that repeat across
//! tools are named once (`Entity = {…}`) where that is shorter than writing them out, and the
//! details of each parameter are left to `describe()`.

use super::lower::{Shapes, is_reserved, shape_name};
use super::signature::signature;
use super::ty::{Params, Signature, Ty};
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
}

impl Rendered {
    pub fn line(&self, tool: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, line)| line.as_str())
    }
}

/// Renders the description of a catalog.
pub fn render(catalog: &Catalog) -> Rendered {
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

    let mut out = String::from(PREAMBLE);
    if tools.is_empty() {
        out.push_str("\n\n");
        out.push_str(NO_TOOLS);
    }
    if !definitions.is_empty() {
        out.push_str("\n\n");
        out.push_str(TYPES_HEADER);
        for (name, ty) in &definitions {
            out.push_str(&format!("\n{name} = {ty}"));
        }
    }
    let mut lines = Vec::with_capacity(tools.len());
    let mut start = 0;
    while start < tools.len() {
        let server = tools[start].server();
        let end = start
            + tools[start..]
                .iter()
                .take_while(|t| t.server() == server)
                .count();
        let group = &sigs[start..end];
        let prefix = server.and_then(|_| section_prefix(group)).unwrap_or("");
        out.push_str("\n\n");
        match (server, prefix) {
            (_, p) if !p.is_empty() => out.push_str(&format!("## {p}")),
            (Some(server), _) => out.push_str(&format!("## {server}")),
            (None, _) => out.push_str(HOST_HEADER),
        }
        for (tool, sig) in tools[start..end].iter().zip(group) {
            let line = sig.to_string();
            out.push('\n');
            // The section header says the prefix once; each line leaves it out.
            out.push_str(&line[prefix.len()..]);
            lines.push((tool.name.clone(), line));
        }
        start = end;
    }
    Rendered {
        description: out,
        lines,
        definitions,
        notes,
    }
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
