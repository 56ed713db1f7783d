//! Where the variables come from, and which `PTC_*` names nothing reads: the process
//! environment over a `.env` file in the working directory ([`read_dotenv`], dotenvy's parser),
//! layered by [`Config::load`], which also names each unknown `PTC_*` variable with the closest
//! known one ([`Unknown`]).
//!
//! The file's values never enter the process environment: they reach [`Config`] only, so the
//! secrets in it are not seen by children or `/proc/PID/environ`, and the environment's own
//! value of a name always wins. [`Config::load`] is a pure function of the pairs given; only
//! [`Config::from_env`] and [`read_dotenv`] read the process and the disk.

use super::{Config, ConfigError, RawConfig, is_ours};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The file read from the working directory.
pub const DOTENV_FILE: &str = ".env";

/// Largest `.env` read: a configuration is a few kilobytes; anything near this is a mistake
/// (a log or a dump named `.env`), refused instead of parsed.
const MAX_DOTENV_BYTES: u64 = 1 << 20;

/// `PTC_*` names the sidecar does not read but that legitimately sit in its environment or a
/// shared `.env`: the example agents' address of the sidecar (`PTC_URL`, beside their
/// `PTC_API_KEY`), and what the sidecar gives its own bash runs (`PTC_IPC_PORT`, `PTC_TOKEN`),
/// which a sidecar started from such a run inherits.
const READ_ELSEWHERE: [&str; 3] = ["PTC_URL", "PTC_IPC_PORT", "PTC_TOKEN"];
/// Prefixes of names the tests and benchmarks read (`PTC_TEST_REQUIRE_MODEL`,
/// `PTC_TEST_JWT_*`, `PTC_BENCH_VENV`): `scripts/test` exports them to every process it starts.
const PREFIXES_ELSEWHERE: [&str; 2] = ["PTC_TEST_", "PTC_BENCH_"];

/// Where a variable's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Environment,
    DotEnv,
}

/// A `PTC_*` variable nothing reads, with the known name it most likely meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    pub name: String,
    pub origin: Origin,
    pub closest: Option<&'static str>,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not a variable ptc-sidecar reads", self.name)?;
        if self.origin == Origin::DotEnv {
            write!(f, " (in {DOTENV_FILE})")?;
        }
        match self.closest {
            Some(known) => write!(f, "; did you mean {known}?"),
            None => write!(f, "; the variables are listed in .env.example"),
        }
    }
}

/// What loading found besides the configuration: said at start (the unknown names as
/// warnings, before the error when the configuration is refused).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The `.env` read and the names it supplied (ours that the environment did not set).
    pub dotenv: Option<(PathBuf, Vec<String>)>,
    /// Unknown `PTC_*` names, when they are warnings (with `PTC_STRICT_CONFIG=true` they are
    /// the error instead).
    pub unknown: Vec<Unknown>,
}

impl Report {
    /// One line per unknown name, for the log or stderr.
    pub fn warnings(&self) -> Vec<String> {
        self.unknown
            .iter()
            .map(|u| format!("{u} (PTC_STRICT_CONFIG=true makes this an error)"))
            .collect()
    }

    /// What the `.env` supplied, for the log: names only, never values.
    pub fn dotenv_line(&self) -> Option<String> {
        let (path, names) = self.dotenv.as_ref()?;
        Some(if names.is_empty() {
            format!(
                "read {}: it sets no variable the environment does not already set",
                path.display()
            )
        } else {
            format!(
                "read {} (the environment's own values win): {}",
                path.display(),
                names.join(", ")
            )
        })
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read {}: {reason}", .path.display())]
    DotEnv { path: PathBuf, reason: String },
    #[error("PTC_STRICT_CONFIG=true and {}", list(.0))]
    Unknown(Vec<Unknown>),
}

fn list(unknown: &[Unknown]) -> String {
    unknown
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Config {
    /// Reads the process environment and the `.env` of the working directory (below it).
    /// Variables we do not read may hold anything; one we read must be UTF-8.
    pub fn from_env() -> (Report, Result<Config, LoadError>) {
        let mut env = Vec::new();
        for (key, value) in std::env::vars_os() {
            let Some(key) = key.to_str().filter(|k| is_ours(k)) else {
                continue;
            };
            match value.into_string() {
                Ok(value) => env.push((key.to_string(), value)),
                Err(v) => {
                    let error = ConfigError {
                        variable: "environment",
                        value: format!("{key}={}", v.to_string_lossy()),
                        expected: "UTF-8 text".into(),
                    };
                    return (Report::default(), Err(error.into()));
                }
            }
        }
        // A working directory that is gone has no `.env`; the relative name says where it was
        // looked for.
        let path = std::env::current_dir()
            .map(|dir| dir.join(DOTENV_FILE))
            .unwrap_or_else(|_| PathBuf::from(DOTENV_FILE));
        match read_dotenv(&path) {
            Ok(dotenv) => Config::load(env, dotenv.map(|vars| (path, vars))),
            Err(e) => (Report::default(), Err(e)),
        }
    }

    /// The configuration from the environment's variables over a `.env`'s (its path and
    /// pairs), with the report of what came from the file and which `PTC_*` names are unknown.
    pub fn load(
        env: impl IntoIterator<Item = (String, String)>,
        dotenv: Option<(PathBuf, Vec<(String, String)>)>,
    ) -> (Report, Result<Config, LoadError>) {
        let mut vars: BTreeMap<String, (String, Origin)> = BTreeMap::new();
        for (key, value) in env.into_iter().filter(|(k, _)| is_ours(k)) {
            vars.insert(key.to_ascii_uppercase(), (value, Origin::Environment));
        }
        let mut report = Report::default();
        if let Some((path, pairs)) = dotenv {
            let mut supplied = Vec::new();
            for (key, value) in pairs.into_iter().filter(|(k, _)| is_ours(k)) {
                let key = key.to_ascii_uppercase();
                // The environment wins; within the file, the last line of a name does.
                match vars.get(&key) {
                    Some((_, Origin::Environment)) => continue,
                    Some((_, Origin::DotEnv)) => {}
                    None => supplied.push(key.clone()),
                }
                vars.insert(key, (value, Origin::DotEnv));
            }
            report.dotenv = Some((path, supplied));
        }
        report.unknown = vars
            .iter()
            .filter(|(name, _)| !is_known(name))
            .map(|(name, (_, origin))| Unknown {
                name: name.clone(),
                origin: *origin,
                closest: closest(name),
            })
            .collect();
        let config = Config::from_vars(vars.into_iter().map(|(k, (v, _))| (k, v)));
        let config = match config {
            Ok(c) if c.strict_config && !report.unknown.is_empty() => {
                Err(LoadError::Unknown(std::mem::take(&mut report.unknown)))
            }
            Ok(c) => Ok(c),
            Err(e) => Err(e.into()),
        };
        (report, config)
    }
}

/// The pairs of the `.env` at `path` (dotenvy's syntax: `KEY=value`, quotes, `#` comments,
/// `${VAR}` from the lines before or the environment), or `None` when there is no file there.
/// A file that is there but cannot be read or parsed is an error naming its line: a person
/// who wrote it expects it to count.
pub fn read_dotenv(path: &Path) -> Result<Option<Vec<(String, String)>>, LoadError> {
    let error = |reason: String| LoadError::DotEnv {
        path: path.to_path_buf(),
        reason,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(e.to_string())),
    };
    let mut text = String::new();
    file.take(MAX_DOTENV_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| error(e.to_string()))?;
    if text.len() as u64 > MAX_DOTENV_BYTES {
        return Err(error(format!(
            "larger than {MAX_DOTENV_BYTES} bytes; a .env holds a few variables"
        )));
    }
    dotenvy::from_read_iter(text.as_bytes())
        .map(|pair| {
            pair.map_err(|e| match e {
                dotenvy::Error::LineParse(line, _) => {
                    // dotenvy gives the text, not its line number: found again to say where.
                    // Only the line's first word is repeated: the rest may be a secret.
                    let first = line.lines().next().unwrap_or_default();
                    let name: String = first
                        .trim_start()
                        .split(|c: char| c == '=' || c.is_whitespace())
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(64)
                        .collect();
                    let line = match text.lines().position(|l| l.trim() == first.trim()) {
                        Some(n) => format!("line {} ({name})", n + 1),
                        None => format!("the line of {name}"),
                    };
                    error(format!("{line} is not KEY=value (with quotes closed)"))
                }
                other => error(other.to_string()),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Every `PTC_*` name the sidecar reads: the fields of [`RawConfig`], so the list cannot drift
/// from what is read.
static KNOWN: LazyLock<Vec<String>> = LazyLock::new(|| {
    fields_of::<RawConfig>()
        .iter()
        .map(|f| f.to_ascii_uppercase())
        .filter(|f| f.starts_with("PTC_"))
        .collect()
});

/// The `PTC_*` names [`Config::from_vars`] reads.
pub fn known_variables() -> &'static [String] {
    &KNOWN
}

/// Whether `name` (upper case) is read by the sidecar or by something beside it, or is not a
/// `PTC_*` name at all (the others of [`super::OTHER_VARIABLES`] are ours by definition).
fn is_known(name: &str) -> bool {
    !name.starts_with("PTC_")
        || KNOWN.iter().any(|k| k == name)
        || READ_ELSEWHERE.contains(&name)
        || PREFIXES_ELSEWHERE.iter().any(|p| name.starts_with(p))
}

/// The known name nearest `name` by edit distance (a swap of two letters counts one), when it
/// is near enough to be a slip: at most a third of the part after `PTC_`, and at least 2.
/// Ties go to the name first in alphabetical order, so the answer is stable.
pub fn closest(name: &str) -> Option<&'static str> {
    let suffix = name.strip_prefix("PTC_").unwrap_or(name);
    let bound = (suffix.len() / 3).max(2);
    KNOWN
        .iter()
        .map(|k| (strsim::osa_distance(name, k), k.as_str()))
        .filter(|(d, _)| *d <= bound)
        .min()
        .map(|(_, k)| k)
}

/// The field names of a struct deriving `Deserialize`, as serde hands them to a deserializer's
/// `deserialize_struct`: a deserializer that only records them, then stops.
fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("fields recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn pairs(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load(
        env: &[(&str, &str)],
        dotenv: Option<&[(&str, &str)]>,
    ) -> (Report, Result<Config, LoadError>) {
        Config::load(
            pairs(env),
            dotenv.map(|d| (PathBuf::from("/w/.env"), pairs(d))),
        )
    }

    #[test]
    fn the_dotenv_fills_in_below_the_environment() {
        let (report, config) = load(
            &[("PTC_TIMEOUT", "30"), ("HOME", "/root")],
            Some(&[
                ("PTC_TIMEOUT", "99"),
                ("PTC_ENABLED", "true"),
                ("ptc_agent_id", "from-file"),
                ("OPENAI_API_KEY", "not ours"),
                ("PTC_ENABLED", "yes"),
            ]),
        );
        let config = config.unwrap();
        assert_eq!(config.timeout, std::time::Duration::from_secs(30));
        assert!(config.enabled);
        assert_eq!(config.agent_id, "from-file");
        assert_eq!(
            report,
            Report {
                dotenv: Some((
                    PathBuf::from("/w/.env"),
                    vec!["PTC_ENABLED".into(), "PTC_AGENT_ID".into()]
                )),
                unknown: vec![],
            }
        );
        assert_eq!(
            report.dotenv_line().unwrap(),
            "read /w/.env (the environment's own values win): PTC_ENABLED, PTC_AGENT_ID"
        );
        // A bad value from the file is reported like one from the environment.
        let (_, config) = load(&[], Some(&[("PTC_TIMEOUT", "soon")]));
        assert_eq!(
            config.unwrap_err().to_string(),
            "PTC_TIMEOUT=\"soon\" is not valid: a whole number from 1 to 86400"
        );
        // No file: nothing said about one.
        assert_eq!(load(&[], None).0, Report::default());
    }

    #[test]
    fn unknown_names_are_said_with_the_closest_known_one() {
        let (report, config) = load(
            &[
                ("PTC_ENABELD", "true"),
                ("PTC_TIMOUT", "1"),
                ("PTC_URL", "http://127.0.0.1:7400"),
                ("PTC_TEST_REQUIRE_MODEL", "1"),
                ("PTC_BENCH_VENV", "/v"),
                ("PTC_IPC_PORT", "1"),
                ("PTC_TOKEN", "t"),
                ("PTC_ENABLED", "false"),
            ],
            Some(&[("PTC_NOTHING_LIKE_IT", "1"), ("PTC_MAX_RUN", "4")]),
        );
        assert!(!config.unwrap().enabled);
        assert_eq!(
            report.warnings(),
            [
                "PTC_ENABELD is not a variable ptc-sidecar reads; did you mean PTC_ENABLED? \
                 (PTC_STRICT_CONFIG=true makes this an error)",
                "PTC_MAX_RUN is not a variable ptc-sidecar reads (in .env); did you mean \
                 PTC_MAX_RUNS? (PTC_STRICT_CONFIG=true makes this an error)",
                "PTC_NOTHING_LIKE_IT is not a variable ptc-sidecar reads (in .env); the \
                 variables are listed in .env.example (PTC_STRICT_CONFIG=true makes this an \
                 error)",
                "PTC_TIMOUT is not a variable ptc-sidecar reads; did you mean PTC_TIMEOUT? \
                 (PTC_STRICT_CONFIG=true makes this an error)",
            ]
        );
    }

    #[test]
    fn strict_config_makes_an_unknown_name_an_error() {
        let (report, config) = load(
            &[("PTC_STRICT_CONFIG", "true"), ("PTC_SANBOX", "off")],
            None,
        );
        assert_eq!(report.unknown, vec![]);
        assert_eq!(
            config.unwrap_err().to_string(),
            "PTC_STRICT_CONFIG=true and PTC_SANBOX is not a variable ptc-sidecar reads; did \
             you mean PTC_SANDBOX?"
        );
        let (_, config) = load(
            &[("PTC_STRICT_CONFIG", "true"), ("PTC_SANDBOX", "off")],
            None,
        );
        assert!(config.unwrap().strict_config);
        let (_, config) = load(&[("PTC_STRICT_CONFIG", "sure")], None);
        assert!(
            config
                .unwrap_err()
                .to_string()
                .starts_with("PTC_STRICT_CONFIG=\"sure\" is not valid: true or false"),
        );
    }

    #[test]
    fn every_variable_of_env_example_is_known() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join(".env.example");
        let text = std::fs::read_to_string(&example).unwrap();
        let named: std::collections::BTreeSet<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("PTC_") && !w.ends_with('_'))
            // The file's own example of a misspelling.
            .filter(|w| *w != "PTC_ENABELD")
            .collect();
        let unknown: Vec<&&str> = named.iter().filter(|n| !is_known(n)).collect();
        assert_eq!(unknown, Vec::<&&str>::new());
        // And the other way: every variable read is there for a person to find.
        let missing: Vec<&String> = known_variables()
            .iter()
            .filter(|k| !named.contains(k.as_str()))
            .collect();
        assert_eq!(missing, Vec::<&String>::new());
        // And the file parses as the sidecar reads it, every line ours and known.
        let vars = read_dotenv(&example).unwrap().unwrap();
        assert!(vars.len() > 40, "{vars:?}");
        let (report, config) = Config::load(vec![], Some((example, vars)));
        assert_eq!(report.unknown, vec![]);
        config.unwrap();
        // Every field is a known name: the probe saw the struct.
        assert!(known_variables().len() > 50);
        assert!(known_variables().contains(&"PTC_STRICT_CONFIG".to_string()));
    }

    #[test]
    fn a_dotenv_is_read_or_refused_naming_the_line() {
        let dir = std::env::temp_dir().join(format!("ptc-dotenv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".env");
        assert_eq!(read_dotenv(&path), Ok(None));
        std::fs::write(
            &path,
            "# a comment\nPTC_ENABLED=true\nexport PTC_AGENT_ID='a b'\nPTC_TIMEOUT=\"30\" # why\n\n",
        )
        .unwrap();
        assert_eq!(
            read_dotenv(&path).unwrap().unwrap(),
            pairs(&[
                ("PTC_ENABLED", "true"),
                ("PTC_AGENT_ID", "a b"),
                ("PTC_TIMEOUT", "30")
            ])
        );
        std::fs::write(&path, "PTC_ENABLED=true\nPTC_TIMEOUT 30\n").unwrap();
        let err = read_dotenv(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot read {}: line 2 (PTC_TIMEOUT) is not KEY=value (with quotes closed)",
                path.display()
            )
        );
        std::fs::write(&path, "#".repeat(MAX_DOTENV_BYTES as usize + 1)).unwrap();
        assert!(
            read_dotenv(&path)
                .unwrap_err()
                .to_string()
                .contains("larger than 1048576 bytes"),
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
