//! Bindings' jqFilters run in worker processes, so that one hook's filter cannot stall or end the
//! engine that runs every other hook. A filter is code: `def f: [f]; f` overflows the stack (which
//! aborts a process, not a thread), `[range(1e12)]` fills memory, `last(range(1e15))` never stops, and
//! none of them can be interrupted inside jaq. In a worker, each is a process ended: the engine waits
//! at most `--jq-timeout` for an answer, the worker's memory is limited (`WORKER_MEMORY`) and the
//! kernel's OOM killer takes it before the engine, and whatever ends it is the error of that one
//! object's event, in the hook's log, as shell-operator logs a filter's error.
//!
//! A worker is this same binary started with `WORKER_ARG` (`/proc/self/exe`, so a binary replaced on
//! disk since is not the one run). It reads one request a line, `{"filter": text, "input": object}`,
//! and answers one line: `=` and the filter's result, or `!` and its error as a JSON string. It keeps
//! the filters it compiled. Idle workers are kept for the next filter (`KEEP_IDLE`); a caller that
//! finds none starts one, so a binding whose filter is slow holds one worker, never another binding's.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::controller::rules::shell::jq::Jq;

/// The first argument that makes this binary a jq worker rather than samplectl's command line.
pub const WORKER_ARG: &str = "__samplectl-jq-worker";

/// The address space a worker may take. The manifests' memory limit is 256Mi for the whole
/// container, so a worker's limit is under it, and the worker volunteers to the OOM killer first.
pub const WORKER_MEMORY: u64 = 256 << 20;

/// The largest result a worker answers with: past it, the filter's event fails rather than the
/// engine holding it (shell-operator's filters give a part of one object, which is at most ~1.5 MiB).
pub const MAX_RESULT: usize = 16 << 20;

/// Idle workers kept for the next filter; more are ended when their call is done.
const KEEP_IDLE: usize = 4;

/// What a worker's stderr is read of, once it has ended, to say why.
const MAX_LAST_WORDS: u64 = 4096;

static IDLE: Mutex<Vec<Worker>> = Mutex::new(Vec::new());

/// Called first in `main`: if this process was started as a worker, it serves and exits here.
pub fn serve_if_asked() {
    if std::env::args_os().nth(1).as_deref() == Some(OsStr::new(WORKER_ARG)) {
        std::process::exit(serve());
    }
}

/// `jq` over one object's JSON text, in a worker: the filter's result as `Jq::apply` gives it, its
/// error, or why the worker was ended.
pub async fn apply(jq: &Jq, input: &str) -> Result<String, String> {
    let timeout = crate::limits::get().jq_timeout;
    let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut worker = match idle {
        Some(worker) => worker,
        None => Worker::start().map_err(|err| format!("jqFilter {:?}: cannot start a jq worker: {err}", jq.text))?,
    };
    let mut request = Vec::with_capacity(input.len() + jq.text.len() + 32);
    request.extend_from_slice(b"{\"filter\":");
    request.extend_from_slice(serde_json::to_string(&jq.text).unwrap_or_default().as_bytes());
    request.extend_from_slice(b",\"input\":");
    request.extend_from_slice(input.as_bytes());
    request.extend_from_slice(b"}\n");
    match tokio::time::timeout(timeout, worker.call(&request)).await {
        Ok(Ok(answer)) => {
            let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < KEEP_IDLE {
                idle.push(worker);
            }
            answer
        }
        Ok(Err(())) => {
            Err(format!("jqFilter {:?} ended the process that ran it: {}", jq.text, worker.last_words().await))
        }
        // Dropped, the worker is killed (kill_on_drop) and reaped by tokio.
        Err(_) => Err(format!(
            "jqFilter {:?} was stopped after {}: it ran longer than --jq-timeout allows",
            jq.text,
            crate::duration::format(timeout)
        )),
    }
}

/// One worker process and its pipes.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start() -> std::io::Result<Worker> {
        let mut child = Command::new("/proc/self/exe")
            .arg(WORKER_ARG)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the worker's pipes were not made"));
        };
        Ok(Worker { child, stdin, stdout: BufReader::new(stdout) })
    }

    /// Sends one request and reads its answer; `Err(())` if the worker ended or answered nonsense.
    async fn call(&mut self, request: &[u8]) -> Result<Result<String, String>, ()> {
        self.stdin.write_all(request).await.map_err(drop)?;
        self.stdin.flush().await.map_err(drop)?;
        let mut line = Vec::new();
        let read = (&mut self.stdout).take(MAX_RESULT as u64 + 2).read_until(b'\n', &mut line).await.map_err(drop)?;
        if read == 0 || line.pop() != Some(b'\n') {
            return Err(());
        }
        match line.split_first() {
            Some((b'=', result)) => Ok(Ok(String::from_utf8(result.to_vec()).map_err(drop)?)),
            Some((b'!', error)) => Ok(Err(serde_json::from_slice(error).map_err(drop)?)),
            _ => Err(()),
        }
    }

    /// Why the worker ended: the first line it wrote on stderr (Rust's own words for a stack overflow or
    /// an allocation that failed), else how it exited.
    async fn last_words(&mut self) -> String {
        let _ = self.child.start_kill();
        let status = self.child.wait().await;
        let mut said = Vec::new();
        if let Some(stderr) = self.child.stderr.take() {
            let _ = stderr.take(MAX_LAST_WORDS).read_to_end(&mut said).await;
        }
        let said = String::from_utf8_lossy(&said);
        let line = said.lines().map(str::trim).find(|line| !line.is_empty());
        let how = match status {
            Ok(status) => status.to_string(),
            Err(err) => err.to_string(),
        };
        let limit = format!("its memory is limited to {} MiB", WORKER_MEMORY >> 20);
        match line {
            Some(line) => format!("{line} ({how}; {limit})"),
            None => format!("{how} ({limit})"),
        }
    }
}

#[derive(Deserialize)]
struct Request {
    filter: String,
    input: serde_json::Value,
}

/// The worker's side: requests from stdin until it closes, answers on stdout.
fn serve() -> i32 {
    limit_self();
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut compiled: HashMap<String, Jq> = HashMap::new();
    for line in stdin.split(b'\n') {
        let Ok(line) = line else { return 1 };
        let answer = match serde_json::from_slice::<Request>(&line) {
            Err(err) => Err(format!("the engine sent what is not a request: {err}")),
            Ok(request) => answer(&mut compiled, request),
        };
        let written = match answer {
            Ok(result) => writeln!(stdout, "={result}"),
            Err(error) => writeln!(stdout, "!{}", serde_json::to_string(&error).unwrap_or_default()),
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            return 1;
        }
    }
    0
}

fn answer(compiled: &mut HashMap<String, Jq>, request: Request) -> Result<String, String> {
    // Filters come from hooks' configs, a few each; the bound is against configs reloaded many times.
    if compiled.len() >= 1024 {
        compiled.clear();
    }
    if !compiled.contains_key(&request.filter) {
        let jq = Jq::compile(&request.filter)?;
        compiled.insert(request.filter.clone(), jq);
    }
    let result = compiled[&request.filter].apply_to(&request.input)?;
    match result.len() > MAX_RESULT {
        true => Err(format!("jqFilter {:?} gives a result of more than {} MiB", request.filter, MAX_RESULT >> 20)),
        false => Ok(result),
    }
}

/// The worker's own bounds, set before it reads anything: its address space, no core file when it
/// ends by a signal, first in line for the OOM killer, and an end when its engine ends (a filter that
/// never stops would otherwise spin on as an orphan).
fn limit_self() {
    let bound = |resource, value: u64| {
        let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
        // SAFETY: setrlimit reads the struct it is given and nothing else.
        unsafe { libc::setrlimit(resource, &limit) };
    };
    bound(libc::RLIMIT_CORE, 0);
    bound(libc::RLIMIT_AS, WORKER_MEMORY);
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    // SAFETY: getppid has no arguments and cannot fail.
    let parent = unsafe { libc::getppid() };
    let _ = std::thread::Builder::new().stack_size(64 << 10).spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            // SAFETY: as above.
            if unsafe { libc::getppid() } != parent {
                std::process::exit(1);
            }
        }
    });
}
