//! Python names for tools: the name the model writes in code, mapped back to the name that is
//! dispatched.
//!
//! The normalisation is the one the LibreChat client and codeapi use (`[-\s]` → `_`, other
//! non-identifier characters dropped, `_` before a leading digit, `_tool` after a keyword), so a
//! tool has the same Python name here as there. Collisions are resolved deterministically: a
//! tool whose name already is its normalised form keeps it, the others get `_2`, `_3`, … in
//! order of their original names. Every rename is reported.

use std::collections::{BTreeMap, HashSet};

/// Python's hard keywords (and the soft ones that would shadow builtins in the SDK).
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Names the SDK itself defines in the run's globals; a tool may not take them.
pub const SDK_RESERVED: &[&str] = &[
    "tools",
    "call_tool",
    "describe",
    "save_file",
    "ToolError",
    "ToolInputError",
    "ToolDenied",
    "asyncio",
    "json",
    "re",
    "print",
];

/// `get-weather` → `get_weather`, `my tool` → `my_tool`, `for` → `for_tool`, `123data` →
/// `_123data`, `a.b` → `ab`, `` → `tool`.
pub fn python_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .filter_map(|c| match c {
            '-' => Some('_'),
            c if c.is_whitespace() => Some('_'),
            c if c.is_ascii_alphanumeric() || c == '_' => Some(c),
            _ => None,
        })
        .collect();
    if out.is_empty() {
        out.push_str("tool");
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if KEYWORDS.contains(&out.as_str()) || SDK_RESERVED.contains(&out.as_str()) {
        out.push_str("_tool");
    }
    out
}

/// A tool whose Python name is not simply [`python_name`] of its name, because of a collision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    pub name: String,
    pub python_name: String,
    pub collided_with: String,
}

/// Assigns a unique Python name to each name (which must be unique). Returns the names in input
/// order and the renames made.
pub fn assign<'a>(names: impl IntoIterator<Item = &'a str>) -> (Vec<String>, Vec<Rename>) {
    let names: Vec<&str> = names.into_iter().collect();
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        groups.entry(python_name(name)).or_default().push(i);
    }
    let mut taken: HashSet<String> = groups.keys().cloned().collect();
    let mut assigned = vec![String::new(); names.len()];
    let mut renames = Vec::new();
    for (base, mut members) in groups {
        // Exact matches first, then by original name: independent of input order.
        members.sort_by_key(|&i| (names[i] != base, names[i]));
        let winner = names[members[0]];
        assigned[members[0]] = base.clone();
        let mut n = 2;
        for &i in &members[1..] {
            let candidate = loop {
                let candidate = format!("{base}_{n}");
                n += 1;
                if taken.insert(candidate.clone()) {
                    break candidate;
                }
            };
            renames.push(Rename {
                name: names[i].to_string(),
                python_name: candidate.clone(),
                collided_with: winner.to_string(),
            });
            assigned[i] = candidate;
        }
    }
    (assigned, renames)
}

/// JavaScript's reserved words (ES2024, strict mode and modules: user code is an ES module)
/// and the names a JavaScript run's globals already have (the SDK's own and node's): a
/// function cannot be bound to the first, and would hide the second.
const JS_TAKEN: &[&str] = &[
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "arguments",
    "eval",
    "undefined",
    "NaN",
    "Infinity",
    "globalThis",
    "tools",
    "callTool",
    "describe",
    "searchTools",
    "saveFile",
    "ToolError",
    "ToolInputError",
    "ToolDenied",
    "console",
    "process",
    "require",
    "module",
    "exports",
    "Buffer",
    "Promise",
    "JSON",
    "Math",
    "Object",
    "Array",
    "String",
    "Number",
    "Boolean",
    "Symbol",
    "Error",
    "TypeError",
    "Date",
    "RegExp",
    "Map",
    "Set",
    "URL",
    "fetch",
    "setTimeout",
    "setInterval",
    "setImmediate",
    "clearTimeout",
    "clearInterval",
    "queueMicrotask",
    "structuredClone",
    "atob",
    "btoa",
    "crypto",
    "performance",
    "navigator",
];

/// Whether JavaScript has taken `name` ([`JS_TAKEN`]): a reserved word or a run's global.
pub fn js_taken(name: &str) -> bool {
    JS_TAKEN.contains(&name)
}

/// A tool's JavaScript name, from its Python name (already an ASCII identifier, unique in the
/// catalog): the same name, with `_tool` after a name [`JS_TAKEN`] has (`delete` →
/// `delete_tool`, `console` → `console_tool`), again while that is another tool's Python name
/// (`is_tool`: `delete` beside a `delete_tool` is `delete_tool_tool`), so that JavaScript names
/// are unique too. The catalog gives each tool its own ([`crate::catalog::Tool::js_name`]),
/// which the JavaScript SDK's functions and the description in JavaScript both use.
pub fn js_name(python_name: &str, is_tool: impl Fn(&str) -> bool) -> String {
    if !JS_TAKEN.contains(&python_name) {
        return python_name.to_string();
    }
    let mut name = format!("{python_name}_tool");
    while is_tool(&name) {
        name.push_str("_tool");
    }
    name
}

/// Whether `name` is a Python identifier (ASCII: what our normalised names are made of).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn javascript_names_are_python_names_never_a_taken_word() {
        for (python, js) in [
            ("get_weather", "get_weather"),
            ("delete", "delete_tool"),
            ("console", "console_tool"),
            ("class_tool", "class_tool"),
            ("demo__add", "demo__add"),
        ] {
            assert_eq!(js_name(python, |_| false), js, "{python}");
        }
        // Unique beside a tool that has the name `_tool` would give.
        let tools = ["delete", "delete_tool", "delete_tool_tool_x"];
        let is_tool = |name: &str| tools.contains(&name);
        assert_eq!(js_name("delete", is_tool), "delete_tool_tool");
        assert_eq!(js_name("delete_tool", is_tool), "delete_tool");
    }

    #[test]
    fn normalises_like_the_design_says() {
        let cases = [
            ("get-weather", "get_weather"),
            ("my tool", "my_tool"),
            ("for", "for_tool"),
            ("123data", "_123data"),
            ("a.b", "ab"),
            ("github__list_issues", "github__list_issues"),
            (
                "sequential-thinking__sequentialthinking",
                "sequential_thinking__sequentialthinking",
            ),
            ("API-get-user", "API_get_user"),
            ("ünïcode", "ncode"),
            ("!!!", "tool"),
            ("describe", "describe_tool"),
        ];
        for (name, want) in cases {
            assert_eq!(python_name(name), want, "{name}");
        }
    }

    #[test]
    fn collisions_are_resolved_the_same_whatever_the_order() {
        let a = ["get-weather", "get_weather", "get weather", "get_weather_2"];
        let (names, renames) = assign(a);
        assert_eq!(
            names,
            [
                "get_weather_4",
                "get_weather",
                "get_weather_3",
                "get_weather_2"
            ]
        );
        assert_eq!(
            renames,
            vec![
                Rename {
                    name: "get weather".into(),
                    python_name: "get_weather_3".into(),
                    collided_with: "get_weather".into()
                },
                Rename {
                    name: "get-weather".into(),
                    python_name: "get_weather_4".into(),
                    collided_with: "get_weather".into()
                },
            ]
        );
        let reversed: Vec<&str> = a.iter().rev().copied().collect();
        let (names_rev, _) = assign(reversed);
        let mut forward: Vec<_> = a.iter().zip(&names).collect();
        let mut backward: Vec<_> = a.iter().rev().zip(&names_rev).collect();
        forward.sort();
        backward.sort();
        assert_eq!(forward, backward);
    }

    #[test]
    fn assigned_names_are_unique_identifiers() {
        let input = ["a", "a!", "a?", "a-", "a_", "1", "_1", "", " "];
        let (names, _) = assign(input);
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(names.iter().all(|n| is_identifier(n)));
    }
}
