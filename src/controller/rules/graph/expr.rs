//! The `${...}` expressions in a ResourceGraphDefinition, found as kro finds them: a string that is
//! exactly one `${e}` is the value of `e` (of any type); a string mixing text and expressions is their
//! concatenation, each expression a string; braces inside an expression nest, double-quoted literals
//! are skipped, and an unbalanced `${` is plain text. And the identifiers an expression reads, which
//! are the edges of the resource graph.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::Value;

/// Part of a string with expressions.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Expression(String),
}

/// What a string in a template is.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// Exactly one `${e}`: the value of `e`, whatever its type.
    Whole(String),
    /// Text and expressions, each expression's value a string.
    Joined(Vec<Piece>),
}

impl Template {
    pub fn expressions(&self) -> Vec<&str> {
        match self {
            Template::Whole(e) => vec![e.as_str()],
            Template::Joined(pieces) => pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Expression(e) => Some(e.as_str()),
                    Piece::Text(_) => None,
                })
                .collect(),
        }
    }
}

/// The expressions in `text` and the text between them.
pub fn scan(text: &str) -> Result<Vec<Piece>, String> {
    let bytes = text.as_bytes();
    let mut pieces = Vec::new();
    let (mut from, mut text_from) = (0, 0);
    while let Some(found) = text[from..].find("${") {
        let start = from + found;
        let mut depth = 1;
        let mut at = start + 2;
        let (mut quoted, mut escaped) = (false, false);
        while at < bytes.len() {
            let c = bytes[at];
            if escaped {
                escaped = false;
            } else if quoted && c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                quoted = !quoted;
            } else if !quoted {
                if c == b'{' {
                    depth += 1;
                } else if c == b'}' {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                } else if bytes[at..].starts_with(b"${") && bytes[at - 1] != b'"' {
                    return Err("nested expressions are not allowed unless inside string literals".into());
                }
            }
            at += 1;
        }
        if depth != 0 {
            // Not closed: plain text; look again one byte on.
            from = start + 1;
            continue;
        }
        if start > text_from {
            pieces.push(Piece::Text(text[text_from..start].to_owned()));
        }
        pieces.push(Piece::Expression(text[start + 2..at].to_owned()));
        from = at + 1;
        text_from = from;
    }
    if text_from < text.len() {
        pieces.push(Piece::Text(text[text_from..].to_owned()));
    }
    Ok(pieces)
}

/// What `text` is as a template: `None` when it holds no expression.
pub fn template(text: &str) -> Result<Option<Template>, String> {
    let pieces = scan(text)?;
    Ok(match pieces.as_slice() {
        [Piece::Expression(e)] => Some(Template::Whole(e.clone())),
        _ if pieces.iter().any(|p| matches!(p, Piece::Expression(_))) => Some(Template::Joined(pieces)),
        _ => None,
    })
}

/// A standalone expression (`readyWhen`, `includeWhen`, `forEach`): exactly one `${e}`.
pub fn standalone(text: &str) -> Result<String, String> {
    match template(text)? {
        Some(Template::Whole(e)) => Ok(e),
        _ => Err("only standalone expressions are allowed".into()),
    }
}

/// One step of a path into an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Field(String),
    Index(usize),
}

impl Step {
    /// An order in which a list's items come by index.
    fn key(&self) -> (usize, &str) {
        match self {
            Step::Field(key) => (0, key.as_str()),
            Step::Index(n) => (*n, ""),
        }
    }
}

/// Where a string with expressions sits in an object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Path(pub Vec<Step>);

impl std::fmt::Display for Path {
    /// As kro writes it: `spec.ports[0].port`, `metadata.labels["app.kubernetes.io/name"]` for a key
    /// that is not an identifier.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Field(key) if key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(key)?;
                }
                Step::Field(key) => write!(f, "[{key:?}]")?,
                Step::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl Path {
    fn with(&self, step: Step) -> Path {
        let mut steps = self.0.clone();
        steps.push(step);
        Path(steps)
    }

    /// Takes the field or list item at this path out of `object`. Of several items of one list, the
    /// last is to be taken first (`remove_all`).
    fn remove(&self, object: &mut Value) {
        let Some((last, parents)) = self.0.split_last() else { return };
        let mut at = object;
        for step in parents {
            at = match step {
                Step::Field(key) => &mut at[key.as_str()],
                Step::Index(n) => &mut at[*n],
            };
        }
        match (last, at) {
            (Step::Field(key), Value::Object(map)) => {
                map.remove(key);
            }
            (Step::Index(n), Value::Array(items)) if *n < items.len() => {
                items.remove(*n);
            }
            _ => {}
        }
    }

    /// Takes every one of `paths` out of `object` (the fields an `omit()` left out), the items of a
    /// list from the last.
    pub fn remove_all(mut paths: Vec<&Path>, object: &mut Value) {
        paths.sort_by(|a, b| b.0.iter().map(Step::key).cmp(a.0.iter().map(Step::key)));
        for path in paths {
            path.remove(object);
        }
    }

    /// Puts `value` at this path in `object`, which holds the path already (it is where the template was).
    pub fn set(&self, object: &mut Value, value: Value) {
        let mut at = object;
        for step in &self.0 {
            at = match step {
                Step::Field(key) => &mut at[key.as_str()],
                Step::Index(n) => &mut at[*n],
            };
        }
        *at = value;
    }
}

/// Every string holding expressions in `value`, with where it is.
pub fn templates(value: &Value) -> Result<Vec<(Path, Template)>, String> {
    let mut found = Vec::new();
    walk(value, Path::default(), &mut found)?;
    Ok(found)
}

fn walk(value: &Value, path: Path, found: &mut Vec<(Path, Template)>) -> Result<(), String> {
    match value {
        Value::String(text) => {
            if let Some(template) = template(text)? {
                found.push((path, template));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, path.with(Step::Index(i)), found)?;
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields {
                walk(field, path.with(Step::Field(key.clone())), found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The environment every expression is parsed in: the standard macros and the optional syntax
/// (`a.?b`, as kro enables it).
pub static PARSER_ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    // With cel-go's macros kro enables: what `cel.bind` and the two-variable forms bind is no reference.
    let mut env = cel::Env::stdlib();
    super::macros::add(&mut env);
    Arc::new(env)
});

/// cel-go's bound on an expression's length, in code points (`ExpressionSizeCodePointLimit`).
pub const MAX_EXPRESSION_CHARS: usize = 100_000;

/// The deepest nesting let through to the parser, cel-go's default `maxRecursionDepth`: the parser
/// refuses past its own depth (96), but its grammar recurses before it counts, and ten thousand `(`
/// would overflow a thread's stack, aborting every controller in the process.
pub const MAX_NESTING: usize = 250;

/// `expression` parsed in `env`, once it is known to fit the parser: at most `MAX_EXPRESSION_CHARS`
/// long, and nested at most `MAX_NESTING` deep. Every parse of an RGD's expressions goes through here.
pub fn compile(env: &cel::Env, expression: &str) -> Result<cel::Program, String> {
    fits_the_parser(expression)?;
    env.compile(expression).map_err(|e| e.to_string())
}

/// The same, as the bare expression.
pub fn parse(env: &cel::Env, expression: &str) -> Result<IdedExpr, String> {
    fits_the_parser(expression)?;
    env.parser().parse(expression).map_err(|e| e.to_string())
}

/// Counts, outside string literals, the brackets open at once and runs of prefix operators (`!`, `-`),
/// each a level of the grammar's recursion; cel-go's words past either bound.
fn fits_the_parser(expression: &str) -> Result<(), String> {
    let size = expression.chars().count();
    if size > MAX_EXPRESSION_CHARS {
        return Err(format!("expression code point size exceeds limit: size: {size}, limit {MAX_EXPRESSION_CHARS}"));
    }
    let (mut depth, mut run, mut deepest) = (0usize, 0usize, 0usize);
    let mut chars = expression.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                // A string: to its closing quote (a triple quote closes a triple-quoted one), escapes
                // skipped; its contents are not syntax.
                let triple = chars.peek() == Some(&c) && {
                    let mut ahead = chars.clone();
                    ahead.next();
                    ahead.next() == Some(c)
                };
                if triple {
                    chars.next();
                    chars.next();
                }
                let mut closing = 0;
                while let Some(inner) = chars.next() {
                    match inner {
                        '\\' => {
                            chars.next();
                            closing = 0;
                        }
                        q if q == c => {
                            closing += 1;
                            if !triple || closing == 3 {
                                break;
                            }
                        }
                        _ => closing = 0,
                    }
                }
                run = 0;
            }
            '(' | '[' | '{' => {
                depth += 1;
                run = 0;
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                run = 0;
            }
            '!' | '-' => run += 1,
            c if c.is_whitespace() => {}
            _ => run = 0,
        }
        deepest = deepest.max(depth + run);
        if deepest > MAX_NESTING {
            return Err("max recursion depth exceeded".to_owned());
        }
    }
    Ok(())
}

/// Library namespaces a call may be made through (`random.seededString(...)`), not identifiers.
const NAMESPACES: &[&str] = &[
    "random", "json", "hash", "base64", "lists", "strings", "math", "optional", "sets", "url", "net", "quantity",
    "runtime", "ip",
];

/// The free identifiers `expression` reads (those no comprehension binds), or the parse error.
pub fn identifiers(expression: &str) -> Result<BTreeSet<String>, String> {
    let program = compile(&PARSER_ENV, expression)?;
    let mut names = BTreeSet::new();
    collect(program.expression(), &mut Vec::new(), &mut names);
    Ok(names)
}

/// The functions `expression` calls, by name: `size`, or through a library namespace, `random.seededString`.
pub fn calls(expression: &str) -> Result<BTreeSet<String>, String> {
    let program = compile(&PARSER_ENV, expression)?;
    let mut found = BTreeSet::new();
    visit(program.expression(), &mut |node| {
        if let Expr::Call(call) = &node.expr {
            found.insert(match call.target.as_deref() {
                Some(IdedExpr { expr: Expr::Ident(ns), .. }) if NAMESPACES.contains(&ns.as_str()) => {
                    format!("{ns}.{}", call.func_name)
                }
                _ => call.func_name.clone(),
            });
        }
    });
    Ok(found)
}

/// Every node of an expression, parents first.
pub fn visit(node: &IdedExpr, f: &mut impl FnMut(&IdedExpr)) {
    f(node);
    match &node.expr {
        Expr::Select(select) => visit(&select.operand, f),
        Expr::Call(call) => {
            if let Some(target) = call.target.as_deref() {
                visit(target, f);
            }
            call.args.iter().for_each(|a| visit(a, f));
        }
        Expr::List(list) => list.elements.iter().for_each(|e| visit(e, f)),
        Expr::Map(map) => map.entries.iter().for_each(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => {
                visit(&entry.key, f);
                visit(&entry.value, f);
            }
            EntryExpr::StructField(field) => visit(&field.value, f),
        }),
        Expr::Struct(s) => s.entries.iter().for_each(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => visit(&entry.value, f),
            EntryExpr::StructField(field) => visit(&field.value, f),
        }),
        Expr::Comprehension(c) => {
            for part in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                visit(part, f);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn collect(node: &IdedExpr, bound: &mut Vec<String>, names: &mut BTreeSet<String>) {
    match &node.expr {
        Expr::Ident(name) => {
            if !bound.contains(name) {
                names.insert(name.clone());
            }
        }
        Expr::Select(select) => collect(&select.operand, bound, names),
        Expr::Call(call) => {
            match call.target.as_deref() {
                Some(IdedExpr { expr: Expr::Ident(ns), .. })
                    if NAMESPACES.contains(&ns.as_str()) && !bound.contains(ns) => {}
                Some(target) => collect(target, bound, names),
                None => {}
            }
            call.args.iter().for_each(|a| collect(a, bound, names));
        }
        Expr::List(list) => list.elements.iter().for_each(|e| collect(e, bound, names)),
        Expr::Map(map) => map.entries.iter().for_each(|e| entry(&e.expr, bound, names)),
        Expr::Struct(s) => s.entries.iter().for_each(|e| entry(&e.expr, bound, names)),
        Expr::Comprehension(c) => {
            collect(&c.iter_range, bound, names);
            collect(&c.accu_init, bound, names);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                collect(part, bound, names);
            }
            bound.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry(entry: &EntryExpr, bound: &mut Vec<String>, names: &mut BTreeSet<String>) {
    match entry {
        EntryExpr::MapEntry(e) => {
            collect(&e.key, bound, names);
            collect(&e.value, bound, names);
        }
        EntryExpr::StructField(f) => collect(&f.value, bound, names),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> Piece {
        Piece::Text(s.into())
    }

    fn expr(s: &str) -> Piece {
        Piece::Expression(s.into())
    }

    #[test]
    fn whole_joined_and_plain_strings() {
        assert_eq!(template("${schema.spec.replicas}").unwrap(), Some(Template::Whole("schema.spec.replicas".into())));
        assert_eq!(
            template("${schema.metadata.name}-svc").unwrap(),
            Some(Template::Joined(vec![expr("schema.metadata.name"), text("-svc")]))
        );
        assert_eq!(template("nginx:latest").unwrap(), None);
        assert_eq!(template("cost: ${").unwrap(), None, "an unclosed ${{ is text");
        assert_eq!(
            scan("a${x.map(m, {\"k\": m})}b${\"}\"}").unwrap(),
            [text("a"), expr("x.map(m, {\"k\": m})"), text("b"), expr("\"}\"")]
        );
        assert_eq!(scan("${a + \"${b}\"}").unwrap(), [expr("a + \"${b}\"")]);
        assert!(scan("${a ${b}}").unwrap_err().starts_with("nested expressions are not allowed"));
        assert_eq!(standalone("x ${a}").unwrap_err(), "only standalone expressions are allowed");
    }

    #[test]
    fn templates_are_found_with_their_paths() {
        let found = templates(&json!({
            "metadata": {"name": "${schema.metadata.name}", "labels": {"app.kubernetes.io/name": "${x}"}},
            "spec": {"ports": [{"port": "${schema.spec.port}"}], "replicas": 2},
        }))
        .unwrap();
        let mut copy = json!({"spec": {"ports": [{"port": 1}]}});
        found[2].0.set(&mut copy, json!(80));
        assert_eq!(copy, json!({"spec": {"ports": [{"port": 80}]}}));
        let paths: Vec<String> = found.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(paths, ["metadata.labels[\"app.kubernetes.io/name\"]", "metadata.name", "spec.ports[0].port"]);
    }

    #[test]
    fn identifiers_leave_out_what_comprehensions_bind_and_library_namespaces() {
        let names = identifiers("schema.spec.items.map(x, x + svc.spec.clusterIP)").unwrap();
        assert_eq!(names, BTreeSet::from(["schema".to_owned(), "svc".to_owned()]));
        // `ip.isCanonical` is the IP library's, not a resource named `ip`.
        assert_eq!(identifiers("ip.isCanonical(schema.spec.a)").unwrap(), BTreeSet::from(["schema".to_owned()]));
        let names = identifiers("random.seededString(10, schema.metadata.uid)").unwrap();
        assert_eq!(names, BTreeSet::from(["schema".to_owned()]));
        let names = identifiers("input.?data.ECHO_VALUE.orValue(\"not found\")").unwrap();
        assert_eq!(names, BTreeSet::from(["input".to_owned()]));
        assert!(identifiers("a +").is_err());
        // What cel.bind and the two-variable comprehensions bind is theirs, not a resource.
        let names = identifiers("cel.bind(x, schema.spec.a, x + db.status.host)").unwrap();
        assert_eq!(names, BTreeSet::from(["db".to_owned(), "schema".to_owned()]));
        let names = identifiers("schema.spec.ports.transformMap(k, v, k != '', v + svc.spec.port)").unwrap();
        assert_eq!(names, BTreeSet::from(["schema".to_owned(), "svc".to_owned()]));
        let names = identifiers("schema.spec.items.all(i, v, v > i)").unwrap();
        assert_eq!(names, BTreeSet::from(["schema".to_owned()]));
    }

    #[test]
    fn omitted_fields_and_items_are_taken_out() {
        let mut object = json!({"a": {"b": 1, "c": 2}, "l": [0, 1, 2, 3, 4]});
        let paths = [
            Path(vec![Step::Field("l".into()), Step::Index(1)]),
            Path(vec![Step::Field("a".into()), Step::Field("b".into())]),
            Path(vec![Step::Field("l".into()), Step::Index(3)]),
        ];
        Path::remove_all(paths.iter().collect(), &mut object);
        assert_eq!(object, json!({"a": {"c": 2}, "l": [0, 2, 4]}));
    }

    #[test]
    fn calls_are_named_with_their_namespace() {
        let found = calls("random.seededString(8, x) + string(size(y.map(i, omit())))").unwrap();
        assert_eq!(found, BTreeSet::from(["_+_", "random.seededString", "string", "size", "omit"].map(str::to_owned)));
    }
}
