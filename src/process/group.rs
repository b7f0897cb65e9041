//! A hook's process leading a process group of its own, and the group ended with it.
//!
//! A group is signalled by its id, which is its leader's pid, and a pid is free to be used again once
//! the leader has been reaped and its group is empty. So the group is signalled only while its leader is
//! known not to have been reaped: its exit is awaited on a pidfd (readable at exit, reaping nothing),
//! the group killed, and only then the leader reaped. Where the kernel has no pidfd (before 5.3), the
//! leader is reaped without the group being signalled after it: stragglers that closed their output
//! live on there, rather than a stranger's group being killed.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};

/// A running hook process and its group.
pub struct Group {
    child: Child,
    /// The group's id (the leader's pid), while the leader is unreaped.
    id: Option<u32>,
    /// Readable once the leader has exited.
    exit: Option<AsyncFd<OwnedFd>>,
}

impl Group {
    /// Starts `command` as the leader of a new process group. Its stdio is whatever `command` says.
    pub fn spawn(command: &mut Command) -> io::Result<Group> {
        // A group of its own, so that everything it starts can be ended with it, and so that a Ctrl-C
        // meant for samplectl does not cut a hook short before samplectl decides to stop.
        let child = command.process_group(0).kill_on_drop(true).spawn()?;
        let id = child.id();
        let exit = id.and_then(pidfd);
        Ok(Group { child, id, exit })
    }

    /// The leader, for its stdio.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the leader to exit, kills whatever is left of its group, reaps the leader and gives its
    /// status. Cancel-safe: dropped before the end, the group is killed by `Drop`.
    pub async fn end(&mut self) -> io::Result<ExitStatus> {
        if let Some(exit) = &self.exit {
            // Readable at exit; an error (a runtime shutting down) falls through to the reaping below,
            // which waits all the same.
            let _ = exit.readable().await.map(|mut ready| ready.retain_ready());
            self.kill();
        }
        let status = self.child.wait().await;
        self.id = None;
        status
    }

    /// Whether the leader has exited, without waiting. An exited leader is left unreaped where a pidfd
    /// can tell, so that the group can still be killed safely.
    pub fn has_exited(&mut self) -> bool {
        match &self.exit {
            Some(exit) => poll_readable(exit),
            None => match self.child.try_wait() {
                Ok(None) => false,
                _ => {
                    self.id = None;
                    true
                }
            },
        }
    }

    /// SIGKILL to the whole group, if its leader is still unreaped (so its id is still its own).
    pub fn kill(&mut self) {
        if let Some(id) = self.id {
            // SAFETY: kill(2) with a negative pid signals the process group `id` leads; it touches no
            // memory. The leader is unreaped, so the id cannot belong to anyone else.
            unsafe { libc::kill(-(id as i32), libc::SIGKILL) };
        }
    }
}

impl Drop for Group {
    /// A call that ends early (its deadline, a stop, a lost Lease) drops its group: everything in it is
    /// killed before the leader is let go (tokio then reaps it in the background).
    fn drop(&mut self) {
        self.kill();
    }
}

/// A pidfd for `pid`, registered with the runtime; None where the kernel has none.
fn pidfd(pid: u32) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, libc::PIDFD_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor pidfd_open just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: the descriptor is owned by the AsyncFd from here on and closed only when it is dropped,
    // so it stays valid for as long as it is registered.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
}

/// Whether a pidfd is readable now (its process has exited), asked of poll(2) without waiting.
fn poll_readable(fd: &AsyncFd<OwnedFd>) -> bool {
    use std::os::fd::AsRawFd;
    let mut entry = libc::pollfd { fd: fd.get_ref().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, valid for the call; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&mut entry, 1, 0) };
    ready > 0 && entry.revents & libc::POLLIN != 0
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;
    use std::time::Duration;

    use super::*;

    fn alive(pid: i32) -> bool {
        // A zombie counts as gone: it has exited.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
            Err(_) => false,
        }
    }

    /// A shell that starts a background sleep, says its pid, then runs `then`.
    async fn straggler(then: &str) -> (Group, i32) {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut command = Command::new("sh");
        let script = format!("sleep 30 >/dev/null 2>&1 & echo $! > {}; {then}", pidfile.display());
        command.arg("-c").arg(script).stdout(Stdio::null());
        let group = Group::spawn(&mut command).unwrap();
        let mut pid = String::new();
        for _ in 0..3000 {
            pid = std::fs::read_to_string(&pidfile).unwrap_or_default();
            if pid.ends_with('\n') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (group, pid.trim().parse().unwrap())
    }

    async fn gone(pid: i32) -> bool {
        for _ in 0..3000 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_call_that_ends_ends_what_its_hook_left_running() {
        let (mut group, left) = straggler("true").await;
        let status = group.end().await.unwrap();
        assert!(status.success());
        assert!(gone(left).await, "the background sleep {left} was killed with its group");
    }

    #[tokio::test]
    async fn a_call_dropped_early_ends_its_whole_group() {
        let (group, left) = straggler("sleep 30").await;
        drop(group);
        assert!(gone(left).await, "the background sleep {left} was killed with its group");
    }

    #[tokio::test]
    async fn an_exit_is_seen_without_reaping() {
        let mut group = Group::spawn(Command::new("true").stdout(Stdio::null())).unwrap();
        let pid = group.child().id().unwrap() as i32;
        for _ in 0..3000 {
            if group.has_exited() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(group.has_exited());
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "still a zombie, its id still taken");
        assert!(group.end().await.unwrap().success());
    }
}
