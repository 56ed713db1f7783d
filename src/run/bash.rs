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
//! with the run's token (docs/protocols.md, "Bash runs").
//!
//! Owns the bash names of tools (as `@librechat/agents` makes them) and what a bash run is
//! started with. It must not start processes (the pool's) nor answer calls (the IPC bridge's).

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

/// Words a tool's bash name may not be (`normalizeToBashIdentifier` of `@librechat/agents`
/// gives them a `_tool` suffix).
const RESERVED: [&str; 23] = [
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done",
    "in", "function", "select", "time", "coproc", "declare", "typeset", "local", "readonly",
    "export", "unset",
];

/// A tool's name in bash, as the LibreChat client tells the model: hyphens, spaces and dots
/// become `_`, anything else outside `[A-Za-z0-9_]` is dropped, a leading digit gets a `_`, and a
/// reserved word gets `_tool`.
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
    if RESERVED.contains(&name.as_str()) {
        name.push_str("_tool");
    }
    name
}

/// The call every tool function makes: one HTTP/1.1 request over bash's `/dev/tcp`. Builtins
/// are called as `builtin` so that a tool named like one (`read`, `printf`) cannot break it
/// (`local` cannot be: it is a reserved name, which a tool function never gets).
const CALL_FUNCTION: &str = r#"__ptc_call() {
  local LC_ALL=C __ptc_fd __ptc_status= __ptc_len=0 __ptc_line __ptc_body= __ptc_arg=${2:-'{}'}
  if ! builtin exec {__ptc_fd}<>"/dev/tcp/127.0.0.1/${PTC_IPC_PORT}"; then
    builtin printf '%s: cannot reach the sidecar (the run may be over)\n' "$1" >&2
    builtin return 2
  fi
  builtin printf 'POST /bash/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s' \
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
    builtin printf '%s: the sidecar answered %s\n' "$1" "${__ptc_status:-nothing}" >&2
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
            "{name}() {{ __ptc_call {} \"$@\"; }}",
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn names_are_the_clients() {
        for (tool, bash) in [
            ("get-weather", "get_weather"),
            ("a.b c", "a_b_c"),
            ("srv__list-files", "srv__list_files"),
            ("3d", "_3d"),
            ("local", "local_tool"),
            ("export", "export_tool"),
            ("class", "class"),
            ("héllo!", "hllo"),
        ] {
            assert_eq!(bash_name(tool), bash, "{tool}");
        }
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
