//! Naming a resource: `--gvr GROUP/VERSION/RESOURCE` (one discovery request for that group-version) or a
//! kubectl-style name (`samples`, `smp`, `Sample`, `deployments.apps`) resolved through aggregated
//! discovery. Either way the result carries the real kind and scope, never a guess.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::core::discovery::v2::{APIGroupDiscoveryList, APIResourceDiscovery};
use kube::discovery::ApiResource;
use kube::{Api, Client};

/// A parsed `--gvr`. The group is empty for the core group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

const GVR_FORM: &str = "expected GROUP/VERSION/RESOURCE such as example.com/v1alpha1/samples, \
                        or VERSION/RESOURCE for the core group such as v1/configmaps";

impl Gvr {
    /// Reads `GROUP/VERSION/RESOURCE`; the error says what is wrong with it and what the form is.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{why}; {GVR_FORM}");
        let parts: Vec<&str> = text.split('/').collect();
        let (group, version, resource) = match parts[..] {
            [version, resource] => ("", version, resource),
            [group, version, resource] => (group, version, resource),
            [_, _, resource, sub] if !resource.is_empty() && !sub.is_empty() => {
                return Err(bad(&format!("subresources such as {resource}/{sub} cannot be listed or watched")));
            }
            [_] => return Err(bad("too few parts")),
            _ => return Err(bad("too many parts")),
        };
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad("empty part"));
        }
        if !group.is_empty() && !is_dns_subdomain(group) {
            return Err(bad(&format!("{group:?} is not a valid API group (lowercase DNS name)")));
        }
        if !is_dns_label(version) || !version.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(bad(&format!("{version:?} is not a valid API version (such as v1 or v1alpha1)")));
        }
        if !is_dns_label(resource) {
            return Err(bad(&format!("{resource:?} is not a valid resource name (lowercase plural such as samples)")));
        }
        Ok(Gvr { group: group.into(), version: version.into(), resource: resource.into() })
    }

    fn group_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

impl std::fmt::Display for Gvr {
    /// As it was written: `example.com/v1alpha1/samples`, or `v1/configmaps` for the core group.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.group_version(), self.resource)
    }
}

/// Whether `input` can be a kubectl-style resource name at all; the error says what one looks like.
pub fn check_resource_name(input: &str) -> Result<(), String> {
    if input.is_empty() || input.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(format!(
            "invalid resource name {input:?}: expected a name such as samples, smp or deployments.apps, or use --gvr"
        ));
    }
    Ok(())
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A resource the server serves, as discovery describes it.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub ar: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    /// The subresources discovery lists for it (`status`, `scale`).
    pub subresources: Vec<String>,
}

impl Resolved {
    /// `samples.example.com`, or `configmaps` for the core group: how kubectl names a resource in messages.
    pub fn qualified_plural(&self) -> String {
        if self.ar.group.is_empty() { self.ar.plural.clone() } else { format!("{}.{}", self.ar.plural, self.ar.group) }
    }

    /// `sample.example.com/NAME`, or `configmap/NAME`: kubectl's `-o name` form.
    pub fn object_name(&self, name: &str) -> String {
        let kind = self.ar.kind.to_lowercase();
        if self.ar.group.is_empty() { format!("{kind}/{name}") } else { format!("{kind}.{}/{name}", self.ar.group) }
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the server doesn't have a resource type {0:?}")]
pub struct UnknownResource(pub String);

/// How long a resource whose CRD exists may stay missing from discovery: the API server publishes a new
/// CRD's endpoints a moment after it is created.
const DISCOVERY_GRACE: Duration = Duration::from_secs(10);
const DISCOVERY_RETRY: Duration = Duration::from_millis(250);

pub async fn resolve_gvr(client: &Client, gvr: &Gvr) -> Result<Resolved> {
    let deadline = tokio::time::Instant::now() + DISCOVERY_GRACE;
    loop {
        if let Some(found) = find_in_group_version(client, gvr).await? {
            return Ok(found);
        }
        let crd_name = format!("{}.{}", gvr.resource, gvr.group);
        let pending = !gvr.group.is_empty() && crd_serves(client, &crd_name, &gvr.version).await;
        if !pending || tokio::time::Instant::now() >= deadline {
            return Err(UnknownResource(gvr.to_string()).into());
        }
        tracing::debug!(crd = crd_name, "the CRD exists but discovery does not show it yet; retrying");
        tokio::time::sleep(DISCOVERY_RETRY).await;
    }
}

async fn find_in_group_version(client: &Client, gvr: &Gvr) -> Result<Option<Resolved>> {
    let listed = if gvr.group.is_empty() {
        client.list_core_api_resources(&gvr.version).await
    } else {
        client.list_api_group_resources(&gvr.group_version()).await
    };
    let list: APIResourceList = match listed {
        Ok(list) => list,
        Err(err) if crate::error::status_code(&err) == Some(404) => return Ok(None),
        Err(err) => return Err(err).context(format!("cannot discover {}", gvr.group_version())),
    };
    let prefix = format!("{}/", gvr.resource);
    let subresources: Vec<String> =
        list.resources.iter().filter_map(|r| r.name.strip_prefix(&prefix)).map(str::to_owned).collect();
    Ok(list.resources.into_iter().find(|r| r.name == gvr.resource).map(|r| Resolved {
        ar: ApiResource {
            group: gvr.group.clone(),
            version: gvr.version.clone(),
            api_version: gvr.group_version(),
            kind: r.kind,
            plural: r.name,
        },
        namespaced: r.namespaced,
        verbs: r.verbs,
        subresources,
    }))
}

/// What discovery lacks when it does not serve a kind (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unserved {
    /// The whole group-version.
    GroupVersion,
    /// The kind, in a group-version served.
    Kind,
}

/// The resource of kind `kind` in `api_version` (`apps/v1`, `v1`), as discovery lists it now; or what
/// is not served (yet).
pub async fn resolve_kind(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<std::result::Result<Resolved, Unserved>> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let listed = if group.is_empty() {
        client.list_core_api_resources(version).await
    } else {
        client.list_api_group_resources(api_version).await
    };
    let list: APIResourceList = match listed {
        Ok(list) => list,
        Err(err) if crate::error::status_code(&err) == Some(404) => return Ok(Err(Unserved::GroupVersion)),
        Err(err) => return Err(err).context(format!("cannot discover {api_version}")),
    };
    let Some(found) = list.resources.iter().find(|r| r.kind == kind && !r.name.contains('/')) else {
        return Ok(Err(Unserved::Kind));
    };
    let prefix = format!("{}/", found.name);
    let subresources = list.resources.iter().filter_map(|r| r.name.strip_prefix(&prefix)).map(str::to_owned).collect();
    Ok(Ok(Resolved {
        ar: ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            plural: found.name.clone(),
        },
        namespaced: found.namespaced,
        verbs: found.verbs.clone(),
        subresources,
    }))
}

/// The resource a shell-operator binding names by `kind`, as shell-operator finds it: a discovery Kind,
/// plural or short name, in any case; in `api_version` when given, otherwise the first in the preferred
/// versions of every group (the core group first). Subresources and resources without verbs are not
/// candidates. `None` when nothing matches.
pub async fn resolve_loose_kind(client: &Client, api_version: Option<&str>, kind: &str) -> Result<Option<Resolved>> {
    let wanted = kind.to_lowercase();
    let matches = |r: &APIResourceDiscovery| {
        !r.verbs.is_empty()
            && (r.resource.as_deref().is_some_and(|p| p.to_lowercase() == wanted)
                || r.response_kind.as_ref().and_then(|k| k.kind.as_deref()).is_some_and(|k| k.to_lowercase() == wanted)
                || r.short_names.iter().any(|s| s.to_lowercase() == wanted))
    };
    let (want_group, want_version) = match api_version {
        Some(gv) => match gv.split_once('/') {
            Some((g, v)) => (Some(g.to_owned()), Some(v.to_owned())),
            None => (Some(String::new()), Some(gv.to_owned())),
        },
        None => (None, None),
    };
    let lists = discover(client).await?;
    for group in lists.iter().flat_map(|l| &l.items) {
        let group_name = group.metadata.as_ref().and_then(|m| m.name.clone()).unwrap_or_default();
        if want_group.as_ref().is_some_and(|g| *g != group_name) {
            continue;
        }
        // The preferred version is listed first; without an apiVersion only it is searched.
        let versions = group.versions.iter().filter(|v| match &want_version {
            Some(want) => v.version.as_deref() == Some(want.as_str()),
            None => true,
        });
        for version in versions.take(if want_version.is_some() { usize::MAX } else { 1 }) {
            let version_name = version.version.clone().unwrap_or_default();
            if let Some(resource) = version.resources.iter().find(|r| matches(r)) {
                return Ok(Some(resolved(&group_name, &version_name, resource)));
            }
        }
    }
    Ok(None)
}

async fn crd_serves(client: &Client, name: &str, version: &str) -> bool {
    let crds: Api<CustomResourceDefinition> = super::scope::cluster(client.clone());
    match crds.get_opt(name).await {
        Ok(Some(crd)) => crd.spec.versions.iter().any(|v| v.name == version && v.served),
        _ => false,
    }
}

/// What a resource argument names, as kubectl reads it: one kubectl-style name (`samples`, `sample`,
/// `Sample`, `smp`, optionally qualified as `samples.example.com` or `deployments.v1.apps`), several separated by commas
/// (`cm,sa`), or a category (`all`, or any a CRD declares in `spec.names.categories`), which stands for
/// every resource of the category in discovery order. A category wins over a resource of the same name,
/// as in kubectl. Each resource appears once, in the order named.
pub async fn resolve_names(client: &Client, input: &str) -> Result<Vec<Resolved>> {
    for part in input.split(',') {
        check_resource_name(part).map_err(anyhow::Error::msg)?;
    }
    let deadline = tokio::time::Instant::now() + DISCOVERY_GRACE;
    'discover: loop {
        let lists = discover(client).await?;
        let mut found: Vec<Resolved> = Vec::new();
        for part in input.split(',') {
            let mut matches = find_by_category(&lists, part);
            if matches.is_empty() {
                match find_by_name(&lists, part) {
                    Some(one) => matches.push(one),
                    None if crd_names_match(client, part).await && tokio::time::Instant::now() < deadline => {
                        tracing::debug!(
                            name = part,
                            "a CRD has this name but discovery does not show it yet; retrying"
                        );
                        tokio::time::sleep(DISCOVERY_RETRY).await;
                        continue 'discover;
                    }
                    None => return Err(UnknownResource(part.to_owned()).into()),
                }
            }
            for resolved in matches {
                if !found.iter().any(|f| f.ar.group == resolved.ar.group && f.ar.plural == resolved.ar.plural) {
                    found.push(resolved);
                }
            }
        }
        return Ok(found);
    }
}

/// Aggregated discovery: the core group, then the others in the server's priority order; within each,
/// its versions with the preferred one first.
async fn discover(client: &Client) -> Result<[APIGroupDiscoveryList; 2]> {
    let core = client.list_core_api_versions_aggregated().await.context("cannot discover the core API")?;
    let groups = client.list_api_groups_aggregated().await.context("cannot discover API groups")?;
    Ok([core, groups])
}

/// Every resource served with `verb`, named as `kubectl api-resources -o name --verbs=VERB` names them
/// (`configmaps`, `deployments.apps`), for completion. As client-go's preferred-resources list: each
/// resource of a group once, from the first (preferred) version that serves it, subresources aside;
/// sorted by group and then name, as kubectl sorts them.
pub async fn resource_names(client: &Client, verb: &str) -> Result<Vec<String>> {
    let mut chosen: Vec<(String, &APIResourceDiscovery)> = Vec::new();
    let lists = discover(client).await?;
    for group in lists.iter().flat_map(|l| &l.items) {
        let group_name = group.metadata.as_ref().and_then(|m| m.name.clone()).unwrap_or_default();
        for resource in group.versions.iter().flat_map(|v| &v.resources) {
            if !chosen.iter().any(|(g, r)| *g == group_name && r.resource == resource.resource) {
                chosen.push((group_name.clone(), resource));
            }
        }
    }
    let mut named: Vec<(String, String)> = chosen
        .into_iter()
        .filter(|(_, resource)| resource.verbs.iter().any(|v| v == verb))
        .map(|(group, resource)| (group, resource.resource.clone().unwrap_or_default()))
        .collect();
    named.sort();
    Ok(named
        .into_iter()
        .map(|(group, plural)| if group.is_empty() { plural } else { format!("{plural}.{group}") })
        .collect())
}

/// Every served `GROUP/VERSION/RESOURCE` (or `VERSION/RESOURCE` in the core group) with `verb`, as
/// `--gvr` takes them, for completion: every version, not only the preferred one, since --gvr names one.
pub async fn gvr_names(client: &Client, verb: &str) -> Result<Vec<String>> {
    let mut named = Vec::new();
    for group in discover(client).await?.iter().flat_map(|l| &l.items) {
        let group_name = group.metadata.as_ref().and_then(|m| m.name.clone()).unwrap_or_default();
        for version in &group.versions {
            let version_name = version.version.as_deref().unwrap_or_default();
            for resource in version.resources.iter().filter(|r| r.verbs.iter().any(|v| v == verb)) {
                let gvr = Gvr {
                    group: group_name.clone(),
                    version: version_name.to_owned(),
                    resource: resource.resource.clone().unwrap_or_default(),
                };
                named.push(gvr.to_string());
            }
        }
    }
    named.sort();
    Ok(named)
}

/// Every resource in `category`, from each group's preferred version, in discovery order.
fn find_by_category(lists: &[APIGroupDiscoveryList], category: &str) -> Vec<Resolved> {
    let category = category.to_lowercase();
    let mut found = Vec::new();
    for group in lists.iter().flat_map(|l| &l.items) {
        let group_name = group.metadata.as_ref().and_then(|m| m.name.clone()).unwrap_or_default();
        let Some(version) = group.versions.first() else { continue };
        for resource in version.resources.iter().filter(|r| r.categories.contains(&category)) {
            found.push(resolved(&group_name, version.version.as_deref().unwrap_or_default(), resource));
        }
    }
    found
}

fn resolved(group: &str, version: &str, resource: &APIResourceDiscovery) -> Resolved {
    let plural = resource.resource.clone().unwrap_or_default();
    let kind = resource.response_kind.as_ref().and_then(|k| k.kind.clone()).unwrap_or_default();
    let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Resolved {
        ar: ApiResource { group: group.to_owned(), version: version.to_owned(), api_version, kind, plural },
        namespaced: resource.scope.as_deref() == Some("Namespaced"),
        verbs: resource.verbs.clone(),
        subresources: resource.subresources.iter().filter_map(|s| s.subresource.clone()).collect(),
    }
}

/// The readings of `input`: the whole of it as a resource name, or `resource.group`, or
/// `resource.version.group`.
fn readings(input: &str) -> Vec<(String, Option<String>, Option<String>)> {
    let lower = input.to_lowercase();
    let mut out = vec![(lower.clone(), None, None)];
    if let Some((resource, rest)) = lower.split_once('.') {
        out.push((resource.to_owned(), None, Some(rest.to_owned())));
        if let Some((version, group)) = rest.split_once('.') {
            out.push((resource.to_owned(), Some(version.to_owned()), Some(group.to_owned())));
        }
    }
    out
}

fn names_match(resource: &APIResourceDiscovery, name: &str) -> bool {
    let plural = resource.resource.as_deref().unwrap_or_default();
    let kind = resource.response_kind.as_ref().and_then(|k| k.kind.as_deref()).unwrap_or_default();
    plural == name
        || resource.singular_resource.as_deref() == Some(name)
        || kind.to_lowercase() == name
        || resource.short_names.iter().any(|s| s == name)
}

/// The first match in discovery order: the core group first, then groups in the server's priority order,
/// and within a group its preferred version first, which is how kubectl picks between `events` and
/// `events.events.k8s.io`.
fn find_by_name(lists: &[APIGroupDiscoveryList], input: &str) -> Option<Resolved> {
    for (name, want_version, want_group) in readings(input) {
        for group in lists.iter().flat_map(|l| &l.items) {
            let group_name = group.metadata.as_ref().and_then(|m| m.name.clone()).unwrap_or_default();
            if want_group.as_ref().is_some_and(|g| *g != group_name) {
                continue;
            }
            for version in &group.versions {
                let version_name = version.version.clone().unwrap_or_default();
                if want_version.as_ref().is_some_and(|v| *v != version_name) {
                    continue;
                }
                if let Some(resource) = version.resources.iter().find(|r| names_match(r, &name)) {
                    return Some(resolved(&group_name, &version_name, resource));
                }
            }
        }
    }
    None
}

async fn crd_names_match(client: &Client, input: &str) -> bool {
    let crds: Api<CustomResourceDefinition> = super::scope::cluster(client.clone());
    let Ok(list) = crds.list(&Default::default()).await else {
        return false;
    };
    list.items.iter().any(|crd| {
        let names = &crd.spec.names;
        readings(input).iter().any(|(name, version, group)| {
            group.as_ref().is_none_or(|g| *g == crd.spec.group)
                && version.as_ref().is_none_or(|v| crd.spec.versions.iter().any(|cv| cv.name == *v && cv.served))
                && (names.plural == *name
                    || names.singular.as_deref() == Some(name)
                    || names.kind.to_lowercase() == *name
                    || names.short_names.iter().flatten().any(|s| s == name))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr(g: &str, v: &str, r: &str) -> Gvr {
        Gvr { group: g.into(), version: v.into(), resource: r.into() }
    }

    proptest::proptest! {
        /// Whatever a user types, parsing answers (Ok or a usage error) and never panics.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,80}") {
            let _ = Gvr::parse(&text);
        }

        #[test]
        fn slash_heavy_text_is_refused_or_well_formed(text in "[a-z0-9./ -]{0,40}") {
            if let Ok(gvr) = Gvr::parse(&text) {
                let rebuilt = if gvr.group.is_empty() {
                    format!("{}/{}", gvr.version, gvr.resource)
                } else {
                    format!("{}/{}/{}", gvr.group, gvr.version, gvr.resource)
                };
                proptest::prop_assert_eq!(rebuilt, text);
            }
        }

        /// Every well-formed GROUP/VERSION/RESOURCE comes back as its parts.
        #[test]
        fn well_formed_gvrs_round_trip(
            group in "([a-z][a-z0-9]{0,8}\\.){0,3}[a-z][a-z0-9]{0,8}",
            version in "v[1-9](alpha[1-9]|beta[1-9])?",
            resource in "[a-z][a-z0-9]{0,20}",
        ) {
            let parsed = Gvr::parse(&format!("{group}/{version}/{resource}")).unwrap();
            proptest::prop_assert_eq!(parsed, gvr(&group, &version, &resource));
            let core = Gvr::parse(&format!("{version}/{resource}")).unwrap();
            proptest::prop_assert_eq!(core, gvr("", &version, &resource));
        }

        /// Resource-name readings never panic, whatever the dots and case.
        #[test]
        fn any_name_has_readings(text in "\\PC{0,60}") {
            let readings = readings(&text);
            proptest::prop_assert!(!readings.is_empty());
        }
    }

    #[test]
    fn parses_grouped_and_core() {
        assert_eq!(Gvr::parse("example.com/v1alpha1/samples").unwrap(), gvr("example.com", "v1alpha1", "samples"));
        assert_eq!(Gvr::parse("v1/configmaps").unwrap(), gvr("", "v1", "configmaps"));
        assert_eq!(
            Gvr::parse("apiextensions.k8s.io/v1/customresourcedefinitions").unwrap(),
            gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        );
    }

    #[test]
    fn rejects_malformed_with_the_expected_form() {
        let cases = [
            ("", "too few parts"),
            ("samples", "too few parts"),
            ("/v1/configmaps", "empty part"),
            ("v1/", "empty part"),
            ("example.com//samples", "empty part"),
            ("a/b/c/d/e", "too many parts"),
            ("example.com/v1alpha1/samples/status", "subresources such as samples/status"),
            ("v1/config maps", "not a valid resource name"),
            (" v1/configmaps", "not a valid API version"),
            ("example.com/v1/Samples", "not a valid resource name"),
            ("exämple.com/v1/samples", "not a valid API group"),
            ("v1/configmaps✓", "not a valid resource name"),
            ("example.com/1/samples", "not a valid API version"),
        ];
        for (input, why) in cases {
            let err = Gvr::parse(input).unwrap_err().to_string();
            assert!(err.contains(why), "{input:?}: {err}");
            assert!(err.contains("GROUP/VERSION/RESOURCE such as example.com/v1alpha1/samples"), "{input:?}: {err}");
        }
        let long = format!("{}/v1/samples", "a".repeat(300));
        assert!(Gvr::parse(&long).unwrap_err().to_string().contains("not a valid API group"));
    }

    fn discovery() -> Vec<APIGroupDiscoveryList> {
        let doc = serde_json::json!({"items": [
            {"metadata": {"name": ""}, "versions": [{"version": "v1", "resources": [
                {"resource": "configmaps", "responseKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                 "scope": "Namespaced", "singularResource": "configmap", "verbs": ["list"], "shortNames": ["cm"]},
                {"resource": "events", "responseKind": {"group": "", "version": "v1", "kind": "Event"},
                 "scope": "Namespaced", "singularResource": "event", "verbs": ["list"], "shortNames": ["ev"]}]}]},
            {"metadata": {"name": "events.k8s.io"}, "versions": [{"version": "v1", "resources": [
                {"resource": "events", "responseKind": {"group": "events.k8s.io", "version": "v1", "kind": "Event"},
                 "scope": "Namespaced", "singularResource": "event", "verbs": ["list"]}]}]},
            {"metadata": {"name": "example.com"}, "versions": [
                {"version": "v1beta1", "resources": [
                    {"resource": "samples", "responseKind": {"group": "example.com", "version": "v1beta1", "kind": "Sample"},
                     "scope": "Namespaced", "singularResource": "sample", "verbs": ["list"], "shortNames": ["smp"]}]},
                {"version": "v1alpha1", "resources": [
                    {"resource": "samples", "responseKind": {"group": "example.com", "version": "v1alpha1", "kind": "Sample"},
                     "scope": "Namespaced", "singularResource": "sample", "verbs": ["list"], "shortNames": ["smp"]}]}]}
        ]});
        vec![serde_json::from_value(doc).unwrap()]
    }

    #[test]
    fn names_resolve_like_kubectl() {
        let lists = discovery();
        let find = |name| find_by_name(&lists, name).map(|r| (r.ar.api_version, r.ar.plural, r.ar.kind));
        let sample = Some(("example.com/v1beta1".into(), "samples".into(), "Sample".into()));
        for name in ["samples", "sample", "smp", "Sample", "SAMPLES", "samples.example.com"] {
            assert_eq!(find(name), sample, "{name}");
        }
        assert_eq!(find("samples.v1alpha1.example.com").unwrap().0, "example.com/v1alpha1");
        assert_eq!(find("cm").unwrap().1, "configmaps");
        assert_eq!(find("events").unwrap().0, "v1", "the core group wins, as in kubectl");
        assert_eq!(find("events.events.k8s.io").unwrap().0, "events.k8s.io/v1");
        assert_eq!(find("samples.other.com"), None);
        assert_eq!(find("nothing"), None);
    }

    #[test]
    fn qualified_names_for_messages_and_name_output() {
        let lists = discovery();
        let sample = find_by_name(&lists, "smp").unwrap();
        assert_eq!(sample.qualified_plural(), "samples.example.com");
        assert_eq!(sample.object_name("a"), "sample.example.com/a");
        let cm = find_by_name(&lists, "cm").unwrap();
        assert_eq!(cm.qualified_plural(), "configmaps");
        assert_eq!(cm.object_name("a"), "configmap/a");
    }
}
