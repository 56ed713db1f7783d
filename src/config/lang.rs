//! The language the model writes code in, as far as what it reads is concerned: the
//! `exec_code` description and its signatures (`PTC_LANG`, `GET /v1/tools?lang=`).
//!
//! TypeScript and JavaScript are one language here: the description types every tool in
//! TypeScript, which JavaScript code calls the same way.

use std::fmt;
use std::str::FromStr;

/// The language of the `exec_code` description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lang {
    #[default]
    Python,
    /// JavaScript, with TypeScript signatures (`typescript`, `ts` and `js` name it too).
    JavaScript,
}

/// What `PTC_LANG` and `?lang=` accept, for their error messages.
pub const LANG_FORMS: &str = "python, javascript (also js, typescript, ts)";

/// A language name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown lang {0:?}; expected {LANG_FORMS}")]
pub struct UnknownLang(pub String);

impl FromStr for Lang {
    type Err = UnknownLang;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "python" => Ok(Lang::Python),
            "javascript" | "js" | "typescript" | "ts" => Ok(Lang::JavaScript),
            _ => Err(UnknownLang(s.to_string())),
        }
    }
}

impl Lang {
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        for (name, lang) in [
            ("python", Lang::Python),
            ("javascript", Lang::JavaScript),
            ("js", Lang::JavaScript),
            ("TypeScript", Lang::JavaScript),
            ("ts", Lang::JavaScript),
        ] {
            assert_eq!(name.parse::<Lang>(), Ok(lang), "{name}");
        }
        assert_eq!(
            "ruby".parse::<Lang>().unwrap_err().to_string(),
            "unknown lang \"ruby\"; expected python, javascript (also js, typescript, ts)"
        );
    }
}
