//! Durations as people type and read them (`500ms`, `30s`, `1m30s`, `2h`), through jiff's "friendly"
//! format rather than a parser of our own. A leaf: nothing else of samplectl is used here.

use std::time::Duration;

use jiff::fmt::friendly::{Designator, Spacing, SpanParser, SpanPrinter};

static PARSER: SpanParser = SpanParser::new();
static PRINTER: SpanPrinter = SpanPrinter::new().designator(Designator::Compact).spacing(Spacing::None);

/// A duration with units, as kubectl's flags take them (`500ms`, `30s`, `1m30s`, also `1.5s` or
/// `2 hours`). A bare `0` is allowed because "0 means do not wait" is a common request; days and longer
/// are not, since they are not a fixed length.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    PARSER
        .parse_unsigned_duration(text)
        .map_err(|_| format!("invalid duration {text:?}: use a number with a unit, such as 500ms, 30s, 2m or 1h"))
}

/// A duration of at least `min`: zero or a few nanoseconds would make the loop it paces spin against
/// the API server.
pub fn at_least(text: &str, min: Duration) -> Result<Duration, String> {
    let value = parse(text)?;
    if value < min {
        return Err(format!("{text:?} is too short: the smallest value allowed is {}", format(min)));
    }
    Ok(value)
}

/// `30s`, `1m30s`, `1s500ms`: compact, in the units kubectl prints.
pub fn format(duration: Duration) -> String {
    PRINTER.unsigned_duration_to_string(&duration)
}

/// A duration as Go's `time.ParseDuration` reads it (`300ms`, `1.5h`, `2h45m`, `-1s`), for formats that
/// other tools define in Go's terms (shell-operator's `executionMinInterval`, cron's `@every`); a
/// negative duration is given as its sign and size. The errors are Go's.
pub fn parse_go(text: &str) -> Result<(bool, Duration), String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok((false, Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number = &rest[..digits];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {text:?}"));
        }
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {text:?}")),
        };
        total += value * nanos;
        rest = &rest[unit_len..];
    }
    // Go's durations are int64 nanoseconds.
    if total > i64::MAX as f64 {
        return Err(invalid());
    }
    Ok((negative && total > 0.0, Duration::from_nanos(total as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go("300ms"), Ok((false, Duration::from_millis(300))));
        assert_eq!(parse_go("1.5h"), Ok((false, Duration::from_secs(5400))));
        assert_eq!(parse_go("2h45m"), Ok((false, Duration::from_secs(9900))));
        assert_eq!(parse_go("-1s"), Ok((true, Duration::from_secs(1))));
        assert_eq!(parse_go("0"), Ok((false, Duration::ZERO)));
        assert_eq!(parse_go("5"), Err("time: missing unit in duration \"5\"".into()));
        assert_eq!(parse_go("5d"), Err("time: unknown unit \"d\" in duration \"5d\"".into()));
        assert_eq!(parse_go(""), Err("time: invalid duration \"\"".into()));
        assert_eq!(parse_go("x"), Err("time: invalid duration \"x\"".into()));
    }

    #[test]
    fn durations_with_units() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_rejected() {
        for bad in ["", "30", "s", "-1s", "3d", "1w", "ms5", "99999999999999999999h", "PT1M"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("invalid duration"), "{bad:?} gave {err}");
        }
    }

    #[test]
    fn pacing_durations_have_a_floor() {
        let ms = Duration::from_millis;
        assert_eq!(at_least("100ms", ms(100)), Ok(ms(100)));
        assert_eq!(at_least("2m", ms(1000)), Ok(Duration::from_secs(120)));
        assert_eq!(at_least("0", ms(100)).unwrap_err(), "\"0\" is too short: the smallest value allowed is 100ms");
        assert_eq!(
            at_least("999ms", ms(1000)).unwrap_err(),
            "\"999ms\" is too short: the smallest value allowed is 1s"
        );
        assert!(at_least("fast", ms(100)).unwrap_err().contains("invalid duration"));
    }

    #[test]
    fn durations_print_compactly() {
        assert_eq!(format(Duration::from_secs(30)), "30s");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(format(Duration::ZERO), "0s");
    }

    proptest::proptest! {
        #[test]
        fn any_duration_text_parses_or_is_refused(text in "\\PC{0,30}") {
            let _ = parse(&text);
        }

        /// Sums of parts with units parse to exactly their total, and print back to the same duration.
        #[test]
        fn composed_durations_add_up(h in 0u64..100, m in 0u64..1000, s in 0u64..100_000, ms in 0u64..100_000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let want = Duration::from_secs(h * 3600 + m * 60 + s) + Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse(&text), Ok(want));
            proptest::prop_assert_eq!(parse(&format(want)), Ok(want));
        }
    }
}
