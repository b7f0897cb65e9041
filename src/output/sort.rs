//! `--sort-by`: objects ordered by the first value a JSONPath finds in each, with kubectl 1.34's comparisons
//! (its `sorter.go`): integers and floats by value, strings byte by byte (`web-10` before `web-2`, as
//! kubectl 1.34 has it; natural order came later) or, when both are Kubernetes quantities, by amount
//! (`100m` before `1`, `512Mi` before `1Gi`), and objects without the field first. Timestamps are RFC 3339
//! strings in one form, so their byte order is time order. kubectl refuses a path no object has, and
//! values it cannot order (booleans, maps, lists, integers beside floats); so does this, before sorting.

use std::cmp::Ordering;

use serde_json::Value;

use super::jsonpath::{Found, Template};

/// A sort key: the path as a template (`{.metadata.name}`), parsed.
#[derive(Debug, Clone)]
pub struct SortBy {
    pub field: String,
    template: Template,
}

impl SortBy {
    /// `--sort-by`'s value, relaxed as kubectl relaxes it (`.metadata.name`, `{.metadata.name}`).
    pub fn parse(path: &str) -> Result<Self, String> {
        let field = Template::relaxed(path).unwrap_or_else(|_| path.to_owned());
        let template = Template::parse(&field).map_err(|err| format!("sorting error: {err}"))?;
        Ok(SortBy { field, template })
    }

    /// The key of one object: the first value the path finds in it, if any.
    fn key<'v>(&self, object: &'v Value) -> Result<Option<Found<'v>>, String> {
        let found = self.template.find(object)?;
        Ok(found.into_iter().next().and_then(|values| values.into_iter().next()))
    }

    /// The order in which to print `objects` (indexes into it), stable among equal keys.
    pub fn order(&self, objects: &[&Value]) -> Result<Vec<usize>, String> {
        let keys = objects.iter().map(|o| self.key(o)).collect::<Result<Vec<_>, _>>()?;
        if !objects.is_empty() && keys.iter().all(Option::is_none) {
            return Err(format!("couldn't find any field with path {:?} in the list of objects", self.field));
        }
        let sortable: Vec<Option<Key>> = keys
            .iter()
            .map(|key| key.as_ref().map(|found| Key::of(found, &self.field)).transpose())
            .collect::<Result<_, _>>()?;
        let kinds: Vec<u8> = sortable.iter().flatten().filter_map(Key::kind).collect();
        if kinds.windows(2).any(|pair| pair[0] != pair[1]) {
            return Err(format!(
                "field {} holds values of different types, which cannot be sorted: unsortable interface: interface",
                self.field
            ));
        }
        let mut order: Vec<usize> = (0..objects.len()).collect();
        order.sort_by(|&a, &b| match (&sortable[a], &sortable[b]) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(a), Some(b)) => a.cmp(b),
        });
        Ok(order)
    }
}

/// A value kubectl can order.
#[derive(Debug)]
enum Key {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
}

impl Key {
    fn of(found: &Found, field: &str) -> Result<Key, String> {
        let unsortable = |what: &str| Err(format!("field {field} is an unsortable type: {what}"));
        match found {
            Found::Value(Value::Null) => Ok(Key::Null),
            Found::Value(Value::String(s)) => Ok(Key::Text(s.clone())),
            Found::Text(s) => Ok(Key::Text(s.clone())),
            Found::Value(Value::Number(n)) if !n.is_f64() => match n.as_i64() {
                Some(i) => Ok(Key::Int(i)),
                None => Ok(Key::Float(n.as_f64().unwrap_or_default())),
            },
            Found::Value(Value::Number(n)) => Ok(Key::Float(n.as_f64().unwrap_or_default())),
            Found::Int(i) => Ok(Key::Int(*i)),
            Found::Float(f) => Ok(Key::Float(*f)),
            Found::Byte(b) => Ok(Key::Int(i64::from(*b))),
            Found::Value(Value::Bool(_)) | Found::Bool(_) => unsortable("bool"),
            Found::Value(Value::Object(_)) => unsortable("map[string]interface {}"),
            Found::Value(Value::Array(_)) => unsortable("[]interface {}"),
        }
    }

    /// Which values may be compared with which: null goes with any.
    fn kind(&self) -> Option<u8> {
        match self {
            Key::Null => None,
            Key::Int(_) => Some(0),
            Key::Float(_) => Some(1),
            Key::Text(_) => Some(2),
        }
    }

    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Null, Key::Null) => Ordering::Equal,
            (Key::Null, _) => Ordering::Less,
            (_, Key::Null) => Ordering::Greater,
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::Float(a), Key::Float(b)) => a.total_cmp(b),
            (Key::Text(a), Key::Text(b)) => match (quantity(a), quantity(b)) {
                (Some(x), Some(y)) => x.total_cmp(&y),
                _ => a.cmp(b),
            },
            // Refused before sorting.
            _ => Ordering::Equal,
        }
    }
}

/// The amount a Kubernetes quantity stands for (`1.5`, `100m`, `2Ki`, `1e3`), or `None` if `text` is not
/// one, by apimachinery's grammar: a signed decimal, then a binary or decimal SI suffix or an exponent.
pub fn quantity(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut end = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    let digits_start = end;
    let mut digits = 0;
    while end < bytes.len() && bytes[end].is_ascii_digit() {
        end += 1;
        digits += 1;
    }
    if end < bytes.len() && bytes[end] == b'.' {
        end += 1;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
            digits += 1;
        }
    }
    if digits == 0 || end == digits_start {
        return None;
    }
    let number: f64 = text[..end].parse().ok()?;
    let multiplier = match &text[end..] {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        suffix => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10f64.powi(exponent.parse::<i32>().ok()?)
        }
    };
    Some(number * multiplier)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities_are_read_as_apimachinery_reads_them() {
        assert_eq!(quantity("100m"), Some(0.1));
        assert_eq!(quantity("2Ki"), Some(2048.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("-1.5"), Some(-1.5));
        assert_eq!(quantity(".5"), Some(0.5));
        for not in ["", "web", "1x", "Ki", "1e", "1.2.3", "e3", "+"] {
            assert_eq!(quantity(not), None, "{not}");
        }
    }

    fn order(path: &str, objects: &[Value]) -> Result<Vec<usize>, String> {
        SortBy::parse(path)?.order(&objects.iter().collect::<Vec<_>>())
    }

    #[test]
    fn objects_sort_as_kubectl_sorts_them() {
        let objects = [
            json!({"n": 10, "s": "web-10", "q": "1Gi", "t": "2026-01-02T00:00:00Z"}),
            json!({"n": 2, "s": "web-2", "q": "512Mi", "t": "2026-01-01T00:00:00Z"}),
            json!({"s": "web-1", "q": "2Gi"}),
        ];
        assert_eq!(order(".n", &objects).unwrap(), [2, 1, 0]);
        assert_eq!(order("{.s}", &objects).unwrap(), [2, 0, 1], "byte order: web-1, web-10, web-2");
        assert_eq!(order("q", &objects).unwrap(), [1, 0, 2]);
        assert_eq!(order(".t", &objects).unwrap(), [2, 1, 0]);
        assert_eq!(
            order(".nope", &objects).unwrap_err(),
            "couldn't find any field with path \"{.nope}\" in the list of objects"
        );
        assert!(order(".b", &[json!({"b": true}), json!({"b": false})]).unwrap_err().contains("unsortable type: bool"));
        assert!(order(".x", &[json!({"x": 1}), json!({"x": 1.5})]).unwrap_err().contains("different types"));
        assert_eq!(order(".x", &[]).unwrap(), Vec::<usize>::new());
    }
}
