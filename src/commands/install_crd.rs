//! `samplectl install-crd`: apply the embedded Sample CRD and say what happened, as `kubectl apply` does.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::InstallCrdArgs;
use crate::cluster::client::Connection;
use crate::controller::crd::{CRD_YAML, DISPLAY_KIND, install};

/// `--print`: the manifest, with no cluster needed.
pub fn print(out: &mut impl Write) -> Result<()> {
    out.write_all(CRD_YAML.as_bytes()).context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")
}

pub async fn run(conn: &Connection, args: &InstallCrdArgs, out: &mut impl Write) -> Result<()> {
    let (name, outcome) = install(conn.client.clone(), args.dry_run, args.timeout).await?;
    let suffix = if args.dry_run { " (server dry run)" } else { "" };
    writeln!(out, "{DISPLAY_KIND}/{name} {}{suffix}", outcome.word()).context("cannot write to stdout")
}
