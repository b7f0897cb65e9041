//! `samplectl watch`: list, then print ADDED / MODIFIED / DELETED until stopped, through the resilient
//! change stream of `cluster::stream`, which does not give up where `kubectl get -w` does.

use std::io::Write;

use anyhow::{Result, bail};

use crate::cli::WatchArgs;
use crate::cluster::changes::Change;
use crate::cluster::client::Connection;
use crate::cluster::read::{Column, Item};
use crate::cluster::stream::ChangeStream;
use crate::commands::select::{Printing, Selection, on_terminal, select, selectors, table_spec};
use crate::output::objects::ObjectPrinter;
use crate::output::paged::PagedTable;
use crate::output::template::TemplateEvents;
use crate::signal::shutdown_signal;

/// Prints events in the chosen format and counts them against `--max-events`.
struct Printer<W: Write> {
    sink: Sink<W>,
    printed: u64,
    max_events: Option<u64>,
}

enum Sink<W: Write> {
    /// Its columns are fixed by the first list, as the server's.
    Table(PagedTable<W>),
    Objects(W, ObjectPrinter),
    Template(TemplateEvents<W>),
}

impl<W: Write> Printer<W> {
    fn columns(&mut self, columns: Option<&[Column]>) -> Result<()> {
        if let Sink::Table(table) = &mut self.sink {
            table.columns(columns)?;
        }
        Ok(())
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
            Sink::Table(table) => table.event(change, item)?,
            Sink::Objects(out, printer) => printer.event(out, change.word(), item)?,
            Sink::Template(events) => events.event(item.object.as_ref().unwrap_or(&serde_json::Value::Null))?,
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
        Printing::Table { wide } => Sink::Table(PagedTable::new(out, table_spec(&target, &args.select, wide, true))),
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
    let mut printer = Printer { sink, printed: 0, max_events: args.max_events };
    let mut changes = ChangeStream::new(conn.client.clone(), target, shape, selectors);

    let work = async {
        let listed = changes.list().await?;
        printer.columns(listed.columns.as_deref())?;
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
