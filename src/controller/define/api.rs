//! metacontroller's controller objects (`metacontroller.k8s.io/v1alpha1`): CompositeController and
//! DecoratorController, read strictly. Every field metacontroller v4.17.2 defines is here with its JSON
//! name; a field it does not define is refused by name (`deny_unknown_fields`), as the API server's
//! strict field validation would refuse it, rather than silently ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::controller::rules::selector::{AnnotationSelector, LabelSelector};

pub const GROUP: &str = "metacontroller.k8s.io";
pub const API_VERSION: &str = "metacontroller.k8s.io/v1alpha1";
pub const COMPOSITE: &str = "CompositeController";
pub const DECORATOR: &str = "DecoratorController";

/// The metadata samplectl reads of a controller object; the rest of it is kept but not looked at.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompositeController {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: Meta,
    pub spec: CompositeSpec,
    /// Declared by the CRD and never written, by metacontroller or samplectl.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompositeSpec {
    pub parent_resource: ParentResource,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_resources: Vec<ChildResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<CompositeHooks>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_configs: Vec<EndpointConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_selector: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentResource {
    pub api_version: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history: Option<RevisionHistory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevisionHistory {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub field_paths: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChildResource {
    pub api_version: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// CompositeController only: what a rolling update waits for in each updated child's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_checks: Option<StatusChecks>,
}

/// How a child that differs from what the hook wants is brought in line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum Method {
    /// Never updated; recreated once someone else deletes it (metacontroller's default).
    #[default]
    OnDelete,
    Recreate,
    InPlace,
    RollingRecreate,
    RollingInPlace,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusChecks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionCheck>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConditionCheck {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompositeHooks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<HookSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<HookSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<HookSpec>,
    /// Accepted by metacontroller's CRD and read by nothing in metacontroller: refused here, so that a
    /// controller relying on them is not silently run without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_update_child: Option<HookSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_update_child: Option<HookSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecoratorController {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: Meta,
    pub spec: DecoratorSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecoratorSpec {
    pub resources: Vec<DecoratedResource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<DecoratorHooks>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_configs: Vec<EndpointConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecoratedResource {
    pub api_version: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attachment {
    pub api_version: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<AttachmentUpdateStrategy>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttachmentUpdateStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecoratorHooks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<HookSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<HookSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<HookSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<HookVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
}

/// Which shape a hook's requests and answers take: v1 keys children relative to the parent, v2 by
/// `namespace/name` and reads answers strictly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HookVersion {
    #[default]
    V1,
    V2,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Webhook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A Go duration (`10s`, `1m30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<Etag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
    #[serde(rename = "responseUnMarshallMode", default, skip_serializing_if = "Option::is_none")]
    pub response_unmarshall_mode: Option<UnmarshallMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    #[serde(rename = "clientTLS", default, skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnmarshallMode {
    Loose,
    Strict,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Etag {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_cleanup_seconds: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceReference {
    pub name: String,
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointConfig {
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    #[serde(rename = "clientTLS", default, skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
}

/// Exactly one of the three.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaBundle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<KeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<KeyRef>,
}

/// A key of a Secret or ConfigMap; `key` defaults to `ca.crt` for a CA bundle.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyRef {
    pub name: String,
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    pub name: String,
    pub namespace: String,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Authorization {
    /// The header's scheme (`Bearer` when empty).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    pub secret_ref: SecretKeyRef,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BasicAuth {
    pub secret_ref: SecretRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientTls {
    pub secret_ref: SecretRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_key: Option<String>,
}
