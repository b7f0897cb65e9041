//! Reading a template into nodes, as client-go's `jsonpath/parser.go` does, error texts included.

use super::{Node, Param};

/// The nodes of a template.
pub(super) fn nodes(text: &str) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    Parser { input: text, pos: 0, start: 0 }.parse_text(&mut nodes)?;
    Ok(nodes)
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
        // Past the end after a read past it (`get`, not an index): a template may end inside an escape.
        match self.input.get(self.pos..).and_then(|rest| rest.chars().next()) {
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
