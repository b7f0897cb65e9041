//! Long-running hook processes (`--hook-process`): each started once and then given one request per
//! line on its stdin, answering each with one line on its stdout, so that a hook in an interpreted
//! language pays its start-up once rather than at every reconcile. A process serves one call at a
//! time; a pool starts more, up to its limit, only when every one it has is busy.
//!
//! A parent must never be given another parent's answer. Each request carries an `id` the answer must
//! echo, so a line written for another request (or a log line) is never taken for the answer; and a
//! process that fails a call (a timeout, a crash, a line that is not its answer, more than one line) is
//! never given another, since what it writes next could belong to the call that failed. It is killed
//! with its process group and the next call starts a fresh one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::Semaphore;

use crate::process::group::Group;

/// The processes of one hook, and how many may run at once.
pub struct Pool {
    words: Vec<String>,
    idle: Mutex<Vec<Worker>>,
    /// One permit per process that may run: a call holds one while it has a process.
    slots: Semaphore,
    /// The id of the next request.
    next: AtomicU64,
}

/// One running process, idle or serving a call.
struct Worker {
    /// The process and its group, killed together whenever the worker is let go.
    group: Group,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The parent whose call it serves, for its stderr lines, and its last stderr line since that call began.
    said: Arc<Mutex<Said>>,
}

#[derive(Default)]
struct Said {
    object: String,
    last: String,
}

impl Pool {
    /// A pool running `words`, with at most `most` processes (at least one).
    pub fn new(words: Vec<String>, most: usize) -> Self {
        Pool { words, idle: Mutex::new(Vec::new()), slots: Semaphore::new(most.max(1)), next: AtomicU64::new(1) }
    }

    /// Gives `request` (a JSON object on one line) to a free process for the parent `object`, with an
    /// `id` added, and returns the answer carrying the same `id`, without it; or why there is none. An
    /// answer that is not JSON comes back as it is, for the caller to word. `limit` bounds the answer's
    /// size; `timeout` bounds the wait for a free process and, separately, the answer.
    pub async fn call(&self, object: &str, request: &[u8], timeout: Duration, limit: usize) -> Result<Vec<u8>, String> {
        let within = crate::duration::format(timeout);
        let _slot = match tokio::time::timeout(timeout, self.slots.acquire()).await {
            Ok(permit) => permit.expect("the pool's semaphore is never closed"),
            Err(_) => return Err(format!("had no free process within {within}")),
        };
        let mut worker = match self.take_idle() {
            Some(worker) => worker,
            None => Worker::start(&self.words)?,
        };
        *worker.said.lock().expect("not poisoned") = Said { object: object.to_owned(), last: String::new() };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let request = with_id(request, id);
        match tokio::time::timeout(timeout, worker.exchange(&request, limit)).await {
            Ok(Ok(line)) => {
                let answer = answer_to(&line, id);
                // The next call must find nothing waiting on stdout: a line already there is not its answer.
                let answer = match answer {
                    Ok(_) if !worker.stdout.buffer().is_empty() => {
                        Err("wrote more than one line for one request".into())
                    }
                    other => other,
                };
                match answer {
                    Ok(answer) => {
                        worker.said.lock().expect("not poisoned").object.clear();
                        self.idle.lock().expect("not poisoned").push(worker);
                        Ok(answer)
                    }
                    Err(why) => {
                        worker.stop();
                        match why.is_empty() {
                            // Not JSON at all: the caller's reading words it, as for any hook.
                            true => Ok(line),
                            false => Err(why),
                        }
                    }
                }
            }
            Ok(Err(Broke::TooLong)) => {
                worker.stop();
                Err(format!("answered more than {} MiB", limit >> 20))
            }
            Ok(Err(Broke::Closed)) => Err(worker.ended().await),
            Err(_) => {
                worker.stop();
                Err(format!("did not answer within {within}"))
            }
        }
    }

    /// An idle process still running, if there is one; those that exited while idle are let go.
    fn take_idle(&self) -> Option<Worker> {
        let mut idle = self.idle.lock().expect("not poisoned");
        while let Some(mut worker) = idle.pop() {
            match worker.group.has_exited() {
                false => return Some(worker),
                true => worker.stop(),
            }
        }
        None
    }

    /// How many processes are idle now (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle.lock().expect("not poisoned").len()
    }
}

/// `request`, a JSON object, with `"id": id` put first.
fn with_id(request: &[u8], id: u64) -> Vec<u8> {
    let rest = request.strip_prefix(b"{").unwrap_or(request);
    let mut line = format!("{{\"id\":{id}").into_bytes();
    if rest.first() != Some(&b'}') {
        line.push(b',');
    }
    line.extend_from_slice(rest);
    line
}

/// The answer in `line` to the request `id`, without its `id`; an empty reason when the line is not
/// JSON at all.
fn answer_to(line: &[u8], id: u64) -> Result<Vec<u8>, String> {
    if line.is_empty() {
        return Err("answered an empty line".into());
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else { return Err(String::new()) };
    let serde_json::Value::Object(mut answer) = value else {
        return Err("answered a line that is not a JSON object".into());
    };
    match answer.remove("id") {
        Some(got) if got == id => Ok(serde_json::to_vec(&answer).expect("a map is JSON")),
        Some(got) => Err(format!("answered a line for another request (id {got}, not {id})")),
        None => Err(format!("answered a line without the request's id ({id})")),
    }
}

/// Why an exchange got no answer line.
enum Broke {
    /// The process closed its stdout (or its stdin): it exited, or is about to.
    Closed,
    TooLong,
}

impl Worker {
    fn start(words: &[String]) -> Result<Worker, String> {
        let mut group = super::hook::spawn(words)?;
        let child = group.child();
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let errors = child.stderr.take().expect("stderr is piped");
        let said = Arc::new(Mutex::new(Said::default()));
        let shared = said.clone();
        tokio::spawn(crate::process::lines::each_line(errors, move |line| {
            let object = {
                let mut said = shared.lock().expect("not poisoned");
                said.last.clone_from(&line);
                said.object.clone()
            };
            match object.is_empty() {
                true => tracing::info!("hook: {line}"),
                false => tracing::info!(object = object.as_str(), "{object}: hook: {line}"),
            }
        }));
        Ok(Worker { group, stdin, stdout, said })
    }

    /// Writes the request line and reads the answer line.
    async fn exchange(&mut self, request: &[u8], limit: usize) -> Result<Vec<u8>, Broke> {
        let mut line = Vec::with_capacity(request.len() + 1);
        line.extend_from_slice(request);
        line.push(b'\n');
        if self.stdin.write_all(&line).await.is_err() || self.stdin.flush().await.is_err() {
            return Err(Broke::Closed);
        }
        let mut answer = Vec::new();
        let read = (&mut self.stdout).take(limit as u64 + 1).read_until(b'\n', &mut answer).await;
        match read {
            Err(_) | Ok(0) => Err(Broke::Closed),
            Ok(_) if answer.last() == Some(&b'\n') => {
                answer.pop();
                if answer.last() == Some(&b'\r') {
                    answer.pop();
                }
                Ok(answer)
            }
            Ok(_) if answer.len() > limit => Err(Broke::TooLong),
            // Some bytes, then the end of its output with no newline.
            Ok(_) => Err(Broke::Closed),
        }
    }

    /// Why a process that closed its output gave no answer: its exit status and last stderr line.
    async fn ended(mut self) -> String {
        let status = tokio::time::timeout(Duration::from_secs(1), self.group.end()).await;
        // Its stderr reader may still be on its way to the last line.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let last = std::mem::take(&mut self.said.lock().expect("not poisoned").last);
        let said = if last.is_empty() { String::new() } else { format!(": {last}") };
        let why = match status {
            Ok(Ok(status)) => match status.code() {
                Some(code) => format!("exited with status {code}{said}"),
                None => format!("was killed ({status}){said}"),
            },
            _ => format!("closed its output without answering{said}"),
        };
        self.stop();
        why
    }

    /// Lets it go: dropping its `Group` kills it and everything it started (tokio reaps the process).
    fn stop(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(script: &str, most: usize) -> Pool {
        Pool::new(vec!["python3".into(), "-c".into(), script.into()], most)
    }

    const ECHO: &str = r#"
import sys, json, os
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request["id"], "n": request["n"], "pid": os.getpid()}), flush=True)
"#;

    async fn call(pool: &Pool, n: u64, timeout_ms: u64) -> Result<serde_json::Value, String> {
        let request = serde_json::to_vec(&serde_json::json!({"n": n})).unwrap();
        let line = pool.call("ns/p", &request, Duration::from_millis(timeout_ms), 1 << 20).await?;
        serde_json::from_slice(&line).map_err(|err| format!("not JSON: {err}"))
    }

    #[tokio::test]
    async fn one_process_answers_call_after_call() {
        let pool = pool(ECHO, 4);
        let first = call(&pool, 1, 5000).await.unwrap();
        let second = call(&pool, 2, 5000).await.unwrap();
        assert_eq!((first["n"].as_u64(), second["n"].as_u64()), (Some(1), Some(2)));
        assert_eq!(first["pid"], second["pid"], "the same process served both");
        assert_eq!(pool.idle_count(), 1);
    }

    #[tokio::test]
    async fn concurrent_calls_get_processes_of_their_own_up_to_the_limit() {
        let slow = r#"
import sys, json, os, time
for line in sys.stdin:
    time.sleep(0.3)
    request = json.loads(line)
    print(json.dumps({"id": request["id"], "n": request["n"], "pid": os.getpid()}), flush=True)
"#;
        let pool = pool(slow, 2);
        let answers = futures::future::join_all((0..4).map(|n| call(&pool, n, 5000))).await;
        let mut pids: Vec<_> = answers.iter().map(|a| a.as_ref().unwrap()["pid"].as_u64().unwrap()).collect();
        for (n, answer) in answers.iter().enumerate() {
            assert_eq!(answer.as_ref().unwrap()["n"].as_u64(), Some(n as u64), "each call has its own answer");
        }
        pids.sort();
        pids.dedup();
        assert_eq!(pids.len(), 2, "two processes at most");
    }

    #[tokio::test]
    async fn a_process_that_fails_a_call_is_replaced() {
        // Exits on the request numbered 2, answers the others.
        let crashy = r#"
import sys, json, os
for line in sys.stdin:
    request = json.loads(line)
    n = request["n"]
    if n == 2:
        print("giving up", file=sys.stderr, flush=True)
        sys.exit(3)
    print(json.dumps({"id": request["id"], "n": n, "pid": os.getpid()}), flush=True)
"#;
        let pool = pool(crashy, 1);
        let before = call(&pool, 1, 5000).await.unwrap();
        assert_eq!(call(&pool, 2, 5000).await.unwrap_err(), "exited with status 3: giving up");
        let after = call(&pool, 3, 5000).await.unwrap();
        assert_ne!(before["pid"], after["pid"], "a new process");
    }

    #[tokio::test]
    async fn a_late_answer_never_reaches_the_next_call() {
        // Answers the request numbered 1 after 1 s, the others at once.
        let late = r#"
import sys, json, os, time
for line in sys.stdin:
    request = json.loads(line)
    n = request["n"]
    if n == 1:
        time.sleep(1)
    print(json.dumps({"id": request["id"], "n": n, "pid": os.getpid()}), flush=True)
"#;
        let pool = pool(late, 1);
        let started = std::time::Instant::now();
        assert_eq!(call(&pool, 1, 300).await.unwrap_err(), "did not answer within 300ms");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(call(&pool, 2, 5000).await.unwrap()["n"].as_u64(), Some(2));
    }

    #[tokio::test]
    async fn stray_output_retires_the_process() {
        // Prints a debug line before each answer: the first call reads the debug line and must fail, and
        // the answer behind it must not be taken by the next call.
        let chatty = r#"
import sys, json, os
for line in sys.stdin:
    request = json.loads(line)
    n = request["n"]
    print("debug: got", n)
    print(json.dumps({"id": request["id"], "n": n, "pid": os.getpid()}), flush=True)
"#;
        let pool = pool(chatty, 1);
        assert!(call(&pool, 1, 5000).await.unwrap_err().starts_with("not JSON"));
        assert_eq!(pool.idle_count(), 0, "retired");
        assert!(call(&pool, 2, 5000).await.unwrap_err().starts_with("not JSON"), "a fresh process, same mistake");
    }

    #[tokio::test]
    async fn an_answer_without_a_newline_or_too_long_fails() {
        let unfinished =
            pool("import sys; sys.stdin.readline(); sys.stdout.write('{\"id\": 1}'); sys.stdout.flush()", 1);
        assert_eq!(call(&unfinished, 1, 5000).await.unwrap_err(), "exited with status 0");

        let huge = pool("import sys\nfor l in sys.stdin: print('[' + '1,' * 1000000 + '1]', flush=True)", 1);
        let request = b"{}";
        let err = huge.call("ns/p", request, Duration::from_secs(5), 1 << 20).await.unwrap_err();
        assert_eq!(err, "answered more than 1 MiB");

        let missing = Pool::new(vec!["/nonexistent/hook".into()], 1);
        assert!(
            missing
                .call("ns/p", b"{}", Duration::from_secs(1), 1 << 20)
                .await
                .unwrap_err()
                .starts_with("cannot be started")
        );
    }

    #[tokio::test]
    async fn an_answer_must_echo_its_requests_id() {
        // Answers the request numbered 1 with the id of the one before, 2 without one, 3 with a log line
        // of JSON written before its answer, the others rightly.
        let confused = r#"
import sys, json, os, time
for line in sys.stdin:
    request = json.loads(line)
    n, id = request["n"], request["id"]
    if n == 1:
        print(json.dumps({"id": id - 1, "n": n}), flush=True)
    elif n == 2:
        print(json.dumps({"n": n}), flush=True)
    elif n == 3:
        print(json.dumps({"level": "info", "msg": "syncing"}), flush=True)
        time.sleep(0.2)
        print(json.dumps({"id": id, "n": n}), flush=True)
    else:
        print(json.dumps({"id": id, "n": n, "pid": os.getpid()}), flush=True)
"#;
        let pool = pool(confused, 1);
        let first = call(&pool, 0, 5000).await.unwrap();
        assert!(first.get("id").is_none(), "the id is not part of the answer: {first}");
        let wrong = call(&pool, 1, 5000).await.unwrap_err();
        assert!(wrong.starts_with("answered a line for another request (id "), "{wrong}");
        assert_eq!(pool.idle_count(), 0, "retired");
        assert!(call(&pool, 2, 5000).await.unwrap_err().starts_with("answered a line without the request's id"));
        assert!(call(&pool, 3, 5000).await.unwrap_err().starts_with("answered a line without the request's id"));
        // The answer to 3, written late, reaches nobody: 4 has a process of its own.
        let after = call(&pool, 4, 5000).await.unwrap();
        assert_eq!((after["n"].as_u64(), after.get("id")), (Some(4), None));
        assert_ne!(after["pid"], first["pid"]);
    }

    #[test]
    fn the_id_goes_first_in_the_request() {
        assert_eq!(with_id(br#"{"parent":{}}"#, 7), br#"{"id":7,"parent":{}}"#);
        assert_eq!(with_id(b"{}", 7), br#"{"id":7}"#);
    }

    #[tokio::test]
    async fn a_call_waits_for_a_free_process_no_longer_than_its_timeout() {
        let slow = "import sys, time, json\nfor l in sys.stdin:\n    time.sleep(1); print(json.dumps({'id': json.loads(l)['id']}), flush=True)";
        let pool = pool(slow, 1);
        let (first, second) = tokio::join!(call(&pool, 1, 2000), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            call(&pool, 2, 300).await
        });
        assert!(first.is_ok());
        assert_eq!(second.unwrap_err(), "had no free process within 300ms");
    }

    #[tokio::test]
    async fn a_process_that_logs_invalid_bytes_keeps_answering() {
        let noisy = r#"
import sys, json, os
for line in sys.stdin:
    request = json.loads(line)
    sys.stderr.buffer.write(b"bad \xff byte\n" + b"x" * 100000 + b"\n")
    sys.stderr.buffer.flush()
    print(json.dumps({"id": request["id"], "n": request["n"], "pid": os.getpid()}), flush=True)
"#;
        let pool = pool(noisy, 1);
        let first = call(&pool, 1, 10_000).await.unwrap();
        let second = call(&pool, 2, 10_000).await.unwrap();
        assert_eq!(first["pid"], second["pid"], "the same process, alive after writing invalid bytes");
    }
}
