//! The API server's `URLs()` CEL library (k8s.io/apiserver/pkg/cel/library/urls.go), which kro adds:
//! `url()`, `isURL()`, and a URL's `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`
//! and `getQuery`. A text is a URL when Go's `url.ParseRequestURI` takes it, and its parts are what
//! Go's `url.Parse` makes of it: this follows Go 1.26's net/url, rule for rule, for the parts these
//! functions read.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map, Opaque};
use cel::{ExecutionError, Value};

use super::no_overload;

/// A `url(...)` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    scheme: String,
    opaque: String,
    user: Option<String>,
    host: String,
    path: String,
    raw_path: String,
    force_query: bool,
    omit_host: bool,
    raw_query: String,
    fragment: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.URL"
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

/// Go's encoding table: the bytes besides letters and digits each mode leaves as they are.
fn kept(mode: Mode) -> &'static [u8] {
    match mode {
        Mode::Path => b"$&+,-./:;=@_~",
        Mode::Host | Mode::Zone => b"!\"$&'()*+,-.:;<=>[]_~",
        Mode::UserPassword => b"$&+,-.;=_~",
        Mode::QueryComponent => b"-._~",
        Mode::Fragment => b"!$&()*+,-./:;=?@_~",
    }
}

fn should_escape(c: u8, mode: Mode) -> bool {
    !(c.is_ascii_alphanumeric() || kept(mode).contains(&c))
}

fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// Go's `unescape`, with its errors: `%` must start two hex digits, a host may escape only non-ASCII
/// bytes (or `%25`), and a host's ASCII must be what a host may hold.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = |b: u8| (b as char).to_digit(16);
                let pair = (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)));
                let (Some(high), Some(low)) = pair else {
                    return Err(format!("invalid URL escape {}", quote(&s[i..(i + 3).min(s.len())])));
                };
                if mode == Mode::Host && high < 8 && &s[i..i + 3] != "%25" {
                    return Err(format!("invalid URL escape {}", quote(&s[i..i + 3])));
                }
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            b'+' if mode == Mode::QueryComponent => {
                out.push(b' ');
                i += 1;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!("invalid character {} in host name", quote(&s[i..i + 1])));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|c| b"!$&'()*+,;=:@[]%".contains(&c) || !should_escape(c, Mode::Path))
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty() || (port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit()))
}

/// `getScheme`: letters, then letters, digits, `+`, `-` or `.`, up to a colon.
fn scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn parse_host(scheme: &str, host: &str) -> Result<String, String> {
    match host.rfind('[') {
        Some(open) if open > 0 => return Err("invalid IP-literal".into()),
        Some(_) => {
            let close = host.rfind(']').ok_or("missing ']' in host")?;
            let colon_port = &host[close + 1..];
            if !valid_optional_port(colon_port) {
                return Err(format!("invalid port {} after host", quote(colon_port)));
            }
            let name = &host[1..close];
            let unescaped = match name.find("%25") {
                Some(zone) => unescape(&name[..zone], Mode::Host)? + &unescape(&name[zone..], Mode::Zone)?,
                None => unescape(name, Mode::Host)?,
            };
            let address = unescaped.split('%').next().unwrap_or_default();
            match address.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => return Err("invalid IP-literal".into()),
                Ok(_) => {}
                Err(_) => return Err(format!("invalid host: ParseAddr({}): unable to parse IP", quote(&unescaped))),
            }
            return Ok(format!("[{unescaped}]{colon_port}"));
        }
        None => {}
    }
    if let Some(first) = host.find(':') {
        let last = host.rfind(':').unwrap_or(first);
        // Go allows several colons (a list of hosts) except in http and https URLs.
        let at = if last != first && scheme != "http" && scheme != "https" { last } else { first };
        if !valid_optional_port(&host[at..]) {
            return Err(format!("invalid port {} after host", quote(&host[at..])));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_userinfo(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&c))
}

/// Go's `parse(rawURL, viaRequest)`.
fn parse_go(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".into());
    }
    let mut url = Url {
        scheme: String::new(),
        opaque: String::new(),
        user: None,
        host: String::new(),
        path: String::new(),
        raw_path: String::new(),
        force_query: false,
        omit_host: false,
        raw_query: String::new(),
        fragment: String::new(),
    };
    if raw == "*" {
        url.path = "*".into();
        return Ok(url);
    }
    let (scheme, rest) = scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    let mut rest = rest;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_owned();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_owned();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".into());
        }
        if rest.split('/').next().is_some_and(|segment| segment.contains(':')) {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///")) && rest.starts_with("//") {
        let authority = &rest[2..];
        let (authority, path) = match authority.find('/') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, ""),
        };
        rest = path;
        let (userinfo, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        url.host = parse_host(&url.scheme, host)?;
        if let Some(userinfo) = userinfo {
            if !valid_userinfo(userinfo) {
                return Err("net/url: invalid userinfo".into());
            }
            let (name, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            unescape(name, Mode::UserPassword)?;
            unescape(password, Mode::UserPassword)?;
            url.user = Some(userinfo.to_owned());
        }
    } else if !url.scheme.is_empty() && rest.starts_with('/') {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path)?;
    if escape(&url.path, Mode::Path) != rest {
        url.raw_path = rest.to_owned();
    }
    Ok(url)
}

/// `url.ParseRequestURI` to validate, then `url.Parse` for the value, as the library does; errors in
/// its words (`parse "<text>": <why>`).
pub fn parse(raw: &str) -> Result<Url, String> {
    let fail = |why: String| format!("URL parse error during conversion from string: parse {}: {why}", quote(raw));
    parse_go(raw, true).map_err(fail)?;
    let (before, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url = parse_go(before, false).map_err(fail)?;
    url.fragment = unescape(fragment, Mode::Fragment).map_err(fail)?;
    Ok(url)
}

impl Url {
    /// `EscapedPath`: the path as written when that is a valid encoding of it, else escaped anew.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path)
            && unescape(&self.raw_path, Mode::Path).is_ok_and(|p| p == self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".into();
        }
        escape(&self.path, Mode::Path)
    }

    /// `splitHostPort`: the host without its `:port` and without an IPv6 literal's brackets.
    fn host_and_port(&self) -> (&str, &str) {
        let mut host = self.host.as_str();
        let mut port = "";
        if let Some(colon) = host.rfind(':')
            && valid_optional_port(&host[colon..])
        {
            (host, port) = (&host[..colon], &host[colon + 1..]);
        }
        if host.starts_with('[') && host.ends_with(']') {
            host = &host[1..host.len() - 1];
        }
        (host, port)
    }

    /// `Query()`: `ParseQuery`'s pairs, those it cannot read left out as Go leaves them out.
    fn query(&self) -> Value {
        let mut pairs: HashMap<Key, Vec<Value>> = HashMap::new();
        for part in self.raw_query.split('&') {
            if part.is_empty() || part.contains(';') {
                continue;
            }
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let (Ok(key), Ok(value)) = (unescape(key, Mode::QueryComponent), unescape(value, Mode::QueryComponent))
            else {
                continue;
            };
            pairs.entry(Key::String(Arc::new(key))).or_default().push(Value::String(Arc::new(value)));
        }
        let map = pairs.into_iter().map(|(k, v)| (k, Value::List(Arc::new(v)))).collect();
        Value::Map(Map { map: Arc::new(map) })
    }
}

/// Go's `URL.String()`, by which Go compares two URLs.
impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        if !self.scheme.is_empty() {
            out.push_str(&self.scheme);
            out.push(':');
        }
        if !self.opaque.is_empty() {
            out.push_str(&self.opaque);
        } else {
            let bare = self.host.is_empty() && self.user.is_none();
            if !(bare && (self.scheme.is_empty() || self.omit_host)) {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    out.push_str("//");
                }
                if let Some(user) = &self.user {
                    out.push_str(user);
                    out.push('@');
                }
                out.push_str(&escape(&self.host, Mode::Host));
            }
            let path = self.escaped_path();
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                out.push('/');
            }
            if out.is_empty() && path.split('/').next().is_some_and(|s| s.contains(':')) {
                out.push_str("./");
            }
            out.push_str(&path);
        }
        if self.force_query || !self.raw_query.is_empty() {
            out.push('?');
            out.push_str(&self.raw_query);
        }
        if !self.fragment.is_empty() {
            out.push('#');
            out.push_str(&escape(&self.fragment, Mode::Fragment));
        }
        f.write_str(&out)
    }
}

pub fn url_of(value: &Value) -> Option<&Url> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Url>(),
        _ => None,
    }
}

pub fn url(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => {
            parse(s).map(|u| Value::Opaque(Arc::new(u))).map_err(|e| ExecutionError::function_error("url", e))
        }
        _ => Err(no_overload("url", args)),
    }
}

pub fn is_url(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => Ok(Value::Bool(parse(s).is_ok())),
        _ => Err(no_overload("isURL", args)),
    }
}

/// A URL's member functions, its target first.
pub fn member(function: &'static str) -> impl Fn(&[Value]) -> Result<Value, ExecutionError> {
    move |args: &[Value]| {
        let (1, Some(url)) = (args.len(), args.first().and_then(url_of)) else {
            return Err(no_overload(function, args));
        };
        let text = |s: &str| Value::String(Arc::new(s.to_owned()));
        Ok(match function {
            "getScheme" => text(&url.scheme),
            "getHost" => text(&url.host),
            "getHostname" => text(url.host_and_port().0),
            "getPort" => text(url.host_and_port().1),
            "getEscapedPath" => text(&url.escaped_path()),
            "getQuery" => url.query(),
            _ => return Err(no_overload(function, args)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_as_go_reads_them() {
        let u = parse("https://user:pw@Example.com:8443/a%20b/c?x=1&x=2&y=a+b#frag").unwrap();
        assert_eq!((u.scheme.as_str(), u.host.as_str()), ("https", "Example.com:8443"));
        assert_eq!(u.host_and_port(), ("Example.com", "8443"));
        assert_eq!(u.escaped_path(), "/a%20b/c");
        let ipv6 = parse("http://[::1]:80/").unwrap();
        assert_eq!(ipv6.host_and_port(), ("::1", "80"));
        assert_eq!(parse("HTTP://h/a b").unwrap().escaped_path(), "/a%20b");
        assert_eq!(parse("http://h/%7e").unwrap().escaped_path(), "/%7e");
    }

    #[test]
    fn texts_that_are_not_request_uris_are_refused_in_gos_words() {
        let refused = |raw: &str| parse(raw).unwrap_err();
        assert!(refused("example.com").ends_with("invalid URI for request"), "{}", refused("example.com"));
        assert!(refused("").ends_with("empty url"));
        assert!(refused("http://h:x/").ends_with("invalid port \":x\" after host"));
        assert!(refused("http://h/%zz").ends_with("invalid URL escape \"%zz\""));
        assert!(refused("://x").ends_with("missing protocol scheme"));
        assert!(parse("/just/a/path").is_ok());
    }
}
