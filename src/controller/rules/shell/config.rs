//! A hook's `--config` answer read as shell-operator reads it: YAML or JSON, `configVersion` v1 (or v0
//! when absent), its shape checked first (`schema`), then the checks a schema cannot make (crontabs,
//! apiVersion, selectors, jqFilter, `includeSnapshotsFrom` naming one of the hook's own kubernetes
//! bindings, `settings`), then the defaults filled in and each group's kubernetes bindings added to the
//! snapshots of every binding in the group. The refusals are shell-operator's words.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::cron::Crontab;
use super::jq::Jq;
use super::schema;
use crate::controller::rules::selector::LabelSelector;

/// What a hook said it is bound to.
#[derive(Debug)]
pub struct HookConfig {
    pub version: ConfigVersion,
    /// `onStartup`: its place among the start-up runs, lowest first.
    pub on_startup: Option<f64>,
    pub schedules: Vec<Schedule>,
    pub kubernetes: Vec<Kubernetes>,
    /// `kubernetesValidating`, then `kubernetesMutating`.
    pub admission: Vec<Admission>,
    /// `kubernetesCustomResourceConversion`.
    pub conversion: Vec<Conversion>,
    /// `settings`: a token bucket in front of every run.
    pub settings: Option<Settings>,
}

/// A `kubernetesValidating` or `kubernetesMutating` binding: an entry of the hooks'
/// Validating/MutatingWebhookConfiguration, called at `/hooks/<id>`.
#[derive(Debug)]
pub struct Admission {
    pub name: String,
    pub mutating: bool,
    /// The name as a URL path segment (shell-operator's `SafeURLString`).
    pub id: String,
    /// The configuration's entry as the binding declares it, with shell-operator's defaults; the
    /// client configuration is added when it is registered.
    pub entry: Value,
    pub group: Option<String>,
    pub include_snapshots: Vec<String>,
}

/// A `kubernetesCustomResourceConversion` binding: the conversions it makes for one CRD.
#[derive(Debug)]
pub struct Conversion {
    pub name: String,
    pub crd_name: String,
    /// `(fromVersion, toVersion)`, each `group/version` or a bare version.
    pub rules: Vec<(String, String)>,
    pub group: Option<String>,
    pub include_snapshots: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigVersion {
    V0,
    V1,
}

#[derive(Debug)]
pub struct Schedule {
    pub name: String,
    /// As written: ticks of byte-identical crontabs fire together.
    pub crontab: String,
    pub parsed: Crontab,
    pub allow_failure: bool,
    pub queue: String,
    pub group: Option<String>,
    pub include_snapshots: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum WatchEvent {
    Added,
    Modified,
    Deleted,
}

impl WatchEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEvent::Added => "Added",
            WatchEvent::Modified => "Modified",
            WatchEvent::Deleted => "Deleted",
        }
    }
}

#[derive(Debug)]
pub struct Kubernetes {
    pub name: String,
    /// How shell-operator names the binding in messages: `kubernetes[0]{name}`, or `kubernetes[0]`.
    pub debug_name: String,
    pub api_version: Option<String>,
    pub kind: String,
    pub events: Vec<WatchEvent>,
    pub execute_on_synchronization: bool,
    pub keep_full_objects: bool,
    pub allow_failure: bool,
    pub queue: String,
    pub group: Option<String>,
    pub include_snapshots: Vec<String>,
    /// `nameSelector.matchNames` (or v0's `objectName`).
    pub names: Vec<String>,
    pub labels: Option<LabelSelector>,
    /// `fieldSelector.matchExpressions`, as a list request's `fieldSelector`.
    pub fields: Option<String>,
    pub namespaces: Namespaces,
    pub jq: Option<Jq>,
    /// A v0 hook: its contexts have v0's shape and it gets no Synchronization run.
    pub v0: bool,
}

/// Which namespaces a kubernetes binding watches.
#[derive(Debug, Default)]
pub enum Namespaces {
    #[default]
    All,
    Named(Vec<String>),
    /// Those whose labels match, followed as namespaces come, go and change.
    Labelled(LabelSelector),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub min_interval: Duration,
    pub burst: u32,
}

/// Reads `output`, the hook's answer to `--config`. The error is shell-operator's text for it.
pub fn parse(output: &[u8]) -> Result<HookConfig, String> {
    let text = String::from_utf8_lossy(output);
    // As Go's YAML reads it: YAML 1.1, where `yes`, `on` and `y` are booleans.
    let value: Value = match text.trim() {
        "" => Value::Null,
        _ => serde_saphyr::from_str::<Value>(&text).map_err(|err| format!("config unmarshal: {err}"))?,
    };
    let version = match value.get("configVersion") {
        None => ConfigVersion::V0,
        Some(Value::Null) => return Err("config version: missing 'configVersion' value".into()),
        Some(Value::String(v)) if v == "v1" => ConfigVersion::V1,
        Some(Value::String(v)) if v == "v0" => ConfigVersion::V0,
        Some(Value::String(v)) => return Err(format!("config version: 'configVersion' value '{v}' is unsupported")),
        Some(_) => return Err("config version: string value is expected for key 'configVersion'".into()),
    };
    if !value.is_object() {
        return Err(schema::joined(&["must be of type object".to_owned()]));
    }
    let problems = schema::problems(&value, if version == ConfigVersion::V1 { "v1" } else { "v0" });
    if !problems.is_empty() {
        return Err(schema::joined(&problems));
    }
    match version {
        ConfigVersion::V1 => {
            v1(serde_json::from_value(value).map_err(|err| format!("unmarshal HookConfig v1: {err}"))?)
        }
        ConfigVersion::V0 => v0(value),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawV1 {
    on_startup: Option<f64>,
    #[serde(default)]
    schedule: Vec<RawSchedule>,
    #[serde(default)]
    kubernetes: Vec<RawKubernetes>,
    #[serde(default)]
    kubernetes_validating: Vec<Value>,
    #[serde(default)]
    kubernetes_mutating: Vec<Value>,
    #[serde(default)]
    kubernetes_custom_resource_conversion: Vec<RawConversion>,
    settings: Option<RawSettings>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAdmission {
    name: String,
    group: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    timeout_seconds: Option<i64>,
    label_selector: Option<LabelSelector>,
    namespace: Option<RawNamespace>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConversion {
    name: String,
    group: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    crd_name: String,
    conversions: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    from_version: String,
    to_version: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSchedule {
    name: Option<String>,
    crontab: String,
    #[serde(default)]
    allow_failure: bool,
    queue: Option<String>,
    group: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKubernetes {
    name: Option<String>,
    api_version: Option<String>,
    kind: String,
    execute_hook_on_event: Option<Vec<WatchEvent>>,
    watch_event: Option<Vec<WatchEvent>>,
    execute_hook_on_synchronization: Option<bool>,
    keep_full_objects_in_memory: Option<bool>,
    #[serde(default)]
    allow_failure: bool,
    queue: Option<String>,
    group: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    name_selector: Option<RawNames>,
    label_selector: Option<LabelSelector>,
    field_selector: Option<RawFields>,
    namespace: Option<RawNamespace>,
    jq_filter: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNames {
    #[serde(default)]
    match_names: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFields {
    #[serde(default)]
    match_expressions: Vec<RawField>,
}

#[derive(Deserialize)]
struct RawField {
    field: String,
    operator: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNamespace {
    name_selector: Option<RawNames>,
    label_selector: Option<LabelSelector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSettings {
    execution_min_interval: Option<String>,
    execution_burst: Option<f64>,
}

fn v1(raw: RawV1) -> Result<HookConfig, String> {
    let settings = raw.settings.map(settings).transpose()?;
    let mut kubernetes = Vec::new();
    for (i, binding) in raw.kubernetes.into_iter().enumerate() {
        let debug_name = debug_name(i, binding.name.as_deref().unwrap_or_default());
        let mut parsed = kubernetes_v1(binding).map_err(|err| match err.strip_prefix("jqFilter: ") {
            Some(jq) => format!("invalid kubernetes config [{i}] jqFilter: {jq}"),
            None => format!("invalid kubernetes config [{i}]: {err}"),
        })?;
        parsed.debug_name = debug_name;
        kubernetes.push(parsed);
    }
    for (i, binding) in kubernetes.iter().enumerate() {
        check_snapshots(&kubernetes, &binding.include_snapshots)
            .map_err(|err| format!("invalid kubernetes config [{i}]: includeSnapshots {err}"))?;
    }
    let mut schedules = Vec::new();
    for (i, s) in raw.schedule.into_iter().enumerate() {
        let mut problems = Vec::new();
        let parsed = Crontab::parse(&s.crontab).map_err(|err| problems.push(format!("crontab is invalid: {err}")));
        if let Err(err) = check_snapshots(&kubernetes, &s.include_snapshots_from) {
            problems.push(format!("includeSnapshotsFrom is invalid: {err}"));
        }
        let (Ok(parsed), true) = (parsed, problems.is_empty()) else {
            return Err(format!("invalid schedule config [{i}]: {}", schema::joined(&problems)));
        };
        schedules.push(Schedule {
            name: s.name.filter(|n| !n.is_empty()).unwrap_or_else(|| "schedule".into()),
            crontab: s.crontab,
            parsed,
            allow_failure: s.allow_failure,
            queue: s.queue.filter(|q| !q.is_empty()).unwrap_or_else(|| "main".into()),
            group: s.group.filter(|g| !g.is_empty()),
            include_snapshots: s.include_snapshots_from,
        });
    }
    let mut admission = Vec::new();
    for (mutating, list, what) in [
        (false, raw.kubernetes_validating, "kubernetesValidating"),
        (true, raw.kubernetes_mutating, "kubernetesMutating"),
    ] {
        let mut entries = Vec::new();
        for (i, value) in list.into_iter().enumerate() {
            let parsed = admission_v1(value, mutating, &kubernetes)
                .map_err(|err| format!("invalid {what} config [{i}]: {err}"))?;
            entries.push(parsed);
        }
        // As the API server checks a ValidatingWebhookConfiguration (shell-operator checks these before
        // it starts; the API server refuses a bad mutating one when it is registered).
        if !mutating {
            let problems = validating_problems(&entries);
            if !problems.is_empty() {
                return Err(schema::joined(&problems));
            }
        }
        admission.extend(entries);
    }
    let mut conversion = Vec::new();
    for (i, raw) in raw.kubernetes_custom_resource_conversion.into_iter().enumerate() {
        check_snapshots(&kubernetes, &raw.include_snapshots_from).map_err(|err| {
            format!("invalid kubernetesCustomResourceConversion config [{i}]: includeSnapshotsFrom is invalid: {err}")
        })?;
        conversion.push(Conversion {
            name: raw.name,
            crd_name: raw.crd_name,
            rules: raw.conversions.into_iter().map(|r| (r.from_version, r.to_version)).collect(),
            group: raw.group.filter(|g| !g.is_empty()),
            include_snapshots: raw.include_snapshots_from,
        });
    }
    // Every binding of a group also reads the snapshots of the group's kubernetes bindings.
    let groups: Vec<(String, String)> =
        kubernetes.iter().filter_map(|k| k.group.clone().map(|g| (g, k.name.clone()))).collect();
    let in_group = |group: &Option<String>| -> Vec<String> {
        groups.iter().filter(|(g, _)| Some(g) == group.as_ref()).map(|(_, name)| name.clone()).collect()
    };
    for binding in &mut kubernetes {
        merge(&mut binding.include_snapshots, in_group(&binding.group));
    }
    for schedule in &mut schedules {
        merge(&mut schedule.include_snapshots, in_group(&schedule.group));
    }
    for binding in &mut admission {
        merge(&mut binding.include_snapshots, in_group(&binding.group));
    }
    for binding in &mut conversion {
        merge(&mut binding.include_snapshots, in_group(&binding.group));
    }
    Ok(HookConfig {
        version: ConfigVersion::V1,
        on_startup: raw.on_startup,
        schedules,
        kubernetes,
        admission,
        conversion,
        settings,
    })
}

/// One admission binding: its selectors and snapshots checked, its configuration entry made with
/// shell-operator's defaults (`failurePolicy: Fail`, `sideEffects: None`, `timeoutSeconds: 10`).
fn admission_v1(value: Value, mutating: bool, kubernetes: &[Kubernetes]) -> Result<Admission, String> {
    let raw: RawAdmission =
        serde_json::from_value(value.clone()).map_err(|err| format!("unmarshal HookConfig v1: {err}"))?;
    let mut problems = Vec::new();
    if let Err(err) = check_snapshots(kubernetes, &raw.include_snapshots_from) {
        problems.push(format!("includeSnapshotsFrom is invalid: {err}"));
    }
    if let Some(Err(err)) = raw.label_selector.as_ref().map(LabelSelector::check) {
        problems.push(format!("labelSelector is invalid: {err}"));
    }
    if let Some(Err(err)) = raw.namespace.as_ref().and_then(|n| n.label_selector.as_ref()).map(LabelSelector::check) {
        problems.push(format!("namespace.labelSelector is invalid: {err}"));
    }
    if !problems.is_empty() {
        return Err(schema::joined(&problems));
    }
    let mut entry = Map::new();
    entry.insert("name".into(), json!(raw.name));
    for key in ["rules", "matchConditions"] {
        if let Some(v) = value.get(key) {
            entry.insert(key.into(), v.clone());
        }
    }
    if let Some(selector) = value.get("labelSelector") {
        entry.insert("objectSelector".into(), selector.clone());
    }
    if let Some(selector) = value.pointer("/namespace/labelSelector") {
        entry.insert("namespaceSelector".into(), selector.clone());
    }
    entry.insert("failurePolicy".into(), value.get("failurePolicy").cloned().unwrap_or(json!("Fail")));
    entry.insert("sideEffects".into(), value.get("sideEffects").cloned().unwrap_or(json!("None")));
    entry.insert("timeoutSeconds".into(), json!(raw.timeout_seconds.unwrap_or(10)));
    Ok(Admission {
        id: safe_url(&raw.name),
        name: raw.name,
        mutating,
        entry: Value::Object(entry),
        group: raw.group.filter(|g| !g.is_empty()),
        include_snapshots: raw.include_snapshots_from,
    })
}

/// What the API server would refuse in a hook's validating webhooks, in its words: a name that is not a
/// fully qualified domain, a timeout outside 1 to 30 s, a name given twice.
fn validating_problems(entries: &[Admission]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let name = &entry.name;
        let path = format!("webhooks[{i}].name");
        if name.is_empty() {
            problems.push(format!("{path}: Required value"));
        } else if let Err(err) = dns_subdomain(name) {
            problems.push(format!("{path}: Invalid value: {name:?}: {err}"));
        } else if name.split('.').count() < 3 {
            problems.push(format!(
                "{path}: Invalid value: {name:?}: should be a domain with at least three segments separated by dots"
            ));
        }
        if let Some(timeout) = entry.entry.get("timeoutSeconds").and_then(Value::as_i64)
            && !(1..=30).contains(&timeout)
        {
            problems.push(format!(
                "webhooks[{i}].timeoutSeconds: Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"
            ));
        }
        if !name.is_empty() && !seen.insert(name.clone()) {
            problems.push(format!("{path}: Duplicate value: {name:?}"));
        }
    }
    problems
}

/// apimachinery's `IsDNS1123Subdomain`, with its messages.
fn dns_subdomain(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.split('.').all(label_ok) {
        return Ok(());
    }
    Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must \
         start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        .into())
}

/// shell-operator's `SafeURLString`: a dash before each capital, lower case, any other character outside
/// `[a-z0-9-/]` a dash, runs of dashes one.
pub fn safe_url(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut push = |c: char| {
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    };
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            push('-');
        }
        // Go lower-cases every letter; what is then outside [a-z0-9-/] becomes a dash.
        let c = c.to_lowercase().next().unwrap_or(c);
        push(if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '/' { c } else { '-' });
    }
    out
}

fn merge(into: &mut Vec<String>, extra: Vec<String>) {
    for name in extra {
        if !into.contains(&name) {
            into.push(name);
        }
    }
}

fn settings(raw: RawSettings) -> Result<Settings, String> {
    let mut problems = Vec::new();
    let interval = raw.execution_min_interval.unwrap_or_default();
    let min_interval = match crate::duration::parse_go(&interval) {
        Ok((negative, d)) => Some(if negative { Duration::ZERO } else { d }),
        Err(err) => {
            problems.push(format!("executionMinInterval is invalid: {err}"));
            None
        }
    };
    // shell-operator reads the burst as text: a missing one does not parse, and is reported under the
    // interval's name, as it is there.
    let burst = match raw.execution_burst {
        Some(b) => Some(b as u32),
        None => {
            problems.push("executionMinInterval is invalid: strconv.ParseInt: parsing \"\": invalid syntax".into());
            None
        }
    };
    match (min_interval, burst) {
        (Some(min_interval), Some(burst)) if problems.is_empty() => Ok(Settings { min_interval, burst }),
        _ => Err(schema::joined(&problems)),
    }
}

fn kubernetes_v1(raw: RawKubernetes) -> Result<Kubernetes, String> {
    let mut problems = Vec::new();
    if let Some(api_version) = &raw.api_version
        && !api_version.is_empty()
        && !group_version_is_valid(api_version)
    {
        problems.push("apiVersion is invalid".to_owned());
    }
    if let Some(labels) = &raw.label_selector
        && let Err(err) = labels.check()
    {
        problems.push(format!("labelSelector is invalid: {err}"));
    }
    let names = raw.name_selector.map(|n| n.match_names).unwrap_or_default();
    let fields = raw.field_selector.map(|f| f.match_expressions).unwrap_or_default();
    if !names.is_empty() && fields.iter().any(|f| f.field == "metadata.name") {
        problems.push("fieldSelector 'metadata.name' and nameSelector.matchNames are mutually exclusive".into());
    }
    let namespaces = match raw.namespace {
        Some(RawNamespace { label_selector: Some(labels), .. }) => {
            if let Err(err) = labels.check() {
                problems.push(format!("namespace.labelSelector is invalid: {err}"));
            }
            Namespaces::Labelled(labels)
        }
        Some(RawNamespace { name_selector: Some(names), .. }) if !names.match_names.is_empty() => {
            Namespaces::Named(names.match_names)
        }
        _ => Namespaces::All,
    };
    if !problems.is_empty() {
        return Err(schema::joined(&problems));
    }
    let jq = match raw.jq_filter.filter(|f| !f.is_empty()) {
        Some(text) => Some(Jq::compile(&text).map_err(|err| format!("jqFilter: {err}"))?),
        None => None,
    };
    let field_selector = fields
        .iter()
        .map(|f| {
            let op = if matches!(f.operator.as_str(), "!=" | "NotEquals") { "!=" } else { "=" };
            format!("{}{op}{}", f.field, f.value)
        })
        .collect::<Vec<_>>()
        .join(",");
    Ok(Kubernetes {
        debug_name: String::new(),
        name: raw.name.filter(|n| !n.is_empty()).unwrap_or_else(|| "kubernetes".into()),
        api_version: raw.api_version.filter(|v| !v.is_empty()),
        kind: raw.kind,
        // executeHookOnEvent wins over its older name; neither means every event.
        events: raw
            .execute_hook_on_event
            .or(raw.watch_event)
            .unwrap_or_else(|| vec![WatchEvent::Added, WatchEvent::Modified, WatchEvent::Deleted]),
        execute_on_synchronization: raw.execute_hook_on_synchronization.unwrap_or(true),
        keep_full_objects: raw.keep_full_objects_in_memory.unwrap_or(true),
        allow_failure: raw.allow_failure,
        queue: raw.queue.filter(|q| !q.is_empty()).unwrap_or_else(|| "main".into()),
        group: raw.group.filter(|g| !g.is_empty()),
        include_snapshots: raw.include_snapshots_from,
        names,
        labels: raw.label_selector,
        fields: (!field_selector.is_empty()).then_some(field_selector),
        namespaces,
        jq,
        v0: false,
    })
}

/// `kubernetes[0]{name}`, or `kubernetes[0]` for a binding without a name, as shell-operator names it.
fn debug_name(index: usize, name: &str) -> String {
    match name {
        "" => format!("kubernetes[{index}]"),
        name => format!("kubernetes[{index}]{{{name}}}"),
    }
}

/// As apimachinery's `ParseGroupVersion`: `v1`, `group/version`, no more than one slash.
fn group_version_is_valid(text: &str) -> bool {
    text.split('/').count() <= 2
}

fn check_snapshots(kubernetes: &[Kubernetes], names: &[String]) -> Result<(), String> {
    for name in names {
        match kubernetes.iter().filter(|k| &k.name == name).count() {
            0 => return Err(format!("'{name}' binding name not found")),
            1 => {}
            n => return Err(format!("there are {n} '{name}' binding names")),
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawV0 {
    on_startup: Option<f64>,
    #[serde(default)]
    schedule: Vec<RawScheduleV0>,
    #[serde(default)]
    on_kubernetes_event: Vec<RawKubernetesV0>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawScheduleV0 {
    #[serde(default)]
    name: String,
    #[serde(default)]
    crontab: String,
    #[serde(default)]
    allow_failure: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKubernetesV0 {
    #[serde(default)]
    name: String,
    #[serde(default)]
    event: Vec<String>,
    #[serde(default)]
    kind: String,
    selector: Option<LabelSelector>,
    #[serde(default)]
    object_name: String,
    namespace_selector: Option<RawNamespaceV0>,
    #[serde(default)]
    jq_filter: String,
    #[serde(default)]
    allow_failure: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNamespaceV0 {
    #[serde(default)]
    match_names: Vec<String>,
    #[serde(default)]
    any: bool,
}

fn v0(value: Value) -> Result<HookConfig, String> {
    let raw: RawV0 = serde_json::from_value(value).map_err(|err| format!("unmarshal HookConfig version 0: {err}"))?;
    let mut schedules = Vec::new();
    for (i, s) in raw.schedule.into_iter().enumerate() {
        let parsed = Crontab::parse(&s.crontab)
            .map_err(|err| format!("invalid schedule config [{i}]: crontab is invalid: {err}"))?;
        schedules.push(Schedule {
            name: if s.name.is_empty() { "schedule".into() } else { s.name },
            crontab: s.crontab,
            parsed,
            allow_failure: s.allow_failure,
            queue: "main".into(),
            group: None,
            include_snapshots: Vec::new(),
        });
    }
    let mut kubernetes = Vec::new();
    for (i, raw) in raw.on_kubernetes_event.into_iter().enumerate() {
        let mut events = Vec::new();
        for event in &raw.event {
            events.push(match event.as_str() {
                "add" => WatchEvent::Added,
                "update" => WatchEvent::Modified,
                "delete" => WatchEvent::Deleted,
                other => return Err(format!("event '{other}' is unsupported")),
            });
        }
        let jq = match raw.jq_filter.as_str() {
            "" => None,
            text => Some(Jq::compile(text).map_err(|err| format!("kubernetes config [{}] jqFilter: {err}", raw.name))?),
        };
        let namespaces = match raw.namespace_selector {
            Some(ns) if !ns.any && !ns.match_names.is_empty() => Namespaces::Named(ns.match_names),
            _ => Namespaces::All,
        };
        kubernetes.push(Kubernetes {
            debug_name: debug_name(i, &raw.name),
            name: if raw.name.is_empty() { "onKubernetesEvent".into() } else { raw.name },
            api_version: None,
            kind: raw.kind,
            events,
            execute_on_synchronization: false,
            keep_full_objects: true,
            allow_failure: raw.allow_failure,
            queue: "main".into(),
            group: None,
            include_snapshots: Vec::new(),
            names: if raw.object_name.is_empty() { Vec::new() } else { vec![raw.object_name] },
            labels: raw.selector,
            fields: None,
            namespaces,
            jq,
            v0: true,
        });
    }
    Ok(HookConfig {
        version: ConfigVersion::V0,
        on_startup: raw.on_startup,
        schedules,
        kubernetes,
        admission: Vec::new(),
        conversion: Vec::new(),
        settings: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> String {
        parse(text.as_bytes()).unwrap_err()
    }

    #[test]
    fn v1_with_defaults_filled_in() {
        let config = parse(
            br#"
configVersion: v1
onStartup: 10
schedule:
- crontab: "*/5 * * * * *"
  group: pods
- name: nightly
  crontab: "0 3 * * *"
  queue: slow
  allowFailure: true
kubernetes:
- kind: Pod
  group: pods
- name: ns
  apiVersion: v1
  kind: namespace
  executeHookOnEvent: [Added]
  executeHookOnSynchronization: false
  keepFullObjectsInMemory: false
  jqFilter: .metadata.labels
  namespace: {nameSelector: {matchNames: [default]}}
  fieldSelector: {matchExpressions: [{field: status.phase, operator: NotEquals, value: Active}]}
settings: {executionMinInterval: 5s, executionBurst: 2}
"#,
        )
        .unwrap();
        assert_eq!(config.version, ConfigVersion::V1);
        assert_eq!(config.on_startup, Some(10.0));
        let (a, b) = (&config.schedules[0], &config.schedules[1]);
        assert_eq!(
            (a.name.as_str(), a.queue.as_str(), a.include_snapshots.clone()),
            ("schedule", "main", vec!["kubernetes".to_owned()])
        );
        assert_eq!((b.name.as_str(), b.queue.as_str(), b.allow_failure), ("nightly", "slow", true));
        let (pods, ns) = (&config.kubernetes[0], &config.kubernetes[1]);
        assert_eq!(pods.name, "kubernetes");
        assert_eq!(pods.events, [WatchEvent::Added, WatchEvent::Modified, WatchEvent::Deleted]);
        assert_eq!(pods.include_snapshots, ["kubernetes"]);
        assert!(pods.execute_on_synchronization && pods.keep_full_objects);
        assert_eq!(ns.events, [WatchEvent::Added]);
        assert!(!ns.execute_on_synchronization && !ns.keep_full_objects);
        assert_eq!(ns.fields.as_deref(), Some("status.phase!=Active"));
        assert!(matches!(&ns.namespaces, Namespaces::Named(n) if n == &["default"]));
        assert_eq!(config.settings, Some(Settings { min_interval: Duration::from_secs(5), burst: 2 }));
    }

    #[test]
    fn webhook_bindings_get_shell_operators_defaults_and_their_groups_snapshots() {
        let config = parse(
            br#"
configVersion: v1
kubernetes:
- {name: pods, kind: Pod, group: g}
kubernetesValidating:
- name: check.pods.example.com
  group: g
  labelSelector: {matchLabels: {a: b}}
  namespace: {labelSelector: {matchLabels: {c: d}}}
  rules: [{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
kubernetesMutating:
- {name: fix.pods.example.com, failurePolicy: Ignore, sideEffects: NoneOnDryRun, timeoutSeconds: 3}
kubernetesCustomResourceConversion:
- name: up
  crdName: crontabs.stable.example.com
  includeSnapshotsFrom: [pods]
  conversions: [{fromVersion: stable.example.com/v1alpha1, toVersion: v1alpha2}]
"#,
        )
        .unwrap();
        let [validating, mutating] = &config.admission[..] else { panic!("{:?}", config.admission) };
        assert_eq!((validating.mutating, mutating.mutating), (false, true));
        assert_eq!(validating.id, "check-pods-example-com");
        assert_eq!(validating.include_snapshots, ["pods"]);
        assert_eq!(
            validating.entry,
            json!({
                "name": "check.pods.example.com",
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "objectSelector": {"matchLabels": {"a": "b"}},
                "namespaceSelector": {"matchLabels": {"c": "d"}},
                "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 10,
            })
        );
        assert_eq!(mutating.entry["failurePolicy"], "Ignore");
        assert_eq!(mutating.entry["sideEffects"], "NoneOnDryRun");
        assert_eq!(mutating.entry["timeoutSeconds"], 3);
        let conversion = &config.conversion[0];
        assert_eq!(conversion.crd_name, "crontabs.stable.example.com");
        assert_eq!(conversion.rules, [("stable.example.com/v1alpha1".to_owned(), "v1alpha2".to_owned())]);
        assert_eq!(conversion.include_snapshots, ["pods"]);
    }

    #[test]
    fn webhook_bindings_are_checked_as_the_api_server_and_shell_operator_check_them() {
        let err = refused(
            "configVersion: v1\nkubernetesValidating:\n- {name: Bad_Name.example.com}\n- {name: a.b.c, timeoutSeconds: 0}\n- {name: a.b.c}",
        );
        assert!(err.starts_with("3 errors occurred:"), "{err}");
        assert!(
            err.contains("webhooks[0].name: Invalid value: \"Bad_Name.example.com\": a lowercase RFC 1123 subdomain"),
            "{err}"
        );
        assert!(
            err.contains(
                "webhooks[1].timeoutSeconds: Invalid value: 0: the timeout value must be between 1 and 30 seconds"
            ),
            "{err}"
        );
        assert!(err.contains("webhooks[2].name: Duplicate value: \"a.b.c\""), "{err}");
        let err = refused("configVersion: v1\nkubernetesMutating:\n- {name: m, includeSnapshotsFrom: [nope]}");
        assert!(err.starts_with("invalid kubernetesMutating config [0]: 1 error occurred:"), "{err}");
        assert!(err.contains("includeSnapshotsFrom is invalid: 'nope' binding name not found"), "{err}");
        let err = refused(
            "configVersion: v1\nkubernetesCustomResourceConversion:\n- {name: c, crdName: x, includeSnapshotsFrom: [nope], conversions: [{fromVersion: v1, toVersion: v2}]}",
        );
        assert!(
            err.starts_with("invalid kubernetesCustomResourceConversion config [0]: includeSnapshotsFrom"),
            "{err}"
        );
        assert_eq!(safe_url("private-repo-policy.example.com"), "private-repo-policy-example-com");
        assert_eq!(safe_url("fooBar__baz.Qux"), "foo-bar-baz-qux");
    }

    #[test]
    fn json_and_v0_are_read_too() {
        let config = parse(br#"{"onStartup": 1}"#).unwrap();
        assert_eq!((config.version, config.on_startup), (ConfigVersion::V0, Some(1.0)));
        let config = parse(
            br#"{"onKubernetesEvent": [{"kind": "Pod", "event": ["add", "delete"], "objectName": "x",
                 "namespaceSelector": {"matchNames": ["a"]}}], "schedule": [{"crontab": "* * * * *"}]}"#,
        )
        .unwrap();
        let binding = &config.kubernetes[0];
        assert_eq!((binding.name.as_str(), binding.v0), ("onKubernetesEvent", true));
        assert_eq!(binding.events, [WatchEvent::Added, WatchEvent::Deleted]);
        assert_eq!(binding.names, ["x"]);
        assert_eq!(
            refused(r#"{"onKubernetesEvent": [{"kind": "Pod", "event": ["created"]}]}"#),
            "event 'created' is unsupported"
        );
    }

    #[test]
    fn refusals_in_shell_operators_words() {
        assert_eq!(
            refused("configVersion: v2\nonStartup: 1"),
            "config version: 'configVersion' value 'v2' is unsupported"
        );
        assert_eq!(
            refused("configVersion: 1\nonStartup: 1"),
            "config version: string value is expected for key 'configVersion'"
        );
        assert_eq!(
            refused("configVersion: v1\nonStartup: 1\nkubernetes: [{kind: Pod, jqFilter: '.a |'}]"),
            "invalid kubernetes config [0] jqFilter: cannot parse \".a |\": expected term at the end"
        );
        assert_eq!(
            refused("configVersion: v1\nschedule: [{crontab: '* * *'}]"),
            "invalid schedule config [0]: 1 error occurred:\n\t* crontab is invalid: Expected 5 or 6 fields, found 3: * * *\n\n"
        );
        assert_eq!(
            refused("configVersion: v1\nschedule: [{crontab: '* * * * *', includeSnapshotsFrom: [pods]}]"),
            "invalid schedule config [0]: 1 error occurred:\n\t* includeSnapshotsFrom is invalid: 'pods' binding name not found\n\n"
        );
        assert_eq!(
            refused(
                "configVersion: v1\nkubernetes: [{kind: Pod, name: a}, {kind: Pod, name: a, includeSnapshotsFrom: [a]}]"
            ),
            "invalid kubernetes config [1]: includeSnapshots there are 2 'a' binding names"
        );
        assert_eq!(
            refused("configVersion: v1\nkubernetes: [{kind: Pod, apiVersion: a/b/c}]"),
            "invalid kubernetes config [0]: 1 error occurred:\n\t* apiVersion is invalid\n\n"
        );
        assert_eq!(
            refused(
                "configVersion: v1\nkubernetes: [{kind: Pod, nameSelector: {matchNames: [a]}, \
                 fieldSelector: {matchExpressions: [{field: metadata.name, operator: '=', value: a}]}}]"
            ),
            "invalid kubernetes config [0]: 1 error occurred:\n\t* fieldSelector 'metadata.name' and \
             nameSelector.matchNames are mutually exclusive\n\n"
        );
        assert!(
            refused("configVersion: v1\nsettings: {executionMinInterval: 5x, executionBurst: 1}")
                .contains("executionMinInterval is invalid: time: unknown unit \"x\" in duration \"5x\"")
        );
        assert!(
            refused("configVersion: v1\nkubernetes: [{kind: Pod, allowFailure: 'true'}]")
                .contains("kubernetes.allowFailure must be of type boolean: \"string\"")
        );
        assert!(refused("onStartup: [1]").contains("onStartup must be of type integer"));
        assert!(refused("{not yaml").starts_with("config unmarshal: "));
        // YAML 1.1, as shell-operator reads it: `yes` is a boolean, and `y` in a list of strings is not a string.
        let config =
            parse(b"configVersion: v1\nkubernetes:\n- kind: Pod\n  allowFailure: yes\n  keepFullObjectsInMemory: off")
                .unwrap();
        assert!(config.kubernetes[0].allow_failure && !config.kubernetes[0].keep_full_objects);
        assert!(
            refused("configVersion: v1\nkubernetes:\n- kind: Pod\n  labelSelector: {matchExpressions: [{key: t, operator: In, values: [x, y]}]}")
                .contains("kubernetes.labelSelector.matchExpressions.values must be of type string: \"boolean\"")
        );
    }
}
