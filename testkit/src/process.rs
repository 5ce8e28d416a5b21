//! Child processes the tests start (servers, Sentinels, redis-cli, helper processes),
//! tied to the test process so that none outlives it: each is started with
//! `PR_SET_PDEATHSIG` = SIGKILL, so a test process that dies (killed, aborted, a test
//! harness's timeout) takes its children along, and `Guarded` kills and reaps one when
//! dropped, including while a panicking test unwinds.
//!
//! The kernel sends the death signal when the *thread* that forked the child ends, not
//! the process: tests start servers from short-lived threads (every test is one, and
//! some start servers from threads of their own). So every child is forked by one
//! thread that lives as long as the process (`spawner`).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

type Request = (Command, Sender<io::Result<Child>>);

/// Starts `command` as a child that is killed when this process ends. The command is
/// handed to the spawner thread: `command` is left as an empty `true` command, so a
/// builder chain can end in `spawn(Command::new(…).arg(…))`.
pub fn spawn(command: &mut Command) -> io::Result<Child> {
    let mut command = std::mem::replace(command, Command::new("true"));
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only makes two
    // async-signal-safe system calls (prctl, getppid); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died between the fork and the prctl: no signal will come.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::other("the test process has ended"));
            }
            Ok(())
        });
    }
    let (reply, answer) = channel();
    spawner()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((command, reply))
        .map_err(|_| io::Error::other("the spawner thread has ended"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread has ended"))?
}

/// The one thread that forks every child, alive until the process exits.
fn spawner() -> &'static Mutex<Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (requests, incoming) = channel::<Request>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the spawner thread");
        Mutex::new(requests)
    })
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Guarded(pub Child);

impl Guarded {
    /// `spawn`, guarded.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        spawn(command).map(Guarded)
    }
}

impl std::ops::Deref for Guarded {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn alive(pid: u32) -> bool {
        // A reaped process has no /proc entry; a zombie would still have one.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    }

    #[test]
    fn a_guarded_child_is_killed_and_reaped_on_drop_even_while_a_test_unwinds() {
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let child = Guarded::spawn(&mut sleep).unwrap();
        let pid = child.id();
        assert!(alive(pid));
        let unwound = std::panic::catch_unwind(move || {
            let _child = child;
            panic!("a failing test");
        });
        assert!(unwound.is_err());
        assert!(!alive(pid), "the child outlived its guard");
    }

    #[test]
    fn a_child_started_from_a_thread_that_ends_lives_on_until_the_process_ends() {
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let child = std::thread::spawn(move || Guarded::spawn(&mut sleep).unwrap())
            .join()
            .unwrap();
        // The death signal follows the forking thread: had this short-lived thread
        // forked it, the child would be dead already.
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            assert!(
                alive(child.id()),
                "killed with the thread that asked for it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
