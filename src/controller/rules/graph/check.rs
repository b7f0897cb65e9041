//! kro's static checks of a graph against the types of what it reads and writes, the ones it makes
//! before it accepts an RGD (`validateAndCompileNode`, `inferStatusSchema`): each template's literals
//! against its resource's schema, each expression type-checked against the instance's schema and the
//! resources it reads, and its type against the field it is written in; forEach giving lists,
//! includeWhen and readyWhen giving booleans. A refusal is kro's message, for the RGD's
//! `GraphAccepted` condition. samplectl's checker knows fewer types than cel-go's (an optional, a
//! function it does not type, is `dyn`), so it refuses less than kro, never more.

use std::collections::HashMap;

use serde_json::Value;

use super::expr::{Piece, Template};
use super::rgd::{Graph, Node, Source};
use super::types::{self, Ty};
use super::walk::{self, Found};

/// The types of what expressions read: `schema` (the instance without its status, as kro strips it)
/// and each resource by id (a collection as a list), from the OpenAPI schemas of the resources (refs
/// inlined) and of ObjectMeta. A resource whose schema is not given is `dyn`.
pub fn variables(graph: &Graph, resources: &HashMap<String, Value>, object_meta: &Value) -> HashMap<String, Ty> {
    let mut instance = graph.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    if let Some(properties) = instance["properties"].as_object_mut() {
        properties.remove("status");
    }
    let mut meta = object_meta.clone();
    if !graph.api.namespaced
        && let Some(properties) = meta["properties"].as_object_mut()
    {
        properties.remove("namespace");
    }
    instance["properties"]["metadata"] = meta;
    let mut vars = HashMap::from([("schema".to_owned(), types::of_schema(&instance, &types::root_name("schema")))]);
    for node in &graph.nodes {
        let ty = resource(node, resources, object_meta);
        vars.insert(node.id.clone(), if node.is_collection() { Ty::List(Box::new(ty)) } else { ty });
    }
    vars
}

/// The type of one object of a resource.
fn resource(node: &Node, resources: &HashMap<String, Value>, object_meta: &Value) -> Ty {
    let Some(schema) = resources.get(&node.id) else { return Ty::Dyn };
    let mut object = schema.clone();
    if object.get("properties").is_some_and(Value::is_object) {
        object["properties"]["metadata"] = object_meta.clone();
    }
    types::of_schema(&object, &types::root_name(&node.id))
}

/// The CEL kro compiles for a template: the expression itself, or text and expressions joined with
/// `+` (`"prefix-" + (e)`); and how kro shows it in a message.
fn compiled(template: &Template) -> (String, String) {
    match template {
        Template::Whole(e) => (e.clone(), e.clone()),
        Template::Joined(pieces) => {
            let parts: Vec<String> = pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => format!("{t:?}"),
                    Piece::Expression(e) => format!("({e})"),
                })
                .collect();
            let shown: String = pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.clone(),
                    Piece::Expression(e) => format!("${{{e}}}"),
                })
                .collect();
            (parts.join(" + "), shown)
        }
    }
}

/// The strings with expressions of one resource, each with the type its field declares.
fn found(node: &Node, resources: &HashMap<String, Value>) -> Result<Vec<Found>, String> {
    let crd = node.api_version == "apiextensions.k8s.io/v1" && node.kind == "CustomResourceDefinition";
    match (&node.source, resources.get(&node.id)) {
        (Source::Template(template), Some(schema)) if !crd => {
            walk::walk(template, schema, "", &types::root_name(&node.id)).map_err(|e| {
                format!(
                    "failed to build resource {:?}: failed to extract CEL expressions from schema for resource {}: {e}",
                    node.id, node.id
                )
            })
        }
        _ => Ok(node
            .templates
            .iter()
            .map(|(path, template)| {
                let path = path.to_string();
                let expected = match &node.source {
                    Source::External { selector: Some(_), .. } => selector_type(&path),
                    _ => None,
                }
                .unwrap_or_else(|| declared(resources.get(&node.id), &path, &types::root_name(&node.id)));
                Found { path, template: template.clone(), expected }
            })
            .collect()),
    }
}

/// The type a selector's fields must have (kro's `selectorFieldType`): lenient, a LabelSelector's
/// shape.
fn selector_type(path: &str) -> Option<Ty> {
    let map_of = |t: Ty| Ty::Map(Box::new(t));
    match path {
        "metadata.selector" => Some(map_of(Ty::Dyn)),
        "metadata.selector.matchLabels" => Some(map_of(Ty::String)),
        "metadata.selector.matchExpressions" => Some(Ty::List(Box::new(Ty::Dyn))),
        _ if path.starts_with("metadata.selector.matchLabels.") => Some(Ty::String),
        _ => None,
    }
}

/// The type a resource's schema declares at a plain dotted path (`metadata.name`), or `dyn`.
fn declared(schema: Option<&Value>, path: &str, name: &str) -> Ty {
    let Some(mut at) = schema else { return Ty::Dyn };
    let mut name = name.to_owned();
    for field in path.split('.') {
        if field.is_empty() || field.contains(['[', '"']) {
            return Ty::Dyn;
        }
        at = types::unwrapped(at);
        match at["properties"].get(field) {
            Some(inner) => at = inner,
            None => return Ty::Dyn,
        }
        name = format!("{name}.{field}");
    }
    types::of_schema(at, &name)
}

/// Checks `graph` as kro does before it accepts it, with `resources` the OpenAPI schemas of its
/// resources by id (refs inlined; a resource without one is checked for what can be told without it)
/// and `object_meta` ObjectMeta's. What passes gives the types of the variables its expressions read
/// (`variables`), which also type the status fields.
pub fn check(
    graph: &Graph,
    resources: &HashMap<String, Value>,
    object_meta: &Value,
) -> Result<HashMap<String, Ty>, String> {
    let mut by_node = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        by_node.push(found(node, resources)?);
    }
    let vars = variables(graph, resources, object_meta);
    for (node, found) in graph.nodes.iter().zip(&by_node) {
        check_node(node, found, &vars, resources, object_meta)
            .map_err(|e| format!("failed to validate resource {:?}: {e}", node.id))?;
    }
    for (path, template) in &graph.status {
        let (expression, shown) = compiled(template);
        types::check(&expression, &vars, &[]).map_err(|e| {
            format!(
                "failed to build instance status schema: failed to type-check status expression {shown:?} at path {:?}: {e}",
                path.to_string()
            )
        })?;
    }
    Ok(vars)
}

fn check_node(
    node: &Node,
    found: &[Found],
    vars: &HashMap<String, Ty>,
    resources: &HashMap<String, Value>,
    object_meta: &Value,
) -> Result<(), String> {
    let id = &node.id;
    let mut iterators = Vec::new();
    for (iterator, expression) in &node.for_each {
        let ty = types::check(expression, vars, &[])
            .map_err(|e| format!("node {id:?}: forEach iterator {iterator:?}: {e}"))?;
        let item = match ty {
            Ty::List(item) => *item,
            Ty::Dyn => Ty::Dyn,
            other => {
                let shown = types::name(&other);
                return Err(format!(
                    "node {id:?}: forEach iterator {iterator:?} must return a list, got {shown:?}: type {shown:?} is not \
                     a list type"
                ));
            }
        };
        iterators.push((iterator.clone(), item));
    }
    for one in found {
        let (expression, shown) = compiled(&one.template);
        let output = types::check(&expression, vars, &iterators)
            .map_err(|e| format!("failed to compile template expression {shown:?} at path {:?}: {e}", one.path))?;
        types::assignable(&output, &one.expected).map_err(|why| {
            format!(
                "type mismatch in resource {id:?} at path {:?}: expression {shown:?} returns type {:?} but expected {:?}: \
                 {why}",
                one.path,
                types::name(&output),
                types::name(&one.expected)
            )
        })?;
    }
    let condition = |kind: &str, expression: &str, locals: &[(String, Ty)]| -> Result<(), String> {
        let ty = types::check(expression, vars, locals)
            .map_err(|e| format!("failed to type-check {kind} expression {expression:?} in resource {id:?}: {e}"))?;
        match ty {
            Ty::Bool | Ty::Dyn => Ok(()),
            other => Err(format!(
                "{kind} expression {expression:?} in resource {id:?} must return bool or optional_type(bool), but \
                 returns {:?}",
                types::name(&other)
            )),
        }
    };
    for expression in &node.include_when {
        condition("includeWhen", expression, &[])?;
    }
    let each: Vec<(String, Ty)> = match node.is_collection() && !node.ready_when.is_empty() {
        true => vec![("each".to_owned(), resource(node, resources, object_meta))],
        false => Vec::new(),
    };
    for expression in &node.ready_when {
        condition("readyWhen", expression, &each)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::rules::graph::rgd;
    use serde_json::json;

    fn config_map() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"type": "object"}]},
            "data": {"type": "object", "additionalProperties": {"type": "string"}},
            "immutable": {"type": "boolean"}}})
    }

    fn object_meta() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}}})
    }

    fn graph(spec: Value, resources: Value) -> Graph {
        rgd::build(&json!({"metadata": {"name": "r"}, "spec": {
            "schema": {"apiVersion": "v1alpha1", "kind": "App", "spec": spec,
                "status": {"name": "${schema.metadata.name}"}},
            "resources": resources}}))
        .unwrap()
    }

    fn checked(spec: Value, template: Value) -> Result<(), String> {
        let graph = graph(spec, json!([{"id": "cm", "template": template}]));
        check(&graph, &HashMap::from([("cm".to_owned(), config_map())]), &object_meta()).map(drop)
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}"}, "data": data})
    }

    #[test]
    fn what_fits_is_accepted() {
        let spec = json!({"name": "string", "port": "integer", "on": "boolean", "labels": "map[string]string"});
        assert_eq!(
            checked(spec.clone(), cm(json!({"a": "${schema.spec.name}", "b": "x-${string(schema.spec.port)}"}))),
            Ok(())
        );
        let mut with_labels = cm(json!({}));
        with_labels["metadata"]["labels"] = json!("${schema.spec.labels}");
        with_labels["immutable"] = json!("${schema.spec.on && schema.spec.port > 1}");
        assert_eq!(checked(spec, with_labels), Ok(()));
    }

    #[test]
    fn kros_refusals_in_its_words() {
        let spec = json!({"name": "string", "port": "integer"});
        let err = checked(spec.clone(), cm(json!({"a": "${schema.spec.nope}"}))).unwrap_err();
        assert_eq!(
            err,
            "failed to validate resource \"cm\": failed to compile template expression \"schema.spec.nope\" at path \
             \"data.a\": ERROR: <input>:1:12: undefined field 'nope'\n | schema.spec.nope\n | ...........^"
        );
        let err = checked(spec.clone(), cm(json!({"a": "${schema.spec.port}"}))).unwrap_err();
        assert_eq!(
            err,
            "failed to validate resource \"cm\": type mismatch in resource \"cm\" at path \"data.a\": expression \
             \"schema.spec.port\" returns type \"int\" but expected \"string\": type kind mismatch: got \"int\", expected \
             \"string\""
        );
        let err = checked(spec.clone(), cm(json!({"a": "port-${schema.spec.port}"}))).unwrap_err();
        assert_eq!(
            err,
            "failed to validate resource \"cm\": failed to compile template expression \"port-${schema.spec.port}\" at \
             path \"data.a\": ERROR: <input>:1:9: found no matching overload for '_+_' applied to '(string, int)'\n | \
             \"port-\" + (schema.spec.port)\n | ........^"
        );
        let err = checked(spec.clone(), cm(json!({"a": 1}))).unwrap_err();
        assert_eq!(
            err,
            "failed to build resource \"cm\": failed to extract CEL expressions from schema for resource cm: expected \
             string type for path data.a, got integer"
        );
        let mut bogus = cm(json!({}));
        bogus["spec"] = json!({"x": 1});
        assert!(checked(spec.clone(), bogus).unwrap_err().ends_with("schema not found for field spec"));
        let err = checked(spec, cm(json!({"a": "${schema.status.x}"}))).unwrap_err();
        assert!(err.contains("undefined field 'status'"), "{err}");
    }

    #[test]
    fn conditions_and_collections_have_their_types() {
        let spec = json!({"names": "[]string", "port": "integer"});
        let make = |extra: Value| {
            let mut resource = json!({"id": "cm", "template": cm(json!({}))});
            for (k, v) in extra.as_object().unwrap() {
                resource[k] = v.clone();
            }
            let graph = graph(spec.clone(), json!([resource]));
            check(&graph, &HashMap::from([("cm".to_owned(), config_map())]), &object_meta()).map(drop)
        };
        assert_eq!(make(json!({"includeWhen": ["${schema.spec.port > 1}"]})), Ok(()));
        assert_eq!(
            make(json!({"includeWhen": ["${schema.spec.port}"]})).unwrap_err(),
            "failed to validate resource \"cm\": includeWhen expression \"schema.spec.port\" in resource \"cm\" must \
             return bool or optional_type(bool), but returns \"int\""
        );
        assert_eq!(make(json!({"readyWhen": ["${cm.data.x == 'y'}"]})), Ok(()));
        assert_eq!(
            make(json!({"readyWhen": ["${cm.data.x}"]})).unwrap_err(),
            "failed to validate resource \"cm\": readyWhen expression \"cm.data.x\" in resource \"cm\" must return \
             bool or optional_type(bool), but returns \"string\""
        );
        let mut named = cm(json!({"v": "${name}"}));
        named["metadata"]["name"] = json!("${schema.metadata.name}-${name}");
        let each = |expr: &str| {
            let graph =
                graph(spec.clone(), json!([{"id": "cm", "forEach": [{"name": expr}], "template": named.clone()}]));
            check(&graph, &HashMap::from([("cm".to_owned(), config_map())]), &object_meta()).map(drop)
        };
        assert_eq!(each("${schema.spec.names}"), Ok(()));
        assert_eq!(
            each("${schema.spec.port}").unwrap_err(),
            "failed to validate resource \"cm\": node \"cm\": forEach iterator \"name\" must return a list, got \"int\": \
             type \"int\" is not a list type"
        );
    }

    #[test]
    fn status_fields_are_typed_from_the_schemas_they_read() {
        let mut with_status = json!({"metadata": {"name": "r"}, "spec": {
            "schema": {"apiVersion": "v1alpha1", "kind": "App", "spec": {}},
            "resources": [{"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "x"}}}]}});
        with_status["spec"]["schema"]["status"] = json!({
            "available": "${deployment.status.availableReplicas}",
            "ready": "${deployment.status.availableReplicas > 0}",
            "name": "${schema.metadata.name}",
            "open": "${deployment.spec.whatever}",
        });
        let mut graph = rgd::build(&with_status).unwrap();
        let deployment = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {}},
            "status": {"type": "object", "properties": {"availableReplicas": {"type": "integer", "format": "int32"}}}}});
        let meta = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let vars = variables(&graph, &HashMap::from([("deployment".to_owned(), deployment)]), &meta);
        rgd::type_status(&mut graph, &vars);
        let status = &graph.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        assert_eq!(status["properties"]["available"], json!({"type": "integer"}));
        assert_eq!(status["properties"]["ready"], json!({"type": "boolean"}));
        assert_eq!(status["properties"]["name"], json!({"type": "string"}));
        assert_eq!(status["properties"]["open"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(status["properties"]["state"], json!({"type": "string"}));
    }
}
