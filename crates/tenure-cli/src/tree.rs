//! A process's descendants, read from `/proc`, and the kill-and-reap loop that ends them.
//!
//! Used where no PID namespace holds the command's tree: by [the reaper](crate::reaper) in
//! subreaper mode, and by `tenure run` for whatever it adopted as a subreaper after its
//! guard died. A subreaper receives every orphan of its subtree, so "no child left" (`ECHILD`)
//! means "no descendant left".

use std::collections::HashMap;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The parent of every process visible in `/proc`.
fn parents() -> HashMap<i32, i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect()
}

/// The parent of `pid` as `/proc` shows it (in `/proc`'s PID namespace), if it exists.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses: cut at the last ')'.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// This process's pid as `/proc` shows it: the host's pid inside a PID namespace whose
/// `/proc` was not remounted.
pub fn own_proc_pid() -> Option<i32> {
    std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()
}

/// Every descendant of `root`, the deepest first: killed in this order, a process is killed
/// after those below it, so that a killer that dies half-way (a guard killed while it kills)
/// leaves the reaper, which cleans up on its parent-death signal, rather than its orphans.
pub fn descendants(root: i32) -> Vec<i32> {
    let parents = parents();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| **p == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    found.reverse();
    found
}

/// Sends `signal` to every descendant of this process.
pub fn signal_descendants(signal: Signal) {
    let Some(me) = own_proc_pid() else { return };
    for pid in descendants(me) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// Reaps every child that has exited; returns the statuses reaped and whether any child is
/// left.
pub fn reap_exited() -> (Vec<WaitStatus>, bool) {
    let mut reaped = Vec::new();
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return (reaped, true),
            Ok(status) => reaped.push(status),
            Err(Errno::EINTR) => {}
            Err(_) => return (reaped, false), // ECHILD: nobody left
        }
    }
}

/// Kills every descendant of this process and reaps them until none is left: orphans that a
/// subreaper adopts while this runs are killed on the next round. Blocking.
pub fn kill_and_reap_all() {
    loop {
        signal_descendants(Signal::SIGKILL);
        let (_, left) = reap_exited();
        if !left {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_come_deepest_first() {
        let Ok(mut shell) = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
        else {
            panic!("cannot start sh");
        };
        let shell_pid = i32::try_from(shell.id()).unwrap_or(0);
        let me = own_proc_pid().unwrap_or(0);
        let began = std::time::Instant::now();
        let found = loop {
            let found = descendants(me);
            let has_grandchild = found.iter().any(|pid| parent_of(*pid) == Some(shell_pid));
            if has_grandchild || began.elapsed() > Duration::from_secs(5) {
                break found;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let shell_at = found.iter().position(|pid| *pid == shell_pid);
        let sleep_at = found
            .iter()
            .position(|pid| parent_of(*pid) == Some(shell_pid));
        if let Some(at) = sleep_at {
            let _ = kill(Pid::from_raw(found[at]), Signal::SIGKILL);
        }
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(
            matches!((sleep_at, shell_at), (Some(s), Some(p)) if s < p),
            "{found:?}"
        );
    }
}
