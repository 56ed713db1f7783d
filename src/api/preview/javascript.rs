//! A JavaScript or TypeScript preview: the code read by oxc in the sidecar, as a run's code is
//! before node starts (`run::javascript::module`), never run.
//!
//! What counts as naming a tool, as `assets/preview.py` does for Python: a tool's JavaScript
//! name used anywhere (called, awaited, passed around uncalled) unless the code binds that
//! name itself, `tools.x` and `tools["x"]`, `callTool("x")` (a catalog name or a JavaScript
//! name), and a name called that the code never binds and that is none of JavaScript's, node's
//! or the SDK's globals (maybe an unknown tool). Where the tool is chosen at run time
//! (`tools[name]`, `callTool(name)`, `eval`), the place is listed as dynamic.

use crate::catalog::names::js_taken;
use crate::run::javascript::{SyntaxError, refuse_deep};
use oxc_allocator::Allocator;
use oxc_ast::ast::{Argument, CallExpression, Expression, IdentifierReference, MemberExpression};
use oxc_ast_visit::{Visit, walk};
use oxc_parser::Parser;
use oxc_semantic::{Scoping, SemanticBuilder};
use oxc_span::SourceType;

/// Places reported where a tool is chosen at run time (as in Python's preview).
const MAX_DYNAMIC: usize = 100;

/// Distinct names reported that are no tool's JavaScript name (each maybe an unknown tool,
/// whose closest tools the sidecar works out), as in Python's preview.
const MAX_OTHER: usize = 200;

/// Globals a call may name that are no tool and not in `names::JS_TAKEN` (JavaScript's own
/// functions and node's): calling one is no call of an unknown tool.
const CALLABLE_GLOBALS: &[&str] = &[
    "parseInt",
    "parseFloat",
    "isNaN",
    "isFinite",
    "encodeURIComponent",
    "decodeURIComponent",
    "encodeURI",
    "decodeURI",
    "escape",
    "unescape",
    "BigInt",
    "clearImmediate",
    "Function",
    "Reflect",
    "Intl",
    "Atomics",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "Proxy",
    "Int8Array",
    "Uint8Array",
    "Float64Array",
    "ArrayBuffer",
    "DataView",
    "TextEncoder",
    "TextDecoder",
    "AbortController",
    "AggregateError",
    "RangeError",
    "SyntaxError",
    "ReferenceError",
    "EvalError",
    "URIError",
    "performance",
    "Blob",
    "Headers",
    "Request",
    "Response",
    "FormData",
    "URLSearchParams",
];

/// A name the code may reach a tool by: by its JavaScript name (`js`), or as `callTool` takes
/// it (`name`: the catalog name, else the JavaScript name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub by_name: bool,
    pub line: u64,
}

/// What a read of the code found.
#[derive(Debug, Default)]
pub struct Read {
    pub found: Vec<Named>,
    /// The places where the tool is chosen at run time: (line, what).
    pub dynamic: Vec<(u64, String)>,
    /// The code does not parse: (line, message).
    pub syntax_error: Option<(u64, String)>,
    /// Names or dynamic places were left out past [`MAX_OTHER`] or [`MAX_DYNAMIC`].
    pub truncated: bool,
}

/// Reads `code` (TypeScript when `typescript`); `is_tool` says whether a name is a tool's
/// JavaScript name. Blocking (a parse), and recursing as deep as the code nests within
/// `nesting::MAX_DEPTH`: call it on `run::javascript::on_parse_stack`.
pub fn read(code: &str, typescript: bool, is_tool: impl Fn(&str) -> bool) -> Read {
    let allocator = Allocator::default();
    let source_type = match typescript {
        true => SourceType::ts(),
        false => SourceType::mjs(),
    };
    let lines = LineStarts::of(code);
    if let Err(error) = refuse_deep(code) {
        return Read {
            syntax_error: Some((error.line as u64, error.message)),
            ..Read::default()
        };
    }
    let parsed = Parser::new(&allocator, code, source_type).parse();
    // Where a run's error would be ([`SyntaxError::first`]).
    if let Some(error) = SyntaxError::first(code, &parsed.errors) {
        return Read {
            syntax_error: Some((error.line as u64, error.message)),
            ..Read::default()
        };
    }
    let semantic = SemanticBuilder::new().build(&parsed.program).semantic;
    let mut reader = Reader {
        scoping: semantic.scoping(),
        lines,
        is_tool: &is_tool,
        read: Read::default(),
        others: Default::default(),
    };
    reader.visit_program(&parsed.program);
    reader.read
}

struct Reader<'s, F> {
    scoping: &'s Scoping,
    lines: LineStarts,
    is_tool: &'s F,
    read: Read,
    /// The distinct names found that are no tool's.
    others: std::collections::HashSet<String>,
}

impl<F: Fn(&str) -> bool> Reader<'_, F> {
    /// Whether `id` is a global: the code binds no such name where it is used.
    fn global(&self, id: &IdentifierReference) -> bool {
        id.reference_id
            .get()
            .is_none_or(|r| self.scoping.get_reference(r).symbol_id().is_none())
    }

    fn add(&mut self, name: &str, by_name: bool, offset: u32) {
        if !(self.is_tool)(name) && !self.others.contains(name) {
            if self.others.len() >= MAX_OTHER {
                self.read.truncated = true;
                return;
            }
            self.others.insert(name.to_string());
        }
        let line = self.lines.line(offset);
        self.read.found.push(Named {
            name: name.to_string(),
            by_name,
            line,
        });
    }

    fn dynamic(&mut self, offset: u32, what: &str) {
        if self.read.dynamic.len() < MAX_DYNAMIC {
            let line = self.lines.line(offset);
            self.read.dynamic.push((line, what.to_string()));
        } else {
            self.read.truncated = true;
        }
    }

    /// `tools.x`, `tools["x"]` or `tools[name]`, where `tools` is the SDK's.
    fn member_of_tools(&mut self, member: &MemberExpression) {
        let Expression::Identifier(object) = member.object() else {
            return;
        };
        if object.name != "tools" || !self.global(object) {
            return;
        }
        match member {
            MemberExpression::StaticMemberExpression(m) => {
                self.add(&m.property.name, false, m.property.span.start);
            }
            MemberExpression::ComputedMemberExpression(m) => match literal(&m.expression) {
                Some(name) => self.add(&name, false, m.span.start),
                None => self.dynamic(m.span.start, "tools[<a name chosen at run time>]"),
            },
            MemberExpression::PrivateFieldExpression(_) => {}
        }
    }
}

impl<'a, F: Fn(&str) -> bool> Visit<'a> for Reader<'_, F> {
    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if let Expression::Identifier(callee) = &it.callee
            && self.global(callee)
        {
            let name = callee.name.as_str();
            let first = it.arguments.first().and_then(Argument::as_expression);
            match name {
                "callTool" => match first.and_then(literal) {
                    Some(tool) => self.add(&tool, true, it.span.start),
                    None => self.dynamic(it.span.start, "callTool(<a name chosen at run time>)"),
                },
                "eval" | "Function" => self.dynamic(
                    it.span.start,
                    &format!("{name}(...): code run from a string"),
                ),
                _ if (self.is_tool)(name) || js_taken(name) => {}
                _ if CALLABLE_GLOBALS.contains(&name) => {}
                // Maybe an unknown tool: the sidecar says whether it is one.
                _ => self.add(name, false, callee.span.start),
            }
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        if (self.is_tool)(&it.name) && self.global(it) {
            self.add(&it.name, false, it.span.start);
        }
    }

    fn visit_member_expression(&mut self, it: &MemberExpression<'a>) {
        self.member_of_tools(it);
        walk::walk_member_expression(self, it);
    }
}

/// A string the expression always is: a string literal, or a template without `${}`.
fn literal(expression: &Expression) -> Option<String> {
    match expression {
        Expression::StringLiteral(s) => Some(s.value.to_string()),
        Expression::TemplateLiteral(t) if t.expressions.is_empty() => t
            .quasis
            .first()
            .and_then(|q| q.value.cooked.as_ref())
            .map(|c| c.to_string()),
        _ => None,
    }
}

/// Where each line of the code starts, for a byte offset's line number (from 1).
struct LineStarts(Vec<u32>);

impl LineStarts {
    fn of(code: &str) -> LineStarts {
        let starts = std::iter::once(0)
            .chain(code.match_indices('\n').map(|(i, _)| i as u32 + 1))
            .collect();
        LineStarts(starts)
    }

    fn line(&self, offset: u32) -> u64 {
        self.0.partition_point(|&start| start <= offset) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn found(code: &str) -> Vec<(String, bool, u64)> {
        let tools = ["get_weather", "demo__lookup_country"];
        read(code, false, |n| tools.contains(&n))
            .found
            .into_iter()
            .map(|n| (n.name, n.by_name, n.line))
            .collect()
    }

    #[test]
    fn tools_are_found_however_the_code_names_them() {
        let code = "const w = await get_weather({city: \"Paris\"});\n\
                    const c = await tools.demo__lookup_country({code: \"FR\"});\n\
                    await callTool(\"demo/search\", {});\n\
                    const f = [1].map(get_weather);\n\
                    await tools[\"get_weather\"]({});\n\
                    console.log(parseInt(\"1\"), JSON.stringify(w));\n\
                    await get_wether({city: \"x\"});\n";
        assert_eq!(
            found(code),
            [
                ("get_weather".into(), false, 1),
                ("demo__lookup_country".into(), false, 2),
                ("demo/search".into(), true, 3),
                ("get_weather".into(), false, 4),
                ("get_weather".into(), false, 5),
                ("get_wether".into(), false, 7),
            ]
        );
    }

    #[test]
    fn the_codes_own_names_are_not_tools_and_run_time_choices_are_dynamic() {
        let code = "function get_weather() { return 1 }\nget_weather();\nconst tools = {};\n\
                    tools.x;\nconst name = \"a\";\nawait callTool(name, {});\n";
        assert_eq!(found(code), []);
        let read = read(code, false, |_| false);
        assert_eq!(
            read.dynamic,
            [(6, "callTool(<a name chosen at run time>)".to_string())]
        );
        let read = super::read(
            "await globalThis.tools[n]({});\neval(\"x\")\n",
            false,
            |_| false,
        );
        assert_eq!(read.dynamic.len(), 1, "{:?}", read.dynamic);
    }

    #[test]
    fn names_that_are_no_tool_are_bounded() {
        let code: String = (0..1_000)
            .map(|i| format!("await t{i}();\nawait get_weather();\n"))
            .collect();
        let r = read(&code, false, |n| n == "get_weather");
        let others: std::collections::HashSet<_> = r
            .found
            .iter()
            .filter(|n| n.name != "get_weather")
            .map(|n| &n.name)
            .collect();
        assert_eq!(others.len(), MAX_OTHER);
        assert_eq!(
            r.found.iter().filter(|n| n.name == "get_weather").count(),
            1_000
        );
        assert!(r.truncated);
    }

    #[test]
    fn typescript_is_read_and_a_syntax_error_is_at_its_line() {
        let r = read(
            "const a: number = 1;\nawait get_weather({});\n",
            true,
            |n| n == "get_weather",
        );
        assert_eq!(r.found.len(), 1);
        let r = read("const a = 1;\nlet = = 2;\n", false, |_| false);
        assert_eq!(r.syntax_error.map(|e| e.0), Some(2));
    }
}
