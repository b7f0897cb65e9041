//! `samplectl list`: any resource, page by page, printed as kubectl prints it.

use std::io::Write;

use anyhow::Result;
use futures::TryStreamExt;

use crate::cli::ListArgs;
use crate::cluster::client::Connection;
use crate::cluster::read::{get_one, list_pages};
use crate::commands::select::{Printing, list_params, select};
use crate::output::table::{Layout, LayoutOptions, TableWriter};

pub async fn run(conn: &Connection, namespace: Option<&str>, args: &ListArgs, out: &mut impl Write) -> Result<()> {
    let args = &args.select;
    let selection = select(conn, namespace, args).await?;
    let target = &selection.target;
    let shape = selection.printing.shape();
    let options = |wide| LayoutOptions {
        wide,
        namespace: target.namespace.is_none() && target.resolved.namespaced,
        labels: args.show_labels,
        event: false,
    };

    if let Some(name) = &selection.name {
        let page = get_one(&conn.client, target, name, shape).await?;
        let Some(item) = page.items.first() else { return Ok(()) };
        match selection.printing {
            Printing::Table { wide } => {
                let layout = Layout::new(page.columns.as_deref(), options(wide));
                let header = (!args.no_headers).then(|| layout.headers().to_vec());
                TableWriter::new(out, header).write_rows(&[layout.row(item, None)])?;
            }
            Printing::Objects(format) => selection.object_printer(format, args).object(out, item)?,
        }
        return Ok(());
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
            if count == 0 {
                eprintln!("{}", target.nothing_found());
            }
        }
        Printing::Objects(format) => {
            let mut writer = selection.object_printer(format, args).list(out);
            let mut resource_version = String::new();
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
                resource_version = page.resource_version;
            }
            writer.finish(&resource_version)?;
        }
    }
    Ok(())
}
