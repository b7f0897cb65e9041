//! The work one expression may do, and the size of what it gives.
//!
//! kro sets no limit: an expression over a list that an instance's author controls may loop without
//! end, and `random.seededString` builds a string of whatever length it is passed. Kubernetes bounds its
//! own CEL (CRD validation rules, admission policies) at a runtime cost of 1,000,000 per expression
//! (`celconfig.PerCallLimit`), where each step of a comprehension costs at least 1. The `cel` crate keeps
//! no cost, so the expression is metered where its work can grow: every comprehension (`map`, `filter`,
//! `all`, `exists`, `exists_one`, two-variable ones) calls `@cost()` once per element, a name no source
//! can spell, and the millionth-and-first call fails the expression with cel-go's words. Counting
//! iterations only, the limit is looser than Kubernetes' for the same expression: what the API server
//! accepts in a validation rule is never refused here.
//!
//! A value an expression gives may be no larger than the API server accepts in one request (3 MiB,
//! `MaxRequestBodyBytes`): nothing larger can be written, as a child or as status.

use std::cell::Cell;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, operators};

/// The most comprehension steps one expression may take: Kubernetes' per-expression cost limit.
pub const COST_LIMIT: u64 = 1_000_000;

/// The largest value, in bytes of its strings and elements, an expression may give or build with
/// `random.seededString`: the API server's limit on a request's body.
pub const MAX_VALUE_BYTES: usize = 3 << 20;

/// cel-go's error when a program's cost goes past its limit.
pub const COST_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// The metering function's name: `@` cannot begin a name in CEL source.
pub const METER: &str = "@cost";

thread_local! {
    /// Steps taken by the expression being evaluated on this thread.
    static SPENT: Cell<u64> = const { Cell::new(0) };
}

/// Starts the count for one evaluation.
pub fn start() {
    SPENT.with(|spent| spent.set(0));
}

/// Whether the evaluation on this thread went past the limit (its error may have been absorbed by a
/// logical operator, as `error || true` is `true` in CEL; past the limit, the whole expression fails).
pub fn exceeded() -> bool {
    SPENT.with(|spent| spent.get() > COST_LIMIT)
}

/// One step: `true`, or an error once the limit is passed.
pub fn step() -> Result<bool, String> {
    SPENT.with(|spent| {
        let now = spent.get().saturating_add(1);
        spent.set(now);
        match now > COST_LIMIT {
            true => Err(COST_EXCEEDED.to_owned()),
            false => Ok(true),
        }
    })
}

/// Puts a `@cost()` call into every comprehension of `expr`, where it is evaluated once per element,
/// without changing the comprehension's shape (the crate builds `map` and `filter` results in place
/// only for the shapes the macros make, and keeps CEL's error absorption only for `all`'s and
/// `exists`' steps).
pub fn meter(expr: &mut IdedExpr) {
    let mut next = max_id(expr) + 1;
    meter_from(expr, &mut next);
}

fn meter_from(expr: &mut IdedExpr, next: &mut u64) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                meter_from(target, next);
            }
            call.args.iter_mut().for_each(|arg| meter_from(arg, next));
        }
        Expr::Comprehension(c) => {
            for part in [&mut c.iter_range, &mut c.accu_init, &mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                meter_from(part, next);
            }
            let place = match (&c.loop_cond.expr, &mut c.loop_step.expr) {
                // `all` and `exists` stop on their condition: metered there, the error is never absorbed.
                (Expr::Literal(_), Expr::Call(step)) => match step.func_name.as_str() {
                    // `filter`, `exists_one`, and `map` with a filter: the guard runs for every element.
                    operators::CONDITIONAL if step.args.len() == 3 => Some((&mut step.args[0], false)),
                    // `map`: `@result + [e]`, the element built for every element.
                    operators::ADD => match step.args.get_mut(1).map(|list| &mut list.expr) {
                        Some(Expr::List(list)) if !list.elements.is_empty() => Some((&mut list.elements[0], true)),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            };
            match place {
                Some((place, null)) => guard(place, null, next),
                None if matches!(c.loop_cond.expr, Expr::Literal(_)) => guard(&mut c.loop_step, true, next),
                None => guard(&mut c.loop_cond, false, next),
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(|e| meter_from(e, next)),
        Expr::Map(map) => meter_entries(&mut map.entries, next),
        Expr::Struct(s) => meter_entries(&mut s.entries, next),
        Expr::Select(select) => meter_from(&mut select.operand, next),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn meter_entries(entries: &mut [IdedEntryExpr], next: &mut u64) {
    for entry in entries {
        match &mut entry.expr {
            EntryExpr::MapEntry(entry) => {
                meter_from(&mut entry.key, next);
                meter_from(&mut entry.value, next);
            }
            EntryExpr::StructField(field) => meter_from(&mut field.value, next),
        }
    }
}

/// `e` becomes `@cost() ? e : null` (or `: false`), the same value once the step is paid for.
fn guard(place: &mut IdedExpr, null: bool, next: &mut u64) {
    let mut id = || {
        *next += 1;
        *next
    };
    let meter = IdedExpr {
        id: id(),
        expr: Expr::Call(CallExpr { func_name: METER.to_owned(), target: None, args: Vec::new() }),
    };
    let otherwise = IdedExpr {
        id: id(),
        expr: Expr::Literal(match null {
            true => LiteralValue::Null,
            false => LiteralValue::Boolean(false.into()),
        }),
    };
    let id = id();
    let inner = std::mem::take(place);
    *place = IdedExpr {
        id,
        expr: Expr::Call(CallExpr {
            func_name: operators::CONDITIONAL.to_owned(),
            target: None,
            args: vec![meter, inner, otherwise],
        }),
    };
}

fn max_id(expr: &IdedExpr) -> u64 {
    let below = match &expr.expr {
        Expr::Call(call) => call.target.iter().map(|t| max_id(t)).chain(call.args.iter().map(max_id)).max(),
        Expr::Comprehension(c) => {
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result].into_iter().map(max_id).max()
        }
        Expr::List(list) => list.elements.iter().map(max_id).max(),
        Expr::Map(map) => map.entries.iter().map(entry_max).max(),
        Expr::Struct(s) => s.entries.iter().map(entry_max).max(),
        Expr::Select(select) => Some(max_id(&select.operand)),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => None,
    };
    below.unwrap_or(0).max(expr.id)
}

fn entry_max(entry: &IdedEntryExpr) -> u64 {
    let inner = match &entry.expr {
        EntryExpr::MapEntry(e) => max_id(&e.key).max(max_id(&e.value)),
        EntryExpr::StructField(f) => max_id(&f.value),
    };
    inner.max(entry.id)
}

/// Whether `value` holds more than `limit` bytes of strings, bytes and elements (each element and
/// entry counted as a byte of its own), counted only as far as the limit.
pub fn larger_than(value: &cel::Value, limit: usize) -> bool {
    fn size(value: &cel::Value, left: &mut usize) -> bool {
        let take = |n: usize, left: &mut usize| match n > *left {
            true => false,
            false => {
                *left -= n;
                true
            }
        };
        match value {
            cel::Value::String(s) => take(s.len(), left),
            cel::Value::Bytes(b) => take(b.len(), left),
            cel::Value::List(items) => items.iter().all(|item| take(1, left) && size(item, left)),
            cel::Value::Map(map) => map.map.iter().all(|(key, value)| {
                let key = match key {
                    cel::objects::Key::String(s) => s.len(),
                    _ => 8,
                };
                take(key + 1, left) && size(value, left)
            }),
            _ => take(8, left),
        }
    }
    let mut left = limit;
    !size(value, &mut left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_counted_up_to_the_limit() {
        let big = cel::Value::String(std::sync::Arc::new("x".repeat(100)));
        assert!(!larger_than(&big, 100));
        assert!(larger_than(&big, 99));
        let shared = cel::Value::List(std::sync::Arc::new(vec![big; 1000]));
        assert!(larger_than(&shared, 100_000), "a value shared a thousand times counts a thousand times");
        assert!(!larger_than(&shared, 200_000));
    }
}
