//! `tenure leases`, `tenure ddl`, `tenure schema`: looking at and preparing a database.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use tenure_ports::{Contender, EventStorage, Lease, LeaseSnapshot, Timestamp};
use tenure_postgres::{SchemaMode, redact};

use crate::backend::open_postgres;
use crate::duration::human;

/// Prints every lease with its liveness, judged on the storage's clock (`snapshot.now`), and
/// its live contenders.
pub async fn leases(url: &str, prefix: &str, json: bool) -> anyhow::Result<()> {
    let storage = open_postgres(url, prefix, SchemaMode::Validate, 2).await?;
    let snapshot = storage.get_leases().await.context("reading the leases")?;
    let mut contenders = Vec::with_capacity(snapshot.leases.len());
    for lease in &snapshot.leases {
        contenders.push(
            storage
                .get_lease_contenders(lease.lease_name.as_str())
                .await
                .with_context(|| format!("reading the contenders of {}", lease.lease_name))?,
        );
    }
    let _ = storage.close().await;
    let text = if json {
        let mut text = serde_json::to_string_pretty(&LeasesJson::new(&snapshot, &contenders))?;
        text.push('\n');
        text
    } else {
        table(&snapshot, &contenders, &redact(url))
    };
    write_stdout(&text)
}

/// Prints the DDL of the lease tables for `prefix`.
pub fn ddl(prefix: &str) -> anyhow::Result<()> {
    let sql = tenure_postgres::ddl(prefix).context("invalid --prefix")?;
    write_stdout(&sql)
}

/// Applies `mode` (ensure or validate) to the lease tables, and says so.
pub async fn schema(url: &str, prefix: &str, mode: SchemaMode) -> anyhow::Result<()> {
    let storage = open_postgres(url, prefix, mode, 1).await?;
    let _ = storage.close().await;
    let done = match mode {
        SchemaMode::Ensure => "are in place",
        _ => "are valid",
    };
    write_stdout(&format!(
        "the lease tables {prefix}leases and {prefix}lease_contenders {done} at {}\n",
        redact(url)
    ))
}

fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // `tenure leases | head` closing the pipe is not an error.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(error).context("writing to standard output"),
    }
}

fn table(snapshot: &LeaseSnapshot, contenders: &[Vec<Contender>], target: &str) -> String {
    let mut text = String::new();
    if snapshot.leases.is_empty() {
        let _ = writeln!(text, "no leases at {target}");
        return text;
    }
    let rows: Vec<[String; 6]> = snapshot
        .leases
        .iter()
        .zip(contenders)
        .map(|(lease, contenders)| {
            [
                printable(lease.lease_name.as_str()),
                printable(lease.owner.as_str()),
                lease.fencing_token.to_string(),
                liveness(lease, snapshot.now),
                human(lease.ttl),
                if contenders.is_empty() {
                    "-".to_owned()
                } else {
                    contenders
                        .iter()
                        .map(|c| {
                            format!("{} (priority {})", printable(c.owner.as_str()), c.priority)
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ]
        })
        .collect();
    let header = [
        "LEASE",
        "HOLDER",
        "TOKEN",
        "STATE",
        "TTL",
        "LIVE CONTENDERS",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; 6]| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<width$}  ");
            }
        }
        let _ = writeln!(text, "{}", out.trim_end());
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
    let _ = writeln!(
        text,
        "\n(liveness judged on the database's clock: {})",
        snapshot.now
    );
    text
}

/// `text` for a terminal: control and bidirectional-formatting characters (which could
/// reorder or hide what follows them on the line) escaped as `\u{…}`.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// `live, 12.3s left` or `expired 4s ago` (`released` leases look expired: they are).
fn liveness(lease: &Lease, now: Timestamp) -> String {
    let expires = lease.expires_at();
    if lease.is_live_at(now) {
        format!(
            "live, {} left",
            short(expires.saturating_duration_since(now))
        )
    } else {
        format!(
            "expired {} ago",
            short(now.saturating_duration_since(expires))
        )
    }
}

fn short(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

#[derive(Serialize)]
struct LeasesJson {
    /// The database's clock when the snapshot was taken.
    now: String,
    leases: Vec<LeaseJson>,
}

#[derive(Serialize)]
struct LeaseJson {
    lease_name: String,
    owner: String,
    priority: i64,
    fencing_token: u64,
    acquired_at: String,
    heartbeat_at: String,
    expires_at: String,
    ttl_ms: u128,
    live: bool,
    contenders: Vec<ContenderJson>,
}

#[derive(Serialize)]
struct ContenderJson {
    owner: String,
    priority: i64,
    last_seen: String,
    ttl_ms: u128,
}

impl LeasesJson {
    fn new(snapshot: &LeaseSnapshot, contenders: &[Vec<Contender>]) -> Self {
        LeasesJson {
            now: snapshot.now.to_string(),
            leases: snapshot
                .leases
                .iter()
                .zip(contenders)
                .map(|(lease, contenders)| LeaseJson {
                    lease_name: lease.lease_name.to_string(),
                    owner: lease.owner.to_string(),
                    priority: lease.priority,
                    fencing_token: lease.fencing_token.get(),
                    acquired_at: lease.acquired_at.to_string(),
                    heartbeat_at: lease.heartbeat_at.to_string(),
                    expires_at: lease.expires_at().to_string(),
                    ttl_ms: lease.ttl.as_millis(),
                    live: lease.is_live_at(snapshot.now),
                    contenders: contenders
                        .iter()
                        .map(|c| ContenderJson {
                            owner: c.owner.to_string(),
                            priority: c.priority,
                            last_seen: c.last_seen.to_string(),
                            ttl_ms: c.ttl.as_millis(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn bidirectional_and_control_characters_are_escaped() {
        assert_eq!(printable("job-1"), "job-1");
        assert_eq!(printable("évènement"), "évènement");
        assert_eq!(printable("pod\u{202e}1-dab"), "pod\\u{202e}1-dab");
        assert_eq!(printable("a\u{2066}b\u{200f}"), "a\\u{2066}b\\u{200f}");
        assert_eq!(printable("x\u{7f}"), "x\\u{007f}");
    }
}
