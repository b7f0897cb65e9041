//! One instance of a ResourceGraphDefinition, decided without a cluster: given the instance and the
//! objects observed (its children, the external objects it refers to), which children it should have
//! now, with kro's labels, and the status kro would write (its conditions, `state`, and the RGD's status
//! fields). Resources are walked in topological order: one is rendered only once every resource it reads
//! exists and is ready; `includeWhen` false skips it and everything that reads it; an expression whose
//! data is not there yet leaves the resource waiting, and a child that exists stays as it is meanwhile.
//! While the instance is deleted, its children go in waves, the last applied first.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use super::applyset::{self, Inventory};
use super::cel::{CONDITION_KEYS, Scope, Unresolved};
use super::conditions::Conditions;
use super::expr::Path;
use super::rgd::{Graph, Node, Source};

pub const FINALIZER: &str = "kro.run/finalizer";
pub const NODE_ID_LABEL: &str = "kro.run/node-id";
pub const APPLY_ORDER_ANNOTATION: &str = "internal.kro.run/apply-order";
/// The annotation that suspends an instance (`suspended`, or the older `disabled`).
pub const RECONCILE_ANNOTATION: &str = "kro.run/reconcile";
const DEPENDENTS: &[&str] = &["InstanceManaged", "GraphResolved", "ResourcesReady"];

/// The RGD an instance belongs to, the version samplectl writes in kro's version label, and which of
/// its resources' kinds (apiVersion, kind) are cluster-scoped, as discovery says.
#[derive(Debug, Clone)]
pub struct Origin {
    pub rgd_name: String,
    pub rgd_uid: String,
    pub version: String,
    pub cluster_scoped: BTreeSet<(String, String)>,
    /// The resource (plural) serving each kind (apiVersion, kind), as discovery says: kro names a
    /// resource waiting for data by it.
    pub plurals: BTreeMap<(String, String), String>,
}

impl Origin {
    /// The ApplySet tooling annotation: kro refuses a parent whose tooling is not `kro/...`, so the
    /// graph's instances stay kro's to take back.
    fn tooling(&self) -> String {
        format!("kro/{}", self.version)
    }

    /// How Go prints the resource serving `node`'s kind (`GroupVersionResource.String()`), as kro's
    /// words for a resource waiting for data begin.
    fn gvr(&self, node: &Node) -> String {
        let key = (node.api_version.clone(), node.kind.clone());
        let plural = self.plurals.get(&key).cloned().unwrap_or_default();
        match node.api_version.split_once('/') {
            Some((group, version)) => format!("gvr \"{group}/{version}, Resource={plural}\""),
            None => format!("gvr \"/{}, Resource={plural}\"", node.api_version),
        }
    }

    fn namespaced(&self, object: &Value) -> bool {
        let key = (
            object["apiVersion"].as_str().unwrap_or_default().to_owned(),
            object["kind"].as_str().unwrap_or_default().to_owned(),
        );
        !self.cluster_scoped.contains(&key)
    }
}

/// What an instance should be given what was observed.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Every child it should have: rendered, or as observed while its resource waits.
    pub children: Vec<Value>,
    /// The whole status to write.
    pub status: Value,
    /// Labels for the instance itself.
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations for the instance itself: its ApplySet inventory.
    pub annotations: BTreeMap<String, Option<String>>,
    /// While deleting: every child is gone.
    pub finalized: bool,
}

/// Where one resource of the graph stands, as kro's node states have it; the texts are the errors kro
/// records, which its conditions quote.
#[derive(Debug, Clone, PartialEq)]
enum NodeState {
    /// Exists and is ready.
    Synced,
    /// Left out by includeWhen (or because a resource it reads is).
    Skipped,
    /// Waiting for data (kro's "data pending"): a resource it reads not ready, a field not there yet.
    Pending(String),
    /// Rendered, to be written now: kro says the cluster mutated, and looks again.
    Created,
    /// Waiting, with what kro records on the node: a readyWhen false, an external reference not found.
    Waiting(String),
    /// Failed, with what kro records on the node: a readyWhen that cannot be evaluated.
    Error(String),
    /// Failed before anything is written (an expression that cannot be evaluated): kro stops its walk
    /// at this resource and writes no child.
    Abort(String),
    /// Its child is being deleted: kro stops its walk at this resource and writes no child.
    Deleting(String),
}

fn is_suspended(instance: &Value) -> bool {
    instance["metadata"]["annotations"][RECONCILE_ANNOTATION]
        .as_str()
        .is_some_and(|v| v.eq_ignore_ascii_case("suspended") || v.eq_ignore_ascii_case("disabled"))
}

/// The instance as `schema` reads it: everything but its status.
fn schema_of(instance: &Value) -> Value {
    let mut schema = instance.clone();
    if let Some(fields) = schema.as_object_mut() {
        fields.remove("status");
    }
    schema
}

/// The instance's ApplySet id.
fn applyset_id(graph: &Graph, instance: &Value) -> String {
    let meta = &instance["metadata"];
    let (name, namespace) = (meta["name"].as_str().unwrap_or_default(), meta["namespace"].as_str().unwrap_or_default());
    applyset::id(name, namespace, &graph.api.kind, &graph.api.group)
}

/// kro's labels on the instance itself.
fn instance_labels(graph: &Graph, instance: &Value, origin: &Origin) -> BTreeMap<String, Option<String>> {
    BTreeMap::from([
        ("kro.run/owned".to_owned(), Some("true".to_owned())),
        ("kro.run/kro-version".to_owned(), Some(origin.version.clone())),
        ("kro.run/resource-graph-definition-id".to_owned(), Some(origin.rgd_uid.clone())),
        ("kro.run/resource-graph-definition-name".to_owned(), Some(origin.rgd_name.clone())),
        (applyset::ID_LABEL.to_owned(), Some(applyset_id(graph, instance))),
    ])
}

/// The instance's ApplySet inventory: what its children span, those it should have and those it
/// still has (kro keeps the kinds of children not yet pruned too).
fn inventory(
    graph: &Graph,
    instance: &Value,
    origin: &Origin,
    desired: &[Value],
    children: &[Value],
) -> BTreeMap<String, Option<String>> {
    let parent_namespace = instance["metadata"]["namespace"].as_str().unwrap_or_default();
    let mut inventory = Inventory::default();
    for child in desired.iter().chain(children) {
        inventory.add_object(child, origin.namespaced(child), parent_namespace);
    }
    let id = applyset_id(graph, instance);
    inventory.annotations(&id, &origin.tooling()).into_iter().map(|(k, v)| (k.to_owned(), Some(v))).collect()
}

/// kro's labels on a child of `node`.
fn child_labels(graph: &Graph, instance: &Value, node: &Node, origin: &Origin) -> Map<String, Value> {
    let meta = &instance["metadata"];
    let mut labels = Map::new();
    labels.insert("kro.run/owned".into(), json!("true"));
    labels.insert("kro.run/kro-version".into(), json!(origin.version));
    labels.insert("kro.run/instance-id".into(), meta["uid"].clone());
    labels.insert("kro.run/instance-name".into(), meta["name"].clone());
    labels.insert("kro.run/instance-group".into(), json!(graph.api.group));
    labels.insert("kro.run/instance-version".into(), json!(graph.api.version));
    labels.insert("kro.run/instance-kind".into(), json!(graph.api.kind));
    if graph.api.namespaced {
        labels.insert("kro.run/instance-namespace".into(), meta["namespace"].clone());
    }
    labels.insert(NODE_ID_LABEL.into(), json!(node.id));
    labels.insert(applyset::PART_OF_LABEL.into(), json!(applyset_id(graph, instance)));
    labels
}

/// The observed children of `node`: those carrying its node-id label.
fn observed_of<'a>(children: &'a [Value], node: &Node) -> Vec<&'a Value> {
    children.iter().filter(|c| c["metadata"]["labels"][NODE_ID_LABEL].as_str() == Some(node.id.as_str())).collect()
}

/// A child as it should be kept while its resource waits: as observed, without its status (the engine
/// drops the other fields only the server sets).
fn kept(observed: &Value) -> Value {
    let mut body = observed.clone();
    if let Some(fields) = body.as_object_mut() {
        fields.remove("status");
    }
    body
}

/// Decides what `instance` should be. `children` are the objects it controls, `external` the objects
/// each external reference names (by resource id: one or, for a selector, several; absent when none),
/// and `created`/`now` RFC 3339 times for the conditions.
pub fn decide(
    graph: &Graph,
    origin: &Origin,
    instance: &Value,
    children: &[Value],
    external: &HashMap<String, Vec<Value>>,
    deleting: bool,
    now: &str,
) -> Decision {
    let meta = &instance["metadata"];
    let generation = meta["generation"].as_i64().unwrap_or_default();
    let created = meta["creationTimestamp"].as_str().unwrap_or(now);
    let current = instance["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let current = current.into_iter().filter_map(|c| serde_json::from_value(c).ok()).collect();
    let mut conditions = Conditions::read(current, DEPENDENTS, &[], (generation, deleting), created, now);
    let labels = instance_labels(graph, instance, origin);
    // While deleting, kro sets only ResourcesReady; the others stay as they were, in their places.
    if deleting {
        return delete_in_waves(graph, children, conditions);
    }
    conditions.set_true("InstanceManaged", "Managed", "instance is properly managed with finalizers and labels");
    conditions.set_true("GraphResolved", "Resolved", "runtime graph created and all resources resolved");
    if is_suspended(instance) {
        conditions.set_false(
            "ResourcesReady",
            "ReconciliationSuspended",
            &format!("reconciliation suspended via {RECONCILE_ANNOTATION} annotation"),
        );
        let kept_children: Vec<Value> = children.iter().map(kept).collect();
        // kro walks no resource, and a state computed over none is ACTIVE: what kro writes.
        let status = status(conditions, "ACTIVE", Map::new());
        let annotations = inventory(graph, instance, origin, &kept_children, children);
        return Decision { children: kept_children, status, labels, annotations, finalized: false };
    }

    let schema = schema_of(instance);
    let mut values: HashMap<String, Value> = HashMap::new();
    let mut states: BTreeMap<String, NodeState> = BTreeMap::new();
    let mut desired = Vec::new();
    let mut walked = Vec::new();
    let mut stopped = None;
    for id in &graph.order {
        let node = graph.node(id).expect("the order names the graph's nodes");
        let (state, value) =
            walk_node(graph, origin, instance, &schema, node, children, external, &states, &values, &mut desired);
        if let Some(value) = value {
            values.insert(id.clone(), value);
        }
        walked.push(id.clone());
        if let NodeState::Abort(_) | NodeState::Deleting(_) = state {
            stopped = Some(state.clone());
            states.insert(id.clone(), state);
            break;
        }
        states.insert(id.clone(), state);
    }
    if stopped.is_some() {
        // As kro: nothing is written when its walk stops, and nothing pruned.
        desired = children.iter().map(kept).collect();
    }
    let ordered: Vec<&NodeState> = walked.iter().filter_map(|id| states.get(id)).collect();
    let state = if ordered.iter().any(|s| matches!(s, NodeState::Error(_) | NodeState::Abort(_))) {
        "ERROR"
    } else if ordered.iter().all(|s| matches!(s, NodeState::Synced | NodeState::Skipped)) {
        "ACTIVE"
    } else {
        "IN_PROGRESS"
    };
    // kro's message, by what stopped or held up its reconcile first: the walk stopped; errors recorded on
    // resources (joined); data pending; children written; else all ready.
    let recorded: Vec<&str> = ordered
        .iter()
        .filter_map(|s| match s {
            NodeState::Waiting(e) | NodeState::Error(e) => Some(e.as_str()),
            _ => None,
        })
        .collect();
    let pending = ordered.iter().find_map(|s| match s {
        NodeState::Pending(e) => Some(e.as_str()),
        _ => None,
    });
    let failed = |why: &str| format!("resource reconciliation failed: {why}");
    match (&stopped, recorded.is_empty(), pending) {
        (Some(NodeState::Deleting(why)), ..) => conditions.set_false("ResourcesReady", "ResourceDeleting", why),
        (Some(NodeState::Abort(why)), ..) => conditions.set_false("ResourcesReady", "NotReady", &failed(why)),
        (_, false, _) => {
            let why = format!("apply results contain errors: {}", recorded.join("\n"));
            conditions.set_false("ResourcesReady", "NotReady", &failed(&why))
        }
        (_, true, Some(why)) => {
            let why = format!("waiting for unresolved resource: {why}");
            conditions.set_false("ResourcesReady", "NotReady", &failed(&why))
        }
        _ if ordered.iter().any(|s| matches!(s, NodeState::Created)) => {
            conditions.set_false("ResourcesReady", "NotReady", &failed("cluster mutated"))
        }
        _ => conditions.set_true("ResourcesReady", "AllResourcesReady", "all resources are created and ready"),
    };

    // The RGD's own status fields, from the instance and what was observed; one whose data is not
    // there yet is left out.
    let mut variables: Vec<(&str, &Value)> = vec![("schema", &schema)];
    variables.extend(values.iter().map(|(k, v)| (k.as_str(), v)));
    let scope = Scope::new(variables);
    let mut fields = Value::Object(Map::new());
    for (path, template) in &graph.status {
        if let Ok(value) = scope.render(template) {
            let mut at = &mut fields;
            for step in &path.0 {
                if let super::expr::Step::Field(key) = step {
                    if !at.get(key.as_str()).is_some_and(Value::is_object) {
                        at[key.as_str()] = json!({});
                    }
                    at = &mut at[key.as_str()];
                }
            }
            *at = value;
        }
    }
    let fields = match fields {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let status = match graph.conditions.is_empty() {
        true => status(conditions, state, fields),
        false => {
            let builtin = serde_json::to_value(conditions.list()).unwrap_or_default();
            let (authored, failed) = authored(graph, instance, &values, builtin, (generation, now));
            let mut status = status(conditions, if failed { "ERROR" } else { state }, fields);
            status["conditions"] = Value::Array(authored);
            status
        }
    };
    let annotations = inventory(graph, instance, origin, &desired, children);
    Decision { children: desired, status, labels, annotations, finalized: false }
}

/// The author's conditions (`status.conditions` of the RGD), which own the instance's conditions when
/// given: each expression's condition (or list of them), with `lastTransitionTime` kept while its
/// status stays and `observedGeneration`. `runtime.condition(schema, t)` reads kro's built-in ones
/// (`builtin`). An expression waiting for data is left out for now, one that fails or a type given
/// twice makes the instance ERROR (the second), and either way the conditions written before for
/// types not given now stay. Also returns whether one failed.
fn authored(
    graph: &Graph,
    instance: &Value,
    values: &HashMap<String, Value>,
    builtin: Value,
    (generation, now): (i64, &str),
) -> (Vec<Value>, bool) {
    let mut schema = schema_of(instance);
    schema["status"] = json!({"conditions": builtin});
    // kro's macro reads the map's bare keys as names; here each key is a variable holding its own name.
    let keys: Vec<Value> = CONDITION_KEYS.iter().map(|k| json!(k)).collect();
    let mut variables: Vec<(&str, &Value)> = vec![("schema", &schema)];
    variables.extend(values.iter().map(|(k, v)| (k.as_str(), v)));
    variables.extend(CONDITION_KEYS.iter().copied().zip(keys.iter()));
    let scope = Scope::new(variables);
    let previous: Vec<Value> = instance["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let (mut given, mut complete, mut failed) = (Vec::<Value>::new(), true, false);
    for (expression, reads) in &graph.conditions {
        // One that reads a resource not observed yet waits for it.
        if reads.iter().any(|id| !values.contains_key(id)) {
            complete = false;
            continue;
        }
        let produced = match scope.evaluate(expression) {
            Ok(Value::Array(items)) => items,
            Ok(one) => vec![one],
            Err(Unresolved::Pending(_)) => {
                complete = false;
                continue;
            }
            Err(Unresolved::Failed(_)) => {
                (complete, failed) = (false, true);
                continue;
            }
        };
        for condition in produced {
            let Some(kind) = condition["type"].as_str().filter(|_| condition.get("status").is_some()) else {
                (complete, failed) = (false, true);
                continue;
            };
            if given.iter().any(|c| c["type"] == kind) {
                failed = true;
                continue;
            }
            let before = previous.iter().find(|c| c["type"] == kind);
            let since = match before {
                Some(b) if b["status"] == condition["status"] => b["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            let mut written = json!({
                "type": kind,
                "status": condition["status"],
                "lastTransitionTime": since,
                "observedGeneration": generation,
            });
            // As kro writes them: an empty reason or message is left out.
            for key in ["reason", "message"] {
                if condition[key].as_str().is_some_and(|v| !v.is_empty()) {
                    written[key] = condition[key].clone();
                }
            }
            given.push(written);
        }
    }
    if !complete {
        // kro's own conditions are never kept on a wire the author owns.
        let kept: Vec<Value> = previous
            .into_iter()
            .filter(|c| !given.iter().any(|g| g["type"] == c["type"]))
            .filter(|c| !DEPENDENTS.iter().any(|d| c["type"] == *d))
            .collect();
        given.extend(kept);
    }
    (given, failed)
}

#[allow(clippy::too_many_arguments)]
fn walk_node(
    graph: &Graph,
    origin: &Origin,
    instance: &Value,
    schema: &Value,
    node: &Node,
    children: &[Value],
    external: &HashMap<String, Vec<Value>>,
    states: &BTreeMap<String, NodeState>,
    values: &HashMap<String, Value>,
    desired: &mut Vec<Value>,
) -> (NodeState, Option<Value>) {
    let observed = observed_of(children, node);
    let keep_observed = |desired: &mut Vec<Value>| desired.extend(observed.iter().map(|o| kept(o)));
    // A resource that reads one skipped is skipped; one that reads a resource not ready waits.
    for dependency in &node.dependencies {
        match states.get(dependency) {
            Some(NodeState::Skipped) => return (NodeState::Skipped, None),
            Some(NodeState::Synced) => {}
            _ => {
                keep_observed(desired);
                let readiness = match states.get(dependency) {
                    Some(NodeState::Waiting(why)) => {
                        why.strip_prefix(&format!("waiting for node {dependency:?}: ")).unwrap_or(why).to_owned()
                    }
                    _ => format!("node {dependency:?}: no observed state: waiting for readiness"),
                };
                let why = format!(
                    "{}: node {:?}: dependent node {dependency:?} not ready: {readiness} (data pending)",
                    origin.gvr(node),
                    node.id
                );
                return (NodeState::Pending(why), None);
            }
        }
    }
    let mut variables: Vec<(&str, &Value)> = vec![("schema", schema)];
    variables.extend(values.iter().map(|(k, v)| (k.as_str(), v)));
    let scope = Scope::new(variables);
    for condition in &node.include_when {
        match scope.evaluate(condition) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => return (NodeState::Skipped, None),
            Ok(_) => {
                let why = format!("includeWhen {condition:?}: expression {condition:?} did not return bool");
                return (NodeState::Abort(why), None);
            }
            Err(Unresolved::Pending(why)) => {
                keep_observed(desired);
                let why = format!("{}: includeWhen {condition:?}: {why} (data pending)", origin.gvr(node));
                return (NodeState::Pending(why), None);
            }
            Err(Unresolved::Failed(why)) => {
                return (NodeState::Abort(format!("includeWhen {condition:?}: {why}")), None);
            }
        }
    }
    match &node.source {
        Source::External { selector, .. } => {
            let found = external.get(&node.id).cloned().unwrap_or_default();
            let value = match selector {
                Some(_) => Value::Array(found),
                None => match found.into_iter().next() {
                    Some(object) => object,
                    None => {
                        let why = format!("waiting for external reference {:?}: not found", node.id);
                        return (NodeState::Waiting(why), None);
                    }
                },
            };
            (ready(&node.id, node, &value), Some(value))
        }
        Source::Template(template) => {
            if !node.for_each.is_empty() {
                return collection(graph, origin, instance, node, template, &scope, &observed, desired);
            }
            let mut body = template.clone();
            let mut omitted = Vec::new();
            for (path, expression) in &node.templates {
                match scope.render_field(expression) {
                    Ok(Some(value)) => path.set(&mut body, value),
                    Ok(None) => omitted.push(path),
                    Err(unresolved) => {
                        keep_observed(desired);
                        return (unrendered(origin, node, &scope, expression, unresolved), None);
                    }
                }
            }
            Path::remove_all(omitted, &mut body);
            mark(&mut body, graph, instance, node, origin, None);
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            match observed.iter().find(|o| o["metadata"]["name"].as_str() == Some(name.as_str())) {
                Some(object) if !object["metadata"]["deletionTimestamp"].is_null() => {
                    let meta = &object["metadata"];
                    let place = match meta["namespace"].as_str().filter(|n| !n.is_empty()) {
                        Some(namespace) => format!("{namespace}/{name}"),
                        None => name.clone(),
                    };
                    let why = format!(
                        "resource {place:?} for node {:?} is currently being deleted; waiting for deletion to complete \
                         before continuing reconciliation",
                        node.id
                    );
                    (NodeState::Deleting(why), None)
                }
                Some(object) => {
                    desired.push(body);
                    (ready(&node.id, node, object), Some((*object).clone()))
                }
                None => {
                    desired.push(body);
                    (NodeState::Created, None)
                }
            }
        }
    }
}

/// kro's labels and apply-order annotation on a rendered child (and its place in a collection).
fn mark(body: &mut Value, graph: &Graph, instance: &Value, node: &Node, origin: &Origin, item: Option<(usize, usize)>) {
    let mut labels = child_labels(graph, instance, node, origin);
    if let Some((index, size)) = item {
        labels.insert("kro.run/collection-index".into(), json!(index.to_string()));
        labels.insert("kro.run/collection-size".into(), json!(size.to_string()));
    }
    let meta = &mut body["metadata"];
    for (key, value) in labels {
        meta["labels"][key] = value;
    }
    let wave = graph.waves.get(&node.id).copied().unwrap_or(1);
    meta["annotations"][APPLY_ORDER_ANNOTATION] = json!(wave.to_string());
}

/// Whether an observed resource passes its readyWhen (each one with the resource bound to its id), in
/// kro's words when not.
fn ready(id: &str, node: &Node, value: &Value) -> NodeState {
    let scope = Scope::new(vec![(id, value)]);
    let name = &node.id;
    for condition in &node.ready_when {
        let cannot =
            |why: &str| format!("node {name:?}: failed to evaluate readyWhen expression: {condition:?} ({why})");
        match scope.evaluate(condition) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => {
                let why = format!("readyWhen condition evaluated to false: {condition:?} (waiting for readiness)");
                return NodeState::Waiting(format!("waiting for node {name:?}: {why}"));
            }
            Ok(_) => return NodeState::Error(cannot(&format!("expression {condition:?} did not return bool"))),
            Err(Unresolved::Pending(_)) => {
                return NodeState::Waiting(format!("waiting for node {name:?}: {}", cannot("waiting for readiness")));
            }
            Err(Unresolved::Failed(why)) => return NodeState::Error(cannot(&why)),
        }
    }
    NodeState::Synced
}

/// A template field that could not be rendered, in kro's words: waiting for data, or failed (which
/// stops kro's walk).
fn unrendered(
    origin: &Origin,
    node: &Node,
    scope: &Scope,
    template: &super::expr::Template,
    unresolved: Unresolved,
) -> NodeState {
    let failing = failing_expression(scope, template);
    match unresolved {
        Unresolved::Pending(why) => NodeState::Pending(format!(
            "{}: node {:?}: failed to evaluate expression: eval {failing:?}: {why} (data pending)",
            origin.gvr(node),
            node.id
        )),
        Unresolved::Failed(why) => NodeState::Abort(format!("node {:?}: eval {failing:?}: {why}", node.id)),
    }
}

/// The expression of a template that fails, as kro names it (without `${}`).
fn failing_expression(scope: &Scope, template: &super::expr::Template) -> String {
    match template {
        super::expr::Template::Whole(expression) => expression.clone(),
        super::expr::Template::Joined(pieces) => pieces
            .iter()
            .find_map(|piece| match piece {
                super::expr::Piece::Expression(e) if scope.evaluate(e).is_err() => Some(e.clone()),
                _ => None,
            })
            .unwrap_or_default(),
    }
}

/// A forEach resource: one child per combination of its dimensions' items.
#[allow(clippy::too_many_arguments)]
fn collection(
    graph: &Graph,
    origin: &Origin,
    instance: &Value,
    node: &Node,
    template: &Value,
    scope: &Scope,
    observed: &[&Value],
    desired: &mut Vec<Value>,
) -> (NodeState, Option<Value>) {
    let mut dimensions: Vec<(&str, Vec<Value>)> = Vec::new();
    for (iterator, expression) in &node.for_each {
        match scope.evaluate(expression) {
            Ok(Value::Array(items)) => dimensions.push((iterator, items)),
            Ok(_) => {
                let why = format!("forEach {iterator:?}: expression {expression:?} did not return a list");
                return (NodeState::Abort(why), None);
            }
            Err(Unresolved::Pending(why)) => {
                desired.extend(observed.iter().map(|o| kept(o)));
                let why = format!("{}: forEach {iterator:?}: {why} (data pending)", origin.gvr(node));
                return (NodeState::Pending(why), None);
            }
            Err(Unresolved::Failed(why)) => return (NodeState::Abort(format!("forEach {iterator:?}: {why}")), None),
        }
    }
    let mut combinations: Vec<Vec<&Value>> = vec![Vec::new()];
    for (_, items) in &dimensions {
        combinations = combinations
            .into_iter()
            .flat_map(|prefix| items.iter().map(move |item| [prefix.clone(), vec![item]].concat()))
            .collect();
    }
    if combinations.len() > super::rgd::MAX_COLLECTION {
        let why = format!(
            "collection size of {} is over the maximum collection size of {}",
            combinations.len(),
            super::rgd::MAX_COLLECTION
        );
        return (NodeState::Abort(why), None);
    }
    let size = combinations.len();
    let mut names = Vec::with_capacity(size);
    for (index, combination) in combinations.iter().enumerate() {
        let mut variables = scope.variables.clone();
        variables.extend(dimensions.iter().zip(combination).map(|((name, _), item)| (*name, *item)));
        let item_scope = Scope::new(variables);
        let mut body = template.clone();
        let mut omitted = Vec::new();
        for (path, expression) in &node.templates {
            match item_scope.render_field(expression) {
                Ok(Some(value)) => path.set(&mut body, value),
                Ok(None) => omitted.push(path),
                Err(unresolved) => {
                    desired.extend(observed.iter().map(|o| kept(o)));
                    return (unrendered(origin, node, &item_scope, expression, unresolved), None);
                }
            }
        }
        Path::remove_all(omitted, &mut body);
        mark(&mut body, graph, instance, node, origin, Some((index, size)));
        names.push(body["metadata"]["name"].as_str().unwrap_or_default().to_owned());
        desired.push(body);
    }
    let items: Vec<Value> = names
        .iter()
        .filter_map(|n| observed.iter().find(|o| o["metadata"]["name"].as_str() == Some(n.as_str())))
        .map(|o| (*o).clone())
        .collect();
    if items.len() != size {
        return (NodeState::Created, Some(Value::Array(items)));
    }
    for item in &items {
        match ready("each", node, item) {
            NodeState::Synced => {}
            not_ready => return (not_ready, Some(Value::Array(items))),
        }
    }
    (NodeState::Synced, Some(Value::Array(items)))
}

/// While the instance is deleted: every child but those of the highest wave still present, so that
/// the engine deletes that wave; finalized once none is left.
fn delete_in_waves(graph: &Graph, children: &[Value], mut conditions: Conditions<'_>) -> Decision {
    let wave_of = |child: &Value| -> usize {
        child["metadata"]["annotations"][APPLY_ORDER_ANNOTATION]
            .as_str()
            .and_then(|w| w.parse().ok())
            .or_else(|| child["metadata"]["labels"][NODE_ID_LABEL].as_str().and_then(|id| graph.waves.get(id).copied()))
            .unwrap_or(0)
    };
    let highest = children.iter().map(wave_of).max();
    let remaining: Vec<Value> = match highest {
        Some(top) => children.iter().filter(|c| wave_of(c) != top).map(kept).collect(),
        None => Vec::new(),
    };
    conditions.set_unknown("ResourcesReady", "UnderDeletion", "deleting resources");
    let status = status(conditions, "DELETING", Map::new());
    // While deleting, the instance's labels and inventory are left as they are.
    let (labels, annotations) = (BTreeMap::new(), BTreeMap::new());
    Decision { children: remaining, status, labels, annotations, finalized: children.is_empty() }
}

/// The status a graph decided, once writing one of its children failed: kro's, whatever the error (a
/// 422 as much as a timeout; kro does not tell them apart): `ERROR`, and `ResourcesReady` False with
/// reason `NotReady` and kro's words, `resource reconciliation failed: apply results contain errors:
/// <error>`, which `Ready` copies. Where the RGD's author's conditions own the list, only the state.
pub fn apply_failed(status: Value, error: &str, (generation, created): (i64, &str), now: &str) -> Value {
    let mut status = match status {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let listed: Vec<super::conditions::Condition> = status
        .get("conditions")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(|c| serde_json::from_value(c.clone()).ok()).collect())
        .unwrap_or_default();
    if listed.iter().any(|c| c.kind == "ResourcesReady") {
        let mut conditions = Conditions::read(listed, DEPENDENTS, &[], (generation, false), created, now);
        let message = format!("resource reconciliation failed: apply results contain errors: {error}");
        conditions.set_false("ResourcesReady", "NotReady", &message);
        status.insert("conditions".into(), serde_json::to_value(conditions.into_list()).unwrap_or_default());
    }
    status.insert("state".into(), json!("ERROR"));
    Value::Object(status)
}

fn status(conditions: Conditions<'_>, state: &str, fields: Map<String, Value>) -> Value {
    let mut status = fields;
    status.insert("conditions".into(), serde_json::to_value(conditions.into_list()).unwrap_or_default());
    status.insert("state".into(), json!(state));
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::super::rgd::build;
    use super::*;

    const NOW: &str = "2026-01-01T00:00:10Z";

    fn origin() -> Origin {
        Origin {
            rgd_name: "web".into(),
            rgd_uid: "rgd-uid".into(),
            version: "samplectl-test".into(),
            cluster_scoped: BTreeSet::new(),
            plurals: BTreeMap::new(),
        }
    }

    fn graph() -> Graph {
        build(&json!({
            "metadata": {"name": "web"},
            "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "WebApp", "spec": {"replicas": "integer | default=1"},
                                "status": {"available": "${deployment.status.availableReplicas}"}},
                     "resources": [
                        {"id": "deployment", "readyWhen": ["${deployment.status.availableReplicas == deployment.spec.replicas}"],
                         "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"name": "${schema.metadata.name}"},
                                      "spec": {"replicas": "${schema.spec.replicas}"}}},
                        {"id": "service", "template": {"apiVersion": "v1", "kind": "Service",
                                      "metadata": {"name": "${deployment.metadata.name}-svc"}}},
                     ]}
        }))
        .unwrap()
    }

    fn instance() -> Value {
        json!({"apiVersion": "kro.run/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "demo", "namespace": "ns", "uid": "i-uid", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"replicas": 2}})
    }

    fn kinds(decision: &Decision) -> Vec<(String, String)> {
        decision
            .children
            .iter()
            .map(|c| (c["kind"].as_str().unwrap().to_owned(), c["metadata"]["name"].as_str().unwrap().to_owned()))
            .collect()
    }

    fn resources_ready(decision: &Decision) -> (String, String) {
        let list = decision.status["conditions"].as_array().unwrap();
        let c = list.iter().find(|c| c["type"] == "ResourcesReady").unwrap();
        (c["reason"].as_str().unwrap().to_owned(), c["message"].as_str().unwrap().to_owned())
    }

    fn deployment(available: i64, deleting: bool) -> Value {
        let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "demo", "namespace": "ns", "labels": {NODE_ID_LABEL: "deployment"}},
            "spec": {"replicas": 2}, "status": {"availableReplicas": available}});
        if deleting {
            object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:05Z");
        }
        object
    }

    #[test]
    fn a_readiness_not_met_is_recorded_on_its_resource_in_kros_words() {
        let decision = decide(&graph(), &origin(), &instance(), &[deployment(1, false)], &HashMap::new(), false, NOW);
        assert_eq!(decision.status["state"], "IN_PROGRESS");
        let (reason, message) = resources_ready(&decision);
        assert_eq!(reason, "NotReady");
        assert_eq!(
            message,
            "resource reconciliation failed: apply results contain errors: waiting for node \"deployment\": readyWhen \
             condition evaluated to false: \"deployment.status.availableReplicas == deployment.spec.replicas\" \
             (waiting for readiness)"
        );
    }

    #[test]
    fn a_child_being_deleted_stops_the_walk_and_nothing_is_written() {
        let children = [deployment(2, true)];
        let decision = decide(&graph(), &origin(), &instance(), &children, &HashMap::new(), false, NOW);
        assert_eq!(decision.status["state"], "IN_PROGRESS");
        let (reason, message) = resources_ready(&decision);
        assert_eq!(reason, "ResourceDeleting");
        assert!(message.starts_with("resource \"ns/demo\" for node \"deployment\" is currently being deleted"));
        // Kept as observed (without its status), and the service that reads it not rendered.
        assert_eq!(kinds(&decision), [("Deployment".into(), "demo".into())]);
        assert!(decision.children[0].get("status").is_none());
    }

    #[test]
    fn an_expression_that_fails_makes_the_instance_error_and_writes_nothing() {
        let divided = build(&json!({
            "metadata": {"name": "web"},
            "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "WebApp", "spec": {"replicas": "integer | default=1"}},
                     "resources": [
                        {"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"name": "${schema.metadata.name}"},
                                      "spec": {"replicas": "${10 / schema.spec.replicas}"}}},
                     ]}
        }))
        .unwrap();
        let mut zero = instance();
        zero["spec"]["replicas"] = json!(0);
        let children = [deployment(2, false)];
        let decision = decide(&divided, &origin(), &zero, &children, &HashMap::new(), false, NOW);
        assert_eq!(decision.status["state"], "ERROR");
        let (_, message) = resources_ready(&decision);
        assert_eq!(
            message,
            "resource reconciliation failed: node \"deployment\": eval \"10 / schema.spec.replicas\": division by zero"
        );
        assert_eq!(decision.children.len(), 1);
        assert_eq!(decision.children[0]["spec"]["replicas"], 2, "the child is left as it is");
    }

    #[test]
    fn a_suspended_instance_is_active_as_kro_writes_it() {
        let mut suspended = instance();
        suspended["metadata"]["annotations"] = json!({RECONCILE_ANNOTATION: "suspended"});
        let decision = decide(&graph(), &origin(), &suspended, &[], &HashMap::new(), false, NOW);
        assert_eq!(decision.status["state"], "ACTIVE");
        assert_eq!(resources_ready(&decision).0, "ReconciliationSuspended");
    }

    #[test]
    fn the_first_resource_is_rendered_and_the_next_waits_for_it() {
        let decision = decide(&graph(), &origin(), &instance(), &[], &HashMap::new(), false, NOW);
        assert_eq!(kinds(&decision), [("Deployment".into(), "demo".into())]);
        let deployment = &decision.children[0];
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert_eq!(deployment["metadata"]["labels"]["kro.run/node-id"], "deployment");
        assert_eq!(deployment["metadata"]["labels"]["kro.run/instance-name"], "demo");
        assert_eq!(deployment["metadata"]["annotations"][APPLY_ORDER_ANNOTATION], "1");
        assert_eq!(decision.status["state"], "IN_PROGRESS");
        assert_eq!(decision.labels["kro.run/resource-graph-definition-name"], Some("web".into()));
        // The instance is the parent of an ApplySet its children are part of, listing their kinds.
        let id = applyset::id("demo", "ns", "WebApp", "kro.run");
        assert_eq!(decision.labels[applyset::ID_LABEL], Some(id.clone()));
        assert_eq!(deployment["metadata"]["labels"][applyset::PART_OF_LABEL], json!(id));
        assert_eq!(decision.annotations[applyset::GROUP_KINDS_ANNOTATION], Some("Deployment.apps".into()));
        assert_eq!(decision.annotations[applyset::NAMESPACES_ANNOTATION], Some(String::new()));
        assert_eq!(decision.annotations[applyset::TOOLING_ANNOTATION], Some("kro/samplectl-test".into()));
        let kinds: Vec<&str> =
            decision.status["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["InstanceManaged", "GraphResolved", "ResourcesReady", "Ready"]);
    }

    #[test]
    fn once_ready_the_dependents_follow_and_the_instance_becomes_active() {
        let mut observed = decide(&graph(), &origin(), &instance(), &[], &HashMap::new(), false, NOW).children;
        observed[0]["status"] = json!({"availableReplicas": 2});
        let decision = decide(&graph(), &origin(), &instance(), &observed, &HashMap::new(), false, NOW);
        assert_eq!(kinds(&decision), [("Deployment".into(), "demo".into()), ("Service".into(), "demo-svc".into())]);
        assert_eq!(decision.status["state"], "IN_PROGRESS", "the service is not there yet");
        let mut observed = decision.children.clone();
        observed[0]["status"] = json!({"availableReplicas": 2});
        let decision = decide(&graph(), &origin(), &instance(), &observed, &HashMap::new(), false, NOW);
        assert_eq!(decision.status["state"], "ACTIVE");
        assert_eq!(decision.status["available"], 2);
        let ready = decision.status["conditions"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (ready["type"].as_str(), ready["status"].as_str(), ready["message"].as_str()),
            (Some("Ready"), Some("True"), Some(""))
        );
    }

    /// The author's conditions own the instance's conditions: kro's are read through
    /// `runtime.condition(schema, ...)`, a list flattens, data not there yet leaves one out.
    #[test]
    fn the_authors_conditions_own_the_status_conditions() {
        let rgd = json!({"metadata": {"name": "web"}, "spec": {"schema": {
            "apiVersion": "v1alpha1", "kind": "WebApp", "spec": {"replicas": "integer | default=1"},
            "status": {"conditions": [
                "${runtime.newCondition({type: 'AppReady', status: deployment.status.availableReplicas > 0 ? 'True' : 'False', reason: 'Replicas', message: ''})}",
                "${runtime.newCondition({type: 'Lifecycle', status: runtime.condition(schema, 'ResourcesReady').status, reason: 'Kro'})}",
                "${[1, 2].map(i, runtime.newCondition({type: 'Item' + string(i), status: 'Unknown'}))}",
            ]}},
            "resources": graph_resources()}});
        let graph = build(&rgd).unwrap();
        let first = decide(&graph, &origin(), &instance(), &[], &HashMap::new(), false, NOW);
        let types = |d: &Decision| -> Vec<String> {
            d.status["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap().to_owned()).collect()
        };
        assert_eq!(types(&first), ["Lifecycle", "Item1", "Item2"], "AppReady waits for the Deployment");
        assert_eq!(first.status["conditions"][0]["status"], "False");
        assert_eq!(first.status["conditions"][0]["observedGeneration"], 1);
        assert_eq!(first.status["state"], "IN_PROGRESS", "state stays kro's");

        let mut observed = first.children.clone();
        observed[0]["status"] = json!({"availableReplicas": 2});
        let mut seen = instance();
        seen["status"] = first.status.clone();
        let second = decide(&graph, &origin(), &seen, &observed, &HashMap::new(), false, "2026-01-01T00:01:00Z");
        assert_eq!(types(&second), ["AppReady", "Lifecycle", "Item1", "Item2"]);
        assert_eq!(second.status["conditions"][0]["reason"], "Replicas");
        assert_eq!(second.status["conditions"][2]["lastTransitionTime"], NOW, "unchanged, its time kept");

        let mut broken = rgd.clone();
        broken["spec"]["schema"]["status"]["conditions"] = json!([
            "${runtime.newCondition({type: 'A', status: 'May' + 'be'})}",
            "${runtime.newCondition({type: 'B', status: 'True'})}"
        ]);
        let decision = decide(&build(&broken).unwrap(), &origin(), &instance(), &[], &HashMap::new(), false, NOW);
        assert_eq!(types(&decision), ["B"]);
        assert_eq!(decision.status["state"], "ERROR");
    }

    fn graph_resources() -> Value {
        json!([
            {"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                                              "metadata": {"name": "${schema.metadata.name}"}}},
        ])
    }

    #[test]
    fn deletion_goes_in_waves_and_then_finalizes() {
        let mut observed = decide(&graph(), &origin(), &instance(), &[], &HashMap::new(), false, NOW).children;
        observed[0]["status"] = json!({"availableReplicas": 2});
        let both = decide(&graph(), &origin(), &instance(), &observed, &HashMap::new(), false, NOW).children;
        let first = decide(&graph(), &origin(), &instance(), &both, &HashMap::new(), true, NOW);
        assert_eq!(kinds(&first), [("Deployment".into(), "demo".into())], "the service (wave 2) goes first");
        assert_eq!(first.status["state"], "DELETING");
        assert!(!first.finalized);
        let last = decide(&graph(), &origin(), &instance(), &[], &HashMap::new(), true, NOW);
        assert!(last.finalized && last.children.is_empty());
    }

    #[test]
    fn a_suspended_instance_keeps_what_it_has() {
        let mut suspended = instance();
        suspended["metadata"]["annotations"] = json!({RECONCILE_ANNOTATION: "Suspended"});
        let decision = decide(&graph(), &origin(), &suspended, &[], &HashMap::new(), false, NOW);
        assert!(decision.children.is_empty());
        let resources = decision.status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "ResourcesReady")
            .unwrap()
            .clone();
        assert_eq!(resources["reason"], "ReconciliationSuspended");
    }

    #[test]
    fn a_child_that_could_not_be_written_makes_the_instance_error_in_kros_words() {
        let decided = decide(&graph(), &origin(), &instance(), &[], &HashMap::new(), false, NOW);
        assert_eq!(decided.status["state"], "IN_PROGRESS");
        let later = "2026-01-01T00:00:20Z";
        let status = apply_failed(decided.status, "ConfigMap \"x\" is invalid", (1, NOW), later);
        assert_eq!(status["state"], "ERROR");
        let conditions = status["conditions"].as_array().unwrap();
        let message = "resource reconciliation failed: apply results contain errors: ConfigMap \"x\" is invalid";
        for kind in ["ResourcesReady", "Ready"] {
            let c = conditions.iter().find(|c| c["type"] == kind).unwrap();
            assert_eq!(
                (&c["status"], &c["reason"], &c["message"]),
                (&json!("False"), &json!("NotReady"), &json!(message))
            );
        }
        assert_eq!(conditions.last().unwrap()["type"], "Ready");
        // The author's conditions own the list: only the state says so.
        let authored = json!({"state": "ACTIVE", "conditions": [{"type": "Ready", "status": "True"}]});
        let status = apply_failed(authored.clone(), "refused", (1, NOW), later);
        assert_eq!(status["state"], "ERROR");
        assert_eq!(status["conditions"], authored["conditions"]);
    }
}
