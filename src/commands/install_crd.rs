//! `samplectl install-crd`: apply the embedded Sample CRD (or, with `--metacontroller`, metacontroller's
//! three; with `--kro`, kro's two) and say what happened to each, as `kubectl apply` does.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::InstallCrdArgs;
use crate::cluster::client::Connection;
use crate::controller::crd::{CRD_YAML, DISPLAY_KIND, KRO_CRDS_YAML, METACONTROLLER_CRDS_YAML, embedded, install};

fn yaml(args: &InstallCrdArgs) -> &'static str {
    match (args.metacontroller, args.kro) {
        (true, _) => METACONTROLLER_CRDS_YAML,
        (_, true) => KRO_CRDS_YAML,
        _ => CRD_YAML,
    }
}

/// `--print`: the manifest, with no cluster needed.
pub fn print(args: &InstallCrdArgs, out: &mut impl Write) -> Result<()> {
    out.write_all(yaml(args).as_bytes()).context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")
}

pub async fn run(conn: &Connection, args: &InstallCrdArgs, out: &mut impl Write) -> Result<()> {
    let suffix = if args.dry_run { " (server dry run)" } else { "" };
    for crd in embedded(yaml(args))? {
        let outcome = install(conn.client.clone(), &crd, args.dry_run, args.timeout).await?;
        writeln!(out, "{DISPLAY_KIND}/{} {}{suffix}", crd.0, outcome.word()).context("cannot write to stdout")?;
    }
    Ok(())
}
