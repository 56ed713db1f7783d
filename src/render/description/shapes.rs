//! Shapes that repeat across a catalog's signatures, named once (`Entity = {…}`) where that is
//! shorter than writing them out. Decided on the Python printing, so that both languages name
//! the same shapes.

use super::super::lower::{is_reserved, shape_name};
use super::super::ty::{Params, Signature, Ty};
use std::collections::HashMap;

/// Names object shapes that repeat, while naming one saves characters: greedily, the best
/// saving first, until none saves. Deterministic: ties go to the shape seen first.
pub(super) fn share_shapes(sigs: &mut [Signature], definitions: &mut Vec<(String, Ty)>) {
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
