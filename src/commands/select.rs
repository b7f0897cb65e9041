//! What `list` and `watch` share: turning the resource arguments and namespace flags (already checked by
//! `cli`) into a `Target` and a way of printing it.

use crate::cluster::stream::Selectors;
use anyhow::{Result, bail};

use crate::cli::{OutputFormat, Resource, SelectArgs};
use crate::cluster::client::Connection;
use crate::cluster::read::{ReadAs, Target};
use crate::cluster::resolve::{resolve_gvr, resolve_names};
use crate::output::objects::{ObjectFormat, ObjectPrinter};
use crate::output::paged::TableSpec;
use crate::output::table::LayoutOptions;
use crate::output::template::TemplateFormat;

/// How the selected objects are printed.
#[derive(Debug, Clone, PartialEq)]
pub enum Printing {
    Table { wide: bool },
    Objects(ObjectFormat),
    Template(TemplateFormat),
}

impl Printing {
    pub fn shape(&self) -> ReadAs {
        match self {
            Printing::Table { .. } => ReadAs::Table,
            Printing::Objects(_) | Printing::Template(_) => ReadAs::Objects,
        }
    }
}

pub struct Selection {
    /// What to read: one resource, or several (`cm,sa`, or a category such as `all`), in the order named.
    pub targets: Vec<Target>,
    /// The objects named, in the order given; empty for the whole collection.
    pub names: Vec<String>,
    pub printing: Printing,
}

impl Selection {
    pub fn object_printer(format: ObjectFormat, target: &Target, args: &SelectArgs) -> ObjectPrinter {
        ObjectPrinter { format, resolved: target.resolved.clone(), show_managed_fields: args.show_managed_fields }
    }

    /// `No resources found in NS namespace.` when every resource read was in that namespace, else `No
    /// resources found`: kubectl's words.
    pub fn nothing_found(&self) -> String {
        match self.targets.iter().map(|t| t.namespace.as_deref()).collect::<Option<Vec<_>>>() {
            Some(namespaces) if !namespaces.is_empty() => self.targets[0].nothing_found(),
            _ => "No resources found".to_owned(),
        }
    }
}

pub fn printing(args: &SelectArgs) -> Printing {
    match &args.output {
        None => Printing::Table { wide: false },
        Some(OutputFormat::Wide) => Printing::Table { wide: true },
        Some(OutputFormat::Json) => Printing::Objects(ObjectFormat::Json),
        Some(OutputFormat::Yaml) => Printing::Objects(ObjectFormat::Yaml),
        Some(OutputFormat::Name) => Printing::Objects(ObjectFormat::Name),
        Some(OutputFormat::Template(format)) => {
            let mut format = format.clone();
            if let TemplateFormat::JsonPath(template) | TemplateFormat::JsonPathAsJson(template) = &mut format {
                template.allow_missing_keys = args.allow_missing_template_keys;
            }
            Printing::Template(format)
        }
    }
}

pub async fn select(conn: &Connection, namespace: Option<&str>, args: &SelectArgs) -> Result<Selection> {
    let (resource, names) = args.resource();
    let resolved = match resource {
        Resource::Gvr(gvr) => vec![resolve_gvr(&conn.client, gvr).await?],
        Resource::Name(resource) => resolve_names(&conn.client, resource).await?,
        Resource::Missing => bail!("internal error: no resource named; the command line should have said so"),
    };
    if let (Resource::Name(resource), [_, _, ..], [_, ..]) = (resource, resolved.as_slice(), names) {
        // A category (`all`) stands for several; commas were refused with names already.
        bail!("{resource:?} names {} resource types; object names go with one type only", resolved.len());
    }
    let targets = resolved
        .into_iter()
        .map(|resolved| {
            let namespace = match (resolved.namespaced, args.all_namespaces) {
                (false, _) | (true, true) => None,
                (true, false) => Some(namespace.unwrap_or(&conn.default_namespace).to_owned()),
            };
            Target { resolved, namespace }
        })
        .collect();
    Ok(Selection { targets, names: names.to_vec(), printing: printing(args) })
}

/// Whether stdout is a terminal: there, object text is escaped and cells are measured in columns;
/// piped, output is exactly kubectl's.
pub fn on_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}

/// The width to fit tables to: the terminal's, unless stdout is not one or `--wide-cells` was given.
pub fn fit(args: &SelectArgs) -> Option<usize> {
    crate::output::terminal::stdout_width().filter(|_| !args.wide_cells)
}

/// How `target`'s table looks, as the flags say: with `event`, a watch's EVENT column first.
pub fn table_spec(target: &Target, args: &SelectArgs, wide: bool, event: bool) -> TableSpec {
    let terminal = on_terminal();
    TableSpec {
        layout: LayoutOptions {
            wide,
            namespace: target.namespace.is_none() && target.resolved.namespaced,
            labels: args.show_labels,
            label_columns: args.label_columns.clone(),
            event,
            // On a terminal, object text cannot drive it; piped, it is exactly what kubectl prints.
            escape: terminal,
        },
        headers: !args.no_headers,
        fit: fit(args),
        terminal,
    }
}

/// `-l`, `--field-selector` and `--chunk-size` (0: everything at once, as with `--sort-by`: kubectl
/// sorts only what one answer holds, so it asks for everything in one).
pub fn selectors(args: &SelectArgs) -> Selectors {
    Selectors {
        labels: args.selector.clone(),
        fields: args.field_selector.clone(),
        page_size: (args.chunk_size > 0 && args.sort_by.is_none()).then_some(args.chunk_size),
    }
}
