//! Crontabs as shell-operator reads them (robfig/cron v2, which it pins): five fields (minute first, at
//! second 0) or six (second first); `*` and `?`, lists, ranges, steps (`a/n` runs from `a` to the field's
//! end), month and weekday names; a day matches when both day fields do, unless neither is a wildcard,
//! then when either does; `@hourly` and the other descriptors; `@every <Go duration>` (whole seconds, at
//! least one); and a `TZ=<zone> ` prefix, the process's time zone otherwise. Written here rather than
//! taken from a cron crate because users' crontabs depend on these exact rules (the crates differ on
//! the day rule, `a/n`, `?` and `@every`), and the refusals keep robfig's words.

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{ToSpan, Zoned};

/// One parsed crontab.
#[derive(Debug, Clone, PartialEq)]
pub struct Crontab {
    when: When,
    zone: TimeZone,
}

#[derive(Debug, Clone, PartialEq)]
enum When {
    Fields(Fields),
    /// `@every`: a fixed delay in whole seconds, counted from each run's whole second.
    Every(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Fields {
    second: u64,
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
}

/// Set on a field written `*` or `?`, for the day rule.
const STAR: u64 = 1 << 63;

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [(&'static str, u32)],
}

const SECONDS: Bounds = Bounds { min: 0, max: 59, names: &[] };
const MINUTES: Bounds = Bounds { min: 0, max: 59, names: &[] };
const HOURS: Bounds = Bounds { min: 0, max: 23, names: &[] };
const DOM: Bounds = Bounds { min: 1, max: 31, names: &[] };
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[("sun", 0), ("mon", 1), ("tue", 2), ("wed", 3), ("thu", 4), ("fri", 5), ("sat", 6)],
};

impl Crontab {
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (zone, spec) = match spec.strip_prefix("TZ=") {
            Some(rest) => {
                let end = rest.find(' ').ok_or_else(|| format!("Provided bad location {rest}: no schedule follows"))?;
                let name = &rest[..end];
                let zone = TimeZone::get(name)
                    .map_err(|err| format!("Provided bad location {name}: unknown time zone {err}"))?;
                (zone, rest[end..].trim())
            }
            None => (TimeZone::system(), spec),
        };
        let when = match spec.strip_prefix('@') {
            Some(_) => descriptor(spec)?,
            None => {
                let mut fields: Vec<&str> = spec.split_whitespace().collect();
                if fields.len() != 5 && fields.len() != 6 {
                    return Err(format!("Expected 5 or 6 fields, found {}: {spec}", fields.len()));
                }
                if fields.len() == 5 {
                    fields.insert(0, "0");
                }
                When::Fields(Fields {
                    second: field(fields[0], &SECONDS)?,
                    minute: field(fields[1], &MINUTES)?,
                    hour: field(fields[2], &HOURS)?,
                    dom: field(fields[3], &DOM)?,
                    month: field(fields[4], &MONTHS)?,
                    dow: field(fields[5], &DOW)?,
                })
            }
        };
        Ok(Crontab { when, zone })
    }

    /// The first time after `now` that the crontab fires, or `None` if it never does within five years
    /// (the 30th of February).
    pub fn next(&self, now: &Zoned) -> Option<Zoned> {
        match &self.when {
            When::Every(delay) => {
                let whole = now.with().subsec_nanosecond(0).build().ok()?;
                whole.checked_add(*delay).ok()
            }
            When::Fields(fields) => fields.next(&now.with_time_zone(self.zone.clone())),
        }
    }
}

fn descriptor(spec: &str) -> Result<When, String> {
    let all = |b: &Bounds| bits(b.min, b.max, 1) | STAR;
    let at = |b: &Bounds| 1u64 << b.min;
    let fields = |hour: u64, dom: u64, month: u64, dow: u64| {
        When::Fields(Fields { second: at(&SECONDS), minute: at(&MINUTES), hour, dom, month, dow })
    };
    Ok(match spec {
        "@yearly" | "@annually" => fields(at(&HOURS), at(&DOM), at(&MONTHS), all(&DOW)),
        "@monthly" => fields(at(&HOURS), at(&DOM), all(&MONTHS), all(&DOW)),
        "@weekly" => fields(at(&HOURS), all(&DOM), all(&MONTHS), at(&DOW)),
        "@daily" | "@midnight" => fields(at(&HOURS), all(&DOM), all(&MONTHS), all(&DOW)),
        "@hourly" => fields(all(&HOURS), all(&DOM), all(&MONTHS), all(&DOW)),
        _ => match spec.strip_prefix("@every ") {
            Some(text) => {
                let (negative, delay) =
                    crate::duration::parse_go(text).map_err(|err| format!("Failed to parse duration {spec}: {err}"))?;
                let delay = if negative { Duration::ZERO } else { delay };
                When::Every(Duration::from_secs(delay.as_secs().max(1)))
            }
            None => return Err(format!("Unrecognized descriptor: {spec}")),
        },
    })
}

fn field(text: &str, bounds: &Bounds) -> Result<u64, String> {
    let mut all = 0;
    for part in text.split(',').filter(|p| !p.is_empty()) {
        all |= range(part, bounds)?;
    }
    Ok(all)
}

fn range(expr: &str, b: &Bounds) -> Result<u64, String> {
    let steps: Vec<&str> = expr.split('/').collect();
    let ends: Vec<&str> = steps[0].split('-').collect();
    let (mut start, mut end, mut star) = (u64::from(b.min), u64::from(b.max), 0);
    if ends[0] == "*" || ends[0] == "?" {
        star = STAR;
    } else {
        start = number_or_name(ends[0], b)?;
        end = match ends.len() {
            1 => start,
            2 => number_or_name(ends[1], b)?,
            _ => return Err(format!("Too many hyphens: {expr}")),
        };
    }
    let step = match steps.len() {
        1 => 1,
        2 => {
            if ends.len() == 1 {
                end = u64::from(b.max);
            }
            number(steps[1])?
        }
        _ => return Err(format!("Too many slashes: {expr}")),
    };
    if start < u64::from(b.min) {
        return Err(format!("Beginning of range ({start}) below minimum ({}): {expr}", b.min));
    }
    if end > u64::from(b.max) {
        return Err(format!("End of range ({end}) above maximum ({}): {expr}", b.max));
    }
    if start > end {
        return Err(format!("Beginning of range ({start}) beyond end of range ({end}): {expr}"));
    }
    // robfig loops for ever on a zero step; refused here instead.
    if step == 0 {
        return Err(format!("Step of zero: {expr}"));
    }
    // Within the field's bounds now, so within 0..=59.
    Ok(bits(start as u32, end as u32, step) | star)
}

fn number_or_name(text: &str, b: &Bounds) -> Result<u64, String> {
    let lower = text.to_ascii_lowercase();
    match b.names.iter().find(|(name, _)| *name == lower) {
        Some((_, value)) => Ok(u64::from(*value)),
        None => number(text).map(u64::from),
    }
}

fn number(text: &str) -> Result<u32, String> {
    let value: i64 = text
        .parse()
        .map_err(|_| format!("Failed to parse int from {text}: strconv.Atoi: parsing {text:?}: invalid syntax"))?;
    if value < 0 {
        return Err(format!("Negative number ({value}) not allowed: {text}"));
    }
    u32::try_from(value)
        .map_err(|_| format!("Failed to parse int from {text}: strconv.Atoi: parsing {text:?}: value out of range"))
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    (min..=max.min(62)).step_by(step as usize).fold(0, |acc, i| acc | 1 << i)
}

fn has(set: u64, value: i8) -> bool {
    set & (1 << value as u32) != 0
}

impl Fields {
    fn day_matches(&self, t: &Zoned) -> bool {
        let dom = has(self.dom, t.day());
        let dow = has(self.dow, t.weekday().to_sunday_zero_offset());
        if self.dom & STAR != 0 || self.dow & STAR != 0 { dom && dow } else { dom || dow }
    }

    /// robfig's search: from the next whole second, move the month, then the day, the hour, the minute
    /// and the second forward to the first that matches, starting over when a larger unit rolls over.
    fn next(&self, now: &Zoned) -> Option<Zoned> {
        let mut t = now.with().subsec_nanosecond(0).build().ok()?.checked_add(1.second()).ok()?;
        let year_limit = t.year() + 5;
        let mut moved = false;
        'wrap: loop {
            if t.year() > year_limit {
                return None;
            }
            while !has(self.month, t.month()) {
                if !moved {
                    moved = true;
                    t = t.start_of_day().ok()?.with().day(1).build().ok()?;
                }
                t = t.checked_add(1.month()).ok()?;
                if t.month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&t) {
                if !moved {
                    moved = true;
                    t = t.start_of_day().ok()?;
                }
                t = t.checked_add(1.day()).ok()?;
                if t.day() == 1 {
                    continue 'wrap;
                }
            }
            while !has(self.hour, t.hour()) {
                if !moved {
                    moved = true;
                    t = t.with().minute(0).second(0).build().ok()?;
                }
                t = t.checked_add(1.hour()).ok()?;
                if t.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !has(self.minute, t.minute()) {
                if !moved {
                    moved = true;
                    t = t.with().second(0).build().ok()?;
                }
                t = t.checked_add(1.minute()).ok()?;
                if t.minute() == 0 {
                    continue 'wrap;
                }
            }
            while !has(self.second, t.second()) {
                moved = true;
                t = t.checked_add(1.second()).ok()?;
                if t.second() == 0 {
                    continue 'wrap;
                }
            }
            return Some(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Zoned {
        format!("{text}[UTC]").parse().unwrap()
    }

    fn next(spec: &str, from: &str) -> String {
        let tab = Crontab::parse(&format!("TZ=UTC {spec}")).unwrap();
        tab.next(&at(from)).unwrap().datetime().to_string()
    }

    #[test]
    fn five_and_six_fields() {
        assert_eq!(next("*/5 * * * * *", "2026-01-01T10:00:03"), "2026-01-01T10:00:05");
        assert_eq!(next("*/10 * * * *", "2026-01-01T10:03:00"), "2026-01-01T10:10:00");
        assert_eq!(next("* * * * *", "2026-01-01T10:03:00.5"), "2026-01-01T10:04:00");
        assert_eq!(next("0 3 * * *", "2026-01-01T10:00:00"), "2026-01-02T03:00:00");
        assert_eq!(next("5/20 * * * * ?", "2026-01-01T10:00:26"), "2026-01-01T10:00:45");
        assert_eq!(next("0 0 1 jan-mar MON", "2026-01-06T00:00:00"), "2026-01-12T00:00:00");
        assert_eq!(next("@hourly", "2026-01-01T10:03:00"), "2026-01-01T11:00:00");
        assert_eq!(next("@yearly", "2026-01-01T10:03:00"), "2027-01-01T00:00:00");
        assert_eq!(next("@every 1m30s", "2026-01-01T10:00:00.7"), "2026-01-01T10:01:30");
        assert_eq!(next("@every 100ms", "2026-01-01T10:00:00.7"), "2026-01-01T10:00:01");
    }

    #[test]
    fn a_day_matches_either_day_field_only_when_neither_is_a_wildcard() {
        // 2026-01-01 is a Thursday. Both restricted: the 15th or a Monday, whichever comes first.
        assert_eq!(next("0 0 0 15 * MON", "2026-01-01T00:00:00"), "2026-01-05T00:00:00");
        // One a wildcard: both must match, so only Mondays.
        assert_eq!(next("0 0 0 * * MON", "2026-01-01T00:00:00"), "2026-01-05T00:00:00");
        assert_eq!(next("0 0 0 15 * ?", "2026-01-01T00:00:00"), "2026-01-15T00:00:00");
        assert!(Crontab::parse("TZ=UTC 0 0 0 30 feb *").unwrap().next(&at("2026-01-01T00:00:00")).is_none());
    }

    #[test]
    fn bad_crontabs_in_robfigs_words() {
        let err = |spec: &str| Crontab::parse(spec).unwrap_err();
        assert_eq!(err("* * * *"), "Expected 5 or 6 fields, found 4: * * * *");
        assert_eq!(err("61 * * * *"), "End of range (61) above maximum (59): 61");
        assert_eq!(err("70 * * * *"), "End of range (70) above maximum (59): 70");
        assert_eq!(err("* * * * 7"), "End of range (7) above maximum (6): 7");
        assert_eq!(err("* * 0 * *"), "Beginning of range (0) below minimum (1): 0");
        assert_eq!(err("5-2 * * * *"), "Beginning of range (5) beyond end of range (2): 5-2");
        assert_eq!(err("1-2-3 * * * *"), "Too many hyphens: 1-2-3");
        assert_eq!(err("*/2/3 * * * *"), "Too many slashes: */2/3");
        assert_eq!(err("x * * * *"), "Failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax");
        assert_eq!(err("@fortnightly"), "Unrecognized descriptor: @fortnightly");
        assert_eq!(err("*/0 * * * *"), "Step of zero: */0");
        assert!(err("TZ=Mars/Base * * * * *").starts_with("Provided bad location Mars/Base"));
    }
}
