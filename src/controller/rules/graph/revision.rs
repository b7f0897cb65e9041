//! kro's GraphRevisions, decided without a cluster: the hash of an RGD's spec that says whether a new
//! revision is due (`hash.Spec`: FNV-64a of the spec normalised and written as Go's encoding/json
//! writes kro's types, so the `kro.run/graph-revision-hash` label is kro's), a revision's name
//! (`<rgd>-r00001`), and which revisions are old enough to go.

use serde_json::Value;

use crate::go_json::{Numbers, string as go_string, write};

/// A value as Go writes what it decoded into `any` (kro's `normalizeRawExtension`).
fn canonical(value: &Value, out: &mut String) {
    write(value, Numbers::Float64, out);
}

/// How many revisions of one RGD are kept (kro's `--rgd-max-graph-revisions`).
pub const KEEP: usize = 5;

/// kro's hash of an RGD's `spec`, hex.
pub fn spec_hash(spec: &Value) -> String {
    let mut out = String::new();
    rgd_spec(spec, &mut out);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in out.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The name of revision `revision` of RGD `rgd` (kro's `graphRevisionName`): `<rgd>-r%05d`; when that
/// is longer than an object name may be, the RGD's name cut (without trailing dots or dashes) and an
/// FNV-32a hash of it after the number.
pub fn name(rgd: &str, revision: i64) -> String {
    let suffix = format!("-r{revision:05}");
    if rgd.len() + suffix.len() <= 253 {
        return format!("{rgd}{suffix}");
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in rgd.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    let suffix = format!("-r{revision:05}-{hash:08x}");
    // RGD names are DNS subdomains: ASCII, so any cut is a character boundary.
    let cut = rgd.get(..253 - suffix.len()).unwrap_or(rgd).trim_end_matches(['.', '-']);
    format!("{}{suffix}", if cut.is_empty() { "gr" } else { cut })
}

/// Of revisions (name, number), those beyond the newest `KEEP`, oldest first.
pub fn beyond_kept(mut revisions: Vec<(String, i64)>) -> Vec<String> {
    revisions.sort_by_key(|(_, number)| *number);
    let extra = revisions.len().saturating_sub(KEEP);
    revisions.into_iter().take(extra).map(|(name, _)| name).collect()
}

/// A JSON object written field by field in a Go struct's order, leaving out what `omitempty` leaves
/// out.
struct Fields<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Fields<'a> {
    fn open(out: &'a mut String) -> Self {
        out.push('{');
        Fields { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        go_string(key, self.out);
        self.out.push(':');
    }

    /// A string field with `omitempty`.
    fn string(&mut self, key: &str, value: Option<&str>) {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            self.key(key);
            go_string(value, self.out);
        }
    }

    /// A `runtime.RawExtension` (never left out: `null` when empty), written canonically.
    fn raw(&mut self, key: &str, value: Option<&Value>) {
        self.key(key);
        canonical(value.unwrap_or(&Value::Null), self.out);
    }

    /// A list with `omitempty`, each item written by `item`.
    fn list(&mut self, key: &str, items: &[Value], item: impl Fn(&Value, &mut String)) {
        if items.is_empty() {
            return;
        }
        self.key(key);
        self.out.push('[');
        for (i, value) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            item(value, self.out);
        }
        self.out.push(']');
    }

    fn close(self) {
        self.out.push('}');
    }
}

fn strings(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

fn rgd_spec(spec: &Value, out: &mut String) {
    let mut fields = Fields::open(out);
    if let Some(schema) = spec.get("schema").filter(|s| s.is_object()) {
        fields.key("schema");
        schema_fields(schema, fields.out);
    }
    let mut resources = strings(&spec["resources"]);
    resources.sort_by(|a, b| a["id"].as_str().unwrap_or_default().cmp(b["id"].as_str().unwrap_or_default()));
    fields.list("resources", &resources, resource);
    fields.close();
}

fn schema_fields(schema: &Value, out: &mut String) {
    let text = |key: &str| schema[key].as_str();
    let mut fields = Fields::open(out);
    fields.string("kind", text("kind"));
    fields.string("apiVersion", text("apiVersion"));
    fields.string("group", Some(text("group").filter(|g| !g.is_empty()).unwrap_or("kro.run")));
    fields.raw("spec", schema.get("spec"));
    fields.raw("types", schema.get("types"));
    fields.raw("status", schema.get("status"));
    fields.string("scope", Some(text("scope").filter(|s| !s.is_empty()).unwrap_or("Namespaced")));
    fields.list("additionalPrinterColumns", &strings(&schema["additionalPrinterColumns"]), column);
    fields.list("shortNames", &strings(&schema["shortNames"]), canonical);
    fields.list("categories", &strings(&schema["categories"]), canonical);
    if let Some(metadata) = schema.get("metadata").filter(|m| m.is_object()) {
        fields.key("metadata");
        let mut inner = Fields::open(fields.out);
        for key in ["labels", "annotations"] {
            if let Some(map) = metadata[key].as_object().filter(|m| !m.is_empty()) {
                inner.key(key);
                canonical(&Value::Object(map.clone()), inner.out);
            }
        }
        inner.close();
    }
    fields.close();
}

/// An `apiextensions/v1` CustomResourceColumnDefinition.
fn column(value: &Value, out: &mut String) {
    let mut fields = Fields::open(out);
    fields.key("name");
    go_string(value["name"].as_str().unwrap_or_default(), fields.out);
    fields.key("type");
    go_string(value["type"].as_str().unwrap_or_default(), fields.out);
    fields.string("format", value["format"].as_str());
    fields.string("description", value["description"].as_str());
    if let Some(priority) = value["priority"].as_i64().filter(|p| *p != 0) {
        fields.key("priority");
        fields.out.push_str(&priority.to_string());
    }
    fields.key("jsonPath");
    go_string(value["jsonPath"].as_str().unwrap_or_default(), fields.out);
    fields.close();
}

fn resource(value: &Value, out: &mut String) {
    let mut fields = Fields::open(out);
    fields.string("id", value["id"].as_str());
    fields.raw("template", value.get("template"));
    if let Some(external) = value.get("externalRef").filter(|e| e.is_object()) {
        fields.key("externalRef");
        let mut inner = Fields::open(fields.out);
        for key in ["apiVersion", "kind"] {
            inner.key(key);
            go_string(external[key].as_str().unwrap_or_default(), inner.out);
        }
        inner.key("metadata");
        let metadata = &external["metadata"];
        let mut meta = Fields::open(inner.out);
        meta.string("name", metadata["name"].as_str());
        meta.string("namespace", metadata["namespace"].as_str());
        meta.raw("selector", metadata.get("selector"));
        meta.close();
        inner.close();
    }
    for key in ["readyWhen", "includeWhen"] {
        let mut sorted = strings(&value[key]);
        sorted.sort_by(|a, b| a.as_str().unwrap_or_default().cmp(b.as_str().unwrap_or_default()));
        fields.list(key, &sorted, canonical);
    }
    fields.list("forEach", &strings(&value["forEach"]), canonical);
    fields.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_what_goes() {
        assert_eq!(name("webapp", 3), "webapp-r00003");
        let long = "a".repeat(260);
        let cut = name(&long, 1);
        assert_eq!(cut.len(), 253);
        assert!(cut.starts_with("aaa") && cut.contains("-r00001-"), "{cut}");
        let revisions = (1..=7).map(|n| (format!("r{n}"), n)).collect();
        assert_eq!(beyond_kept(revisions), ["r1", "r2"]);
    }

    /// The hash kro v0.9.4 labelled the revision of this RGD with (read back from its GraphRevision).
    #[test]
    fn the_hash_is_kros() {
        let spec = json!({"resources": [{"id": "cm", "template": {"apiVersion": "v1", "data": {"a": "${schema.spec.n}"}, "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}"}}}], "schema": {"apiVersion": "v1alpha1", "group": "kro.run", "kind": "CondOk", "scope": "Namespaced", "spec": {"n": "string"}, "status": {"conditions": ["${runtime.newCondition({type: 'B', status: runtime.condition(schema, 'ResourcesReady').status})}", "${runtime.newCondition({type: 'C', status: cm.data.a == 'x' ? 'True' : 'False'})}"]}}});
        assert_eq!(spec_hash(&spec), "5182846d90b1cda7");
    }

    #[test]
    fn the_hash_ignores_order_kro_does_not_keep() {
        let spec = json!({"schema": {"apiVersion": "v1alpha1", "kind": "App", "spec": {"name": "string"}},
            "resources": [
                {"id": "b", "template": {"kind": "ConfigMap"}, "readyWhen": ["${y}", "${x}"]},
                {"id": "a", "externalRef": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"}}}]});
        let mut reordered = spec.clone();
        reordered["resources"] = json!([spec["resources"][1], {"id": "b", "template": {"kind": "ConfigMap"},
            "readyWhen": ["${x}", "${y}"]}]);
        reordered["schema"]["group"] = json!("kro.run");
        assert_eq!(spec_hash(&spec), spec_hash(&reordered));
        let mut changed = spec.clone();
        changed["schema"]["spec"]["name"] = json!("integer");
        assert_ne!(spec_hash(&spec), spec_hash(&changed));
        let mut out = String::new();
        rgd_spec(&spec, &mut out);
        assert_eq!(
            out,
            r#"{"schema":{"kind":"App","apiVersion":"v1alpha1","group":"kro.run","spec":{"name":"string"},"types":null,"status":null,"scope":"Namespaced"},"resources":[{"id":"a","template":null,"externalRef":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n","selector":null}}},{"id":"b","template":{"kind":"ConfigMap"},"readyWhen":["${x}","${y}"]}]}"#
        );
    }
}
