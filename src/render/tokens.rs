//! Counting tokens: o200k_base (OpenAI's vocabulary since GPT-4o), the same count the token
//! bench reports, so `PTC_DESCRIPTION_BUDGET` means what the bench measures.
//!
//! The vocabulary is loaded once, on the first count (tens of milliseconds), and shared.

/// Tokens of `text` in o200k_base.
pub fn count(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_with_special_tokens(text)
        .len()
}
