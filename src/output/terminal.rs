//! Text from the cluster made safe for a terminal. An object's fields are anyone's to write, and printed
//! raw they can drive the reader's terminal (retitle it, rewrite what is on screen, hide text: the class of
//! CVE-2021-25743 in kubectl). Where stdout is a terminal, table cells show control characters and
//! bidirectional overrides escaped instead; json and yaml, which escape them already, and anything piped
//! are left exact. Long cells are cut to the terminal's width there too, since one 4 KiB field would
//! otherwise make every row of the table wrap.

use std::borrow::Cow;

/// Whether `c` would be acted on by a terminal rather than shown: C0 and C1 controls and DEL (ESC starts
/// every escape sequence), and the Unicode bidirectional controls that reorder what is shown.
fn acts(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// `text` with every character a terminal would act on written out as an escape (`\x1b`, `\t`,
/// `\u{202e}`); the rest is shown as it is.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if acts(c) && (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if acts(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether stdout is a terminal, and how wide: tables on a terminal show escapes and, unless
/// `--wide-cells`, cut long cells to fit.
pub fn stdout_width() -> Option<usize> {
    terminal_size::terminal_size().map(|(width, _)| usize::from(width.0)).filter(|&width| width > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_acted_on() {
        assert_eq!(escape("plain text, ünïcode ✓"), "plain text, ünïcode ✓");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(escape("\x1b]0;pwned\x07title"), "\\x1b]0;pwned\\x07title");
        assert_eq!(escape("\x1b[2J\x1b[31mred"), "\\x1b[2J\\x1b[31mred");
        assert_eq!(escape("a\tb\rc\u{7f}d\u{9b}e"), "a\\tb\\rc\\x7fd\\x9be");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    proptest::proptest! {
        /// Nothing a terminal acts on survives.
        #[test]
        fn nothing_acts_after_escaping(text in "\\PC*|[\\x00-\\x1f\\x7f-\\u{9f}\\u{202a}-\\u{202e}a-z]{0,40}") {
            proptest::prop_assert!(!escape(&text).chars().any(acts));
        }
    }
}
