//! `samplectl list`: any resource, page by page, printed as kubectl prints it.

use std::io::Write;

use anyhow::Result;
use futures::TryStreamExt;

use crate::cli::ListArgs;
use crate::cluster::client::Connection;
use crate::cluster::read::{Item, Page, get_one, list_pages};
use crate::commands::select::{Printing, Selection, list_params, select};
use crate::error::Reported;
use crate::output::table::{Layout, LayoutOptions, TableWriter};

pub async fn run(conn: &Connection, namespace: Option<&str>, list: &ListArgs, out: &mut impl Write) -> Result<()> {
    let args = &list.select;
    let selection = select(conn, namespace, args).await?;
    let target = &selection.target;
    let shape = selection.printing.shape();
    let options = |wide| LayoutOptions {
        wide,
        namespace: target.namespace.is_none() && target.resolved.namespaced,
        labels: args.show_labels,
        event: false,
    };

    if !selection.names.is_empty() {
        return named(conn, &selection, list, options, out).await;
    }

    let lp = list_params(args);
    let mut pages = std::pin::pin!(list_pages(&conn.client, target, &lp, shape));
    let mut read = 0;
    match selection.printing {
        Printing::Table { wide } => {
            let mut table = TableWriter::new(out, None);
            let mut layout = None;
            let mut count = 0;
            while let Some(page) = pages.try_next().await? {
                read += 1;
                count += page.items.len();
                tracing::debug!(
                    page = read,
                    items = page.items.len(),
                    "listed a page: page {read}, {} items",
                    page.items.len()
                );
                if !page.items.is_empty() {
                    // The first page with rows fixes the columns; kubectl prints no header for nothing.
                    let layout = layout.get_or_insert_with(|| {
                        let layout = Layout::new(page.columns.as_deref(), options(wide));
                        if !args.no_headers {
                            table.set_header(layout.headers().to_vec());
                        }
                        layout
                    });
                    let rows: Vec<_> = page.items.iter().map(|item| layout.row(item, None)).collect();
                    table.write_rows(&rows)?;
                }
            }
            // kubectl says so only when it printed nothing, had no error, and was not told to ignore.
            if count == 0 && !list.ignore_not_found {
                eprintln!("{}", target.nothing_found());
            }
        }
        Printing::Objects(format) => {
            let mut writer = selection.object_printer(format, args).list(out);
            while let Some(page) = pages.try_next().await? {
                read += 1;
                tracing::debug!(
                    page = read,
                    items = page.items.len(),
                    "listed a page: page {read}, {} items",
                    page.items.len()
                );
                for item in &page.items {
                    writer.item(item)?;
                }
            }
            writer.finish()?;
        }
    }
    Ok(())
}

/// Objects by name, as `kubectl get RESOURCE NAME...` prints them: the ones found in the order given (one
/// table, or a `List`, or for a single name the object itself), and a `NotFound` line on stderr for each
/// one missing, which makes the exit status 1 unless `--ignore-not-found`.
async fn named(
    conn: &Connection,
    selection: &Selection,
    list: &ListArgs,
    options: impl Fn(bool) -> LayoutOptions,
    out: &mut impl Write,
) -> Result<()> {
    let args = &list.select;
    let shape = selection.printing.shape();
    let mut found: Vec<Page> = Vec::new();
    let mut missing = Vec::new();
    for name in &selection.names {
        match get_one(&conn.client, &selection.target, name, shape).await {
            Ok(page) => found.push(page),
            Err(err) if not_found(&err) => {
                if !list.ignore_not_found {
                    missing.push(crate::error::report(&err, None).map(|(line, _)| line).unwrap_or_default());
                }
            }
            Err(err) => return Err(err),
        }
    }
    let items: Vec<&Item> = found.iter().flat_map(|page| &page.items).collect();
    match selection.printing {
        Printing::Table { wide } if !items.is_empty() => {
            let columns = found.iter().find_map(|page| page.columns.as_deref());
            let layout = Layout::new(columns, options(wide));
            let header = (!args.no_headers).then(|| layout.headers().to_vec());
            let rows: Vec<_> = items.iter().map(|item| layout.row(item, None)).collect();
            TableWriter::new(out, header).write_rows(&rows)?;
        }
        Printing::Table { .. } => {}
        // kubectl prints an empty List for names it did not find, unless told to ignore them.
        Printing::Objects(_) if items.is_empty() && (list.ignore_not_found || selection.names.len() == 1) => {}
        Printing::Objects(format) => {
            let printer = selection.object_printer(format, args);
            if selection.names.len() == 1 {
                if let Some(item) = items.first() {
                    printer.object(out, item)?;
                }
            } else {
                let mut writer = printer.list(out);
                for item in items {
                    writer.item(item)?;
                }
                writer.finish()?;
            }
        }
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Reported(missing).into()),
    }
}

fn not_found(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| matches!(cause.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404))
}
