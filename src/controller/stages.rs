//! Where one reaction's time goes: a trace event at each stage between a parent's watch event and its
//! child's create being answered (`received`, `queued`, `started`, `synced`, `create sent`, `create
//! answered`), under the target `samplectl::stages`, for the benchmark to line up by object. Off unless
//! asked for (`RUST_LOG=samplectl::stages=trace` with `--log-format json`, whose lines carry the time);
//! when off, each costs one check of a cached flag.

use kube::api::ObjectMeta;

pub fn reached(stage: &'static str, meta: &ObjectMeta) {
    reached_by(stage, meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
}

pub fn reached_by(stage: &'static str, namespace: &str, name: &str) {
    tracing::trace!(target: "samplectl::stages", stage, namespace, name);
}
