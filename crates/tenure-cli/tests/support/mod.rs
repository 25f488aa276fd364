//! What the `tenure run` tests read of processes in `/proc`.

#![allow(dead_code, clippy::unwrap_used)]

/// The fields of `/proc/<pid>/stat` after the command name (state, ppid, …), if it exists.
fn stat_after_name(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses: cut at the last ')'.
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

/// Whether `pid` runs (a zombie, killed but not yet reaped, does not).
pub fn alive(pid: i32) -> bool {
    stat_after_name(pid)
        .and_then(|fields| fields.first().map(|state| state != "Z" && state != "X"))
        .unwrap_or(false)
}

/// The children of `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|child| {
            stat_after_name(*child).and_then(|fields| fields.get(1)?.parse::<i32>().ok())
                == Some(pid)
        })
        .collect()
}
