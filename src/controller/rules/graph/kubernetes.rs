//! Two of the Kubernetes CEL libraries kro adds to its environment (k8s.io/apiserver/pkg/cel/library,
//! `Lists()` and `Regex()`): lists' `isSorted`, `sum`, `min`, `max`, `indexOf` and `lastIndexOf`, and
//! strings' `find` and `findAll`, with the apiserver's results and error words.
//!
//! The `cel` crate takes no second overload of a name its environment declares (strings' `indexOf`),
//! so each of these member calls is renamed before evaluation to `@k8s.<name>(target, args...)`, whose
//! function takes a string target back to the strings extension's own overload.
//!
//! `sum` of an empty list is `0`: cel-go's checker picks the zero of the list's element type, which an
//! expression over an instance's untyped field does not say here.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{ExecutionError, Value};

/// What each renamed function is: all of its arguments, the target first.
pub type Overload = fn(&[Value]) -> Result<Value, ExecutionError>;

/// The member functions renamed, and what they are renamed to.
pub const RENAMED: [(&str, &str); 8] = [
    ("isSorted", "@k8s.isSorted"),
    ("sum", "@k8s.sum"),
    ("min", "@k8s.min"),
    ("max", "@k8s.max"),
    ("indexOf", "@k8s.indexOf"),
    ("lastIndexOf", "@k8s.lastIndexOf"),
    ("find", "@k8s.find"),
    ("findAll", "@k8s.findAll"),
];

/// Renames every member call `table` names in `expr` ([`RENAMED`], or another library's), its target
/// made its first argument.
pub fn rename(expr: &mut IdedExpr, table: &[(&str, &str)]) {
    let mut again = |e: &mut IdedExpr| rename(e, table);
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                again(target);
            }
            call.args.iter_mut().for_each(&mut again);
            if let Some((_, renamed)) = table.iter().find(|(name, _)| *name == call.func_name)
                && let Some(target) = call.target.take()
            {
                call.func_name = (*renamed).to_owned();
                call.args.insert(0, *target);
            }
        }
        Expr::Comprehension(c) => {
            for part in [&mut c.iter_range, &mut c.accu_init, &mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                again(part);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(again),
        Expr::Map(map) => map.entries.iter_mut().for_each(|e| entry(&mut e.expr, table)),
        Expr::Struct(s) => s.entries.iter_mut().for_each(|e| entry(&mut e.expr, table)),
        Expr::Select(select) => again(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry(entry: &mut EntryExpr, table: &[(&str, &str)]) {
    match entry {
        EntryExpr::MapEntry(e) => {
            rename(&mut e.key, table);
            rename(&mut e.value, table);
        }
        EntryExpr::StructField(f) => rename(&mut f.value, table),
    }
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
/// to the argument, or -1. A string target is the strings extension's, sent to `strings`.
pub fn index_of(
    args: &[Value],
    last: bool,
    strings: impl Fn(&str, &[Value]) -> Result<Value, ExecutionError>,
) -> Result<Value, ExecutionError> {
    let function = if last { "lastIndexOf" } else { "indexOf" };
    match (args.first(), args.get(1), args.len()) {
        (Some(Value::String(_)), _, _) => strings(function, args),
        (Some(Value::List(items)), Some(wanted), 2) => {
            let mut found = items.iter().enumerate().filter(|(_, item)| *item == wanted).map(|(i, _)| i as i64);
            let at = if last { found.next_back() } else { found.next() };
            Ok(Value::Int(at.unwrap_or(-1)))
        }
        _ => Err(no_overload(function, args)),
    }
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
        rename(&mut expr, &RENAMED);
        let shown = format!("{expr:?}");
        for (name, renamed) in [("min", "@k8s.min"), ("indexOf", "@k8s.indexOf"), ("sum", "@k8s.sum")] {
            assert!(shown.contains(&format!("func_name: \"{renamed}\", target: None")), "{renamed}: {shown}");
            assert!(!shown.contains(&format!("func_name: \"{name}\"")), "{name} left: {shown}");
        }
    }
}
