//! `tenure leases`: every lease, as an operator needs to see it, judged on the database's clock.
//!
//! For each lease: its holder (or last holder) and token; its state (`live`, `released` by its
//! holder, or `expired`), and since when; when the tenure was acquired, then its last heartbeat;
//! the time left before it expires, on the storage's clock; the ttl; and the live contenders
//! other than the holder. `--json` prints the same as one document whose fields are documented
//! in `docs/operations.md` and only ever added to. `--watch` refreshes it in place.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use tenure_ports::{Contender, EventStorage, Lease, LeaseSnapshot, Timestamp};
use tenure_postgres::{PostgresEventStorage, SchemaMode};

use crate::admin::write_stdout;
use crate::backend::{Target, open_postgres_without_wake_ups};
use crate::duration::human;

/// What `tenure leases` was asked for.
pub struct LeasesOptions {
    pub target: Target,
    pub prefix: String,
    pub json: bool,
    /// Refresh every this long until interrupted.
    pub watch: Option<Duration>,
}

/// Prints the leases once, or every `watch` interval until Ctrl-C (or SIGTERM).
pub async fn leases(options: LeasesOptions) -> anyhow::Result<()> {
    // Reads only: `Validate` would demand the write privileges a lease caller needs, and refuse
    // the read-only role a monitoring job runs as. A missing object or privilege is still
    // named, by the first read that needs it.
    let storage =
        open_postgres_without_wake_ups(&options.target, &options.prefix, SchemaMode::None, 2)
            .await?;
    let target = options.target.shown.clone();
    let outcome = match options.watch {
        None => match read(&storage).await {
            Ok(view) => render(&view, options.json, &target).and_then(|text| write_stdout(&text)),
            Err(error) => Err(error),
        },
        Some(every) => watch(&storage, every, options.json, &target).await,
    };
    let _ = storage.close().await;
    outcome
}

/// One reading: the snapshot, and the live contenders of each lease.
struct View {
    snapshot: LeaseSnapshot,
    contenders: Vec<Vec<Contender>>,
}

async fn read(storage: &PostgresEventStorage) -> anyhow::Result<View> {
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
    Ok(View {
        snapshot,
        contenders,
    })
}

fn render(view: &View, json: bool, target: &str) -> anyhow::Result<String> {
    Ok(if json {
        let mut text = serde_json::to_string_pretty(&LeasesJson::new(view))?;
        text.push('\n');
        text
    } else {
        table(view, target)
    })
}

/// Refreshes until interrupted. On a terminal the table is redrawn in place; otherwise each
/// reading follows the last (with `--json`: one compact document per line). A failed reading
/// is shown and retried at the next refresh rather than ending the watch.
async fn watch(
    storage: &PostgresEventStorage,
    every: Duration,
    json: bool,
    target: &str,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("listening for signals")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for signals")?;
    let in_place = std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
        let reading = read(storage).await;
        let text = match (&reading, json) {
            (Ok(view), true) => {
                let mut line = serde_json::to_string(&LeasesJson::new(view))?;
                line.push('\n');
                line
            }
            (Ok(view), false) => table(view, target),
            (Err(error), true) => {
                // Keep stdout one document per line: the failure goes to stderr.
                eprintln!("tenure: {}", crate::backend::scrub(&format!("{error:#}")));
                continue;
            }
            (Err(error), false) => format!(
                "reading the leases at {target} failed: {}; retrying\n",
                crate::backend::scrub(&format!("{error:#}"))
            ),
        };
        let footer = format!("(every {}; Ctrl-C to stop)\n", human(every));
        let frame = match (in_place, json) {
            (true, false) => format!("\x1b[H\x1b[2J{text}{footer}"),
            (false, false) => format!("{text}\n"),
            (_, true) => text,
        };
        write_stdout(&frame)?;
    }
}

/// How the current (or last) tenure stands at the snapshot's `now`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Live,
    Released,
    Expired,
}

impl State {
    fn of(lease: &Lease, now: Timestamp) -> State {
        if lease.is_live_at(now) {
            State::Live
        } else if lease.is_released() {
            State::Released
        } else {
            State::Expired
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            State::Live => "live",
            State::Released => "released",
            State::Expired => "expired",
        }
    }
}

/// When the tenure ended: its release, or its expiry.
fn ended_at(lease: &Lease) -> Timestamp {
    match lease.released_at {
        Some(at) if lease.is_released() => at,
        _ => lease.expires_at(),
    }
}

fn table(view: &View, target: &str) -> String {
    let snapshot = &view.snapshot;
    let now = snapshot.now;
    let mut text = String::new();
    if snapshot.leases.is_empty() {
        let _ = writeln!(text, "no leases at {target}");
        return text;
    }
    let header = [
        "LEASE",
        "HOLDER",
        "TOKEN",
        "STATE",
        "ACQUIRED",
        "HEARTBEAT",
        "TIME LEFT",
        "TTL",
        "LIVE CONTENDERS",
    ];
    let rows: Vec<[String; 9]> = snapshot
        .leases
        .iter()
        .zip(&view.contenders)
        .map(|(lease, contenders)| {
            let state = State::of(lease, now);
            let ago = |at: Timestamp| format!("{} ago", short(now.saturating_duration_since(at)));
            [
                printable(lease.lease_name.as_str()),
                printable(lease.owner.as_str()),
                lease.fencing_token.to_string(),
                match state {
                    State::Live => "live".to_owned(),
                    ended => format!("{} {}", ended.as_str(), ago(ended_at(lease))),
                },
                ago(lease.acquired_at),
                // A release backdates the heartbeat: it is no instant anybody renewed at.
                if state == State::Released {
                    "-".to_owned()
                } else {
                    ago(lease.heartbeat_at)
                },
                if state == State::Live {
                    short(lease.expires_at().saturating_duration_since(now))
                } else {
                    "-".to_owned()
                },
                human(lease.ttl),
                standing_by(lease, state, contenders),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; 9]| {
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
        "\n(judged on the database's clock: {}; times are ages on that clock)",
        now
    );
    text
}

/// The live contenders other than a live holder, with their priorities.
fn standing_by(lease: &Lease, state: State, contenders: &[Contender]) -> String {
    let others: Vec<String> = contenders
        .iter()
        .filter(|c| !(state == State::Live && c.owner == lease.owner))
        .map(|c| format!("{} (priority {})", printable(c.owner.as_str()), c.priority))
        .collect();
    if others.is_empty() {
        "-".to_owned()
    } else {
        others.join(", ")
    }
}

/// `840ms`, `12.3s`, `5m12s`, `2h03m`.
fn short(duration: Duration) -> String {
    let secs = duration.as_secs();
    if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else if secs < 60 {
        format!("{:.1}s", duration.as_secs_f64())
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

/// `tenure leases --json`: see `docs/operations.md` for every field. Fields are only added.
#[derive(Serialize)]
struct LeasesJson {
    now: String,
    leases: Vec<LeaseJson>,
}

#[derive(Serialize)]
struct LeaseJson {
    lease_name: String,
    owner: String,
    priority: i64,
    fencing_token: u64,
    state: &'static str,
    live: bool,
    acquired_at: String,
    heartbeat_at: String,
    released_at: Option<String>,
    expires_at: String,
    remaining_ms: u128,
    ttl_ms: u128,
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
    fn new(view: &View) -> Self {
        let now = view.snapshot.now;
        LeasesJson {
            now: now.to_string(),
            leases: view
                .snapshot
                .leases
                .iter()
                .zip(&view.contenders)
                .map(|(lease, contenders)| LeaseJson {
                    lease_name: lease.lease_name.to_string(),
                    owner: lease.owner.to_string(),
                    priority: lease.priority,
                    fencing_token: lease.fencing_token.get(),
                    state: State::of(lease, now).as_str(),
                    live: lease.is_live_at(now),
                    acquired_at: lease.acquired_at.to_string(),
                    heartbeat_at: lease.heartbeat_at.to_string(),
                    released_at: lease.is_released().then(|| ended_at(lease).to_string()),
                    expires_at: lease.expires_at().to_string(),
                    remaining_ms: lease
                        .expires_at()
                        .saturating_duration_since(now)
                        .as_millis(),
                    ttl_ms: lease.ttl.as_millis(),
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

/// `text` with control and bidirectional-control characters shown as `\u{…}` escapes, so
/// that a lease name or an owner id cannot rewrite or reorder the terminal's output.
fn printable(text: &str) -> String {
    use std::fmt::Write as _;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tenure_ports::{FencingToken, LeaseName, Owner};

    fn lease(heartbeat_s: i64, released_s: Option<i64>) -> Lease {
        let at = |s: i64| Timestamp::from_micros(s * 1_000_000);
        Lease {
            lease_name: LeaseName::new("jobs").unwrap(),
            owner: Owner::new("pod-a").unwrap(),
            priority: 0,
            fencing_token: FencingToken::FIRST,
            acquired_at: at(0),
            heartbeat_at: at(heartbeat_s),
            ttl: Duration::from_secs(10),
            released_at: released_s.map(at),
        }
    }

    #[test]
    fn live_released_and_expired_are_told_apart_on_the_storage_clock() {
        let now = Timestamp::from_micros(20_000_000);
        assert_eq!(State::of(&lease(15, None), now), State::Live);
        // Released at 12 s: the heartbeat was backdated to 2 s.
        let released = lease(2, Some(12));
        assert_eq!(State::of(&released, now), State::Released);
        assert_eq!(ended_at(&released), Timestamp::from_micros(12_000_000));
        // Last renewed at 5 s, expired at 15 s.
        let expired = lease(5, None);
        assert_eq!(State::of(&expired, now), State::Expired);
        assert_eq!(ended_at(&expired), Timestamp::from_micros(15_000_000));
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(short(Duration::from_millis(840)), "840ms");
        assert_eq!(short(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(short(Duration::from_secs(312)), "5m12s");
        assert_eq!(short(Duration::from_secs(7_380)), "2h03m");
    }
}
