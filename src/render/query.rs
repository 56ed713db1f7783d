//! A search query as tool search reads it: each concrete value a user types followed by its
//! kind in parentheses (`todo.txt` → `todo.txt (file)`, `PROJ-12` → `PROJ-12 (issue)`).
//!
//! Users ask with values, not with the words tools are described by: "whats in my todo.txt",
//! "comment on PROJ-12 that the fix is deployed", "tell #general the deploy is done". Neither
//! BM25F nor the sentence model knows that `todo.txt` is a file or `PROJ-12` an issue, and the
//! model reads such tokens as noise (`OPS-77` drew `get_issue_sla` before `get_worklog`). The
//! kind word says it in the tools' own vocabulary; the value stays, so a tool that names it
//! still matches. Chosen on the tuning half of `benches/search-queries-users.json` (issue 38):
//! see docs/search.md for what it gave. A pure function of the text: it must not know the
//! catalog.

/// Characters that end a sentence or clause after a value (`todo.txt?`, `PROJ-5,`); they are
/// not part of it.
const TRAILING: &[char] = &[',', '.', '?', '!', ':', ';', ')'];

/// `query` with each value's kind after it, whitespace folded to single spaces.
pub fn typed_query(query: &str) -> String {
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        if let Some(end) = quote_end(&words, i) {
            out.extend(words[i..=end].iter().map(|w| w.to_string()));
            if let Some(last) = out.last_mut() {
                last.push_str(" (text)");
            }
            i = end + 1;
            continue;
        }
        let word = words[i];
        let value = word.trim_end_matches(TRAILING);
        out.push(match kind(value) {
            Some(kind) => format!("{value} ({kind}){}", &word[value.len()..]),
            None => word.to_string(),
        });
        i += 1;
    }
    out.join(" ")
}

/// Where a quoted text that opens at `words[start]` closes ('fix login bug', "on it"): the
/// index of the word ending with the same quote, if any. An apostrophe inside a word (`it's`)
/// opens nothing.
fn quote_end(words: &[&str], start: usize) -> Option<usize> {
    let quote = words[start]
        .chars()
        .next()
        .filter(|c| matches!(c, '\'' | '"'))?;
    (start..words.len()).find(|&j| {
        let word = words[j].trim_end_matches(&[',', '.', '?', '!', ':', ';'][..]);
        word.ends_with(quote) && (j > start || word.chars().count() > 1)
    })
}

/// The kind of a value, if the word is one: a web address, an issue key, a chat channel, a
/// user handle, a path or a file name.
fn kind(value: &str) -> Option<&'static str> {
    let rest = |prefix: char| value.strip_prefix(prefix).and_then(|r| r.chars().next());
    if value.starts_with("http://") || value.starts_with("https://") {
        Some("web page")
    } else if is_issue_key(value) {
        Some("issue")
    } else if rest('#').is_some_and(char::is_alphabetic) {
        Some("channel")
    } else if rest('@').is_some_and(char::is_alphanumeric) {
        Some("user")
    } else if value.contains('/') && value.chars().count() > 1 {
        Some("path")
    } else if is_file_name(value) {
        Some("file")
    } else {
        None
    }
}

/// `PROJ-12`, `OPS-77`, `CHG-12`: capitals (digits after the first), a dash, digits.
fn is_issue_key(value: &str) -> bool {
    let Some((project, number)) = value.split_once('-') else {
        return false;
    };
    project.starts_with(|c: char| c.is_ascii_uppercase())
        && project
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit())
}

/// `todo.txt`, `Cargo.toml`, `.gitlab-ci.yml`: name characters, then an extension of one to
/// five letters or digits starting with a letter; a name before it, if any, has a letter (so
/// `3.5` is no file).
fn is_file_name(value: &str) -> bool {
    let Some((stem, extension)) = value.rsplit_once('.') else {
        return false;
    };
    let name_chars = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | '-');
    let first = stem.split('.').next().unwrap_or("");
    (1..=5).contains(&extension.chars().count())
        && extension.starts_with(|c: char| c.is_ascii_alphabetic())
        && extension.chars().all(|c| c.is_ascii_alphanumeric())
        && stem.chars().all(name_chars)
        && (first.is_empty() || first.chars().any(char::is_alphabetic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn values_get_their_kind() {
        let cases = [
            ("whats in my todo.txt", "whats in my todo.txt (file)"),
            (
                "read .gitlab-ci.yml from the infra project",
                "read .gitlab-ci.yml (file) from the infra project",
            ),
            (
                "what are the permissions on /etc/hosts and when",
                "what are the permissions on /etc/hosts (path) and when",
            ),
            (
                "show me the whole folder structure of ~/projects/site, nested",
                "show me the whole folder structure of ~/projects/site (path), nested",
            ),
            (
                "mark PROJ-20 as blocked by PROJ-18",
                "mark PROJ-20 (issue) as blocked by PROJ-18 (issue)",
            ),
            (
                "tell #general that the deploy is done",
                "tell #general (channel) that the deploy is done",
            ),
            ("ping @dana.k now", "ping @dana.k (user) now"),
            (
                "get me the page at https://news.example.com/today",
                "get me the page at https://news.example.com/today (web page)",
            ),
            (
                "commit this with the message 'fix login bug'",
                "commit this with the message 'fix login bug' (text)",
            ),
            (
                "is there anything saying \"out of stock\"?",
                "is there anything saying \"out of stock\"? (text)",
            ),
            (
                "did PROJ-5 miss its SLA?",
                "did PROJ-5 (issue) miss its SLA?",
            ),
        ];
        for (query, want) in cases {
            assert_eq!(typed_query(query), want, "{query}");
        }
    }

    #[test]
    fn plain_words_numbers_and_apostrophes_stay() {
        for query in [
            "it's 3pm in London, what's that in New York?",
            "Kevin doesn't need notifications anymore",
            "upgrade to version 3.5 of the API",
            "tell me a joke.",
            "e-mail the team",
            "",
        ] {
            assert_eq!(typed_query(query), query, "{query}");
        }
        // An opening quote never closed is no text: the words are read as they are.
        assert_eq!(typed_query("say 'hello there"), "say 'hello there");
        assert_eq!(typed_query("a  lot\tof   space"), "a lot of space");
    }
}
