//! Tokens minted the way LibreChat's server mints them for its code API
//! (`packages/api/src/auth/codeapi.ts`): a key pair made here (Ed25519 or RSA-2048, by
//! aws-lc-rs), the header `{alg, typ: JWT, kid}` and LibreChat's claims. Also the forgeries the
//! refusal tests try (`alg: none`, HS256 keyed with the public key, a swapped payload).
//!
//! Used by the sidecar's unit tests (`src/identity/jwt.rs`), the integration tests and the
//! bench, each including this file with `#[path]`; it needs only crates of the sidecar's tree.

#![allow(dead_code)]

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::KeyPair;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// LibreChat's default `kid`.
pub const LIBRECHAT_KID: &str = "lc-codeapi-2026-05";

/// A key pair, its public half in every form the sidecar reads, and a way to sign with it.
pub struct SigningKey {
    pub alg: Algorithm,
    pub kid: String,
    encoding: EncodingKey,
    /// PKCS#8 PEM, as LibreChat's `CODEAPI_JWT_PRIVATE_KEY` holds it (for the node client).
    pub private_pem: String,
    /// SPKI PEM: what `PTC_LIBRECHAT_JWT_PUBLIC_KEY` takes.
    pub public_pem: String,
    /// The public key as a JWK with its `kid`.
    pub jwk: Value,
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl SigningKey {
    pub fn ed25519(kid: &str) -> SigningKey {
        let pair = aws_lc_rs::signature::Ed25519KeyPair::generate().unwrap();
        let pkcs8 = pair.to_pkcs8v1().unwrap();
        let public = pair.public_key();
        SigningKey {
            alg: Algorithm::EdDSA,
            kid: kid.into(),
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            private_pem: pem("PRIVATE KEY", pkcs8.as_ref()),
            public_pem: pem("PUBLIC KEY", public.as_der().unwrap().as_ref()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "x": b64url(public.as_ref()), "kid": kid, "use": "sig", "alg": "EdDSA"}),
        }
    }

    pub fn rsa(kid: &str) -> SigningKey {
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let pkcs8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair).unwrap();
        let private_pem = pem("PRIVATE KEY", pkcs8.as_ref());
        let public = pair.public_key();
        let spki = public.as_der().unwrap();
        let (n, e) = rsa_components(public.as_ref());
        SigningKey {
            alg: Algorithm::RS256,
            kid: kid.into(),
            encoding: EncodingKey::from_rsa_pem(private_pem.as_bytes()).unwrap(),
            private_pem,
            public_pem: pem("PUBLIC KEY", spki.as_ref()),
            jwk: json!({"kty": "RSA", "n": b64url(&n), "e": b64url(&e), "kid": kid, "use": "sig", "alg": "RS256"}),
        }
    }

    /// A token of `claims` signed with this key, its header as LibreChat's.
    pub fn mint(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }

    /// A token signed with this key but naming no kid.
    pub fn mint_without_kid(&self, claims: &Value) -> String {
        jsonwebtoken::encode(&Header::new(self.alg), claims, &self.encoding).unwrap()
    }
}

/// Modulus and exponent of a DER `RSAPublicKey` (SEQUENCE { INTEGER n, INTEGER e }).
fn rsa_components(der: &[u8]) -> (Vec<u8>, Vec<u8>) {
    fn read(der: &[u8], at: &mut usize) -> Vec<u8> {
        let _tag = der[*at];
        let mut len = der[*at + 1] as usize;
        *at += 2;
        if len & 0x80 != 0 {
            let n = len & 0x7f;
            len = der[*at..*at + n]
                .iter()
                .fold(0, |acc, b| (acc << 8) | *b as usize);
            *at += n;
        }
        let value = der[*at..*at + len].to_vec();
        *at += len;
        value
    }
    let mut at = 0;
    let seq = read(der, &mut at);
    let mut at = 0;
    let strip = |v: Vec<u8>| v.into_iter().skip_while(|b| *b == 0).collect::<Vec<u8>>();
    let n = strip(read(&seq, &mut at));
    let e = strip(read(&seq, &mut at));
    (n, e)
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The claims LibreChat mints for `sub` in `tenant`, valid from now for 300 s.
pub fn claims(sub: &str, tenant: &str) -> Value {
    let now = now();
    let mut jti = [0u8; 16];
    aws_lc_rs::rand::fill(&mut jti).unwrap();
    json!({
        "iss": "librechat",
        "aud": "codeapi",
        "sub": sub,
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "jti": b64url(&jti),
        "tenant_id": tenant,
        "role": "USER",
        "principal_source": "session",
        "auth_context_hash": "3f1c",
    })
}

/// `claims` with `field` set to `value`.
pub fn with(mut claims: Value, field: &str, value: Value) -> Value {
    claims[field] = value;
    claims
}

/// An unsigned token: `{alg: none}`.
pub fn unsigned(claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT"});
    format!(
        "{}.{}.",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    )
}

/// HS256 keyed with `secret` (the classic confusion: the public key's bytes as an HMAC key).
pub fn hs256(secret: &[u8], kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret)).unwrap()
}

/// `token` with its payload replaced by `claims`, its header and signature kept.
pub fn swap_payload(token: &str, claims: &Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    format!(
        "{}.{}.{}",
        parts[0],
        b64url(claims.to_string().as_bytes()),
        parts[2]
    )
}
