//! samplectl as the first process of its container, as the image runs it (`FROM scratch`, no init).
//!
//! A process whose parent ends is given to PID 1, and only PID 1 can reap it: hooks' stragglers
//! (killed with their group, or a daemon a hook set loose) would stay zombies for the container's life,
//! and tokio reaps only the children it started. So when samplectl finds itself PID 1, it splits in two
//! before anything else runs, as tini does: the parent only reaps whatever is given to it and passes
//! signals on to the child, which is samplectl proper; when the child exits, the parent exits with its
//! status.

use std::mem::MaybeUninit;

/// Splits as above if this process is PID 1; returns in the child (or if it cannot fork), never in the
/// parent. Called first in `main`, while the process has one thread.
pub fn reap_if_first() {
    if std::process::id() != 1 {
        return;
    }
    // SAFETY: signal sets are plain data filled by libc before use; fork(2) is called while the process
    // has a single thread, and the parent then only calls async-signal-safe functions.
    unsafe {
        let mut caught = empty_set();
        libc::sigfillset(&mut caught);
        // Signals that mean this process itself is broken keep their default action.
        for signal in [
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::sigdelset(&mut caught, signal);
        }
        // Blocked before the fork, so that no signal meant for the child falls between the two; PID 1
        // loses signals it neither blocks nor handles.
        let mut before = empty_set();
        libc::pthread_sigmask(libc::SIG_SETMASK, &caught, &mut before);
        match libc::fork() {
            -1 => {
                libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                eprintln!("warning: running as PID 1 without a reaper: fork failed");
            }
            0 => {
                libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            }
            child => reap(child, &caught),
        }
    }
}

fn empty_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the whole set.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        set.assume_init()
    }
}

/// The parent's loop: pass each signal on to `child`, reap every process that has ended, and exit as
/// `child` exited once it has.
fn reap(child: libc::pid_t, caught: &libc::sigset_t) -> ! {
    let second = libc::timespec { tv_sec: 1, tv_nsec: 0 };
    loop {
        // SAFETY: sigtimedwait, kill and waitpid take plain values and pointers valid for the call.
        unsafe {
            let signal = libc::sigtimedwait(caught, std::ptr::null_mut(), &second);
            if signal > 0 && signal != libc::SIGCHLD {
                libc::kill(child, signal);
            }
            loop {
                let mut status = 0;
                let ended = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if ended <= 0 {
                    break;
                }
                if ended == child {
                    let code = match libc::WIFEXITED(status) {
                        true => libc::WEXITSTATUS(status),
                        false => 128 + libc::WTERMSIG(status),
                    };
                    libc::_exit(code);
                }
            }
        }
    }
}
