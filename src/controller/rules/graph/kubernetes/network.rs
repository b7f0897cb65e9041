//! The API server's `IP()` and `CIDR()` CEL libraries (k8s.io/apiserver/pkg/cel/library/ip.go and
//! cidr.go), which kro adds: `ip()`, `isIP()`, `ip.isCanonical()`, `cidr()`, `isCIDR()`, an address's
//! `family()` and `is...()` tests, a prefix's `containsIP()`, `containsCIDR()`, `ip()`, `masked()` and
//! `prefixLength()`, and `string()` of either. Addresses are Go's `netip` ones: no zones, no
//! IPv4-mapped IPv6, and a prefix keeps the bits after its mask until `masked()`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use cel::objects::Opaque;
use cel::{ExecutionError, Value};

use super::no_overload;

/// An `ip(...)` value (`net.IP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip(pub IpAddr);

/// A `cidr(...)` value (`net.CIDR`): the address as written and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub bits: u8,
}

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ip(self.addr), self.bits)
    }
}

/// Go's `netip.Addr.String()`: RFC 5952 for IPv6, which is what Rust writes too, except that Rust
/// writes an address in `::/96` (IPv4-compatible) with a dotted tail where Go does not.
impl std::fmt::Display for Ip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => {
                let segments = v6.segments();
                // The longest run of two or more zero groups (the first of equals) becomes `::`.
                let (mut best, mut run) = ((0, 0), (0, 0));
                for (i, s) in segments.iter().enumerate() {
                    if *s == 0 {
                        run = if run.1 == 0 { (i, 1) } else { (run.0, run.1 + 1) };
                        if run.1 > best.1 {
                            best = run;
                        }
                    } else {
                        run = (0, 0);
                    }
                }
                let hex = |part: &[u16]| part.iter().map(|s| format!("{s:x}")).collect::<Vec<_>>().join(":");
                if best.1 >= 2 {
                    write!(f, "{}::{}", hex(&segments[..best.0]), hex(&segments[best.0 + best.1..]))
                } else {
                    f.write_str(&hex(&segments))
                }
            }
        }
    }
}

fn is_4_in_6(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// `netip.ParseAddr`, then the library's refusals, in its words.
pub fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    if raw.contains('%') {
        return match raw.split_once('%').map(|(addr, _)| addr.parse::<Ipv6Addr>()) {
            Some(Ok(_)) => Err(format!("IP address {raw:?} with zone value is not allowed")),
            _ => Err(format!(
                "IP Address {raw:?} parse error during conversion from string: ParseAddr({raw:?}): invalid IP address"
            )),
        };
    }
    let addr = raw.parse::<IpAddr>().map_err(|_| {
        format!("IP Address {raw:?} parse error during conversion from string: ParseAddr({raw:?}): {}", why_not(raw))
    })?;
    if is_4_in_6(&addr) {
        return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
    }
    Ok(addr)
}

/// The reason Go's parser gives for the commonest bad addresses; the rest are "unable to parse IP".
fn why_not(raw: &str) -> &'static str {
    if raw.is_empty() {
        "missing IPv4 address"
    } else if !raw.contains(':') && raw.split('.').count() > 4 {
        "IPv4 address too long"
    } else if !raw.contains(':') && raw.split('.').count() < 4 {
        "IPv4 address too short"
    } else if !raw.contains(':') && raw.split('.').any(|o| o.len() > 1 && o.starts_with('0')) {
        "IPv4 field has octet with leading zero"
    } else {
        "unable to parse IP"
    }
}

/// `netip.ParsePrefix`, then the library's refusal of IPv4-mapped addresses.
pub fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let fail = |why: &str| {
        format!("network address parse error during conversion from string: netip.ParsePrefix({raw:?}): {why}")
    };
    let Some((addr, bits)) = raw.rsplit_once('/') else { return Err(fail("no '/'")) };
    if addr.contains('%') {
        return Err(fail("IPv6 zones cannot be present in a prefix"));
    }
    let addr = addr.parse::<IpAddr>().map_err(|_| fail(&format!("ParseAddr({addr:?}): {}", why_not(addr))))?;
    let most = if addr.is_ipv4() { 32 } else { 128 };
    let valid = !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit()) && (bits == "0" || !bits.starts_with('0'));
    let bits = match bits.parse::<u8>() {
        Ok(n) if valid && n <= most => n,
        _ => return Err(fail(&format!("bad bits after slash: {bits:?}"))),
    };
    if is_4_in_6(&addr) {
        return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
    }
    Ok(Cidr { addr, bits })
}

fn bits_of(addr: &IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u32::from(*v4) as u128,
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

impl Cidr {
    fn width(&self) -> u32 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }

    fn mask(&self) -> u128 {
        let host = self.width() - self.bits as u32;
        let all = if self.width() == 32 { u32::MAX as u128 } else { u128::MAX };
        if host == 128 { 0 } else { all & !((1u128 << host) - 1) }
    }

    fn contains(&self, addr: &IpAddr) -> bool {
        addr.is_ipv4() == self.addr.is_ipv4() && bits_of(addr) & self.mask() == bits_of(&self.addr) & self.mask()
    }

    pub fn masked(&self) -> Cidr {
        let bits = bits_of(&self.addr) & self.mask();
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
        };
        Cidr { addr, bits: self.bits }
    }

    /// Go's `Prefix.Overlaps(other) && p.Bits() <= other.Bits()`: `other` lies within.
    fn contains_cidr(&self, other: &Cidr) -> bool {
        other.addr.is_ipv4() == self.addr.is_ipv4() && self.bits <= other.bits && self.contains(&other.addr)
    }
}

pub fn ip_of(value: &Value) -> Option<Ip> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Ip>().copied(),
        _ => None,
    }
}

pub fn cidr_of(value: &Value) -> Option<Cidr> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Cidr>().copied(),
        _ => None,
    }
}

fn fail(function: &str, why: String) -> ExecutionError {
    ExecutionError::function_error(function, why)
}

/// `ip(string)`, and a prefix's `cidr.ip()` (its address, unmasked).
pub fn ip(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => parse_ip(s).map(|a| Value::Opaque(Arc::new(Ip(a)))).map_err(|e| fail("ip", e)),
        [prefix] if cidr_of(prefix).is_some() => Ok(Value::Opaque(Arc::new(Ip(cidr_of(prefix).unwrap().addr)))),
        _ => Err(no_overload("ip", args)),
    }
}

pub fn is_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => Ok(Value::Bool(parse_ip(s).is_ok())),
        _ => Err(no_overload("isIP", args)),
    }
}

/// `ip.isCanonical(string)`: whether the text is the address as Go writes it.
pub fn is_canonical(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => {
            let addr = parse_ip(s).map_err(|e| fail("ip.isCanonical", e))?;
            Ok(Value::Bool(Ip(addr).to_string() == **s))
        }
        _ => Err(no_overload("ip.isCanonical", args)),
    }
}

pub fn cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => parse_cidr(s).map(|c| Value::Opaque(Arc::new(c))).map_err(|e| fail("cidr", e)),
        _ => Err(no_overload("cidr", args)),
    }
}

pub fn is_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => Ok(Value::Bool(parse_cidr(s).is_ok())),
        _ => Err(no_overload("isCIDR", args)),
    }
}

/// An address's member functions (`family`, `isLoopback`, ...), each as Go's `netip.Addr` answers.
pub fn address(function: &'static str) -> impl Fn(&[Value]) -> Result<Value, ExecutionError> {
    move |args: &[Value]| {
        let [target] = args else { return Err(no_overload(function, args)) };
        let Some(Ip(addr)) = ip_of(target) else { return Err(no_overload(function, args)) };
        let v6_first = match addr {
            IpAddr::V6(v6) => v6.segments()[0],
            IpAddr::V4(_) => 0,
        };
        let link_local_unicast = match addr {
            IpAddr::V4(v4) => v4.octets()[..2] == [169, 254],
            IpAddr::V6(_) => v6_first & 0xffc0 == 0xfe80,
        };
        let multicast = match addr {
            IpAddr::V4(v4) => v4.octets()[0] & 0xf0 == 0xe0,
            IpAddr::V6(_) => v6_first & 0xff00 == 0xff00,
        };
        Ok(match function {
            "family" => Value::Int(if addr.is_ipv4() { 4 } else { 6 }),
            "isUnspecified" => Value::Bool(addr.is_unspecified()),
            "isLoopback" => Value::Bool(addr.is_loopback()),
            "isLinkLocalMulticast" => Value::Bool(match addr {
                IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
                IpAddr::V6(_) => v6_first & 0xff0f == 0xff02,
            }),
            "isLinkLocalUnicast" => Value::Bool(link_local_unicast),
            // Go's definition: private and unique-local addresses are global unicast too.
            "isGlobalUnicast" => Value::Bool(
                !addr.is_unspecified()
                    && addr != IpAddr::V4(Ipv4Addr::BROADCAST)
                    && !addr.is_loopback()
                    && !multicast
                    && !link_local_unicast,
            ),
            _ => return Err(no_overload(function, args)),
        })
    }
}

/// A prefix's member functions: `containsIP`, `containsCIDR` (each of a value or its text),
/// `masked` and `prefixLength`.
pub fn prefix(function: &'static str) -> impl Fn(&[Value]) -> Result<Value, ExecutionError> {
    move |args: &[Value]| {
        let Some(this) = args.first().and_then(cidr_of) else { return Err(no_overload(function, args)) };
        match (function, &args[1..]) {
            ("containsIP", [Value::String(s)]) => {
                Ok(Value::Bool(this.contains(&parse_ip(s).map_err(|e| fail(function, e))?)))
            }
            ("containsIP", [other]) if ip_of(other).is_some() => {
                Ok(Value::Bool(this.contains(&ip_of(other).unwrap().0)))
            }
            ("containsCIDR", [Value::String(s)]) => {
                Ok(Value::Bool(this.contains_cidr(&parse_cidr(s).map_err(|e| fail(function, e))?)))
            }
            ("containsCIDR", [other]) if cidr_of(other).is_some() => {
                Ok(Value::Bool(this.contains_cidr(&cidr_of(other).unwrap())))
            }
            ("masked", []) => Ok(Value::Opaque(Arc::new(this.masked()))),
            ("prefixLength", []) => Ok(Value::Int(this.bits as i64)),
            _ => Err(no_overload(function, args)),
        }
    }
}

/// `string(ip)` and `string(cidr)`, or `None` for a value of neither type.
pub fn string(value: &Value) -> Option<Value> {
    ip_of(value)
        .map(|ip| ip.to_string())
        .or_else(|| cidr_of(value).map(|c| c.to_string()))
        .map(|s| Value::String(Arc::new(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_go_writes_them() {
        // Go's netip.Addr.String() for each (go run, netip.MustParseAddr(s).String()).
        for (text, go) in [
            ("2001:db8::68", "2001:db8::68"),
            ("2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("::1.2.3.4", "::102:304"),
            ("::", "::"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
        ] {
            assert_eq!(Ip(parse_ip(text).unwrap()).to_string(), go, "{text}");
        }
        assert!(parse_ip("::ffff:1.2.3.4").unwrap_err().contains("IPv4-mapped"));
        assert!(parse_ip("fe80::1%eth0").unwrap_err().contains("zone value is not allowed"));
        assert!(parse_ip("192.168.0.1.0").unwrap_err().ends_with("IPv4 address too long"));
    }

    #[test]
    fn prefixes_contain_as_go_says() {
        let wide = parse_cidr("10.0.0.0/8").unwrap();
        assert!(wide.contains(&"10.1.2.3".parse().unwrap()));
        assert!(!wide.contains(&"11.0.0.1".parse().unwrap()));
        assert!(!wide.contains(&"::a00:1".parse().unwrap()));
        assert!(wide.contains_cidr(&parse_cidr("10.1.0.0/16").unwrap()));
        assert!(!parse_cidr("10.1.0.0/16").unwrap().contains_cidr(&wide));
        assert_eq!(parse_cidr("192.168.0.1/24").unwrap().masked().to_string(), "192.168.0.0/24");
        assert_eq!(parse_cidr("::/0").unwrap().masked().to_string(), "::/0");
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("10.0.0.0/08").is_err());
    }
}
