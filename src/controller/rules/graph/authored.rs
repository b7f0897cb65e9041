//! The author's `status.conditions` expressions, checked as kro checks them before it accepts an RGD
//! (`validateConditionExpressions`): no two entries may declare the same literal type through
//! `runtime.newCondition`, a literal status must be True, False or Unknown and a literal type not
//! empty, and `runtime.condition(schema, 'X')` may read only kro's own types, not another of the
//! author's. What is only known when evaluated is left to then, as kro leaves it.

use std::collections::BTreeSet;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

use super::expr::{PARSER_ENV, compile, visit};

/// The condition types kro writes itself, which `runtime.condition(schema, ...)` may read.
const KROS: &[&str] = &["Ready", "InstanceManaged", "GraphResolved", "ResourcesReady"];

/// Checks the author's condition expressions; the error is kro's.
pub fn check(expressions: &[String]) -> Result<(), String> {
    let parsed: Vec<Option<IdedExpr>> =
        expressions.iter().map(|e| compile(&PARSER_ENV, e).ok().map(|program| program.expression().clone())).collect();
    let mut declared = BTreeSet::new();
    for root in parsed.iter().flatten() {
        let mut types = BTreeSet::new();
        visit(root, &mut |node| {
            if let Some([argument]) = runtime_call(node, "newCondition")
                && let Some(kind) = entry(argument, "type")
            {
                types.insert(kind.to_owned());
            }
        });
        for kind in types {
            if !declared.insert(kind.clone()) {
                return Err(format!("condition type {kind:?} is declared by more than one conditions entry"));
            }
        }
    }
    for (root, text) in parsed.iter().zip(expressions) {
        let Some(root) = root else { continue };
        let mut first = None;
        visit(root, &mut |node| {
            if first.is_none() {
                first = literals(node, &declared, text).err();
            }
        });
        if let Some(error) = first {
            return Err(error);
        }
    }
    Ok(())
}

/// kro's rules for one `runtime.newCondition` or `runtime.condition` call.
fn literals(node: &IdedExpr, declared: &BTreeSet<String>, text: &str) -> Result<(), String> {
    if let Some([argument]) = runtime_call(node, "newCondition") {
        if let Some(status) = entry(argument, "status")
            && !["True", "False", "Unknown"].contains(&status)
        {
            return Err(format!(
                "runtime.newCondition: status must be one of True, False, Unknown (got {status:?}) in expression {text:?}"
            ));
        }
        if entry(argument, "type") == Some("") {
            return Err(format!("runtime.newCondition: type must not be empty in expression {text:?}"));
        }
    }
    if let Some([object, kind]) = runtime_call(node, "condition")
        && matches!(&object.expr, Expr::Ident(name) if name == "schema")
        && let Expr::Literal(LiteralValue::String(kind)) = &kind.expr
    {
        let kind: &str = kind;
        if KROS.contains(&kind) {
            return Ok(());
        }
        if declared.contains(kind) {
            return Err(format!(
                "runtime.condition(schema, {kind:?}): custom conditions cannot reference each other in expression {text:?}"
            ));
        }
        return Err(format!(
            "runtime.condition(schema, {kind:?}): unknown condition type; only kro's built-in types (InstanceManaged, \
             GraphResolved, ResourcesReady, Ready) can be read from schema in expression {text:?}"
        ));
    }
    Ok(())
}

/// The arguments of `runtime.<method>(...)`, if `node` is that call.
fn runtime_call<'a>(node: &'a IdedExpr, method: &str) -> Option<&'a [IdedExpr]> {
    let Expr::Call(call) = &node.expr else { return None };
    match call.target.as_deref() {
        Some(IdedExpr { expr: Expr::Ident(target), .. }) if target == "runtime" && call.func_name == method => {
            Some(&call.args)
        }
        _ => None,
    }
}

/// The literal string value of `key` in a map literal, the key written bare (`{type: 'X'}`, as kro's
/// macro reads it) or quoted.
fn entry<'a>(map: &'a IdedExpr, key: &str) -> Option<&'a str> {
    let Expr::Map(map) = &map.expr else { return None };
    map.entries.iter().find_map(|e| match &e.expr {
        EntryExpr::MapEntry(entry) => {
            let named = match &entry.key.expr {
                Expr::Ident(name) => name == key,
                Expr::Literal(LiteralValue::String(name)) => **name == *key,
                _ => false,
            };
            match (&entry.value.expr, named) {
                (Expr::Literal(LiteralValue::String(value)), true) => Some(&**value),
                _ => None,
            }
        }
        EntryExpr::StructField(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(expressions: &[&str]) -> Result<(), String> {
        check(&expressions.iter().map(|e| e.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn kros_rules_for_the_authors_conditions() {
        let ready = "runtime.newCondition({type: 'DbReady', status: db.status.ok ? 'True' : 'False'})";
        let either = "x > 1 ? runtime.newCondition({type: 'Up', status: 'True'}) : runtime.newCondition({type: 'Up', \
                      status: 'False'})";
        let reads =
            "runtime.newCondition({type: 'Mirror', status: runtime.condition(schema, 'ResourcesReady').status})";
        assert_eq!(checked(&[ready, either, reads]), Ok(()));
        assert_eq!(
            checked(&[ready, "runtime.newCondition({\"type\": 'DbReady', status: 'True'})"]).unwrap_err(),
            "condition type \"DbReady\" is declared by more than one conditions entry"
        );
        let bad_status = "runtime.newCondition({type: 'A', status: 'Yes'})";
        assert_eq!(
            checked(&[bad_status]).unwrap_err(),
            format!(
                "runtime.newCondition: status must be one of True, False, Unknown (got \"Yes\") in expression {bad_status:?}"
            )
        );
        assert!(
            checked(&["runtime.newCondition({type: '', status: 'True'})"])
                .unwrap_err()
                .contains("type must not be empty")
        );
        let loop_ = "runtime.newCondition({type: 'B', status: runtime.condition(schema, 'DbReady').status})";
        assert!(checked(&[ready, loop_]).unwrap_err().starts_with(
            "runtime.condition(schema, \"DbReady\"): custom conditions cannot reference each other in expression"
        ));
        let typo = "runtime.newCondition({type: 'B', status: runtime.condition(schema, 'Redy').status})";
        assert!(checked(&[typo]).unwrap_err().contains("unknown condition type; only kro's built-in types"));
        let child = "runtime.newCondition({type: 'B', status: runtime.condition(db, 'Whatever').status})";
        assert_eq!(checked(&[child]), Ok(()));
    }
}
