//! cel-go's `ext.Bindings()` and `ext.TwoVarComprehensions()`, which kro's environment enables, as
//! macros over what the `cel` crate's interpreter has: single-variable comprehensions.
//!
//! - `cel.bind(x, init, e)` is what cel-go expands it to: a comprehension over an empty list whose
//!   accumulator `x` starts as `init`, giving `e`.
//! - The two-variable forms (`all`, `exists`, `existsOne`/`exists_one` with three arguments,
//!   `transformList`, `transformMap`, `transformMapEntry`) bind the target once (`@it`), iterate its
//!   indices (a list) or keys (a map) with the first variable (`@keys`), and bind the second to the
//!   element (`@it[i]`) around each expression the user wrote. The steps and results are cel-go's own:
//!   `all` and `exists` stop as theirs do and absorb errors as theirs do; `transformMap` and
//!   `transformMapEntry` build their map from the list of entries the comprehension made, once, and a
//!   key made twice fails as cel-go's does.
//!
//! `@`-names cannot be written in CEL source, so none of these can collide with a user's variable.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{CallExpr, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, operators};
use cel::objects::{Key, Map};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Env, ExecutionError, Value};

/// The accumulator every comprehension of these macros keeps, as cel-go names it.
const ACCU: &str = "@result";
/// The target, evaluated once.
const TARGET: &str = "@it";
/// A list's indices, or a map itself (iterated, a map gives its keys).
pub const KEYS: &str = "@keys";
/// A list of `[key, value]` pairs as a map.
pub const PAIRS_TO_MAP: &str = "@pairsToMap";
/// A list of maps as one map; a key in two of them fails.
pub const ENTRIES_TO_MAP: &str = "@entriesToMap";

pub fn add(env: &mut Env) {
    let mut add = |m: Macro| env.add_macro(m).expect("the macros are cel-go's, of names the crate has not taken");
    add(Macro::receiver("bind", 3, bind));
    for name in ["all", "exists", "existsOne", "exists_one"] {
        add(Macro::receiver(name, 3, move |h, t, a| quantifier(name, h, t, a)));
    }
    for name in ["transformList", "transformMap", "transformMapEntry"] {
        for count in [3, 4] {
            add(Macro::receiver(name, count, move |h, t, a| transform(name, h, t, a)));
        }
    }
}

type Expanded = Result<Option<IdedExpr>, ParseError>;

fn ident(h: &mut MacroExprHelper<'_>, name: &str) -> IdedExpr {
    h.next_expr(Expr::Ident(name.to_owned()))
}

fn call(h: &mut MacroExprHelper<'_>, function: &str, args: Vec<IdedExpr>) -> IdedExpr {
    h.next_expr(Expr::Call(CallExpr { func_name: function.to_owned(), target: None, args }))
}

fn literal(h: &mut MacroExprHelper<'_>, value: LiteralValue) -> IdedExpr {
    h.next_expr(Expr::Literal(value))
}

fn list(h: &mut MacroExprHelper<'_>, elements: Vec<IdedExpr>) -> IdedExpr {
    h.next_expr(Expr::List(ListExpr::new(elements)))
}

fn comprehension(h: &mut MacroExprHelper<'_>, c: ComprehensionExpr) -> IdedExpr {
    h.next_expr(Expr::Comprehension(Box::new(c)))
}

/// `name` bound to `init` while `body` is evaluated.
fn bound(h: &mut MacroExprHelper<'_>, name: &str, init: IdedExpr, body: IdedExpr) -> IdedExpr {
    let range = list(h, Vec::new());
    let (cond, step) = (literal(h, LiteralValue::Boolean(false.into())), ident(h, name));
    comprehension(
        h,
        ComprehensionExpr {
            iter_range: range,
            iter_var: "#unused".to_owned(),
            iter_var2: None,
            accu_var: name.to_owned(),
            accu_init: init,
            loop_cond: cond,
            loop_step: step,
            result: body,
        },
    )
}

fn bind(h: &mut MacroExprHelper<'_>, target: &mut Option<IdedExpr>, args: &mut Vec<IdedExpr>) -> Expanded {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(name)) if name == "cel") {
        return Ok(None);
    }
    let name = match &args[0].expr {
        Expr::Ident(name) => name.clone(),
        _ => return Err(h.new_error(args[0].id, "cel.bind() variable names must be simple identifiers")),
    };
    let body = args.pop().expect("three arguments");
    let init = args.pop().expect("three arguments");
    Ok(Some(bound(h, &name, init, body)))
}

/// The two iteration variables, checked as cel-go checks them.
fn variables(h: &mut MacroExprHelper<'_>, args: &[IdedExpr]) -> Result<(String, String), ParseError> {
    let name = |h: &mut MacroExprHelper<'_>, arg: &IdedExpr| match &arg.expr {
        Expr::Ident(name) => Ok(name.clone()),
        _ => Err(h.new_error(arg.id, "argument must be a simple name")),
    };
    let (first, second) = (name(h, &args[0])?, name(h, &args[1])?);
    if first == second {
        return Err(h.new_error(args[1].id, format!("duplicate variable name: {first}")));
    }
    for (arg, var) in [(&args[0], &first), (&args[1], &second)] {
        if var == ACCU || var == "__result__" {
            return Err(h.new_error(arg.id, "iteration variable overwrites accumulator variable"));
        }
    }
    Ok((first, second))
}

/// `expr` with the second variable bound to the element the first one names.
fn with_value(h: &mut MacroExprHelper<'_>, (first, second): (&str, &str), expr: IdedExpr) -> IdedExpr {
    let (it, key) = (ident(h, TARGET), ident(h, first));
    let element = call(h, operators::INDEX, vec![it, key]);
    bound(h, second, element, expr)
}

/// The comprehension over the target's keys with the first variable, bound around it to the target.
fn over_target(
    h: &mut MacroExprHelper<'_>,
    target: IdedExpr,
    first: &str,
    (init, cond, step, result): (IdedExpr, IdedExpr, IdedExpr, IdedExpr),
) -> IdedExpr {
    let it = ident(h, TARGET);
    let keys = call(h, KEYS, vec![it]);
    let loop_ = comprehension(
        h,
        ComprehensionExpr {
            iter_range: keys,
            iter_var: first.to_owned(),
            iter_var2: None,
            accu_var: ACCU.to_owned(),
            accu_init: init,
            loop_cond: cond,
            loop_step: step,
            result,
        },
    );
    bound(h, TARGET, target, loop_)
}

fn quantifier(
    name: &str,
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Expanded {
    let (first, second) = variables(h, args)?;
    let target = target.take().expect("a receiver macro");
    let predicate = args.pop().expect("three arguments");
    let predicate = with_value(h, (&first, &second), predicate);
    let accu = |h: &mut MacroExprHelper<'_>| ident(h, ACCU);
    let parts = match name {
        "all" => {
            let (init, a) = (literal(h, LiteralValue::Boolean(true.into())), accu(h));
            let cond = call(h, operators::NOT_STRICTLY_FALSE, vec![a]);
            let a = accu(h);
            let step = call(h, operators::LOGICAL_AND, vec![a, predicate]);
            (init, cond, step, accu(h))
        }
        "exists" => {
            let (init, a) = (literal(h, LiteralValue::Boolean(false.into())), accu(h));
            let not = call(h, operators::LOGICAL_NOT, vec![a]);
            let cond = call(h, operators::NOT_STRICTLY_FALSE, vec![not]);
            let a = accu(h);
            let step = call(h, operators::LOGICAL_OR, vec![a, predicate]);
            (init, cond, step, accu(h))
        }
        _ => {
            let (init, cond) =
                (literal(h, LiteralValue::Int(0.into())), literal(h, LiteralValue::Boolean(true.into())));
            let (a, one) = (accu(h), literal(h, LiteralValue::Int(1.into())));
            let plus = call(h, operators::ADD, vec![a, one]);
            let a = accu(h);
            let step = call(h, operators::CONDITIONAL, vec![predicate, plus, a]);
            let (a, one) = (accu(h), literal(h, LiteralValue::Int(1.into())));
            let result = call(h, operators::EQUALS, vec![a, one]);
            (init, cond, step, result)
        }
    };
    Ok(Some(over_target(h, target, &first, parts)))
}

fn transform(
    name: &str,
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Expanded {
    let (first, second) = variables(h, args)?;
    let target = target.take().expect("a receiver macro");
    let expr = args.pop().expect("three or four arguments");
    let filter = (args.len() == 3).then(|| args.pop().expect("four arguments"));
    let vars = (first.as_str(), second.as_str());
    let expr = with_value(h, vars, expr);
    // What each element adds to the list the comprehension builds.
    let element = match name {
        "transformMap" => {
            let key = ident(h, &first);
            list(h, vec![key, expr])
        }
        _ => expr,
    };
    let (a, added) = (ident(h, ACCU), list(h, vec![element]));
    let mut step = call(h, operators::ADD, vec![a, added]);
    if let Some(filter) = filter {
        let filter = with_value(h, vars, filter);
        let a = ident(h, ACCU);
        step = call(h, operators::CONDITIONAL, vec![filter, step, a]);
    }
    let (init, cond, result) = (list(h, Vec::new()), literal(h, LiteralValue::Boolean(true.into())), ident(h, ACCU));
    let built = over_target(h, target, &first, (init, cond, step, result));
    Ok(Some(match name {
        "transformMap" => call(h, PAIRS_TO_MAP, vec![built]),
        "transformMapEntry" => call(h, ENTRIES_TO_MAP, vec![built]),
        _ => built,
    }))
}

/// `@keys`: a list's indices, or a map as it is (a comprehension over a map iterates its keys).
pub fn keys(value: Value) -> Result<Value, ExecutionError> {
    match value {
        Value::List(items) => Ok(Value::List(Arc::new((0..items.len() as i64).map(Value::Int).collect()))),
        map @ Value::Map(_) => Ok(map),
        other => Err(ExecutionError::function_error(
            KEYS,
            format!("two-variable comprehensions take a list or a map, not {}", other.type_of()),
        )),
    }
}

fn key_of(value: &Value) -> Result<Key, ExecutionError> {
    match value {
        Value::Int(i) => Ok(Key::Int(*i)),
        Value::UInt(u) => Ok(Key::Uint(*u)),
        Value::Bool(b) => Ok(Key::Bool(*b)),
        Value::String(s) => Ok(Key::String(s.clone())),
        other => {
            Err(ExecutionError::function_error(PAIRS_TO_MAP, format!("unsupported key type: {}", other.type_of())))
        }
    }
}

/// `@pairsToMap`: `[[k, v], ...]` as `{k: v, ...}`.
pub fn pairs_to_map(pairs: Arc<Vec<Value>>) -> Result<Value, ExecutionError> {
    let mut map = HashMap::with_capacity(pairs.len());
    for pair in pairs.iter() {
        let Value::List(pair) = pair else { return Err(ExecutionError::function_error(PAIRS_TO_MAP, "not a pair")) };
        map.insert(key_of(&pair[0])?, pair[1].clone());
    }
    Ok(Value::Map(Map { map: Arc::new(map) }))
}

/// `@entriesToMap`: the maps a `transformMapEntry` made, as one; a key given twice fails as cel-go's
/// `InsertMapKeyValue` does.
pub fn entries_to_map(entries: Arc<Vec<Value>>) -> Result<Value, ExecutionError> {
    let mut map: HashMap<Key, Value> = HashMap::new();
    for entry in entries.iter() {
        let Value::Map(entry) = entry else {
            return Err(ExecutionError::function_error(
                ENTRIES_TO_MAP,
                "transformMapEntry's expression must give a map",
            ));
        };
        for (key, value) in entry.map.iter() {
            if map.contains_key(key) || twin(key).is_some_and(|twin| map.contains_key(&twin)) {
                let shown = Value::from(key.clone());
                return Err(ExecutionError::function_error(
                    ENTRIES_TO_MAP,
                    format!("insert failed: key {} already exists", go_display(&shown)),
                ));
            }
            map.insert(key.clone(), value.clone());
        }
    }
    Ok(Value::Map(Map { map: Arc::new(map) }))
}

/// The key CEL's equality also takes for `key`: an int and a uint of the same number are one key.
fn twin(key: &Key) -> Option<Key> {
    match key {
        Key::Int(i) => u64::try_from(*i).ok().map(Key::Uint),
        Key::Uint(u) => i64::try_from(*u).ok().map(Key::Int),
        _ => None,
    }
}

/// A key as Go's `%v` prints a CEL value.
fn go_display(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}
