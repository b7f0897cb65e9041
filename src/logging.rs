//! Logs go to stderr so stdout carries only data. `-v` raises the detail; `RUST_LOG` overrides it.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// The message alone, for people.
    Text,
    /// One JSON object per line with the structured fields, for machines.
    Json,
}

/// The filter for a number of `-v` flags: samplectl's own notices by default, its debug detail and the
/// client's requests with more. kube's client builder logs every failed request at ERROR; samplectl reports
/// the same failure itself, once and in kubectl's words, so that line is kept for -vv and up.
pub fn default_filter(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "warn,samplectl=info,kube_client::client::builder=off",
        1 => "warn,samplectl=debug,kube_client::client::builder=off",
        2 => "info,samplectl=debug,kube=debug",
        _ => "trace",
    }
}

pub fn init(verbosity: u8, format: LogFormat, color: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter(verbosity)));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        // Text lines carry only the message, which says everything a person needs; the structured
        // fields (namespace, name, outcome) are for the JSON format.
        LogFormat::Text => logs
            .with_ansi(color)
            .with_target(false)
            .fmt_fields(tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
                if field.name() == "message" { write!(w, "{value:?}") } else { Ok(()) }
            }))
            .init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}
