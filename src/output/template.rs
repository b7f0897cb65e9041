//! Output through a template: `-o jsonpath=`, `-o jsonpath-as-json=` and custom columns, over what kubectl
//! gives them. Several objects are put in a `List` (`apiVersion: v1`, `kind: List`, the items, and a
//! `resourceVersion` of `""`) so that a template written for `kubectl get -o jsonpath` finds `.items`;
//! one object named alone, and each object of a watch, is given as it is.

use std::io::Write;

use serde_json::{Value, json};

use super::columns::Columns;
use super::go_print::go_sharp_v;
use super::jsonpath::Template;
use super::table::TableWriter;

#[derive(Debug, Clone, PartialEq)]
pub enum TemplateFormat {
    JsonPath(Template),
    JsonPathAsJson(Template),
    Columns(Columns),
}

/// A template that could not be applied, worded as kubectl words it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

impl TemplateFormat {
    /// The name kubectl gives this printer in its messages.
    pub fn name(&self) -> &'static str {
        match self {
            TemplateFormat::JsonPath(_) => "jsonpath",
            TemplateFormat::JsonPathAsJson(_) => "jsonpath-as-json",
            TemplateFormat::Columns(_) => "custom-columns",
        }
    }

    /// Prints `objects`: one named alone (`single`) as it is, otherwise as a `List`.
    pub fn print(
        &self,
        out: &mut impl Write,
        objects: &[&Value],
        single: bool,
        no_headers: bool,
        terminal: bool,
    ) -> anyhow::Result<()> {
        match self {
            TemplateFormat::Columns(columns) => {
                let header = (columns.header_always || !no_headers).then(|| columns.headers.clone());
                let rows = objects
                    .iter()
                    .map(|object| columns.row(object, terminal))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(TemplateError)?;
                TableWriter::new(&mut *out, header).on_terminal(terminal).write_rows(&rows)?;
            }
            TemplateFormat::JsonPath(template) | TemplateFormat::JsonPathAsJson(template) => {
                let data = match (single, objects) {
                    (true, [object]) => (*object).clone(),
                    _ => list(objects),
                };
                out.write_all(self.apply(template, &data)?.as_bytes())?;
            }
        }
        out.flush()?;
        Ok(())
    }

    fn apply(&self, template: &Template, data: &Value) -> Result<String, TemplateError> {
        let result = match self {
            TemplateFormat::JsonPathAsJson(_) => template.execute_as_json(data),
            _ => template.execute(data),
        };
        result.map_err(|err| {
            TemplateError(format!(
                "error executing jsonpath {:?}: Error executing template: {err}. Printing more information for \
                 debugging the template:\n\ttemplate was:\n\t\t{}\n\tobject given to jsonpath engine was:\n\t\t{}\n\n",
                template.raw,
                template.raw,
                go_sharp_v(data)
            ))
        })
    }
}

fn list(objects: &[&Value]) -> Value {
    json!({
        "apiVersion": "v1",
        "items": objects,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    })
}

/// Watch events through a template: custom columns as a table with its header once, a JSONPath applied
/// to each object as it comes.
pub struct TemplateEvents<W: Write> {
    format: TemplateFormat,
    table: TableWriter<W>,
    terminal: bool,
}

impl<W: Write> TemplateEvents<W> {
    pub fn new(format: TemplateFormat, out: W, no_headers: bool, terminal: bool) -> Self {
        let header = match &format {
            TemplateFormat::Columns(columns) if columns.header_always || !no_headers => Some(columns.headers.clone()),
            _ => None,
        };
        TemplateEvents { format, table: TableWriter::new(out, header).on_terminal(terminal), terminal }
    }

    /// The objects that exist when the watch starts. kubectl aligns custom columns over all of them and
    /// the header together, as one table.
    pub fn list(&mut self, objects: &[&Value]) -> anyhow::Result<()> {
        let TemplateFormat::Columns(columns) = &self.format else {
            return objects.iter().try_for_each(|object| self.event(object));
        };
        if objects.is_empty() {
            // No header yet: it comes with the first row, as kubectl prints it.
            return Ok(());
        }
        let rows: Vec<Vec<String>> = objects
            .iter()
            .map(|object| columns.row(object, self.terminal))
            .collect::<Result<_, _>>()
            .map_err(TemplateError)?;
        self.table.write_rows(&rows)?;
        Ok(())
    }

    /// One change. A custom-columns row keeps the widths the columns have had (they only grow), as
    /// kubectl's tabwriter remembers them across flushes.
    pub fn event(&mut self, object: &Value) -> anyhow::Result<()> {
        match &self.format {
            TemplateFormat::Columns(columns) => {
                let row = columns.row(object, self.terminal).map_err(TemplateError)?;
                self.table.write_rows(&[row])?;
            }
            TemplateFormat::JsonPath(template) | TemplateFormat::JsonPathAsJson(template) => {
                let text = self.format.apply(template, object)?;
                let out = self.table.out_mut();
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
        }
        Ok(())
    }
}
