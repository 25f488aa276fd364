//! The guard between `tenure run` and its command.
//!
//! `tenure run` starts `tenure __guard --parent <pid> -- COMMAND…` as the leader of a new
//! process group, and the guard starts the command in that group. Two things follow:
//!
//! * `tenure run` stops the command by signalling the whole group, so the command's own
//!   children (a shell script's pipeline) are stopped with it;
//! * if `tenure run` itself dies (SIGKILL, a crash), nobody is left to confirm the lease, so
//!   the guard, which checks every 50 ms that its parent is still the same process, kills the
//!   group at once. Without it, the command would run on, unfenced, while another contender
//!   takes the lease over.
//!
//! The guard exits with the command's exit code, or 128 + the signal that ended it.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::getpgrp;
use tokio::signal::unix::{SignalKind, signal};

use crate::run::exit_code;

/// Runs `command` until it exits; kills its process group if `parent` dies first.
pub async fn guard(parent: u32, command: Vec<OsString>) -> anyhow::Result<ExitCode> {
    // SIGTERM, SIGINT and SIGHUP sent to the group reach the command too; the guard itself
    // outlives them to report how the command ended.
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;

    let Some((program, args)) = command.split_first() else {
        anyhow::bail!("no command given");
    };
    let mut child = match tokio::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(error) => {
            let code = if error.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("tenure: cannot run {}: {error}", program.to_string_lossy());
            return Ok(ExitCode::from(code));
        }
    };

    let mut orphan_check = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            status = child.wait() => return Ok(ExitCode::from(exit_code(status?))),
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
            _ = hangup.recv() => {}
            _ = orphan_check.tick() => {
                if std::os::unix::process::parent_id() != parent {
                    // `tenure run` is gone: the lease is no longer confirmed by anybody.
                    let _ = killpg(getpgrp(), Signal::SIGKILL);
                }
            }
        }
    }
}
