//! `samplectl list`: any resource, page by page, printed as kubectl prints it.

use std::io::Write;

use anyhow::Result;
use futures::TryStreamExt;

use kube::api::ListParams;

use crate::cli::{ListArgs, SelectArgs};
use crate::cluster::client::Connection;
use crate::cluster::read::{Item, Page, ReadAs, Target, get_one, list_pages};
use crate::commands::select::{Printing, Selection, on_terminal, select, selectors, table_spec};
use crate::error::{Reported, is_not_found};
use crate::output::paged::PagedTable;

pub async fn run(conn: &Connection, namespace: Option<&str>, list: &ListArgs, out: &mut impl Write) -> Result<()> {
    let args = &list.select;
    let selection = select(conn, namespace, args).await?;
    if !selection.names.is_empty() {
        return named(conn, &selection, list, out).await;
    }
    let lp = selectors(args).list_params();
    let several = selection.targets.len() > 1;
    match &selection.printing {
        Printing::Table { wide } => {
            let mut printed = 0;
            for target in &selection.targets {
                let table = PagedTable::new(&mut *out, table_spec(target, args, *wide, false))
                    .apart(printed > 0)
                    .qualify(several.then(|| target.resolved.object_name("")));
                printed += table_pages(conn, target, &lp, args, table).await?;
            }
            // kubectl says so only when it printed nothing, had no error, and was not told to ignore.
            if printed == 0 && !list.ignore_not_found {
                eprintln!("{}", selection.nothing_found());
            }
        }
        Printing::Objects(format) if args.sort_by.is_none() => {
            // Several resources make one List, as kubectl prints them.
            let mut writer = Selection::object_printer(*format, &selection.targets[0], args).list(&mut *out);
            for target in &selection.targets {
                let mut pages = std::pin::pin!(list_pages(&conn.client, target, &lp, ReadAs::Objects));
                while let Some(page) = pages.try_next().await? {
                    logged(&page);
                    for item in &page.items {
                        writer.item(item)?;
                    }
                }
            }
            writer.finish()?;
        }
        // Sorted, or through a template: both need the whole list first, as they do in kubectl.
        printing => {
            let mut items = Vec::new();
            for target in &selection.targets {
                let mut pages = std::pin::pin!(list_pages(&conn.client, target, &lp, ReadAs::Objects));
                while let Some(page) = pages.try_next().await? {
                    logged(&page);
                    items.extend(page.items);
                }
            }
            let mut items: Vec<&Item> = items.iter().collect();
            objects(printing, &selection.targets[0], args, &mut items, false, out)?;
        }
    }
    Ok(())
}

fn logged(page: &Page) {
    tracing::debug!(items = page.items.len(), "listed a page: {} items", page.items.len());
}

/// Puts `items` in `--sort-by`'s order, if given. Every item must carry its whole object.
fn sort<T: std::borrow::Borrow<Item>>(args: &SelectArgs, items: &mut Vec<T>) -> Result<()> {
    let Some(sort_by) = &args.sort_by else { return Ok(()) };
    let null = serde_json::Value::Null;
    let objects: Vec<&serde_json::Value> = items.iter().map(|i| i.borrow().object.as_ref().unwrap_or(&null)).collect();
    let order = sort_by.order(&objects).map_err(anyhow::Error::msg)?;
    let mut slots: Vec<Option<T>> = std::mem::take(items).into_iter().map(Some).collect();
    *items = order.into_iter().map(|i| slots[i].take().expect("each index comes once")).collect();
    Ok(())
}

/// Whole objects, sorted if asked, in json, yaml or name form or through a template: one object named
/// alone (`single`) as itself, anything else as a List.
fn objects(
    printing: &Printing,
    target: &Target,
    args: &SelectArgs,
    items: &mut Vec<&Item>,
    single: bool,
    out: &mut impl Write,
) -> Result<()> {
    if !single {
        sort(args, items)?;
    }
    match printing {
        Printing::Objects(format) => {
            let printer = Selection::object_printer(*format, target, args);
            match (single, items.as_slice()) {
                (true, [item]) => printer.object(out, item)?,
                _ => {
                    let mut writer = printer.list(out);
                    for item in items.iter() {
                        writer.item(item)?;
                    }
                    writer.finish()?;
                }
            }
        }
        Printing::Template(format) => {
            let null = serde_json::Value::Null;
            let objects: Vec<&serde_json::Value> = items.iter().map(|i| i.object.as_ref().unwrap_or(&null)).collect();
            let terminal = on_terminal();
            format.print(out, &objects, single, args.no_headers, terminal)?;
        }
        Printing::Table { .. } => unreachable!("tables are printed by `table`"),
    }
    Ok(())
}

/// One resource's table, printed page by page as the pages arrive; returns how many objects it held.
async fn table_pages(
    conn: &Connection,
    target: &Target,
    lp: &ListParams,
    args: &SelectArgs,
    mut table: PagedTable<impl Write>,
) -> Result<usize> {
    let shape = if args.sort_by.is_some() { ReadAs::TableWithObjects } else { ReadAs::Table };
    let mut pages = std::pin::pin!(list_pages(&conn.client, target, lp, shape));
    let (mut count, mut read) = (0, 0);
    while let Some(mut page) = pages.try_next().await? {
        // Sorted per table, as kubectl sorts each resource's Table (one page: see `selectors`).
        sort(args, &mut page.items)?;
        read += 1;
        count += page.items.len();
        tracing::debug!(
            page = read,
            items = page.items.len(),
            "listed a page: page {read}, {} items",
            page.items.len()
        );
        // kubectl prints no header for nothing: the first page with rows fixes the columns.
        table.page(page.columns.as_deref(), &page.items)?;
    }
    Ok(count)
}

/// Objects by name, as `kubectl get RESOURCE NAME...` prints them: the ones found in the order given (one
/// table, or a `List`, or for a single name the object itself), and a `NotFound` line on stderr for each
/// one missing, which makes the exit status 1 unless `--ignore-not-found`.
async fn named(conn: &Connection, selection: &Selection, list: &ListArgs, out: &mut impl Write) -> Result<()> {
    let args = &list.select;
    let shape = match (&selection.printing, &args.sort_by) {
        (Printing::Table { .. }, Some(_)) => ReadAs::TableWithObjects,
        (printing, _) => printing.shape(),
    };
    // select() allows names with one resource only.
    let target = &selection.targets[0];
    let mut found: Vec<Page> = Vec::new();
    let mut missing = Vec::new();
    for name in &selection.names {
        match get_one(&conn.client, target, name, list.subresource.as_deref(), shape).await {
            Ok(page) => found.push(page),
            Err(err) if is_not_found(&err) => {
                if !list.ignore_not_found {
                    missing.push(crate::error::report(&err, None).map(|(line, _)| line).unwrap_or_default());
                }
            }
            Err(err) => return Err(err),
        }
    }
    let mut items: Vec<&Item> = found.iter().flat_map(|page| &page.items).collect();
    match &selection.printing {
        Printing::Table { wide } if !items.is_empty() => {
            if items.len() > 1 {
                sort(args, &mut items)?;
            }
            let columns = found.iter().find_map(|page| page.columns.as_deref());
            PagedTable::new(out, table_spec(target, args, *wide, false)).page(columns, items.iter().copied())?;
        }
        Printing::Table { .. } => {}
        // kubectl prints an empty List for names it did not find, unless told to ignore them.
        _ if items.is_empty() && (list.ignore_not_found || selection.names.len() == 1) => {}
        printing => objects(printing, target, args, &mut items, selection.names.len() == 1, out)?,
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Reported(missing).into()),
    }
}
