//! JSON values printed as Go prints the `interface{}` they decode to, because that is what kubectl users
//! compare against: scalars with `fmt.Print` (`1.5`, `1e+06`, `true`, `<nil>` for a JSON null), maps and
//! lists with `fmt.Print` (`map[a:1 b:[x y]]`) or `%#v` (in a template's error), and as compact JSON with
//! sorted keys and `<`, `>`, `&` escaped, as `encoding/json` writes them. JSONPath templates, custom
//! columns and `--sort-by` all print through here.

use serde_json::{Number, Value};

/// A float64 as Go's `%v` prints it: shortest digits, with an exponent below 1e-4 or from 1e6 up.
pub fn go_float(f: f64) -> String {
    go_float_with(f, -4, 6)
}

pub(crate) fn go_float_with(f: f64, low: i32, high: i32) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if exponent < low || exponent >= high {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{f}")
    }
}

fn go_number(n: &Number) -> String {
    match (n.as_i64(), n.as_u64()) {
        (Some(i), _) if !n.is_f64() => i.to_string(),
        (_, Some(u)) if !n.is_f64() => u.to_string(),
        _ => go_float(n.as_f64().unwrap_or_default()),
    }
}

/// A map's entries in key order, as Go prints and encodes maps (serde_json keeps insertion order when a
/// crate in the build turns on its `preserve_order`).
fn sorted(map: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by_key(|(key, _)| *key);
    entries
}

/// A JSON value as Go's `fmt.Sprint` prints the `interface{}` it decodes to: `map[a:1 b:[x y]]`.
pub fn go_sprint(value: &Value) -> String {
    let mut out = String::new();
    sprint_into(value, &mut out);
    out
}

fn sprint_into(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                sprint_into(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            for (i, (key, value)) in sorted(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                sprint_into(value, out);
            }
            out.push(']');
        }
    }
}

/// A JSON value as Go's `%#v` prints the `interface{}` it decodes to, as kubectl shows the object in a
/// template's error: `map[string]interface {}{"a":1, "b":[]interface {}{"x"}}`.
pub fn go_sharp_v(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(map) => {
            let pairs: Vec<String> =
                sorted(map).into_iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_sharp_v(v))).collect();
            format!("map[string]interface {{}}{{{}}}", pairs.join(", "))
        }
    }
}

/// A string as Go's `strconv.Quote` writes it (what `%#v` and `%q` print): printable characters as they
/// are, the others as Go escapes them (`\x1b`, `\u00a0`, `\U000e0001`), where Rust's `{:?}` writes
/// `\u{1b}` and also escapes a combining mark.
pub fn go_quote(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push('\''),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_printable(c) => out.push(c),
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c)).expect("writing to a String"),
            c if u32::from(c) < 0x10000 => write!(out, "\\u{:04x}", u32::from(c)).expect("writing to a String"),
            c => write!(out, "\\U{:08x}", u32::from(c)).expect("writing to a String"),
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII space. Rust's
/// Debug escaping leaves exactly those classes alone (quotes and the backslash aside, which `go_quote`
/// matches first), except a combining mark at the start of a string, so the character is asked about
/// after another one.
fn go_printable(c: char) -> bool {
    let mut probe = [0u8; 8];
    probe[0] = b'a';
    let len = 1 + c.encode_utf8(&mut probe[1..]).len();
    let probe = std::str::from_utf8(&probe[..len]).expect("one ASCII letter and one char");
    probe.escape_debug().eq(probe.chars())
}

/// A JSON value as Go's `json.Marshal` writes it: compact, keys sorted, `<>&` and U+2028/9 escaped.
pub use crate::go_json::encode as go_json;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_print_as_go_prints_them() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.5), "123456.5");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_sprint(&json!({"b": [1, "x"], "a": null})), "map[a:<nil> b:[1 x]]");
        assert_eq!(go_json(&json!({"b": "<&>", "a": 1.0e-7})), r#"{"a":1e-7,"b":"\u003c\u0026\u003e"}"#);
    }

    /// Go 1.26's own output for these (`fmt.Sprintf("%#v", ...)`). Checked once against every code point:
    /// all agree but the 10,615 assigned after Unicode 15.0, where Go's tables stop (Go escapes them).
    #[test]
    fn objects_are_dumped_as_go_dumps_them() {
        let cases = [
            ("\u{1b}", r#""\x1b""#),
            ("\u{a0}", r#""\u00a0""#),
            ("\u{301}", "\"\u{301}\""),
            ("\u{2028}", r#""\u2028""#),
            ("\u{7f}", r#""\x7f""#),
            ("\0", r#""\x00""#),
            ("\u{e0001}", r#""\U000e0001""#),
            ("'", r#""'""#),
            ("\t\"\\", r#""\t\"\\""#),
            ("\u{1f600}", "\"\u{1f600}\""),
            ("\u{ad}", r#""\u00ad""#),
            ("\u{fffd}", "\"\u{fffd}\""),
            ("\u{200b}", r#""\u200b""#),
        ];
        for (text, go) in cases {
            assert_eq!(go_quote(text), go, "{text:?}");
        }
        let object = json!({"a'b": ["x\u{301}", null, 5, 2.0, 1e6, 1.5, true]});
        assert_eq!(
            go_sharp_v(&object),
            "map[string]interface {}{\"a'b\":[]interface {}{\"x\u{301}\", interface {}(nil), 5, 2, 1e+06, 1.5, true}}"
        );
    }
}
