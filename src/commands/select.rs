//! What `list` and `watch` share: turning the resource arguments and namespace flags (already checked by
//! `cli`) into a `Target` and a way of printing it.

use anyhow::{Result, bail};
use kube::api::ListParams;

use crate::cli::{OutputFormat, Resource, SelectArgs};
use crate::cluster::client::Connection;
use crate::cluster::read::{Shape, Target};
use crate::cluster::resolve::{resolve_gvr, resolve_name};
use crate::output::objects::{ObjectFormat, ObjectPrinter};

/// How the selected objects are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printing {
    Table { wide: bool },
    Objects(ObjectFormat),
}

impl Printing {
    pub fn shape(self) -> Shape {
        match self {
            Printing::Table { .. } => Shape::Table,
            Printing::Objects(_) => Shape::Objects,
        }
    }
}

pub struct Selection {
    pub target: Target,
    /// The objects named, in the order given; empty for the whole collection.
    pub names: Vec<String>,
    pub printing: Printing,
}

impl Selection {
    pub fn object_printer(&self, format: ObjectFormat, args: &SelectArgs) -> ObjectPrinter {
        ObjectPrinter { format, resolved: self.target.resolved.clone(), show_managed_fields: args.show_managed_fields }
    }
}

pub fn printing(args: &SelectArgs) -> Printing {
    match args.output {
        None => Printing::Table { wide: false },
        Some(OutputFormat::Wide) => Printing::Table { wide: true },
        Some(OutputFormat::Json) => Printing::Objects(ObjectFormat::Json),
        Some(OutputFormat::Yaml) => Printing::Objects(ObjectFormat::Yaml),
        Some(OutputFormat::Name) => Printing::Objects(ObjectFormat::Name),
    }
}

pub async fn select(conn: &Connection, namespace: Option<&str>, args: &SelectArgs) -> Result<Selection> {
    let (resource, names) = args.resource();
    let resolved = match resource {
        Resource::Gvr(gvr) => resolve_gvr(&conn.client, gvr).await?,
        Resource::Name(resource) => resolve_name(&conn.client, resource).await?,
        Resource::Missing => bail!("internal error: no resource named; the command line should have said so"),
    };
    let namespace = match (resolved.namespaced, args.all_namespaces) {
        (false, _) | (true, true) => None,
        (true, false) => Some(namespace.unwrap_or(&conn.default_namespace).to_owned()),
    };
    Ok(Selection { target: Target { resolved, namespace }, names: names.to_vec(), printing: printing(args) })
}

pub fn list_params(args: &SelectArgs) -> ListParams {
    ListParams {
        label_selector: args.selector.clone(),
        field_selector: args.field_selector.clone(),
        limit: (args.chunk_size > 0).then_some(args.chunk_size),
        ..ListParams::default()
    }
}
