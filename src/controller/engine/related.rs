//! The objects a customize hook asks for. Its answer is kept per parent and generation for
//! [`ANSWER_LIFETIME`] (as metacontroller caches it), each rule's type resolved through discovery once;
//! the objects themselves are read from the API server at each reconcile, so a sync never sees a related
//! object older than the reconcile. The drivers ask two things of it: which related types are in use
//! (to watch or list them) and which parents asked for an object that changed (to sync them again).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, ListParams, TypeMeta};
use tokio::sync::watch;

use super::request::bounded;
use super::{Context, ReconcileError, failure, key, uid};
use crate::cluster::read::pages;
use crate::cluster::resolve::{Gvr, Resolved, resolve_gvr};
use crate::cluster::scope;
use crate::controller::rules::related::{Asker, RelatedRule};
use crate::controller::sync::{RelatedObjects, Version};
use futures::TryStreamExt;

/// How long a customize answer is used for a parent whose generation has not moved.
pub const ANSWER_LIFETIME: Duration = Duration::from_secs(20 * 60);

/// A rule with its type.
pub struct Rule {
    pub rule: RelatedRule,
    pub resolved: Resolved,
}

/// What one parent's customize hook answered.
struct Asked {
    generation: i64,
    at: Instant,
    /// The parent's namespace (`None`: cluster-scoped) and name, to trigger it.
    namespace: Option<String>,
    name: String,
    rules: Arc<Vec<Rule>>,
}

/// The customize answers of one controller's parents, and the related types they use.
pub struct Related {
    version: Version,
    asked: Mutex<HashMap<String, Asked>>,
    types: Mutex<HashMap<(String, String), Resolved>>,
    /// Every related type asked for so far, for the watch driver to watch.
    in_use: watch::Sender<Vec<Resolved>>,
}

impl Related {
    pub fn new(version: Version) -> Self {
        Related { version, asked: Mutex::default(), types: Mutex::default(), in_use: watch::channel(Vec::new()).0 }
    }

    /// The related types asked for so far; changes as new ones are.
    pub fn types(&self) -> watch::Receiver<Vec<Resolved>> {
        self.in_use.subscribe()
    }

    pub fn forget(&self, parent_uid: &str) {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
    }

    fn cached(&self, parent: &DynamicObject) -> Option<Arc<Vec<Rule>>> {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let entry = asked.get(&uid(parent))?;
        (entry.generation == parent.metadata.generation.unwrap_or_default() && entry.at.elapsed() < ANSWER_LIFETIME)
            .then(|| entry.rules.clone())
    }

    fn asker<'a>(&self, namespace: Option<&'a str>) -> Asker<'a> {
        Asker { namespace, version: self.version }
    }

    /// The parents (namespace, name) whose rules select the object of type `resolved` that `meta`
    /// describes; `None` for `meta`: every parent with a rule on that type (after a relist).
    pub fn parents_of(&self, resolved: &Resolved, meta: Option<&ObjectMeta>) -> Vec<(String, String)> {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        asked
            .values()
            .filter(|entry| {
                entry.rules.iter().any(|r| {
                    r.resolved.ar.api_version == resolved.ar.api_version
                        && r.resolved.ar.kind == resolved.ar.kind
                        && meta.is_none_or(|meta| {
                            r.rule.selects(self.asker(entry.namespace.as_deref()), resolved.namespaced, meta, |_| None)
                        })
                })
            })
            .map(|entry| (entry.namespace.clone().unwrap_or_default(), entry.name.clone()))
            .collect()
    }

    /// For the poll driver: the versions of the objects in `listed` (by type key) that the rules of the
    /// parent with this uid select, in a stable order; empty when it asked for nothing (yet).
    pub fn versions_for(&self, parent_uid: &str, listed: &HashMap<String, Vec<ObjectMeta>>) -> Vec<String> {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = asked.get(parent_uid) else { return Vec::new() };
        let mut versions = Vec::new();
        for r in entry.rules.iter() {
            let type_key = format!("{}.{}", r.resolved.ar.kind, r.resolved.ar.api_version);
            for meta in listed.get(&type_key).into_iter().flatten() {
                if r.rule.selects(self.asker(entry.namespace.as_deref()), r.resolved.namespaced, meta, |_| None) {
                    versions.push(format!("{type_key}/{}", meta.resource_version.as_deref().unwrap_or_default()));
                }
            }
        }
        versions.sort();
        versions
    }

    fn remember(&self, parent: &DynamicObject, rules: Arc<Vec<Rule>>) {
        let mut in_use: Vec<Resolved> = self.in_use.borrow().clone();
        let mut added = false;
        for r in rules.iter() {
            if !in_use.iter().any(|t| t.ar.api_version == r.resolved.ar.api_version && t.ar.kind == r.resolved.ar.kind)
            {
                in_use.push(r.resolved.clone());
                added = true;
            }
        }
        if added {
            self.in_use.send_replace(in_use);
        }
        let entry = Asked {
            generation: parent.metadata.generation.unwrap_or_default(),
            at: Instant::now(),
            namespace: parent.metadata.namespace.clone(),
            name: parent.metadata.name.clone().unwrap_or_default(),
            rules,
        };
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).insert(uid(parent), entry);
    }
}

impl Context {
    /// The related objects `parent` asked for, by type; empty without a customize hook.
    pub(super) async fn related_objects(&self, parent: &DynamicObject) -> Result<RelatedObjects, ReconcileError> {
        let rules = match self.memory.related.cached(parent) {
            Some(rules) => rules,
            None => match self.sync().customize(parent).await {
                None => return Ok(RelatedObjects::new()),
                Some(Err(problem)) => return Err(self.sync_failed(parent, problem)),
                Some(Ok(rules)) => {
                    let mut resolved = Vec::new();
                    for rule in rules {
                        let resolved_type = self.related_type(&rule).await.map_err(|problem| {
                            self.sync_failed(parent, format!("the customize hook answered {}: {problem}", rule.what()))
                        })?;
                        resolved.push(Rule { rule, resolved: resolved_type });
                    }
                    let rules = Arc::new(resolved);
                    self.memory.related.remember(parent, rules.clone());
                    rules
                }
            },
        };
        let object = key(parent);
        let asker = self.memory.related.asker(parent.metadata.namespace.as_deref());
        let mut related = RelatedObjects::new();
        let mut namespaces: Option<HashMap<String, BTreeMap<String, String>>> = None;
        for Rule { rule, resolved } in rules.iter() {
            let type_key = format!("{}.{}", resolved.ar.kind, resolved.ar.api_version);
            let namespace = rule
                .list_namespace(asker, resolved.namespaced)
                .map_err(|problem| self.sync_failed(parent, format!("the customize hook answered {problem}")))?;
            if rule.namespace_selector.is_some() && namespaces.is_none() {
                namespaces = Some(self.namespace_labels().await.map_err(|f| {
                    failure(&object, "listing namespaces for a related resource's namespaceSelector", f)
                })?);
            }
            let found = self
                .list_related(rule, resolved, namespace.as_deref())
                .await
                .map_err(|f| failure(&object, &format!("reading {}", rule.what()), f))?;
            let labels_of = |ns: &str| namespaces.as_ref().map(|all| all.get(ns).cloned().unwrap_or_default());
            let group = related.entry(type_key).or_default();
            let already: HashSet<(Option<String>, Option<String>)> =
                group.iter().map(|o| (o.metadata.namespace.clone(), o.metadata.name.clone())).collect();
            group.extend(found.into_iter().filter(|o| {
                rule.selects(asker, resolved.namespaced, &o.metadata, labels_of)
                    && !already.contains(&(o.metadata.namespace.clone(), o.metadata.name.clone()))
            }));
        }
        Ok(related)
    }

    /// The type a rule names, through discovery (once per type).
    async fn related_type(&self, rule: &RelatedRule) -> Result<Resolved, String> {
        let id = (rule.api_version.clone(), rule.resource.clone());
        if let Some(resolved) = self.memory.related.types.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(resolved.clone());
        }
        let gvr = Gvr::parse(&format!("{}/{}", rule.api_version, rule.resource))?;
        let resolved = resolve_gvr(&self.client, &gvr).await.map_err(|err| format!("{err:#}"))?;
        self.memory.related.types.lock().unwrap_or_else(|e| e.into_inner()).insert(id, resolved.clone());
        Ok(resolved)
    }

    /// The objects of a rule's type in `namespace` (all of them when `None`), filtered by the server
    /// where it can: by label selector, or by name when the rule names one object.
    async fn list_related(
        &self,
        rule: &RelatedRule,
        resolved: &Resolved,
        namespace: Option<&str>,
    ) -> Result<Vec<DynamicObject>, super::request::Failed> {
        let api = scope::dynamic(self.client.clone(), &resolved.ar, namespace);
        let mut params = ListParams::default();
        if let Some(selector) = &rule.label_selector {
            params = params.labels(&selector.to_query());
        }
        if let [name] = rule.names.as_slice() {
            params = params.fields(&format!("metadata.name={name}"));
        }
        pages(params.limit(500), |lp| {
            let api = api.clone();
            async move { bounded(api.list(&lp)).await }
        })
        .try_fold(Vec::new(), |mut items, page| async move {
            items.extend(page.items.into_iter().map(|mut o| {
                o.metadata.managed_fields = None;
                // A list's items come without their type; a hook reads it on each object, as
                // metacontroller hands them over.
                o.types =
                    Some(TypeMeta { api_version: resolved.ar.api_version.clone(), kind: resolved.ar.kind.clone() });
                o
            }));
            Ok(items)
        })
        .await
    }

    /// Every namespace's labels.
    async fn namespace_labels(&self) -> Result<HashMap<String, BTreeMap<String, String>>, super::request::Failed> {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = crate::cluster::scope::cluster(self.client.clone());
        let list = bounded(api.list_metadata(&ListParams::default())).await?;
        Ok(list
            .items
            .into_iter()
            .map(|ns| (ns.metadata.name.unwrap_or_default(), ns.metadata.labels.unwrap_or_default()))
            .collect())
    }
}
