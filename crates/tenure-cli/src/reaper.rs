//! The reaper: the parent of the command, and the one process whose life bounds the whole
//! command tree's.
//!
//! [The guard](crate::guard) starts `tenure __reaper` as the first process of a new PID
//! namespace (its PID 1), or, where no namespace can be had, as a child subreaper. It starts
//! the command, reaps every process of the tree, forwards SIGTERM, SIGINT and SIGHUP to the
//! whole tree (`kill(-1)` inside the namespace: a descendant that left the process group with
//! `setsid` gets it too), and exits once no process of the tree is left.
//!
//! * **PID namespace**: when PID 1 of a namespace dies, the kernel kills every other process
//!   in it. The reaper's parent-death signal is SIGKILL, so the guard's death (or the
//!   reaper's own) ends the tree, and nothing can leave it.
//! * **Subreaper** (no namespace): orphans of the tree are re-parented to the reaper, which
//!   finds the tree in `/proc`. Its parent-death signal is SIGUSR1: kill the tree, reap it,
//!   exit. If the reaper itself is SIGKILLed, its orphans go to the guard or to `tenure run`,
//!   both subreapers, which kill them; if every Tenure process is killed at once, a
//!   descendant that left the process group survives. That is why the namespace is the
//!   default.
//!
//! When the command exits, what is left of its tree gets SIGTERM, and SIGKILL after the
//! grace period. The reaper exits with the command's code (128 + the signal that ended it).

use std::ffi::OsString;
use std::os::fd::AsFd as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use crate::tree;

/// How the reaper holds the tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Hold {
    /// PID 1 of a PID namespace of its own.
    Namespace,
    /// A child subreaper, without a namespace.
    Subreaper,
}

/// The exit code when the reaper cannot set up, or finds its parent already gone.
pub const SETUP_FAILED: u8 = 126;

/// What `tenure __reaper` is asked to do (by the guard only).
#[derive(clap::Args, Debug)]
pub struct ReaperArgs {
    /// The guard's pid as `/proc` shows it: if it is gone before the parent-death signal is
    /// armed, the reaper starts nothing.
    #[arg(long)]
    parent: i32,
    #[arg(long, value_enum)]
    hold: Hold,
    /// How long what is left of the tree gets between SIGTERM and SIGKILL once the command
    /// has exited.
    #[arg(long, value_parser = crate::duration::parse_duration)]
    grace: Duration,
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// Runs the reaper to the end; synchronous (it needs no runtime, and forks nothing but the
/// command).
pub fn reaper(args: ReaperArgs) -> ExitCode {
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            crate::say(format_args!("cannot supervise the command: {message}"));
            ExitCode::from(SETUP_FAILED)
        }
    }
}

fn run(args: &ReaperArgs) -> Result<u8, String> {
    let on_parent_death = match args.hold {
        Hold::Namespace => Signal::SIGKILL,
        Hold::Subreaper => Signal::SIGUSR1,
    };
    prctl::set_pdeathsig(on_parent_death).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if tree::own_proc_pid().and_then(tree::parent_of) != Some(args.parent) {
        return Err("the guard exited before the command could start".to_owned());
    }
    if args.hold == Hold::Namespace && nix::unistd::getpid().as_raw() != 1 {
        // kill(-1) outside a namespace of its own would reach every process of the user.
        return Err("not the first process of a new PID namespace".to_owned());
    }
    if args.hold == Hold::Subreaper {
        prctl::set_child_subreaper(true).map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;
    }
    let mut mask = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        mask.add(signal);
    }
    mask.thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;

    let Some((program, rest)) = args.command.split_first() else {
        return Err("no command given".to_owned());
    };
    // std resets the signal mask and SIGPIPE in the child before it runs the command.
    let command = match std::process::Command::new(program).args(rest).spawn() {
        Ok(child) => i32::try_from(child.id()).unwrap_or(i32::MAX),
        Err(error) => {
            crate::say(format_args!(
                "cannot run {}: {error}",
                program.to_string_lossy()
            ));
            return Ok(if error.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };

    let tree = Tree { hold: args.hold };
    let mut status: Option<u8> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killing = false;
    loop {
        let (reaped, left) = tree::reap_exited();
        for exit in reaped {
            match exit {
                WaitStatus::Exited(pid, code) if pid.as_raw() == command => {
                    status = Some(u8::try_from(code & 0xff).unwrap_or(1));
                }
                WaitStatus::Signaled(pid, signal, _) if pid.as_raw() == command => {
                    status = Some(128 + signal_number(signal));
                }
                _ => {}
            }
        }
        if !left {
            return Ok(status.unwrap_or(1));
        }
        if status.is_some() && kill_at.is_none() {
            // The command is gone; what it left behind is stopped as it would have been.
            tree.signal(Signal::SIGTERM);
            kill_at = Some(Instant::now() + args.grace);
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            killing = true;
        }
        if killing {
            tree.signal(Signal::SIGKILL);
        }
        let wait = if killing {
            Some(Duration::from_millis(5))
        } else {
            kill_at.map(|at| at.saturating_duration_since(Instant::now()))
        };
        let timeout = wait.map_or(PollTimeout::NONE, |w| {
            PollTimeout::try_from(w.max(Duration::from_millis(1))).unwrap_or(PollTimeout::MAX)
        });
        let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, timeout);
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0)) {
                Ok(Signal::SIGUSR1) => killing = true,
                Ok(signal @ (Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP)) => {
                    tree.signal(signal);
                }
                _ => {} // SIGCHLD: reaped at the top of the loop
            }
        }
    }
}

/// The command's tree, as the reaper holds it.
struct Tree {
    hold: Hold,
}

impl Tree {
    /// Sends `signal` to every process of the tree but the reaper.
    fn signal(&self, signal: Signal) {
        match self.hold {
            // Inside the namespace, -1 is every process of it but PID 1.
            Hold::Namespace => {
                let _ = kill(Pid::from_raw(-1), signal);
            }
            Hold::Subreaper => tree::signal_descendants(signal),
        }
    }
}

pub fn signal_number(signal: Signal) -> u8 {
    u8::try_from(signal as i32).unwrap_or(127)
}
