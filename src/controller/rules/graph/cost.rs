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
//! `MaxRequestBodyBytes`): nothing larger can be written, as a child or as status. So that no
//! expression builds more than that on its way either, every value a call, a comprehension or a list or
//! map literal builds passes `@built`: it is refused past 3 MiB, and it costs a step for every 10 bytes
//! of it (cel-go's traversal cost factor, 0.1 per byte), so that a comprehension cannot pile up copies
//! within the same 1,000,000 (10 MB of strings in all). Scalars cost nothing, which keeps the count of
//! steps as above. The two calls whose one result can be many times their arguments however small
//! those are (`replace`: a replacement at every character; `join`: a separator between every two
//! elements) are sent to `@replace` and `@join`, which reckon the size first and refuse before anything
//! is built. Every other call's result is at most a small multiple of its arguments, each already
//! within the bound.

use std::cell::Cell;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, operators};

/// The most steps one expression may take (`--cel-cost-limit`): by default Kubernetes' per-expression
/// cost limit, 1,000,000.
fn cost_limit() -> u64 {
    crate::limits::get().cel_cost_limit
}

/// The largest value, in bytes of its strings and elements, an expression may give or build with
/// `random.seededString`: the API server's limit on a request's body.
pub const MAX_VALUE_BYTES: usize = 3 << 20;

/// cel-go's error when a program's cost goes past its limit.
pub const COST_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// The metering function's name: `@` cannot begin a name in CEL source.
pub const METER: &str = "@cost";

/// What every value built passes (`charge`).
pub const BUILT: &str = "@built";

/// The calls whose result can be many times their arguments, and what each is sent to instead: the
/// same call, with its target first, once its size is reckoned (`would_build`).
pub const RECKONED: [(&str, &str); 2] = [("replace", "@replace"), ("join", "@join")];

/// Bytes of a value built that cost one step.
const BYTES_PER_STEP: usize = 10;

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
    SPENT.with(|spent| spent.get() > cost_limit())
}

/// One step: `true`, or an error once the limit is passed.
pub fn step() -> Result<bool, String> {
    spend(1).map(|()| true)
}

fn spend(steps: u64) -> Result<(), String> {
    SPENT.with(|spent| {
        let now = spent.get().saturating_add(steps);
        spent.set(now);
        match now > cost_limit() {
            true => Err(COST_EXCEEDED.to_owned()),
            false => Ok(()),
        }
    })
}

fn too_large(what: &str) -> String {
    format!("{what} would be larger than {} MiB, the most the API server accepts in a request", MAX_VALUE_BYTES >> 20)
}

/// What a value built costs: nothing for a scalar, a step per 10 bytes of anything else; refused past
/// [`MAX_VALUE_BYTES`].
pub fn charge(value: &cel::Value) -> Result<(), String> {
    let scalar =
        !matches!(value, cel::Value::String(_) | cel::Value::Bytes(_) | cel::Value::List(_) | cel::Value::Map(_));
    if scalar {
        return Ok(());
    }
    let mut left = MAX_VALUE_BYTES;
    if !within(value, &mut left) {
        return Err(too_large("the value"));
    }
    spend((MAX_VALUE_BYTES - left).div_ceil(BYTES_PER_STEP) as u64)
}

/// Refuses a call of `function` (one of [`RECKONED`], target first in `args`) whose result would be
/// larger than [`MAX_VALUE_BYTES`], before it is made. Arguments of other types pass, for the call itself
/// to refuse in its own words.
pub fn would_build(function: &str, args: &[cel::Value]) -> Result<(), String> {
    let text = |i: usize| match args.get(i) {
        Some(cel::Value::String(s)) => Some(s.as_str()),
        _ => None,
    };
    let size = match (function, args.first()) {
        ("replace", _) => {
            let (Some(this), Some(from), Some(to)) = (text(0), text(1), text(2)) else { return Ok(()) };
            let limit = match args.get(3) {
                Some(cel::Value::Int(n)) if *n >= 0 => Some(*n as u128),
                _ => None,
            };
            replaced_size(this, from, to, limit)
        }
        ("join", Some(cel::Value::List(items))) => {
            let parts: u128 = items
                .iter()
                .map(|item| matches!(item, cel::Value::String(_)).then(|| size_of(item)).unwrap_or(0))
                .sum();
            let separator = text(1).map_or(0, str::len) as u128;
            parts + separator * (items.len().saturating_sub(1) as u128)
        }
        _ => return Ok(()),
    };
    match size > MAX_VALUE_BYTES as u128 {
        true => Err(too_large(&format!("{function}'s result"))),
        false => Ok(()),
    }
}

/// A value's size as `within` counts it, up to just past the limit.
fn size_of(value: &cel::Value) -> u128 {
    let mut left = MAX_VALUE_BYTES + 1;
    within(value, &mut left);
    (MAX_VALUE_BYTES + 1 - left) as u128 + u128::from(left == 0)
}

fn replaced_size(this: &str, from: &str, to: &str, limit: Option<u128>) -> u128 {
    // As Go's strings.Replace: an empty `from` matches before every character and at the end.
    let found = match from.is_empty() {
        true => this.chars().count() as u128 + 1,
        false => this.matches(from).count() as u128,
    };
    let count = limit.map_or(found, |limit| found.min(limit));
    this.len() as u128 - count * from.len() as u128 + count * to.len() as u128
}

/// Puts a `@cost()` call into every comprehension of `expr`, where it is evaluated once per element,
/// without changing the comprehension's shape (the crate builds `map` and `filter` results in place
/// only for the shapes the macros make, and keeps CEL's error absorption only for `all`'s and
/// `exists`' steps).
pub fn meter(expr: &mut IdedExpr) {
    let mut next = max_id(expr) + 1;
    meter_from(expr, &mut next, None);
}

/// Whether the value `call` makes is one it builds: not an operator that gives one of its operands, a
/// boolean, or an element, and not a comprehension's own step over its accumulator `accu`, whose shape
/// the interpreter builds in place.
fn builds(call: &CallExpr, accu: Option<&str>) -> bool {
    const GIVEN: [&str; 9] = [
        operators::CONDITIONAL,
        operators::LOGICAL_AND,
        operators::LOGICAL_OR,
        operators::LOGICAL_NOT,
        operators::NOT_STRICTLY_FALSE,
        operators::INDEX,
        operators::OPT_INDEX,
        operators::OPT_SELECT,
        METER,
    ];
    !GIVEN.contains(&call.func_name.as_str()) && !on_accu(call, accu)
}

fn on_accu(call: &CallExpr, accu: Option<&str>) -> bool {
    accu.is_some_and(|accu| call.args.iter().any(|a| matches!(&a.expr, Expr::Ident(name) if name == accu)))
}

/// `place` becomes `@built(place)`.
fn wrap(place: &mut IdedExpr, next: &mut u64) {
    *next += 1;
    let inner = std::mem::take(place);
    *place = IdedExpr {
        id: *next,
        expr: Expr::Call(CallExpr { func_name: BUILT.to_owned(), target: None, args: vec![inner] }),
    };
}

fn meter_from(expr: &mut IdedExpr, next: &mut u64, accu: Option<&str>) {
    match &mut expr.expr {
        Expr::Call(call) => {
            let built = builds(call, accu);
            let keeps_shape = on_accu(call, accu);
            if let Some(target) = &mut call.target {
                meter_from(target, next, accu);
            }
            for arg in &mut call.args {
                match (&mut arg.expr, keeps_shape) {
                    // `@result + [e]`: the list literal stays as the macro made it; its element is metered.
                    (Expr::List(list), true) => list.elements.iter_mut().for_each(|e| meter_from(e, next, accu)),
                    _ => meter_from(arg, next, accu),
                }
            }
            if let Some((_, reckoned)) = RECKONED.iter().find(|(name, _)| *name == call.func_name)
                && let Some(target) = call.target.take()
            {
                call.func_name = (*reckoned).to_owned();
                call.args.insert(0, *target);
            }
            if built {
                wrap(expr, next);
            }
        }
        Expr::Comprehension(c) => {
            let own = c.accu_var.clone();
            for part in [&mut c.iter_range, &mut c.accu_init, &mut c.result] {
                meter_from(part, next, accu);
            }
            for part in [&mut c.loop_cond, &mut c.loop_step] {
                meter_from(part, next, Some(&own));
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
            wrap(expr, next);
        }
        Expr::List(list) => {
            list.elements.iter_mut().for_each(|e| meter_from(e, next, accu));
            if !list.elements.is_empty() {
                wrap(expr, next);
            }
        }
        Expr::Map(map) => {
            meter_entries(&mut map.entries, next, accu);
            if !map.entries.is_empty() {
                wrap(expr, next);
            }
        }
        Expr::Struct(s) => meter_entries(&mut s.entries, next, accu),
        Expr::Select(select) => meter_from(&mut select.operand, next, accu),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn meter_entries(entries: &mut [IdedEntryExpr], next: &mut u64, accu: Option<&str>) {
    for entry in entries {
        match &mut entry.expr {
            EntryExpr::MapEntry(entry) => {
                meter_from(&mut entry.key, next, accu);
                meter_from(&mut entry.value, next, accu);
            }
            EntryExpr::StructField(field) => meter_from(&mut field.value, next, accu),
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
    let mut left = limit;
    !within(value, &mut left)
}

/// Takes `value`'s size from `left`, and whether it all fitted (`left` is 0 once it did not).
fn within(value: &cel::Value, left: &mut usize) -> bool {
    let take = |n: usize, left: &mut usize| match n > *left {
        true => {
            *left = 0;
            false
        }
        false => {
            *left -= n;
            true
        }
    };
    match value {
        cel::Value::String(s) => take(s.len(), left),
        cel::Value::Bytes(b) => take(b.len(), left),
        cel::Value::List(items) => items.iter().all(|item| take(1, left) && within(item, left)),
        cel::Value::Map(map) => map.map.iter().all(|(key, value)| {
            let key = match key {
                cel::objects::Key::String(s) => s.len(),
                _ => 8,
            };
            take(key + 1, left) && within(value, left)
        }),
        _ => take(8, left),
    }
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
