//! The types of a graph's status expressions, as kro infers them to declare the instance CRD's status
//! fields: each expression's CEL type, from the instance's schema and the OpenAPI schemas of the
//! resources it reads, turned into a CRD schema by kro's rules (`GenerateSchemaFromCELTypes`). An
//! expression whose type cannot be told (a function samplectl does not type, an optional, a field the
//! schema does not declare) is `dyn`, which kro declares as `x-kubernetes-preserve-unknown-fields`.

use std::collections::HashMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::{Map, Value, json};

use super::expr::PARSER_ENV;

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
    /// An object declared by an OpenAPI schema (its properties, refs inlined).
    Object(Value),
    Dyn,
}

/// The type an OpenAPI schema declares, as the API server's CEL (`SchemaDeclType`) reads it.
pub fn of_schema(schema: &Value) -> Ty {
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
        Some("array") => Ty::List(Box::new(schema.get("items").map_or(Ty::Dyn, of_schema))),
        Some("object") | None if schema.get("properties").is_some_and(Value::is_object) => Ty::Object(schema.clone()),
        Some("object") => match schema.get("additionalProperties") {
            Some(inner) if inner.is_object() => Ty::Map(Box::new(of_schema(inner))),
            _ => Ty::Dyn,
        },
        _ => Ty::Dyn,
    }
}

/// A schema whose only content is `allOf: [one]` (how OpenAPI v3 wraps a `$ref` with siblings) is
/// that one.
fn unwrapped(schema: &Value) -> &Value {
    match schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
        Some([one]) if schema.get("properties").is_none() && schema.get("type").is_none() => unwrapped(one),
        _ => schema,
    }
}

/// Infers the type of `expression` with `vars` the types of the variables it may read.
pub fn infer(expression: &str, vars: &HashMap<String, Ty>) -> Ty {
    match PARSER_ENV.compile(expression) {
        Ok(program) => Infer { vars: vars.clone() }.expr(program.expression()),
        Err(_) => Ty::Dyn,
    }
}

struct Infer {
    vars: HashMap<String, Ty>,
}

impl Infer {
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
            Expr::Ident(name) => self.vars.get(name).cloned().unwrap_or(Ty::Dyn),
            Expr::Select(select) if select.test => Ty::Bool,
            Expr::Select(select) => field(&self.expr(&select.operand), &select.field),
            Expr::List(list) => {
                let items: Vec<Ty> = list.elements.iter().map(|e| self.expr(e)).collect();
                Ty::List(Box::new(same(items)))
            }
            Expr::Map(map) => {
                let values: Vec<Ty> = map
                    .entries
                    .iter()
                    .map(|e| match &e.expr {
                        EntryExpr::MapEntry(entry) => self.expr(&entry.value),
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
                    Ty::Map(_) | Ty::Object(_) => Ty::String,
                    _ => Ty::Dyn,
                };
                let saved = self.vars.clone();
                self.vars.insert(c.iter_var.clone(), element);
                if let Some(second) = &c.iter_var2 {
                    self.vars.insert(second.clone(), Ty::Dyn);
                }
                let init = self.expr(&c.accu_init);
                self.vars.insert(c.accu_var.clone(), init);
                let step = self.expr(&c.loop_step);
                self.vars.insert(c.accu_var.clone(), step);
                let result = self.expr(&c.result);
                self.vars = saved;
                result
            }
            Expr::Call(call) if call.func_name == "_[_]" => {
                let operand = call.args.first().map_or(Ty::Dyn, |a| self.expr(a));
                match (&operand, call.args.get(1).map(|a| &a.expr)) {
                    (Ty::Object(_), Some(Expr::Literal(LiteralValue::String(key)))) => field(&operand, key),
                    (Ty::List(item), _) => (**item).clone(),
                    (Ty::Map(value), _) => (**value).clone(),
                    _ => Ty::Dyn,
                }
            }
            Expr::Call(call) => {
                let target = call.target.as_deref().map(|t| self.expr(t));
                let args: Vec<Ty> = call.args.iter().map(|a| self.expr(a)).collect();
                let namespace = match call.target.as_deref() {
                    Some(IdedExpr { expr: Expr::Ident(ns), .. }) if !self.vars.contains_key(ns) => Some(ns.as_str()),
                    _ => None,
                };
                function(&call.func_name, namespace, target, args)
            }
        }
    }
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

fn field(operand: &Ty, name: &str) -> Ty {
    match operand {
        Ty::Object(schema) => match schema["properties"].get(name) {
            Some(property) => of_schema(property),
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
        (Some("hash"), _) | (Some("json"), "marshal") | (Some("base64"), "encode") => Ty::String,
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
        Ty::Object(schema) => {
            let properties: Map<String, Value> = schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, property)| (name.clone(), declared(&of_schema(property))))
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
        of_schema(&json!({"type": "object", "properties": {
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
                    "lastUpdateTime": {"type": "string", "format": "date-time"}}}}}}}}))
    }

    fn vars() -> HashMap<String, Ty> {
        let schema = of_schema(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}}}}}));
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
