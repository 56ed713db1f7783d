//! What stands between a run's code and a tool besides the allow and deny lists: the calls that
//! wait for a person (`PTC_APPROVE_TOOLS`, `PTC_APPROVE_DESTRUCTIVE`, `PTC_APPROVAL_TIMEOUT`)
//! and the limits per tool (`PTC_TOOL_LIMITS`, inline JSON or a file's path).
//!
//! Pure: the rules as data and their parser ([`LimitRules::parse`]). The file form is read by
//! whoever starts the sidecar or reloads it ([`LimitRules::read`]); the counters the rules
//! drive are the run layer's (`run::limits`).

use super::ConfigError;
use super::parse::{non_empty, parse_bool, parse_globs, parse_range};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default of `PTC_APPROVAL_TIMEOUT`: five minutes for a person to answer.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 300;

/// Longest `PTC_APPROVAL_TIMEOUT`: a day, like a run's.
const MAX_APPROVAL_TIMEOUT_SECS: u64 = 86_400;

/// Largest `PTC_TOOL_LIMITS` file read: a rule is a line; a megabyte of them is a mistake.
pub const MAX_LIMITS_FILE_BYTES: u64 = 1 << 20;

/// Most rules `PTC_TOOL_LIMITS` may hold: each call is matched against every one.
pub const MAX_LIMIT_RULES: usize = 1024;

/// Highest `max_concurrent` and `max_per_run`, and `per_second`: past them a limit limits nothing.
const MAX_LIMIT_COUNT: u64 = 1_000_000;

/// The form `PTC_TOOL_LIMITS` takes, said in every error about it.
pub const LIMITS_FORM: &str = "a JSON object mapping tool name patterns (using * and ?) to \
     {\"max_concurrent\": N, \"per_second\": R, \"max_per_run\": M} (any of the three), inline \
     or in a file whose path is given, e.g. {\"github__*\": {\"per_second\": 5}}";

/// Who must approve which calls, and the limits per tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// Patterns of PTC tool names whose calls wait for a person (`PTC_APPROVE_TOOLS`).
    pub approve_tools: Vec<String>,
    /// Every MCP tool annotated `destructiveHint: true` waits for a person too.
    pub approve_destructive: bool,
    /// How long a call waits for a person before it is denied.
    pub approval_timeout: Duration,
    /// `PTC_TOOL_LIMITS`: the rules given inline, or the file they are read from.
    pub tool_limits: Option<LimitsSource>,
}

impl Default for Control {
    fn default() -> Control {
        Control {
            approve_tools: Vec::new(),
            approve_destructive: false,
            approval_timeout: Duration::from_secs(DEFAULT_APPROVAL_TIMEOUT_SECS),
            tool_limits: None,
        }
    }
}

impl Control {
    /// Whether any call may wait for a person.
    pub fn approvals_on(&self) -> bool {
        self.approve_destructive || !self.approve_tools.is_empty()
    }
}

/// Where the limit rules come from.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitsSource {
    Inline(LimitRules),
    /// A file, read at start and again when it changes (hot reload).
    File(PathBuf),
}

/// The limits of one pattern; each is optional.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ToolLimit {
    /// Calls of the tool in flight at once, across all runs.
    pub max_concurrent: Option<u32>,
    /// Calls started per second, across all runs: at most one every `1 / per_second` s.
    pub per_second: Option<f64>,
    /// Calls of the tool one run may make.
    pub max_per_run: Option<u32>,
}

impl ToolLimit {
    /// Both limits together, each field the stricter of the two.
    pub fn tighten(self, other: ToolLimit) -> ToolLimit {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        ToolLimit {
            max_concurrent: min(self.max_concurrent, other.max_concurrent),
            per_second: min(self.per_second, other.per_second),
            max_per_run: min(self.max_per_run, other.max_per_run),
        }
    }

    pub fn is_none(&self) -> bool {
        *self == ToolLimit::default()
    }
}

/// The rules of `PTC_TOOL_LIMITS`, in the order given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitRules {
    pub rules: Vec<(String, ToolLimit)>,
}

/// Why `PTC_TOOL_LIMITS` (or its file) cannot be used: the key at fault and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}; PTC_TOOL_LIMITS takes {LIMITS_FORM}")]
pub struct LimitsError {
    pub what: String,
}

impl LimitRules {
    /// The rules of a JSON text. Every rule of a tool applies: a tool matched by several gets
    /// the stricter value of each field ([`LimitRules::limit_for`]).
    pub fn parse(text: &str) -> Result<LimitRules, LimitsError> {
        let err = |what: String| LimitsError { what };
        let value: Value = serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(err("not a JSON object".into()));
        };
        if map.len() > MAX_LIMIT_RULES {
            return Err(err(format!(
                "{} rules, more than the {MAX_LIMIT_RULES} allowed",
                map.len()
            )));
        }
        let mut rules = Vec::with_capacity(map.len());
        for (pattern, limit) in map {
            if pattern.is_empty() || pattern.chars().any(char::is_whitespace) {
                return Err(err(format!(
                    "the key {pattern:?} is not a tool name pattern"
                )));
            }
            let limit = parse_limit(&pattern, limit)?;
            rules.push((pattern, limit));
        }
        Ok(LimitRules { rules })
    }

    /// The rules of a file (at most [`MAX_LIMITS_FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<LimitRules, LimitsError> {
        use std::io::Read;
        let err = |e: std::io::Error| LimitsError {
            what: format!("cannot read {}: {e}", path.display()),
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(err)?
            .take(MAX_LIMITS_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(err)?;
        if text.len() as u64 > MAX_LIMITS_FILE_BYTES {
            return Err(LimitsError {
                what: format!("{} is over {MAX_LIMITS_FILE_BYTES} bytes", path.display()),
            });
        }
        LimitRules::parse(&text).map_err(|e| LimitsError {
            what: format!("{}: {}", path.display(), e.what),
        })
    }

    /// The limit of one tool: every matching rule, each field the strictest.
    pub fn limit_for(&self, tool: &str, matches: impl Fn(&str, &str) -> bool) -> ToolLimit {
        self.rules
            .iter()
            .filter(|(pattern, _)| matches(pattern, tool))
            .fold(ToolLimit::default(), |acc, (_, l)| acc.tighten(*l))
    }
}

fn parse_limit(pattern: &str, value: Value) -> Result<ToolLimit, LimitsError> {
    let err = |what: String| LimitsError { what };
    let Value::Object(fields) = value else {
        return Err(err(format!(
            "the value of {pattern:?} is not an object of limits"
        )));
    };
    let mut limit = ToolLimit::default();
    for (key, v) in &fields {
        let at = || format!("{pattern:?}.{key}");
        match key.as_str() {
            "max_concurrent" => limit.max_concurrent = Some(count(&at(), v)?),
            "max_per_run" => limit.max_per_run = Some(count(&at(), v)?),
            "per_second" => match v.as_f64() {
                Some(r) if r > 0.0 && r <= MAX_LIMIT_COUNT as f64 => limit.per_second = Some(r),
                _ => {
                    return Err(err(format!(
                        "{} is {v}, not a number above 0 and at most {MAX_LIMIT_COUNT}",
                        at()
                    )));
                }
            },
            _ => {
                return Err(err(format!(
                    "{} is not a limit (max_concurrent, per_second or max_per_run)",
                    at()
                )));
            }
        }
    }
    if fields.is_empty() {
        return Err(err(format!("{pattern:?} names no limit")));
    }
    Ok(limit)
}

fn count(at: &str, v: &Value) -> Result<u32, LimitsError> {
    match v.as_u64() {
        Some(n) if (1..=MAX_LIMIT_COUNT).contains(&n) => Ok(n as u32),
        _ => Err(LimitsError {
            what: format!("{at} is {v}, not a whole number from 1 to {MAX_LIMIT_COUNT}"),
        }),
    }
}

/// The raw strings of the four variables, validated.
pub(super) fn validate(
    approve_tools: Option<String>,
    approve_destructive: Option<String>,
    approval_timeout: Option<String>,
    tool_limits: Option<String>,
) -> Result<Control, ConfigError> {
    Ok(Control {
        approve_tools: parse_globs("PTC_APPROVE_TOOLS", approve_tools)?,
        approve_destructive: parse_bool("PTC_APPROVE_DESTRUCTIVE", approve_destructive, false)?,
        approval_timeout: parse_range(
            "PTC_APPROVAL_TIMEOUT",
            approval_timeout,
            DEFAULT_APPROVAL_TIMEOUT_SECS,
            (1, MAX_APPROVAL_TIMEOUT_SECS),
        )
        .map(Duration::from_secs)?,
        tool_limits: match non_empty(tool_limits) {
            None => None,
            Some(text) if text.trim_start().starts_with('{') => Some(LimitsSource::Inline(
                LimitRules::parse(&text).map_err(|e| ConfigError {
                    variable: "PTC_TOOL_LIMITS",
                    value: crate::util::cut(&text, 200).into_owned(),
                    expected: e.to_string(),
                })?,
            )),
            Some(path) => Some(LimitsSource::File(PathBuf::from(path.trim()))),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_combine_strictest_first() {
        let rules = LimitRules::parse(
            r#"{"github__*": {"per_second": 5, "max_concurrent": 4},
                "github__merge*": {"max_concurrent": 1, "max_per_run": 3}}"#,
        )
        .unwrap();
        // Prefix patterns are enough here; the catalog's glob_match is the real one.
        let glob = |p: &str, t: &str| p.strip_suffix('*').map_or(p == t, |pre| t.starts_with(pre));
        let merge = rules.limit_for("github__merge_pr", glob);
        assert_eq!(
            merge,
            ToolLimit {
                max_concurrent: Some(1),
                per_second: Some(5.0),
                max_per_run: Some(3)
            }
        );
        assert!(rules.limit_for("slack__post", glob).is_none());
    }

    #[test]
    fn a_bad_rule_names_its_key_and_the_form() {
        let bad = |t: &str| LimitRules::parse(t).unwrap_err().to_string();
        assert!(bad("[1]").starts_with("not a JSON object; PTC_TOOL_LIMITS takes"));
        assert!(bad(r#"{"a*": {"max_concurrent": 0}}"#).contains("\"a*\".max_concurrent is 0"));
        assert!(bad(r#"{"a*": {"per_second": -1}}"#).contains("\"a*\".per_second is -1"));
        assert!(bad(r#"{"a*": {"burst": 3}}"#).contains("\"a*\".burst is not a limit"));
        assert!(bad(r#"{"a b": {"max_per_run": 3}}"#).contains("not a tool name pattern"));
        assert!(bad(r#"{"a": {}}"#).contains("names no limit"));
        assert!(bad("{").starts_with("not JSON"));
    }
}
