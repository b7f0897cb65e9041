//! kubectl's JSONPath templates (`-o jsonpath=`, custom columns, `--sort-by`), as client-go's
//! `util/jsonpath` parses and runs them: text outside `{}` copied as it is, `{.a.b}`, `[*]`, slices and
//! negative indexes, unions `[0,2]`, `['key']`, recursive descent `..`, filters `[?(@.x == "y")]`,
//! `{range ...}...{end}`, quoted literals such as `{"\n"}`, and `\.` in field names
//! (`{.metadata.labels.app\.kubernetes\.io/name}`). The crates on crates.io implement RFC 9535 queries,
//! which have neither the template text, nor `range`/`end`, nor kubectl's rules for printing and for
//! missing keys, so this follows client-go's parser.go and jsonpath.go instead, error texts included.
//!
//! Values print as Go prints them, because that is what kubectl users compare against: scalars with
//! `fmt.Print` (`1.5`, `1e+06`, `true`, `<nil>` for a JSON null), maps and lists as compact JSON with
//! sorted keys and `<`, `>`, `&` escaped, as `encoding/json` writes them.

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The text it was parsed from, for messages.
    pub raw: String,
    nodes: Vec<Node>,
    /// With `false`, a field that is not there is an error, as with kubectl's
    /// `--allow-missing-template-keys=false`.
    pub allow_missing_keys: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    List(Vec<Node>),
    Field(String),
    Identifier(String),
    Array([Param; 3]),
    Filter { left: Vec<Node>, right: Vec<Node>, operator: String },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

/// A value found by a template: a piece of the object, or a literal of the template.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    Value(&'a Value),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// One byte of a string, which client-go's wildcard and recursive descent walk into.
    Byte(u8),
}

impl Found<'_> {
    /// As Go's `fmt.Print` prints it: what custom columns show.
    pub fn to_go_string(&self) -> String {
        match self {
            Found::Value(v) => go_sprint(v),
            Found::Text(t) => t.clone(),
            Found::Int(i) => i.to_string(),
            Found::Float(f) => go_float(*f),
            Found::Bool(b) => b.to_string(),
            Found::Byte(b) => b.to_string(),
        }
    }

    /// As `-o jsonpath` prints it: maps and lists as JSON, the rest as `fmt.Print` does (JSON null as `<nil>`).
    pub fn to_template_string(&self) -> String {
        match self {
            Found::Value(v @ (Value::Object(_) | Value::Array(_))) => go_json(v),
            other => other.to_go_string(),
        }
    }

    pub fn value(&self) -> Option<&Value> {
        match self {
            Found::Value(v) => Some(v),
            _ => None,
        }
    }
}

const EOF: char = '\0';

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
}

fn is_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, EOF | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}')
}

impl<'a> Parser<'a> {
    fn next(&mut self) -> char {
        match self.input[self.pos..].chars().next() {
            Some(c) => {
                self.pos += c.len_utf8();
                c
            }
            None => {
                // As client-go: a read past the end still counts, so that backup() undoes it.
                self.pos += 1;
                EOF
            }
        }
    }

    fn backup(&mut self) {
        if self.pos > self.input.len() {
            self.pos -= 1;
        } else if let Some(c) = self.input[..self.pos].chars().next_back() {
            self.pos -= c.len_utf8();
        }
    }

    fn consume(&mut self) -> &'a str {
        let end = self.pos.min(self.input.len());
        let text = &self.input[self.start.min(end)..end];
        self.start = self.pos;
        text
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos.min(self.input.len())..]
    }

    /// The byte before the one just read, for the escape checks client-go makes.
    fn before_last(&self) -> Option<u8> {
        self.pos.checked_sub(2).and_then(|i| self.input.as_bytes().get(i).copied())
    }

    /// The whole template: text and `{...}` actions.
    fn parse_text(&mut self, root: &mut Vec<Node>) -> Result<(), String> {
        loop {
            if self.rest().starts_with('{') {
                if self.pos > self.start {
                    root.push(Node::Text(self.consume().to_owned()));
                }
                self.pos += 1;
                self.consume();
                let mut action = Vec::new();
                self.parse_inside_action(&mut action)?;
                root.push(Node::List(action));
                continue;
            }
            if self.next() == EOF {
                self.backup();
                break;
            }
        }
        if self.pos > self.start {
            root.push(Node::Text(self.consume().to_owned()));
        }
        Ok(())
    }

    /// One action, up to its `}`.
    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            let rest = self.rest();
            if rest.starts_with('}') {
                self.pos += 1;
                self.consume();
                return Ok(());
            }
            if rest.starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                if cur.last() == Some(&Node::Recursive) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                self.consume();
                cur.push(Node::Recursive);
                // `..name` is a field, as `.name` is.
                if self.rest().starts_with(|c: char| c == '_' || c.is_alphanumeric()) {
                    self.parse_field(cur);
                }
                continue;
            }
            match self.next() {
                EOF | '\r' | '\n' => return Err("unclosed action".into()),
                ' ' | '@' | '$' => {
                    self.consume();
                }
                '[' => self.parse_array(cur)?,
                quote @ ('"' | '\'') => self.parse_quote(cur, quote)?,
                '.' => self.parse_field(cur),
                c if c == '+' || c == '-' || c.is_ascii_digit() => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                c if c == '_' || c.is_alphanumeric() => {
                    self.backup();
                    self.parse_identifier(cur)?;
                }
                c => return Err(format!("unrecognized character in action: {}", go_rune(c))),
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            if is_terminator(self.next()) {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        match value {
            "true" | "True" | "TRUE" | "t" | "T" | "1" => cur.push(Node::Bool(true)),
            "false" | "False" | "FALSE" | "f" | "F" | "0" => cur.push(Node::Bool(false)),
            _ => cur.push(Node::Identifier(value.to_owned())),
        }
        Ok(())
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        let c = self.next();
        if c != '+' && c != '-' {
            self.backup();
        }
        loop {
            let c = self.next();
            if !(c.is_ascii_digit() || c == '.') {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        if value.contains('.') {
            let float = value.parse::<f64>().map_err(|_| format!("cannot parse number {value}"))?;
            cur.push(Node::Float(float));
        } else {
            let int = value.parse::<i64>().map_err(|_| format!("cannot parse number {value}"))?;
            cur.push(Node::Int(int));
        }
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume();
        loop {
            let c = self.next();
            if c == '\\' {
                self.next();
            } else if is_terminator(c) {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        if value == "*" {
            cur.push(Node::Wildcard);
        } else {
            cur.push(Node::Field(value.replace('\\', "")));
        }
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated quoted string".into()),
                c if c == end && self.before_last() != Some(b'\\') => break,
                _ => {}
            }
        }
        let value = self.consume();
        let text = unquote(value).ok_or_else(|| format!("unquote string {value} error invalid syntax"))?;
        cur.push(Node::Text(text));
        Ok(())
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated array".into()),
                ']' => break,
                _ => {}
            }
        }
        let text = self.consume();
        let mut inner = &text[1..text.len() - 1];
        if inner == "*" {
            inner = ":";
        }
        if inner.contains(',') {
            let mut union = Vec::new();
            for part in inner.split(',') {
                let mut nodes = Vec::new();
                let mut parser = Parser { input: "", pos: 0, start: 0 };
                let source = format!("[{}]", part.trim_matches(' '));
                parser.input = &source;
                parser.parse_inside_action_to_end(&mut nodes)?;
                union.push(nodes);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }
        if inner.len() >= 2
            && inner.starts_with('\'')
            && inner.ends_with('\'')
            && !inner[1..inner.len() - 1].contains('\'')
        {
            let source = format!(".{}", &inner[1..inner.len() - 1]);
            let mut parser = Parser { input: &source, pos: 0, start: 0 };
            parser.parse_inside_action_to_end(cur)?;
            return Ok(());
        }
        cur.push(Node::Array(slice_params(inner)?));
        Ok(())
    }

    /// A piece of an action on its own (a union's member, a quoted key), read to its end.
    fn parse_inside_action_to_end(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        let mut root = Vec::new();
        let source = format!("{{{}}}", self.input);
        let mut parser = Parser { input: &source, pos: 0, start: 0 };
        parser.parse_text(&mut root)?;
        for node in root {
            match node {
                Node::List(nodes) => cur.extend(nodes),
                other => cur.push(other),
            }
        }
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume();
        let (mut begin, mut end, mut pair) = (false, false, EOF);
        loop {
            let c = self.next();
            match c {
                EOF | '\n' => return Err("unterminated filter".into()),
                '"' | '\'' => {
                    if !begin {
                        begin = true;
                        pair = c;
                        continue;
                    }
                    if self.before_last() != Some(b'\\') && c == pair {
                        end = true;
                    }
                }
                ')' if begin == end => break,
                _ => {}
            }
        }
        if self.next() != ']' {
            return Err("unclosed array expect ]".into());
        }
        let text = self.consume();
        let text = &text[..text.len() - 2];
        let parse = |source: &str| -> Result<Vec<Node>, String> {
            let mut nodes = Vec::new();
            let mut parser = Parser { input: source, pos: 0, start: 0 };
            parser.parse_inside_action_to_end(&mut nodes)?;
            Ok(nodes)
        };
        match split_comparison(text) {
            Some((left, operator, right)) => {
                cur.push(Node::Filter { left: parse(left)?, right: parse(right)?, operator: operator.to_owned() })
            }
            None => cur.push(Node::Filter { left: parse(text)?, right: Vec::new(), operator: "exists".into() }),
        }
        Ok(())
    }
}

/// client-go's `^([^!<>=]+)([!<>=]+)(.+?)$`.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let op_start = text.find(is_op)?;
    if op_start == 0 {
        return None;
    }
    let op_len = text[op_start..].find(|c: char| !is_op(c))?;
    let right = &text[op_start + op_len..];
    (!right.is_empty()).then(|| (&text[..op_start], &text[op_start..op_start + op_len], right))
}

/// `[start:end:step]` as client-go reads it (`^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`).
fn slice_params(text: &str) -> Result<[Param; 3], String> {
    let parts: Vec<&str> = text.split(':').collect();
    let number = |s: &str| s.strip_prefix('-').unwrap_or(s).bytes().all(|b| b.is_ascii_digit());
    if parts.len() > 3 || !parts.iter().all(|p| number(p)) {
        return Err(format!("invalid array index {text}"));
    }
    let mut params = [Param::default(); 3];
    for i in 0..3 {
        match parts.get(i) {
            Some(value) if i == 0 && value.is_empty() => {}
            Some(value) if i > 0 && value.is_empty() => params[i].known = false,
            Some(value) => {
                params[i].known = true;
                params[i].value = value.parse().map_err(|_| format!("array index {value} is not a number"))?;
            }
            None if i == 1 => {
                params[1] = Param { value: params[0].value + 1, known: true, derived: true };
            }
            None => {}
        }
    }
    Ok(params)
}

/// Go's `strconv.UnquoteChar` rules for a quoted literal (`"\n"`, `'\t'`, `"\u00e9"`).
fn unquote(quoted: &str) -> Option<String> {
    let quote = quoted.chars().next()?;
    let inner = quoted.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        match escaped {
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '\\' => out.push('\\'),
            '\'' | '"' if escaped == quote => out.push(escaped),
            'x' | 'u' | 'U' => {
                let digits = match escaped {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(digits).collect();
                let code = u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == digits)?;
                out.push(char::from_u32(code)?);
            }
            '0'..='7' => {
                let rest: String = chars.by_ref().take(2).collect();
                let code = u32::from_str_radix(&format!("{escaped}{rest}"), 8).ok().filter(|c| *c <= 255)?;
                out.push(char::from_u32(code)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// A rune as Go's `%#U` prints it: `U+0021 '!'`.
fn go_rune(c: char) -> String {
    format!("U+{:04X} '{c}'", c as u32)
}

impl Template {
    /// Parses a template as `kubectl get -o jsonpath=...` takes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut nodes = Vec::new();
        let mut parser = Parser { input: text, pos: 0, start: 0 };
        parser.parse_text(&mut nodes)?;
        Ok(Template { raw: text.to_owned(), nodes, allow_missing_keys: true })
    }

    /// A path as custom columns and `--sort-by` take it (`.metadata.name`, `metadata.name`,
    /// `{.metadata.name}`), made a template: client-go's `RelaxedJSONPathExpression`.
    pub fn relaxed(path: &str) -> Result<String, String> {
        if path.is_empty() {
            return Ok(String::new());
        }
        let inner = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
        let inner = inner.strip_prefix('.').unwrap_or(inner);
        if inner.is_empty() || inner.contains(['{', '}']) {
            return Err("unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or \
                        '{.name1.name2}'"
                .into());
        }
        Ok(format!("{{.{inner}}}"))
    }

    /// Every result, one list per action (and per pass of a `range`), as client-go's `FindResults`.
    pub fn find<'v>(&self, data: &'v Value) -> Result<Vec<Vec<Found<'v>>>, String> {
        let mut run = Run { allow_missing: self.allow_missing_keys, in_range: 0 };
        let mut out = Vec::new();
        run.find(&self.nodes, Found::Value(data), &mut out)?;
        Ok(out)
    }

    /// The template applied to `data`, as `kubectl get -o jsonpath` prints it.
    pub fn execute(&self, data: &Value) -> Result<String, String> {
        let mut text = String::new();
        for results in self.find(data)? {
            let printed: Vec<String> = results.iter().map(Found::to_template_string).collect();
            text.push_str(&printed.join(" "));
        }
        Ok(text)
    }

    /// The template applied to `data` as `-o jsonpath-as-json` prints it: every result in one JSON array.
    pub fn execute_as_json(&self, data: &Value) -> Result<String, String> {
        let mut text = String::new();
        for results in self.find(data)? {
            let values: Vec<Value> = results.iter().map(found_to_json).collect();
            let array = Value::Array(values);
            text.push_str(&crate::output::objects::json_pretty(&array).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        Ok(text)
    }
}

fn found_to_json(found: &Found) -> Value {
    match found {
        Found::Value(v) => (*v).clone(),
        Found::Text(t) => Value::String(t.clone()),
        Found::Int(i) => Value::from(*i),
        Found::Float(f) => Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null),
        Found::Bool(b) => Value::Bool(*b),
        Found::Byte(b) => Value::from(*b),
    }
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

/// A float64 as Go's `%v` prints it: shortest digits, with an exponent below 1e-4 or from 1e6 up.
pub fn go_float(f: f64) -> String {
    go_float_with(f, -4, 6)
}

fn go_float_with(f: f64, low: i32, high: i32) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if exponent < low || exponent >= high {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{f}")
    }
}

fn go_number(n: &Number) -> String {
    match (n.as_i64(), n.as_u64()) {
        (Some(i), _) if !n.is_f64() => i.to_string(),
        (_, Some(u)) if !n.is_f64() => u.to_string(),
        _ => go_float(n.as_f64().unwrap_or_default()),
    }
}

/// A map's entries in key order, as Go prints and encodes maps (serde_json keeps insertion order when a
/// crate in the build turns on its `preserve_order`).
fn sorted(map: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by_key(|(key, _)| *key);
    entries
}

/// A JSON value as Go's `fmt.Sprint` prints the `interface{}` it decodes to: `map[a:1 b:[x y]]`.
pub fn go_sprint(value: &Value) -> String {
    let mut out = String::new();
    sprint_into(value, &mut out);
    out
}

fn sprint_into(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                sprint_into(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            for (i, (key, value)) in sorted(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                sprint_into(value, out);
            }
            out.push(']');
        }
    }
}

/// A JSON value as Go's `%#v` prints the `interface{}` it decodes to, as kubectl shows the object in a
/// template's error: `map[string]interface {}{"a":1, "b":[]interface {}{"x"}}`.
pub fn go_sharp_v(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(map) => {
            let pairs: Vec<String> =
                sorted(map).into_iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_sharp_v(v))).collect();
            format!("map[string]interface {{}}{{{}}}", pairs.join(", "))
        }
    }
}

/// A string as Go's `strconv.Quote` writes it (what `%#v` and `%q` print): printable characters as they
/// are, the others as Go escapes them (`\x1b`, `\u00a0`, `\U000e0001`), where Rust's `{:?}` writes
/// `\u{1b}` and also escapes a combining mark.
pub fn go_quote(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push('\''),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_printable(c) => out.push(c),
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c)).expect("writing to a String"),
            c if u32::from(c) < 0x10000 => write!(out, "\\u{:04x}", u32::from(c)).expect("writing to a String"),
            c => write!(out, "\\U{:08x}", u32::from(c)).expect("writing to a String"),
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII space. Rust's
/// Debug escaping leaves exactly those classes alone (quotes and the backslash aside, which `go_quote`
/// matches first), except a combining mark at the start of a string, so the character is asked about
/// after another one.
fn go_printable(c: char) -> bool {
    let mut probe = [0u8; 8];
    probe[0] = b'a';
    let len = 1 + c.encode_utf8(&mut probe[1..]).len();
    let probe = std::str::from_utf8(&probe[..len]).expect("one ASCII letter and one char");
    probe.escape_debug().eq(probe.chars())
}

/// A JSON value as Go's `json.Marshal` writes it: compact, keys sorted, `<>&` and U+2028/9 escaped.
pub fn go_json(value: &Value) -> String {
    let mut out = String::new();
    json_into(value, &mut out);
    out
}

fn json_into(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_f64() => {
            // encoding/json: %f-like below 1e21 and from 1e-6 up, else an exponent without zero padding.
            let f = n.as_f64().unwrap_or_default();
            let abs = f.abs();
            if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
                let text = go_float_with(f, 0, 0);
                let (m, e) = text.split_once('e').expect("an exponent");
                let (sign, digits) = e.split_at(1);
                let digits = digits.trim_start_matches('0');
                out.push_str(&format!("{m}e{}{digits}", if sign == "-" { "-" } else { "+" }));
            } else {
                out.push_str(&format!("{f}"));
            }
        }
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_into(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, value)) in sorted(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(key, out);
                out.push(':');
                json_into(value, out);
            }
            out.push('}');
        }
    }
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(template: &str, data: &Value) -> String {
        Template::parse(template).unwrap().execute(data).unwrap()
    }

    fn list() -> Value {
        json!({
            "kind": "List",
            "items": [
                {"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}},
                 "spec": {"replicas": 3, "ratio": 1.5, "on": true, "ports": [80, 443]}},
                {"metadata": {"name": "b", "labels": {"tier": "back"}},
                 "spec": {"replicas": 1, "ratio": 0.25, "on": false, "ports": []}},
            ]
        })
    }

    #[test]
    fn fields_wildcards_and_text_print_as_kubectl() {
        let data = list();
        assert_eq!(run("{.items[*].metadata.name}", &data), "a b");
        assert_eq!(run("names: {.items[0].metadata.name}, {.items[-1].metadata.name}!", &data), "names: a, b!");
        assert_eq!(run("{.items[*].spec.replicas}", &data), "3 1");
        assert_eq!(run("{.items[*].spec.ratio}", &data), "1.5 0.25");
        assert_eq!(run("{.items[*].spec.on}", &data), "true false");
        assert_eq!(run("{.items[0].spec.ports}", &data), "[80,443]");
        assert_eq!(run("{.items[0].metadata.labels}", &data), r#"{"app.kubernetes.io/name":"web","tier":"front"}"#);
        assert_eq!(run(r"{.items[0].metadata.labels.app\.kubernetes\.io/name}", &data), "web");
        assert_eq!(run("{.items[0].metadata.labels['tier']}", &data), "front");
        assert_eq!(run("{$.kind}", &data), "List");
        assert_eq!(run("{.items[0].missing}", &data), "");
        assert_eq!(run("plain text", &data), "plain text");
        assert_eq!(run("{.items[0:1].metadata.name}", &data), "a");
        assert_eq!(run("{.items[0,1].metadata.name}", &data), "a b");
        assert_eq!(run("{..name}", &data), "a b");
    }

    #[test]
    fn range_and_literals() {
        let data = list();
        assert_eq!(run(r#"{range .items[*]}{.metadata.name}{"\t"}{.spec.replicas}{"\n"}{end}"#, &data), "a\t3\nb\t1\n");
        assert_eq!(run("{range .items[*]}[{.metadata.name}]{end} after", &data), "[a][b] after");
        assert_eq!(run("{range .nothing[*]}x{end}done", &data), "done");
    }

    #[test]
    fn filters_compare_as_go_templates_do() {
        let data = list();
        assert_eq!(run(r#"{.items[?(@.metadata.name=="b")].spec.replicas}"#, &data), "1");
        assert_eq!(run("{.items[?(@.spec.replicas>2)].metadata.name}", &data), "a");
        assert_eq!(run("{.items[?(@.metadata.labels.app\\.kubernetes\\.io/name)].metadata.name}", &data), "a");
        assert_eq!(run("{.items[?(@.spec.on==true)].metadata.name}", &data), "a");
        let err = Template::parse("{.items[?(@.spec.ratio>1)].metadata.name}").unwrap().execute(&data).unwrap_err();
        assert_eq!(err, "incompatible types for comparison");
    }

    #[test]
    fn missing_keys_and_bad_templates_fail_with_client_gos_words() {
        let data = list();
        let mut strict = Template::parse("{.items[0].nope}").unwrap();
        strict.allow_missing_keys = false;
        assert_eq!(strict.execute(&data).unwrap_err(), "nope is not found");
        for (template, error) in [
            ("{.a", "unclosed action"),
            ("{.a[1}", "unterminated array"),
            ("{.a[x]}", "invalid array index x"),
            ("{.a[?(@.x==1}", "unterminated filter"),
            ("{#}", "unrecognized character in action: U+0023 '#'"),
            (r#"{"abc}"#, "unterminated quoted string"),
        ] {
            assert_eq!(Template::parse(template).unwrap_err(), error, "{template}");
        }
        let run_err = |t: &str| Template::parse(t).unwrap().execute(&data).unwrap_err();
        assert_eq!(run_err("{.items[5]}"), "array index out of bounds: index 5, length 2");
        assert_eq!(run_err("{end}"), "not in range, nothing to end");
        assert_eq!(run_err("{.kind[0]}"), "string is not array or slice");
        assert_eq!(run_err("{foo}"), "unrecognized identifier foo");
    }

    #[test]
    fn relaxed_paths_become_templates() {
        for path in ["metadata.name", ".metadata.name", "{metadata.name}", "{.metadata.name}"] {
            assert_eq!(Template::relaxed(path).unwrap(), "{.metadata.name}");
        }
        assert!(Template::relaxed("{.a}{.b}").unwrap_err().starts_with("unexpected path string"));
    }

    #[test]
    fn values_print_as_go_prints_them() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.5), "123456.5");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_sprint(&json!({"b": [1, "x"], "a": null})), "map[a:<nil> b:[1 x]]");
        assert_eq!(go_json(&json!({"b": "<&>", "a": 1.0e-7})), r#"{"a":1e-7,"b":"\u003c\u0026\u003e"}"#);
    }

    /// Go 1.26's own output for these (`fmt.Sprintf("%#v", ...)`). Checked once against every code point:
    /// all agree but the 10,615 assigned after Unicode 15.0, where Go's tables stop (Go escapes them).
    #[test]
    fn objects_are_dumped_as_go_dumps_them() {
        let cases = [
            ("\u{1b}", r#""\x1b""#),
            ("\u{a0}", r#""\u00a0""#),
            ("\u{301}", "\"\u{301}\""),
            ("\u{2028}", r#""\u2028""#),
            ("\u{7f}", r#""\x7f""#),
            ("\0", r#""\x00""#),
            ("\u{e0001}", r#""\U000e0001""#),
            ("'", r#""'""#),
            ("\t\"\\", r#""\t\"\\""#),
            ("\u{1f600}", "\"\u{1f600}\""),
            ("\u{ad}", r#""\u00ad""#),
            ("\u{fffd}", "\"\u{fffd}\""),
            ("\u{200b}", r#""\u200b""#),
        ];
        for (text, go) in cases {
            assert_eq!(go_quote(text), go, "{text:?}");
        }
        let object = json!({"a'b": ["x\u{301}", null, 5, 2.0, 1e6, 1.5, true]});
        assert_eq!(
            go_sharp_v(&object),
            "map[string]interface {}{\"a'b\":[]interface {}{\"x\u{301}\", interface {}(nil), 5, 2, 1e+06, 1.5, true}}"
        );
    }
}
