//! The sidecar keeps its secrets: the secret-bearing variables leave its own environment once the
//! configuration has read them (so `/proc/<sidecar>/environ` and every child spawned without
//! `env_clear` show nothing), and the process is not dumpable (its `/proc` files stay root's, no
//! same-uid ptrace, no core file).
//!
//! Owns those two process-wide steps; must not read the configuration itself.

use std::io;

/// Variables whose values are credentials: the API key, Redis URLs (which carry passwords),
/// and anything named like a secret.
pub const SECRET_VARIABLES: &[&str] = &["PTC_API_KEY", "REDIS_URL"];

/// Whether a variable's name says it holds a credential: one of [`SECRET_VARIABLES`], or a name
/// containing KEY, TOKEN, SECRET, PASSWORD or PASSWD (case-insensitive).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_VARIABLES.contains(&upper.as_str())
        || ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"]
            .iter()
            .any(|word| upper.contains(word))
}

/// Removes `names` from this process's environment and returns those that were set.
///
/// # Safety
///
/// Call it before any other thread exists (before the tokio runtime is built, before any
/// library starts a thread): in edition 2024 `remove_var` is `unsafe` because another thread
/// reading the environment at the same time (`getenv` in libc, a resolver, a TLS library) is
/// undefined behaviour. The values must have been read already: they are gone afterwards.
pub unsafe fn scrub_environment(names: &[&str]) -> Vec<String> {
    let mut removed = Vec::new();
    for name in names {
        if std::env::var_os(name).is_some() {
            // SAFETY: the caller guarantees no other thread exists (see above).
            unsafe { std::env::remove_var(name) };
            removed.push((*name).to_string());
        }
    }
    removed
}

/// Every variable of this process's environment that [`is_secret_name`] flags, for
/// [`scrub_environment`].
pub fn secret_names_in_environment() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| is_secret_name(k))
        .collect()
}

/// `PR_SET_DUMPABLE=0` for this process: `/proc/<pid>/{environ,mem,fd}` become root-owned and
/// unreadable to same-uid processes, ptrace by them is refused, and no core file is written.
pub fn set_not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_recognised() {
        for name in [
            "PTC_API_KEY",
            "REDIS_URL",
            "redis_url",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "PTC_TIMEOUT", "LANG"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn scrubbing_an_unset_name_removes_nothing() {
        // SAFETY: removes nothing (the name is not set), so no other thread can observe a
        // change; the real removal is covered by the integration test in a child process.
        let removed = unsafe { scrub_environment(&["PTC_TEST_SURELY_UNSET_VARIABLE_9"]) };
        assert!(removed.is_empty());
    }
}
