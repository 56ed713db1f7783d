//! Bash runs: the code runs in `bash` inside the run's sandbox, where it may start processes
//! (all of them confined like the run, and killed with it), and every PTC tool of the run's
//! catalog is a bash function.
//!
//! A tool function takes one JSON string argument (`get_weather '{"city": "Paris"}'`, none is
//! `{}`) and prints the result: a string as it is (as JSON when it holds JSON), anything else as
//! one line of compact JSON. A failed call prints the error to stderr and returns 1 (2 when the
//! sidecar cannot be reached). The functions live in a file the run's `BASH_ENV` names, so every
//! bash the code starts (`bash -c`, `xargs bash -c`) has them too. Each call is one HTTP request
//! from bash itself (`/dev/tcp`, no process started) to the IPC bridge's `POST /bash/{tool}`
//! with the run's token (docs/protocols.md, "Bash runs"). `search_tools "what you need"` prints
//! the best matches of the catalog, as the SDK's `search_tools` finds them.
//!
//! Owns the bash names of tools (as `@librechat/agents` makes them, but never a bash keyword or
//! builtin: [`bash_name`]) and what a bash run is started with. It must not start processes (the
//! pool's) nor answer calls (the IPC bridge's).

use super::zygote::Program;
use crate::catalog::Catalog;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

/// The shell every bash run is.
pub const BASH: &str = "/bin/bash";

/// Largest bash code: it is one argument of `bash -c`, and Linux takes no argument over 128 KiB
/// (`MAX_ARG_STRLEN`, with its terminating NUL).
pub const MAX_CODE_BYTES: usize = 128 * 1024 - 1;

/// The file of a run's tool functions, in its scratch directory.
pub const FUNCTIONS_FILE: &str = ".ptc-tools.sh";

/// What a tool whose bash name would be reserved is called instead: the name and this.
pub const RESERVED_SUFFIX: &str = "_tool";

/// The call helper every tool function calls ([`CALL_FUNCTION`]).
const CALL_HELPER: &str = "__ptc_call";

/// The helpers' own names ([`CALL_FUNCTION`]): the call helper, the request it and
/// `search_tools` make, and `search_tools` itself. A tool function of one of these names would
/// replace it.
const HELPERS: [&str; 3] = [CALL_HELPER, "__ptc_post", "search_tools"];

/// bash's keywords that are names (`compgen -k` of bash 5.2): a function cannot be called by
/// one of them.
const KEYWORDS: [&str; 17] = [
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "time", "coproc",
];

/// bash's builtins (`compgen -b` of bash 5.2, those that are names). A tool function named like
/// one would hide it: from the call helper (one named `builtin` or `command` hides the very
/// way the helper reaches builtins, and every call recursed), and from the code, whose
/// ordinary bash (the client's own parallel form uses `printf` and `wait`) would call a tool.
/// All of them are reserved rather than only those the helper uses: one rule, and no tool
/// ever changes what a bash word does. `@librechat/agents` (`normalizeToBashIdentifier`)
/// suffixes only the keywords and `declare typeset local readonly export unset`, so for a
/// tool named like another builtin (`echo`) the client's name and the sidecar's differ;
/// the sidecar's is the one defined.
const BUILTINS: [&str; 58] = [
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];

/// Whether a bash name is taken: a keyword, a builtin, or a helper's own name ([`HELPERS`]: a
/// tool function of the call helper's name would replace it, and every call would recurse).
fn reserved(name: &str) -> bool {
    KEYWORDS.contains(&name) || BUILTINS.contains(&name) || HELPERS.contains(&name)
}

/// A tool's name in bash: hyphens, spaces and dots become `_`, anything else outside
/// `[A-Za-z0-9_]` is dropped, a leading digit gets a `_` (as the LibreChat client names them),
/// and a reserved name ([`KEYWORDS`], [`BUILTINS`], the call helper's) gets
/// [`RESERVED_SUFFIX`].
pub fn bash_name(tool: &str) -> String {
    let mut name: String = tool
        .chars()
        .filter_map(|c| match c {
            '-' | '.' => Some('_'),
            c if c.is_whitespace() => Some('_'),
            c if c.is_ascii_alphanumeric() || c == '_' => Some(c),
            _ => None,
        })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    if reserved(&name) {
        name.push_str(RESERVED_SUFFIX);
    }
    name
}

/// The call every tool function makes (`__ptc_call`), and `search_tools "what you need"
/// [limit]`, which prints the best matches (`POST /search/bash`): each one HTTP/1.1 request
/// (`__ptc_post`) over bash's `/dev/tcp`, no process started, so no external program is named. Every builtin it uses is called through `builtin`,
/// which no tool function may be named (nor any other builtin: [`BUILTINS`]), so functions the
/// code defines (`printf`, `echo`, `read`) do not change a call; the rest is keywords, which
/// nothing can redefine. Its own `IFS` and locale, so the code's (`IFS=,`) do not split the
/// answer differently. Values are assigned apart from `builtin local`, whose words (unlike
/// `local`'s) are split and globbed. Code that defines a function named `builtin` breaks its
/// own calls only.
const CALL_FUNCTION: &str = r#"__ptc_call() {
  builtin local __ptc_arg
  __ptc_arg=${2:-'{}'}
  __ptc_post "bash/$1" "$1" "$__ptc_arg"
}
search_tools() {
  if [[ -z ${1-} || ( -n ${2-} && ! ${2-} =~ ^[1-9][0-9]?$ ) ]]; then
    builtin printf '%s\n' 'usage: search_tools "what you need" [limit, 1-99]: the tools that best match, best first' >&2
    builtin return 2
  fi
  __ptc_post "search/bash?limit=${2:-5}" search_tools "$1"
}
__ptc_post() {
  builtin local LC_ALL=C IFS=$' \t\n' __ptc_fd __ptc_status= __ptc_len=0 __ptc_line __ptc_body= __ptc_arg
  __ptc_arg=$3
  if ! builtin exec {__ptc_fd}<>"/dev/tcp/127.0.0.1/${PTC_IPC_PORT}"; then
    builtin printf '%s: cannot reach the sidecar (the run may be over)\n' "$2" >&2
    builtin return 2
  fi
  builtin printf 'POST /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s' \
    "$1" "$PTC_TOKEN" "${#__ptc_arg}" "$__ptc_arg" >&"$__ptc_fd"
  builtin read -r __ptc_line __ptc_status __ptc_line <&"$__ptc_fd"
  while builtin read -r __ptc_line <&"$__ptc_fd" && [[ -n ${__ptc_line%$'\r'} ]]; do
    case $__ptc_line in [Cc]ontent-[Ll]ength:*) __ptc_len=${__ptc_line//[!0-9]/} ;; esac
  done
  if (( __ptc_len > 0 )); then
    IFS= builtin read -r -N "$__ptc_len" __ptc_body <&"$__ptc_fd"
  fi
  builtin exec {__ptc_fd}<&-
  if [[ $__ptc_status == 200 ]]; then
    builtin printf '%s' "$__ptc_body"
    builtin return 0
  fi
  if [[ -n $__ptc_body ]]; then
    builtin printf '%s' "$__ptc_body" >&2
  else
    builtin printf '%s: the sidecar answered %s\n' "$2" "${__ptc_status:-nothing}" >&2
  fi
  builtin return 1
}
"#;

/// The file of a run's tool functions: the call function, then one function per PTC tool (the
/// first of two tools with one bash name wins; the LibreChat client refuses such a pair).
pub fn functions(catalog: &Catalog) -> String {
    let mut out = String::from(
        "# ptc-sidecar: this run's tools as bash functions (docs/protocols.md, \"Bash runs\").\n",
    );
    out.push_str(CALL_FUNCTION);
    let mut seen = HashSet::new();
    for tool in catalog.ptc() {
        let name = bash_name(&tool.name);
        if name.is_empty() || !seen.insert(name.clone()) {
            continue;
        }
        let _ = writeln!(
            out,
            "{name}() {{ {CALL_HELPER} {} \"$@\"; }}",
            path_segment(&tool.name)
        );
    }
    out
}

/// The tool's name as one URL path segment: only unreserved characters stay, so it is also a
/// plain word in bash.
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A tool's result as a bash function prints it: a string as it is, or as compact JSON when it
/// holds JSON (the client's prompt: "Tool stdout is normalized to one compact JSON value when
/// possible"); anything else as compact JSON; then a newline.
pub fn printed(result: &serde_json::Value) -> String {
    let text = match result {
        serde_json::Value::String(s) => match serde_json::from_str::<serde_json::Value>(s) {
            Ok(json @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
                json.to_string()
            }
            _ => s.clone(),
        },
        other => other.to_string(),
    };
    text + "\n"
}

/// What a bash run's child becomes: `bash -c CODE`, with the IPC port, the run's token and its
/// functions file (`BASH_ENV`) in its environment.
pub fn program(code: &str, scratch: &Path, ipc_port: u16, token: &str) -> Program {
    Program {
        argv: vec![
            BASH.into(),
            "--noprofile".into(),
            "--norc".into(),
            "-c".into(),
            code.into(),
        ],
        env: vec![
            ("PTC_IPC_PORT".into(), ipc_port.to_string()),
            ("PTC_TOKEN".into(), token.into()),
            (
                "BASH_ENV".into(),
                scratch.join(FUNCTIONS_FILE).to_string_lossy().into_owned(),
            ),
        ],
        files: Vec::new(),
        may_spawn: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn names_are_the_clients_and_never_a_bash_word() {
        for (tool, bash) in [
            ("get-weather", "get_weather"),
            ("a.b c", "a_b_c"),
            ("srv__list-files", "srv__list_files"),
            ("3d", "_3d"),
            ("local", "local_tool"),
            ("export", "export_tool"),
            ("class", "class"),
            ("héllo!", "hllo"),
            // Builtins, the client's names or not, and the helper's own name.
            ("builtin", "builtin_tool"),
            ("command", "command_tool"),
            ("exec", "exec_tool"),
            ("eval", "eval_tool"),
            ("echo", "echo_tool"),
            ("print.f", "print_f"),
            ("printf", "printf_tool"),
            ("wait", "wait_tool"),
            ("re-ad", "re_ad"),
            ("read", "read_tool"),
            ("__ptc_call", "__ptc_call_tool"),
            ("__ptc-call", "__ptc_call_tool"),
            ("Echo", "Echo"),
        ] {
            assert_eq!(bash_name(tool), bash, "{tool}");
        }
    }

    /// The lists are this machine's bash's: a newer bash with a new builtin fails here.
    #[test]
    fn every_keyword_and_builtin_of_bash_is_reserved() {
        let out = std::process::Command::new(BASH)
            .args(["--noprofile", "--norc", "-c", "compgen -k -b"])
            .output()
            .unwrap();
        let words = String::from_utf8(out.stdout).unwrap();
        let names: Vec<&str> = words
            .lines()
            .filter(|w| bash_name(w) == *w || reserved(w))
            .collect();
        assert!(names.len() >= KEYWORDS.len() + BUILTINS.len(), "{words}");
        for word in names {
            assert!(reserved(word), "{word} is a bash word but not reserved");
        }
    }

    /// The helper in a real bash where every builtin but `builtin` is a function that fails,
    /// and `IFS` splits on `0`: the call (an argument with spaces, `0` and `*`) still goes out
    /// whole and its answer comes back.
    #[test]
    fn the_helper_calls_nothing_a_function_could_hide() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            // A broken helper may send less: answer what came within the wait, never hang.
            conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            while !request.ends_with(br#"{"a": "0 * 0"}"#) {
                match conn.read(&mut chunk) {
                    Ok(n) if n > 0 => request.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"b\":\"100\"}")
                .unwrap();
            String::from_utf8(request).unwrap()
        });
        let shadows: Vec<&str> = BUILTINS
            .iter()
            .copied()
            .filter(|b| *b != "builtin")
            .collect();
        let script = format!(
            "{CALL_FUNCTION}\n\
             for b in {}; do\n\
               builtin eval \"$b() {{ builtin printf 'shadowed %s\\n' $b >&2; builtin return 99; }}\"\n\
             done\n\
             IFS=0\n\
             {CALL_HELPER} t '{{\"a\": \"0 * 0\"}}'\n\
             builtin printf ' rc=%s' \"$?\"",
            shadows.join(" ")
        );
        let out = std::process::Command::new(BASH)
            .args(["--noprofile", "--norc", "-c", &script])
            .env("PTC_IPC_PORT", port.to_string())
            .env("PTC_TOKEN", "tok")
            .output()
            .unwrap();
        let request = server.join().unwrap();
        assert_eq!(
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned()
            ),
            (r#"{"b":"100"} rc=0"#.to_string(), String::new())
        );
        assert!(
            request.starts_with("POST /bash/t HTTP/1.1\r\n")
                && request.contains("Authorization: Bearer tok\r\n")
                && request.contains("Content-Length: 14\r\n")
                && request.ends_with("\r\n\r\n{\"a\": \"0 * 0\"}"),
            "{request}"
        );
    }

    #[test]
    fn results_print_as_the_client_promises() {
        use serde_json::json;
        assert_eq!(printed(&json!({"a": [1, 2]})), "{\"a\":[1,2]}\n");
        assert_eq!(printed(&json!("plain text")), "plain text\n");
        assert_eq!(printed(&json!("{ \"a\" : 1 }")), "{\"a\":1}\n");
        assert_eq!(printed(&json!("42")), "42\n");
        assert_eq!(printed(&json!(null)), "null\n");
    }

    #[test]
    fn a_name_is_one_path_segment_and_one_bash_word() {
        assert_eq!(path_segment("get-weather"), "get-weather");
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(path_segment("é"), "%C3%A9");
    }
}
