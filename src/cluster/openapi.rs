//! The OpenAPI v3 schemas the API server publishes (`/openapi/v3`): a kind's schema, its `$ref`s
//! inlined and its descriptions dropped, as kro reads them to type a graph's expressions. Each
//! group-version's document is fetched once per call and dropped after.

use std::collections::HashMap;

use kube::Client;
use serde_json::{Map, Value, json};

/// How deep refs are inlined: a Deployment's containers are 7 levels down; what recurs (a CRD's
/// JSONSchemaProps) is cut where it recurs anyway.
const DEPTH: usize = 32;
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// `schema`'s `$ref`s (`#/components/schemas/NAME`) replaced by what they name, from `components`,
/// and its descriptions dropped. A type that refers to itself (JSONSchemaProps) is left open where it
/// recurs, and nothing is inlined deeper than `depth` levels.
pub fn inline(schema: &Value, components: &Map<String, Value>, depth: usize) -> Value {
    /// `names`: `schema` is a map of names to schemas (`properties`), whose keys are field names, not
    /// keywords, and are all kept (a field may be called `description`).
    fn go(schema: &Value, components: &Map<String, Value>, seen: &mut Vec<String>, depth: usize, names: bool) -> Value {
        match schema {
            Value::Object(fields) => {
                if !names && let Some(reference) = fields.get("$ref").and_then(Value::as_str) {
                    let name = reference.trim_start_matches("#/components/schemas/").to_owned();
                    if depth == 0 || seen.contains(&name) {
                        return json!({});
                    }
                    let Some(target) = components.get(&name) else { return json!({}) };
                    seen.push(name);
                    let inlined = go(target, components, seen, depth - 1, false);
                    seen.pop();
                    return inlined;
                }
                fields
                    .iter()
                    .filter(|(k, _)| names || k.as_str() != "description")
                    .map(|(k, v)| {
                        let holds_names = !names && matches!(k.as_str(), "properties" | "patternProperties");
                        (k.clone(), go(v, components, seen, depth, holds_names))
                    })
                    .collect::<Map<_, _>>()
                    .into()
            }
            Value::Array(items) => items.iter().map(|v| go(v, components, seen, depth, false)).collect(),
            other => other.clone(),
        }
    }
    go(schema, components, &mut Vec::new(), depth, false)
}

/// The schemas of some kinds, and ObjectMeta's.
#[derive(Debug, Default)]
pub struct KindSchemas {
    /// By (apiVersion, kind); a kind the server publishes no schema for is absent.
    pub kinds: HashMap<(String, String), Value>,
    /// The apiVersions whose document the server publishes.
    pub documents: std::collections::HashSet<String>,
    /// Whether the server publishes OpenAPI v3 at all (`/openapi/v3` is there).
    pub published: bool,
    pub object_meta: Value,
}

#[allow(clippy::disallowed_methods)] // GET requests only: the OpenAPI documents
async fn get(client: &Client, path: &str) -> Result<Value, kube::Error> {
    let request = http::Request::get(path).body(Vec::new()).map_err(kube::Error::HttpError)?;
    client.request::<Value>(request).await
}

/// Where the document of `api_version` is listed in `/openapi/v3`'s paths.
fn document_key(api_version: &str) -> String {
    match api_version.split_once('/') {
        Some((group, version)) => format!("apis/{group}/{version}"),
        None => format!("api/{api_version}"),
    }
}

/// The component of `document` declaring `kind` in `api_version`.
fn kind_schema<'a>(document: &'a Value, api_version: &str, kind: &str) -> Option<&'a Value> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    document["components"]["schemas"].as_object()?.values().find(|schema| {
        schema["x-kubernetes-group-version-kind"].as_array().is_some_and(|gvks| {
            gvks.iter().any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
        })
    })
}

/// The schemas of `kinds` (apiVersion, kind), and ObjectMeta's from any of their documents (or
/// core/v1's).
pub async fn kind_schemas(client: &Client, kinds: &[(String, String)]) -> Result<KindSchemas, kube::Error> {
    let mut found = KindSchemas::default();
    let index = match get(client, "/openapi/v3").await {
        Ok(index) => index,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(found),
        Err(e) => return Err(e),
    };
    found.published = true;
    let mut documents: HashMap<String, Value> = HashMap::new();
    let core = ("v1".to_owned(), String::new());
    for (api_version, kind) in kinds.iter().chain(std::iter::once(&core)) {
        if kind.is_empty() && !found.object_meta.is_null() {
            break;
        }
        let key = document_key(api_version);
        if !documents.contains_key(&key) {
            let Some(url) = index["paths"][&key]["serverRelativeURL"].as_str() else { continue };
            documents.insert(key.clone(), get(client, url).await?);
        }
        found.documents.insert(api_version.clone());
        let document = &documents[&key];
        let Some(components) = document["components"]["schemas"].as_object() else { continue };
        if let Some(schema) = kind_schema(document, api_version, kind) {
            found.kinds.insert((api_version.clone(), kind.clone()), inline(schema, components, DEPTH));
        }
        if found.object_meta.is_null()
            && let Some(meta) = components.get(OBJECT_META)
        {
            found.object_meta = inline(meta, components, DEPTH);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_kinds_are_found_by_group_version_kind() {
        assert_eq!(document_key("v1"), "api/v1");
        assert_eq!(document_key("apps/v1"), "apis/apps/v1");
        let document = json!({"components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}]},
            "io.k8s.api.apps.v1.DeploymentList": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "DeploymentList", "version": "v1"}]},
        }}});
        assert!(kind_schema(&document, "apps/v1", "Deployment").is_some());
        assert!(kind_schema(&document, "apps/v2", "Deployment").is_none());
        assert!(kind_schema(&document, "v1", "Deployment").is_none());
    }

    #[test]
    fn refs_are_inlined_and_recursion_stops() {
        let components = json!({
            "Meta": {"type": "object", "description": "x", "properties": {"name": {"type": "string", "description": "y"}}},
            "Props": {"type": "object", "properties": {"not": {"$ref": "#/components/schemas/Props"}}},
        });
        let components = components.as_object().unwrap();
        let schema = json!({"type": "object", "properties": {
            "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}], "default": {}},
            "schema": {"$ref": "#/components/schemas/Props"},
            "description": {"type": "string", "description": "a field called description"}}});
        let inlined = inline(&schema, components, 20);
        assert_eq!(inlined["properties"]["description"], json!({"type": "string"}), "a field, not a keyword");
        assert_eq!(
            inlined["properties"]["metadata"]["allOf"][0],
            json!({"type": "object", "properties": {"name": {"type": "string"}}})
        );
        assert_eq!(inlined["properties"]["schema"]["properties"]["not"], json!({}));
    }
}
