//! The tool catalog: one immutable, versioned snapshot of every tool, which class it is in
//! (direct or PTC), which policy left it out, and the Python name it has in code.
//!
//! Built by a pure function from parsed sources ([`CatalogInput`]) and a [`Policy`]; a reload
//! builds a new one and swaps it in whole, and a run keeps the snapshot it started with.
//! Rendering what the model sees is `render`'s job, not this module's.

pub mod names;
pub mod source;

use crate::config::Config;
use serde_json::Value;
use source::{Callback, Problem, ToolDef};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

pub use names::Rename;

/// Separates server and tool in MCP tool names: tool `t` of server `s` is `s__t`.
pub const MCP_SEPARATOR: &str = "__";

/// Where a tool runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// In the agent runtime (host protocols).
    Host,
    /// On an MCP server; `tool` is the name the server knows it by.
    Mcp { server: String, tool: String },
}

/// What the model gets for a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Offered to the LLM with its full schema; never callable from code.
    Direct,
    /// Listed in the `exec_code` description and callable from code.
    Ptc,
}

/// One tool of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The name that is dispatched (`read`, `github__list_issues`).
    pub name: String,
    /// The name code calls it by (`get_weather` for `get-weather`).
    pub python_name: String,
    /// The name JavaScript code calls it by: the Python name, but for a word JavaScript has
    /// taken ([`names::js_name`]).
    pub js_name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub annotations: Option<Value>,
    pub origin: Origin,
    pub class: Class,
}

impl Tool {
    /// The MCP server's name, for grouping.
    pub fn server(&self) -> Option<&str> {
        match &self.origin {
            Origin::Mcp { server, .. } => Some(server),
            Origin::Host => None,
        }
    }

    fn from_def(def: ToolDef, origin: Origin) -> Tool {
        Tool {
            name: match &origin {
                Origin::Mcp { server, .. } => format!("{server}{MCP_SEPARATOR}{}", def.name),
                Origin::Host => def.name,
            },
            python_name: String::new(),
            js_name: String::new(),
            title: def.title,
            description: def.description,
            input_schema: def.input_schema,
            output_schema: def.output_schema,
            annotations: def.annotations,
            origin,
            class: Class::Ptc,
        }
    }

    fn read_only_hint(&self) -> bool {
        self.annotations
            .as_ref()
            .and_then(|a| a.get("readOnlyHint"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The tools of one MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTools {
    pub server: String,
    pub tools: Vec<ToolDef>,
}

/// Longest error an [`Unavailable`] server carries, in characters: the description pays for it
/// on every turn, and one line says what failed.
pub const MAX_UNAVAILABLE_ERROR: usize = 200;

/// A configured MCP server that is not running, as the model is told: its tools are missing
/// (it never started) or fail (it died and could not be started again).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Unavailable {
    pub server: String,
    /// What failed, one line of at most [`MAX_UNAVAILABLE_ERROR`] characters (`…` where cut).
    pub error: String,
    /// The longest wait until it is tried again.
    pub retry_within: Duration,
}

impl Unavailable {
    /// `error` made one line (whitespace runs become one space) and cut to
    /// [`MAX_UNAVAILABLE_ERROR`] characters: the same error always gives the same text, so the
    /// description (and its fingerprint) changes only when what failed changes.
    pub fn new(server: &str, error: &str, retry_within: Duration) -> Unavailable {
        let line = error.split_whitespace().collect::<Vec<_>>().join(" ");
        let error = match line.char_indices().nth(MAX_UNAVAILABLE_ERROR) {
            Some((end, _)) => format!("{}…", line[..end].trim_end()),
            None => line,
        };
        Unavailable {
            server: server.to_string(),
            error,
            retry_within,
        }
    }
}

/// Everything the catalog is built from, already parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogInput {
    pub host_tools: Vec<ToolDef>,
    pub callback: Option<Callback>,
    pub servers: Vec<ServerTools>,
    /// Problems found while reading the sources, carried into the catalog for reporting.
    pub problems: Vec<Problem>,
    /// Configured MCP servers that are not running (the hub decides which).
    pub unavailable: Vec<Unavailable>,
}

/// Which tools are direct and which PTC tools code may call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    pub ptc_enabled: bool,
    pub direct_tools: Vec<String>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub read_only: bool,
    /// Tokens the `exec_code` description may take (`PTC_DESCRIPTION_BUDGET`); `None`: no
    /// limit. Not a matter of which tools are callable, but carried with the catalog because
    /// it changes what the model sees of it (and so the fingerprint).
    pub description_budget: Option<usize>,
}

impl From<&Config> for Policy {
    fn from(config: &Config) -> Self {
        Policy {
            ptc_enabled: config.enabled,
            direct_tools: config.direct_tools.clone(),
            allow: config.allow_tools.clone(),
            deny: config.deny_tools.clone(),
            read_only: config.read_only_tools,
            description_budget: Some(config.description_budget),
        }
    }
}

/// Classification exactly as DESIGN.md has it: with PTC off everything is direct; an MCP
/// (`__`) name is always PTC; a name in `PTC_DIRECT_TOOLS` is direct; the rest is PTC.
pub fn classify(name: &str, policy: &Policy) -> Class {
    if !policy.ptc_enabled {
        Class::Direct
    } else if name.contains(MCP_SEPARATOR) {
        Class::Ptc
    } else if policy.direct_tools.iter().any(|d| d == name) {
        Class::Direct
    } else {
        Class::Ptc
    }
}

/// Why policy keeps a PTC tool from code, or `None` when code may call it.
pub fn excluded_by(tool: &Tool, policy: &Policy) -> Option<String> {
    if let Some(pattern) = policy.deny.iter().find(|p| glob_match(p, &tool.name)) {
        return Some(format!("PTC_DENY_TOOLS matches {pattern:?}"));
    }
    if !policy.allow.is_empty() && !policy.allow.iter().any(|p| glob_match(p, &tool.name)) {
        return Some("PTC_ALLOW_TOOLS matches none of its patterns".into());
    }
    if policy.read_only && !(tool.server().is_some() && tool.read_only_hint()) {
        return Some(
            "PTC_READ_ONLY_TOOLS=true and it is not an MCP tool marked readOnlyHint".into(),
        );
    }
    None
}

/// `*` matches any run of characters, `?` any one; everything else matches itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A PTC tool that policy keeps from code.
#[derive(Debug, Clone, PartialEq)]
pub struct Excluded {
    pub name: String,
    pub reason: String,
}

/// The immutable snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    pub version: u64,
    pub ptc_enabled: bool,
    /// Host tools in manifest order, then each MCP server's tools, servers by name and each
    /// server's tools by name: not in the order a server lists them, which may change from
    /// one start to the next while the catalog does not (the description must stay
    /// byte-identical for providers' prompt caches).
    tools: Vec<Tool>,
    by_name: HashMap<String, usize>,
    by_python_name: HashMap<String, usize>,
    /// PTC tools by [`Tool::js_name`] (unique among them, as Python names are).
    by_js_name: HashMap<String, usize>,
    pub callback: Option<Callback>,
    pub excluded: Vec<Excluded>,
    pub renames: Vec<Rename>,
    pub problems: Vec<Problem>,
    /// MCP servers that are not running, by name: the description names them.
    pub unavailable: Vec<Unavailable>,
    /// [`Policy::description_budget`].
    pub description_budget: Option<usize>,
    /// A hash of everything the model sees; equal catalogs have equal fingerprints.
    pub fingerprint: u64,
}

impl Catalog {
    /// Builds a snapshot. Pure: the same input and policy give the same catalog.
    pub fn build(input: CatalogInput, policy: &Policy, version: u64) -> Catalog {
        let CatalogInput {
            host_tools,
            callback,
            mut servers,
            mut problems,
            mut unavailable,
        } = input;
        servers.sort_by(|a, b| a.server.cmp(&b.server));
        unavailable.sort_by(|a, b| a.server.cmp(&b.server));
        for s in &mut servers {
            // Stable: of two tools of one name the first listed is still the one kept.
            s.tools.sort_by(|a, b| a.name.cmp(&b.name));
        }

        let candidates = host_tools
            .into_iter()
            .map(|def| Tool::from_def(def, Origin::Host))
            .chain(servers.into_iter().flat_map(|s| {
                let server = s.server;
                s.tools.into_iter().map(move |def| {
                    let origin = Origin::Mcp {
                        server: server.clone(),
                        tool: def.name.clone(),
                    };
                    Tool::from_def(def, origin)
                })
            }));

        let mut tools: Vec<Tool> = Vec::new();
        let mut by_name = HashMap::new();
        let mut excluded = Vec::new();
        for mut tool in candidates {
            if by_name.contains_key(&tool.name) {
                problems.push(Problem {
                    origin: origin_label(&tool.origin),
                    index: None,
                    tool: Some(tool.name.clone()),
                    message: "duplicates an earlier tool of the same name; the first is kept"
                        .into(),
                    skipped: true,
                });
                continue;
            }
            tool.class = classify(&tool.name, policy);
            if tool.class == Class::Ptc
                && let Some(reason) = excluded_by(&tool, policy)
            {
                excluded.push(Excluded {
                    name: tool.name.clone(),
                    reason,
                });
                continue;
            }
            by_name.insert(tool.name.clone(), tools.len());
            tools.push(tool);
        }

        // Python names are unique among the tools code can call.
        let ptc: Vec<usize> = (0..tools.len())
            .filter(|&i| tools[i].class == Class::Ptc)
            .collect();
        let (python_names, renames) = names::assign(ptc.iter().map(|&i| tools[i].name.as_str()));
        let mut by_python_name = HashMap::new();
        for (&i, python_name) in ptc.iter().zip(python_names) {
            by_python_name.insert(python_name.clone(), i);
            tools[i].python_name = python_name;
        }
        for tool in tools.iter_mut().filter(|t| t.class == Class::Direct) {
            tool.python_name = names::python_name(&tool.name);
        }
        for tool in tools.iter_mut() {
            tool.js_name = names::js_name(&tool.python_name, |n| by_python_name.contains_key(n));
        }
        let by_js_name = by_js_name(&tools);

        let fingerprint = fingerprint(&tools, &unavailable, policy);
        Catalog {
            version,
            ptc_enabled: policy.ptc_enabled,
            tools,
            by_name,
            by_python_name,
            by_js_name,
            callback,
            excluded,
            renames,
            problems,
            unavailable,
            description_budget: policy.description_budget,
            fingerprint,
        }
    }

    /// This catalog without the tools `leave_out` picks, each listed as excluded for `reason`
    /// (a door that cannot answer some tools: the MCP front door has no host to send a call
    /// without a callback to). The others keep their names; a new fingerprint tells the two
    /// apart.
    pub fn without(&self, leave_out: impl Fn(&Tool) -> bool, reason: &str) -> Catalog {
        let mut out = self.clone();
        let (gone, kept): (Vec<Tool>, Vec<Tool>) = std::mem::take(&mut out.tools)
            .into_iter()
            .partition(|t| leave_out(t));
        out.tools = kept;
        out.by_name = (0..out.tools.len())
            .map(|i| (out.tools[i].name.clone(), i))
            .collect();
        out.by_python_name = (0..out.tools.len())
            .filter(|&i| out.tools[i].class == Class::Ptc)
            .map(|i| (out.tools[i].python_name.clone(), i))
            .collect();
        out.by_js_name = by_js_name(&out.tools);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.fingerprint.hash(&mut hasher);
        for t in &gone {
            t.name.hash(&mut hasher);
            out.excluded.push(Excluded {
                name: t.name.clone(),
                reason: reason.to_string(),
            });
        }
        out.fingerprint = hasher.finish();
        out
    }

    /// Every tool the model can reach, direct and PTC, in catalog order.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    pub fn direct(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(|t| t.class == Class::Direct)
    }

    pub fn ptc(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(|t| t.class == Class::Ptc)
    }

    /// A tool by the name that is dispatched.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// A PTC tool by its Python name.
    pub fn by_python_name(&self, python_name: &str) -> Option<&Tool> {
        self.by_python_name
            .get(python_name)
            .map(|&i| &self.tools[i])
    }

    /// A PTC tool by its JavaScript name.
    pub fn by_js_name(&self, js_name: &str) -> Option<&Tool> {
        self.by_js_name.get(js_name).map(|&i| &self.tools[i])
    }

    /// The ETag of what the model sees.
    pub fn etag(&self) -> String {
        format!("\"{:016x}\"", self.fingerprint)
    }

    /// Problems, renames and exclusions as lines for a person.
    pub fn report(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.problems.iter().map(ToString::to_string).collect();
        lines.extend(self.renames.iter().map(|r| {
            format!(
                "tool {:?} is called {} in code: its Python name collides with {:?}",
                r.name, r.python_name, r.collided_with
            )
        }));
        lines.extend(
            self.excluded
                .iter()
                .map(|e| format!("tool {:?} is not callable from code: {}", e.name, e.reason)),
        );
        lines
    }
}

fn origin_label(origin: &Origin) -> String {
    match origin {
        Origin::Host => "host tools".into(),
        Origin::Mcp { server, .. } => format!("mcp server {server}"),
    }
}

fn fingerprint(tools: &[Tool], unavailable: &[Unavailable], policy: &Policy) -> u64 {
    // serde_json renders a Value the same way every time (preserve_order keeps the source's).
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (policy.ptc_enabled, policy.description_budget).hash(&mut hasher);
    unavailable.hash(&mut hasher);
    for t in tools {
        (&t.name, &t.python_name, &t.description, t.class).hash(&mut hasher);
        t.input_schema.to_string().hash(&mut hasher);
        t.output_schema
            .as_ref()
            .map(Value::to_string)
            .hash(&mut hasher);
        t.annotations
            .as_ref()
            .map(Value::to_string)
            .hash(&mut hasher);
    }
    hasher.finish()
}

/// The PTC tools of `tools` by JavaScript name ([`Catalog::by_js_name`]).
fn by_js_name(tools: &[Tool]) -> HashMap<String, usize> {
    (0..tools.len())
        .filter(|&i| tools[i].class == Class::Ptc)
        .map(|i| (tools[i].js_name.clone(), i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn def(name: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            title: None,
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        }
    }

    fn policy(enabled: bool) -> Policy {
        Policy {
            ptc_enabled: enabled,
            direct_tools: vec!["complete".into(), "fail".into(), "fs__read".into()],
            ..Policy::default()
        }
    }

    fn input() -> CatalogInput {
        CatalogInput {
            host_tools: vec![
                def("complete"),
                def("get-weather"),
                def("get_weather"),
                def("fail"),
            ],
            servers: vec![
                ServerTools {
                    server: "fs".into(),
                    tools: vec![def("read"), def("write")],
                },
                ServerTools {
                    server: "db".into(),
                    tools: vec![def("query")],
                },
            ],
            ..CatalogInput::default()
        }
    }

    #[test]
    fn classification_follows_the_design() {
        let p = policy(true);
        assert_eq!(classify("complete", &p), Class::Direct);
        assert_eq!(classify("read", &p), Class::Ptc);
        // `__` always wins, even when listed as direct.
        assert_eq!(classify("fs__read", &p), Class::Ptc);
        assert_eq!(classify("fs__read", &policy(false)), Class::Direct);
        assert_eq!(classify("read", &policy(false)), Class::Direct);
    }

    #[test]
    fn catalog_orders_names_and_indexes_tools() {
        let c = Catalog::build(input(), &policy(true), 3);
        let listed: Vec<(&str, &str, Class)> = c
            .tools()
            .iter()
            .map(|t| (t.name.as_str(), t.python_name.as_str(), t.class))
            .collect();
        assert_eq!(
            listed,
            [
                ("complete", "complete", Class::Direct),
                ("get-weather", "get_weather_2", Class::Ptc),
                ("get_weather", "get_weather", Class::Ptc),
                ("fail", "fail", Class::Direct),
                ("db__query", "db__query", Class::Ptc),
                ("fs__read", "fs__read", Class::Ptc),
                ("fs__write", "fs__write", Class::Ptc),
            ]
        );
        assert_eq!(
            c.by_python_name("get_weather_2").unwrap().name,
            "get-weather"
        );
        assert_eq!(
            c.get("fs__read").unwrap().origin,
            Origin::Mcp {
                server: "fs".into(),
                tool: "read".into()
            }
        );
        assert!(
            c.by_python_name("complete").is_none(),
            "direct tools are not callable from code"
        );
        assert_eq!(c.by_js_name("get_weather_2").unwrap().name, "get-weather");
        assert!(c.by_js_name("complete").is_none());
        assert_eq!(c.renames.len(), 1);
        assert_eq!(c.version, 3);
    }

    #[test]
    fn duplicates_are_reported_and_the_first_kept() {
        let mut i = input();
        let mut dup = def("get-weather");
        dup.description = "second".into();
        i.host_tools.push(dup);
        let c = Catalog::build(i, &policy(true), 1);
        assert_eq!(c.get("get-weather").unwrap().description, "");
        assert_eq!(
            c.report()[0],
            r#"host tools: tool "get-weather": duplicates an earlier tool of the same name; the first is kept (skipped)"#
        );
    }

    #[test]
    fn policy_leaves_tools_out() {
        let mut p = policy(true);
        p.deny = vec!["fs__w*".into()];
        p.allow = vec!["fs__*".into(), "db__?uery".into()];
        let c = Catalog::build(input(), &p, 1);
        let ptc: Vec<&str> = c.ptc().map(|t| t.name.as_str()).collect();
        assert_eq!(ptc, ["db__query", "fs__read"]);
        assert!(c.get("fs__write").is_none());
        assert_eq!(c.excluded.len(), 3);

        let mut i = input();
        i.servers[1].tools[0].annotations = Some(json!({"readOnlyHint": true}));
        let p = Policy {
            read_only: true,
            ..policy(true)
        };
        let c = Catalog::build(i, &p, 1);
        let ptc: Vec<&str> = c.ptc().map(|t| t.name.as_str()).collect();
        assert_eq!(ptc, ["db__query"]);
    }

    #[test]
    fn fingerprint_tracks_content_not_version() {
        let a = Catalog::build(input(), &policy(true), 1);
        let b = Catalog::build(input(), &policy(true), 2);
        assert_eq!(a.etag(), b.etag());
        let mut i = input();
        i.host_tools[1].description = "changed".into();
        assert_ne!(Catalog::build(i, &policy(true), 1).etag(), a.etag());
        assert_ne!(Catalog::build(input(), &policy(false), 1).etag(), a.etag());
        // A server not running is part of what the model sees.
        let mut i = input();
        let minute = Duration::from_secs(60);
        i.unavailable = vec![Unavailable::new("gh", "cannot start", minute)];
        let down = Catalog::build(i.clone(), &policy(true), 1);
        assert_ne!(down.etag(), a.etag());
        assert_eq!(
            Catalog::build(i.clone(), &policy(true), 2).etag(),
            down.etag()
        );
        i.unavailable[0].error = "did not start within 20 s".into();
        assert_ne!(Catalog::build(i, &policy(true), 1).etag(), down.etag());
    }

    #[test]
    fn an_unavailable_servers_error_is_one_bounded_line() {
        let minute = Duration::from_secs(60);
        let u = Unavailable::new(
            "gh",
            "initialize failed:\n  connection closed\t(exit status 1)",
            minute,
        );
        assert_eq!(
            u.error,
            "initialize failed: connection closed (exit status 1)"
        );
        let long = format!("cannot start \"{}\": No such file", "é".repeat(300));
        let u = Unavailable::new("gh", &long, minute);
        assert_eq!(u.error.chars().count(), MAX_UNAVAILABLE_ERROR + 1);
        assert!(u.error.ends_with("éé…"), "{}", u.error);
        assert_eq!(
            Unavailable::new("gh", &long, minute),
            u,
            "the same error, the same text"
        );
    }

    #[test]
    fn listing_order_does_not_change_the_catalog() {
        let mut shuffled = input();
        shuffled.servers.reverse();
        shuffled.servers[1].tools.reverse();
        let (a, b) = (
            Catalog::build(input(), &policy(true), 1),
            Catalog::build(shuffled, &policy(true), 1),
        );
        assert_eq!(a, b);
        let mcp: Vec<&str> = a.tools()[4..].iter().map(|t| t.name.as_str()).collect();
        assert_eq!(mcp, ["db__query", "fs__read", "fs__write"]);
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("github__*", "github__list_issues"));
        assert!(!glob_match("github__*", "gitlab__x"));
        assert!(glob_match("*__read*", "fs__read_file"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
    }
}
