//! Files that only samplectl's user may read or replace: a shell hook's binding contexts (which may
//! hold Secret data) and the patch files it writes back, which samplectl sends with its own
//! credentials. A directory anyone else may write to would let them read the one or forge the other.
//!
//! A given directory is made 0700 if missing; an existing one must be a real directory (not a symbolic
//! link) owned by this user, and is made 0700 if it is looser. A fresh one has a random name, made
//! with mkdir, which never follows a link nor takes an existing directory. Files are made new (O_EXCL:
//! an existing file or a planted link is refused), 0600, and read back without following a link.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `dir`, made or checked as above; why not, otherwise.
pub fn directory(dir: &Path) -> Result<(), String> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("cannot make {}: {err}", dir.display()));
        }
        Err(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symbolic link; give the directory itself", dir.display()));
    }
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to uid {}, not to this process's uid {me}: hooks' files there could be read or replaced",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|err| format!("cannot make {} private (chmod 700): {err}", dir.display()))?;
        tracing::info!("--tmp-dir {} was mode {:o}; made 0700", dir.display(), meta.mode() & 0o777);
    }
    Ok(())
}

/// A fresh private directory under `parent`, named `prefix-<random>`.
pub fn fresh_directory(parent: &Path, prefix: &str) -> Result<PathBuf, String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|err| format!("no random name: {err}"))?;
    let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let dir = parent.join(format!("{prefix}-{name}"));
    DirBuilder::new().mode(0o700).create(&dir).map_err(|err| format!("cannot make {}: {err}", dir.display()))?;
    Ok(dir)
}

/// Writes `text` to the new file `path`, readable by this user only.
pub fn create(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut file =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)?;
    file.write_all(text)
}

/// The file at `path`, not following a symbolic link.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file: File = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn a_directory_is_made_private_or_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let made = scratch.path().join("made");
        directory(&made).unwrap();
        assert_eq!(mode(&made), 0o700);

        let loose = scratch.path().join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
        directory(&loose).unwrap();
        assert_eq!(mode(&loose), 0o700, "an own directory is tightened");

        let link = scratch.path().join("link");
        std::os::unix::fs::symlink(&made, &link).unwrap();
        assert!(directory(&link).unwrap_err().contains("is a symbolic link"));

        let file = scratch.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(directory(&file).unwrap_err().ends_with("is not a directory"));

        assert!(directory(&scratch.path().join("no/parent")).unwrap_err().starts_with("cannot make"));

        let fresh = fresh_directory(scratch.path(), "shell-operator").unwrap();
        assert_eq!(mode(&fresh), 0o700);
        assert_ne!(fresh, fresh_directory(scratch.path(), "shell-operator").unwrap(), "unpredictable");
    }

    #[test]
    fn someone_elses_directory_is_refused() {
        // SAFETY: geteuid(2) takes nothing and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            // Only root can give a directory away; as anyone else the check is the same code.
            return;
        }
        let scratch = tempfile::tempdir().unwrap();
        let theirs = scratch.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        let why = directory(&theirs).unwrap_err();
        assert!(why.contains("belongs to uid 65534, not to this process's uid 0"), "{why}");
    }

    #[test]
    fn files_are_new_private_and_never_followed() {
        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("context.json");
        create(&file, b"{}").unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(read(&file).unwrap(), b"{}");
        assert_eq!(create(&file, b"again").unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);

        let target = scratch.path().join("target");
        std::fs::write(&target, "secret").unwrap();
        let planted = scratch.path().join("planted");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        assert!(create(&planted, b"x").is_err(), "a planted link is not written through");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret");
        assert!(read(&planted).is_err(), "nor read through");
    }
}
