//! Walking a template's nodes over an object, as client-go's `jsonpath.go` does: fields, wildcards,
//! slices, unions, recursive descent, filters with Go template comparisons, and `range`.

use serde_json::Value;

use super::{Found, Node, Param};

/// Every result of `nodes` over `data`, one list per action (and per pass of a `range`).
pub(super) fn find<'v>(nodes: &[Node], data: &'v Value, allow_missing: bool) -> Result<Vec<Vec<Found<'v>>>, String> {
    let mut out = Vec::new();
    Run { allow_missing, in_range: 0 }.find(nodes, Found::Value(data), &mut out)?;
    Ok(out)
}

struct Run {
    allow_missing: bool,
    in_range: usize,
}

/// Where a pass over a template's nodes stopped.
enum Stop {
    /// At the end of the nodes.
    End,
    /// At an `{end}`, at this index.
    RangeEnd(usize),
}

impl Run {
    /// client-go's FindResults: each top-level node walked from `data`; a `range` runs the nodes after it
    /// once per value, up to its `end`.
    fn find<'v>(&mut self, nodes: &[Node], data: Found<'v>, out: &mut Vec<Vec<Found<'v>>>) -> Result<Stop, String> {
        let mut i = 0;
        while i < nodes.len() {
            let node = &nodes[i];
            if let Node::List(list) = node {
                match list.first() {
                    Some(Node::Identifier(name)) if name == "end" => {
                        if self.in_range == 0 {
                            return Err("not in range, nothing to end".into());
                        }
                        return Ok(Stop::RangeEnd(i));
                    }
                    Some(Node::Identifier(name)) if name == "range" => {
                        let values = self.walk_list(vec![data.clone()], &list[1..])?;
                        self.in_range += 1;
                        let body = &nodes[i + 1..];
                        let mut end = None;
                        if values.is_empty() {
                            // Still walked, so that the position moves on to the matching end.
                            let mut ignored = Vec::new();
                            if let Stop::RangeEnd(at) = self.find(body, Found::Value(&Value::Null), &mut ignored)? {
                                end = Some(at);
                            }
                        }
                        for value in values {
                            if let Stop::RangeEnd(at) = self.find(body, value, out)? {
                                end = Some(at);
                            }
                        }
                        self.in_range -= 1;
                        match end {
                            Some(at) => i += at + 2,
                            None => return Ok(Stop::End),
                        }
                        continue;
                    }
                    _ => {}
                }
            }
            out.push(self.walk(vec![data.clone()], node)?);
            i += 1;
        }
        Ok(Stop::End)
    }

    fn walk_list<'v>(&mut self, mut values: Vec<Found<'v>>, nodes: &[Node]) -> Result<Vec<Found<'v>>, String> {
        for node in nodes {
            values = self.walk(values, node)?;
        }
        Ok(values)
    }

    fn walk<'v>(&mut self, input: Vec<Found<'v>>, node: &Node) -> Result<Vec<Found<'v>>, String> {
        match node {
            Node::List(nodes) => self.walk_list(input, nodes),
            Node::Text(text) => Ok(vec![Found::Text(text.clone())]),
            Node::Field(name) => self.field(input, name),
            Node::Array(params) => array(input, *params),
            Node::Filter { left, right, operator } => self.filter(input, left, right, operator),
            Node::Int(i) => Ok(input.iter().map(|_| Found::Int(*i)).collect()),
            Node::Float(f) => Ok(input.iter().map(|_| Found::Float(*f)).collect()),
            Node::Bool(b) => Ok(input.iter().map(|_| Found::Bool(*b)).collect()),
            Node::Wildcard => Ok(input.iter().flat_map(children).collect()),
            Node::Recursive => Ok(input.into_iter().flat_map(descend).collect()),
            Node::Union(lists) => {
                let mut out = Vec::new();
                for list in lists {
                    out.extend(self.walk_list(input.clone(), list)?);
                }
                Ok(out)
            }
            Node::Identifier(name) if name == "range" || name == "end" => {
                // Only reachable nested inside another action, where client-go also refuses an end.
                if name == "end" && self.in_range == 0 {
                    return Err("not in range, nothing to end".into());
                }
                Ok(input)
            }
            Node::Identifier(name) => Err(format!("unrecognized identifier {name}")),
        }
    }

    fn field<'v>(&self, input: Vec<Found<'v>>, name: &str) -> Result<Vec<Found<'v>>, String> {
        if input.is_empty() {
            return Ok(Vec::new());
        }
        let found: Vec<Found<'v>> = input
            .iter()
            .filter_map(|value| match value {
                Found::Value(Value::Object(map)) => map.get(name).map(Found::Value),
                _ => None,
            })
            .collect();
        if found.is_empty() && !self.allow_missing {
            return Err(format!("{name} is not found"));
        }
        Ok(found)
    }

    fn filter<'v>(
        &mut self,
        input: Vec<Found<'v>>,
        left: &[Node],
        right: &[Node],
        operator: &str,
    ) -> Result<Vec<Found<'v>>, String> {
        let mut out = Vec::new();
        for value in input {
            let items = match value {
                Found::Value(Value::Array(items)) => items,
                Found::Value(Value::Null) => continue,
                other => {
                    return Err(format!("{} is not array or slice and cannot be filtered", other.to_go_string()));
                }
            };
            for item in items {
                let lefts = self.walk_list(vec![Found::Value(item)], left);
                if operator == "exists" {
                    if lefts.is_ok_and(|l| !l.is_empty()) {
                        out.push(Found::Value(item));
                    }
                    continue;
                }
                let lefts = lefts?;
                let left = match lefts.as_slice() {
                    [] => continue,
                    [one] => one.clone(),
                    _ => return Err("can only compare one element at a time".into()),
                };
                let rights = self.walk_list(vec![Found::Value(item)], right)?;
                let right = match rights.as_slice() {
                    [] => continue,
                    [one] => one.clone(),
                    _ => return Err("can only compare one element at a time".into()),
                };
                if compare(&left, &right, operator)? {
                    out.push(Found::Value(item));
                }
            }
        }
        Ok(out)
    }
}

/// The members of a map (in key order), list or string, as client-go's wildcard takes them.
fn children<'v>(value: &Found<'v>) -> Vec<Found<'v>> {
    match value {
        Found::Value(Value::Object(map)) => map.values().map(Found::Value).collect(),
        Found::Value(Value::Array(items)) => items.iter().map(Found::Value).collect(),
        Found::Value(Value::String(s)) => s.bytes().map(Found::Byte).collect(),
        Found::Text(s) => s.bytes().map(Found::Byte).collect(),
        _ => Vec::new(),
    }
}

/// `..`: the value and every value below it that has members of its own, depth first.
fn descend(value: Found<'_>) -> Vec<Found<'_>> {
    let members = children(&value);
    if members.is_empty() {
        return Vec::new();
    }
    let mut out = vec![value];
    for member in members {
        out.extend(descend(member));
    }
    out
}

fn array(input: Vec<Found<'_>>, params: [Param; 3]) -> Result<Vec<Found<'_>>, String> {
    let mut out = Vec::new();
    for value in input {
        let items = match value {
            Found::Value(Value::Array(items)) => items,
            Found::Value(Value::Null) => continue,
            Found::Value(other) => return Err(format!("{} is not array or slice", go_type(other))),
            other => return Err(format!("{} is not array or slice", other.to_go_string())),
        };
        let len = items.len() as i64;
        let mut p = params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            return Ok(out);
        }
        if p[0].value >= len || p[0].value < 0 {
            return Err(format!("array index out of bounds: index {}, length {len}", p[0].value));
        }
        if p[1].value > len || p[1].value < 0 {
            return Err(format!("array index out of bounds: index {}, length {len}", p[1].value - 1));
        }
        if p[0].value > p[1].value {
            return Err(format!("starting index {} is greater than ending index {}", p[0].value, p[1].value));
        }
        let step = match p[2] {
            Param { known: true, value, .. } if value <= 0 => return Err("step must be > 0".into()),
            Param { known: true, value, .. } => value as usize,
            _ => 1,
        };
        out.extend(items[p[0].value as usize..p[1].value as usize].iter().step_by(step).map(Found::Value));
    }
    Ok(out)
}

/// Go's name for the type a JSON value decodes to, for error messages.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "map[string]interface {}",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::Array(_) => "[]interface {}",
        Value::Null => "<nil>",
    }
}

/// A value reduced to what Go's template comparisons see.
#[derive(Debug, PartialEq, PartialOrd)]
enum Basic {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
}

fn basic(found: &Found) -> Option<Basic> {
    Some(match found {
        Found::Value(Value::String(s)) => Basic::Str(s.clone()),
        Found::Value(Value::Bool(b)) => Basic::Bool(*b),
        Found::Value(Value::Number(n)) => match n.as_i64() {
            Some(i) if !n.is_f64() => Basic::Int(i),
            _ => Basic::Float(n.as_f64()?),
        },
        Found::Text(s) => Basic::Str(s.clone()),
        Found::Int(i) => Basic::Int(*i),
        Found::Float(f) => Basic::Float(*f),
        Found::Bool(b) => Basic::Bool(*b),
        Found::Byte(b) => Basic::Int(i64::from(*b)),
        _ => return None,
    })
}

/// A filter's comparison, with the type rules of Go's text/template `eq`, `lt` and friends.
fn compare(left: &Found, right: &Found, operator: &str) -> Result<bool, String> {
    let (Some(l), Some(r)) = (basic(left), basic(right)) else {
        return Err("invalid type for comparison".into());
    };
    if std::mem::discriminant(&l) != std::mem::discriminant(&r) {
        return Err("incompatible types for comparison".into());
    }
    let ordered = || {
        if matches!(l, Basic::Bool(_)) { Err("invalid type for comparison".to_owned()) } else { Ok(()) }
    };
    Ok(match operator {
        "==" => l == r,
        "!=" => l != r,
        "<" => ordered().map(|_| l < r)?,
        ">" => ordered().map(|_| l > r)?,
        "<=" => ordered().map(|_| l <= r)?,
        ">=" => ordered().map(|_| l >= r)?,
        other => return Err(format!("unrecognized filter operator {other}")),
    })
}
