//! Whole objects as kubectl prints them: `-o json` and `-o yaml` (a `List` when listing, written item by
//! item so a long list is never held in memory), `-o name`, and watch events in each form.

use std::borrow::Cow;
use std::io::{self, Write};

use serde::Serialize;
use serde_json::Value;
use serde_json::ser::PrettyFormatter;

use crate::cluster::read::Item;
use crate::cluster::resolve::Resolved;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectFormat {
    Json,
    Yaml,
    Name,
}

/// kubectl indents JSON by four spaces.
pub fn json_pretty(value: &Value) -> io::Result<String> {
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, PrettyFormatter::with_indent(b"    "));
    value.serialize(&mut ser).map_err(io::Error::other)?;
    String::from_utf8(buf).map_err(io::Error::other)
}

pub fn yaml(value: &Value) -> io::Result<String> {
    serde_yaml::to_string(value).map_err(io::Error::other)
}

fn indent(text: &str, first: &str, rest: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.lines().enumerate() {
        out.push_str(if i == 0 { first } else { rest });
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// How whole objects are printed.
#[derive(Debug, Clone)]
pub struct ObjectPrinter {
    pub format: ObjectFormat,
    pub resolved: Resolved,
    /// kubectl leaves `metadata.managedFields` out unless asked (`--show-managed-fields`).
    pub show_managed_fields: bool,
}

impl ObjectPrinter {
    /// `kind.group/name` (`configmap/name` for the core group), from the object's own apiVersion and kind
    /// (a subresource such as `scale` is another kind than its resource), else from the resource.
    fn name(&self, item: &Item) -> String {
        let object = item.object.as_ref().unwrap_or(&Value::Null);
        match (object["kind"].as_str(), object["apiVersion"].as_str()) {
            (Some(kind), Some(api_version)) => match api_version.split_once('/') {
                Some((group, _)) => format!("{}.{group}/{}", kind.to_lowercase(), item.name),
                None => format!("{}/{}", kind.to_lowercase(), item.name),
            },
            _ => self.resolved.object_name(&item.name),
        }
    }

    fn printable<'a>(&self, item: &'a Item) -> Cow<'a, Value> {
        let object = item.object.as_ref().unwrap_or(&Value::Null);
        if self.show_managed_fields || object["metadata"].get("managedFields").is_none() {
            return Cow::Borrowed(object);
        }
        let mut object = object.clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        Cow::Owned(object)
    }

    /// One object on its own (`list NAME -o json`).
    pub fn object(&self, out: &mut impl Write, item: &Item) -> io::Result<()> {
        match self.format {
            ObjectFormat::Name => writeln!(out, "{}", self.name(item))?,
            ObjectFormat::Json => writeln!(out, "{}", json_pretty(&self.printable(item))?)?,
            ObjectFormat::Yaml => write!(out, "{}", yaml(&self.printable(item))?)?,
        }
        out.flush()
    }

    /// One watch event: a JSON line `{"type": ..., "object": ...}`, a YAML document, or `EVENT kind/name`.
    pub fn event(&self, out: &mut impl Write, event: &str, item: &Item) -> io::Result<()> {
        match self.format {
            ObjectFormat::Name => writeln!(out, "{event} {}", self.name(item))?,
            ObjectFormat::Json => {
                let object = serde_json::to_string(&self.printable(item)).map_err(io::Error::other)?;
                writeln!(out, "{{\"type\":{},\"object\":{object}}}", serde_json::to_string(event)?)?
            }
            ObjectFormat::Yaml => {
                let doc = serde_json::json!({ "type": event, "object": self.printable(item) });
                write!(out, "---\n{}", yaml(&doc)?)?
            }
        }
        out.flush()
    }

    pub fn list<W: Write>(&self, out: W) -> ListWriter<W> {
        ListWriter { out, printer: self.clone(), count: 0 }
    }
}

/// Streams a list: the opening, then each item as it arrives, then the closing.
pub struct ListWriter<W: Write> {
    out: W,
    printer: ObjectPrinter,
    count: usize,
}

impl<W: Write> ListWriter<W> {
    pub fn item(&mut self, item: &Item) -> io::Result<()> {
        let object = self.printer.printable(item);
        match self.printer.format {
            ObjectFormat::Name => writeln!(self.out, "{}", self.printer.name(item))?,
            ObjectFormat::Json => {
                let opening =
                    if self.count == 0 { "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n" } else { ",\n" };
                let body = indent(&json_pretty(&object)?, "        ", "        ");
                write!(self.out, "{opening}{}", body.trim_end_matches('\n'))?;
            }
            ObjectFormat::Yaml => {
                let opening = if self.count == 0 { "apiVersion: v1\nitems:\n" } else { "" };
                write!(self.out, "{opening}{}", indent(&yaml(&object)?, "- ", "  "))?;
            }
        }
        self.count += 1;
        Ok(())
    }

    /// Ends the `List`. Its `metadata.resourceVersion` is `""` whatever the server's list said, as
    /// kubectl prints it: the printed List is put together on the client, not the one the server sent.
    pub fn finish(mut self) -> io::Result<W> {
        let rv = "\"\"";
        match (self.printer.format, self.count) {
            (ObjectFormat::Name, _) => {}
            (ObjectFormat::Json, 0) => write!(
                self.out,
                "{{\n    \"apiVersion\": \"v1\",\n    \"items\": [],\n    \"kind\": \"List\",\n    \"metadata\": {{\n        \"resourceVersion\": {rv}\n    }}\n}}\n"
            )?,
            (ObjectFormat::Json, _) => write!(
                self.out,
                "\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {{\n        \"resourceVersion\": {rv}\n    }}\n}}\n"
            )?,
            (ObjectFormat::Yaml, 0) => {
                write!(self.out, "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: {rv}\n")?
            }
            (ObjectFormat::Yaml, _) => write!(self.out, "kind: List\nmetadata:\n  resourceVersion: {rv}\n")?,
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::read::object_item;
    use kube::discovery::ApiResource;

    fn configmaps() -> Resolved {
        Resolved {
            ar: ApiResource {
                group: String::new(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                plural: "configmaps".into(),
            },
            namespaced: true,
            verbs: vec![],
            subresources: Vec::new(),
        }
    }

    fn items() -> Vec<Item> {
        let objects = [
            serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "line1\nline2\n"}}),
            serde_json::json!({"metadata": {"name": "b", "namespace": "ns", "managedFields": [{"manager": "x"}]}}),
        ];
        objects.into_iter().map(|o| object_item(o, &configmaps())).collect()
    }

    fn printer(format: ObjectFormat) -> ObjectPrinter {
        ObjectPrinter { format, resolved: configmaps(), show_managed_fields: false }
    }

    fn list(format: ObjectFormat, items: &[Item]) -> String {
        let mut writer = printer(format).list(Vec::new());
        for item in items {
            writer.item(item).unwrap();
        }
        String::from_utf8(writer.finish().unwrap()).unwrap()
    }

    #[test]
    fn streamed_json_list_is_the_list_kubectl_prints() {
        for n in [0, 1, 2] {
            let text = list(ObjectFormat::Json, &items()[..n]);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            let expected = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {"resourceVersion": ""},
                "items": items()[..n].iter().map(|i| printer(ObjectFormat::Json).printable(i).into_owned()).collect::<Vec<_>>(),
            });
            assert_eq!(parsed, expected);
            assert_eq!(text, json_pretty(&expected).unwrap() + "\n", "formatted as a whole would be");
        }
    }

    #[test]
    fn streamed_yaml_list_parses_back() {
        for n in [0, 1, 2] {
            let text = list(ObjectFormat::Yaml, &items()[..n]);
            let parsed: Value = serde_yaml::from_str(&text).unwrap();
            assert_eq!(parsed["kind"], "List");
            assert_eq!(parsed["metadata"]["resourceVersion"], "");
            let names: Vec<_> =
                parsed["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].clone()).collect();
            assert_eq!(names.len(), n);
            if n > 0 {
                assert_eq!(parsed["items"][0]["data"]["k"], "line1\nline2\n");
                assert_eq!(parsed["items"][0]["kind"], "ConfigMap");
            }
        }
    }

    #[test]
    fn managed_fields_only_on_request() {
        let item = &items()[1];
        let mut out = Vec::new();
        printer(ObjectFormat::Json).object(&mut out, item).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("managedFields"));
        let mut out = Vec::new();
        ObjectPrinter { show_managed_fields: true, ..printer(ObjectFormat::Json) }.object(&mut out, item).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("managedFields"));
    }

    #[test]
    fn names_and_events() {
        assert_eq!(list(ObjectFormat::Name, &items()), "configmap/a\nconfigmap/b\n");
        let mut out = Vec::new();
        printer(ObjectFormat::Json).event(&mut out, "ADDED", &items()[1]).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("{\"type\":\"ADDED\",\"object\":{"), "{line}");
        let event: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(event["object"]["metadata"]["name"], "b");
        let mut out = Vec::new();
        printer(ObjectFormat::Yaml).event(&mut out, "DELETED", &items()[0]).unwrap();
        let doc: Value = serde_yaml::from_str(String::from_utf8(out).unwrap().trim_start_matches("---\n")).unwrap();
        assert_eq!(doc["type"], "DELETED");
    }
}
