//! One table printed as its objects arrive, page by page (`list`) or event by event (`watch`): the first
//! rows (or the watch's first list) fix the columns from the server's, the header goes once before the
//! first row, and later rows line up with earlier ones. `list` and `watch` only feed it.

use std::io::{self, Write};

use super::table::{Layout, LayoutOptions, TableWriter};
use crate::cluster::changes::Change;
use crate::cluster::read::{Column, Item};

/// How a table looks.
#[derive(Debug, Clone, Default)]
pub struct TableSpec {
    pub layout: LayoutOptions,
    /// A header line (no `--no-headers`).
    pub headers: bool,
    /// The width to fit rows to, cutting long cells; `None` keeps every cell whole.
    pub fit: Option<usize>,
    /// stdout is a terminal: cells are measured in terminal columns.
    pub terminal: bool,
}

enum State<W: Write> {
    /// The columns are not known yet.
    Pending(W),
    Printing {
        layout: Layout,
        name_column: Option<usize>,
        writer: TableWriter<W>,
    },
    /// Between the two, or after a failed write.
    Broken,
}

pub struct PagedTable<W: Write> {
    spec: TableSpec,
    state: State<W>,
    /// A blank line before the first row: the tables of several resources stand apart.
    apart: bool,
    /// What goes before each NAME (`deployment.apps/`), when several resources are listed.
    qualify: Option<String>,
}

impl<W: Write> PagedTable<W> {
    pub fn new(out: W, spec: TableSpec) -> Self {
        PagedTable { spec, state: State::Pending(out), apart: false, qualify: None }
    }

    /// Puts a blank line before the table, if it prints a row.
    pub fn apart(mut self, apart: bool) -> Self {
        self.apart = apart;
        self
    }

    /// Names read `prefix` + name, as kubectl prints them when several resources are listed.
    pub fn qualify(mut self, prefix: Option<String>) -> Self {
        self.qualify = prefix;
        self
    }

    /// Fixes the columns now, from the server's (`None`: it sent no Table), unless already fixed. A
    /// watch's EVENT column is as wide as its widest word from the start, so rows do not shift.
    pub fn columns(&mut self, columns: Option<&[Column]>) -> io::Result<()> {
        let state = std::mem::replace(&mut self.state, State::Broken);
        let State::Pending(mut out) = state else {
            self.state = state;
            return Ok(());
        };
        if self.apart {
            writeln!(out)?;
        }
        let layout = Layout::new(columns, self.spec.layout.clone());
        let header = self.spec.headers.then(|| layout.headers().to_vec());
        let name_column = layout.headers().iter().position(|h| h == "NAME");
        let mut writer = TableWriter::new(out, header).fit_to(self.spec.fit).on_terminal(self.spec.terminal);
        if self.spec.layout.event {
            writer.reserve(0, Change::Modified.word().len());
        }
        self.state = State::Printing { layout, name_column, writer };
        Ok(())
    }

    /// Prints a page of objects; the first one that holds any fixes the columns from `columns`.
    pub fn page<'a>(
        &mut self,
        columns: Option<&[Column]>,
        items: impl IntoIterator<Item = &'a Item>,
    ) -> io::Result<()> {
        let mut items = items.into_iter().peekable();
        if items.peek().is_none() {
            return Ok(());
        }
        self.columns(columns)?;
        let State::Printing { layout, name_column, writer } = &mut self.state else {
            return Err(io::Error::other("internal error: the table's columns are not set up"));
        };
        let rows: Vec<Vec<String>> = items
            .map(|item| {
                let mut row = layout.row(item, None);
                if let (Some(prefix), Some(column)) = (&self.qualify, *name_column) {
                    row[column] = format!("{prefix}{}", item.name);
                }
                row
            })
            .collect();
        writer.write_rows(&rows)
    }

    /// Prints one watch event; the columns must be fixed.
    pub fn event(&mut self, change: Change, item: &Item) -> io::Result<()> {
        let State::Printing { layout, writer, .. } = &mut self.state else {
            return Err(io::Error::other("internal error: the table's columns are not set up"));
        };
        writer.write_rows(&[layout.row(item, Some(change.word()))])
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn item(name: &str, data: &str) -> Item {
        Item {
            uid: name.into(),
            resource_version: "1".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            labels: Default::default(),
            creation_timestamp: None,
            cells: Some(vec![json!(name), json!(data)]),
            object: None,
        }
    }

    fn columns() -> Vec<Column> {
        vec![Column { name: "Name".into(), priority: 0 }, Column { name: "Data".into(), priority: 0 }]
    }

    fn spec(event: bool) -> TableSpec {
        TableSpec { layout: LayoutOptions { event, ..LayoutOptions::default() }, headers: true, ..TableSpec::default() }
    }

    fn printed(table: PagedTable<Vec<u8>>) -> String {
        match table.state {
            State::Pending(out) => String::from_utf8(out).unwrap(),
            State::Printing { writer, .. } => String::from_utf8(writer.into_inner()).unwrap(),
            State::Broken => panic!("broken"),
        }
    }

    #[test]
    fn pages_print_under_one_header_from_the_first_page_with_rows() {
        let mut table = PagedTable::new(Vec::new(), spec(false)).apart(true).qualify(Some("configmap/".into()));
        table.page(Some(&columns()), &[]).unwrap();
        assert_eq!(printed(table), "", "no header, no blank line for nothing");

        let mut table = PagedTable::new(Vec::new(), spec(false)).apart(true).qualify(Some("configmap/".into()));
        table.page(Some(&columns()), &[]).unwrap();
        table.page(Some(&columns()), &[item("a", "1")]).unwrap();
        table.page(None, &[item("bb", "22")]).unwrap();
        // Each page is printed as it arrives: a later page widens a column, never the rows above it.
        assert_eq!(printed(table), "\nNAME          DATA\nconfigmap/a   1\nconfigmap/bb   22\n");
    }

    #[test]
    fn a_watch_fixes_its_columns_at_the_list_with_room_for_every_event() {
        let mut table = PagedTable::new(Vec::new(), spec(true));
        table.columns(Some(&columns())).unwrap();
        table.event(Change::Added, &item("a", "1")).unwrap();
        table.event(Change::Modified, &item("a", "2")).unwrap();
        assert_eq!(printed(table), "EVENT      NAME   DATA\nADDED      a      1\nMODIFIED   a      2\n");
    }

    #[test]
    fn an_event_before_the_columns_is_an_error_not_a_panic() {
        let mut table = PagedTable::new(Vec::new(), spec(true));
        assert!(table.event(Change::Added, &item("a", "1")).is_err());
    }
}
