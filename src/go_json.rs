//! JSON written as Go's `encoding/json` writes it, a leaf every layer may use: compact, object keys
//! sorted (as for a Go map), `<`, `>`, `&` and U+2028/9 escaped, and a float in Go's shortest form
//! (plain from 1e-6 up to 1e21, else `1e+21`, `1.5e-7`). What kubectl prints with `go-template` and what
//! kro hashes of an RGD's spec are both this.

use std::fmt::Write;

use serde_json::Value;

/// How numbers are written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Numbers {
    /// Integers as integers, as Go writes a value decoded into typed fields.
    AsDecoded,
    /// Every number a float64, as Go writes a value it decoded into `any`.
    Float64,
}

/// `value` written with its integers as integers, as Go writes typed fields (metacontroller's revision
/// names, kro's `json.marshal`, kubectl's JSONPath output).
pub fn encode(value: &Value) -> String {
    let mut out = String::new();
    write(value, Numbers::AsDecoded, &mut out);
    out
}

/// `value` appended to `out`.
pub fn write(value: &Value, numbers: Numbers, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_f64() || numbers == Numbers::Float64 => {
            out.push_str(&float(n.as_f64().unwrap_or_default()))
        }
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, numbers, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(key, out);
                out.push(':');
                write(&map[key], numbers, out);
            }
            out.push('}');
        }
    }
}

/// A float64 as encoding/json writes it.
fn float(f: f64) -> String {
    let magnitude = f.abs();
    if magnitude != 0.0 && !(1e-6..1e21).contains(&magnitude) {
        let text = format!("{f:e}");
        return match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => format!("{mantissa}e+{exponent}"),
            _ => text,
        };
    }
    format!("{f}")
}

/// A string as encoding/json writes it.
pub fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_writes_json_its_own_way() {
        let value = json!({"b": [1, 2.5, 1e21, 0.0000001, 12345678901234567890u64], "a": "<&>\u{8}"});
        let mut decoded = String::new();
        write(&value, Numbers::AsDecoded, &mut decoded);
        assert_eq!(decoded, r#"{"a":"\u003c\u0026\u003e\b","b":[1,2.5,1e+21,1e-7,12345678901234567890]}"#);
        let mut floats = String::new();
        write(&value, Numbers::Float64, &mut floats);
        assert_eq!(floats, r#"{"a":"\u003c\u0026\u003e\b","b":[1,2.5,1e+21,1e-7,12345678901234567000]}"#);
    }

    #[test]
    fn floats_read_are_the_nearest_doubles_as_go_reads_them() {
        // serde_json's default parser may land one ULP off (1.38e-23 read as 1.3799999999999998e-23);
        // Go's strconv, and so the API server and kubectl, always give the nearest double.
        for text in ["1.38e-23", "-5.43e-21", "2.2250738585072011e-308", "0.1", "9007199254740993.0"] {
            let read: f64 = serde_json::from_str(text).unwrap();
            assert_eq!(read, text.parse::<f64>().unwrap(), "{text}");
            assert_eq!(encode(&serde_json::from_str(text).unwrap()), encode(&json!(text.parse::<f64>().unwrap())));
        }
    }
}
