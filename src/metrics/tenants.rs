//! LibreChat's users, counted without a series per user: the tokens checked by outcome
//! (`ptc_librechat_tokens`) and the runs of each tenant (`ptc_tenant_runs`), at most
//! [`MAX_TENANT_LABELS`] tenants told apart.

use super::{Labels, labels};
use crate::events::Event;
use crate::util::lock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Mutex;

/// Tenants told apart by the `tenant` label; runs of tenants past it count under `(other)`.
pub const MAX_TENANT_LABELS: usize = 100;

pub(super) struct Tenants {
    tokens: Family<Labels, Counter>,
    runs: Family<Labels, Counter>,
    seen: Mutex<HashSet<String>>,
}

impl Tenants {
    pub(super) fn register(registry: &mut Registry) -> Tenants {
        let tokens = Family::<Labels, Counter>::default();
        registry.register(
            "librechat_tokens",
            "LibreChat tokens checked, by outcome (ok, or the check that refused it: missing, \
             malformed, algorithm, kid, signature, expired, not_yet_valid, audience, issuer, \
             claims)",
            tokens.clone(),
        );
        let runs = Family::<Labels, Counter>::default();
        registry.register(
            "tenant_runs",
            "runs made for LibreChat users, by tenant (tenant_id)",
            runs.clone(),
        );
        Tenants {
            tokens,
            runs,
            seen: Mutex::new(HashSet::new()),
        }
    }

    pub(super) fn token_checked(&self, outcome: &str) {
        self.tokens
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
    }

    /// An `exec.finished` of a user's run counts for its tenant.
    pub(super) fn observe_finished(&self, e: &Event) {
        let Some(tenant) = e.tenant_id.as_deref() else {
            return;
        };
        let label = {
            let mut seen = lock(&self.seen);
            if seen.contains(tenant) || seen.len() < MAX_TENANT_LABELS {
                seen.insert(tenant.to_string());
                tenant
            } else {
                "(other)"
            }
        };
        self.runs.get_or_create(&labels(&[("tenant", label)])).inc();
    }
}
