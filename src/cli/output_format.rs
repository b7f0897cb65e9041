//! `-o`: the output formats kubectl takes, read as kubectl reads them. A template (and its file) is read
//! and parsed while the command line is, so that a mistake in it is a usage error in kubectl's words.

use crate::output::columns::Columns;
use crate::output::jsonpath::Template;
use crate::output::template::TemplateFormat;

/// What `-o` takes, for completion: in kubectl's order, with `=` where a value must follow.
pub const OUTPUT_FORMATS: [&str; 9] = [
    "json",
    "yaml",
    "name",
    "jsonpath=",
    "jsonpath-as-json=",
    "jsonpath-file=",
    "custom-columns=",
    "custom-columns-file=",
    "wide",
];

#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    Wide,
    Json,
    Yaml,
    Name,
    Template(TemplateFormat),
}

impl OutputFormat {
    /// `-o`'s value, as kubectl reads it; a template is read (and its file too) and parsed here, so that
    /// a mistake in it is a usage error in kubectl's words.
    pub(super) fn parse(value: &str) -> Result<Self, String> {
        let (format, argument) = match value.split_once('=') {
            Some((format, argument)) => (format, Some(argument)),
            None => (value, None),
        };
        let read = |path: &str, what: &str| {
            std::fs::read_to_string(path).map_err(|err| format!("error reading {what} {path}, {err}"))
        };
        let jsonpath = |text: &str| {
            if text.is_empty() {
                return Err("template format specified but no template given".to_owned());
            }
            Template::parse(text).map_err(|err| format!("error parsing jsonpath {text}, {err}"))
        };
        Ok(match (format, argument) {
            ("wide", None) => OutputFormat::Wide,
            ("json", None) => OutputFormat::Json,
            ("yaml", None) => OutputFormat::Yaml,
            ("name", None) => OutputFormat::Name,
            ("jsonpath", text) => OutputFormat::Template(TemplateFormat::JsonPath(jsonpath(text.unwrap_or(""))?)),
            ("jsonpath-as-json", text) => {
                OutputFormat::Template(TemplateFormat::JsonPathAsJson(jsonpath(text.unwrap_or(""))?))
            }
            ("jsonpath-file", path) => {
                let path = path.filter(|p| !p.is_empty()).ok_or("template format specified but no template given")?;
                OutputFormat::Template(TemplateFormat::JsonPath(jsonpath(&read(path, "--template")?)?))
            }
            ("custom-columns", spec) => {
                OutputFormat::Template(TemplateFormat::Columns(Columns::from_spec(spec.unwrap_or(""))?))
            }
            ("custom-columns-file", path) => {
                let path = path
                    .filter(|p| !p.is_empty())
                    .ok_or("custom-columns format specified but no custom columns given")?;
                OutputFormat::Template(TemplateFormat::Columns(Columns::from_file_text(&read(path, "template")?)?))
            }
            _ => {
                return Err(format!(
                    "unable to match a printer suitable for the output format {value:?}, allowed formats are: \
                     custom-columns,custom-columns-file,json,jsonpath,jsonpath-as-json,jsonpath-file,name,wide,yaml"
                ));
            }
        })
    }

    /// The name kubectl gives this format in its messages.
    pub fn name(&self) -> &'static str {
        match self {
            OutputFormat::Wide => "wide",
            OutputFormat::Json => "json",
            OutputFormat::Yaml => "yaml",
            OutputFormat::Name => "name",
            OutputFormat::Template(template) => template.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    #[test]
    fn output_formats_are_read_as_kubectl_reads_them() {
        let err = |value: &str| OutputFormat::parse(value).unwrap_err();
        assert!(matches!(
            OutputFormat::parse("jsonpath={.a}"),
            Ok(OutputFormat::Template(TemplateFormat::JsonPath(_)))
        ));
        assert_eq!(OutputFormat::parse("wide"), Ok(OutputFormat::Wide));
        assert!(err("xml").starts_with("unable to match a printer suitable for the output format \"xml\""));
        assert_eq!(err("jsonpath"), "template format specified but no template given");
        assert_eq!(err("jsonpath={.a"), "error parsing jsonpath {.a, unclosed action");
        assert!(err("jsonpath-file=/nonexistent/t").starts_with("error reading --template /nonexistent/t, "));
        assert!(err("custom-columns-file=/nonexistent/c").starts_with("error reading template /nonexistent/c, "));
        assert_eq!(err("custom-columns-file="), "custom-columns format specified but no custom columns given");
        // Through the command line: a usage error, exit 2.
        let parsed = Cli::try_parse_from(["samplectl", "list", "cm", "-o", "jsonpath={.a"]).unwrap_err();
        assert_eq!(parsed.exit_code(), 2);
        assert!(parsed.to_string().contains("error parsing jsonpath {.a, unclosed action"), "{parsed}");
    }
}
