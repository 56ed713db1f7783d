//! Who a request speaks for: the holder of `PTC_API_KEY` (the operator, or anyone on loopback
//! when no auth is set), or a LibreChat user whose per-request JWT the sidecar verified
//! ([`jwt`]). LibreChat's routes take the [`Principal`] their auth layer found; the session store
//! keeps each session's owner as the opaque [`Principal::owner`] string.
//!
//! A leaf: it imports only [`crate::util`] and knows no HTTP, no session and no run.

pub mod jwt;

use std::sync::Arc;

/// Longest `sub` and `tenant_id` a token may carry: LibreChat's are ids of a few dozen bytes;
/// a claim past this is refused before it reaches an event, a log line or the session store.
pub const MAX_CLAIM_BYTES: usize = 256;

/// Who a request speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The API key's holder, or (with no auth configured, loopback only) whoever connects.
    Operator,
    /// A LibreChat user, from a verified token.
    User(Arc<User>),
}

/// What a verified LibreChat token says of its user (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user's id (`sub`).
    pub sub: String,
    /// The tenant (`tenant_id`; LibreChat mints `legacy` without multi-tenancy): the same `sub`
    /// in two tenants is two users.
    pub tenant_id: String,
}

impl Principal {
    /// The owner string a session made by this principal is kept under: empty for the
    /// operator, the JSON `[tenant_id, sub]` for a user (unambiguous whatever the claims hold).
    pub fn owner(&self) -> String {
        match self {
            Principal::Operator => String::new(),
            Principal::User(user) => serde_json::json!([user.tenant_id, user.sub]).to_string(),
        }
    }

    /// The user, when the request is one's.
    pub fn user(&self) -> Option<&Arc<User>> {
        match self {
            Principal::Operator => None,
            Principal::User(user) => Some(user),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_tell_users_tenants_and_the_operator_apart() {
        let user = |tenant: &str, sub: &str| {
            Principal::User(Arc::new(User {
                sub: sub.into(),
                tenant_id: tenant.into(),
            }))
            .owner()
        };
        assert_eq!(Principal::Operator.owner(), "");
        assert_eq!(user("legacy", "u1"), r#"["legacy","u1"]"#);
        assert_ne!(user("a", "u1"), user("b", "u1"));
        // A separator inside a claim cannot make two principals one.
        assert_ne!(user("a\",\"b", "c"), user("a", "b\",\"c"));
    }
}
