//! One tool as one signature line: `name(required, optional?) -> returns — First sentence.`
//!
//! Pure functions over the catalog's [`Tool`], tested on exact strings.

use super::lower::{Lowerer, Shapes};
use super::ty::Signature;
use crate::catalog::Tool;

/// Longest summary kept from a tool's description; the whole text is in `describe()`.
pub const MAX_SUMMARY_CHARS: usize = 44;

/// Longest summary of the rich description (the whole first sentence where the budget allows):
/// a first "sentence" that runs on past this is a paragraph, which `describe()` has.
pub const MAX_RICH_SUMMARY_CHARS: usize = 200;

/// Lowers a tool to its signature. Recursive shapes go into `shapes`; notes worth reporting
/// (unresolvable refs, depth cuts) are returned.
pub fn signature(tool: &Tool, shapes: &mut Shapes) -> (Signature, Vec<String>) {
    let mut notes = Vec::new();
    let params = {
        let mut lowerer = Lowerer::new(&tool.input_schema, &tool.name, shapes);
        let params = lowerer.params();
        notes.append(&mut lowerer.notes);
        params
    };
    let returns = tool.output_schema.as_ref().map(|schema| {
        // A separate owner: output `$defs` are not the input's.
        let owner = format!("{} output", tool.name);
        let mut lowerer = Lowerer::new(schema, &owner, shapes);
        let ty = lowerer.lower(schema, 0);
        notes.append(&mut lowerer.notes);
        ty
    });
    let sig = Signature {
        name: tool.python_name.clone(),
        params,
        returns,
        summary: summary(summarized(tool), MAX_SUMMARY_CHARS),
    };
    (sig, notes)
}

/// The text a tool's summary is taken from: its description, else its title.
fn summarized(tool: &Tool) -> &str {
    if tool.description.trim().is_empty() {
        tool.title.as_deref().unwrap_or("")
    } else {
        &tool.description
    }
}

/// The summary of a tool's line in the rich description: the whole first sentence (up to
/// [`MAX_RICH_SUMMARY_CHARS`], never cut inside a word), then its parameter notes in brackets
/// (`Sleep for a while. [ms: 0..60000 ms]`). `sig` is the tool's signature, for the order of
/// its parameters.
pub fn rich_summary(tool: &Tool, sig: &Signature) -> String {
    let sentence = summary(summarized(tool), MAX_RICH_SUMMARY_CHARS);
    let notes = super::notes::notes(&tool.input_schema, &sig.params);
    match (sentence.is_empty(), notes.is_empty()) {
        (_, true) => sentence,
        (true, false) => format!("[{notes}]"),
        (false, false) => format!("{sentence} [{notes}]"),
    }
}

/// The first sentence of a description, on one line, at most `max_chars` characters (cut
/// before a word with `…`, never inside one; empty when the first word alone is too long).
pub fn summary(description: &str, max_chars: usize) -> String {
    let first_paragraph = description.trim().split("\n\n").next().unwrap_or("");
    let flat = first_paragraph
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let sentence = first_sentence(&flat);
    if sentence.chars().count() <= max_chars {
        return sentence.to_string();
    }
    // Never mid-word: at the last space that fits (a cut word reads as another word, or as
    // none); a first word that does not fit alone (a URL) leaves no summary, `describe()` has it.
    let keep = max_chars.saturating_sub(1);
    let cut: String = sentence.chars().take(keep).collect();
    let cut = if sentence.chars().nth(keep) == Some(' ') {
        // The last word ends right at the cut.
        cut.as_str()
    } else {
        let Some(i) = cut.rfind(' ') else {
            return String::new();
        };
        &cut[..i]
    };
    format!("{}…", cut.trim_end_matches([',', ';', ':', ' ', '.', '-']))
}

fn first_sentence(text: &str) -> &str {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_none_or(|&n| n == b' ')
            && !is_abbreviation(&text[..i])
        {
            return &text[..=i];
        }
    }
    text
}

/// `e.g.`, `i.e.`, `etc.`, `vs.` and single letters do not end a sentence.
fn is_abbreviation(before: &str) -> bool {
    let word = before.rsplit(' ').next().unwrap_or("").to_ascii_lowercase();
    matches!(
        word.as_str(),
        "e.g" | "i.e" | "etc" | "vs" | "approx" | "incl"
    ) || (word.len() == 1 && word.chars().all(|c| c.is_ascii_alphabetic()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Class, Origin};
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    fn tool(name: &str, description: &str, input: Value, output: Option<Value>) -> Tool {
        Tool {
            name: name.into(),
            python_name: name.replace('-', "_"),
            js_name: name.replace('-', "_"),
            title: None,
            description: description.into(),
            input_schema: input,
            output_schema: output,
            annotations: None,
            origin: Origin::Host,
            class: Class::Ptc,
        }
    }

    fn line(t: &Tool) -> String {
        signature(t, &mut Shapes::default()).0.to_string()
    }

    #[test]
    fn the_design_examples() {
        let read = tool(
            "read",
            "Read a file. Returns its text.",
            json!({"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}),
            None,
        );
        assert_eq!(line(&read), "read(file_path) — Read a file.");
        let bash = tool(
            "bash",
            "",
            json!({"type": "object", "properties": {"timeout": {"type": "integer"}, "command": {"type": "string"}}, "required": ["command"]}),
            None,
        );
        assert_eq!(line(&bash), "bash(command, timeout?: int)");
        let issues = tool(
            "github__list_issues",
            "List issues in a GitHub repository",
            json!({"type": "object", "properties": {
                "owner": {"type": "string"}, "repo": {"type": "string"},
                "state": {"type": "string", "enum": ["open", "closed", "all"]}
            }, "required": ["owner", "repo"]}),
            Some(json!({"type": "object"})),
        );
        assert_eq!(
            line(&issues),
            "github__list_issues(owner, repo, state?: Literal['open', 'closed', 'all']) -> dict — List issues in a GitHub repository"
        );
    }

    #[test]
    fn nested_shapes_and_outputs() {
        let edit = tool(
            "edit_file",
            "Make line-based edits to a text file.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "edits": {"type": "array", "items": {"type": "object", "properties": {
                    "oldText": {"type": "string"}, "newText": {"type": "string"}},
                    "required": ["oldText", "newText"], "additionalProperties": false}},
                "dryRun": {"type": "boolean", "default": false}
            }, "required": ["path", "edits"]}),
            Some(
                json!({"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}),
            ),
        );
        assert_eq!(
            line(&edit),
            "edit_file(path, edits: list[{oldText, newText}], dryRun?: bool = False) -> {content} — Make line-based edits to a text file."
        );
    }

    #[test]
    fn open_and_odd_inputs() {
        let open = tool("any", "x", json!({"type": "object"}), None);
        assert_eq!(line(&open), "any(**kwargs) — x");
        let typed = tool(
            "kv",
            "",
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            None,
        );
        assert_eq!(line(&typed), "kv(**kwargs: str)");
        let union = tool(
            "u",
            "",
            json!({"anyOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}
            ]}),
            None,
        );
        assert_eq!(line(&union), "u(**kwargs: {a} | {b: int})");
        let quoted = tool(
            "q",
            "",
            json!({"type": "object", "properties": {"x-api-key": {"type": "string"}}}),
            None,
        );
        assert_eq!(line(&quoted), "q('x-api-key'?)");
    }

    #[test]
    fn rich_summaries() {
        let rich = |description: &str, input: Value| {
            let t = tool("t", description, input, None);
            let sig = signature(&t, &mut Shapes::default()).0;
            rich_summary(&t, &sig)
        };
        let sleep = json!({"type": "object", "properties": {
            "label": {"type": "string", "maxLength": 32},
            "pause": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "in milliseconds"}
        }, "required": ["pause"]});
        assert_eq!(
            rich(
                "Sleep for a while, then wake up and report how long the sleep was. More.",
                sleep.clone()
            ),
            "Sleep for a while, then wake up and report how long the sleep was. [pause: 0..60000 ms; label: len <= 32]"
        );
        assert_eq!(rich("", sleep), "[pause: 0..60000 ms; label: len <= 32]");
        let plain = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert_eq!(rich("Find things. More.", plain.clone()), "Find things.");
        let long = format!("{}end.", "word ".repeat(60));
        let cut = rich(&long, plain);
        assert_eq!(cut.chars().count(), MAX_RICH_SUMMARY_CHARS);
        assert!(cut.ends_with("word…"), "{cut}");
    }

    #[test]
    fn summaries() {
        assert_eq!(summary("Read a file. Then more.", 96), "Read a file.");
        assert_eq!(
            summary("Use e.g. this one. Next.", 96),
            "Use e.g. this one."
        );
        assert_eq!(
            summary("  Multi\n line\n\nsecond paragraph", 96),
            "Multi line"
        );
        assert_eq!(
            summary("Version 1.2 is out. Yes.", 96),
            "Version 1.2 is out."
        );
        assert_eq!(summary("", 96), "");
        let long = "word ".repeat(2000);
        let s = summary(&long, 96);
        assert!(s.chars().count() <= 96, "{s}");
        assert!(s.ends_with("word…"), "{s}");
        let unbroken = "x".repeat(10_000);
        assert_eq!(summary(&unbroken, 10), "");
        assert_eq!(
            summary("Read the complete contents of a file as text.", 30),
            "Read the complete contents of…"
        );
        assert_eq!(
            summary("Readthecompletecontents of a file.", 30),
            "Readthecompletecontents of a…"
        );
        assert_eq!(summary("Readthecompletecontentsofafile.", 30), "");
    }
}
