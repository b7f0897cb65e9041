//! The API server's `SemverLib()` CEL library (k8s.io/apiserver/pkg/cel/library/semverlib.go), which
//! kro adds: `semver(s)`, `isSemver(s)`, and a version's `major`, `minor`, `patch`, `compareTo`,
//! `isGreaterThan` and `isLessThan`. Versions are parsed and ordered as blang/semver v4 does it (the
//! library's parser), with its error words. kro adds the library at its first version, which has no
//! `normalize` argument: `semver(s, true)` is an error there, and so here.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::objects::Opaque;
use cel::{ExecutionError, Value};

use super::no_overload;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pre {
    Num(u64),
    Text(String),
}

/// A `semver(...)` value. Equality ignores build metadata, as blang's `EQ` does.
#[derive(Debug, Clone)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Pre>,
    build: Vec<String>,
}

/// blang's `String()`.
impl std::fmt::Display for Semver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        let pre: Vec<String> = self
            .pre
            .iter()
            .map(|p| match p {
                Pre::Num(n) => n.to_string(),
                Pre::Text(t) => t.clone(),
            })
            .collect();
        if !pre.is_empty() {
            write!(f, "-{}", pre.join("."))?;
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build.join("."))?;
        }
        Ok(())
    }
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other) == Ordering::Equal
    }
}

impl Eq for Semver {}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn only(text: &str, extra: &str) -> bool {
    text.chars().all(|c| c.is_ascii_digit() || extra.contains(c) || (!extra.is_empty() && c.is_ascii_alphabetic()))
}

fn leading_zero(text: &str) -> bool {
    text.len() > 1 && text.starts_with('0')
}

/// Go's `strconv.ParseUint(s, 10, 64)` error.
fn number(text: &str) -> Result<u64, String> {
    text.parse::<u64>().map_err(|_| {
        let why = if text.is_empty() || !only(text, "") { "invalid syntax" } else { "value out of range" };
        format!("strconv.ParseUint: parsing {text:?}: {why}")
    })
}

fn part(text: &str, name: &str) -> Result<u64, String> {
    if !only(text, "") {
        return Err(format!("Invalid character(s) found in {name} number {text:?}"));
    }
    if leading_zero(text) {
        return Err(format!("{} number must not contain leading zeroes {text:?}", capitalized(name)));
    }
    number(text)
}

fn capitalized(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// blang/semver v4's `Parse`.
pub fn parse(text: &str) -> Result<Semver, String> {
    if text.is_empty() {
        return Err("Version string empty".into());
    }
    let parts: Vec<&str> = text.splitn(3, '.').collect();
    let [major, minor, rest] = parts[..] else { return Err("No Major.Minor.Patch elements found".into()) };
    let (major, minor) = (part(major, "major")?, part(minor, "minor")?);
    let (rest, build) = match rest.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (rest, None),
    };
    let (patch, pre) = match rest.split_once('-') {
        Some((patch, pre)) => (patch, Some(pre)),
        None => (rest, None),
    };
    let patch = part(patch, "patch")?;
    let mut version = Semver { major, minor, patch, pre: Vec::new(), build: Vec::new() };
    for pre in pre.into_iter().flat_map(|p| p.split('.')) {
        if pre.is_empty() {
            return Err("Prerelease is empty".into());
        }
        version.pre.push(if only(pre, "") {
            if leading_zero(pre) {
                return Err(format!("Numeric PreRelease version must not contain leading zeroes {pre:?}"));
            }
            Pre::Num(number(pre)?)
        } else if only(pre, "-") {
            Pre::Text(pre.to_owned())
        } else {
            return Err(format!("Invalid character(s) found in prerelease {pre:?}"));
        });
    }
    for meta in build.into_iter().flat_map(|b| b.split('.')) {
        if meta.is_empty() {
            return Err("Build meta data is empty".into());
        }
        if !only(meta, "-") {
            return Err(format!("Invalid character(s) found in build meta data {meta:?}"));
        }
        version.build.push(meta.to_owned());
    }
    Ok(version)
}

impl Semver {
    /// blang's `Compare`: a release is above its prereleases; numeric identifiers below text ones.
    fn compare(&self, other: &Semver) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&other.pre) {
            let order = match (a, b) {
                (Pre::Num(x), Pre::Num(y)) => x.cmp(y),
                (Pre::Num(_), Pre::Text(_)) => Ordering::Less,
                (Pre::Text(_), Pre::Num(_)) => Ordering::Greater,
                (Pre::Text(x), Pre::Text(y)) => x.cmp(y),
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        self.pre.len().cmp(&other.pre.len())
    }
}

pub fn semver_of(value: &Value) -> Option<&Semver> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Semver>(),
        _ => None,
    }
}

fn read(function: &str, args: &[Value]) -> Result<Result<Semver, String>, ExecutionError> {
    match args {
        [Value::String(s)] => Ok(parse(s)),
        _ => Err(no_overload(function, args)),
    }
}

pub fn semver(args: &[Value]) -> Result<Value, ExecutionError> {
    read("semver", args)?.map(|v| Value::Opaque(Arc::new(v))).map_err(|e| ExecutionError::function_error("semver", e))
}

pub fn is_semver(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(read("isSemver", args)?.is_ok()))
}

pub fn takes(args: &[Value]) -> bool {
    args.first().and_then(semver_of).is_some()
}

/// A version's member functions, its target first.
pub fn member(function: &'static str) -> impl Fn(&[Value]) -> Result<Value, ExecutionError> {
    move |args: &[Value]| {
        let Some(this) = args.first().and_then(semver_of) else { return Err(no_overload(function, args)) };
        let other = args.get(1).and_then(semver_of);
        let int = |n: u64| Value::Int(n as i64);
        Ok(match (function, &args[1..], other) {
            ("major", [], _) => int(this.major),
            ("minor", [], _) => int(this.minor),
            ("patch", [], _) => int(this.patch),
            ("compareTo", [_], Some(other)) => Value::Int(this.compare(other) as i64),
            ("isGreaterThan", [_], Some(other)) => Value::Bool(this.compare(other).is_gt()),
            ("isLessThan", [_], Some(other)) => Value::Bool(this.compare(other).is_lt()),
            _ => return Err(no_overload(function, args)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_as_blang_orders_them() {
        let ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0"];
        for pair in ordered.windows(2) {
            assert!(parse(pair[0]).unwrap().compare(&parse(pair[1]).unwrap()).is_lt(), "{pair:?}");
        }
        assert_eq!(parse("1.2.3+build.5").unwrap(), parse("1.2.3").unwrap());
    }

    #[test]
    fn bad_versions_are_refused_in_blangs_words() {
        assert_eq!(parse("1.2").unwrap_err(), "No Major.Minor.Patch elements found");
        assert_eq!(parse("01.2.3").unwrap_err(), "Major number must not contain leading zeroes \"01\"");
        assert_eq!(parse("1.x.3").unwrap_err(), "Invalid character(s) found in minor number \"x\"");
        assert_eq!(parse("1.2.3-").unwrap_err(), "Prerelease is empty");
        assert_eq!(parse("1.2.3-01").unwrap_err(), "Numeric PreRelease version must not contain leading zeroes \"01\"");
        assert_eq!(parse("1.2.3+").unwrap_err(), "Build meta data is empty");
    }
}
