//! A ResourceGraphDefinition read and checked as kro's builder checks it, without a cluster: the instance
//! API (kind, group, version, scope, plural) and the CRD kro would generate for it, each resource's
//! template or external reference with the expressions it holds, the dependency graph those expressions
//! make, its topological order and apply waves. What kro refuses is refused with kro's message, the one
//! it writes into the RGD's `GraphAccepted` condition. Whether the server serves each resource's type
//! is the cluster's question, asked by the caller.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use super::authored;
use super::cel::CONDITION_KEYS;
use super::dag::Dag;
use super::expr::{self, Path, Step, Template};
use super::label_selector;
use super::plural::pluralize;
use super::schema::spec_schema;
use super::types::{self, Ty};

pub const DEFAULT_GROUP: &str = "kro.run";

/// CEL's reserved words and kro's own: neither a resource id nor a forEach iterator may be one.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
    "apiVersion",
    "context",
    "dependency",
    "dependencies",
    "each",
    "externalRef",
    "externalReference",
    "externalRefs",
    "externalReferences",
    "graph",
    "instance",
    "item",
    "items",
    "kind",
    "kro",
    "metadata",
    "object",
    "resource",
    "resourcegraphdefinition",
    "resourceGraphDefinition",
    "resources",
    "root",
    "runtime",
    "schema",
    "self",
    "serviceAccountName",
    "spec",
    "status",
    "this",
    "variables",
    "vars",
    "version",
];

/// The most forEach dimensions one resource may have (kro's `--rgd-max-collection-dimension-size`).
pub const MAX_DIMENSIONS: usize = 10;
/// The most items one forEach resource may make (kro's `--rgd-max-collection-size`).
pub const MAX_COLLECTION: usize = 1000;

/// The API an RGD defines.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceApi {
    pub kind: String,
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespaced: bool,
}

impl InstanceApi {
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// What a resource of the graph is.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// An object the instance owns, made from this template.
    Template(Value),
    /// An object someone else owns, read by name (one object) or by label selector (a list).
    External { name: Option<String>, namespace: Option<String>, selector: Option<Value> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: String,
    /// Where it is declared in `spec.resources`.
    pub index: usize,
    pub api_version: String,
    pub kind: String,
    pub source: Source,
    /// The strings with expressions in the template (or the external reference), by path.
    pub templates: Vec<(Path, Template)>,
    pub ready_when: Vec<String>,
    pub include_when: Vec<String>,
    /// forEach dimensions, in order: iterator name and expression.
    pub for_each: Vec<(String, String)>,
    /// The resources its expressions read.
    pub dependencies: BTreeSet<String>,
}

impl Node {
    pub fn is_collection(&self) -> bool {
        !self.for_each.is_empty() || matches!(&self.source, Source::External { selector: Some(_), .. })
    }
}

#[derive(Debug, Clone)]
pub struct Graph {
    pub api: InstanceApi,
    /// The instance CRD, as kro would create it (without its labels, which name the RGD).
    pub crd: Value,
    pub nodes: Vec<Node>,
    pub order: Vec<String>,
    pub waves: HashMap<String, usize>,
    /// `spec.schema.status`: each field with expressions, by path under `status`.
    pub status: Vec<(Path, Template)>,
    /// `spec.schema.status.conditions`: the author's conditions, each expression giving one (or a list),
    /// which then own the instance's `status.conditions`; with the resources each reads.
    pub conditions: Vec<(String, BTreeSet<String>)>,
}

impl Graph {
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

fn lower_camel(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

fn upper_camel(kind: &str) -> bool {
    let mut chars = kind.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

fn string<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(value, |v, k| v.get(*k)).and_then(Value::as_str)
}

/// Reads and checks `rgd` (the whole object), as kro's builder does.
pub fn build(rgd: &Value) -> Result<Graph, String> {
    build_with(rgd, Features::default())
}

/// kro's feature gates that change what an RGD may hold (`--feature-gates`), all off by default as in kro.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// `CELOmitFunction`: `omit()` in a template field leaves the field out.
    pub omit: bool,
}

const OMIT_ONLY_IN_TEMPLATES: &str = "omit() can only be used in resource template expressions";

fn uses_omit(expression: &str) -> bool {
    expr::calls(expression).is_ok_and(|calls| calls.contains("omit"))
}

/// Where kro refuses `omit()` once its gate lets it into templates: in forEach, and in a resource's
/// name. (readyWhen, status fields and conditions refuse it whatever the gate says.)
fn check_omit(node: &Node) -> Result<(), String> {
    let id = &node.id;
    if let Some((iterator, _)) = node.for_each.iter().find(|(_, e)| uses_omit(e)) {
        return Err(format!(
            "failed to validate resource {id:?}: node {id:?}: forEach iterator {iterator:?}: {OMIT_ONLY_IN_TEMPLATES}"
        ));
    }
    for (path, template) in &node.templates {
        let path = path.to_string();
        if path == "metadata.name" && template.expressions().iter().any(|e| uses_omit(e)) {
            return Err(format!(
                "resource {id:?}: omit() cannot be used at path {path:?} \u{2014} the field is required and must resolve \
                 to a concrete value"
            ));
        }
    }
    Ok(())
}

/// Reads and checks `rgd` as kro's builder does with the feature gates `features`.
pub fn build_with(rgd: &Value, features: Features) -> Result<Graph, String> {
    let name = string(rgd, &["metadata", "name"]).unwrap_or_default();
    let spec = &rgd["spec"];
    let schema = &spec["schema"];
    let kind = string(schema, &["kind"]).unwrap_or_default();
    let resources: &[Value] = spec["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
    validate(kind, resources).map_err(|e| format!("failed to validate resourcegraphdefinition: {e}"))?;

    let api = InstanceApi {
        kind: kind.to_owned(),
        group: string(schema, &["group"]).filter(|g| !g.is_empty()).unwrap_or(DEFAULT_GROUP).to_owned(),
        version: string(schema, &["apiVersion"]).unwrap_or_default().to_owned(),
        plural: pluralize(&kind.to_lowercase()),
        namespaced: string(schema, &["scope"]) != Some("Cluster"),
    };
    let spec_schema = spec_schema(schema.get("spec"), schema.get("types"))
        .map_err(|e| format!("failed to build resourcegraphdefinition {name:?}: {e}"))?;

    let mut nodes = Vec::with_capacity(resources.len());
    for (index, resource) in resources.iter().enumerate() {
        let id = string(resource, &["id"]).unwrap_or_default();
        nodes.push(node(resource, index).map_err(|e| format!("failed to build resource {id:?}: {e}"))?);
    }
    let ids: BTreeSet<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let mut dag = Dag::default();
    for node in &nodes {
        dag.add(&node.id, node.index)
            .map_err(|e| format!("failed to build dependency graph: failed to add vertex to graph: {e}"))?;
    }
    for node in &mut nodes {
        node.dependencies =
            dependencies(node, &ids, features).map_err(|e| format!("failed to build dependency graph: {e}"))?;
        let on: Vec<String> = node.dependencies.iter().cloned().collect();
        dag.depend(&node.id, &on).map_err(|e| format!("failed to build dependency graph: {e}"))?;
    }
    let order = dag.order().map_err(|e| format!("failed to get topological order: {e}"))?;
    let waves = dag.waves();
    if features.omit {
        nodes.iter().try_for_each(check_omit)?;
    }
    for node in &nodes {
        check_ready_when(node).map_err(|e| format!("failed to validate resource {:?}: {e}", node.id))?;
    }

    let (status, conditions) = status_templates(schema.get("status"), &ids)?;
    let expressions: Vec<String> = conditions.iter().map(|(expression, _)| expression.clone()).collect();
    authored::check(&expressions).map_err(|e| format!("failed to build instance conditions: {e}"))?;
    if let Some(expression) = expressions.iter().find(|e| uses_omit(e)) {
        return Err(format!("failed to build instance conditions: condition {expression:?}: {OMIT_ONLY_IN_TEMPLATES}"));
    }
    let crd = crd(&api, schema, spec_schema, &status);
    Ok(Graph { api, crd, nodes, order, waves, status, conditions })
}

fn validate(kind: &str, resources: &[Value]) -> Result<(), String> {
    if !upper_camel(kind) {
        return Err(format!(
            "naming convention violation: kind '{kind}' is not a valid KRO kind name: must be UpperCamelCase"
        ));
    }
    let mut seen = BTreeSet::new();
    for resource in resources {
        let id = string(resource, &["id"]).unwrap_or_default();
        if RESERVED.contains(&id) {
            return Err(format!("naming convention violation: id {id} is a reserved keyword in KRO"));
        }
        if !lower_camel(id) {
            return Err(format!(
                "naming convention violation: id {id} is not a valid KRO resource id: must be lower camelCase"
            ));
        }
        if !seen.insert(id) {
            return Err(format!("naming convention violation: found duplicate resource IDs {id}"));
        }
    }
    for resource in resources {
        let id = string(resource, &["id"]).unwrap_or_default();
        let dimensions = resource["forEach"].as_array().map(Vec::as_slice).unwrap_or_default();
        if dimensions.len() > MAX_DIMENSIONS {
            return Err(format!(
                "resource {id:?}: forEach cannot have more than {MAX_DIMENSIONS} dimensions, got {}",
                dimensions.len()
            ));
        }
        let mut iterators = BTreeSet::new();
        for dimension in dimensions {
            for iterator in dimension.as_object().map(|m| m.keys().collect::<Vec<_>>()).unwrap_or_default() {
                if !lower_camel(iterator) {
                    return Err(format!(
                        "resource {id:?}: forEach iterator name {iterator:?} is not valid: must be lowerCamelCase"
                    ));
                }
                if RESERVED.contains(&iterator.as_str()) {
                    return Err(format!("resource {id:?}: forEach iterator name {iterator:?} is a reserved keyword"));
                }
                if seen.contains(iterator.as_str()) {
                    return Err(format!(
                        "resource {id:?}: forEach iterator name {iterator:?} conflicts with resource ID"
                    ));
                }
                if !iterators.insert(iterator.clone()) {
                    return Err(format!("resource {id:?}: duplicate forEach iterator name {iterator:?}"));
                }
            }
        }
    }
    Ok(())
}

fn standalone_list(resource: &Value, field: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in resource[field].as_array().map(Vec::as_slice).unwrap_or_default() {
        let text = item.as_str().unwrap_or_default();
        out.push(expr::standalone(text).map_err(|e| format!("failed to parse {field} expressions: {e}"))?);
    }
    Ok(out)
}

fn node(resource: &Value, index: usize) -> Result<Node, String> {
    let id = string(resource, &["id"]).unwrap_or_default().to_owned();
    let template = resource.get("template").filter(|t| !t.is_null());
    let external = resource.get("externalRef").filter(|t| !t.is_null());
    let dimensions = resource["forEach"].as_array().map(Vec::as_slice).unwrap_or_default();
    let combination = match (template, external) {
        (None, None) => Err(format!("resource {id:?}: exactly one of template or externalRef must be provided")),
        (Some(_), Some(_)) => Err(format!("resource {id:?}: cannot use externalRef with template")),
        (None, Some(_)) if !dimensions.is_empty() => {
            Err(format!("resource {id:?}: cannot use externalRef with forEach"))
        }
        _ => Ok(()),
    };
    combination.map_err(|e| format!("invalid combination of resource fields: {e}"))?;
    if let Some(external) = external {
        let metadata = &external["metadata"];
        let named = metadata["name"].as_str().is_some_and(|n| !n.is_empty());
        let selector = metadata.get("selector").filter(|s| !s.is_null());
        let valid = match (named, selector) {
            (true, None) => Ok(()),
            (false, Some(selector)) => label_selector::check(selector),
            _ => Err("exactly one of name or selector must be provided".to_owned()),
        };
        valid.map_err(|e| format!("invalid external ref metadata for resource {id}: {e}"))?;
    }
    let object = template.or(external).expect("one of them");
    let invalid = |why: &str| format!("resource {id} is not a valid Kubernetes object: {why}");
    let api_version = match object.get("apiVersion") {
        None => return Err(invalid("apiVersion field not found")),
        Some(Value::String(v)) => v.clone(),
        Some(_) => return Err(invalid("apiVersion field is not a string")),
    };
    let kind = match object.get("kind") {
        None => return Err(invalid("kind field not found")),
        Some(Value::String(k)) => k.clone(),
        Some(_) => return Err(invalid("kind field is not a string")),
    };
    match object.get("metadata") {
        None => return Err(invalid("metadata field not found")),
        Some(Value::Object(_)) => {}
        Some(_) => return Err(invalid("metadata field is not a map")),
    }
    let source = match template {
        Some(template) => Source::Template(template.clone()),
        None => {
            let metadata = &object["metadata"];
            Source::External {
                name: string(metadata, &["name"]).map(str::to_owned),
                namespace: string(metadata, &["namespace"]).map(str::to_owned),
                selector: metadata.get("selector").filter(|s| !s.is_null()).cloned(),
            }
        }
    };
    let templates = expr::templates(object)
        .map_err(|e| format!("failed to extract CEL expressions from schema for resource {id}: {e}"))?;
    let mut for_each = Vec::new();
    for dimension in dimensions {
        for (iterator, value) in dimension.as_object().into_iter().flatten() {
            let text = value.as_str().unwrap_or_default();
            let expression = expr::standalone(text).map_err(|e| {
                format!(
                    "failed to parse forEach dimensions: invalid forEach expression for dimension {iterator:?}: {e}"
                )
            })?;
            for_each.push((iterator.clone(), expression));
        }
    }
    Ok(Node {
        id,
        index,
        api_version,
        kind,
        source,
        templates,
        ready_when: standalone_list(resource, "readyWhen")?,
        include_when: standalone_list(resource, "includeWhen")?,
        for_each,
        dependencies: BTreeSet::new(),
    })
}

/// The resources a node's template, forEach and includeWhen expressions read; every other identifier
/// must be `schema` or one of its iterators.
fn dependencies(node: &Node, ids: &BTreeSet<String>, features: Features) -> Result<BTreeSet<String>, String> {
    let iterators: Vec<&str> = node.for_each.iter().map(|(name, _)| name.as_str()).collect();
    let mut dependencies = BTreeSet::new();
    let mut used_iterators = BTreeSet::new();
    let read = |expression: &str,
                allowed_iterators: bool,
                what: &str,
                dependencies: &mut BTreeSet<String>,
                used: &mut BTreeSet<String>|
     -> Result<(), String> {
        let names = expr::identifiers(expression)
            .map_err(|e| format!("{what}: failed to parse expression {expression:?}: {e}"))?;
        let calls = expr::calls(expression).unwrap_or_default();
        if !features.omit && calls.contains("omit") {
            return Err(format!("{what}: omit() requires the CELOmitFunction feature gate to be enabled"));
        }
        if names.contains("runtime") || calls.iter().any(|c| c.starts_with("runtime.")) {
            return Err(format!("{what}: runtime is only available in status.conditions expressions"));
        }
        let mut unknown = Vec::new();
        for name in names {
            if name == "schema" {
                continue;
            }
            if allowed_iterators && iterators.contains(&name.as_str()) {
                used.insert(name);
                continue;
            }
            if ids.contains(&name) {
                if name == node.id {
                    return Err("self references are not allowed".into());
                }
                dependencies.insert(name);
                continue;
            }
            unknown.push(name);
        }
        match unknown.is_empty() {
            true => Ok(()),
            false => Err(format!("{what}: references unknown identifiers: [{}]", unknown.join(" "))),
        }
    };
    for (_, template) in &node.templates {
        for expression in template.expressions() {
            read(expression, true, "failed to extract dependencies", &mut dependencies, &mut used_iterators)?;
        }
    }
    let missing: Vec<&str> = iterators.iter().filter(|i| !used_iterators.contains(**i)).copied().collect();
    if !missing.is_empty() {
        return Err(format!(
            "node {:?}: all forEach dimensions must be used to produce a unique resource identity, missing: [{}]",
            node.id,
            missing.join(" ")
        ));
    }
    for (iterator, expression) in &node.for_each {
        let names = expr::identifiers(expression)
            .map_err(|e| format!("failed to extract dependencies from forEach iterator {iterator:?}: {e}"))?;
        let others: Vec<&String> = names.iter().filter(|n| iterators.contains(&n.as_str())).collect();
        if !others.is_empty() {
            return Err(format!(
                "node {:?}: forEach iterator {iterator:?} cannot reference other iterators {others:?} - forEach iterators are \
                 independent (cartesian product)",
                node.id
            ));
        }
        let what = format!("failed to extract dependencies from forEach iterator {iterator:?}");
        read(expression, false, &what, &mut dependencies, &mut used_iterators)?;
    }
    for expression in &node.include_when {
        read(
            expression,
            false,
            "failed to extract dependencies from includeWhen",
            &mut dependencies,
            &mut used_iterators,
        )?;
    }
    Ok(dependencies)
}

/// readyWhen reads only the resource itself (or `each`, an item of a collection).
fn check_ready_when(node: &Node) -> Result<(), String> {
    for expression in &node.ready_when {
        if uses_omit(expression) {
            return Err(format!("resource {:?} readyWhen: {OMIT_ONLY_IN_TEMPLATES}", node.id));
        }
        let names = expr::identifiers(expression).map_err(|e| format!("readyWhen: {e}"))?;
        for name in names {
            let allowed = name == node.id || (name == "each" && node.is_collection());
            if !allowed {
                return Err(format!("readyWhen: references unknown identifiers: [{name}]"));
            }
        }
    }
    Ok(())
}

/// The status fields and their expressions; `conditions` is the author's own list and is left out.
/// The status fields with their expressions, and the author's condition expressions with the resources
/// each reads.
type StatusTemplates = (Vec<(Path, Template)>, Vec<(String, BTreeSet<String>)>);

fn status_templates(status: Option<&Value>, ids: &BTreeSet<String>) -> Result<StatusTemplates, String> {
    status_fields(status, ids).map_err(|e| format!("failed to build instance status schema: {e}"))
}

/// How Go's `%T` names the type of a JSON value kro decoded (with encoding/json: every number a float64).
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn status_fields(status: Option<&Value>, ids: &BTreeSet<String>) -> Result<StatusTemplates, String> {
    let Some(Value::Object(fields)) = status else { return Ok((Vec::new(), Vec::new())) };
    // The author's conditions: a list of expressions, each giving a condition.
    let mut conditions = Vec::new();
    if let Some(given) = fields.get("conditions") {
        let conditions_given = given;
        let block = |e: String| format!("failed to extract conditions block: {e}");
        let Some(list) = conditions_given.as_array() else {
            return Err(block(format!("status.conditions must be a list, got {}", go_type(conditions_given))));
        };
        if let Some((i, item)) = list.iter().enumerate().find(|(_, item)| !item.is_string()) {
            return Err(block(format!(
                "status.conditions[{i}] must be a CEL expression string, got {}",
                go_type(item)
            )));
        }
        for (i, text) in list.iter().filter_map(Value::as_str).enumerate() {
            let expression = expr::standalone(text).map_err(|e| format!("status.conditions[{i}]: {e}"))?;
            let names = expr::identifiers(&expression)
                .map_err(|e| format!("status.conditions[{i}] expression {expression:?}: {e}"))?;
            let unknown: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|n| !["schema", "runtime"].contains(n) && !CONDITION_KEYS.contains(n) && !ids.contains(*n))
                .collect();
            if !unknown.is_empty() {
                return Err(format!(
                    "status.conditions[{i}] expression {expression:?} references unknown identifiers: [{}]",
                    unknown.join(" ")
                ));
            }
            let reads = names.into_iter().filter(|n| ids.contains(n)).collect();
            conditions.push((expression, reads));
        }
    }
    let mut plain = Map::new();
    for (key, value) in fields {
        if key != "conditions" {
            plain.insert(key.clone(), value.clone());
        }
    }
    let found = expr::templates(&Value::Object(plain.clone()))
        .map_err(|e| format!("failed to extract CEL expressions from status: {e}"))?;
    let mut without = Vec::new();
    leaves(&Value::Object(plain), String::new(), &mut without);
    let literal: Vec<&String> = without.iter().filter(|p| !found.iter().any(|(f, _)| f.to_string() == **p)).collect();
    if !literal.is_empty() {
        let listed: Vec<&str> = literal.iter().map(|p| p.as_str()).collect();
        return Err(format!("status fields without expressions are not supported: [{}]", listed.join(" ")));
    }
    for (path, template) in &found {
        for expression in template.expressions() {
            let names = expr::identifiers(expression)
                .map_err(|e| format!("status field {path:?} expression {expression:?}: {e}"))?;
            if uses_omit(expression) {
                return Err(format!(
                    "status field {:?} expression {expression:?}: {OMIT_ONLY_IN_TEMPLATES}",
                    path.to_string()
                ));
            }
            if !names.iter().any(|n| n == "schema" || ids.contains(n)) {
                return Err(format!("instance status field must refer to a resource or schema: {path}"));
            }
        }
    }
    Ok((found, conditions))
}

fn leaves(value: &Value, path: String, into: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                leaves(field, path, into);
            }
        }
        _ => into.push(path),
    }
}

/// The properties of the instance's status: the RGD's fields typed by `field_type`, with kro's `state`
/// and `conditions`.
fn status_schema(status: &[(Path, Template)], field_type: impl Fn(&Template) -> Value) -> Map<String, Value> {
    let mut status_properties = Map::new();
    for (path, template) in status {
        let fields: Vec<&str> = path
            .0
            .iter()
            .filter_map(|s| match s {
                Step::Field(f) => Some(f.as_str()),
                Step::Index(_) => None,
            })
            .collect();
        let Some((last, parents)) = fields.split_last() else { continue };
        let mut at = &mut status_properties;
        for part in parents {
            let entry = at.entry((*part).to_owned()).or_insert_with(|| json!({"type": "object", "properties": {}}));
            at = entry["properties"].as_object_mut().expect("an object schema");
        }
        at.insert((*last).to_owned(), field_type(template));
    }
    status_properties.entry("state").or_insert_with(|| json!({"type": "string"}));
    status_properties.entry("conditions").or_insert_with(|| {
        json!({"type": "array", "items": {"type": "object", "properties": {
            "type": {"type": "string"},
            "status": {"type": "string"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string"},
            "observedGeneration": {"type": "integer"},
        }}})
    });
    status_properties
}

/// Declares the instance CRD's status fields with the types kro infers for their expressions, given
/// the types of what they read (`check::variables`).
pub fn type_status(graph: &mut Graph, vars: &HashMap<String, Ty>) {
    let properties = status_schema(&graph.status, |template| match template {
        Template::Joined(_) => json!({"type": "string"}),
        Template::Whole(expression) => types::to_schema(&types::infer(expression, vars)),
    });
    graph.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"] =
        Value::Object(properties);
}

/// The instance CRD kro generates: one served version with a status subresource, kro's default printer
/// columns unless the RGD gives its own, `spec` from SimpleSchema, and a `status` with kro's `state` and
/// `conditions` beside the RGD's own fields.
fn crd(api: &InstanceApi, schema: &Value, spec: Value, status: &[(Path, Template)]) -> Value {
    let status_properties = status_schema(status, |template| match template {
        // A field joined from text is a string; until the types of what an expression reads are known
        // (`type_status`), a whole expression keeps whatever it gives.
        Template::Joined(_) => json!({"type": "string"}),
        Template::Whole(_) => json!({"x-kubernetes-preserve-unknown-fields": true}),
    });
    let columns = match schema.get("additionalPrinterColumns").and_then(Value::as_array) {
        Some(columns) if !columns.is_empty() => Value::Array(columns.clone()),
        _ => json!([
            {"name": "State", "description": "The state of a ResourceGraphDefinition instance", "type": "string", "jsonPath": ".status.state"},
            {"name": "Ready", "description": "Whether a ResourceGraphDefinition instance is ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Age", "description": "Age of the resource", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    };
    let mut names = json!({
        "kind": api.kind,
        "listKind": format!("{}List", api.kind),
        "plural": api.plural,
        "singular": api.kind.to_lowercase(),
    });
    for list in ["shortNames", "categories"] {
        if let Some(items) = schema.get(list).and_then(Value::as_array).filter(|l| !l.is_empty()) {
            names[list] = Value::Array(items.clone());
        }
    }
    let mut metadata = json!({ "name": api.crd_name() });
    for field in ["labels", "annotations"] {
        if let Some(map) = schema["metadata"].get(field).and_then(Value::as_object).filter(|m| !m.is_empty()) {
            metadata[field] = Value::Object(map.clone());
        }
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": api.group,
            "names": names,
            "scope": if api.namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": api.version,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": {"type": "object", "properties": status_properties},
                    },
                }},
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
            }],
        },
    })
}

/// `status.resources` of an RGD: each resource that depends on another, with its dependencies.
pub fn resource_dependencies(graph: &Graph) -> Vec<Value> {
    let by_order: BTreeMap<usize, &Node> = graph.nodes.iter().map(|n| (n.index, n)).collect();
    by_order
        .values()
        .filter(|n| !n.dependencies.is_empty())
        .map(|n| json!({"id": n.id, "dependencies": n.dependencies.iter().map(|d| json!({"id": d})).collect::<Vec<_>>()}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rgd(resources: Value) -> Value {
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "schema": {"apiVersion": "v1alpha1", "kind": "WebApp", "spec": {"replicas": "integer | default=1"}},
                "resources": resources,
            }
        })
    }

    fn deployment(id: &str, name: &str) -> Value {
        json!({"id": id, "template": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}}})
    }

    #[test]
    fn the_crd_is_kros() {
        let graph = build(&rgd(json!([deployment("deployment", "${schema.metadata.name}")]))).unwrap();
        assert_eq!(graph.api.crd_name(), "webapps.kro.run");
        assert_eq!(graph.order, ["deployment"]);
        let crd = &graph.crd;
        assert_eq!(
            crd["spec"]["names"],
            json!({"kind": "WebApp", "listKind": "WebAppList", "plural": "webapps", "singular": "webapp"})
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(
            version["additionalPrinterColumns"][1]["jsonPath"],
            ".status.conditions[?(@.type==\"Ready\")].status"
        );
        let schema = &version["schema"]["openAPIV3Schema"];
        assert_eq!(schema["properties"]["spec"]["default"], json!({}));
        assert_eq!(schema["properties"]["status"]["properties"]["state"], json!({"type": "string"}));
        assert_eq!(
            schema["properties"]["status"]["properties"]["conditions"]["items"]["properties"]["observedGeneration"],
            json!({"type": "integer"})
        );
    }

    #[test]
    fn references_make_the_order_and_waves() {
        let graph = build(&rgd(json!([
            deployment("deployment", "${config.metadata.name}-d"),
            {"id": "service", "template": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "${deployment.metadata.name}"}}},
            {"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}"}}},
        ])))
        .unwrap();
        assert_eq!(graph.order, ["config", "deployment", "service"]);
        assert_eq!((graph.waves["config"], graph.waves["deployment"], graph.waves["service"]), (1, 2, 3));
        assert_eq!(
            resource_dependencies(&graph),
            [
                json!({"id": "deployment", "dependencies": [{"id": "config"}]}),
                json!({"id": "service", "dependencies": [{"id": "deployment"}]})
            ]
        );
    }

    #[test]
    fn omit_waits_for_kros_gate_and_stays_in_template_fields() {
        let mut with_omit = deployment("a", "${schema.metadata.name}");
        with_omit["template"]["spec"] = json!({"paused": "${omit()}"});
        let off = build(&rgd(json!([with_omit.clone()]))).unwrap_err();
        assert_eq!(
            off,
            "failed to build dependency graph: failed to extract dependencies: omit() requires the CELOmitFunction \
             feature gate to be enabled"
        );
        let on = Features { omit: true };
        assert!(build_with(&rgd(json!([with_omit.clone()])), on).is_ok());
        let named = deployment("a", "${schema.spec.on ? omit() : 'x'}");
        assert_eq!(
            build_with(&rgd(json!([named])), on).unwrap_err(),
            "resource \"a\": omit() cannot be used at path \"metadata.name\" \u{2014} the field is required and must \
             resolve to a concrete value"
        );
        let mut ready = with_omit.clone();
        ready["readyWhen"] = json!(["${omit() == null}"]);
        assert_eq!(
            build_with(&rgd(json!([ready])), on).unwrap_err(),
            "failed to validate resource \"a\": resource \"a\" readyWhen: omit() can only be used in resource \
             template expressions"
        );
        let mut each = with_omit;
        each["forEach"] = json!([{"x": "${[omit()]}"}]);
        each["template"]["metadata"]["name"] = json!("${schema.metadata.name}-${x}");
        assert!(
            build_with(&rgd(json!([each])), on)
                .unwrap_err()
                .ends_with("forEach iterator \"x\": omit() can only be used in resource template expressions")
        );
    }

    #[test]
    fn what_kro_refuses_is_refused_with_its_words() {
        let refused = |resources: Value| build(&rgd(resources)).unwrap_err();
        assert_eq!(
            refused(json!([deployment("a", "${b.metadata.name}"), deployment("b", "${a.metadata.name}")])),
            "failed to build dependency graph: graph contains a cycle: a -> b -> a"
        );
        assert_eq!(
            refused(json!([deployment("a", "${nope.metadata.name}")])),
            "failed to build dependency graph: failed to extract dependencies: references unknown identifiers: [nope]"
        );
        assert_eq!(
            refused(json!([deployment("a", "${a.metadata.name}")])),
            "failed to build dependency graph: self references are not allowed"
        );
        assert_eq!(
            refused(json!([deployment("my-app", "x")])),
            "failed to validate resourcegraphdefinition: naming convention violation: id my-app is not a valid KRO resource id: must be lower camelCase"
        );
        assert!(refused(json!([deployment("spec", "x")])).ends_with("id spec is a reserved keyword in KRO"));
        assert!(
            refused(json!([deployment("a", "x"), deployment("a", "y")])).ends_with("found duplicate resource IDs a")
        );
        assert_eq!(
            refused(json!([{"id": "a"}])),
            "failed to build resource \"a\": invalid combination of resource fields: resource \"a\": exactly one of template or externalRef must be provided"
        );
        assert!(
            refused(json!([{"id": "a", "template": {"apiVersion": "v1", "metadata": {}}}]))
                .ends_with("is not a valid Kubernetes object: kind field not found")
        );
        let mut bad_kind = rgd(json!([]));
        bad_kind["spec"]["schema"]["kind"] = json!("webApp");
        assert!(build(&bad_kind).unwrap_err().contains("kind 'webApp' is not a valid KRO kind name"));
    }

    #[test]
    fn status_fields_need_expressions_that_read_something() {
        let mut with_status = rgd(json!([deployment("deployment", "x")]));
        with_status["spec"]["schema"]["status"] =
            json!({"replicas": "${deployment.status.replicas}", "url": "http://${deployment.metadata.name}"});
        let graph = build(&with_status).unwrap();
        let status =
            &graph.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert_eq!(status["url"], json!({"type": "string"}));
        with_status["spec"]["schema"]["status"] = json!({"fixed": "hello"});
        assert_eq!(
            build(&with_status).unwrap_err(),
            "failed to build instance status schema: status fields without expressions are not supported: [fixed]"
        );
        with_status["spec"]["schema"]["status"] = json!({"conditions": "${deployment.status.conditions}"});
        assert_eq!(
            build(&with_status).unwrap_err(),
            "failed to build instance status schema: failed to extract conditions block: status.conditions must be \
             a list, got string"
        );
        with_status["spec"]["schema"]["status"] = json!({"conditions": ["${x}", 3]});
        assert!(
            build(&with_status)
                .unwrap_err()
                .ends_with("status.conditions[1] must be a CEL expression string, got float64")
        );
    }
}
