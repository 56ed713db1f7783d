//! LibreChat's per-user JWTs: the public key set (`PTC_LIBRECHAT_JWT_PUBLIC_KEY` as PEM, base64
//! PEM, a JWK, a JWKS or a file holding one of them) and the check of one token.
//!
//! LibreChat (since v0.8.6, `packages/api/src/auth/codeapi.ts`) mints one short-lived token per
//! request to its code API: `{alg: EdDSA | RS256, typ: JWT, kid}` over `iss`, `aud`, `sub`, `iat`,
//! `nbf`, `exp`, `jti`, `tenant_id` and more. A token is let through when its signature verifies
//! with the key its `kid` names (or the only key), under the one algorithm that key's type
//! allows (EdDSA for Ed25519, RS256 for RSA: `none`, HS* and a mismatch are refused before any
//! crypto), and its `iss`, `aud`, `exp` and `nbf` hold with [`LEEWAY_SECS`] of clock skew.
//!
//! The signature and claim checks are `jsonwebtoken`'s (on aws-lc-rs); this file chooses the
//! key and the algorithm, bounds the input and says what failed. A refusal names the check,
//! never the token.

use super::{MAX_CLAIM_BYTES, User};
use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use std::path::Path;

/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 60;

/// Longest token looked at: LibreChat's are under 1 KiB; a header of megabytes is refused
/// before it is decoded.
pub const MAX_TOKEN_BYTES: usize = 8 << 10;

/// Largest key file read, and the most keys a JWKS may hold.
pub const MAX_KEY_FILE_BYTES: u64 = 1 << 20;
pub const MAX_KEYS: usize = 64;

/// `PTC_LIBRECHAT_JWT_ISSUER` and `PTC_LIBRECHAT_JWT_AUDIENCE` by default: what LibreChat mints
/// unless told otherwise.
pub const DEFAULT_ISSUER: &str = "librechat";
pub const DEFAULT_AUDIENCE: &str = "codeapi";

/// The tenant of a token without `tenant_id` (LibreChat's own name for "no tenancy").
pub const DEFAULT_TENANT: &str = "legacy";

/// The forms `PTC_LIBRECHAT_JWT_PUBLIC_KEY` takes, said in every error about it.
pub const KEY_FORM: &str = "LibreChat's public key as PEM (-----BEGIN PUBLIC KEY-----, Ed25519 \
     or RSA), that PEM base64-encoded, a JWK ({\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": ...} \
     or {\"kty\": \"RSA\", \"n\": ..., \"e\": ...}), a JWKS ({\"keys\": [...]}, each with its \
     \"kid\"), or the path of a file holding one of these";

/// The keys tokens are checked against, with the claims every token must carry.
#[derive(Clone)]
pub struct Verifier {
    keys: Vec<Key>,
    issuer: String,
    audience: String,
    eddsa: Validation,
    rs256: Validation,
}

#[derive(Clone)]
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
    /// SHA-256 of the key's public material, to compare configurations.
    fingerprint: [u8; 32],
}

/// Why the key set could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct KeyError {
    pub what: String,
}

fn key_error(what: impl Into<String>) -> KeyError {
    KeyError { what: what.into() }
}

/// Why a token was refused: each says which check failed and what to look at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "no token: send LibreChat's per-request token as Authorization: Bearer <jwt> (LibreChat \
         mints it with CODEAPI_AUTH_PROVIDER=librechat-jwt or CODEAPI_JWT_ENABLED=true)"
    )]
    Missing,
    #[error("the token is not a JWT ({0})")]
    Malformed(String),
    #[error(
        "the token's alg {0:?} is refused: this sidecar takes only EdDSA and RS256 tokens signed with LibreChat's key"
    )]
    AlgRefused(String),
    #[error("the token's alg {token} does not fit the key it names, an {key} key")]
    AlgMismatch { token: String, key: String },
    #[error("the token's kid {0:?} is not in PTC_LIBRECHAT_JWT_PUBLIC_KEY's key set")]
    UnknownKid(String),
    #[error("the token names no kid and PTC_LIBRECHAT_JWT_PUBLIC_KEY holds {0} keys")]
    NoKid(usize),
    #[error(
        "the token's signature does not verify with LibreChat's public key (PTC_LIBRECHAT_JWT_PUBLIC_KEY): another key signed it, or it was changed"
    )]
    BadSignature,
    #[error(
        "the token has expired (exp is past, beyond {LEEWAY_SECS} s of clock skew): LibreChat mints a fresh one per request; check both clocks"
    )]
    Expired,
    #[error(
        "the token is not valid yet (nbf is ahead, beyond {LEEWAY_SECS} s of clock skew): check both clocks"
    )]
    NotYetValid,
    #[error(
        "the token's aud is not {0:?} (PTC_LIBRECHAT_JWT_AUDIENCE, which must be the audience LibreChat mints for)"
    )]
    WrongAudience(String),
    #[error(
        "the token's iss is not {0:?} (PTC_LIBRECHAT_JWT_ISSUER, which must be the issuer LibreChat mints as)"
    )]
    WrongIssuer(String),
    #[error("the token has no {0:?} claim")]
    MissingClaim(String),
    #[error("the token's {0} claim is not usable: {1}")]
    BadClaim(String, String),
}

impl Refusal {
    /// The check that failed, as one word: the `outcome` label of `ptc_librechat_tokens`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed(_) => "malformed",
            Refusal::AlgRefused(_) | Refusal::AlgMismatch { .. } => "algorithm",
            Refusal::UnknownKid(_) | Refusal::NoKid(_) => "kid",
            Refusal::BadSignature => "signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::WrongAudience(_) => "audience",
            Refusal::WrongIssuer(_) => "issuer",
            Refusal::MissingClaim(_) | Refusal::BadClaim(..) => "claims",
        }
    }
}

/// The claims read from a verified token (the rest LibreChat mints is not needed here).
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
}

/// The part of the header read before any crypto.
#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

impl Verifier {
    /// The key set `text` holds (see [`KEY_FORM`]), checking tokens for `issuer` and
    /// `audience`.
    pub fn parse(text: &str, issuer: &str, audience: &str) -> Result<Verifier, KeyError> {
        let keys = keys_of(text, true)?;
        let validation = |alg| {
            let mut v = Validation::new(alg);
            v.leeway = LEEWAY_SECS;
            v.validate_nbf = true;
            v.set_issuer(&[issuer]);
            v.set_audience(&[audience]);
            v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            v
        };
        Ok(Verifier {
            keys,
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            eddsa: validation(Algorithm::EdDSA),
            rs256: validation(Algorithm::RS256),
        })
    }

    /// The user a token speaks for, or why it was refused.
    pub fn verify(&self, token: &str) -> Result<User, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Malformed(format!(
                "{} bytes, over the {MAX_TOKEN_BYTES} a token may have",
                token.len()
            )));
        }
        let header = read_header(token)?;
        let alg = match header.alg.as_str() {
            "EdDSA" => Algorithm::EdDSA,
            "RS256" => Algorithm::RS256,
            other => {
                return Err(Refusal::AlgRefused(
                    crate::util::cut(other, 32).into_owned(),
                ));
            }
        };
        let key = self.key_for(header.kid.as_deref())?;
        if key.alg != alg {
            return Err(Refusal::AlgMismatch {
                token: header.alg,
                key: key_type(key.alg).into(),
            });
        }
        let validation = match alg {
            Algorithm::EdDSA => &self.eddsa,
            _ => &self.rs256,
        };
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, validation)
            .map_err(|e| self.refusal(e.into_kind()))?;
        user_of(data.claims)
    }

    /// The key a token's `kid` names: with one key, that key (unless both name different
    /// kids); with several, the one whose kid it is.
    fn key_for(&self, kid: Option<&str>) -> Result<&Key, Refusal> {
        let named = |kid: &str| self.keys.iter().find(|k| k.kid.as_deref() == Some(kid));
        match (kid, self.keys.as_slice()) {
            (None, [only]) => Ok(only),
            (None, keys) => Err(Refusal::NoKid(keys.len())),
            (Some(_), [only]) if only.kid.is_none() => Ok(only),
            (Some(kid), _) => named(kid)
                .ok_or_else(|| Refusal::UnknownKid(crate::util::cut(kid, 128).into_owned())),
        }
    }

    fn refusal(&self, kind: ErrorKind) -> Refusal {
        match kind {
            ErrorKind::InvalidSignature => Refusal::BadSignature,
            ErrorKind::ExpiredSignature => Refusal::Expired,
            ErrorKind::ImmatureSignature => Refusal::NotYetValid,
            ErrorKind::InvalidAudience => Refusal::WrongAudience(self.audience.clone()),
            ErrorKind::InvalidIssuer => Refusal::WrongIssuer(self.issuer.clone()),
            ErrorKind::MissingRequiredClaim(claim) => Refusal::MissingClaim(claim),
            ErrorKind::InvalidClaimFormat(claim) => {
                Refusal::BadClaim(claim, "it has the wrong type".into())
            }
            ErrorKind::Json(e) => Refusal::Malformed(format!("its JSON does not read: {e}")),
            ErrorKind::Base64(_) => Refusal::Malformed("a part is not base64url".into()),
            other => Refusal::Malformed(format!("{other:?}")),
        }
    }

    /// The keys, their kids and algorithms, and the claims checked: for `/healthz` and the
    /// startup line (public facts only).
    pub fn describe(&self) -> Value {
        serde_json::json!({
            "keys": self.keys.iter().map(|k| serde_json::json!({
                "kid": k.kid,
                "alg": format!("{:?}", k.alg),
            })).collect::<Vec<_>>(),
            "issuer": self.issuer,
            "audience": self.audience,
            "leeway_secs": LEEWAY_SECS,
        })
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Verifier({})", self.describe())
    }
}

impl PartialEq for Verifier {
    fn eq(&self, other: &Verifier) -> bool {
        let of = |v: &Verifier| {
            v.keys
                .iter()
                .map(|k| (k.kid.clone(), k.alg, k.fingerprint))
                .collect::<Vec<_>>()
        };
        self.issuer == other.issuer && self.audience == other.audience && of(self) == of(other)
    }
}

fn key_type(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::EdDSA => "Ed25519 (EdDSA)",
        _ => "RSA (RS256)",
    }
}

/// The header's `alg` and `kid`, read without trusting anything in it.
fn read_header(token: &str) -> Result<Header, Refusal> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed(
            "a JWT is three base64url parts separated by dots".into(),
        ));
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .map_err(|_| Refusal::Malformed("its header is not base64url".into()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Refusal::Malformed(format!("its header is not a JSON object with alg: {e}")))
}

fn user_of(claims: Claims) -> Result<User, Refusal> {
    let bounded = |name: &str, value: String| {
        if value.is_empty() {
            Err(Refusal::BadClaim(name.into(), "it is empty".into()))
        } else if value.len() > MAX_CLAIM_BYTES {
            Err(Refusal::BadClaim(
                name.into(),
                format!("{} bytes, over {MAX_CLAIM_BYTES}", value.len()),
            ))
        } else {
            Ok(value)
        }
    };
    Ok(User {
        sub: bounded(
            "sub",
            claims
                .sub
                .ok_or_else(|| Refusal::MissingClaim("sub".into()))?,
        )?,
        tenant_id: bounded(
            "tenant_id",
            claims.tenant_id.unwrap_or_else(|| DEFAULT_TENANT.into()),
        )?,
    })
}

/// The keys `text` holds; `may_be_path`: it may name a file holding them (not again inside it).
fn keys_of(text: &str, may_be_path: bool) -> Result<Vec<Key>, KeyError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(key_error(format!("it is empty; expected {KEY_FORM}")));
    }
    if t.starts_with("-----BEGIN") {
        return pem_key(t).map(|k| vec![k]);
    }
    if t.starts_with('{') {
        let value: Value = serde_json::from_str(t)
            .map_err(|e| key_error(format!("it is not valid JSON ({e}); expected {KEY_FORM}")))?;
        return match value.get("keys") {
            Some(keys) => jwks(keys),
            None => jwk_key(&value).map(|k| vec![k]),
        };
    }
    if may_be_path && t.starts_with('/') {
        return keys_of(&read_file(Path::new(t))?, false);
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(t.split_whitespace().collect::<String>())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| s.trim_start().starts_with("-----BEGIN"))
        .ok_or_else(|| key_error(format!("it is none of the forms accepted: {KEY_FORM}")))?;
    keys_of(&decoded, false)
}

fn read_file(path: &Path) -> Result<String, KeyError> {
    use std::io::Read;
    let err = |e: std::io::Error| key_error(format!("cannot read {}: {e}", path.display()));
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(err)?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(key_error(format!(
            "{} is over {MAX_KEY_FILE_BYTES} bytes: it is not a key",
            path.display()
        )));
    }
    Ok(text)
}

const PRIVATE: &str = "this is a private key: give the sidecar only the public half (openssl pkey \
     -in private.pem -pubout), and keep the private key with LibreChat";

fn pem_key(pem: &str) -> Result<Key, KeyError> {
    let first = pem.lines().next().unwrap_or_default();
    if first.contains("PRIVATE") {
        return Err(key_error(PRIVATE));
    }
    let fingerprint = sha(pem.as_bytes());
    if let Ok(key) = DecodingKey::from_ed_pem(pem.as_bytes()) {
        return Ok(Key {
            kid: None,
            alg: Algorithm::EdDSA,
            key,
            fingerprint,
        });
    }
    DecodingKey::from_rsa_pem(pem.as_bytes())
        .map(|key| Key {
            kid: None,
            alg: Algorithm::RS256,
            key,
            fingerprint,
        })
        .map_err(|e| {
            key_error(format!(
                "the PEM is neither an Ed25519 nor an RSA public key ({e}); expected {KEY_FORM}"
            ))
        })
}

fn jwks(keys: &Value) -> Result<Vec<Key>, KeyError> {
    let keys = keys
        .as_array()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| key_error("a JWKS's \"keys\" must be a list of one or more JWKs"))?;
    if keys.len() > MAX_KEYS {
        return Err(key_error(format!(
            "the JWKS holds {} keys, more than {MAX_KEYS}",
            keys.len()
        )));
    }
    let parsed = keys.iter().map(jwk_key).collect::<Result<Vec<_>, _>>()?;
    if parsed.len() > 1 {
        let mut kids = Vec::new();
        for key in &parsed {
            match &key.kid {
                None => {
                    return Err(key_error(
                        "a JWKS of several keys needs a \"kid\" on each: tokens name their key by it",
                    ));
                }
                Some(kid) if kids.contains(&kid) => {
                    return Err(key_error(format!("the JWKS has two keys with kid {kid:?}")));
                }
                Some(kid) => kids.push(kid),
            }
        }
    }
    Ok(parsed)
}

fn jwk_key(value: &Value) -> Result<Key, KeyError> {
    let field = |name: &str| value.get(name).and_then(Value::as_str);
    if value.get("d").is_some() {
        return Err(key_error(PRIVATE));
    }
    if field("use").is_some_and(|u| u != "sig") {
        return Err(key_error(
            "the JWK's \"use\" is not \"sig\": it is not a signing key",
        ));
    }
    let alg = match (field("kty"), field("crv")) {
        (Some("OKP"), Some("Ed25519")) => Algorithm::EdDSA,
        (Some("RSA"), _) => Algorithm::RS256,
        (kty, crv) => {
            let (kty, crv) = (kty.unwrap_or("(none)"), crv.unwrap_or("(none)"));
            return Err(key_error(format!(
                "a JWK of kty {kty:?} (crv {crv:?}) is not one LibreChat signs with: it signs \
                 with Ed25519 (kty OKP, crv Ed25519) or RSA (kty RSA) keys"
            )));
        }
    };
    let named = match alg {
        Algorithm::EdDSA => "EdDSA",
        _ => "RS256",
    };
    if let Some(declared) = field("alg").filter(|a| *a != named) {
        return Err(key_error(format!(
            "the JWK says alg {declared:?}, but its key type is used with {named}"
        )));
    }
    let jwk: Jwk = serde_json::from_value(value.clone())
        .map_err(|e| key_error(format!("the JWK does not read: {e}")))?;
    let key = DecodingKey::from_jwk(&jwk)
        .map_err(|e| key_error(format!("the JWK's key does not read: {e}")))?;
    if alg == Algorithm::EdDSA && key.try_get_as_bytes().map(<[u8]>::len).ok() != Some(32) {
        return Err(key_error("the JWK's x is not a 32-byte Ed25519 public key"));
    }
    Ok(Key {
        kid: field("kid").map(str::to_string),
        alg,
        key,
        fingerprint: sha(value.to_string().as_bytes()),
    })
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

#[cfg(test)]
#[path = "../../tests/support/jwt.rs"]
mod minting;

#[cfg(test)]
mod tests {
    use super::minting::{self, SigningKey, claims, hs256, swap_payload, unsigned, with};
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::sync::OnceLock;

    fn ed() -> &'static SigningKey {
        static KEY: OnceLock<SigningKey> = OnceLock::new();
        KEY.get_or_init(|| SigningKey::ed25519(minting::LIBRECHAT_KID))
    }

    fn rsa() -> &'static SigningKey {
        static KEY: OnceLock<SigningKey> = OnceLock::new();
        KEY.get_or_init(|| SigningKey::rsa("rsa-1"))
    }

    fn verifier(text: &str) -> Verifier {
        Verifier::parse(text, DEFAULT_ISSUER, DEFAULT_AUDIENCE).unwrap()
    }

    #[test]
    fn every_key_form_verifies_librechats_tokens() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let dir = std::env::temp_dir().join(format!("ptc-jwt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key.pem");
        std::fs::write(&file, &ed().public_pem).unwrap();
        let jwks = json!({"keys": [ed().jwk, rsa().jwk]}).to_string();
        for (form, text, key) in [
            ("Ed25519 PEM", ed().public_pem.clone(), ed()),
            ("RSA PEM", rsa().public_pem.clone(), rsa()),
            ("base64 PEM", b64(&ed().public_pem), ed()),
            ("Ed25519 JWK", ed().jwk.to_string(), ed()),
            ("RSA JWK", rsa().jwk.to_string(), rsa()),
            ("JWKS, Ed25519", jwks.clone(), ed()),
            ("JWKS, RSA", jwks.clone(), rsa()),
            ("a file", file.display().to_string(), ed()),
        ] {
            let user = verifier(&text).verify(&key.mint(&claims("u1", "t1")));
            assert_eq!(
                user,
                Ok(User {
                    sub: "u1".into(),
                    tenant_id: "t1".into()
                }),
                "{form}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn each_refusal_says_what_failed() {
        let v = verifier(&json!({"keys": [ed().jwk, rsa().jwk]}).to_string());
        let good = claims("u1", "legacy");
        let now = minting::now();
        let other = SigningKey::ed25519(minting::LIBRECHAT_KID);
        let token = ed().mint(&good);
        let cases: Vec<(&str, String, Refusal)> = vec![
            (
                "expired",
                ed().mint(&with(good.clone(), "exp", json!(now - 61))),
                Refusal::Expired,
            ),
            (
                "not yet valid",
                ed().mint(&with(good.clone(), "nbf", json!(now + 120))),
                Refusal::NotYetValid,
            ),
            (
                "wrong aud",
                ed().mint(&with(good.clone(), "aud", json!("other"))),
                Refusal::WrongAudience("codeapi".into()),
            ),
            (
                "wrong iss",
                ed().mint(&with(good.clone(), "iss", json!("evil"))),
                Refusal::WrongIssuer("librechat".into()),
            ),
            ("another key", other.mint(&good), Refusal::BadSignature),
            (
                "alg none",
                unsigned(&good),
                Refusal::AlgRefused("none".into()),
            ),
            (
                "HS256 keyed with the public key",
                hs256(ed().public_pem.as_bytes(), minting::LIBRECHAT_KID, &good),
                Refusal::AlgRefused("HS256".into()),
            ),
            (
                "a swapped payload",
                swap_payload(&token, &claims("admin", "legacy")),
                Refusal::BadSignature,
            ),
            (
                "a kid not in the set",
                SigningKey::ed25519("lc-unknown").mint(&good),
                Refusal::UnknownKid("lc-unknown".into()),
            ),
            (
                "no kid with two keys",
                ed().mint_without_kid(&good),
                Refusal::NoKid(2),
            ),
            (
                "RS256 under the Ed25519 key's kid",
                {
                    let mut k = SigningKey::rsa(minting::LIBRECHAT_KID);
                    k.kid = minting::LIBRECHAT_KID.into();
                    k.mint(&good)
                },
                Refusal::AlgMismatch {
                    token: "RS256".into(),
                    key: "Ed25519 (EdDSA)".into(),
                },
            ),
            (
                "no sub",
                ed().mint(&{
                    let mut c = good.clone();
                    c.as_object_mut().unwrap().remove("sub");
                    c
                }),
                Refusal::MissingClaim("sub".into()),
            ),
            (
                "no exp",
                ed().mint(&{
                    let mut c = good.clone();
                    c.as_object_mut().unwrap().remove("exp");
                    c
                }),
                Refusal::MissingClaim("exp".into()),
            ),
            (
                "a huge sub",
                ed().mint(&with(good.clone(), "sub", json!("x".repeat(300)))),
                Refusal::BadClaim("sub".into(), "300 bytes, over 256".into()),
            ),
            (
                "not a JWT",
                "abc".into(),
                Refusal::Malformed("a JWT is three base64url parts separated by dots".into()),
            ),
            (
                "a 9 KiB token",
                "a".repeat(9 << 10),
                Refusal::Malformed("9216 bytes, over the 8192 a token may have".into()),
            ),
        ];
        for (case, token, refusal) in cases {
            let got = v.verify(&token);
            assert_eq!(got, Err(refusal.clone()), "{case}");
            // A refusal never repeats the token.
            assert!(!refusal.to_string().contains(&token), "{case}");
        }
    }

    #[test]
    fn the_leeway_is_sixty_seconds() {
        let v = verifier(&ed().public_pem);
        let now = minting::now();
        let good = claims("u1", "legacy");
        assert!(
            v.verify(&ed().mint(&with(good.clone(), "exp", json!(now - 30))))
                .is_ok()
        );
        assert!(
            v.verify(&ed().mint(&with(good.clone(), "nbf", json!(now + 30))))
                .is_ok()
        );
        assert_eq!(
            v.verify(&ed().mint(&with(good.clone(), "exp", json!(now - 90)))),
            Err(Refusal::Expired)
        );
        // No tenant_id: LibreChat's own name for no tenancy.
        let mut bare = good;
        bare.as_object_mut().unwrap().remove("tenant_id");
        assert_eq!(v.verify(&ed().mint(&bare)).unwrap().tenant_id, "legacy");
    }

    #[test]
    fn bad_key_material_is_a_clear_error() {
        let err = |text: &str| Verifier::parse(text, "i", "a").unwrap_err().what;
        assert!(err("").contains("empty"));
        assert!(err(&ed().private_pem).contains("private key"));
        assert!(
            err(&json!({"kty": "OKP", "crv": "Ed25519", "x": "AA", "d": "AA"}).to_string())
                .contains("private key")
        );
        assert!(
            err(&json!({"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}).to_string())
                .contains("kty \"EC\"")
        );
        assert!(err(&json!({"kty": "oct", "k": "c2VjcmV0"}).to_string()).contains("kty \"oct\""));
        assert!(
            err(&json!({"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}).to_string())
                .contains("32-byte")
        );
        assert!(
            err(
                &json!({"keys": [ed().jwk, {"kty": "OKP", "crv": "Ed25519", "x": ed().jwk["x"]}]})
                    .to_string()
            )
            .contains("\"kid\" on each")
        );
        assert!(
            err(&json!({"keys": [ed().jwk, ed().jwk]}).to_string()).contains("two keys with kid")
        );
        assert!(err(&json!({"keys": []}).to_string()).contains("one or more"));
        assert!(err("/nonexistent/key.pem").contains("cannot read /nonexistent/key.pem"));
        assert!(err("not a key at all").contains("none of the forms"));
        assert!(
            err("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----").contains("neither")
        );
        assert!(
            err(&json!({"kty": "RSA", "n": "AQAB", "e": "AQAB", "alg": "PS256"}).to_string())
                .contains("PS256")
        );
    }

    #[test]
    fn configurations_compare_by_their_keys() {
        assert_eq!(verifier(&ed().public_pem), verifier(&ed().public_pem));
        assert_ne!(verifier(&ed().public_pem), verifier(&rsa().public_pem));
        assert_ne!(
            verifier(&ed().public_pem),
            Verifier::parse(&ed().public_pem, "other", DEFAULT_AUDIENCE).unwrap()
        );
    }
}
