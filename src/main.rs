//! The binary: parse and check the command line, set up logging, run the command on a tokio runtime, and
//! turn its outcome into kubectl's error line and an exit code. No logic of its own.

use std::io;
use std::process::ExitCode;

use anyhow::Result;

use samplectl::cli::{Cli, Command, complete};
use samplectl::cluster::client::{self, Connection};
use samplectl::commands::{install_crd, list, reconcile, watch};
use samplectl::output::color;
use samplectl::{error, logging};

/// jemalloc rather than the system's malloc, so that memory taken by a burst goes back (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings: a background thread returns freed pages to the system a second after they were
/// last used, rather than when the next allocation happens to pass by.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Conf = Conf(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

/// The C string jemalloc reads its settings from at start-up.
#[repr(transparent)]
struct Conf(*const std::ffi::c_char);
// SAFETY: a pointer to a constant string, never written.
unsafe impl Sync for Conf {}

fn main() -> ExitCode {
    // As a container's PID 1, a reaper splits off first (process/init.rs).
    samplectl::process::init::reap_if_first();
    // A hook's jqFilter runs in a copy of this binary started as a worker; it serves and exits here.
    samplectl::controller::drive::events::jq_worker::serve_if_asked();
    // A TAB in a shell or in kubectl runs this binary to ask for candidates; it answers and exits here.
    complete::answer_if_asked();
    // clap prints help and usage errors itself and exits 0 or 2, before anything else happens.
    let cli = Cli::parse_checked();
    let stderr_color = color::stderr_enabled(cli.global.color);
    logging::init(cli.global.verbose, cli.global.log_format, stderr_color);

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(error::EXIT_FAILURE as u8);
        }
    };
    match runtime.block_on(run(cli, stderr_color)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => match error::report(&err, error::server()) {
            None => ExitCode::SUCCESS,
            Some((message, code)) => {
                eprintln!("{}", color::paint_error(&message, stderr_color));
                ExitCode::from(code as u8)
            }
        },
    }
}

/// The API server's warnings on stderr, as kubectl prints them (`Warning:` in yellow on a terminal).
fn warn(color: bool) -> client::WarningHandler {
    std::sync::Arc::new(move |text: &str| match color {
        true => eprintln!("\x1b[33;1mWarning:\x1b[0m {text}"),
        false => eprintln!("Warning: {text}"),
    })
}

async fn run(cli: Cli, color: bool) -> Result<()> {
    let mut stdout = io::stdout().lock();
    match &cli.command {
        Command::Completion(args) => complete::print_script(&args.shell, &mut stdout),
        Command::InstallCrd(args) if args.print => install_crd::print(args, &mut stdout),
        Command::InstallCrd(args) => {
            let conn = Connection::new(&cli.global.client_options(), warn(color)).await?;
            install_crd::run(&conn, args, &mut stdout).await
        }
        Command::List(args) => {
            let conn = Connection::new(&cli.global.client_options(), warn(color)).await?;
            list::run(&conn, cli.global.namespace.as_deref(), args, &mut stdout).await
        }
        Command::Watch(args) => {
            let conn = Connection::new(&cli.global.client_options(), warn(color)).await?;
            watch::run(&conn, cli.global.namespace.as_deref(), args, &mut stdout).await
        }
        Command::Reconcile(args) => {
            let mut options = cli.global.client_options();
            // Every process tells itself apart in an audit log: a shard member by its incarnation, any
            // other by its per-process id.
            options.agent = Some(match args.member() {
                Some(member) => format!("shard-member/{}/{}", member.ring, member.incarnation),
                None => format!("process/{}", samplectl::controller::leader::incarnation()),
            });
            options.answer_limit = Some(samplectl::cluster::deadline::ANSWER_LIMIT);
            let conn = Connection::new(&options, warn(color)).await?;
            reconcile::run(&conn, cli.global.namespace.as_deref(), args).await
        }
    }
}
