//! shell-operator's webhooks without a server: what a hook's response file says, the review sent back to
//! the API server, and the chain of a CRD's declared conversions that takes objects from one version to
//! another.

use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// What a run answered in its response file: an admission or conversion run's file, read (`None` when
/// the hook wrote nothing); nothing for the other bindings.
#[derive(Debug, PartialEq)]
pub enum Answer {
    Admission(Option<AdmissionAnswer>),
    Conversion(Option<ConversionAnswer>),
    Nothing,
}

/// What an admission hook wrote to `$VALIDATING_RESPONSE_PATH`.
#[derive(Debug, PartialEq)]
pub struct AdmissionAnswer {
    pub allowed: bool,
    pub message: String,
    pub warnings: Vec<String>,
    /// The JSON Patch, decoded from its base64.
    pub patch: Vec<u8>,
}

#[derive(Deserialize)]
struct RawAdmission {
    #[serde(default)]
    allowed: bool,
    #[serde(default)]
    message: String,
    #[serde(default)]
    warnings: Vec<String>,
    #[serde(default)]
    patch: Option<String>,
}

/// Reads an admission response file; `None` when the hook wrote nothing.
pub fn admission_answer(file: &[u8]) -> Result<Option<AdmissionAnswer>, String> {
    if file.is_empty() {
        return Ok(None);
    }
    let raw: RawAdmission =
        serde_json::from_slice(file).map_err(|err| format!("got bad validating response: {err}"))?;
    let patch = match raw.patch {
        // As Go decodes a []byte field: standard base64, where line breaks are ignored.
        Some(text) => {
            let text: String = text.chars().filter(|c| *c != '\n' && *c != '\r').collect();
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|err| format!("got bad validating response: patch: {err}"))?
        }
        None => Vec::new(),
    };
    Ok(Some(AdmissionAnswer { allowed: raw.allowed, message: raw.message, warnings: raw.warnings, patch }))
}

/// The `response` of an AdmissionReview for the request `uid`, as shell-operator answers: a refusal
/// carries code 403 and the hook's message; a patch is a JSON Patch.
pub fn admission_response(uid: &Value, answer: &AdmissionAnswer) -> Value {
    let mut response = Map::new();
    response.insert("uid".into(), uid.clone());
    response.insert("allowed".into(), json!(answer.allowed));
    if !answer.warnings.is_empty() {
        response.insert("warnings".into(), json!(answer.warnings));
    }
    if !answer.allowed {
        response.insert("status".into(), json!({ "code": 403, "message": answer.message }));
    }
    if !answer.patch.is_empty() {
        response.insert("patch".into(), json!(base64::engine::general_purpose::STANDARD.encode(&answer.patch)));
        response.insert("patchType".into(), json!("JSONPatch"));
    }
    Value::Object(response)
}

/// A review refused because it could not be answered (code 500), as shell-operator refuses one.
pub fn admission_error(uid: &Value, message: &str) -> Value {
    admission_refusal(uid, 500, message)
}

/// A review refused with `code` and `message`, as the API server shows it to the writer.
pub fn admission_refusal(uid: &Value, code: u16, message: &str) -> Value {
    json!({ "uid": uid, "allowed": false, "status": { "code": code, "message": message } })
}

/// What a conversion hook wrote to `$CONVERSION_RESPONSE_PATH`.
#[derive(Debug, PartialEq)]
pub struct ConversionAnswer {
    pub failed_message: String,
    pub converted: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConversion {
    #[serde(default)]
    failed_message: String,
    #[serde(default)]
    converted_objects: Vec<Value>,
}

/// Reads a conversion response file; `None` when the hook wrote nothing.
pub fn conversion_answer(file: &[u8]) -> Result<Option<ConversionAnswer>, String> {
    if file.is_empty() {
        return Ok(None);
    }
    let raw: RawConversion =
        serde_json::from_slice(file).map_err(|err| format!("got bad conversion response: {err}"))?;
    Ok(Some(ConversionAnswer { failed_message: raw.failed_message, converted: raw.converted_objects }))
}

/// The `response` of a ConversionReview for `uid`: the objects converted, or why not.
pub fn conversion_response(uid: &Value, result: Result<Vec<Value>, String>) -> Value {
    match result {
        Ok(objects) => json!({ "uid": uid, "convertedObjects": objects, "result": { "status": "Success" } }),
        Err(message) => json!({ "uid": uid, "result": { "status": "Failure", "message": message } }),
    }
}

/// The distinct apiVersions of `objects`, in the order they first appear.
pub fn api_versions(objects: &[Value]) -> Vec<String> {
    let mut seen = Vec::new();
    for object in objects {
        let version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        if !seen.contains(&version) {
            seen.push(version);
        }
    }
    seen
}

/// Whether two versions name the same one: equal, or one bare (`v1`) and the other the same version
/// with a group (`example.com/v1`). Two groups never match.
pub fn versions_match(a: &str, b: &str) -> bool {
    match (a.split_once('/'), b.split_once('/')) {
        (None, Some((_, version))) => a == version,
        (Some((_, version)), None) => b == version,
        _ => a == b,
    }
}

fn bare(version: &str) -> &str {
    version.split_once('/').map_or(version, |(_, v)| v)
}

/// The shortest chain of declared conversions (`rules`, as `(fromVersion, toVersion)`) from `from` to
/// `to`, as indices into `rules`; ties go to the rules declared first. `None` when there is none.
pub fn chain(rules: &[(String, String)], from: &str, to: &str) -> Option<Vec<usize>> {
    if versions_match(from, to) {
        return None;
    }
    // Breadth first over versions, each reached once: a chain never passes a version twice.
    let mut reached = vec![bare(from).to_owned()];
    let mut frontier: Vec<(String, Vec<usize>)> = vec![(from.to_owned(), Vec::new())];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for (at, path) in &frontier {
            for (i, (rule_from, rule_to)) in rules.iter().enumerate() {
                if !versions_match(rule_from, at) || reached.iter().any(|r| r == bare(rule_to)) {
                    continue;
                }
                let mut longer = path.clone();
                longer.push(i);
                if versions_match(rule_to, to) {
                    return Some(longer);
                }
                reached.push(bare(rule_to).to_owned());
                next.push((rule_to.clone(), longer));
            }
        }
        frontier = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admission_answer_is_read_as_shell_operator_reads_it() {
        assert_eq!(admission_answer(b"").unwrap(), None);
        let patch = base64::engine::general_purpose::STANDARD.encode(r#"[{"op":"add","path":"/a","value":1}]"#);
        // base64 as `base64` prints it without -w 0: broken into lines.
        let wrapped = format!("{}\n{}", &patch[..10], &patch[10..]);
        let file = serde_json::to_vec(&json!({"allowed": true, "patch": wrapped, "warnings": ["w"]})).unwrap();
        let answer = admission_answer(&file).unwrap().unwrap();
        assert!(answer.allowed);
        assert_eq!(answer.patch, br#"[{"op":"add","path":"/a","value":1}]"#);
        let response = admission_response(&json!("u1"), &answer);
        assert_eq!(response["patchType"], "JSONPatch");
        assert_eq!(response["warnings"], json!(["w"]));
        assert_eq!(response["uid"], "u1");
        assert!(response.get("status").is_none());

        let denied = admission_answer(br#"{"allowed":false,"message":"no"}"#).unwrap().unwrap();
        let response = admission_response(&json!("u2"), &denied);
        assert_eq!(response["status"], json!({"code": 403, "message": "no"}));
        assert!(response.get("patch").is_none());

        let err = admission_answer(b"{not json").unwrap_err();
        assert!(err.starts_with("got bad validating response: "), "{err}");
        let err = admission_answer(br#"{"allowed":true,"patch":"!!"}"#).unwrap_err();
        assert!(err.starts_with("got bad validating response: patch: "), "{err}");
    }

    #[test]
    fn a_conversion_answer_is_read_and_answered() {
        assert_eq!(conversion_answer(b"").unwrap(), None);
        let answer = conversion_answer(br#"{"convertedObjects":[{"apiVersion":"g/v2"}]}"#).unwrap().unwrap();
        assert_eq!(answer.converted.len(), 1);
        assert_eq!(answer.failed_message, "");
        let failed = conversion_answer(br#"{"failedMessage":"nope"}"#).unwrap().unwrap();
        assert_eq!(failed.failed_message, "nope");
        assert!(conversion_answer(b"[").unwrap_err().starts_with("got bad conversion response: "));
        let ok = conversion_response(&json!("u"), Ok(vec![json!({})]));
        assert_eq!(ok["result"]["status"], "Success");
        let bad = conversion_response(&json!("u"), Err("why".into()));
        assert_eq!(bad["result"], json!({"status": "Failure", "message": "why"}));
    }

    #[test]
    fn versions_match_with_or_without_their_group() {
        assert!(versions_match("v1", "v1"));
        assert!(versions_match("v1", "example.com/v1"));
        assert!(versions_match("example.com/v1", "v1"));
        assert!(!versions_match("stable.com/v1", "unstable.com/v1"));
        assert!(!versions_match("v1", "v2"));
        assert_eq!(
            api_versions(&[
                json!({"apiVersion": "a/v1"}),
                json!({"apiVersion": "a/v2"}),
                json!({"apiVersion": "a/v1"})
            ]),
            ["a/v1", "a/v2"]
        );
    }

    #[test]
    fn a_chain_is_the_shortest_path_of_declared_conversions() {
        let rules: Vec<(String, String)> = [
            ("g/v1alpha1", "g/v1alpha2"),
            ("v1alpha2", "v1beta1"),
            ("g/v1beta1", "g/v1"),
            ("g/v1", "g/v1beta1"),
            ("g/v1alpha1", "v1beta1"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(chain(&rules, "g/v1alpha1", "g/v1alpha2"), Some(vec![0]));
        // Bare and grouped versions join up; the direct rule 4 beats 0 then 1.
        assert_eq!(chain(&rules, "g/v1alpha1", "g/v1beta1"), Some(vec![4]));
        assert_eq!(chain(&rules, "g/v1alpha1", "g/v1"), Some(vec![4, 2]));
        assert_eq!(chain(&rules, "g/v1alpha2", "v1"), Some(vec![1, 2]));
        assert_eq!(chain(&rules, "g/v1", "g/v1beta1"), Some(vec![3]));
        // Nothing leads back to v1alpha1, and a version is not converted to itself.
        assert_eq!(chain(&rules, "g/v1", "g/v1alpha1"), None);
        assert_eq!(chain(&rules, "g/v1", "v1"), None);
        assert_eq!(chain(&rules, "other/v1alpha1", "g/v1alpha2"), None);
    }
}
