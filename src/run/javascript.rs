//! JavaScript and TypeScript runs: the code runs in `node` (Debian's, [`NODE`]) inside the run's
//! sandbox, as an ES module (top-level `await`), with every PTC tool an async function of the
//! JavaScript SDK (`sdk-template/ptc_sdk.mjs`, which speaks the Python SDK's wire).
//!
//! The run's child is forked by a fork server and confined like any run (namespaces, uid,
//! Landlock, seccomp) before it becomes `node`, as a bash run becomes bash; unlike bash it may
//! not start processes unless `PTC_ALLOW_SUBPROCESS` ([`zygote::Program::may_spawn`]).
//!
//! Before the run, the code is read here: a syntax error is the run's error at the user's line
//! (`<code>:LINE`, the line and a caret, as node prints one), without starting node; TypeScript
//! has its types stripped by oxc (parser, semantic checks, its TypeScript transform and
//! codegen) with a source map, so a stack shows the user's TypeScript lines. No `tsc` runs.
//!
//! Owns what `node` is started with and how code becomes the module it imports. It must not
//! start processes (the pool's) nor answer calls (the IPC bridge's).

mod nesting;

pub use nesting::on_parse_stack;

use super::sdk::JS_SDK_FILE;
use super::zygote::Program;
use oxc_allocator::Allocator;
use oxc_codegen::{Codegen, CodegenOptions};
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{TransformOptions, Transformer};
use std::path::{Path, PathBuf};

/// The `node` every JavaScript and TypeScript run is (Debian's `nodejs`).
pub const NODE: &str = "/usr/bin/node";

/// The SDK's argument when the run may start processes (`PTC_ALLOW_SUBPROCESS`).
const MAY_SPAWN: &str = "--may-spawn";

/// glibc's malloc arenas for all of node's threads together (`program`'s environment).
const MALLOC_ARENA_MAX: (&str, &str) = ("MALLOC_ARENA_MAX", "2");

/// The name a TypeScript run's source map gives the code (beside the module, `.ptc-code.mjs`
/// in the run's scratch directory): what the SDK shows as `<code>` in a stack.
const TS_SOURCE: &str = "code.ts";

/// A syntax error in the run's code, where it is: the run's error, printed as node prints one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("<code>:{line}\n{text}\n{caret}\n\nSyntaxError: {message}\n")]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    /// The code's line, and a caret under the error's column.
    text: String,
    caret: String,
    pub message: String,
}

impl SyntaxError {
    /// The error at byte `offset` of `code`.
    fn at(code: &str, offset: usize, message: String) -> SyntaxError {
        let mut offset = offset.min(code.len());
        while !code.is_char_boundary(offset) {
            offset -= 1;
        }
        let start = code[..offset].rfind('\n').map_or(0, |i| i + 1);
        let end = code[offset..].find('\n').map_or(code.len(), |i| offset + i);
        let before = &code[start..offset];
        // Tabs kept, so that the caret lines up under the code as a terminal shows it.
        let caret: String = before
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .chain(std::iter::once('^'))
            .collect();
        SyntaxError {
            line: code[..start].matches('\n').count() + 1,
            column: before.chars().count() + 1,
            text: code[start..end].trim_end_matches('\r').to_string(),
            caret,
            message,
        }
    }

    /// The first of oxc's `errors`, at its primary label, else its last (a redeclaration's
    /// labels are the first declaration, then the offending one), else at the start.
    pub fn first(code: &str, errors: &[oxc_diagnostics::OxcDiagnostic]) -> Option<SyntaxError> {
        let error = errors.first()?;
        let labels = error.labels.as_deref().unwrap_or_default();
        let offset = labels
            .iter()
            .find(|label| label.primary())
            .or(labels.last())
            .map_or(0, |label| label.offset());
        Some(SyntaxError::at(code, offset, error.message.to_string()))
    }
}

/// Code nested deeper than oxc may read ([`nesting`]) as a syntax error where it gets too deep;
/// call it before any of oxc's passes, and run them on [`on_parse_stack`].
pub fn refuse_deep(code: &str) -> Result<(), SyntaxError> {
    nesting::check(code).map_err(|offset| {
        let message = format!(
            "the code is nested too deeply: more than {} levels of brackets, operators and \
             statements in statements",
            nesting::MAX_DEPTH
        );
        SyntaxError::at(code, offset, message)
    })
}

/// What node runs of a run's code ([`module`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// JavaScript as the user wrote it, or TypeScript stripped of its types with a source map
    /// to its lines.
    pub code: String,
    /// JavaScript with no `import`, `export`, `import.meta`, `import()` nor `#!`: the SDK compiles it
    /// as the body of a strict async function instead of importing it as an ES module, which
    /// costs node's module loader (resolving, reading, linking: about 3.5 ms of a run's CPU).
    /// The two run alike: the code's declarations are its own, `this` is undefined, top-level
    /// `await` works, and a stack shows the same lines.
    pub script: bool,
    /// TypeScript's, with a source map to its lines.
    pub source_map: bool,
}

impl Module {
    /// The module in a run's job: `code`, `script` and `source_map` (read by the SDK).
    pub fn into_job(self, job: &mut serde_json::Value) {
        job["code"] = self.code.into();
        job["script"] = self.script.into();
        job["source_map"] = self.source_map.into();
    }
}

/// The module node imports for `code`: JavaScript as it is once it parses; TypeScript with its
/// types stripped and a source map to its lines. Blocking (a parse; about a millisecond for
/// 100 KB): call it off the async workers.
pub fn module(code: &str, typescript: bool) -> Result<Module, SyntaxError> {
    refuse_deep(code)?;
    let allocator = Allocator::default();
    let source_type = match typescript {
        true => SourceType::ts(),
        false => SourceType::mjs(),
    };
    let parsed = Parser::new(&allocator, code, source_type).parse();
    if let Some(error) = SyntaxError::first(code, &parsed.errors) {
        return Err(error);
    }
    if parsed.panicked {
        return Err(SyntaxError::at(
            code,
            0,
            "the code could not be parsed".into(),
        ));
    }
    let record = &parsed.module_record;
    let script = !typescript
        && !record.has_module_syntax
        && record.dynamic_imports.is_empty()
        && record.import_metas.is_empty()
        && parsed.program.hashbang.is_none();
    let mut program = parsed.program;
    // The early errors node would also refuse (a `let` declared twice, `await` misplaced).
    let semantic = SemanticBuilder::new()
        .with_check_syntax_error(true)
        .build(&program);
    if let Some(error) = SyntaxError::first(code, &semantic.errors) {
        return Err(error);
    }
    if !typescript {
        return Ok(Module {
            code: code.to_string(),
            script,
            source_map: false,
        });
    }
    let scoping = semantic.semantic.into_scoping();
    let transformed = Transformer::new(
        &allocator,
        Path::new(TS_SOURCE),
        &TransformOptions::default(),
    )
    .build_with_scoping(scoping, &mut program);
    if let Some(error) = SyntaxError::first(code, &transformed.errors) {
        return Err(error);
    }
    let printed = Codegen::new()
        .with_options(CodegenOptions {
            source_map_path: Some(PathBuf::from(TS_SOURCE)),
            ..CodegenOptions::default()
        })
        .build(&program);
    let mut out = printed.code;
    let source_map = printed.map.is_some();
    if let Some(map) = printed.map {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("//# sourceMappingURL=");
        out.push_str(&map.to_data_url());
        out.push('\n');
    }
    Ok(Module {
        code: out,
        script: false,
        source_map,
    })
}

/// What a JavaScript run's child becomes once confined: `node SDK_DIR/ptc_sdk.mjs` (and
/// `--may-spawn` where the run may start processes), which makes the run's tools and then
/// reads the run's job on stdin (the Python job, its `code` and `script` the [`Module`], and
/// `source_map` for TypeScript) and runs the code: a script compiled in place, a module written
/// into the run's scratch directory and imported. `sdk_dir`
/// is the SDK directory of the fork server the run is forked from (its Landlock ruleset names
/// it): the SDK and the run's `catalog.json`. Nothing in its environment but the run's.
pub fn program(sdk_dir: &Path, may_spawn: bool) -> Program {
    Program {
        argv: vec![
            NODE.to_string(),
            // Not the machine's /etc/ssl/openssl.cnf, which a run may not read (Landlock) and
            // without which node will not start; nothing a run does needs OpenSSL's config.
            "--openssl-config=/dev/null".to_string(),
            // WebAssembly (fetch's HTTP parser is some) within the run's RLIMIT_AS: V8's trap
            // handler reserves ~10 GB of address space per WebAssembly memory, and without it
            // every instance fails "Out of memory"; bounds are checked in code instead.
            "--disable-wasm-trap-handler".to_string(),
            sdk_dir.join(JS_SDK_FILE).to_string_lossy().into_owned(),
        ]
        .into_iter()
        // Read before the job (a warm worker refuses processes before it has one).
        .chain(may_spawn.then(|| MAY_SPAWN.to_string()))
        .collect(),
        // One malloc arena per thread would take 64 MB of the run's RLIMIT_AS for each Worker
        // thread; two are shared by all (the SDK removes it from `process.env`).
        env: vec![(
            MALLOC_ARENA_MAX.0.to_string(),
            MALLOC_ARENA_MAX.1.to_string(),
        )],
        files: Vec::new(),
        may_spawn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn javascript_that_parses_is_run_as_it_is() {
        let code = "const x = await tools.add({a: 1});\nconsole.log(x)\n";
        let expected = Module {
            code: code.to_string(),
            script: true,
            source_map: false,
        };
        assert_eq!(module(code, false), Ok(expected));
    }

    #[test]
    fn only_code_that_imports_nothing_is_run_as_a_script() {
        for code in [
            "import fs from 'node:fs';\nconsole.log(fs)\n",
            "export const a = 1;\n",
            "console.log(import.meta.url)\n",
            "const fs = await import('node:fs');\n",
            "#!/usr/bin/env node\nconsole.log(1)\n",
        ] {
            assert!(!module(code, false).unwrap().script, "{code}");
        }
        let plain = "const r = await Promise.all([1, 2].map(async (x) => x));\nconsole.log(r)\n";
        assert!(module(plain, false).unwrap().script);
        // TypeScript is imported as a module, for its source map.
        assert!(!module("const a: number = 1;\n", true).unwrap().script);
    }

    #[test]
    fn a_syntax_error_is_at_the_users_line_as_node_prints_it() {
        let error = module("const a = 1;\nconsole.log(a)\nlet x = = 2;\n", false).unwrap_err();
        assert_eq!((error.line, error.column), (3, 9));
        assert_eq!(
            error.to_string(),
            format!(
                "<code>:3\nlet x = = 2;\n        ^\n\nSyntaxError: {}\n",
                error.message
            )
        );
    }

    #[test]
    fn an_early_error_is_a_syntax_error_too() {
        let error = module("let a = 1;\nlet a = 2;\n", false).unwrap_err();
        assert_eq!(error.line, 2, "{error}");
    }

    #[test]
    fn typescript_loses_its_types_and_keeps_a_map_to_its_lines() {
        let code = "interface P { x: number }\nconst p: P = {x: 1};\nfunction f(a: number): string { return String(a as number) }\nconsole.log(f(p.x)!);\n";
        let out = module(code, true).unwrap().code;
        let (js, map) = out
            .split_once("//# sourceMappingURL=data:application/json;")
            .unwrap();
        assert!(
            !js.contains("interface") && !js.contains(": number") && !js.contains(" as "),
            "{js}"
        );
        assert!(js.contains("const p = { x: 1 }"), "{js}");
        assert!(
            map.starts_with("charset=utf-8;base64,") || map.starts_with("base64,"),
            "{map}"
        );
    }

    #[test]
    fn a_typescript_error_is_at_the_users_line() {
        let error = module("const a: number = 1;\nconst b: = 2;\n", true).unwrap_err();
        assert_eq!(error.line, 2, "{error}");
    }

    #[test]
    fn node_starts_the_sdk_and_nothing_else() {
        let p = program(Path::new("/sdk"), false);
        assert_eq!(
            p.argv,
            [
                "/usr/bin/node",
                "--openssl-config=/dev/null",
                "--disable-wasm-trap-handler",
                "/sdk/ptc_sdk.mjs"
            ]
        );
        assert_eq!(p.env, [("MALLOC_ARENA_MAX".to_string(), "2".to_string())]);
        assert!(p.files.is_empty() && !p.may_spawn);
        let spawning = program(Path::new("/sdk"), true);
        assert_eq!(
            spawning.argv.last().map(String::as_str),
            Some("--may-spawn")
        );
        assert!(spawning.may_spawn);
    }
}
