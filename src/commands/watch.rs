//! `samplectl watch`: list, then print ADDED / MODIFIED / DELETED until stopped, through the resilient
//! change stream of `cluster::stream`, which does not give up where `kubectl get -w` does.

use std::io::Write;

use anyhow::{Result, bail};

use crate::cli::WatchArgs;
use crate::cluster::changes::Change;
use crate::cluster::client::Connection;
use crate::cluster::read::{Column, Item};
use crate::cluster::stream::ChangeStream;
use crate::commands::select::{Printing, Selection, fit, on_terminal, select, selectors};
use crate::output::objects::ObjectPrinter;
use crate::output::table::{Layout, LayoutOptions, TableWriter};
use crate::output::template::TemplateEvents;
use crate::signal::shutdown_signal;

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
        fit: Option<usize>,
    },
    Table(Layout, TableWriter<W>),
    Objects(W, ObjectPrinter),
    Template(TemplateEvents<W>),
    Closed,
}

impl<W: Write> Printer<W> {
    fn columns(&mut self, columns: Option<&[Column]>) {
        if !matches!(self.sink, Sink::TablePending { .. }) {
            return;
        }
        if let Sink::TablePending { out, wide, fit } = std::mem::replace(&mut self.sink, Sink::Closed) {
            let layout = Layout::new(columns, LayoutOptions { wide, ..self.options.clone() });
            let header = (!self.no_headers).then(|| layout.headers().to_vec());
            let mut table = TableWriter::new(out, header).fit_to(fit).on_terminal(self.options.escape);
            // The EVENT column is as wide as its widest word from the start, so rows do not shift.
            table.reserve(0, Change::Modified.word().len());
            self.sink = Sink::Table(layout, table);
        }
    }

    /// Prints the objects that exist when the watch starts, as ADDED; false once `--max-events` is reached.
    fn print_list(&mut self, items: &[Item]) -> Result<bool> {
        let Sink::Template(events) = &mut self.sink else {
            for item in items {
                if !self.print(Change::Added, item)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        };
        // A template prints them together: custom columns align over the whole list, as kubectl's do.
        let room = self.max_events.map_or(items.len(), |max| usize::try_from(max - self.printed).unwrap_or(usize::MAX));
        let objects: Vec<&serde_json::Value> =
            items.iter().take(room).map(|item| item.object.as_ref().unwrap_or(&serde_json::Value::Null)).collect();
        events.list(&objects)?;
        self.printed += objects.len() as u64;
        Ok(self.max_events.is_none_or(|max| self.printed < max))
    }

    /// Prints one event; false once `--max-events` is reached.
    fn print(&mut self, change: Change, item: &Item) -> Result<bool> {
        match &mut self.sink {
            Sink::Table(layout, table) => table.write_rows(&[layout.row(item, Some(change.word()))])?,
            Sink::Objects(out, printer) => printer.event(out, change.word(), item)?,
            Sink::Template(events) => events.event(item.object.as_ref().unwrap_or(&serde_json::Value::Null))?,
            Sink::TablePending { .. } | Sink::Closed => {
                bail!("internal error: watch output is not set up")
            }
        }
        self.printed += 1;
        Ok(self.max_events.is_none_or(|max| self.printed < max))
    }
}

pub async fn run(conn: &Connection, namespace: Option<&str>, args: &WatchArgs, out: impl Write) -> Result<()> {
    let Selection { mut targets, names, printing } = select(conn, namespace, &args.select).await?;
    if targets.len() > 1 {
        let kinds: Vec<_> = targets.iter().map(|t| t.resolved.qualified_plural()).collect();
        bail!("watch follows one resource type; this names {}: {}", targets.len(), kinds.join(", "));
    }
    let target = targets.remove(0);
    let shape = printing.shape();
    let terminal = on_terminal();
    let sink = match printing {
        Printing::Table { wide } => Sink::TablePending { out, wide, fit: fit(&args.select) },
        Printing::Objects(format) => Sink::Objects(out, Selection::object_printer(format, &target, &args.select)),
        Printing::Template(format) => {
            Sink::Template(TemplateEvents::new(format, out, args.select.no_headers, terminal))
        }
    };
    let mut selectors = selectors(&args.select);
    // The command line allows at most one name here.
    if let Some(name) = names.first() {
        // One object is watched as kubectl does it: a field selector on its name.
        let by_name = format!("metadata.name={name}");
        selectors.fields = Some(match selectors.fields.take() {
            Some(fields) => format!("{fields},{by_name}"),
            None => by_name,
        });
    }
    let options = LayoutOptions {
        wide: false,
        namespace: target.namespace.is_none() && target.resolved.namespaced,
        labels: args.select.show_labels,
        label_columns: args.select.label_columns.clone(),
        event: true,
        // On a terminal, object text cannot drive it; piped, it is exactly what kubectl prints.
        escape: terminal,
    };
    let mut printer =
        Printer { sink, no_headers: args.select.no_headers, options, printed: 0, max_events: args.max_events };
    let mut changes = ChangeStream::new(conn.client.clone(), target, shape, selectors);

    let work = async {
        let listed = changes.list().await?;
        printer.columns(listed.columns.as_deref());
        if !args.watch_only && !printer.print_list(&listed.items)? {
            return Ok(());
        }
        loop {
            for (change, item) in changes.next().await? {
                if !printer.print(change, &item)? {
                    return Ok(());
                }
            }
        }
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
