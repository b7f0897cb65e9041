//! What `list` and `watch` share: turning the resource arguments and namespace flags into a `Target`, and
//! checking flag combinations the way kubectl does.

use anyhow::Result;
use kube::api::ListParams;

use crate::cli::{OutputFormat, SelectArgs};
use crate::client::Connection;
use crate::error::UsageError;
use crate::fetch::{Shape, Target};
use crate::output::objects::{ObjectFormat, ObjectPrinter};
use crate::resource::{Gvr, resolve_gvr, resolve_name};

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
    pub name: Option<String>,
    pub printing: Printing,
}

impl Selection {
    pub fn object_printer(&self, format: ObjectFormat, args: &SelectArgs) -> ObjectPrinter {
        ObjectPrinter { format, resolved: self.target.resolved.clone(), show_managed_fields: args.show_managed_fields }
    }
}

pub fn printing(args: &SelectArgs) -> Result<Printing, UsageError> {
    let printing = match args.output {
        None => Printing::Table { wide: false },
        Some(OutputFormat::Wide) => Printing::Table { wide: true },
        Some(OutputFormat::Json) => Printing::Objects(ObjectFormat::Json),
        Some(OutputFormat::Yaml) => Printing::Objects(ObjectFormat::Yaml),
        Some(OutputFormat::Name) => Printing::Objects(ObjectFormat::Name),
    };
    if args.show_labels && matches!(printing, Printing::Objects(_)) {
        let format = format!("{:?}", args.output.unwrap()).to_lowercase();
        return Err(UsageError(format!("--show-labels option cannot be used with {format} printer")));
    }
    Ok(printing)
}

pub async fn select(conn: &Connection, namespace: Option<&str>, args: &SelectArgs) -> Result<Selection> {
    let printing = printing(args)?;
    let (resolved, name) = match (&args.gvr, args.names.as_slice()) {
        (Some(gvr), [_, extra, ..]) => {
            return Err(UsageError(format!(
                "with --gvr, give at most one object name; unexpected {extra:?} (the resource is {gvr:?})"
            ))
            .into());
        }
        (Some(gvr), names) => (resolve_gvr(&conn.client, &Gvr::parse(gvr)?, gvr).await?, names.first().cloned()),
        (None, [resource, rest @ ..]) => (resolve_name(&conn.client, resource).await?, rest.first().cloned()),
        (None, []) => {
            return Err(UsageError(
                "name a resource: --gvr GROUP/VERSION/RESOURCE (e.g. --gvr example.com/v1alpha1/samples) or a \
                 resource name (e.g. samples)"
                    .to_owned(),
            )
            .into());
        }
    };
    if args.all_namespaces && name.is_some() {
        return Err(UsageError("a resource cannot be retrieved by name across all namespaces".to_owned()).into());
    }
    let namespace = match (resolved.namespaced, args.all_namespaces) {
        (false, _) | (true, true) => None,
        (true, false) => Some(namespace.unwrap_or(&conn.default_namespace).to_owned()),
    };
    Ok(Selection { target: Target { resolved, namespace }, name, printing })
}

pub fn list_params(args: &SelectArgs) -> ListParams {
    ListParams {
        label_selector: args.selector.clone(),
        field_selector: args.field_selector.clone(),
        limit: (args.chunk_size > 0).then_some(args.chunk_size),
        ..ListParams::default()
    }
}
