//! The CRDs samplectl installs: the Sample CRD the controller serves and, for clusters without them,
//! metacontroller's (CompositeController, DecoratorController, ControllerRevision) and kro's
//! (ResourceGraphDefinition, GraphRevision). Embedded in the
//! binary, applied server-side, and waited for until Established, with what each apply came to
//! (`created`, `configured` or `unchanged`, as `kubectl apply` says it).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use serde_json::Value;

use crate::cluster::scope;

/// The CRD as shipped in `manifests/crd/`, compiled in so the binary alone can install it.
pub const CRD_YAML: &str = include_str!("../../manifests/crd/samples.example.com.yaml");
/// metacontroller's three CRDs, as shipped in `manifests/crd/`.
pub const METACONTROLLER_CRDS_YAML: &str = include_str!("../../manifests/crd/metacontroller.k8s.io.yaml");
/// kro's two CRDs (ResourceGraphDefinition, GraphRevision), as shipped in `manifests/crd/`.
pub const KRO_CRDS_YAML: &str = include_str!("../../manifests/crd/kro.run.yaml");
pub const FIELD_MANAGER: &str = "samplectl";
pub const DISPLAY_KIND: &str = "customresourcedefinition.apiextensions.k8s.io";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    Created,
    Configured,
    Unchanged,
}

impl Installed {
    pub fn word(self) -> &'static str {
        match self {
            Installed::Created => "created",
            Installed::Configured => "configured",
            Installed::Unchanged => "unchanged",
        }
    }
}

/// Whether `gvr` names the Samples this controller reconciles (any version: another one than the CRD's is
/// reported as not served, not observed).
pub fn serves_samples(gvr: &crate::cluster::resolve::Gvr) -> bool {
    gvr.group == "example.com" && gvr.resource == "samples"
}

/// The embedded Sample CRD as the apply body.
pub fn embedded_crd() -> Result<(String, Value)> {
    let mut crds = embedded(CRD_YAML)?;
    crds.pop().context("the embedded CRD file is empty")
}

/// Each CRD of an embedded file (YAML documents) as the apply body. Kept as JSON rather than the typed
/// struct so that exactly what the file says is sent, nothing dropped or defaulted on the way.
pub fn embedded(yaml: &str) -> Result<Vec<(String, Value)>> {
    let mut crds = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let body: Value = serde::Deserialize::deserialize(document).context("an embedded CRD is not valid YAML")?;
        let name = body["metadata"]["name"].as_str().context("an embedded CRD has no metadata.name")?.to_owned();
        crds.push((name, body));
    }
    Ok(crds)
}

/// Applies one embedded CRD (only as a server dry run with `dry_run`) and, unless `timeout` is zero,
/// waits that long for it to be Established. Returns what the apply came to.
#[allow(clippy::disallowed_methods)] // the install-crd command: a user's one-off apply, under no Lease
pub async fn install(
    client: kube::Client,
    (name, body): &(String, Value),
    dry_run: bool,
    timeout: Duration,
) -> Result<Installed> {
    let name = name.as_str();
    let crds: Api<CustomResourceDefinition> = scope::cluster(client);

    let before = crds.get_opt(name).await.with_context(|| format!("cannot read {DISPLAY_KIND}/{name}"))?;
    // Forced: the CRD is samplectl's, so fields someone else changed by hand are taken back, as
    // `kubectl apply --server-side --force-conflicts` would.
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    let after = crds
        .patch(name, &params, &Patch::Apply(body))
        .await
        .with_context(|| format!("cannot apply {DISPLAY_KIND}/{name}"))?;
    let installed = installed(before.as_ref(), &after)?;

    if !dry_run && !timeout.is_zero() {
        wait_established(crds, name, timeout).await?;
    }
    Ok(installed)
}

/// Compares the object before and after the apply, ignoring bookkeeping the server changes on its own.
/// Works for dry runs too, where the server returns what it would have stored.
fn installed(before: Option<&CustomResourceDefinition>, after: &CustomResourceDefinition) -> Result<Installed> {
    let Some(before) = before else {
        return Ok(Installed::Created);
    };
    let comparable = |crd: &CustomResourceDefinition| -> Result<Value> {
        let mut value = serde_json::to_value(crd)?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            for bookkeeping in ["resourceVersion", "managedFields", "generation"] {
                meta.remove(bookkeeping);
            }
        }
        Ok(value)
    };
    Ok(if comparable(before)? == comparable(after)? { Installed::Unchanged } else { Installed::Configured })
}

/// Waits until the CRD `name` is Established, or says why not (its names refused, or `timeout` passed).
pub async fn wait_established(crds: Api<CustomResourceDefinition>, name: &str, timeout: Duration) -> Result<()> {
    // Also stop on NamesAccepted=False: such a CRD never becomes Established, and its message says why.
    let settled = |crd: Option<&CustomResourceDefinition>| {
        crd.is_some_and(|crd| condition(crd, "Established") == Some("True") || names_rejected(crd).is_some())
    };
    let crd = match tokio::time::timeout(timeout, await_condition(crds, name, settled)).await {
        Err(_) => bail!(
            "timed out after {} waiting for {DISPLAY_KIND}/{name} to be Established (it was applied; run \
             `kubectl describe crd {name}` to see why it is not ready)",
            crate::duration::format(timeout)
        ),
        Ok(result) => result.with_context(|| format!("cannot watch {DISPLAY_KIND}/{name}"))?,
    };
    if let Some(message) = crd.as_ref().and_then(names_rejected) {
        bail!("{DISPLAY_KIND}/{name} was applied but its names were not accepted: {message}");
    }
    Ok(())
}

fn condition<'a>(crd: &'a CustomResourceDefinition, type_: &str) -> Option<&'a str> {
    let conditions = crd.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

fn names_rejected(crd: &CustomResourceDefinition) -> Option<String> {
    let conditions = crd.status.as_ref()?.conditions.as_ref()?;
    let rejected = conditions.iter().find(|c| c.type_ == "NamesAccepted" && c.status == "False")?;
    Some(rejected.message.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_crd_is_the_sample_crd() {
        let (name, body) = embedded_crd().unwrap();
        assert_eq!(name, "samples.example.com");
        let crd: CustomResourceDefinition = serde_json::from_value(body).unwrap();
        assert_eq!(crd.spec.group, "example.com");
        assert_eq!(crd.spec.names.kind, "Sample");
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["smp".to_owned()][..]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, ["Test String", "Ready", "Age"]);
        let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
        let conditions = &schema.properties.as_ref().unwrap()["status"].properties.as_ref().unwrap()["conditions"];
        assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
        assert_eq!(conditions.x_kubernetes_list_map_keys.as_deref(), Some(&["type".to_owned()][..]));
    }

    #[test]
    fn metacontrollers_crds_are_metacontrollers_api() {
        let crds = embedded(METACONTROLLER_CRDS_YAML).unwrap();
        let names: Vec<&str> = crds.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "compositecontrollers.metacontroller.k8s.io",
                "decoratorcontrollers.metacontroller.k8s.io",
                "controllerrevisions.metacontroller.k8s.io"
            ]
        );
        let typed: Vec<CustomResourceDefinition> =
            crds.into_iter().map(|(_, body)| serde_json::from_value(body).unwrap()).collect();
        assert_eq!(typed[0].spec.scope, "Cluster");
        assert_eq!(typed[0].spec.names.short_names.as_deref(), Some(&["cc".to_owned(), "cctl".to_owned()][..]));
        assert_eq!(typed[2].spec.scope, "Namespaced");
        // The anchors are expanded: every hook has the whole webhook schema.
        let schema = typed[1].spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
        let hooks = &schema.properties.as_ref().unwrap()["spec"].properties.as_ref().unwrap()["hooks"];
        let finalize = &hooks.properties.as_ref().unwrap()["finalize"];
        assert!(finalize.properties.as_ref().unwrap()["webhook"].properties.as_ref().unwrap().contains_key("service"));
    }

    fn crd(resource_version: &str, short_name: &str) -> CustomResourceDefinition {
        let (_, mut body) = embedded_crd().unwrap();
        body["metadata"]["resourceVersion"] = resource_version.into();
        body["spec"]["names"]["shortNames"] = serde_json::json!([short_name]);
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn installed_tells_the_three_cases_apart() {
        assert_eq!(installed(None, &crd("1", "smp")).unwrap(), Installed::Created);
        assert_eq!(installed(Some(&crd("1", "smp")), &crd("1", "smp")).unwrap(), Installed::Unchanged);
        // A write that changed only bookkeeping (say, managed fields) is not a change the user made.
        assert_eq!(installed(Some(&crd("1", "smp")), &crd("2", "smp")).unwrap(), Installed::Unchanged);
        assert_eq!(installed(Some(&crd("1", "other")), &crd("2", "smp")).unwrap(), Installed::Configured);
    }
}
