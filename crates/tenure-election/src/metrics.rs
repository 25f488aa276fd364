//! What the election and the processor record through the [`metrics`](https://docs.rs/metrics)
//! facade, with the `metrics` feature: the names and labels below, and nothing else. Without
//! the feature every function here is an empty inline function and the `metrics` crate is not
//! compiled in at all.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `tenure_leader` | gauge | `lease` | 1 while this process's elector leads the lease, else 0 |
//! | `tenure_transitions_total` | counter | `lease`, `kind` | transitions of an elector, by [`Transition`] |
//! | `tenure_wakeups_total` | counter | `lease` | requests an elector sent at once because the storage said the lease changed (a release, a step-down request), besides its polls (`tenure_storage_calls_total{op="request_lease"}` counts both) |
//! | `tenure_storage_calls_total` | counter | `op` | storage calls made by electors and processors |
//! | `tenure_storage_errors_total` | counter | `op`, `kind` | of those, the calls that failed, by [`error_kind`] (`timeout`: no answer within the call timeout) |
//! | `tenure_storage_call_seconds` | histogram | `op` | latency of the calls that answered |
//! | `tenure_handover_seconds` | histogram | `lease` | the gap a new leader saw between the previous tenure's end and its own acquisition, on the storage's clock |
//! | `tenure_processor_events_total` | counter | `reader` | events projected (and bookmarked) |
//! | `tenure_processor_batches_total` | counter | `reader` | batches projected and bookmarked |
//! | `tenure_processor_bookmark_lag_seconds` | gauge | `reader` | this process's clock less the `recorded_at` of the last event bookmarked |
//!
//! Owner ids are never a label: they are unbounded (a new one per process start), and a gauge
//! per owner would grow without end. Sum `tenure_leader` over processes to count the leaders
//! of a lease, as client-go's `leader_election_master_status` is used.
//!
//! An elector looks its figures up in the installed recorder at each call (a few hundred
//! nanoseconds, at the cadence of lease calls), so a recorder installed after it started is
//! still used. A processor looks its own up once per tenure, when the tenure starts
//! ([`ProcessorFigures`]): its calls come batch after batch, where seven lookups a batch were
//! measured at 0.72x the throughput of batches of ten in-memory events; a recorder installed
//! during a tenure is used from the next one. Install the recorder before starting.

// Without the feature the classification below is computed by nobody.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use std::time::Duration;

use tenure_ports::{EventStorageError, LeaseResponse, Timestamp};
use tokio::time::Instant;

use crate::state::LeadershipState;

/// A change of an elector's state, as counted by `tenure_transitions_total{kind}`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Transition {
    /// A new tenure began for this elector.
    Acquired,
    /// A renewal of the current tenure was confirmed.
    Renewed,
    /// A higher-priority contender appeared.
    StepDownRequested,
    /// The higher-priority contender went away.
    StepDownWithdrawn,
    /// The held lease was released.
    Released,
    /// Leadership lapsed: no renewal confirmed by the deadline.
    LostLapsed,
    /// Another contender holds the lease.
    LostTakenOver,
    /// The lease has a new tenure of this very owner.
    LostSuperseded,
    /// The storage answered too late, or a call failed after the deadline.
    LostUnconfirmed,
}

impl Transition {
    /// What moving from `previous` to `next` (a published state) was: at most two
    /// transitions, a loss and then an acquisition when a new tenure supersedes this
    /// elector's own. The same cases as the campaign's transition events.
    pub(crate) fn between(
        previous: &LeadershipState,
        next: &LeadershipState,
    ) -> [Option<Transition>; 2] {
        use LeadershipState::{Standby, Unknown};
        match (previous.leader_token(), next.leader_token(), next) {
            (Some(old), Some(new), _) if old == new => [
                Some(
                    match (
                        previous.is_step_down_requested(),
                        next.is_step_down_requested(),
                    ) {
                        (false, true) => Transition::StepDownRequested,
                        (true, false) => Transition::StepDownWithdrawn,
                        _ => Transition::Renewed,
                    },
                ),
                None,
            ],
            (old, Some(_), _) => [
                old.map(|_| Transition::LostSuperseded),
                Some(Transition::Acquired),
            ],
            (Some(_), None, Standby { .. }) => [Some(Transition::LostTakenOver), None],
            (Some(_), None, Unknown) => [Some(Transition::LostUnconfirmed), None],
            _ => [None, None],
        }
    }

    /// The `kind` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transition::Acquired => "acquired",
            Transition::Renewed => "renewed",
            Transition::StepDownRequested => "step_down_requested",
            Transition::StepDownWithdrawn => "step_down_withdrawn",
            Transition::Released => "released",
            Transition::LostLapsed => "lost_lapsed",
            Transition::LostTakenOver => "lost_taken_over",
            Transition::LostSuperseded => "lost_superseded",
            Transition::LostUnconfirmed => "lost_unconfirmed",
        }
    }
}

/// The `kind` label of a failed storage call.
pub(crate) fn error_kind(error: &EventStorageError) -> &'static str {
    match error {
        EventStorageError::InvalidRequest(_) => "invalid_request",
        EventStorageError::Unsupported(_) => "unsupported",
        EventStorageError::Unavailable { .. } => "unavailable",
        EventStorageError::Schema { .. } => "schema",
        EventStorageError::Io { .. } => "io",
        EventStorageError::Corrupt { .. } => "corrupt",
        EventStorageError::AppendConflict { .. } => "append_conflict",
        EventStorageError::Fenced { .. } => "fenced",
        EventStorageError::Closed => "closed",
        EventStorageError::Internal { .. } => "internal",
        _ => "other",
    }
}

/// The `kind` label of a storage call that did not answer within its call timeout.
pub(crate) const TIMEOUT: &str = "timeout";

#[cfg(feature = "metrics")]
mod recording {
    use super::*;
    use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
    use std::sync::{Mutex, PoisonError};
    use tenure_ports::{FencingToken, LeaseStatus};

    // The leader gauge is moved up and down by each elector as it starts and ends tenures,
    // never set: two electors of one lease in one process (the demo's replicas) add up, as
    // the processes of a deployment do.

    /// An elector starts: its lease's gauge exists (at 0 if nobody here leads).
    pub(crate) fn started(lease: &str) {
        gauge!("tenure_leader", "lease" => lease.to_owned()).increment(0.0);
    }

    /// The elector published `next` after `previous`.
    pub(crate) fn published(lease: &str, previous: &LeadershipState, next: &LeadershipState) {
        for transition in Transition::between(previous, next).into_iter().flatten() {
            self::transition(lease, transition);
        }
        leadership(lease, previous.is_leader(), next.is_leader());
    }

    /// Leadership lapsed at its deadline.
    pub(crate) fn lapsed(lease: &str) {
        self::transition(lease, Transition::LostLapsed);
        leadership(lease, true, false);
    }

    /// The elector left `previous` for `Unknown` without publishing (a release, a stop).
    pub(crate) fn unpublished(lease: &str, previous: &LeadershipState) {
        leadership(lease, previous.is_leader(), false);
    }

    /// A release was answered (`confirmed`) or failed, after the tenure `previous`.
    pub(crate) fn released(lease: &str, previous: &LeadershipState, confirmed: bool) {
        if confirmed && previous.is_leader() {
            self::transition(lease, Transition::Released);
        }
    }

    fn leadership(lease: &str, was: bool, is: bool) {
        if was != is {
            let gauge = gauge!("tenure_leader", "lease" => lease.to_owned());
            if is {
                gauge.increment(1.0)
            } else {
                gauge.decrement(1.0)
            }
        }
    }

    fn transition(lease: &str, transition: Transition) {
        counter!(
            "tenure_transitions_total",
            "lease" => lease.to_owned(),
            "kind" => transition.as_str()
        )
        .increment(1);
    }

    /// The figures of one storage operation, `op`, looked up once.
    pub(crate) struct CallFigures {
        op: &'static str,
        calls: Counter,
        latency: Histogram,
    }

    impl CallFigures {
        pub(crate) fn new(op: &'static str) -> Self {
            CallFigures {
                op,
                calls: counter!("tenure_storage_calls_total", "op" => op),
                latency: histogram!("tenure_storage_call_seconds", "op" => op),
            }
        }

        /// The `op` label.
        pub(crate) fn op(&self) -> &'static str {
            self.op
        }

        /// One call: its latency, or the `kind` of its failure (looked up then: failures are
        /// rare, and their kinds many).
        pub(crate) fn record(&self, outcome: Result<Duration, &'static str>) {
            self.calls.increment(1);
            match outcome {
                Ok(latency) => self.latency.record(latency),
                Err(kind) => {
                    counter!("tenure_storage_errors_total", "op" => self.op, "kind" => kind)
                        .increment(1);
                }
            }
        }
    }

    /// A processor's figures for one tenure, looked up when it starts.
    pub(crate) struct ProcessorFigures {
        pub(crate) get_bookmark: CallFigures,
        pub(crate) read_events: CallFigures,
        pub(crate) bookmark: CallFigures,
        events: Counter,
        batches: Counter,
        lag: Gauge,
    }

    impl ProcessorFigures {
        pub(crate) fn new(reader: &str) -> Self {
            ProcessorFigures {
                get_bookmark: CallFigures::new("get_bookmark"),
                read_events: CallFigures::new("read_events"),
                bookmark: CallFigures::new("bookmark"),
                events: counter!("tenure_processor_events_total", "reader" => reader.to_owned()),
                batches: counter!("tenure_processor_batches_total", "reader" => reader.to_owned()),
                lag: gauge!("tenure_processor_bookmark_lag_seconds", "reader" => reader.to_owned()),
            }
        }

        /// A batch of `events` projected and bookmarked, the last recorded at
        /// `last_recorded_at`.
        pub(crate) fn projected(&self, events: usize, last_recorded_at: Option<Timestamp>) {
            let lag = last_recorded_at.map_or(Duration::ZERO, |at| {
                std::time::SystemTime::now()
                    .duration_since(at.to_system_time())
                    .unwrap_or(Duration::ZERO)
            });
            self.events
                .increment(u64::try_from(events).unwrap_or(u64::MAX));
            self.batches.increment(1);
            self.lag.set(lag);
        }
    }

    /// A request sent at once because the storage said the lease changed.
    pub(crate) fn woken(lease: &str) {
        counter!("tenure_wakeups_total", "lease" => lease.to_owned()).increment(1);
    }

    pub(crate) fn handover(lease: &str, gap: Duration) {
        histogram!("tenure_handover_seconds", "lease" => lease.to_owned()).record(gap);
    }

    /// Gives every metric its help text and unit, in the installed recorder.
    pub fn describe_metrics() {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_gauge!(
            "tenure_leader",
            "Electors of this process leading the lease (1 while this process leads it, else 0)"
        );
        describe_counter!(
            "tenure_transitions_total",
            "Transitions of this process's electors, by kind"
        );
        describe_counter!(
            "tenure_wakeups_total",
            "Requests sent at once because the storage said the lease changed, by lease"
        );
        describe_counter!(
            "tenure_storage_calls_total",
            "Storage calls made by electors and processors, by operation"
        );
        describe_counter!(
            "tenure_storage_errors_total",
            "Storage calls that failed or timed out, by operation and error kind"
        );
        describe_histogram!(
            "tenure_storage_call_seconds",
            Unit::Seconds,
            "Latency of the storage calls that answered, by operation"
        );
        describe_histogram!(
            "tenure_handover_seconds",
            Unit::Seconds,
            "Time a new leader saw between the end of the previous tenure and its acquisition"
        );
        describe_counter!(
            "tenure_processor_events_total",
            "Events projected and bookmarked, by reader"
        );
        describe_counter!(
            "tenure_processor_batches_total",
            "Batches projected and bookmarked, by reader"
        );
        describe_gauge!(
            "tenure_processor_bookmark_lag_seconds",
            Unit::Seconds,
            "This process's clock less the recorded_at of the last event bookmarked, by reader"
        );
    }

    /// What an elector last saw of another owner's tenure, to time the handover when it
    /// acquires the next one.
    #[derive(Default, Debug)]
    pub(crate) struct HandoverWatch {
        seen: Mutex<Option<Seen>>,
    }

    #[derive(Clone, Copy, Debug)]
    struct Seen {
        token: FencingToken,
        expires_at: Timestamp,
        sent_at: Instant,
    }

    impl HandoverWatch {
        pub(crate) fn new() -> Self {
            HandoverWatch::default()
        }

        /// Follows every confirmed answer (to a request sent at `sent_at`). A standby answer
        /// remembers the holder's tenure; an answer that holds the lease with the next token
        /// records the handover from the end of that tenure, as far as the storage told it:
        ///
        /// * the new tenure began at or after the expiry the storage last showed
        ///   (`heartbeat_at + ttl`): from that expiry to the new `acquired_at`, both on the
        ///   storage's clock (if the holder renewed after that answer, its real expiry was
        ///   later: the figure is high by at most the holder's poll interval);
        /// * it began before (the previous tenure was released; no answer shows the instant
        ///   of a release, only that it came after the last standby answer): from the sending
        ///   of that standby request to this answer, on this process's monotonic clock, an
        ///   upper bound of about one poll interval.
        pub(crate) fn observe(&self, lease: &str, sent_at: Instant, response: &LeaseResponse) {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if response.status == LeaseStatus::Standby {
                *seen = Some(Seen {
                    token: response.fencing_token,
                    expires_at: response.lease.expires_at(),
                    sent_at,
                });
                return;
            }
            if let Some(previous) = seen.take()
                && previous.token.next() == Some(response.fencing_token)
            {
                let acquired_at = response.lease.acquired_at;
                let gap = if acquired_at >= previous.expires_at {
                    acquired_at.saturating_duration_since(previous.expires_at)
                } else {
                    previous.sent_at.elapsed()
                };
                handover(lease, gap);
            }
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod recording {
    use super::*;

    #[inline(always)]
    pub(crate) fn started(_: &str) {}
    #[inline(always)]
    pub(crate) fn published(_: &str, _: &LeadershipState, _: &LeadershipState) {}
    #[inline(always)]
    pub(crate) fn lapsed(_: &str) {}
    #[inline(always)]
    pub(crate) fn unpublished(_: &str, _: &LeadershipState) {}
    #[inline(always)]
    pub(crate) fn released(_: &str, _: &LeadershipState, _: bool) {}
    pub(crate) struct CallFigures {
        op: &'static str,
    }

    impl CallFigures {
        #[inline(always)]
        pub(crate) fn new(op: &'static str) -> Self {
            CallFigures { op }
        }

        #[inline(always)]
        pub(crate) fn op(&self) -> &'static str {
            self.op
        }

        #[inline(always)]
        pub(crate) fn record(&self, _: Result<Duration, &'static str>) {}
    }

    pub(crate) struct ProcessorFigures {
        pub(crate) get_bookmark: CallFigures,
        pub(crate) read_events: CallFigures,
        pub(crate) bookmark: CallFigures,
    }

    impl ProcessorFigures {
        #[inline(always)]
        pub(crate) fn new(_: &str) -> Self {
            ProcessorFigures {
                get_bookmark: CallFigures::new("get_bookmark"),
                read_events: CallFigures::new("read_events"),
                bookmark: CallFigures::new("bookmark"),
            }
        }

        #[inline(always)]
        pub(crate) fn projected(&self, _: usize, _: Option<Timestamp>) {}
    }

    pub(crate) fn woken(_: &str) {}

    /// Nothing to remember without the feature.
    #[derive(Debug)]
    pub(crate) struct HandoverWatch;

    impl HandoverWatch {
        #[inline(always)]
        pub(crate) fn new() -> Self {
            HandoverWatch
        }

        #[inline(always)]
        pub(crate) fn observe(&self, _: &str, _: Instant, _: &LeaseResponse) {}
    }
}

#[cfg(feature = "metrics")]
pub use recording::describe_metrics;
pub(crate) use recording::{
    CallFigures, HandoverWatch, ProcessorFigures, lapsed, published, released, started,
    unpublished, woken,
};
