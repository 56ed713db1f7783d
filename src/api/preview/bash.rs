//! The words of a bash script in a command's place: where a bash run may call a tool function
//! (`search '{"q": "x"}'`, `x=$(search)`, `bash -c 'search'`, `if search; then`).
//!
//! A scanner, not bash's parser: it knows words, quotes, comments, the operators that start a
//! command (`;`, `&`, `|`, `(`, `)`, newline, the keywords before a command), assignments and
//! redirections before a command, here-documents (their bodies are data), and the code inside
//! `$( )`, backquotes, `"$( )"` and the quoted argument of a shell's `-c`. Pure and bounded: the
//! script is scanned once per level of nesting it reaches, at most [`MAX_DEPTH`] levels, and at
//! most [`MAX_COMMANDS`] words are kept. It must not judge whether a word is a tool (the
//! caller maps the words to the catalog's bash names).

/// Levels of code inside code scanned (`"$(bash -c '$(x)')"` is three); deeper code is data.
pub const MAX_DEPTH: usize = 8;

/// Command words kept: a script naming more commands than this is cut (`truncated`).
pub const MAX_COMMANDS: usize = 10_000;

/// bash's keywords (and `[[ ]]`, `!`, `{ }`): never a command of their own.
const KEYWORDS: [&str; 22] = [
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "time", "coproc", "!", "{", "}", "[[", "]]",
];

/// The keywords after which the next word is still in a command's place.
const BEFORE_COMMAND: [&str; 11] = [
    "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "coproc",
];

/// Shells whose `-c` argument is code.
const SHELLS: [&str; 5] = ["bash", "sh", "dash", "zsh", "ksh"];

/// One word in a command's place, and the line it is on (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub word: String,
    pub line: usize,
}

/// What [`commands`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Commands {
    /// In the order they appear (code inside a word before the word).
    pub found: Vec<Command>,
    /// More than [`MAX_COMMANDS`] words were in a command's place.
    pub truncated: bool,
}

/// The words of `script` in a command's place that could name a function
/// (`[A-Za-z_][A-Za-z0-9_]*`), each with its line.
pub fn commands(script: &str) -> Commands {
    let mut out = Commands::default();
    Scanner {
        src: script.as_bytes(),
        out: &mut out,
    }
    .code(0, script.len(), 1, 0);
    out
}

struct Scanner<'a> {
    src: &'a [u8],
    out: &'a mut Commands,
}

/// The word being read and what the words before it in its command said.
#[derive(Default)]
struct Words {
    word: Vec<u8>,
    /// The word had quotes (`''` is a word, though empty).
    quoted: bool,
    line: usize,
    /// The next word is in a command's place.
    command: bool,
    /// The next word is a redirection's target, or a here-document's delimiter.
    target: Option<Target>,
    /// A shell was named in this command (`bash`, `/bin/sh`), and the last word was `-c`.
    shell: bool,
    after_c: bool,
    /// Here-documents whose bodies start at the next newline: delimiter, `<<-`.
    heredocs: Vec<(Vec<u8>, bool)>,
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    File,
    Heredoc { strip_tabs: bool },
}

fn newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

fn is_name(word: &[u8]) -> bool {
    matches!(word.first(), Some(c) if c.is_ascii_alphabetic() || *c == b'_')
        && word.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// `NAME=...`, `NAME+=...`, `NAME[i]=...`: an assignment before a command.
fn is_assignment(word: &[u8]) -> bool {
    let Some(eq) = word.iter().position(|&b| b == b'=') else {
        return false;
    };
    let name = &word[..eq];
    let name = name.strip_suffix(b"+").unwrap_or(name);
    let name = match name.iter().position(|&b| b == b'[') {
        Some(bracket) if name.ends_with(b"]") => &name[..bracket],
        _ => name,
    };
    is_name(name)
}

/// The closing quote of the quoted text opening at `at` (a `'` or `"`), or `end`.
fn closing_quote(src: &[u8], at: usize, end: usize) -> usize {
    let quote = src[at];
    let mut i = at + 1;
    while i < end {
        match src[i] {
            b'\\' if quote == b'"' => i += 2,
            c if c == quote => return i,
            _ => i += 1,
        }
    }
    end
}

/// The `close` that balances the `open` at `at`, skipping quoted text, or `end`.
fn closing(src: &[u8], at: usize, end: usize, open: u8, close: u8) -> usize {
    let mut depth = 0usize;
    let mut i = at;
    while i < end {
        match src[i] {
            b'\\' => i += 1,
            b'\'' | b'"' => i = closing_quote(src, i, end),
            c if c == open => depth += 1,
            c if c == close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    end
}

/// Just past `at`, within `end`.
fn past(at: usize, end: usize) -> usize {
    (at + 1).min(end)
}

impl Scanner<'_> {
    fn record(&mut self, word: &[u8], line: usize) {
        if !is_name(word) {
            return;
        }
        if self.out.found.len() >= MAX_COMMANDS {
            self.out.truncated = true;
            return;
        }
        self.out.found.push(Command {
            word: String::from_utf8_lossy(word).into_owned(),
            line,
        });
    }

    /// Ends the word being read: recorded when it is in a command's place.
    fn end_word(&mut self, w: &mut Words) {
        if w.word.is_empty() && !w.quoted {
            return;
        }
        let word = std::mem::take(&mut w.word);
        w.quoted = false;
        match w.target.take() {
            Some(Target::Heredoc { strip_tabs }) => {
                w.heredocs.push((word, strip_tabs));
                return;
            }
            Some(Target::File) => return,
            None => {}
        }
        let base = word.rsplit(|&b| b == b'/').next().unwrap_or(&word);
        if SHELLS.iter().any(|s| s.as_bytes() == base) {
            w.shell = true;
        }
        w.after_c = w.shell
            && word.len() >= 2
            && word[0] == b'-'
            && word[1..].iter().all(u8::is_ascii_alphabetic)
            && word.contains(&b'c');
        if !w.command || is_assignment(&word) {
            return;
        }
        match std::str::from_utf8(&word) {
            Ok(k) if KEYWORDS.contains(&k) => w.command = BEFORE_COMMAND.contains(&k),
            _ => {
                self.record(&word, w.line);
                w.command = false;
            }
        }
    }

    /// A new command starts (after `;`, `|`, a newline...).
    fn separate(&mut self, w: &mut Words) {
        self.end_word(w);
        w.command = true;
        w.shell = false;
        w.after_c = false;
    }

    /// Scans `src[start..end]` as code starting on `line`, `depth` levels inside other code.
    fn code(&mut self, start: usize, end: usize, line: usize, depth: usize) {
        let src = self.src;
        let mut w = Words {
            command: true,
            line,
            ..Words::default()
        };
        let mut line = line;
        let mut i = start;
        while i < end {
            let c = src[i];
            if w.word.is_empty() && !w.quoted {
                w.line = line;
            }
            match c {
                b'\n' => {
                    self.separate(&mut w);
                    line += 1;
                    i += 1;
                    for (delimiter, strip_tabs) in std::mem::take(&mut w.heredocs) {
                        let (next, lines) = heredoc_end(src, i, end, &delimiter, strip_tabs);
                        i = next;
                        line += lines;
                    }
                    continue;
                }
                b' ' | b'\t' => self.end_word(&mut w),
                b'#' if w.word.is_empty() && !w.quoted => {
                    while i < end && src[i] != b'\n' {
                        i += 1;
                    }
                    continue;
                }
                b';' | b'(' | b')' => self.separate(&mut w),
                b'|' | b'&' if src.get(i + 1) != Some(&b'>') => self.separate(&mut w),
                b'<' | b'>' | b'&' => {
                    i = self.redirection(&mut w, i, end);
                    continue;
                }
                b'\\' => {
                    match src.get(i + 1) {
                        Some(b'\n') => line += 1,
                        Some(&next) if i + 1 < end => w.word.push(next),
                        _ => {}
                    }
                    i += 2;
                    continue;
                }
                b'\'' | b'"' => {
                    let inner_end = closing_quote(src, i, end);
                    let close = past(inner_end, end);
                    if w.word.is_empty() && w.after_c && depth < MAX_DEPTH {
                        self.code(i + 1, inner_end, line, depth + 1);
                    } else if c == b'"' && depth < MAX_DEPTH {
                        self.substitutions(i + 1, inner_end, line, depth + 1);
                    }
                    w.word.extend_from_slice(&src[i + 1..inner_end]);
                    w.quoted = true;
                    line += newlines(&src[i..close]);
                    i = close;
                    continue;
                }
                b'$' | b'`' => {
                    let next = self.substitution(i, end, line, depth);
                    w.word.extend_from_slice(&src[i..next]);
                    line += newlines(&src[i..next]);
                    i = next;
                    continue;
                }
                _ => w.word.push(c),
            }
            i += 1;
        }
        self.end_word(&mut w);
    }

    /// A redirection operator at `i` (`>`, `>>`, `2>&1`, `&>`, `<<`, `<<-`, `<<<`): its
    /// target is no command. Returns where scanning goes on.
    fn redirection(&mut self, w: &mut Words, i: usize, end: usize) -> usize {
        let src = self.src;
        // A file descriptor number before it is part of the operator, not a word.
        if w.word.iter().all(u8::is_ascii_digit) && !w.quoted {
            w.word.clear();
        } else {
            self.end_word(w);
        }
        let mut j = i;
        while j < end && matches!(src[j], b'<' | b'>' | b'&' | b'|' | b'-') && j - i < 3 {
            j += 1;
        }
        let op = &src[i..j];
        w.target = Some(if op.starts_with(b"<<") && !op.starts_with(b"<<<") {
            Target::Heredoc {
                strip_tabs: op.ends_with(b"-"),
            }
        } else {
            Target::File
        });
        // `>&2`, `2>&1`: a descriptor, no word follows.
        if op.ends_with(b"&") && src.get(j).is_some_and(u8::is_ascii_digit) {
            w.target = None;
            while j < end && (src[j].is_ascii_digit() || src[j] == b'-') {
                j += 1;
            }
        }
        j
    }

    /// `$( )`, backquotes, `$(( ))`, `${ }` or a lone `$` at `i`: code inside the first two is
    /// scanned; returns where the construct ends.
    fn substitution(&mut self, i: usize, end: usize, line: usize, depth: usize) -> usize {
        let src = self.src;
        let (inner, close) = match (src[i], src.get(i + 1), src.get(i + 2)) {
            (b'`', _, _) => {
                let mut j = i + 1;
                while j < end && src[j] != b'`' {
                    j += if src[j] == b'\\' { 2 } else { 1 };
                }
                let j = j.min(end);
                ((i + 1, j), past(j, end))
            }
            (b'$', Some(b'('), Some(b'(')) => {
                return past(closing(src, i + 1, end, b'(', b')'), end);
            }
            (b'$', Some(b'{'), _) => return past(closing(src, i + 1, end, b'{', b'}'), end),
            (b'$', Some(b'('), _) => {
                let inner_end = closing(src, i + 1, end, b'(', b')');
                ((i + 2, inner_end.max(i + 2)), past(inner_end, end))
            }
            _ => return i + 1,
        };
        if depth < MAX_DEPTH {
            self.code(inner.0, inner.1, line, depth + 1);
        }
        close
    }

    /// The code inside double quotes: only its `$( )` and backquotes.
    fn substitutions(&mut self, start: usize, end: usize, line: usize, depth: usize) {
        let src = self.src;
        let mut line = line;
        let mut i = start;
        while i < end {
            match src[i] {
                b'\\' => i += 2,
                b'$' | b'`' => {
                    let next = self.substitution(i, end, line, depth);
                    line += newlines(&src[i..next]);
                    i = next;
                }
                b'\n' => {
                    line += 1;
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }
}

/// Where the body of a here-document starting at `at` ends (just past its delimiter line),
/// and the lines it spans.
fn heredoc_end(
    src: &[u8],
    at: usize,
    end: usize,
    delimiter: &[u8],
    strip_tabs: bool,
) -> (usize, usize) {
    let mut i = at;
    let mut lines = 0;
    while i < end {
        let line_end = src[i..end]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(end, |p| i + p);
        let mut text = &src[i..line_end];
        if strip_tabs {
            while let [b'\t', rest @ ..] = text {
                text = rest;
            }
        }
        i = (line_end + 1).min(end);
        lines += usize::from(line_end < end);
        if text == delimiter {
            break;
        }
    }
    (i, lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn words(script: &str) -> Vec<(String, usize)> {
        commands(script)
            .found
            .into_iter()
            .map(|c| (c.word, c.line))
            .collect()
    }

    fn w(list: &[(&str, usize)]) -> Vec<(String, usize)> {
        list.iter().map(|(s, l)| (s.to_string(), *l)).collect()
    }

    #[test]
    fn commands_and_their_lines() {
        let script = "search '{\"q\": \"get_weather\"}'\nx=$(get_weather '{}') # search here is a comment\n\
                      echo search | jq .x && list_files\nif ping; then FOO=1 noop; fi\n";
        assert_eq!(
            words(script),
            w(&[
                ("search", 1),
                ("get_weather", 2),
                ("echo", 3),
                ("jq", 3),
                ("list_files", 3),
                ("ping", 4),
                ("noop", 4),
            ])
        );
    }

    #[test]
    fn quoted_code_of_a_shell_is_scanned_and_other_quotes_are_data() {
        let script = "xargs -I{} bash -c 'search \"{}\"'\ngrep -c 'noop' f\n\
                      echo \"$(ping)\" 'not_this'\nsh -ec \"a; b\"\n`cat x`\n";
        assert_eq!(
            words(script),
            w(&[
                ("xargs", 1),
                ("search", 1),
                ("grep", 2),
                ("echo", 3),
                ("ping", 3),
                ("sh", 4),
                ("a", 4),
                ("b", 4),
                ("cat", 5),
            ])
        );
    }

    #[test]
    fn redirections_and_heredocs_are_no_commands() {
        let script = "cat <<EOF > out\nsearch is only text\nEOF\nnoop 2>&1 >log\n\
                      cat <<-'X'\n\tping\n\tX\nlast <<< word\n";
        assert_eq!(
            words(script),
            w(&[("cat", 1), ("noop", 4), ("cat", 5), ("last", 8)])
        );
    }

    #[test]
    fn hostile_nesting_is_bounded() {
        let deep = "$(".repeat(50_000) + "search" + &")".repeat(50_000);
        let found = commands(&deep).found;
        assert!(found.is_empty(), "{found:?}");
        let shallow = "$(".repeat(3) + "search" + &")".repeat(3);
        assert_eq!(words(&shallow), w(&[("search", 1)]));
        let many = "a;".repeat(MAX_COMMANDS + 5);
        let out = commands(&many);
        assert_eq!((out.found.len(), out.truncated), (MAX_COMMANDS, true));
        // Unclosed quotes and substitutions end at the end.
        assert_eq!(words("echo 'x\nsearch"), w(&[("echo", 1)]));
        assert_eq!(words("x=$(search"), w(&[("search", 1)]));
    }
}
