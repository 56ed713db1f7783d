//! How deeply a piece of JavaScript or TypeScript may nest before oxc reads it, and the stack
//! it is read on.
//!
//! oxc's parser, its semantic checks, its transform and codegen all recurse once per level of
//! the code's tree, a few KB of stack a level: `"(".repeat(100_000)` overflowed a blocking
//! thread's stack and aborted the whole sidecar. So before any of them, [`check`] scans the
//! code without recursion (strings, comments and template text skipped) and refuses code whose
//! depth may pass [`MAX_DEPTH`], as node refuses code nested past its own stack ("Maximum call
//! stack size exceeded"); and oxc then runs on a thread of its own with [`STACK_BYTES`] of
//! stack ([`on_parse_stack`]), which holds ten thousand levels of the deepest kind measured
//! (parentheses: 2 to 6 KB a level in a debug build; 4,000 levels overflowed 8 MB).
//!
//! The depth is over-estimated: brackets open, plus, within each bracket, the operators,
//! dots and operator keywords since its last `;` or `,` (each can nest the tree one level:
//! `!!!x`, `a = b = c`, `a.b.c`, `x => y => z`), plus every statement keyword that nests a
//! statement in another (`if`, `else`, `for`, `while`, `do`, `with`), counted across the code.

/// The deepest code read: past it, the code is refused as a syntax error.
pub const MAX_DEPTH: usize = 10_000;

/// The stack oxc runs on.
pub const STACK_BYTES: usize = 128 << 20;

/// Words that nest what follows them one level.
const NESTING_WORDS: &[&str] = &[
    "new",
    "typeof",
    "void",
    "delete",
    "await",
    "yield",
    "in",
    "instanceof",
    "async",
];

/// Words that nest a statement in another, counted across the code.
const STATEMENT_WORDS: &[&str] = &["if", "else", "for", "while", "do", "with"];

/// Whether `code` is within [`MAX_DEPTH`]: `Err(offset)` where it passes it.
pub fn check(code: &str) -> Result<(), usize> {
    let bytes = code.as_bytes();
    // Per open bracket: operators since its last `;` or `,`, and whether it is a template's
    // `${`, whose `}` goes back to the template's text.
    let mut frames: Vec<(usize, bool)> = vec![(0, false)];
    let mut ops_total = 0usize; // the frames' operators, added up
    let mut statements = 0usize;
    let mut i = 0;
    // Whether a `/` here starts a regular expression (no operand before it).
    let mut operand_before = false;
    while i < bytes.len() {
        let c = bytes[i];
        let over = frames.len() + ops_total + statements > MAX_DEPTH;
        if over {
            return Err(i);
        }
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = find(bytes, i, b"\n").unwrap_or(bytes.len());
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = find(bytes, i + 2, b"*/").map_or(bytes.len(), |j| j + 2);
            }
            b'/' if !operand_before => {
                i = skip_regex(bytes, i + 1);
                operand_before = true;
            }
            b'\'' | b'"' => {
                i = skip_string(bytes, i + 1, c);
                operand_before = true;
            }
            b'`' => {
                i = skip_template(bytes, i + 1, &mut frames);
                operand_before = true;
            }
            b'(' | b'[' | b'{' => {
                frames.push((0, false));
                operand_before = false;
                i += 1;
            }
            b')' | b']' | b'}' => {
                if frames.len() > 1 {
                    let (ops, template) = frames.pop().unwrap_or_default();
                    ops_total -= ops;
                    if template {
                        i = skip_template(bytes, i + 1, &mut frames);
                        operand_before = true;
                        continue;
                    }
                }
                bump(&mut frames, &mut ops_total);
                operand_before = true;
                i += 1;
            }
            b';' | b',' => {
                if let Some(frame) = frames.last_mut() {
                    ops_total -= frame.0;
                    frame.0 = 0;
                }
                operand_before = false;
                i += 1;
            }
            b'+' | b'-' | b'*' | b'%' | b'=' | b'<' | b'>' | b'!' | b'~' | b'&' | b'|' | b'^'
            | b'?' | b':' | b'.' | b'/' => {
                bump(&mut frames, &mut ops_total);
                // `x++ / 2` and `a.b` aside, an operator is followed by an operand.
                operand_before = false;
                i += 1;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 => {
                let start = i;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric()
                        || bytes[i] == b'_'
                        || bytes[i] == b'$'
                        || bytes[i] >= 0x80)
                {
                    i += 1;
                }
                let word = code.get(start..i).unwrap_or_default();
                if STATEMENT_WORDS.contains(&word) {
                    statements += 1;
                    operand_before = false;
                } else if NESTING_WORDS.contains(&word) || word == "return" || word == "case" {
                    bump(&mut frames, &mut ops_total);
                    operand_before = false;
                } else {
                    operand_before = true;
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// `f` on a thread of its own with [`STACK_BYTES`] of stack: what oxc reads code on.
pub fn on_parse_stack<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    std::thread::Builder::new()
        .name("ptc-parse".into())
        .stack_size(STACK_BYTES)
        .spawn(f)?
        .join()
        .map_err(|_| std::io::Error::other("the code's reader panicked"))
}

fn bump(frames: &mut [(usize, bool)], ops_total: &mut usize) {
    if let Some(frame) = frames.last_mut() {
        frame.0 += 1;
        *ops_total += 1;
    }
}

fn find(bytes: &[u8], from: usize, what: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(what.len())
        .position(|w| w == what)
        .map(|j| from + j)
}

/// Past a string that began before `i`, quoted by `quote`.
fn skip_string(bytes: &[u8], mut i: usize, quote: u8) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i, // an unterminated string: oxc says so
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past a regular expression whose body begins at `i`, and its flags.
fn skip_regex(bytes: &[u8], mut i: usize) -> usize {
    let mut class = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            b'[' => {
                class = true;
                i += 1;
            }
            b']' => {
                class = false;
                i += 1;
            }
            b'/' if !class => {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
                    i += 1;
                }
                return i;
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past a template's text from `i`: to its closing backtick, or into a `${`, which opens a
/// frame whose `}` comes back here.
fn skip_template(bytes: &[u8], mut i: usize, frames: &mut Vec<(usize, bool)>) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'`' => return i + 1,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                frames.push((0, true));
                return i + 2;
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_code_of_any_length_passes() {
        let line = "const r = await Promise.all([1, 2, 3].map(async (x) => x * 2 + (x ? 1 : 0)));\n\
                    if (r.length > 0 && r[0] !== 2) { console.log(`a ${r[0]} b ${`${r[1]}`}`); }\n\
                    const s = \"((((((((((((((((((((--------------\"; // )))))))))\n\
                    const re = /[(((((]+\\/((/g; /* (((((( */\n";
        assert_eq!(check(&line.repeat(1_000)), Ok(()));
        // A long string of operators is no nesting.
        let markdown = format!("const t = \"{}\";\n", "-|".repeat(100_000));
        assert_eq!(check(&markdown), Ok(()));
    }

    #[test]
    fn every_kind_of_deep_nesting_is_refused_before_it_is_read() {
        let n = MAX_DEPTH + 1;
        for code in [
            "(".repeat(n) + &")".repeat(n),
            "[".repeat(n) + &"]".repeat(n),
            "{".repeat(n) + &"}".repeat(n),
            "!".repeat(n) + "x",
            "a=".repeat(n) + "1",
            "a?a:".repeat(n) + "a",
            "x=>".repeat(n) + "x",
            "x.a".to_string() + &".a".repeat(n),
            "f".to_string() + &"()".repeat(n),
            "`${".repeat(n) + "1" + &"}`".repeat(n),
            "new ".repeat(n) + "X",
            "if(a)x;else ".repeat(n) + "x;",
            "1".to_string() + &"+1".repeat(n),
        ] {
            assert!(check(&code).is_err(), "{}", &code[..40.min(code.len())]);
        }
    }

    #[test]
    fn the_deepest_code_passed_is_read_on_the_parse_stack() {
        // Just under the limit, parentheses (the most stack a level, measured): read, no crash.
        let n = MAX_DEPTH / 2 - 10;
        let code = "(".repeat(n) + "1" + &")".repeat(n);
        assert_eq!(check(&code), Ok(()));
        let read = on_parse_stack(move || super::super::module(&code, true).is_ok()).unwrap();
        assert!(read);
    }
}
