//! The guard between `tenure run` and its command: it holds the lease's deadline itself.
//!
//! `tenure run` starts `tenure __guard` as the leader of a new process group, connected to it
//! by a Unix socket, and tells it the leadership deadline at start and after every confirmed
//! renewal (`deadline <ns>`: an instant of `CLOCK_MONOTONIC`, which both processes read), and
//! `stop` when the command must stop. The guard starts [the reaper](crate::reaper), in a new
//! PID namespace when it can, and the reaper starts the command. The guard then ends the
//! command's whole tree on its own, whatever happens to `tenure run`:
//!
//! * no fresh deadline arrives (`tenure run` is stopped, starved or hung): SIGTERM to the
//!   tree when less than half the grace period is left, and the tree killed at the deadline;
//! * the socket closes (`tenure run` died): the tree is killed at once;
//! * `stop`: SIGTERM to the tree, killed after the grace period.
//!
//! "Killed" means SIGKILL to the reaper, PID 1 of the namespace, so that the kernel kills
//! every process in it; without a namespace, SIGKILL to every descendant, over and over until
//! none is left. The guard exits once the tree is gone, with the command's code.
//!
//! The guard speaks only when it acts on its own (the runner is silent); when `tenure run`
//! asked for a stop, it has said why already.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::reaper::{Hold, SETUP_FAILED};
use crate::run::{exit_code, pid_of, sleep_until_opt};
use crate::{say, tree};

/// How the command's tree is held.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Contain {
    /// A PID namespace if one can be created, else a subreaper (with a warning).
    Auto,
    /// A PID namespace, or the command does not start.
    PidNamespace,
    /// A subreaper only: the command sees the host's pids.
    Subreaper,
}

/// What `tenure __guard` is asked to do (by `tenure run` only).
#[derive(clap::Args, Debug)]
pub struct GuardArgs {
    /// The socket `tenure run` listens on.
    #[arg(long)]
    control: std::path::PathBuf,
    /// The first deadline, in nanoseconds of `CLOCK_MONOTONIC`.
    #[arg(long)]
    deadline: u64,
    #[arg(long, value_parser = crate::duration::parse_duration)]
    grace: Duration,
    #[arg(long, value_enum)]
    contain: Contain,
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// Nanoseconds of `CLOCK_MONOTONIC`, the clock std's and tokio's `Instant` read on Linux,
/// and the same in every process of the machine.
pub fn monotonic_now() -> Duration {
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(Duration::ZERO, Duration::from)
}

/// `instant` as nanoseconds of `CLOCK_MONOTONIC`, never later than it really is.
pub fn to_monotonic(instant: Instant) -> u64 {
    let clock = monotonic_now(); // read first: the remaining time below is then smaller
    let at = clock + instant.saturating_duration_since(Instant::now());
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

/// `nanos` of `CLOCK_MONOTONIC` as an `Instant`, never later than it really is.
fn from_monotonic(nanos: u64) -> Instant {
    let now = Instant::now(); // read first: the instant below is then earlier
    now + Duration::from_nanos(nanos).saturating_sub(monotonic_now())
}

/// Sets up the tree's containment (before any thread exists), then supervises.
pub fn main(args: GuardArgs) -> ExitCode {
    let hold = match contain(args.contain) {
        Ok(hold) => hold,
        Err(message) => {
            say(format_args!("cannot start the command: {message}"));
            return ExitCode::from(SETUP_FAILED);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            say(format_args!("cannot start the guard: {error}"));
            return ExitCode::from(SETUP_FAILED);
        }
    };
    match runtime.block_on(guard(args, hold)) {
        Ok(code) => code,
        Err(error) => {
            say(format_args!("guard: {error:#}"));
            ExitCode::from(SETUP_FAILED)
        }
    }
}

/// A new PID namespace for the guard's children, or a subreaper, as `mode` asks.
fn contain(mode: Contain) -> Result<Hold, String> {
    if mode != Contain::Subreaper {
        match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID) {
            Ok(()) => return Ok(Hold::Namespace),
            Err(error) if mode == Contain::PidNamespace => {
                return Err(format!("no PID namespace can be created ({error})"));
            }
            Err(error) => say(format_args!(
                "no PID namespace for the command ({error}); falling back to a subreaper: a \
                 descendant that leaves the command's process group survives if every tenure \
                 process is killed at once"
            )),
        }
    }
    // The guard adopts the tree's orphans if the reaper dies.
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;
    Ok(Hold::Subreaper)
}

async fn guard(args: GuardArgs, hold: Hold) -> anyhow::Result<ExitCode> {
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let control = UnixStream::connect(&args.control)
        .await
        .context("connecting to tenure run")?;
    let exe = std::env::current_exe().context("finding the tenure executable")?;
    let hold_name = match hold {
        Hold::Namespace => "namespace",
        Hold::Subreaper => "subreaper",
    };
    let mut reaper = tokio::process::Command::new(exe)
        .arg("__reaper")
        .args(["--parent", &std::process::id().to_string()])
        .args(["--hold", hold_name])
        .args(["--grace", &format!("{}ms", args.grace.as_millis())])
        .arg("--")
        .args(&args.command)
        .spawn()
        .context("starting the command")?;
    let reaper_pid = pid_of(&reaper).context("the reaper has no pid")?;

    let mut lines = BufReader::new(control).lines();
    let mut watch = Watch {
        deadline: from_monotonic(args.deadline),
        grace: args.grace,
        hold,
        reaper: reaper_pid,
        runner_connected: true,
        told_to_stop: false,
        acting_alone: false,
        terminated: false,
        kill_at: None,
        killing: false,
    };
    loop {
        watch.act();
        tokio::select! {
            status = reaper.wait() => {
                let status = status.context("waiting for the command")?;
                if hold == Hold::Subreaper {
                    // The reaper's orphans, if it was killed, are the guard's now.
                    tokio::task::spawn_blocking(tree::kill_and_reap_all).await?;
                }
                return Ok(ExitCode::from(exit_code(status)));
            }
            line = lines.next_line(), if watch.runner_connected => match line {
                Ok(Some(line)) => watch.hear(&line),
                Ok(None) | Err(_) => {
                    watch.runner_connected = false;
                    say("tenure run is gone: nobody confirms the lease any more; killing the command");
                    watch.killing = true;
                }
            },
            () = sleep_until_opt(watch.wake()) => {}
            _ = term.recv() => watch.stop(),
            _ = interrupt.recv() => watch.stop(),
            _ = hangup.recv() => watch.stop(),
        }
    }
}

/// What the guard knows and has done.
struct Watch {
    deadline: Instant,
    grace: Duration,
    hold: Hold,
    reaper: Pid,
    runner_connected: bool,
    told_to_stop: bool,
    /// The guard stopped the command on its own: no confirmation came in time.
    acting_alone: bool,
    terminated: bool,
    kill_at: Option<Instant>,
    killing: bool,
}

impl Watch {
    fn hear(&mut self, line: &str) {
        match line.split_once(' ') {
            Some(("deadline", nanos)) => {
                if let Ok(nanos) = nanos.parse() {
                    self.deadline = from_monotonic(nanos);
                }
            }
            _ if line == "stop" => {
                self.told_to_stop = true;
                self.stop();
            }
            _ => {}
        }
    }

    /// SIGTERM to the tree, and SIGKILL after the grace period.
    fn stop(&mut self) {
        if !self.terminated {
            let _ = kill(self.reaper, Signal::SIGTERM);
            self.terminated = true;
            self.kill_at = Some(Instant::now() + self.grace);
        }
    }

    /// Does what the time asks for.
    fn act(&mut self) {
        let now = Instant::now();
        let term_at = self.deadline.checked_sub(self.grace / 2).unwrap_or(now);
        if !self.terminated && now >= term_at {
            self.acting_alone = true;
            say(format_args!(
                "no confirmation of the lease from tenure run for too long (less than {}ms of \
                 leadership left): stopping the command (SIGTERM)",
                (self.grace / 2).as_millis()
            ));
            self.stop();
        }
        if !self.killing && now >= self.deadline {
            if self.acting_alone && !self.told_to_stop {
                say("leadership can no longer be confirmed: killing the command");
            }
            self.killing = true;
        }
        if !self.killing && self.kill_at.is_some_and(|at| now >= at) {
            self.killing = true;
        }
        if self.killing {
            match self.hold {
                // PID 1 of the namespace: the kernel kills everything else in it.
                Hold::Namespace => {
                    let _ = kill(self.reaper, Signal::SIGKILL);
                }
                Hold::Subreaper => tree::signal_descendants(Signal::SIGKILL),
            }
        }
    }

    /// When to act next if nothing is heard.
    fn wake(&self) -> Option<Instant> {
        if self.killing {
            // Kill again until the reaper is reaped: a subreaper's tree may still fork.
            return Some(Instant::now() + Duration::from_millis(5));
        }
        let term_at = self.deadline.checked_sub(self.grace / 2);
        [
            (!self.terminated).then_some(term_at).flatten(),
            Some(self.deadline),
            self.kill_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
