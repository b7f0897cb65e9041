//! `samplectl watch`: list, then stream ADDED / MODIFIED / DELETED until stopped. Unlike `kubectl get -w`
//! it does not give up: it re-watches when the server closes the stream, reconnects with backoff when the
//! server goes away, and after `410 Gone` relists and prints only what really changed against what it had
//! already printed, so no change is lost and none is printed twice.
//!
//! kube-runtime's `watcher` is not used because it folds ADDED and MODIFIED together and cannot carry
//! the server's Table rendering, both of which this command prints.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use kube::api::{ListParams, WatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use serde_json::Value;

use crate::changes::{Change, diff};
use crate::cli::WatchArgs;
use crate::client::Connection;
use crate::commands::select::{Printing, Selection, list_params, select};
use crate::fetch::{Column, Item, Shape, Target, list_all, object_item, row_item, watch_lines};
use crate::output::objects::ObjectPrinter;
use crate::output::table::{Layout, LayoutOptions, TableWriter};
use crate::signal::shutdown_signal;

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

pub fn parse_event(line: &str, shape: Shape, target: &Target) -> Result<Event> {
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
        Shape::Table => {
            let mut object = object;
            match object["rows"].get_mut(0).map(Value::take) {
                Some(row) => row_item(row),
                None => bail!("the server sent a Table watch event without a row"),
            }
        }
        Shape::Objects => object_item(object, &target.resolved),
    };
    Ok(Event::Change(change, item))
}

/// Prints events in the chosen format and counts them against `--max-events`.
struct Printer<W: Write> {
    sink: Sink<W>,
    no_headers: bool,
    options: LayoutOptions,
    printed: u64,
    max_events: Option<u64>,
}

enum Sink<W: Write> {
    /// Table output waits for the first list to know the server's columns.
    TablePending {
        out: W,
        wide: bool,
    },
    Table(Layout, TableWriter<W>),
    Objects(W, ObjectPrinter),
    Closed,
}

impl<W: Write> Printer<W> {
    fn columns(&mut self, columns: Option<&[Column]>) {
        if !matches!(self.sink, Sink::TablePending { .. }) {
            return;
        }
        if let Sink::TablePending { out, wide } = std::mem::replace(&mut self.sink, Sink::Closed) {
            let layout = Layout::new(columns, LayoutOptions { wide, ..self.options });
            let header = (!self.no_headers).then(|| layout.headers().to_vec());
            let mut table = TableWriter::new(out, header);
            // The EVENT column is as wide as its widest word from the start, so rows do not shift.
            table.reserve(0, Change::Modified.word().len());
            self.sink = Sink::Table(layout, table);
        }
    }

    /// Prints one event; false once `--max-events` is reached.
    fn print(&mut self, change: Change, item: &Item) -> Result<bool> {
        match &mut self.sink {
            Sink::Table(layout, table) => table.write_rows(&[layout.row(item, Some(change.word()))])?,
            Sink::Objects(out, printer) => printer.event(out, change.word(), item)?,
            Sink::TablePending { .. } | Sink::Closed => {
                bail!("internal error: watch output is not set up")
            }
        }
        self.printed += 1;
        Ok(self.max_events.is_none_or(|max| self.printed < max))
    }
}

struct Watch<'a, W: Write> {
    conn: &'a Connection,
    target: Target,
    shape: Shape,
    lp: ListParams,
    wp: WatchParams,
    known: HashMap<String, Item>,
    resource_version: String,
    printer: Printer<W>,
    backoff: DefaultBackoff,
}

enum Flow {
    Continue,
    Done,
}

impl<W: Write> Watch<'_, W> {
    async fn list_all(&self) -> Result<(String, Option<Vec<Column>>, Vec<Item>)> {
        let page = list_all(&self.conn.client, &self.target, &self.lp, self.shape).await?;
        Ok((page.resource_version, page.columns, page.items))
    }

    async fn start(&mut self, watch_only: bool) -> Result<Flow> {
        let (rv, columns, items) = self.list_all().await?;
        self.printer.columns(columns.as_deref());
        self.resource_version = rv;
        for item in items {
            let print = !watch_only;
            self.known.insert(item.uid.clone(), item.clone());
            if print && !self.printer.print(Change::Added, &item)? {
                return Ok(Flow::Done);
            }
        }
        Ok(Flow::Continue)
    }

    /// After 410 Gone: list again and print the difference. Retried with backoff, since the server that
    /// just expired our resourceVersion may also be restarting.
    async fn relist(&mut self) -> Result<Flow> {
        let (rv, _, items) = loop {
            match self.list_all().await {
                Ok(listed) => break listed,
                Err(err) if retryable(&err) => self.pause(&err).await,
                Err(err) => return Err(err),
            }
        };
        tracing::debug!(objects = items.len(), "relisted after the watch expired");
        let changes = diff(&self.known, &items);
        self.known = items.into_iter().map(|i| (i.uid.clone(), i)).collect();
        self.resource_version = rv;
        for (change, item) in changes {
            if !self.printer.print(change, &item)? {
                return Ok(Flow::Done);
            }
        }
        Ok(Flow::Continue)
    }

    async fn pause(&mut self, why: &dyn std::fmt::Display) {
        let delay = self.backoff.next().unwrap_or(Duration::from_secs(30));
        tracing::warn!("watch interrupted ({why}); retrying in {:.1}s", delay.as_secs_f64());
        tokio::time::sleep(delay).await;
    }

    fn apply(&mut self, change: Change, item: Item) -> Result<Flow> {
        self.resource_version = item.resource_version.clone();
        let duplicate = match change {
            Change::Deleted => self.known.remove(&item.uid).is_none(),
            _ => self
                .known
                .insert(item.uid.clone(), item.clone())
                .is_some_and(|old| old.resource_version == item.resource_version),
        };
        if duplicate {
            return Ok(Flow::Continue);
        }
        Ok(if self.printer.print(change, &item)? { Flow::Continue } else { Flow::Done })
    }

    async fn run(&mut self) -> Result<()> {
        loop {
            let opened =
                watch_lines(&self.conn.client, &self.target, &self.wp, &self.resource_version, self.shape).await;
            let lines = match opened {
                Ok(lines) => lines,
                Err(kube::Error::Api(status)) if status.code == 410 => {
                    if let Flow::Done = self.relist().await? {
                        return Ok(());
                    }
                    continue;
                }
                Err(err) => {
                    let err = anyhow::Error::new(err);
                    if !retryable(&err) {
                        return Err(err);
                    }
                    self.pause(&err).await;
                    continue;
                }
            };
            let mut lines = std::pin::pin!(lines);
            loop {
                let line = match tokio::time::timeout(IDLE_LIMIT, lines.next()).await {
                    Err(_) => {
                        tracing::debug!("the watch went silent; reopening it");
                        break;
                    }
                    Ok(None) => {
                        tracing::debug!("the server closed the watch; reopening it");
                        break;
                    }
                    Ok(Some(Err(err))) => {
                        self.pause(&err).await;
                        break;
                    }
                    Ok(Some(Ok(line))) => line,
                };
                let flow = match parse_event(&line, self.shape, &self.target)? {
                    Event::Change(change, item) => {
                        self.backoff.reset();
                        self.apply(change, item)?
                    }
                    Event::Bookmark(rv) => {
                        self.resource_version = rv;
                        Flow::Continue
                    }
                    Event::Gone => {
                        let flow = self.relist().await?;
                        if let Flow::Continue = flow {
                            break;
                        }
                        flow
                    }
                    Event::Failed(message) => {
                        self.pause(&message).await;
                        break;
                    }
                };
                if let Flow::Done = flow {
                    return Ok(());
                }
            }
        }
    }
}

/// Failures that pass: the server is away, restarting or overloaded. Anything else (forbidden, not
/// found, bad request) would fail again the same way and is reported.
fn retryable(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| match cause.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => status.code >= 500 || status.code == 429,
        Some(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
        _ => cause.downcast_ref::<std::io::Error>().is_some(),
    })
}

pub async fn run(conn: &Connection, namespace: Option<&str>, args: &WatchArgs, out: impl Write) -> Result<()> {
    let selection = select(conn, namespace, &args.select).await?;
    let sink = match selection.printing {
        Printing::Table { wide } => Sink::TablePending { out, wide },
        Printing::Objects(format) => Sink::Objects(out, selection.object_printer(format, &args.select)),
    };
    let Selection { target, name, printing } = selection;
    let mut lp = list_params(&args.select);
    if let Some(name) = &name {
        // One object is watched as kubectl does it: a field selector on its name.
        let by_name = format!("metadata.name={name}");
        lp.field_selector = Some(match lp.field_selector.take() {
            Some(fields) => format!("{fields},{by_name}"),
            None => by_name,
        });
    }
    let wp = WatchParams {
        label_selector: lp.label_selector.clone(),
        field_selector: lp.field_selector.clone(),
        timeout: Some(WATCH_TIMEOUT_SECS),
        bookmarks: true,
        ..WatchParams::default()
    };
    let options = LayoutOptions {
        wide: false,
        namespace: target.namespace.is_none() && target.resolved.namespaced,
        labels: args.select.show_labels,
        event: true,
    };
    let printer =
        Printer { sink, no_headers: args.select.no_headers, options, printed: 0, max_events: args.max_events };
    let mut watch = Watch {
        conn,
        shape: printing.shape(),
        target,
        lp,
        wp,
        known: HashMap::new(),
        resource_version: String::new(),
        printer,
        backoff: DefaultBackoff::default(),
    };

    let work = async {
        if let Flow::Done = watch.start(args.watch_only).await? {
            return Ok(());
        }
        watch.run().await
    };
    let deadline = async {
        match args.timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        result = work => result,
        () = deadline => Ok(()),
        () = shutdown_signal() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Resolved;
    use kube::discovery::ApiResource;

    fn target() -> Target {
        let ar = ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        };
        Target { resolved: Resolved { ar, namespaced: true, verbs: vec![] }, namespace: Some("ns".into()) }
    }

    #[test]
    fn events_are_understood() {
        let t = target();
        let added = r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"5"}}}"#;
        match parse_event(added, Shape::Objects, &t).unwrap() {
            Event::Change(Change::Added, item) => {
                assert_eq!((item.name.as_str(), item.resource_version.as_str()), ("a", "5"));
                assert_eq!(item.object.unwrap()["kind"], "ConfigMap");
            }
            other => panic!("{other:?}"),
        }
        let row = r#"{"type":"MODIFIED","object":{"kind":"Table","rows":[{"cells":["a","1"],
            "object":{"metadata":{"name":"a","uid":"u","resourceVersion":"6"}}}]}}"#
            .replace('\n', "");
        match parse_event(&row, Shape::Table, &t).unwrap() {
            Event::Change(Change::Modified, item) => assert_eq!(item.cells.unwrap().len(), 2),
            other => panic!("{other:?}"),
        }
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"Table","metadata":{"resourceVersion":"77"}}}"#;
        assert!(matches!(parse_event(bookmark, Shape::Table, &t).unwrap(), Event::Bookmark(rv) if rv == "77"));
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#;
        assert!(matches!(parse_event(gone, Shape::Objects, &t).unwrap(), Event::Gone));
        assert!(parse_event("not json", Shape::Objects, &t).is_err());
    }
}
