//! The unsafe corner of the test kit: tying children to the test process, signals, free space.

use parking_lot::Mutex;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;

use crate::TestkitError;

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` from the one long-lived spawner thread, with `PR_SET_PDEATHSIG = SIGKILL`:
/// the child dies when that thread does, which is when the test process exits.
pub(crate) fn spawn_tied_to_test_process(mut cmd: Command) -> Result<Child, TestkitError> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("testkit-spawner".to_owned())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The channel lives in a static, so this thread runs until the process exits.
            })
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("testkit: cannot start spawner thread: {e}"));
        Mutex::new(tx)
    });
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("test process already exited"));
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("testkit spawner thread is gone"))?;
    Ok(reply_rx.recv().map_err(|_| std::io::Error::other("testkit spawner thread is gone"))??)
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Signal {
    Stop,
    Cont,
    Term,
}

pub(crate) fn signal(child: &Child, sig: Signal) -> Result<(), TestkitError> {
    let sig = match sig {
        Signal::Stop => libc::SIGSTOP,
        Signal::Cont => libc::SIGCONT,
        Signal::Term => libc::SIGTERM,
    };
    let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
    // SAFETY: kill(2) with a pid we spawned and have not reaped.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// SIGSTOP, then waits (up to 2 s) until every thread of the process is stopped: kill(2)
/// returns once the signal is queued, and on a loaded machine a thread may still finish a
/// request after that, which a test pausing a server must not see.
pub(crate) fn stop(child: &Child) -> Result<(), TestkitError> {
    signal(child, Signal::Stop)?;
    let tasks = std::path::PathBuf::from(format!("/proc/{}/task", child.id()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let Ok(dir) = std::fs::read_dir(&tasks) else { return Ok(()) };
        let running = dir.flatten().any(|t| {
            // The state follows the command name in parentheses: `pid (comm) S ...`.
            std::fs::read_to_string(t.path().join("stat")).ok().is_some_and(|stat| {
                stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
                    != Some('T')
            })
        });
        if !running {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(())
}

/// The bytes an unprivileged process may still write on the file system holding `path`.
pub(crate) fn available_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is written by statvfs(3) before it is read.
    if unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// At exit (after `main` returns, so after every test), SIGKILLs `pid`, reaps it and removes
/// `dir`: for the shared servers, which live in statics and are never dropped.
pub(crate) fn kill_and_remove_at_exit(pid: u32, dir: std::path::PathBuf) {
    static AT_EXIT: Mutex<Vec<(u32, std::path::PathBuf)>> = Mutex::new(Vec::new());
    static REGISTER: std::sync::Once = std::sync::Once::new();
    extern "C" fn run() {
        let servers = std::mem::take(&mut *AT_EXIT.lock());
        for (pid, dir) in servers {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                // SAFETY: kill(2) and waitpid(2) on a child this process spawned and has not
                // reaped (its `Child` lives in a static, never dropped); a null status is allowed.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    AT_EXIT.lock().push((pid, dir));
    // SAFETY: `run` is an `extern "C" fn()` that does not unwind (no panicking calls).
    REGISTER.call_once(|| unsafe {
        libc::atexit(run);
    });
}
