//! The bounds a flag may change, held once for the whole process: every port and every graph in it
//! shares them, as the API server's `--max-requests-inflight` is one number for all its clients.
//! `reconcile` sets them from its flags before it serves or evaluates anything; a process that never
//! sets them (the other commands, the unit tests) has the defaults.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections each port samplectl listens on keeps open at once (`--max-connections`).
    pub max_connections: usize,
    /// Runs of one shell hook in flight from its webhooks (`--webhook-runs-in-flight`).
    pub webhook_runs_in_flight: usize,
    /// Steps one of kro's CEL expressions may take (`--cel-cost-limit`).
    pub cel_cost_limit: u64,
    /// How long one jqFilter may take over one object (`--jq-timeout`).
    pub jq_timeout: std::time::Duration,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_connections: 2048,
        webhook_runs_in_flight: 8,
        cel_cost_limit: 1_000_000,
        jq_timeout: std::time::Duration::from_secs(5),
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

static LIMITS: OnceLock<Limits> = OnceLock::new();

/// Sets the process's limits; only the first call counts (a second is a mistake of the caller, and
/// ignored rather than change what is already serving).
pub fn set(limits: Limits) {
    let _ = LIMITS.set(limits);
}

pub fn get() -> &'static Limits {
    LIMITS.get_or_init(Limits::default)
}
