//! The API server's `Quantity()` CEL library (k8s.io/apiserver/pkg/cel/library/quantity.go), which kro
//! adds: `quantity()`, `isQuantity()`, and a quantity's `sign`, `isInteger`, `asInteger`,
//! `asApproximateFloat`, `add`, `sub`, `compareTo`, `isGreaterThan` and `isLessThan`.
//!
//! The value is held as apimachinery's `resource.Quantity` holds it, because three answers depend on
//! that and not only on the number: `isInteger` is false for a quantity Go keeps as an `inf.Dec`, or
//! as an int64 with a negative scale (`quantity("1000m").isInteger()` is false there, so here too), and
//! `asApproximateFloat` multiplies the held digits by `math.Pow10` of the held scale.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::objects::Opaque;
use cel::{ExecutionError, Value};
use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};

use super::no_overload;

const FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const SUFFIX: &str = "unable to parse quantity's suffix";
const NUMERIC: &str = "unable to parse numeric part of quantity";

/// The widest difference of scales this will align (10^4096): a quantity like `1e999999999` is held,
/// compared and printed, but adding `1` to it would build a billion digits, which Go would try.
const MOST_ALIGNED_DIGITS: i64 = 4096;

/// A `quantity(...)` value, as Go holds it.
#[derive(Debug, Clone)]
pub enum Quantity {
    /// `int64Amount`: `value * 10^scale`.
    Int { value: i64, scale: i32 },
    /// `infDecAmount`: `unscaled * 10^-scale`.
    Dec { unscaled: BigInt, scale: i32 },
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp_exact(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

enum Base {
    Ten(i32),
    Two(u32),
}

/// apimachinery's suffixes: decimal SI, binary SI, and `e<n>` exponents.
fn suffix(text: &str) -> Option<Base> {
    Some(match text {
        "" => Base::Ten(0),
        "n" => Base::Ten(-9),
        "u" => Base::Ten(-6),
        "m" => Base::Ten(-3),
        "k" => Base::Ten(3),
        "M" => Base::Ten(6),
        "G" => Base::Ten(9),
        "T" => Base::Ten(12),
        "P" => Base::Ten(15),
        "E" => Base::Ten(18),
        "Ki" => Base::Two(10),
        "Mi" => Base::Two(20),
        "Gi" => Base::Two(30),
        "Ti" => Base::Two(40),
        "Pi" => Base::Two(50),
        "Ei" => Base::Two(60),
        _ if text.len() > 1 && text.starts_with(['e', 'E']) => {
            // Go's strconv.ParseInt, then int32(...): a wider exponent wraps there.
            let rest = &text[1..];
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Base::Ten(rest.parse::<i64>().ok()? as i32)
        }
        _ => return None,
    })
}

struct Parts<'a> {
    positive: bool,
    /// The sign and digits as written (what Go hands `inf.Dec.SetString`).
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// apimachinery's `parseQuantityString`, step for step (it accepts `1.`, `.5` and a lone sign).
fn split(text: &str) -> Result<Parts<'_>, &'static str> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut pos = 0;
    let mut positive = true;
    if let Some(b'-' | b'+') = bytes.first() {
        positive = bytes[0] == b'+';
        pos = 1;
    }
    while pos < end && bytes[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts { positive, value: "0", num: "0", denom: "", suffix: "" });
    }
    let digits = |from: usize| from + bytes[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let num_end = digits(pos);
    let num = if num_end == pos { "0" } else { &text[pos..num_end] };
    pos = num_end;
    let mut denom = "";
    if pos < end && bytes[pos] == b'.' {
        let denom_end = digits(pos + 1);
        denom = &text[pos + 1..denom_end];
        pos = denom_end;
    }
    let value = &text[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && (bytes[pos] == b'-' || bytes[pos] == b'+') {
        pos += 1;
    }
    pos = digits(pos.min(end));
    if pos < end {
        return Err(FORMAT_WRONG);
    }
    Ok(Parts { positive, value, num, denom, suffix: &text[suffix_start..] })
}

/// `resource.ParseQuantity`.
pub fn parse(text: &str) -> Result<Quantity, String> {
    if text.is_empty() {
        return Err(FORMAT_WRONG.into());
    }
    if text == "0" {
        return Ok(Quantity::Int { value: 0, scale: 0 });
    }
    let parts = split(text)?;
    let base = suffix(parts.suffix).ok_or(SUFFIX)?;
    let digits = parts.num.len() + parts.denom.len();
    // The int64 fast path, where Go takes it.
    let fast = match base {
        Base::Ten(exponent) => (18 - digits as i64 >= 0).then_some((exponent as i64 - parts.denom.len() as i64, 0)),
        Base::Two(exponent) => (parts.denom.is_empty()
            // Go's precision: 15 - len(num) - int32(float32(exponent)*3/10) - 1, at least 0.
            && 15 - parts.num.len() as i64 - (exponent as f32 * 3.0 / 10.0) as i64 > 0)
            .then_some((0, exponent)),
    };
    if let Some((scale, shift)) = fast
        && scale >= -9
        && let Ok(shifted) = format!("{}{}", parts.num, parts.denom).parse::<i64>()
        && let Some(value) = shifted.checked_mul(1i64 << shift)
    {
        return Ok(Quantity::Int { value: if parts.positive { value } else { -value }, scale: scale as i32 });
    }
    let (mut unscaled, mut scale) = set_string(parts.value).ok_or(NUMERIC)?;
    match base {
        Base::Ten(exponent) => scale -= exponent,
        Base::Two(exponent) => unscaled <<= exponent,
    }
    let negative = unscaled.is_negative();
    let mut magnitude = unscaled.abs();
    // Go rounds a non-zero amount to nano, up (away from zero), and to exactly scale 9.
    if !magnitude.is_zero() {
        (magnitude, scale) = round_up(magnitude, scale, 9)?;
    }
    if matches!(base, Base::Two(_)) && magnitude > BigInt::from(i64::MAX) * pow10(scale as i64)? {
        (magnitude, scale) = (BigInt::from(i64::MAX), 0);
    }
    Ok(Quantity::Dec { unscaled: if negative { -magnitude } else { magnitude }, scale })
}

/// `inf.Dec.SetString` of a sign and digits with at most one point.
fn set_string(text: &str) -> Option<(BigInt, i32)> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{whole}{fraction}");
    let digits = if digits.is_empty() || digits == "+" || digits == "-" { format!("{digits}0") } else { digits };
    Some((digits.parse().ok()?, fraction.len() as i32))
}

fn pow10(n: i64) -> Result<BigInt, String> {
    if !(0..=MOST_ALIGNED_DIGITS).contains(&n) {
        return Err(format!("quantity out of range: aligning it needs 10^{n}"));
    }
    Ok(BigInt::from(10u8).pow(n as u32))
}

/// `inf.Dec.Round(x, to, RoundUp)` of a magnitude: exactly `to` places, any remainder rounding up.
fn round_up(magnitude: BigInt, scale: i32, to: i32) -> Result<(BigInt, i32), String> {
    if scale <= to {
        return Ok((magnitude * pow10((to - scale) as i64)?, to));
    }
    let divisor = pow10((scale - to) as i64)?;
    let (quotient, remainder) = (&magnitude / &divisor, &magnitude % &divisor);
    Ok((if remainder.is_zero() { quotient } else { quotient + 1 }, to))
}

impl Quantity {
    /// `unscaled * 10^-scale` whichever way it is held.
    fn decimal(&self) -> (BigInt, i32) {
        match self {
            Quantity::Int { value, scale } => (BigInt::from(*value), -*scale),
            Quantity::Dec { unscaled, scale } => (unscaled.clone(), *scale),
        }
    }

    fn sign(&self) -> i64 {
        let (unscaled, _) = self.decimal();
        if unscaled.is_zero() {
            0
        } else if unscaled.is_negative() {
            -1
        } else {
            1
        }
    }

    fn cmp_exact(&self, other: &Quantity) -> Ordering {
        let (a, b) = (self.sign(), other.sign());
        if a != b || a == 0 {
            return a.cmp(&b);
        }
        let ((x, xs), (y, ys)) = (self.decimal(), other.decimal());
        // Orders of magnitude first, so that 1e999999999 is compared without being built.
        let magnitude = |m: &BigInt, s: i32| m.abs().to_string().len() as i64 - s as i64;
        let (mx, my) = (magnitude(&x, xs), magnitude(&y, ys));
        if mx != my {
            return if a > 0 { mx.cmp(&my) } else { my.cmp(&mx) };
        }
        let to = xs.max(ys) as i64;
        // Equal magnitudes: the difference of scales is at most the digits written.
        let align = |m: BigInt, s: i32| m * BigInt::from(10u8).pow((to - s as i64) as u32);
        align(x, xs).cmp(&align(y, ys))
    }

    /// `AsInt64`: only an int64 amount with no negative scale converts.
    fn as_int64(&self) -> Option<i64> {
        match self {
            Quantity::Int { value, scale: 0 } => Some(*value),
            Quantity::Int { value, scale } if *scale > 0 => {
                10i64.checked_pow(*scale as u32).and_then(|f| value.checked_mul(f))
            }
            _ => None,
        }
    }

    /// `AsApproximateFloat64`: the held digits times `math.Pow10` of the held exponent.
    fn approximate(&self) -> f64 {
        let (base, exponent) = match self {
            Quantity::Int { value, scale } => (*value as f64, *scale as i64),
            Quantity::Dec { unscaled, scale } => (unscaled.to_f64().unwrap_or(f64::NAN), -(*scale as i64)),
        };
        if exponent == 0 { base } else { base * go_pow10(exponent) }
    }

    /// `Quantity.Add` (and `Sub`, of the negated other): int64 amounts stay int64 while they fit.
    fn add(&self, other: &Quantity, subtract: bool) -> Result<Quantity, String> {
        if subtract && self.sign() == 0 {
            // Go's Sub of a zero receiver gives the negated argument as an inf.Dec.
            let (unscaled, scale) = other.decimal();
            return Ok(Quantity::Dec { unscaled: -unscaled, scale });
        }
        if let (Quantity::Int { value: a, scale: sa }, Quantity::Int { value: b, scale: sb }) = (self, other) {
            let b = if subtract { b.checked_neg() } else { Some(*b) };
            if let Some(b) = b
                && let Some(sum) = int_add(*a, *sa, b, *sb)
            {
                return Ok(sum);
            }
        }
        let ((x, xs), (y, ys)) = (self.decimal(), other.decimal());
        let y = if subtract { -y } else { y };
        let to = xs.max(ys);
        let sum = x * pow10((to - xs) as i64)? + y * pow10((to - ys) as i64)?;
        Ok(Quantity::Dec { unscaled: sum, scale: to })
    }
}

/// `int64Amount.Add`: `None` where Go falls back to inf.Dec.
fn int_add(a: i64, sa: i32, b: i64, sb: i32) -> Option<Quantity> {
    let scaled = |v: i64, by: i32| 10i64.checked_pow(by as u32).and_then(|f| v.checked_mul(f));
    let (value, scale) = match () {
        _ if b == 0 => (a, sa),
        _ if a == 0 => (b, sb),
        _ if sa == sb => (a.checked_add(b)?, sa),
        _ if sa > sb => (scaled(a, sa - sb)?.checked_add(b)?, sb),
        _ => (a.checked_add(scaled(b, sb - sa)?)?, sa),
    };
    Some(Quantity::Int { value, scale })
}

/// Go's `math.Pow10`, table for table, so that products round as cel-go's do.
fn go_pow10(n: i64) -> f64 {
    const TAB: [f64; 32] = [
        1e00, 1e01, 1e02, 1e03, 1e04, 1e05, 1e06, 1e07, 1e08, 1e09, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17,
        1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    ];
    const POS32: [f64; 10] = [1e00, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288];
    const NEG32: [f64; 11] = [1e-00, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320];
    match n {
        0..=308 => POS32[n as usize / 32] * TAB[n as usize % 32],
        -323..=-1 => NEG32[(-n) as usize / 32] / TAB[(-n) as usize % 32],
        _ if n > 0 => f64::INFINITY,
        _ => 0.0,
    }
}

impl Quantity {
    /// The exact decimal, without trailing fractional zeros (`1536`, `0.5`, `-1.000000001`); a
    /// quantity held with more than 4096 zeros is written with an exponent instead.
    pub fn exact(&self) -> String {
        let (unscaled, scale) = self.decimal();
        let negative = unscaled.is_negative();
        let digits = unscaled.abs().to_string();
        let text = if scale <= 0 {
            match -(scale as i64) {
                0 => digits,
                n if n <= MOST_ALIGNED_DIGITS && digits != "0" => format!("{digits}{}", "0".repeat(n as usize)),
                _ if digits == "0" => digits,
                n => format!("{digits}e{n}"),
            }
        } else {
            let scale = scale as usize;
            let padded = format!("{}{digits}", "0".repeat((scale + 1).saturating_sub(digits.len())));
            let (whole, fraction) = padded.split_at(padded.len() - scale);
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() { whole.to_owned() } else { format!("{whole}.{fraction}") }
        };
        if negative { format!("-{text}") } else { text }
    }
}

pub fn quantity_of(value: &Value) -> Option<&Quantity> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Quantity>(),
        _ => None,
    }
}

fn wrap(q: Quantity) -> Value {
    Value::Opaque(Arc::new(q))
}

pub fn quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => parse(s).map(wrap).map_err(|e| ExecutionError::function_error("quantity", e)),
        _ => Err(no_overload("quantity", args)),
    }
}

pub fn is_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    match args {
        [Value::String(s)] => Ok(Value::Bool(parse(s).is_ok())),
        _ => Err(no_overload("isQuantity", args)),
    }
}

/// Whether `function` is a quantity's for these arguments (`compareTo` and the comparisons are
/// semver's too).
pub fn takes(args: &[Value]) -> bool {
    args.first().and_then(quantity_of).is_some()
}

/// A quantity's member functions, its target first.
pub fn member(function: &'static str) -> impl Fn(&[Value]) -> Result<Value, ExecutionError> {
    move |args: &[Value]| {
        let Some(this) = args.first().and_then(quantity_of) else { return Err(no_overload(function, args)) };
        let other = args.get(1).and_then(quantity_of);
        let fail = |why: String| ExecutionError::function_error(function, why);
        Ok(match (function, &args[1..]) {
            ("sign", []) => Value::Int(this.sign()),
            ("isInteger", []) => Value::Bool(this.as_int64().is_some()),
            ("asInteger", []) => {
                Value::Int(this.as_int64().ok_or_else(|| fail("cannot convert value to integer".into()))?)
            }
            ("asApproximateFloat", []) => Value::Float(this.approximate()),
            ("compareTo", [_]) if other.is_some() => Value::Int(match this.cmp_exact(other.unwrap()) {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            }),
            ("isGreaterThan", [_]) if other.is_some() => Value::Bool(this.cmp_exact(other.unwrap()).is_gt()),
            ("isLessThan", [_]) if other.is_some() => Value::Bool(this.cmp_exact(other.unwrap()).is_lt()),
            ("add" | "sub", [Value::Int(n)]) => {
                wrap(this.add(&Quantity::Int { value: *n, scale: 0 }, function == "sub").map_err(fail)?)
            }
            ("add" | "sub", [_]) if other.is_some() => wrap(this.add(other.unwrap(), function == "sub").map_err(fail)?),
            _ => return Err(no_overload(function, args)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        parse(text).unwrap()
    }

    #[test]
    fn quantities_are_held_as_apimachinery_holds_them() {
        assert!(matches!(q("1.5G"), Quantity::Int { value: 15, scale: 8 }));
        assert!(matches!(q("1Ki"), Quantity::Int { value: 1024, scale: 0 }));
        assert!(matches!(q("1000m"), Quantity::Int { value: 1000, scale: -3 }));
        // Held as inf.Dec, at nano scale: 1536 * 10^9.
        let Quantity::Dec { unscaled, scale: 9 } = q("1.5Ki") else { panic!("1.5Ki is an inf.Dec") };
        assert_eq!(unscaled, BigInt::from(1_536_000_000_000i64));
        // Finer than nano rounds up.
        assert_eq!(q("1.0000000001"), q("1000000001n"));
        // Binary quantities stop at the largest int64.
        assert_eq!(q("9Ei"), q("9223372036854775807"));
        assert_eq!(q("-.5"), q("-500m"));
        assert_eq!(q("1."), q("1"));
        assert_eq!(q("+"), q("0"));
    }

    #[test]
    fn bad_quantities_are_refused_in_apimachinerys_words() {
        for bad in ["", "1.5x", "1e", "1Kib", "abc", "1 Gi", "--1"] {
            let err = parse(bad).unwrap_err();
            assert!(err == FORMAT_WRONG || err == SUFFIX, "{bad}: {err}");
        }
        assert_eq!(parse("12Mx").unwrap_err(), FORMAT_WRONG);
        assert_eq!(parse("1iK").unwrap_err(), SUFFIX);
    }

    #[test]
    fn answers_depend_on_how_the_value_is_held() {
        assert_eq!(q("1k").as_int64(), Some(1000));
        assert_eq!(q("1000m").as_int64(), None);
        assert_eq!(q("1.5Ki").as_int64(), None);
        assert_eq!(q("1.5Ki").approximate(), 1_536_000_000_000f64 * 1e-9);
        assert_eq!(q("200M").add(&q("100M"), false).unwrap().as_int64(), Some(300_000_000));
        assert!(q("1e999999999").cmp_exact(&q("1Ei")).is_gt());
        assert!(q("-1e999999999").cmp_exact(&q("-1")).is_lt());
        assert!(q("1e999999999").add(&q("1"), false).is_err());
        assert_eq!(q("0").add(&q("1"), true).unwrap().as_int64(), None);
        assert_eq!(
            (q("1.5Ki").exact(), q("-500m").exact(), q("2k").exact()),
            ("1536".into(), "-0.5".into(), "2000".into())
        );
    }
}
