//! Workload 12, `librechat_jwt`: what checking LibreChat's per-request token costs (target: at
//! most 50 µs per request).
//!
//! 1. In process: `Verifier::verify` of tokens minted the way LibreChat mints them, Ed25519
//!    (EdDSA) and RSA-2048 (RS256) keys in one JWKS, per verification, median of rounds.
//! 2. Over HTTP, on a release sidecar with both `PTC_API_KEY` and LibreChat's keys:
//!    `GET /files/{id}` (a route that does almost nothing else) with the API key, a fresh
//!    Ed25519 token, a fresh RSA token, and the API key again as the machine's noise, one
//!    request of each in turn; the median latency of each and the differences.

use crate::shared::{Sidecar, median, round};
use crate::support::jwt::{LIBRECHAT_KID, SigningKey, claims};
use ptc_sidecar::identity::jwt::Verifier;
use serde_json::{Value, json};
use std::time::Instant;

/// Rounds of each measurement; the median is reported.
const ROUNDS: usize = 5;
/// Verifications per round, in process.
const VERIFIES: usize = 2000;
/// Requests of each kind per round, over HTTP.
const REQUESTS: usize = 300;

pub async fn librechat_jwt(http: &reqwest::Client, host: std::net::SocketAddr) -> Value {
    let ed = SigningKey::ed25519(LIBRECHAT_KID);
    let rsa = SigningKey::rsa("lc-codeapi-rsa");
    let jwks = json!({"keys": [ed.jwk, rsa.jwk]}).to_string();
    let verifier = Verifier::parse(&jwks, "librechat", "codeapi").expect("the JWKS reads");
    let mut out = json!({"target_us_per_request": 50});
    for (name, key) in [("eddsa", &ed), ("rs256", &rsa)] {
        let tokens: Vec<String> = (0..64)
            .map(|i| key.mint(&claims(&format!("u{i}"), "legacy")))
            .collect();
        let mut rounds = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            for i in 0..VERIFIES {
                verifier
                    .verify(&tokens[i % tokens.len()])
                    .expect("a good token verifies");
            }
            rounds.push(t.elapsed().as_secs_f64() * 1e6 / VERIFIES as f64);
        }
        out[format!("verify_{name}_us")] = json!(round(median(&mut rounds)));
    }

    let env = [
        ("PTC_API_KEY", "bench-key".to_string()),
        ("PTC_LIBRECHAT_JWT_PUBLIC_KEY", jwks.clone()),
    ];
    let sidecar = crate::start_sidecar_with(host, &env);
    crate::wait_up(http, &sidecar).await;
    // Per round, the median of each kind: the API key, an Ed25519 token, an RSA token, and
    // the API key again (the noise).
    let mut medians = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        // Minted before the timed requests (an RSA signature takes a millisecond), each a
        // fresh token as LibreChat sends; the kinds take turns in a rotating order, so none is
        // always the first after a pause.
        let minted: Vec<[String; 2]> = (0..REQUESTS)
            .map(|i| {
                let c = claims(&format!("u{i}"), "legacy");
                [ed.mint(&c), rsa.mint(&c)]
            })
            .collect();
        let mut round_of: [Vec<f64>; 4] = Default::default();
        for (i, [eddsa, rs256]) in minted.iter().enumerate() {
            let auths = [
                ("x-api-key", "bench-key".to_string()),
                ("authorization", format!("Bearer {eddsa}")),
                ("authorization", format!("Bearer {rs256}")),
                ("x-api-key", "bench-key".to_string()),
            ];
            for turn in 0..4 {
                let kind = (i + turn) % 4;
                round_of[kind].push(get(http, &sidecar, auths[kind].clone()).await);
            }
        }
        for (kind, mut latencies) in round_of.into_iter().enumerate() {
            medians[kind].push(median(&mut latencies));
        }
    }
    let [key, eddsa, rs256, noise] = medians.map(|mut m| median(&mut m));
    out["files_p50_us_api_key"] = json!(round(key));
    out["files_p50_us_eddsa"] = json!(round(eddsa));
    out["files_p50_us_rs256"] = json!(round(rs256));
    out["added_us_per_request_eddsa"] = json!(round(eddsa - key));
    out["added_us_per_request_rs256"] = json!(round(rs256 - key));
    out["noise_us"] = json!(round(noise - key));
    out
}

/// One `GET /files/{id}` of a session nobody has, timed by the client, in µs.
async fn get(http: &reqwest::Client, sidecar: &Sidecar, auth: (&str, String)) -> f64 {
    let t = Instant::now();
    let r = http
        .get(format!("{}/files/bench-none", sidecar.url))
        .header(auth.0, auth.1)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200, "the request was refused");
    r.bytes().await.expect("body");
    t.elapsed().as_secs_f64() * 1e6
}
