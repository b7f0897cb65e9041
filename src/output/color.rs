//! Whether to colour a stream: `--color always|never`, or for `auto`, only a terminal, and never when
//! `NO_COLOR` is set (https://no-color.org).

use std::io::IsTerminal;

/// `--color`'s three answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

pub fn enabled(choice: ColorChoice, is_terminal: bool, no_color_env: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => is_terminal && !no_color_env,
    }
}

pub fn stderr_enabled(choice: ColorChoice) -> bool {
    enabled(choice, std::io::stderr().is_terminal(), no_color_env())
}

fn no_color_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Paints the leading `error:` of a message red, as kubectl's terminal users are used to spotting it.
pub fn paint_error(line: &str, color: bool) -> String {
    match line.strip_prefix("error:") {
        Some(rest) if color => format!("\x1b[1;31merror:\x1b[0m{rest}"),
        _ => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_terminal_and_no_color() {
        assert!(enabled(ColorChoice::Auto, true, false));
        assert!(!enabled(ColorChoice::Auto, false, false));
        assert!(!enabled(ColorChoice::Auto, true, true));
        assert!(enabled(ColorChoice::Always, false, true));
        assert!(!enabled(ColorChoice::Never, true, false));
    }

    #[test]
    fn only_the_prefix_is_painted() {
        assert_eq!(paint_error("error: boom", true), "\x1b[1;31merror:\x1b[0m boom");
        assert_eq!(paint_error("error: boom", false), "error: boom");
        assert_eq!(paint_error("Error from server (NotFound): x", true), "Error from server (NotFound): x");
    }
}
