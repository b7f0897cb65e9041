//! The Kubernetes CEL libraries kro adds to its environment (k8s.io/apiserver/pkg/cel/library), with
//! the API server's results and error words: `Lists()` and `Regex()` here (lists' `isSorted`, `sum`,
//! `min`, `max`, `indexOf` and `lastIndexOf`, strings' `find` and `findAll`), `IP()` and `CIDR()` in
//! `network`, `Quantity()` in `quantity`, `SemverLib()` in `semver` and `URLs()` in `url`.
//!
//! The `cel` crate takes no second overload of a name its environment declares (strings' `indexOf`,
//! the conversion `string()`), and its functions are called by name whatever the target's type, so
//! each of these member calls is renamed before evaluation to `@k8s.<name>(target, args...)`, whose
//! function picks the library by the target's type; `string(...)` becomes `@k8s.string(...)`.
//!
//! `sum` of an empty list is `0`: cel-go's checker picks the zero of the list's element type, which an
//! expression over an instance's untyped field does not say here.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr};
use cel::{ExecutionError, Value};

pub mod network;
pub mod quantity;
pub mod semver;
pub mod url;

/// What each renamed function is: all of its arguments, the target first.
pub type Overload = fn(&[Value]) -> Result<Value, ExecutionError>;

/// A member function chosen for its name, as [`member`] gives it.
pub type Member = Box<dyn Fn(&[Value]) -> Result<Value, ExecutionError> + Send + Sync>;

/// The member functions renamed to `@k8s.<name>`.
pub const MEMBERS: [&str; 37] = [
    "isSorted",
    "sum",
    "min",
    "max",
    "indexOf",
    "lastIndexOf",
    "find",
    "findAll",
    // IP and CIDR
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "containsIP",
    "containsCIDR",
    "masked",
    "prefixLength",
    "ip",
    // URLs
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    // Quantity, and (the last three) Semver
    "sign",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "add",
    "sub",
    "major",
    "minor",
    "patch",
    "compareTo",
    "isGreaterThan",
    "isLessThan",
];

/// The renamed name of one of [`MEMBERS`].
pub fn renamed(member: &str) -> String {
    format!("@k8s.{member}")
}

/// Renames every member call `table` names in `expr` (`(name, renamed)` pairs), its target made its
/// first argument.
pub fn rename(expr: &mut IdedExpr, table: &[(&str, &str)]) {
    each_call(expr, &mut |call| {
        if let Some((_, renamed)) = table.iter().find(|(name, _)| *name == call.func_name)
            && let Some(target) = call.target.take()
        {
            call.func_name = (*renamed).to_owned();
            call.args.insert(0, *target);
        }
    });
}

/// [`MEMBERS`]' calls renamed as [`rename`] does, and the conversion `string(x)` made
/// `@k8s.string(x)`.
pub fn rename_libraries(expr: &mut IdedExpr) {
    each_call(expr, &mut |call| {
        if call.target.is_some() && MEMBERS.contains(&call.func_name.as_str()) {
            let target = call.target.take().expect("checked");
            call.func_name = renamed(&call.func_name);
            call.args.insert(0, *target);
        } else if call.target.is_none() && call.func_name == "string" {
            call.func_name = renamed("string");
        }
    });
}

/// `visit` on every call in `expr`, the innermost first.
fn each_call(expr: &mut IdedExpr, visit: &mut dyn FnMut(&mut CallExpr)) {
    let mut again = |e: &mut IdedExpr| each_call(e, visit);
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                again(target);
            }
            call.args.iter_mut().for_each(&mut again);
            visit(call);
        }
        Expr::Comprehension(c) => {
            for part in [&mut c.iter_range, &mut c.accu_init, &mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                again(part);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(again),
        Expr::Map(map) => map.entries.iter_mut().for_each(|e| entry(&mut e.expr, &mut again)),
        Expr::Struct(s) => s.entries.iter_mut().for_each(|e| entry(&mut e.expr, &mut again)),
        Expr::Select(select) => again(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry(entry: &mut EntryExpr, again: &mut dyn FnMut(&mut IdedExpr)) {
    match entry {
        EntryExpr::MapEntry(e) => {
            again(&mut e.key);
            again(&mut e.value);
        }
        EntryExpr::StructField(f) => again(&mut f.value),
    }
}

/// The function each renamed member call goes to, for `member`, the library chosen by the target.
pub fn member(member: &'static str) -> Member {
    match member {
        "isSorted" => Box::new(is_sorted),
        "sum" => Box::new(sum),
        "min" => Box::new(min),
        "max" => Box::new(max),
        "indexOf" => Box::new(|args: &[Value]| index_of(args, false)),
        "lastIndexOf" => Box::new(|args: &[Value]| index_of(args, true)),
        "find" => Box::new(find),
        "findAll" => Box::new(find_all),
        "family"
        | "isUnspecified"
        | "isLoopback"
        | "isLinkLocalMulticast"
        | "isLinkLocalUnicast"
        | "isGlobalUnicast" => Box::new(network::address(member)),
        "containsIP" | "containsCIDR" | "masked" | "prefixLength" => Box::new(network::prefix(member)),
        "ip" => Box::new(network::ip),
        "getScheme" | "getHost" | "getHostname" | "getPort" | "getEscapedPath" | "getQuery" => {
            Box::new(url::member(member))
        }
        "major" | "minor" | "patch" => Box::new(semver::member(member)),
        "compareTo" | "isGreaterThan" | "isLessThan" => {
            let (quantity, semver) = (quantity::member(member), semver::member(member));
            Box::new(move |args: &[Value]| if quantity::takes(args) { quantity(args) } else { semver(args) })
        }
        _ => Box::new(quantity::member(member)),
    }
}

/// The libraries' global functions: conversions from strings and their tests.
pub const GLOBALS: [(&str, Overload); 11] = [
    ("ip", network::ip),
    ("isIP", network::is_ip),
    ("ip.isCanonical", network::is_canonical),
    ("cidr", network::cidr),
    ("isCIDR", network::is_cidr),
    ("quantity", quantity::quantity),
    ("isQuantity", quantity::is_quantity),
    ("semver", semver::semver),
    ("isSemver", semver::is_semver),
    ("url", url::url),
    ("isURL", url::is_url),
];

/// A library value's text, by which the conformance runner compares two: an address's, a prefix's,
/// a URL's or a version's `String()` in Go, a quantity's exact decimal.
pub fn describe(value: &Value) -> Option<String> {
    network::ip_of(value)
        .map(|v| v.to_string())
        .or_else(|| network::cidr_of(value).map(|v| v.to_string()))
        .or_else(|| url::url_of(value).map(|v| v.to_string()))
        .or_else(|| semver::semver_of(value).map(|v| v.to_string()))
        .or_else(|| quantity::quantity_of(value).map(|v| v.exact()))
}

/// `string(x)` for the libraries' values that have one (addresses and prefixes), else `None`: the
/// standard conversion's.
pub fn string(value: &Value) -> Option<Value> {
    network::string(value)
}

fn no_overload(function: &str, args: &[Value]) -> ExecutionError {
    let types: Vec<String> = args.iter().map(|a| a.type_of().to_string()).collect();
    ExecutionError::function_error(function, format!("no such overload: {function}({})", types.join(", ")))
}

fn list<'a>(function: &str, args: &'a [Value]) -> Result<&'a [Value], ExecutionError> {
    match args.first() {
        Some(Value::List(items)) => Ok(items),
        _ => Err(no_overload(function, args)),
    }
}

/// CEL's ordering of two values of one comparable type (int, uint, double, bool, string, bytes,
/// duration, timestamp).
fn compare(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    let ordered = match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.partial_cmp(y),
        (Value::UInt(x), Value::UInt(y)) => x.partial_cmp(y),
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.partial_cmp(y),
        (Value::String(x), Value::String(y)) => x.partial_cmp(y),
        (Value::Bytes(x), Value::Bytes(y)) => x.partial_cmp(y),
        (Value::Duration(x), Value::Duration(y)) => x.partial_cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) => x.partial_cmp(y),
        _ => None,
    };
    ordered.ok_or_else(|| no_overload(function, &[a.clone(), b.clone()]))
}

pub fn is_sorted(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list("isSorted", args)?;
    for pair in items.windows(2) {
        if compare("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

pub fn sum(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list("sum", args)?;
    let Some((first, rest)) = items.split_first() else { return Ok(Value::Int(0)) };
    let mut total = first.clone();
    for item in rest {
        total = match (&total, item) {
            (Value::Int(a), Value::Int(b)) => {
                Value::Int(a.checked_add(*b).ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?)
            }
            (Value::UInt(a), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b).ok_or_else(|| ExecutionError::function_error("sum", "unsigned integer overflow"))?,
            ),
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => Value::Duration(*a + *b),
            _ => return Err(no_overload("sum", &[total.clone(), item.clone()])),
        };
    }
    Ok(total)
}

fn extreme(function: &str, args: &[Value], keep: Ordering) -> Result<Value, ExecutionError> {
    let items = list(function, args)?;
    let Some((first, rest)) = items.split_first() else {
        return Err(ExecutionError::function_error(function, format!("{function} called on empty list")));
    };
    let mut best = first;
    for item in rest {
        if compare(function, item, best)? == keep {
            best = item;
        }
    }
    Ok(best.clone())
}

pub fn min(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("min", args, Ordering::Less)
}

pub fn max(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("max", args, Ordering::Greater)
}

/// A list's `indexOf` (or `lastIndexOf`, with `last`): the position of the first (last) element equal
/// to the argument, or -1. A string target is the strings extension's.
pub fn index_of(args: &[Value], last: bool) -> Result<Value, ExecutionError> {
    let function = if last { "lastIndexOf" } else { "indexOf" };
    match (args.first(), args.get(1), args.len()) {
        (Some(Value::String(text)), Some(Value::String(wanted)), 2 | 3) => {
            let offset = match args.get(2) {
                None => None,
                Some(Value::Int(n)) => Some(*n),
                Some(_) => return Err(no_overload(function, args)),
            };
            string_index(text, wanted, offset, last)
                .map(Value::Int)
                .map_err(|e| ExecutionError::function_error(function, e))
        }
        (Some(Value::List(items)), Some(wanted), 2) => {
            let mut found = items.iter().enumerate().filter(|(_, item)| *item == wanted).map(|(i, _)| i as i64);
            let at = if last { found.next_back() } else { found.next() };
            Ok(Value::Int(at.unwrap_or(-1)))
        }
        _ => Err(no_overload(function, args)),
    }
}

/// cel-go's strings extension (v0.31): positions in code points; an offset past the end finds
/// nothing (-1), or the end for an empty string; a negative one is an error.
fn string_index(text: &str, wanted: &str, offset: Option<i64>, last: bool) -> Result<i64, String> {
    let runes: Vec<char> = text.chars().collect();
    let sub: Vec<char> = wanted.chars().collect();
    let at = |i: usize| runes[i..].starts_with(&sub);
    let offset = match (offset, last) {
        (Some(off), _) if off < 0 => return Err(format!("index out of range: {off}")),
        (Some(off), _) => off as usize,
        (None, false) => 0,
        (None, true) => {
            if sub.is_empty() {
                return Ok(runes.len() as i64);
            }
            // Go compares the texts' lengths in bytes here.
            if text.len() < wanted.len() {
                return Ok(-1);
            }
            runes.len().saturating_sub(1)
        }
    };
    if sub.is_empty() {
        return Ok(offset.min(runes.len()) as i64);
    }
    if offset >= runes.len() {
        return Ok(-1);
    }
    let found = if last {
        let start = offset.min(runes.len().saturating_sub(sub.len()));
        if sub.len() > runes.len() { None } else { (0..=start).rev().find(|i| at(*i)) }
    } else {
        (offset..=runes.len().saturating_sub(sub.len())).take_while(|i| i + sub.len() <= runes.len()).find(|i| at(*i))
    };
    Ok(found.map_or(-1, |i| i as i64))
}

fn regex(function: &str, args: &[Value]) -> Result<(Arc<String>, regex::Regex), ExecutionError> {
    match (args.first(), args.get(1)) {
        (Some(Value::String(text)), Some(Value::String(pattern))) => regex::Regex::new(pattern)
            .map(|re| (text.clone(), re))
            .map_err(|err| ExecutionError::function_error(function, format!("Illegal regex: {err}"))),
        _ => Err(no_overload(function, args)),
    }
}

/// `s.find(re)`: the first match, or `""`.
pub fn find(args: &[Value]) -> Result<Value, ExecutionError> {
    let (text, re) = regex("find", args)?;
    Ok(Value::String(Arc::new(re.find(&text).map_or("", |m| m.as_str()).to_owned())))
}

/// `s.findAll(re)`, `s.findAll(re, n)`: the matches, at most `n` of them unless `n` is negative.
pub fn find_all(args: &[Value]) -> Result<Value, ExecutionError> {
    let (text, re) = regex("findAll", args)?;
    let most = match args.get(2) {
        None => usize::MAX,
        Some(Value::Int(n)) => usize::try_from(*n).unwrap_or(usize::MAX),
        Some(_) => return Err(no_overload("findAll", args)),
    };
    let found = re.find_iter(&text).take(most).map(|m| Value::String(Arc::new(m.as_str().to_owned())));
    Ok(Value::List(Arc::new(found.collect())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renamed_member_calls_take_their_target_first() {
        let env = cel::Env::stdlib();
        let mut expr = env.parser().parse("[3, 1].min() + x.y.indexOf('a') + size([1].map(v, [v].sum()))").unwrap();
        rename_libraries(&mut expr);
        let shown = format!("{expr:?}");
        for (name, renamed) in [("min", "@k8s.min"), ("indexOf", "@k8s.indexOf"), ("sum", "@k8s.sum")] {
            assert!(shown.contains(&format!("func_name: \"{renamed}\", target: None")), "{renamed}: {shown}");
            assert!(!shown.contains(&format!("func_name: \"{name}\"")), "{name} left: {shown}");
        }
    }
}
