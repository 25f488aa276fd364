//! The demo's voice: numbered chapters, and one timestamped line per event.
//!
//! The elector's and the processor's own `tracing` events are turned into sentences by
//! [`NarrationLayer`], so what is told is exactly what they did, in the order they did it,
//! with nothing missed.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Prints the story to standard output. Lines are written whole, under one lock.
#[derive(Debug)]
pub struct Narrator {
    start: Instant,
    out: Mutex<()>,
    /// Whether renewals are told (only while they are the point).
    show_renewals: AtomicBool,
    tenures: Mutex<Vec<Tenure>>,
    /// The order at each event position dispatched so far, to name a bookmark.
    orders: Mutex<BTreeMap<u64, u64>>,
}

/// One tenure as it was told: who, which token, from when to when, how it ended.
#[derive(Clone, Debug)]
pub struct Tenure {
    pub owner: String,
    pub token: u64,
    pub from: Duration,
    pub until: Option<Duration>,
    pub ended: &'static str,
    pub step_down_requested: bool,
}

impl Narrator {
    pub fn new() -> Arc<Self> {
        Arc::new(Narrator {
            start: Instant::now(),
            out: Mutex::new(()),
            show_renewals: AtomicBool::new(false),
            tenures: Mutex::new(Vec::new()),
            orders: Mutex::new(BTreeMap::new()),
        })
    }

    /// Time since the story began.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The time of `instant` in the story (zero if before it began).
    pub fn time_of(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.start)
    }

    pub fn show_renewals(&self, show: bool) {
        self.show_renewals.store(show, Ordering::Relaxed);
    }

    /// A line about `who`: `[ 0.012s] replica-b  elected leader (token 1)`.
    pub fn say(&self, who: &str, what: impl fmt::Display) {
        let at = self.elapsed().as_secs_f64();
        self.print(&format!("[{at:6.3}s] {who:<10} {what}\n"));
    }

    /// Remembers that order `number` sits at event `position`, to name a bookmark there.
    pub fn note_order(&self, position: u64, number: u64) {
        let mut orders = self.orders.lock().unwrap_or_else(PoisonError::into_inner);
        orders.insert(position, number);
    }

    /// "order 7" for a bookmark at the position of order 7.
    fn bookmark_at(&self, position: u64) -> String {
        let orders = self.orders.lock().unwrap_or_else(PoisonError::into_inner);
        match orders.get(&position) {
            Some(number) => format!("order {number}"),
            None => format!("position {position}"),
        }
    }

    /// A chapter heading and the few lines that say what it shows.
    pub fn chapter(&self, number: u32, title: &str, explanation: &[&str]) {
        let mut text = format!("\nChapter {number}: {title}\n");
        for line in explanation {
            let _ = writeln!(text, "  {line}");
        }
        self.print(&text);
    }

    /// Plain text, as it is.
    pub fn text(&self, text: &str) {
        self.print(text);
    }

    /// Every tenure told so far.
    pub fn tenures(&self) -> Vec<Tenure> {
        self.tenures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Marks the open tenure of `owner` as ended now, for a reason the elector cannot log
    /// itself (a crash, a freeze).
    pub fn end_tenure(&self, owner: &str, ended: &'static str) {
        let now = self.elapsed();
        let mut tenures = self.tenures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = tenures
            .iter_mut()
            .rev()
            .find(|t| t.owner == owner && t.until.is_none())
        {
            t.until = Some(now);
            t.ended = ended;
        }
    }

    fn begin_tenure(&self, owner: &str, token: u64) {
        let from = self.elapsed();
        self.tenures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Tenure {
                owner: owner.to_owned(),
                token,
                from,
                until: None,
                ended: "still leading",
                step_down_requested: false,
            });
    }

    fn note_step_down(&self, owner: &str) {
        let mut tenures = self.tenures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = tenures
            .iter_mut()
            .rev()
            .find(|t| t.owner == owner && t.until.is_none())
        {
            t.step_down_requested = true;
        }
    }

    fn stepped_down(&self, owner: &str) -> bool {
        let tenures = self.tenures.lock().unwrap_or_else(PoisonError::into_inner);
        tenures
            .iter()
            .rev()
            .find(|t| t.owner == owner && t.until.is_none())
            .is_some_and(|t| t.step_down_requested)
    }

    fn print(&self, text: &str) {
        let _guard = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = std::io::stdout().lock();
        // A closed stdout (`tenure demo | head`) must not panic the demo.
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

/// Turns the elector's `tracing` events into lines of the story.
pub struct NarrationLayer {
    narrator: Arc<Narrator>,
}

impl NarrationLayer {
    pub fn new(narrator: Arc<Narrator>) -> Self {
        NarrationLayer { narrator }
    }
}

impl<S: Subscriber> Layer<S> for NarrationLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !event.metadata().target().starts_with("tenure_election") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(owner) = fields.owner.as_deref() else {
            return;
        };
        if let Some(action) = fields.action.as_deref() {
            // A tenure ends, as far as dispatching goes, when the processor stops: before the
            // lease is released, so before the next leader can be elected.
            if action == "stopped" {
                let ended = match fields.reason.as_deref() {
                    Some("step_down") => "handed over on request",
                    Some("stop_signal") => "released on shutdown",
                    _ => "lost",
                };
                self.narrator.end_tenure(owner, ended);
            }
            if let Some(line) = processor_line(&self.narrator, action, &fields) {
                self.narrator.say(owner, line);
            }
            return;
        }
        let Some(transition) = fields.transition.as_deref() else {
            return;
        };
        let token = fields.token.unwrap_or(0);
        let n = &self.narrator;
        let line = match transition {
            "acquired" => {
                n.begin_tenure(owner, token);
                if fields.step_down_requested {
                    format!("elected leader (token {token}), and asked to step down at once")
                } else {
                    format!("elected leader (token {token})")
                }
            }
            "renewed" if n.show_renewals.load(Ordering::Relaxed) => format!(
                "renewed the lease (token {token}): leader for {:.2}s more, unless renewed again",
                Duration::from_millis(fields.valid_for_ms.unwrap_or(0)).as_secs_f64()
            ),
            "step_down_requested" => {
                n.note_step_down(owner);
                format!(
                    "asked to step down: a contender with a higher priority is waiting (token {token})"
                )
            }
            "step_down_withdrawn" => format!("step-down no longer requested (token {token})"),
            "released" => {
                let ended = if n.stepped_down(owner) {
                    "handed over on request"
                } else {
                    "released on shutdown"
                };
                n.end_tenure(owner, ended);
                format!("released the lease (token {token})")
            }
            "lost" => {
                n.end_tenure(owner, "lost");
                match fields.reason.as_deref() {
                    Some("lapsed") => format!(
                        "stopped leading: no renewal confirmed within the ttl (token {token})"
                    ),
                    Some("taken_over") => format!(
                        "lost the lease to {} (token {})",
                        fields.holder.as_deref().unwrap_or("another contender"),
                        fields.holder_token.unwrap_or(0)
                    ),
                    _ => format!("lost the lease (token {token})"),
                }
            }
            "standby" => format!(
                "standing by (leader {}, token {})",
                fields.holder.as_deref().unwrap_or("?"),
                fields.holder_token.unwrap_or(0)
            ),
            "renewal_failed" | "unknown" | "release_failed" => format!(
                "storage call failed: {}",
                fields.error.as_deref().unwrap_or("unknown error")
            ),
            _ => return,
        };
        n.say(owner, line);
    }
}

/// A processor's event as a line of the story, if it is one (batches are told by the
/// dispatcher itself).
fn processor_line(n: &Narrator, action: &str, fields: &Fields) -> Option<String> {
    // Where the tenure's last bookmark is, if it wrote one.
    let bookmark = || {
        fields
            .position
            .map_or_else(String::new, |p| format!(" (at {})", n.bookmark_at(p)))
    };
    let events = || {
        format!(
            "the events at positions {}–{}",
            fields.first.unwrap_or(0),
            fields.last.unwrap_or(0)
        )
    };
    Some(match (action, fields.reason.as_deref()) {
        ("resumed", _) => match fields.position {
            None => "finds no bookmark: starts with the first order".into(),
            Some(p) => format!("reads the bookmark: resumes after {}", n.bookmark_at(p)),
        },
        ("stepping_down", _) => format!(
            "hands over: its last batch is dispatched and bookmarked{}",
            bookmark()
        ),
        ("stopped", Some("stop_signal")) => format!(
            "stops between batches: its last batch is dispatched and bookmarked{}",
            bookmark()
        ),
        ("not_bookmarked", _) => format!(
            "lost its tenure after dispatching {}, before bookmarking them: the next leader \
             dispatches them again",
            events()
        ),
        ("cancelled", _) => format!(
            "lost its tenure while dispatching {}: left to the next leader",
            events()
        ),
        ("retrying", _) => format!(
            "storage call not confirmed ({}): {}; reading the bookmark again",
            fields.operation.as_deref().unwrap_or("?"),
            fields.error.as_deref().unwrap_or("unknown error")
        ),
        _ => return None,
    })
}

#[derive(Default)]
struct Fields {
    owner: Option<String>,
    transition: Option<String>,
    action: Option<String>,
    operation: Option<String>,
    first: Option<u64>,
    last: Option<u64>,
    position: Option<u64>,
    reason: Option<String>,
    holder: Option<String>,
    error: Option<String>,
    token: Option<u64>,
    holder_token: Option<u64>,
    valid_for_ms: Option<u64>,
    step_down_requested: bool,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "token" => self.token = Some(value),
            "holder_token" => self.holder_token = Some(value),
            "valid_for_ms" => self.valid_for_ms = Some(value),
            "first" => self.first = Some(value),
            "last" => self.last = Some(value),
            "position" => self.position = Some(value),
            _ => {}
        }
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.record_u64(field, u64::try_from(value).unwrap_or(u64::MAX));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "step_down_requested" {
            self.step_down_requested = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.text(field, format!("{value:?}"));
    }
}

impl Fields {
    fn text(&mut self, field: &Field, value: String) {
        match field.name() {
            "owner" => self.owner = Some(value),
            "transition" => self.transition = Some(value),
            "action" => self.action = Some(value),
            "operation" => self.operation = Some(value),
            "reason" => self.reason = Some(value),
            "holder" => self.holder = Some(value),
            "error" => self.error = Some(value),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processor_events_become_lines_and_the_rest_is_left_to_the_dispatcher() {
        let n = Narrator::new();
        n.note_order(6, 4);
        let fields = |reason: Option<&str>, position: Option<u64>| Fields {
            reason: reason.map(str::to_owned),
            first: Some(17),
            last: Some(18),
            position,
            ..Fields::default()
        };
        let line = |action, reason, position| processor_line(&n, action, &fields(reason, position));
        assert_eq!(
            line("resumed", None, None).as_deref(),
            Some("finds no bookmark: starts with the first order")
        );
        assert_eq!(
            line("resumed", None, Some(6)).as_deref(),
            Some("reads the bookmark: resumes after order 4")
        );
        assert!(line("resumed", None, Some(9)).is_some_and(|l| l.ends_with("position 9")));
        assert!(line("stepping_down", None, Some(6)).is_some_and(|l| l.ends_with("(at order 4)")));
        assert!(
            line("stopped", Some("stop_signal"), None).is_some_and(|l| l.ends_with("bookmarked"))
        );
        assert!(line("stopped", Some("step_down"), None).is_none());
        assert!(line("not_bookmarked", None, None).is_some_and(|l| l.contains("positions 17–18")));
        for quiet in ["projected", "bookmarked", "caught_up", "failed"] {
            assert!(line(quiet, None, None).is_none(), "{quiet}");
        }
    }
}
