//! Counting tokens: o200k_base (OpenAI's vocabulary since GPT-4o), the same count the token
//! bench reports, so `PTC_DESCRIPTION_BUDGET` means what the bench measures.
//!
//! The vocabulary costs about 45 MB of memory and tens of milliseconds to load, more than the
//! rest of the sidecar together. So it is never kept: [`within`] answers from the text's size
//! alone when that settles it (a token is at least one byte), and a [`Scope`] holds the
//! vocabulary only while a rendering needs it. When the last scope ends the vocabulary is
//! dropped and its pages go back to the system. Must not hold it for the sidecar's life.

use std::sync::{Arc, Mutex, PoisonError};
use tiktoken_rs::CoreBPE;

/// The vocabulary while a [`Scope`] is alive, with the number of live scopes.
static LOADED: Mutex<(usize, Option<Arc<CoreBPE>>)> = Mutex::new((0, None));

/// Keeps the vocabulary loaded while it lives (for the many counts of one rendering).
pub struct Scope(());

/// A scope: the vocabulary is loaded on the first count inside it and dropped when the last
/// scope ends.
pub fn scope() -> Scope {
    LOADED.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
    Scope(())
}

impl Drop for Scope {
    fn drop(&mut self) {
        let released = {
            let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
            loaded.0 -= 1;
            if loaded.0 == 0 { loaded.1.take() } else { None }
        };
        if let Some(bpe) = released {
            drop(bpe);
            give_back_freed_memory();
        }
    }
}

/// Tokens of `text` in o200k_base. Outside a [`Scope`] the vocabulary is loaded for this
/// count alone.
pub fn count(text: &str) -> usize {
    let bpe = {
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        match &loaded.1 {
            Some(bpe) => Some(bpe.clone()),
            None if loaded.0 > 0 => {
                let bpe = Arc::new(load());
                loaded.1 = Some(bpe.clone());
                Some(bpe)
            }
            None => None,
        }
    };
    match bpe {
        Some(bpe) => bpe.encode_with_special_tokens(text).len(),
        None => {
            let n = load().encode_with_special_tokens(text).len();
            give_back_freed_memory();
            n
        }
    }
}

/// Whether `text` is at most `budget` tokens, without the vocabulary when its size settles
/// it: byte-level BPE never makes a token of less than one byte.
pub fn within(text: &str, budget: usize) -> bool {
    text.len() <= budget || count(text) <= budget
}

fn load() -> CoreBPE {
    #[allow(
        clippy::expect_used,
        reason = "the vocabulary is compiled into tiktoken-rs; loading it does not fail"
    )]
    tiktoken_rs::o200k_base().expect("o200k_base loads")
}

/// glibc keeps freed memory for reuse; the vocabulary's ~45 MB would stay in the process's
/// RSS after it is dropped without this.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_and_out_of_a_scope_agree_and_the_size_bound_holds() {
        let text = "Read the complete contents of a file as text. ünïcödé 12345";
        let alone = count(text);
        let scoped = {
            let _scope = scope();
            (count(text), count(text))
        };
        assert_eq!(scoped, (alone, alone));
        assert!(alone <= text.len());
        assert!(within(text, text.len()));
        assert!(within(text, alone));
        assert!(!within(text, alone - 1));
    }
}
