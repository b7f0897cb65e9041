//! A watch that does not give up, for any resource and in either shape: it lists, then follows the
//! changes; it re-watches when the server closes the stream or goes silent, reconnects with backoff when
//! the server goes away, and after `410 Gone` relists and hands on only what really changed against what
//! it had already handed on, so that no change is lost and none is given twice.
//!
//! kube-runtime's `watcher` is not used here because it folds ADDED and MODIFIED together and cannot
//! carry the server's Table rendering, which `samplectl watch` prints.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::{Stream, StreamExt};
use kube::Client;
use kube::api::{ListParams, WatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use serde_json::Value;

use super::changes::{Change, diff};
use super::read::{Column, Item, ReadAs, Target, list_all, object_item, row_item, watch_lines};

/// The server ends a watch after this long; a stream silent for longer than that (plus slack) is dead,
/// for example because the server was frozen, and is reopened.
const WATCH_TIMEOUT_SECS: u32 = 290;
const IDLE_LIMIT: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 30);

/// One line of a watch stream, understood.
#[derive(Debug)]
pub enum Event {
    Change(Change, Item),
    Bookmark(String),
    /// The resourceVersion we watch from is too old: relist.
    Gone,
    Failed(String),
}

pub fn parse_event(line: &str, shape: ReadAs, target: &Target) -> Result<Event> {
    let mut event: Value = serde_json::from_str(line).context("the server sent a watch event that is not JSON")?;
    let object = event["object"].take();
    let change = match event["type"].as_str() {
        Some("ADDED") => Change::Added,
        Some("MODIFIED") => Change::Modified,
        Some("DELETED") => Change::Deleted,
        Some("BOOKMARK") => {
            let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or_default();
            return Ok(Event::Bookmark(rv.to_owned()));
        }
        Some("ERROR") if object["code"] == 410 => return Ok(Event::Gone),
        Some("ERROR") => {
            return Ok(Event::Failed(object["message"].as_str().unwrap_or("unknown error").to_owned()));
        }
        other => bail!("the server sent a watch event of unknown type {other:?}"),
    };
    let item = match shape {
        ReadAs::Table | ReadAs::TableWithObjects => {
            let mut object = object;
            match object["rows"].get_mut(0).map(Value::take) {
                Some(row) => row_item(row),
                None => bail!("the server sent a Table watch event without a row"),
            }
        }
        ReadAs::Objects => object_item(object, &target.resolved),
    };
    Ok(Event::Change(change, item))
}

/// The label and field selectors a watch is narrowed by.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    pub labels: Option<String>,
    pub fields: Option<String>,
    /// Objects per list request; `None` asks for everything at once.
    pub page_size: Option<u32>,
}

impl Selectors {
    /// The same selectors and page size for a list request.
    pub fn list_params(&self) -> ListParams {
        ListParams {
            label_selector: self.labels.clone(),
            field_selector: self.fields.clone(),
            limit: self.page_size,
            ..ListParams::default()
        }
    }
}

/// What the first list found: the Table's columns (in the Table shape) and every object.
pub struct Listed {
    pub columns: Option<Vec<Column>>,
    pub items: Vec<Item>,
}

type Lines = Pin<Box<dyn Stream<Item = std::io::Result<String>>>>;

/// The changes to a collection, from a list onwards. [`ChangeStream::list`] first, then
/// [`ChangeStream::next`] for as long as the caller wants.
pub struct ChangeStream {
    client: Client,
    target: Target,
    shape: ReadAs,
    lp: ListParams,
    wp: WatchParams,
    /// What has been handed on, by uid, as last handed on.
    known: HashMap<String, Item>,
    resource_version: String,
    lines: Option<Lines>,
    backoff: DefaultBackoff,
}

impl ChangeStream {
    pub fn new(client: Client, target: Target, shape: ReadAs, selectors: Selectors) -> Self {
        let lp = selectors.list_params();
        let wp = WatchParams {
            label_selector: selectors.labels,
            field_selector: selectors.fields,
            timeout: Some(WATCH_TIMEOUT_SECS),
            bookmarks: true,
            ..WatchParams::default()
        };
        ChangeStream {
            client,
            target,
            shape,
            lp,
            wp,
            known: HashMap::new(),
            resource_version: String::new(),
            lines: None,
            backoff: DefaultBackoff::default(),
        }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The starting state: every object there is now, which later changes are counted from. A failure
    /// here is the caller's to report: nothing has been seen yet that could be lost.
    pub async fn list(&mut self) -> Result<Listed> {
        let page = list_all(&self.client, &self.target, &self.lp, self.shape).await?;
        self.resource_version = page.resource_version;
        self.known = page.items.iter().map(|item| (item.uid.clone(), item.clone())).collect();
        Ok(Listed { columns: page.columns, items: page.items })
    }

    /// The next changes: one watch event, or all that a relist after `410 Gone` found different. Waits
    /// as long as it takes, riding out disconnects and restarts; fails only on what would fail again the
    /// same way (forbidden, a resource that went away, a server that speaks nonsense).
    pub async fn next(&mut self) -> Result<Vec<(Change, Item)>> {
        loop {
            let lines = match self.lines.as_mut() {
                Some(lines) => lines,
                None => match self.open().await? {
                    Some(changes) if !changes.is_empty() => return Ok(changes),
                    _ => continue,
                },
            };
            let line = match tokio::time::timeout(IDLE_LIMIT, lines.next()).await {
                Err(_) => {
                    tracing::debug!("the watch went silent; reopening it");
                    self.lines = None;
                    continue;
                }
                Ok(None) => {
                    tracing::debug!("the server closed the watch; reopening it");
                    self.lines = None;
                    continue;
                }
                Ok(Some(Err(err))) => {
                    self.lines = None;
                    self.pause(&err).await;
                    continue;
                }
                Ok(Some(Ok(line))) => line,
            };
            match parse_event(&line, self.shape, &self.target)? {
                Event::Change(change, item) => {
                    self.backoff.reset();
                    if let Some(change) = self.apply(change, item) {
                        return Ok(vec![change]);
                    }
                }
                Event::Bookmark(rv) => self.resource_version = rv,
                Event::Gone => {
                    self.lines = None;
                    let changes = self.relist().await?;
                    if !changes.is_empty() {
                        return Ok(changes);
                    }
                }
                Event::Failed(message) => {
                    self.lines = None;
                    self.pause(&message).await;
                }
            }
        }
    }

    /// Opens the watch from the last resourceVersion seen. `Some` when that version had expired and a
    /// relist was needed instead, with what it found.
    async fn open(&mut self) -> Result<Option<Vec<(Change, Item)>>> {
        match watch_lines(&self.client, &self.target, &self.wp, &self.resource_version, self.shape).await {
            Ok(lines) => {
                self.lines = Some(Box::pin(lines));
                Ok(None)
            }
            Err(err) if crate::error::status_code(&err) == Some(410) => self.relist().await.map(Some),
            Err(err) => {
                let err = anyhow::Error::new(err);
                if !crate::error::transient(&err) {
                    return Err(err);
                }
                self.pause(&crate::error::describe_any(&err)).await;
                Ok(None)
            }
        }
    }

    /// After 410 Gone: list again and say what differs. Retried with backoff, since the server that just
    /// expired our resourceVersion may also be restarting.
    async fn relist(&mut self) -> Result<Vec<(Change, Item)>> {
        let page = loop {
            match list_all(&self.client, &self.target, &self.lp, self.shape).await {
                Ok(page) => break page,
                Err(err) if crate::error::transient(&err) => self.pause(&crate::error::describe_any(&err)).await,
                Err(err) => return Err(err),
            }
        };
        tracing::debug!(objects = page.items.len(), "relisted after the watch expired");
        let changes = diff(&self.known, &page.items);
        self.known = page.items.into_iter().map(|i| (i.uid.clone(), i)).collect();
        self.resource_version = page.resource_version;
        Ok(changes)
    }

    /// Records one event; `None` for one already handed on (a watch reopened from an older version can
    /// send it again).
    fn apply(&mut self, change: Change, item: Item) -> Option<(Change, Item)> {
        self.resource_version = item.resource_version.clone();
        let duplicate = match change {
            Change::Deleted => self.known.remove(&item.uid).is_none(),
            _ => self
                .known
                .insert(item.uid.clone(), item.clone())
                .is_some_and(|old| old.resource_version == item.resource_version),
        };
        (!duplicate).then_some((change, item))
    }

    async fn pause(&mut self, why: &dyn std::fmt::Display) {
        let delay = self.backoff.next().unwrap_or(Duration::from_secs(30));
        tracing::warn!("watch interrupted ({why}); retrying in {:.1}s", delay.as_secs_f64());
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resolve::Resolved;
    use kube::discovery::ApiResource;

    fn target() -> Target {
        let ar = ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        };
        Target {
            resolved: Resolved { ar, namespaced: true, verbs: vec![], subresources: vec![] },
            namespace: Some("ns".into()),
        }
    }

    #[test]
    fn events_are_understood() {
        let t = target();
        let added = r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"5"}}}"#;
        match parse_event(added, ReadAs::Objects, &t).unwrap() {
            Event::Change(Change::Added, item) => {
                assert_eq!((item.name.as_str(), item.resource_version.as_str()), ("a", "5"));
                assert_eq!(item.object.unwrap()["kind"], "ConfigMap");
            }
            other => panic!("{other:?}"),
        }
        let row = r#"{"type":"MODIFIED","object":{"kind":"Table","rows":[{"cells":["a","1"],
            "object":{"metadata":{"name":"a","uid":"u","resourceVersion":"6"}}}]}}"#
            .replace('\n', "");
        match parse_event(&row, ReadAs::Table, &t).unwrap() {
            Event::Change(Change::Modified, item) => assert_eq!(item.cells.unwrap().len(), 2),
            other => panic!("{other:?}"),
        }
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"Table","metadata":{"resourceVersion":"77"}}}"#;
        assert!(matches!(parse_event(bookmark, ReadAs::Table, &t).unwrap(), Event::Bookmark(rv) if rv == "77"));
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#;
        assert!(matches!(parse_event(gone, ReadAs::Objects, &t).unwrap(), Event::Gone));
        assert!(parse_event("not json", ReadAs::Objects, &t).is_err());
    }

    #[tokio::test]
    async fn an_event_already_handed_on_is_not_handed_on_again() {
        let item = |rv: &str| Item {
            uid: "u".into(),
            resource_version: rv.into(),
            namespace: None,
            name: "a".into(),
            labels: Default::default(),
            creation_timestamp: None,
            cells: None,
            object: None,
        };
        // A client that is never used: apply() makes no request.
        let mut stream = ChangeStream {
            client: kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap(),
            target: target(),
            shape: ReadAs::Objects,
            lp: ListParams::default(),
            wp: WatchParams::default(),
            known: HashMap::new(),
            resource_version: String::new(),
            lines: None,
            backoff: DefaultBackoff::default(),
        };
        assert!(stream.apply(Change::Added, item("1")).is_some());
        assert!(stream.apply(Change::Modified, item("1")).is_none(), "same version again");
        assert!(stream.apply(Change::Modified, item("2")).is_some());
        assert!(stream.apply(Change::Deleted, item("2")).is_some());
        assert!(stream.apply(Change::Deleted, item("2")).is_none(), "deleted twice");
        assert_eq!(stream.resource_version, "2");
    }
}
