//! The types of a graph's expressions, as kro's CEL type checker sees them: each expression's CEL type,
//! from the instance's schema and the OpenAPI schemas of the resources it reads. They declare the
//! instance CRD's status fields by kro's rules (`GenerateSchemaFromCELTypes`), and `check` refuses what
//! cel-go's checker refuses when kro accepts an RGD (a field its type does not declare, an operator
//! with no overload for its operands), in cel-go's words. An expression whose type cannot be told (a
//! function samplectl does not type, an optional) is `dyn`, and nothing is refused that depends on it:
//! the checker only ever refuses less than kro, never more.

use std::collections::HashMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::{Map, Value, json};

use super::expr::{PARSER_ENV, compile};

/// A CEL type, as far as the status schema needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Timestamp,
    Duration,
    List(Box<Ty>),
    Map(Box<Ty>),
    /// An object declared by an OpenAPI schema (its properties, refs inlined), with the name kro's
    /// type provider gives it (`__type_deployment.spec.template`).
    Object(String, Value),
    Dyn,
}

/// What kro names the type of a variable (`__type_schema`, `__type_deployment`).
pub fn root_name(variable: &str) -> String {
    format!("__type_{variable}")
}

/// The type an OpenAPI schema declares, as the API server's CEL (`SchemaDeclType`) reads it; `name`
/// is the name an object type gets (items `name.@idx`, map values `name.@elem`, fields `name.field`).
pub fn of_schema(schema: &Value, name: &str) -> Ty {
    let schema = unwrapped(schema);
    if schema["x-kubernetes-int-or-string"] == true {
        return Ty::Dyn;
    }
    match schema["type"].as_str() {
        Some("boolean") => Ty::Bool,
        Some("integer") => Ty::Int,
        Some("number") => Ty::Double,
        Some("string") => match schema["format"].as_str() {
            Some("byte") => Ty::Bytes,
            Some("date-time") => Ty::Timestamp,
            Some("duration") => Ty::Duration,
            _ => Ty::String,
        },
        Some("array") => {
            Ty::List(Box::new(schema.get("items").map_or(Ty::Dyn, |items| of_schema(items, &format!("{name}.@idx")))))
        }
        Some("object") | None if schema.get("properties").is_some_and(Value::is_object) => {
            Ty::Object(name.to_owned(), schema.clone())
        }
        Some("object") => match schema.get("additionalProperties") {
            Some(inner) if inner.is_object() => Ty::Map(Box::new(of_schema(inner, &format!("{name}.@elem")))),
            _ => Ty::Dyn,
        },
        _ => Ty::Dyn,
    }
}

/// How cel-go writes a type (`Type.String()`).
pub fn name(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "bool".into(),
        Ty::Int => "int".into(),
        Ty::Uint => "uint".into(),
        Ty::Double => "double".into(),
        Ty::String => "string".into(),
        Ty::Bytes => "bytes".into(),
        Ty::Null => "null_type".into(),
        Ty::Timestamp => "google.protobuf.Timestamp".into(),
        Ty::Duration => "google.protobuf.Duration".into(),
        Ty::List(item) => format!("list({})", name(item)),
        Ty::Map(value) => format!("map(string, {})", name(value)),
        Ty::Object(name, _) => name.clone(),
        Ty::Dyn => "dyn".into(),
    }
}

/// How cel-go's checker writes a type in its errors: as `name` does, but null is `null`.
fn checker_name(ty: &Ty) -> String {
    match ty {
        Ty::Null => "null".into(),
        other => name(other),
    }
}

/// Whether a value of type `output` may be written where `expected` is declared, as kro's
/// `validateExpressionType` judges it: CEL's assignability, then kro's structural compatibility
/// (`AreTypesStructurallyCompatible`). The error is kro's reason. Where samplectl's view of a type
/// is less precise than cel-go's (objects compared field by field), it accepts.
pub fn assignable(output: &Ty, expected: &Ty) -> Result<(), String> {
    match (output, expected) {
        (Ty::Dyn, _) | (_, Ty::Dyn) => Ok(()),
        (_, Ty::Object(..)) | (Ty::Object(..), Ty::Map(_)) => Ok(()),
        (Ty::List(out), Ty::List(exp)) => {
            assignable(out, exp).map_err(|e| format!("list element type incompatible: {e}"))
        }
        (_, Ty::List(_)) => Err(format!("list parameter count mismatch: got {}, expected 1", parameters(output))),
        (Ty::Map(out), Ty::Map(exp)) => assignable(out, exp).map_err(|e| format!("map value type incompatible: {e}")),
        (_, Ty::Map(_)) => Err(format!("map parameter count mismatch: got {}, expected 2", parameters(output))),
        _ if std::mem::discriminant(output) == std::mem::discriminant(expected) => Ok(()),
        _ => Err(format!("type kind mismatch: got {:?}, expected {:?}", name(output), name(expected))),
    }
}

/// How many type parameters cel-go gives a type.
fn parameters(ty: &Ty) -> usize {
    match ty {
        Ty::List(_) => 1,
        Ty::Map(_) => 2,
        _ => 0,
    }
}

/// A schema whose only content is `allOf: [one]` (how OpenAPI v3 wraps a `$ref` with siblings) is
/// that one.
pub fn unwrapped(schema: &Value) -> &Value {
    match schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
        Some([one]) if schema.get("properties").is_none() && schema.get("type").is_none() => unwrapped(one),
        _ => schema,
    }
}

/// Infers the type of `expression` with `vars` the types of the variables it may read.
pub fn infer(expression: &str, vars: &HashMap<String, Ty>) -> Ty {
    match compile(&PARSER_ENV, expression) {
        Ok(program) => Infer { vars, locals: Vec::new(), issues: Vec::new() }.expr(program.expression()),
        Err(_) => Ty::Dyn,
    }
}

/// Type-checks `expression` as cel-go's checker does for what samplectl can tell: its type, or the
/// checker's errors as cel-go prints them (`ERROR: <input>:1:12: undefined field 'foo'`, the line and
/// a caret under where). `locals` are variables beside `vars` (a forEach iterator, `each`).
pub fn check(expression: &str, vars: &HashMap<String, Ty>, locals: &[(String, Ty)]) -> Result<Ty, String> {
    let program = compile(&PARSER_ENV, expression)?;
    let mut infer = Infer { vars, locals: locals.to_vec(), issues: Vec::new() };
    let ty = infer.expr(program.expression());
    if infer.issues.is_empty() {
        return Ok(ty);
    }
    let mut located: Vec<(usize, String)> = infer
        .issues
        .into_iter()
        .map(|(id, message)| {
            let offset = program.source_info().offset_for(id).map_or(0, |(start, _)| start as usize);
            (offset, message)
        })
        .collect();
    located.sort();
    located.dedup();
    Err(located.iter().map(|(offset, message)| display(expression, *offset, message)).collect::<Vec<_>>().join("\n"))
}

/// One error as cel-go displays it against its source (`Error.ToDisplayString`): 1-based line and
/// column, the line, and a caret under the column.
fn display(source: &str, offset: usize, message: &str) -> String {
    let before: Vec<char> = source.chars().take(offset).collect();
    let line_start = before.iter().rposition(|c| *c == '\n').map_or(0, |i| i + 1);
    let line = before[..line_start].iter().filter(|c| **c == '\n').count() + 1;
    let column = before.len() - line_start;
    let snippet: String = source.chars().skip(line_start).take_while(|c| *c != '\n').collect();
    let snippet = snippet.replace('\t', " ");
    let caret: String = snippet.chars().take(column).map(|c| if c.len_utf8() > 1 { '\u{ff0e}' } else { '.' }).collect();
    format!("ERROR: <input>:{line}:{}: {message}\n | {snippet}\n | {caret}^", column + 1)
}

struct Infer<'v> {
    vars: &'v HashMap<String, Ty>,
    /// Variables bound on top of `vars` (a comprehension's), the last binding of a name winning.
    locals: Vec<(String, Ty)>,
    /// What cel-go's checker would refuse, by the id of the node it is about.
    issues: Vec<(u64, String)>,
}

impl Infer<'_> {
    fn lookup(&self, name: &str) -> Option<&Ty> {
        self.locals.iter().rev().find(|(n, _)| n == name).map(|(_, t)| t).or_else(|| self.vars.get(name))
    }

    fn expr(&mut self, node: &IdedExpr) -> Ty {
        match &node.expr {
            Expr::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            },
            Expr::Ident(name) => self.lookup(name).cloned().unwrap_or(Ty::Dyn),
            Expr::Select(select) => {
                let operand = self.expr(&select.operand);
                if let Some(why) = undeclared(&operand, &select.field) {
                    self.issues.push((node.id, why));
                    return Ty::Dyn;
                }
                match select.test {
                    true => Ty::Bool,
                    false => field(&operand, &select.field),
                }
            }
            Expr::List(list) => {
                let items: Vec<Ty> = list.elements.iter().map(|e| self.expr(e)).collect();
                Ty::List(Box::new(same(items)))
            }
            Expr::Map(map) => {
                let values: Vec<Ty> = map
                    .entries
                    .iter()
                    .map(|e| match &e.expr {
                        EntryExpr::MapEntry(entry) => {
                            self.expr(&entry.key);
                            self.expr(&entry.value)
                        }
                        EntryExpr::StructField(f) => self.expr(&f.value),
                    })
                    .collect();
                Ty::Map(Box::new(same(values)))
            }
            Expr::Struct(_) | Expr::Unspecified => Ty::Dyn,
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let element = match &range {
                    Ty::List(item) => (**item).clone(),
                    Ty::Map(_) | Ty::Object(..) => Ty::String,
                    _ => Ty::Dyn,
                };
                let depth = self.locals.len();
                self.locals.push((c.iter_var.clone(), element));
                if let Some(second) = &c.iter_var2 {
                    self.locals.push((second.clone(), Ty::Dyn));
                }
                let init = self.expr(&c.accu_init);
                self.locals.push((c.accu_var.clone(), init));
                self.expr(&c.loop_cond);
                let step = self.expr(&c.loop_step);
                self.locals.push((c.accu_var.clone(), step));
                let result = self.expr(&c.result);
                self.locals.truncate(depth);
                result
            }
            Expr::Call(call) if call.func_name == "_[_]" => {
                let operand = call.args.first().map_or(Ty::Dyn, |a| self.expr(a));
                call.args.iter().skip(1).for_each(|a| {
                    self.expr(a);
                });
                if let Ty::Object(name, _) = &operand {
                    // An object is a message to cel-go: it has fields, not keys.
                    let key = call.args.get(1).map_or(Ty::Dyn, |a| self.expr(a));
                    self.issues.push((
                        node.id,
                        format!("found no matching overload for '_[_]' applied to '({name}, {})'", checker_name(&key)),
                    ));
                }
                match (&operand, call.args.get(1).map(|a| &a.expr)) {
                    (Ty::Object(..), Some(Expr::Literal(LiteralValue::String(key)))) => field(&operand, key),
                    (Ty::List(item), _) => (**item).clone(),
                    (Ty::Map(value), _) => (**value).clone(),
                    _ => Ty::Dyn,
                }
            }
            // `a.?f`: the field, if `a` has it, as what it would be (samplectl does not type optionals).
            Expr::Call(call) if call.func_name == "_?._" => {
                let operand = call.args.first().map_or(Ty::Dyn, |a| self.expr(a));
                let Some(Expr::Literal(LiteralValue::String(name))) = call.args.get(1).map(|a| &a.expr) else {
                    return Ty::Dyn;
                };
                if let Ty::Object(..) = operand
                    && let Some(why) = undeclared(&operand, name)
                {
                    self.issues.push((node.id, why));
                    return Ty::Dyn;
                }
                field(&operand, name)
            }
            Expr::Call(call) => {
                let namespace = match call.target.as_deref() {
                    Some(IdedExpr { expr: Expr::Ident(ns), .. }) if self.lookup(ns).is_none() => Some(ns.as_str()),
                    _ => None,
                };
                let target = match namespace {
                    Some(_) => None,
                    None => call.target.as_deref().map(|t| self.expr(t)),
                };
                let args: Vec<Ty> = call.args.iter().map(|a| self.expr(a)).collect();
                if namespace.is_none()
                    && target.is_none()
                    && let Some(operands) = no_overload(&call.func_name, &args)
                {
                    self.issues.push((
                        node.id,
                        format!("found no matching overload for '{}' applied to '({operands})'", call.func_name),
                    ));
                    return Ty::Dyn;
                }
                function(&call.func_name, namespace, target, args)
            }
        }
    }
}

/// Why selecting `name` from `operand` does not type-check: an object whose schema declares its
/// fields (and keeps no others) and not this one, or a value that has no fields.
fn undeclared(operand: &Ty, name: &str) -> Option<String> {
    let schema = match operand {
        Ty::Object(_, schema) => schema,
        Ty::Map(_) | Ty::Dyn => return None,
        other => return Some(format!("type '{}' does not support field selection", checker_name(other))),
    };
    let schema = unwrapped(schema);
    // An embedded object has apiVersion, kind and metadata whether its schema lists them or not.
    let embedded =
        schema["x-kubernetes-embedded-resource"] == true && ["apiVersion", "kind", "metadata"].contains(&name);
    let open = embedded
        || schema["x-kubernetes-preserve-unknown-fields"] == true
        || schema.get("additionalProperties").is_some_and(|a| a.is_object() || *a == true);
    let declared = schema["properties"].as_object().is_some_and(|p| p.contains_key(name));
    (!open && !declared).then(|| format!("undefined field '{name}'"))
}

/// The operand types of an operator call that no overload of cel-go's standard library accepts, as
/// cel-go lists them; `None` when one does, or when an operand's type is not known for certain.
fn no_overload(function: &str, args: &[Ty]) -> Option<String> {
    let scalar = |t: &Ty| {
        matches!(t, Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes | Ty::Timestamp | Ty::Duration)
    };
    let primitive =
        |t: &Ty| matches!(t, Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes | Ty::Null);
    let listed = || args.iter().map(checker_name).collect::<Vec<_>>().join(", ");
    // Equality and the conditional want their operands (branches) of one type; kro's environment has
    // no cross-type numeric comparison.
    let same_or_unknown = |a: &Ty, b: &Ty| a == b || !primitive(a) || !primitive(b);
    match (function, args) {
        ("_==_" | "_!=_", [a, b]) => return (!same_or_unknown(a, b)).then(listed),
        ("_?_:_", [condition, a, b]) => {
            let refused = (primitive(condition) && *condition != Ty::Bool) || !same_or_unknown(a, b);
            return refused.then(listed);
        }
        _ => {}
    }
    let certain = |t: &Ty| scalar(t) || matches!(t, Ty::List(_) | Ty::Map(_));
    if !args.iter().all(certain) {
        return None;
    }
    let accepted = match (function, args) {
        ("_+_", [a, b]) => match (a, b) {
            (Ty::List(_), Ty::List(_)) => true,
            (Ty::Timestamp, Ty::Duration) | (Ty::Duration, Ty::Timestamp) => true,
            _ => a == b && matches!(a, Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes | Ty::Duration),
        },
        ("_-_", [a, b]) => match (a, b) {
            (Ty::Timestamp, Ty::Timestamp | Ty::Duration) => true,
            _ => a == b && matches!(a, Ty::Int | Ty::Uint | Ty::Double | Ty::Duration),
        },
        ("_*_" | "_/_", [a, b]) => a == b && numeric(a),
        ("_%_", [a, b]) => a == b && matches!(a, Ty::Int | Ty::Uint),
        ("_<_" | "_<=_" | "_>_" | "_>=_", [a, b]) => a == b && scalar(a),
        ("_&&_" | "_||_", [a, b]) => *a == Ty::Bool && *b == Ty::Bool,
        ("!_", [a]) => *a == Ty::Bool,
        ("-_", [a]) => matches!(a, Ty::Int | Ty::Double),
        _ => true,
    };
    (!accepted).then(listed)
}

/// The one type every item has, or dyn.
fn same(items: Vec<Ty>) -> Ty {
    let mut items = items.into_iter();
    match items.next() {
        Some(first) if items.all(|t| t == first) => first,
        _ => Ty::Dyn,
    }
}

/// The type both branches of a conditional (or both sides of a list concatenation) have: an empty
/// list literal's items and a null take the other side's.
fn unify(a: &Ty, b: &Ty) -> Option<Ty> {
    match (a, b) {
        _ if a == b => Some(a.clone()),
        (Ty::Null, other) | (other, Ty::Null) => Some(other.clone()),
        (Ty::List(x), Ty::List(y)) => match (&**x, &**y) {
            (Ty::Dyn, other) | (other, Ty::Dyn) => Some(Ty::List(Box::new(other.clone()))),
            _ => None,
        },
        _ => None,
    }
}

fn field(operand: &Ty, field: &str) -> Ty {
    match operand {
        Ty::Object(name, schema) => match unwrapped(schema)["properties"].get(field) {
            Some(property) => of_schema(property, &format!("{name}.{field}")),
            None => Ty::Dyn,
        },
        Ty::Map(value) => (**value).clone(),
        _ => Ty::Dyn,
    }
}

fn numeric(t: &Ty) -> bool {
    matches!(t, Ty::Int | Ty::Uint | Ty::Double)
}

/// The result type of a call: operators, the standard functions and kro's libraries.
fn function(name: &str, namespace: Option<&str>, target: Option<Ty>, args: Vec<Ty>) -> Ty {
    let first = || args.first().cloned().unwrap_or(Ty::Dyn);
    match (namespace, name) {
        (Some("random"), "seededString") => Ty::String,
        (Some("random"), "seededInt") => Ty::Int,
        (Some("hash"), _) | (Some("json"), "marshal" | "encode") | (Some("base64"), "encode") => Ty::String,
        (Some("ip"), "isCanonical") => Ty::Bool,
        (Some("base64"), "decode") => Ty::Bytes,
        (Some("math"), "greatest" | "least") => same(args),
        (Some("math"), "ceil" | "floor" | "round" | "trunc" | "sqrt") => Ty::Double,
        (Some("math"), "isNaN" | "isInf" | "isFinite") => Ty::Bool,
        (Some("math"), "abs" | "sign") => first(),
        (Some("strings"), "quote") => Ty::String,
        (Some("lists"), "setAtIndex" | "insertAtIndex" | "removeAtIndex") => first(),
        (Some(_), _) => Ty::Dyn,
        (None, _) => match name {
            "_==_"
            | "_!=_"
            | "_<_"
            | "_<=_"
            | "_>_"
            | "_>=_"
            | "_&&_"
            | "_||_"
            | "!_"
            | "@in"
            | "@not_strictly_false" => Ty::Bool,
            "_?_:_" => match (args.get(1), args.get(2)) {
                (Some(a), Some(b)) => unify(a, b).unwrap_or(Ty::Dyn),
                _ => Ty::Dyn,
            },
            "_+_" => match (args.first(), args.get(1)) {
                (Some(a @ Ty::List(_)), Some(b @ Ty::List(_))) => unify(a, b).unwrap_or(Ty::Dyn),
                (Some(a), Some(b)) if a == b && (numeric(a) || matches!(a, Ty::String | Ty::Bytes)) => a.clone(),
                (Some(Ty::Timestamp), Some(Ty::Duration)) | (Some(Ty::Duration), Some(Ty::Timestamp)) => Ty::Timestamp,
                _ => Ty::Dyn,
            },
            "_-_" => match (args.first(), args.get(1)) {
                (Some(Ty::Timestamp), Some(Ty::Timestamp)) => Ty::Duration,
                (Some(a), Some(b)) if a == b && (numeric(a) || *a == Ty::Duration) => a.clone(),
                _ => Ty::Dyn,
            },
            "_*_" | "_/_" | "_%_" => match (args.first(), args.get(1)) {
                (Some(a), Some(b)) if a == b && numeric(a) => a.clone(),
                _ => Ty::Dyn,
            },
            "-_" => first(),
            "size" => Ty::Int,
            "int" => Ty::Int,
            "uint" => Ty::Uint,
            "double" => Ty::Double,
            "string" => Ty::String,
            "bool" => Ty::Bool,
            "bytes" => Ty::Bytes,
            "timestamp" => Ty::Timestamp,
            "duration" => Ty::Duration,
            "contains" | "startsWith" | "endsWith" | "matches" | "exists" | "all" | "exists_one" | "isSorted" => {
                Ty::Bool
            }
            "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "format" | "charAt" | "reverse"
                if target.as_ref().is_none_or(|t| *t == Ty::String) =>
            {
                Ty::String
            }
            "join" => Ty::String,
            "indexOf" | "lastIndexOf" => Ty::Int,
            "split" => Ty::List(Box::new(Ty::String)),
            "getFullYear" | "getMonth" | "getDate" | "getDayOfMonth" | "getDayOfWeek" | "getDayOfYear" | "getHours"
            | "getMinutes" | "getSeconds" | "getMilliseconds" => Ty::Int,
            "sum" | "min" | "max" => match target {
                Some(Ty::List(item)) => *item,
                _ => Ty::Dyn,
            },
            "distinct" | "sort" | "reverseList" => target.unwrap_or(Ty::Dyn),
            "flatten" => match target {
                Some(Ty::List(item)) => match *item {
                    Ty::List(inner) => Ty::List(inner),
                    _ => Ty::Dyn,
                },
                _ => Ty::Dyn,
            },
            "merge" | "deepMerge" => target.unwrap_or(Ty::Dyn),
            _ => Ty::Dyn,
        },
    }
}

/// The CRD schema kro declares for a status field of type `ty` (`inferSchemaFromCELType`).
pub fn to_schema(ty: &Ty) -> Value {
    match ty {
        Ty::Timestamp => {
            json!({"description": "Timestamp representing a creation time", "type": "string", "format": "date-time"})
        }
        Ty::Duration => {
            json!({"description": "unknown CEL type: google.protobuf.Duration", "x-kubernetes-preserve-unknown-fields": true})
        }
        _ => declared(ty),
    }
}

/// A type's schema inside another (`extractSchemaFromDeclType`): objects with every field, and
/// anything not primitive, a list, a map or an object left open.
fn declared(ty: &Ty) -> Value {
    match ty {
        Ty::Bool => json!({"type": "boolean"}),
        Ty::Int | Ty::Uint => json!({"type": "integer"}),
        Ty::Double => json!({"type": "number"}),
        Ty::String => json!({"type": "string"}),
        Ty::Bytes => json!({"type": "string", "format": "byte"}),
        Ty::Null => {
            json!({"description": "null type - any value allowed", "x-kubernetes-preserve-unknown-fields": true})
        }
        Ty::List(item) => json!({"type": "array", "items": declared(item)}),
        Ty::Map(value) => json!({"type": "object", "additionalProperties": declared(value)}),
        Ty::Object(_, schema) => {
            let properties: Map<String, Value> = schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, property)| (name.clone(), declared(&of_schema(property, name))))
                .collect();
            json!({"type": "object", "properties": properties})
        }
        Ty::Timestamp | Ty::Duration | Ty::Dyn => json!({"x-kubernetes-preserve-unknown-fields": true}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Ty {
        of_schema(
            &json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "strategy": {"allOf": [{"type": "object", "properties": {"type": {"type": "string"}}}]}}},
            "status": {"type": "object", "properties": {
                "availableReplicas": {"type": "integer"},
                "conditions": {"type": "array", "items": {"type": "object", "properties": {
                    "type": {"type": "string"}, "status": {"type": "string"},
                    "lastUpdateTime": {"type": "string", "format": "date-time"}}}}}}}}),
            "__type_deployment",
        )
    }

    fn vars() -> HashMap<String, Ty> {
        let schema = of_schema(
            &json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}}}}}),
            "__type_schema",
        );
        HashMap::from([("schema".to_owned(), schema), ("deployment".to_owned(), deployment())])
    }

    #[test]
    fn fields_literals_operators_and_functions_are_typed() {
        let vars = vars();
        let t = |e: &str| infer(e, &vars);
        assert_eq!(t("deployment.status.availableReplicas"), Ty::Int);
        assert_eq!(t("deployment.metadata.name"), Ty::String);
        assert_eq!(t("deployment.spec.strategy.type"), Ty::String);
        assert_eq!(t("deployment.metadata.labels['app']"), Ty::String);
        assert_eq!(t("deployment.status.conditions[0].status"), Ty::String);
        assert_eq!(t("deployment.status.availableReplicas == schema.spec.port"), Ty::Bool);
        assert_eq!(t("schema.spec.port + 1"), Ty::Int);
        assert_eq!(t("schema.spec.name + '-x'"), Ty::String);
        assert_eq!(t("string(schema.spec.port)"), Ty::String);
        assert_eq!(t("size(deployment.status.conditions)"), Ty::Int);
        assert_eq!(t("has(deployment.status.availableReplicas)"), Ty::Bool);
        assert_eq!(t("deployment.status.conditions.exists(c, c.type == 'Available')"), Ty::Bool);
        assert_eq!(t("deployment.status.conditions.map(c, c.type)"), Ty::List(Box::new(Ty::String)));
        assert_eq!(
            t("deployment.status.conditions.filter(c, c.status == 'True').map(c, c.type)"),
            Ty::List(Box::new(Ty::String))
        );
        assert_eq!(t("schema.spec.port > 1 ? 'big' : 'small'"), Ty::String);
        assert_eq!(t("deployment.metadata.creationTimestamp"), Ty::Timestamp);
        assert_eq!(t("deployment.?status.orValue(1)"), Ty::Dyn);
        assert_eq!(t("unknown.field"), Ty::Dyn);
        assert_eq!(t("random.seededString(8, schema.spec.name)"), Ty::String);
    }

    #[test]
    fn what_cel_gos_checker_refuses_is_refused_in_its_words() {
        let vars = vars();
        let refused = |e: &str| check(e, &vars, &[]).unwrap_err();
        assert_eq!(
            refused("deployment.spec.nope"),
            "ERROR: <input>:1:16: undefined field 'nope'\n | deployment.spec.nope\n | ...............^"
        );
        assert_eq!(
            refused("schema.spec.name.first"),
            "ERROR: <input>:1:17: type 'string' does not support field selection\n | schema.spec.name.first\n | \
             ................^"
        );
        assert_eq!(
            refused("schema.spec.port +\n  'x'"),
            "ERROR: <input>:1:18: found no matching overload for '_+_' applied to '(int, string)'\n | schema.spec.port +\n | \
             .................^"
        );
        assert!(refused("has(deployment.status.nope) && true").contains("undefined field 'nope'"));
        assert!(refused("!schema.spec.port").contains("found no matching overload for '!_' applied to '(int)'"));
        assert!(
            refused("schema.spec.port > 2.5").contains("no matching overload for '_>_' applied to '(int, double)'")
        );
        assert!(refused("deployment.spec.replicas == null").contains("'_==_' applied to '(int, null)'"));
        assert!(
            refused("schema.spec.port > 1 ? schema.spec.name : null")
                .contains("'_?_:_' applied to '(bool, string, null)'")
        );
        assert!(
            refused("deployment.metadata['name']").contains("'_[_]' applied to '(__type_deployment.metadata, string)'")
        );
        assert!(refused("deployment.?spec.nope.orValue(1)").contains("undefined field 'nope'"));
        assert!(refused("deployment.?spec.replicas.nope").contains("type 'int' does not support field selection"));
        for fine in [
            "deployment.metadata.labels.app",
            "double(schema.spec.port) + 1.0 > 2.5",
            "deployment.metadata.labels == null ? 'a' : 'b'",
            "schema.spec.port == 1 ? deployment.metadata.labels['x'] : 'y'",
            "deployment.?status.availableReplicas.orValue(1)",
            "unknown.anything + 1",
            "deployment.status.conditions.exists(c, c.type == 'Available')",
            "schema.spec.name + string(schema.spec.port)",
        ] {
            assert!(check(fine, &vars, &[]).is_ok(), "{fine}: {:?}", check(fine, &vars, &[]));
        }
    }

    #[test]
    fn types_become_kros_schemas() {
        let vars = vars();
        assert_eq!(to_schema(&infer("deployment.status.availableReplicas", &vars)), json!({"type": "integer"}));
        assert_eq!(to_schema(&Ty::Dyn), json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(
            to_schema(&infer("deployment.metadata.creationTimestamp", &vars)),
            json!({"description": "Timestamp representing a creation time", "type": "string", "format": "date-time"})
        );
        let conditions = to_schema(&infer("deployment.status.conditions", &vars));
        assert_eq!(
            conditions,
            json!({"type": "array", "items": {"type": "object", "properties": {
                "type": {"type": "string"}, "status": {"type": "string"},
                "lastUpdateTime": {"x-kubernetes-preserve-unknown-fields": true}}}})
        );
        assert_eq!(
            to_schema(&infer("deployment.metadata.labels", &vars)),
            json!({"type": "object", "additionalProperties": {"type": "string"}})
        );
    }
}
