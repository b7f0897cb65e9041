//! samplectl as kubectl's plugin: the name it was started by, and how kubectl's command line names it.

/// The file name this binary was started by, without a directory or `.exe`: `samplectl`; or
/// `kubectl-samplectl` when kubectl runs it as its plugin, or `kubectl_complete-samplectl` when kubectl
/// asks that plugin to complete a word.
pub fn executable_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let argv0 = std::env::args_os().next().unwrap_or_default();
        let stem = std::path::Path::new(&argv0).file_stem().map(|s| s.to_string_lossy().into_owned());
        stem.filter(|s| !s.is_empty()).unwrap_or_else(|| "samplectl".to_owned())
    })
}

/// How a plugin's file name reads on kubectl's command line: `kubectl-samplectl` is `kubectl samplectl`,
/// and, as kubectl maps them, `_` in a plugin's name is `-` on the command line.
pub(super) fn command_line(file_name: &str) -> Option<String> {
    let plugin = file_name.strip_prefix("kubectl-")?;
    Some(format!("kubectl {}", plugin.replace('-', " ").replace('_', "-")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_is_named_as_kubectl_s_command_line_names_it() {
        assert_eq!(command_line("kubectl-samplectl").as_deref(), Some("kubectl samplectl"));
        assert_eq!(command_line("kubectl-sample_ctl").as_deref(), Some("kubectl sample-ctl"));
        assert_eq!(command_line("kubectl-a-b").as_deref(), Some("kubectl a b"));
        assert_eq!(command_line("samplectl"), None);
    }
}
