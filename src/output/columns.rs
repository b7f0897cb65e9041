//! `-o custom-columns=NAME:.path,...` and `-o custom-columns-file=FILE`, as kubectl's customcolumn.go reads
//! and prints them: one JSONPath per column (relaxed: `.a.b`, `a.b`, `{.a.b}`), `<none>` where it finds
//! nothing, several values joined by commas, each as Go's `fmt.Sprint` prints it (`map[k:v]`, `[a b]`).
//! The rows are laid out by the same tabwriter as every other table.

use serde_json::Value;

use super::jsonpath::Template;

#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    pub headers: Vec<String>,
    templates: Vec<Template>,
    /// A columns file always prints its header: kubectl ignores `--no-headers` for it.
    pub header_always: bool,
}

impl Columns {
    /// `-o custom-columns=SPEC`.
    pub fn from_spec(spec: &str) -> Result<Self, String> {
        if spec.is_empty() {
            return Err("custom-columns format specified but no custom columns given".into());
        }
        let mut headers = Vec::new();
        let mut templates = Vec::new();
        for part in spec.split(',') {
            let Some((header, path)) = part.split_once(':') else {
                return Err(format!("unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>"));
            };
            headers.push(header.to_owned());
            templates.push(column_template(path)?);
        }
        Ok(Columns { headers, templates, header_always: false })
    }

    /// `-o custom-columns-file=FILE`'s text: a line of headers, then a line of paths, both split on
    /// whitespace.
    pub fn from_file_text(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        let expected =
            "Expected format is one line of space separated headers, one line of space separated column specs.";
        let headers: Vec<String> = match lines.next() {
            Some(line) => line.split_whitespace().map(str::to_owned).collect(),
            None => return Err(format!("invalid template, missing header line. {expected}")),
        };
        let paths: Vec<&str> = match lines.next() {
            Some(line) => line.split_whitespace().collect(),
            None => return Err(format!("invalid template, missing spec line. {expected}")),
        };
        if headers.len() != paths.len() {
            return Err(format!(
                "number of headers ({}) and field specifications ({}) don't match",
                headers.len(),
                paths.len()
            ));
        }
        let templates = paths.iter().map(|path| column_template(path)).collect::<Result<_, _>>()?;
        Ok(Columns { headers, templates, header_always: true })
    }

    /// One object's row. `terminal`: cells are escaped for a terminal; otherwise ESC and CR are
    /// written as kubectl's `EscapeTerminal` writes them.
    pub fn row(&self, object: &Value, terminal: bool) -> Result<Vec<String>, String> {
        self.templates
            .iter()
            .map(|template| {
                let found = template.find(object)?;
                let values: Vec<String> = found.iter().flatten().map(|v| v.to_go_string()).collect();
                let cell = match found.first().is_none_or(Vec::is_empty) {
                    true => "<none>".to_owned(),
                    false => values.join(","),
                };
                Ok(match terminal {
                    true => super::terminal::escape(&cell).into_owned(),
                    false => cell.replace('\x1b', "^[").replace('\r', "\\r"),
                })
            })
            .collect()
    }
}

fn column_template(path: &str) -> Result<Template, String> {
    let relaxed = Template::relaxed(path)?;
    Template::parse(&relaxed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn specs_and_files_read_as_kubectl_reads_them() {
        let columns =
            Columns::from_spec("NAME:.metadata.name,PORTS:spec.ports[*].port,LABELS:{.metadata.labels}").unwrap();
        assert_eq!(columns.headers, ["NAME", "PORTS", "LABELS"]);
        let object = json!({
            "metadata": {"name": "web", "labels": {"b": "2", "a": "1"}},
            "spec": {"ports": [{"port": 80}, {"port": 443}]},
        });
        assert_eq!(columns.row(&object, false).unwrap(), ["web", "80,443", "map[a:1 b:2]"]);
        assert_eq!(columns.row(&json!({}), false).unwrap(), ["<none>", "<none>", "<none>"]);
        let escaped = columns.row(&json!({"metadata": {"name": "a\x1b]0;x\rb"}}), false).unwrap();
        assert_eq!(escaped[0], "a^[]0;x\\rb");

        let file = Columns::from_file_text("NAME   RV\n.metadata.name  {.metadata.resourceVersion}\n").unwrap();
        assert_eq!(file.headers, ["NAME", "RV"]);
        assert!(file.header_always);

        for (spec, error) in [
            ("", "custom-columns format specified but no custom columns given"),
            ("NAME", "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>"),
            ("NAME:{.a}{.b}", "unexpected path string, expected a 'name1.name2'"),
            ("NAME:.a[", "unterminated array"),
        ] {
            let err = Columns::from_spec(spec).unwrap_err();
            assert!(err.starts_with(error), "{spec}: {err}");
        }
        assert_eq!(
            Columns::from_file_text("A B\n.a\n").unwrap_err(),
            "number of headers (2) and field specifications (1) don't match"
        );
        assert!(Columns::from_file_text("A\n").unwrap_err().starts_with("invalid template, missing spec line."));
    }
}
