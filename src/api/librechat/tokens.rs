//! Continuation tokens: `hex(claims JSON) "." hex(HMAC-SHA256(key, claims JSON))`, with a
//! random key per sidecar process, so a token dies with the process that issued it.
//!
//! Owns the claims a token carries and minting and checking them; pure apart from the key (the
//! clock is passed in). It must not know runs or rounds beyond the claims: whether a valid
//! token's round is still live is the handlers' question.

use crate::util::{hex, unhex};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What a continuation token says; signed, so the client cannot change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub run: String,
    pub round: u32,
    pub session: String,
    /// Unix milliseconds.
    pub exp: u64,
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TokenError {
    #[error("the continuation token is not one this sidecar issued (malformed or forged)")]
    Invalid,
    #[error("the continuation token expired at its run's deadline")]
    Expired,
}

/// Mints and checks continuation tokens with one key.
pub struct Tokens {
    key: [u8; 32],
}

impl Tokens {
    /// A fresh random key: tokens die with the process that issued them.
    pub fn random() -> Tokens {
        let mut key = [0u8; 32];
        rand::fill(&mut key);
        Tokens { key }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length; a 32-byte one cannot be refused.
        #[allow(clippy::expect_used)]
        <HmacSha256 as KeyInit>::new_from_slice(&self.key).expect("HMAC accepts any key length")
    }

    pub fn mint(&self, claims: &Claims) -> String {
        // Serializing a struct of strings and integers cannot fail.
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&payload);
        format!("{}.{}", hex(&payload), hex(&mac.finalize().into_bytes()))
    }

    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, TokenError> {
        let (payload, tag) = token.split_once('.').ok_or(TokenError::Invalid)?;
        let (payload, tag) = (
            unhex(payload).ok_or(TokenError::Invalid)?,
            unhex(tag).ok_or(TokenError::Invalid)?,
        );
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&tag).map_err(|_| TokenError::Invalid)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::Invalid)?;
        if now_ms >= claims.exp {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn tokens_are_signed_expire_and_die_with_their_key() {
        let tokens = Tokens::random();
        let claims = Claims {
            run: "r1".into(),
            round: 3,
            session: "s".into(),
            exp: 1_000,
        };
        let token = tokens.mint(&claims);
        assert_eq!(tokens.verify(&token, 999), Ok(claims.clone()));
        assert_eq!(tokens.verify(&token, 1_000), Err(TokenError::Expired));
        assert_eq!(Tokens::random().verify(&token, 0), Err(TokenError::Invalid));
        let mut changed = claims.clone();
        changed.round = 4;
        let (_, tag) = token.split_once('.').unwrap();
        let (forged, _) = tokens
            .mint(&changed)
            .split_once('.')
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .unwrap();
        assert_eq!(
            tokens.verify(&format!("{forged}.{tag}"), 0),
            Err(TokenError::Invalid)
        );
        for junk in ["", ".", "zz.zz", "abc", "00.00"] {
            assert_eq!(tokens.verify(junk, 0), Err(TokenError::Invalid), "{junk:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Any claims come back as they went; any change of one character is refused.
        #[test]
        fn minted_tokens_verify_and_any_edit_is_refused(
            run in ".{0,40}",
            round in proptest::prelude::any::<u32>(),
            session in ".{0,40}",
            exp in 1u64..,
            at in proptest::prelude::any::<usize>(),
            with in proptest::prelude::any::<char>(),
        ) {
            let tokens = Tokens::random();
            let claims = Claims { run, round, session, exp };
            let token = tokens.mint(&claims);
            proptest::prop_assert_eq!(tokens.verify(&token, exp - 1), Ok(claims));
            let mut chars: Vec<char> = token.chars().collect();
            let at = at % chars.len();
            proptest::prop_assume!(chars[at] != with);
            chars[at] = with;
            let edited: String = chars.into_iter().collect();
            // Hex reads either case: `A` for `a` is the same token (its round is used once).
            proptest::prop_assume!(edited.to_ascii_lowercase() != token);
            proptest::prop_assert_eq!(tokens.verify(&edited, 0), Err(TokenError::Invalid));
        }

        /// Whatever a client sends as a token, the answer is `Invalid`, never a panic.
        #[test]
        fn any_string_is_refused(token in ".{0,300}", hexish in "[0-9a-f.]{0,300}") {
            let tokens = Tokens::random();
            proptest::prop_assert_eq!(tokens.verify(&token, 0), Err(TokenError::Invalid));
            proptest::prop_assert_eq!(tokens.verify(&hexish, 0), Err(TokenError::Invalid));
        }
    }

    /// The claims travel as JSON in the clear: their hex is exactly the JSON the client could
    /// decode (docs/protocols.md says so).
    #[test]
    fn the_payload_is_the_claims_json_in_hex() {
        let token = Tokens::random().mint(&Claims {
            run: "r".into(),
            round: 1,
            session: "s".into(),
            exp: 5,
        });
        let (payload, tag) = token.split_once('.').unwrap();
        assert_eq!(
            String::from_utf8(unhex(payload).unwrap()).unwrap(),
            r#"{"run":"r","round":1,"session":"s","exp":5}"#
        );
        assert_eq!(tag.len(), 64);
    }
}
