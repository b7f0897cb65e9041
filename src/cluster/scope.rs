//! The one place an `Api` is scoped to a namespace or to the whole cluster, so that "no namespace" means
//! the same thing (every namespace, or a cluster-scoped resource) for every reader and writer.

use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::{Client, Resource};

/// A typed `Api` in `namespace`, or across all namespaces for `None`.
#[allow(clippy::disallowed_methods)] // the one place an Api is scoped
pub fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// A typed `Api` of a cluster-scoped resource (CRDs, Namespaces).
#[allow(clippy::disallowed_methods)] // the one place an Api is scoped
pub fn cluster<K>(client: Client) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    Api::all(client)
}

/// The metadata-only `Api` of a cluster-scoped resource (CRDs watched for appearing).
#[allow(clippy::disallowed_methods)] // the one place an Api is scoped
pub fn cluster_metadata<K>(client: Client) -> Api<PartialObjectMeta<K>>
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope> + Clone,
    <K as Resource>::DynamicType: Default,
{
    Api::all(client)
}

/// A schema-less `Api` for the discovered resource `ar`, in `namespace` or across all of them (which is
/// also how a cluster-scoped resource is reached).
pub fn dynamic(client: Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    discovered(client, ar, namespace)
}

/// An `Api` of any object type whose resource discovery resolved (whole objects, or their metadata only),
/// scoped as `dynamic`.
#[allow(clippy::disallowed_methods)] // the one place an Api is scoped
pub fn discovered<K>(client: Client, ar: &ApiResource, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, ar),
        None => Api::all_with(client, ar),
    }
}
