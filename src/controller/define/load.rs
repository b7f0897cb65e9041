//! Reading controller objects from manifests (`reconcile -f`): a file, a directory's `.yaml`, `.yml` and
//! `.json` files (in name order, not recursing, as `kubectl apply -f DIR` reads them), or `-` for stdin;
//! each YAML document, and each item of a `List`, is one object. CompositeControllers and
//! DecoratorControllers are read strictly, and so are kro's ResourceGraphDefinitions (their fields here,
//! their graph by `rules::graph::rgd`); every other kind is skipped, since upstream manifests put a
//! controller next to the Deployment and Service that serve its hook.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::api::{API_VERSION, COMPOSITE, CompositeController, DECORATOR, DecoratorController, GROUP};

/// A controller object as read, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Composite(Box<CompositeController>),
    Decorator(Box<DecoratorController>),
    /// A ResourceGraphDefinition, kept as JSON: its graph is read by `rules::graph::rgd`.
    Graph(Box<Value>),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Composite(_) => COMPOSITE,
            Object::Decorator(_) => DECORATOR,
            Object::Graph(_) => RGD_KIND,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Object::Composite(cc) => &cc.metadata.name,
            Object::Decorator(dc) => &dc.metadata.name,
            Object::Graph(rgd) => rgd["metadata"]["name"].as_str().unwrap_or_default(),
        }
    }
}

/// A manifest that cannot be read, worded as kubectl words it, with the file it is in.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadManifest(pub String);

/// Every controller object in `paths`, in the order given (a directory's files by name).
pub fn read(paths: &[PathBuf]) -> Result<Vec<Object>, BadManifest> {
    let mut objects = Vec::new();
    for path in paths {
        for (source, text) in sources(path)? {
            objects.extend(parse(&source, &text)?);
        }
    }
    Ok(objects)
}

/// The texts `path` names, each with the name it goes by in messages.
fn sources(path: &Path) -> Result<Vec<(String, String)>, BadManifest> {
    let shown = path.display().to_string();
    if shown == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|err| BadManifest(format!("error reading standard input: {err}")))?;
        return Ok(vec![("STDIN".into(), text)]);
    }
    let read = |file: &Path| {
        std::fs::read_to_string(file).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => BadManifest(format!("the path \"{}\" does not exist", file.display())),
            _ => BadManifest(format!("error reading {}: {err}", file.display())),
        })
    };
    if !path.is_dir() {
        return Ok(vec![(shown, read(path)?)]);
    }
    let entries = std::fs::read_dir(path).map_err(|err| BadManifest(format!("error reading {shown}: {err}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|file| file.is_file())
        .filter(|file| matches!(file.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")))
        .collect();
    files.sort();
    files.into_iter().map(|file| Ok((file.display().to_string(), read(&file)?))).collect()
}

/// The controller objects in one text of YAML documents (JSON is YAML).
pub fn parse(source: &str, text: &str) -> Result<Vec<Object>, BadManifest> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value =
            Value::deserialize(document).map_err(|err| BadManifest(format!("error parsing {source}: {err}")))?;
        match value {
            Value::Null => {}
            Value::Object(_) => collect(source, value, &mut objects)?,
            other => {
                return Err(BadManifest(format!(
                    "error parsing {source}: a document is {}, not an object",
                    crate::controller::rules::children::json_type(&other)
                )));
            }
        }
    }
    Ok(objects)
}

/// A controller object as the API server stores it, read as strictly as a manifest.
pub fn from_value(value: Value) -> Result<Object, BadManifest> {
    let mut objects = Vec::new();
    collect("the cluster", value, &mut objects)?;
    objects.pop().ok_or_else(|| BadManifest("not a controller object".into()))
}

fn collect(source: &str, value: Value, objects: &mut Vec<Object>) -> Result<(), BadManifest> {
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
    if kind.is_empty() || api_version.is_empty() {
        let missing = if kind.is_empty() { "kind" } else { "apiVersion" };
        return Err(BadManifest(format!("error validating {source}: an object is missing {missing}")));
    }
    if kind.ends_with("List") && value["items"].is_array() {
        let Value::Object(mut list) = value else { unreachable!("checked by the caller") };
        if let Some(Value::Array(items)) = list.remove("items") {
            for item in items {
                collect(source, item, objects)?;
            }
        }
        return Ok(());
    }
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    if kind == RGD_KIND && group == RGD_GROUP {
        return graph(source, value, objects);
    }
    let ours = kind == COMPOSITE || kind == DECORATOR;
    if !ours || group != GROUP {
        tracing::debug!(source, kind, "skipping a {kind}: not a controller object");
        return Ok(());
    }
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let what = if name.is_empty() { format!("a {kind}") } else { format!("{kind} {name:?}") };
    if api_version != API_VERSION {
        return Err(BadManifest(format!(
            "error validating {source}: {what} is {api_version}; samplectl reads {API_VERSION}, the version \
             metacontroller serves"
        )));
    }
    if name.is_empty() {
        return Err(BadManifest(format!("error validating {source}: {what} has no metadata.name")));
    }
    let strict = |err: serde_path_to_error::Error<serde_json::Error>| {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        let at = if path == "." { String::new() } else { format!(" at {path}") };
        BadManifest(format!("error validating {source}: {what}{at}: {inner}"))
    };
    let object = match kind.as_str() {
        COMPOSITE => Object::Composite(Box::new(serde_path_to_error::deserialize(value).map_err(strict)?)),
        _ => Object::Decorator(Box::new(serde_path_to_error::deserialize(value).map_err(strict)?)),
    };
    objects.push(object);
    Ok(())
}

const RGD_KIND: &str = "ResourceGraphDefinition";
const RGD_GROUP: &str = "kro.run";
const RGD_API_VERSION: &str = "kro.run/v1alpha1";

/// The fields a ResourceGraphDefinition may have where its CRD lists them (the templates and the
/// SimpleSchema are free): any other is refused with its place, as the API server refuses it under
/// strict field validation.
fn check_fields(rgd: &Value) -> Result<(), String> {
    const TOP: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
    const SPEC: &[&str] = &["schema", "resources"];
    const SCHEMA: &[&str] = &[
        "apiVersion",
        "kind",
        "group",
        "scope",
        "spec",
        "status",
        "types",
        "additionalPrinterColumns",
        "shortNames",
        "categories",
        "metadata",
    ];
    const RESOURCE: &[&str] = &["id", "template", "externalRef", "readyWhen", "includeWhen", "forEach"];
    const EXTERNAL: &[&str] = &["apiVersion", "kind", "metadata"];
    const EXTERNAL_METADATA: &[&str] = &["name", "namespace", "selector"];
    let only = |value: &Value, allowed: &[&str], at: &str| -> Result<(), String> {
        let unknown = value.as_object().and_then(|fields| fields.keys().find(|k| !allowed.contains(&k.as_str())));
        match (unknown, at) {
            (None, _) => Ok(()),
            (Some(field), "") => Err(format!("unknown field {field:?}")),
            (Some(field), at) => Err(format!("unknown field {field:?} at {at}")),
        }
    };
    only(rgd, TOP, "")?;
    only(&rgd["spec"], SPEC, "spec")?;
    only(&rgd["spec"]["schema"], SCHEMA, "spec.schema")?;
    for (i, resource) in rgd["spec"]["resources"].as_array().into_iter().flatten().enumerate() {
        only(resource, RESOURCE, &format!("spec.resources[{i}]"))?;
        only(&resource["externalRef"], EXTERNAL, &format!("spec.resources[{i}].externalRef"))?;
        only(
            &resource["externalRef"]["metadata"],
            EXTERNAL_METADATA,
            &format!("spec.resources[{i}].externalRef.metadata"),
        )?;
    }
    Ok(())
}

/// A ResourceGraphDefinition from a manifest: its version, name and fields checked here, its graph when
/// it is run.
fn graph(source: &str, value: Value, objects: &mut Vec<Object>) -> Result<(), BadManifest> {
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let what = if name.is_empty() { format!("a {RGD_KIND}") } else { format!("{RGD_KIND} {name:?}") };
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    if api_version != RGD_API_VERSION {
        return Err(BadManifest(format!(
            "error validating {source}: {what} is {api_version}; samplectl reads {RGD_API_VERSION}, the version kro \
             serves"
        )));
    }
    if name.is_empty() {
        return Err(BadManifest(format!("error validating {source}: {what} has no metadata.name")));
    }
    check_fields(&value).map_err(|why| BadManifest(format!("error validating {source}: {what}: {why}")))?;
    objects.push(Object::Graph(Box::new(value)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLLER: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: hook-server}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata:
  name: catset-controller
spec:
  parentResource: {apiVersion: ctl.enisoc.com/v1, resource: catsets, revisionHistory: {fieldPaths: [spec.template]}}
  childResources:
    - apiVersion: v1
      resource: pods
      updateStrategy: {method: RollingRecreate, statusChecks: {conditions: [{type: Ready, status: "True"}]}}
  hooks:
    sync: {webhook: {url: "http://catset-controller.metacontroller/sync"}}
    finalize: {version: v2, webhook: {service: {name: catset, namespace: metacontroller, port: 8080}, path: /finalize}}
---
"#;

    #[test]
    fn resource_graph_definitions_are_read_and_their_unknown_fields_refused() {
        let rgd = r#"
apiVersion: kro.run/v1alpha1
kind: ResourceGraphDefinition
metadata: {name: web}
spec:
  schema: {apiVersion: v1alpha1, kind: Web, spec: {port: integer}}
  resources:
    - id: cm
      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}, data: {anything: goes}}
"#;
        let objects = parse("web.yaml", rgd).unwrap();
        assert_eq!((objects[0].kind(), objects[0].name()), ("ResourceGraphDefinition", "web"));
        let typo = rgd.replace("    - id: cm", "    - id: cm\n      readyWhenn: []");
        assert_eq!(
            parse("web.yaml", &typo).unwrap_err().0,
            "error validating web.yaml: ResourceGraphDefinition \"web\": unknown field \"readyWhenn\" at spec.resources[0]"
        );
        let old = rgd.replace("kro.run/v1alpha1", "kro.run/v1beta1");
        assert!(parse("web.yaml", &old).unwrap_err().0.contains("samplectl reads kro.run/v1alpha1"));
    }

    #[test]
    fn controllers_are_read_and_other_kinds_skipped() {
        let objects = parse("catset.yaml", CONTROLLER).unwrap();
        assert_eq!(objects.len(), 1);
        let Object::Composite(cc) = &objects[0] else { panic!("a CompositeController") };
        assert_eq!(cc.metadata.name, "catset-controller");
        assert_eq!(cc.spec.parent_resource.resource, "catsets");
        let strategy = cc.spec.child_resources[0].update_strategy.as_ref().unwrap();
        assert_eq!(strategy.method, Some(super::super::api::Method::RollingRecreate));
        let finalize = cc.spec.hooks.as_ref().unwrap().finalize.as_ref().unwrap();
        assert_eq!(finalize.version, Some(super::super::api::HookVersion::V2));
        assert_eq!(finalize.webhook.as_ref().unwrap().service.as_ref().unwrap().port, Some(8080));
    }

    #[test]
    fn lists_are_opened_and_json_reads_as_yaml() {
        let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
             "metadata": {"name": "d"}, "spec": {"resources": [{"apiVersion": "v1", "resource": "pods"}]}}]}"#;
        let objects = parse("list.json", list).unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!((objects[0].kind(), objects[0].name()), ("DecoratorController", "d"));
    }

    #[test]
    fn mistakes_are_named_with_their_place() {
        let err = |text: &str| parse("c.yaml", text).unwrap_err().0;
        let head = "apiVersion: metacontroller.k8s.io/v1alpha1\nkind: CompositeController\nmetadata: {name: c}\n";
        let unknown = err(&format!("{head}spec:\n  parentResource: {{apiVersion: v1, resource: x, selector: {{}}}}\n"));
        assert!(
            unknown.starts_with(
                "error validating c.yaml: CompositeController \"c\" at spec.parentResource.selector: unknown field `selector`"
            ),
            "{unknown}"
        );
        let method = err(&format!(
            "{head}spec:\n  parentResource: {{apiVersion: v1, resource: x}}\n  childResources: [{{apiVersion: v1, resource: y, updateStrategy: {{method: Sometimes}}}}]\n"
        ));
        assert!(
            method.contains("at spec.childResources[0].updateStrategy.method: unknown variant `Sometimes`"),
            "{method}"
        );
        let missing = err(&format!("{head}spec: {{}}\n"));
        assert!(missing.contains("missing field `parentResource`"), "{missing}");
        assert!(err("kind: CompositeController\n").contains("missing apiVersion"));
        assert!(
            err("apiVersion: metacontroller.k8s.io/v2\nkind: CompositeController\nmetadata: {name: c}\n")
                .contains("is metacontroller.k8s.io/v2; samplectl reads metacontroller.k8s.io/v1alpha1")
        );
        assert!(err("a: [\n").starts_with("error parsing c.yaml: "));
        assert!(err("- 1\n").contains("a document is a list, not an object"));
    }
}
