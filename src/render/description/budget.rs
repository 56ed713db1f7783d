//! The budgeted level of the description: every section's header, then names, then as many
//! whole signatures as the catalog's token budget allows, in catalog order; the rest is for
//! `search_tools`.

use super::super::tokens;
use super::prose::{preamble, search_note, sections_left_out};
use super::{MORE, Rendered, Section, TYPES_HEADER, push_note};
use crate::render::ty::definition;

/// The description within `budget` tokens, and how many signatures it shows. Always: the
/// preamble, the search note ([`search_note`]), the note on servers not running (`note`), every section's header
/// with its tool count. Then, while they
/// fit, every section's tool names (`more: a, b`); then full signatures in catalog order (so
/// the text depends on the catalog alone, never on usage), each with the named shapes it
/// uses. When not even the names fit, the sections keep their names in order while they fit;
/// when not even the headers fit, the last line counts the sections left out. The preamble, the
/// notes and that line are the floor: a budget under it gets them anyway (the configuration
/// allows no budget that small).
pub(super) fn budgeted(
    full: &Rendered,
    sections: &[Section],
    budget: usize,
    note: &str,
) -> (String, usize) {
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
        let lang = full.lang;
        let mut out = format!("{}\n\n{}", preamble(lang), search_note(lang));
        push_note(&mut out, note);
        if shown.iter().any(|&s| s) {
            out.push_str("\n\n");
            out.push_str(TYPES_HEADER);
            for ((name, ty), _) in full.definitions.iter().zip(&shown).filter(|(_, s)| **s) {
                out.push('\n');
                out.push_str(&definition(name, ty, lang));
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
            out.push_str("\n\n");
            out.push_str(&sections_left_out(
                lang,
                sections.len() - self.headers,
                left,
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

/// A signature line's name without the section prefix.
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
