//! Leader election on Tenure leases: the loop around the storage, done right.
//!
//! A storage answers one question per call ("who holds this lease?"). The lease contract puts
//! the rest on the caller: ask again about every ttl/3; believe in leadership only until the
//! ttl, measured on your own monotonic clock from the moment you *sent* the last request that
//! succeeded, has run out; treat a failed or hung call as no evidence of leadership; finish
//! and release when a higher-priority contender waits; release on the way out. A
//! [`LeaderElector`] does all of that in a task of its own and publishes what it knows as a
//! [`LeadershipState`] through a `tokio::sync::watch` channel.
//! [`LeaderElector::run_while_leader`] runs work only during a tenure and hands it a
//! [`LeaderLease`]: the fencing token to stamp writes with, a signal for when leadership is
//! lost, and one for when a step-down is requested. [`FencingGuard`] is the receiving side:
//! it refuses writes stamped with a token older than one it has accepted, which is what stops
//! a leader that was paused past its ttl (see its docs for the same check in PostgreSQL).
//! [`Processor`] puts lease, bookmark and event log together: while its elector leads, it
//! reads the bookmark, projects the events after it batch by batch with a [`Projection`],
//! and moves the bookmark, stopping the moment the tenure ends.
//!
//! This crate is not a storage and makes no lease decision: it runs on any
//! `Arc<dyn EventStorage>` (`tenure-memory`, `tenure-postgres`) and trusts the storage's
//! answers, judged on the storage's clock. It depends on tokio and logs through `tracing`;
//! it installs no subscriber and spawns nothing but the one task per elector.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
//! use tenure_memory::MemoryEventStorage;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let storage = Arc::new(MemoryEventStorage::new());
//! let ttl = Duration::from_secs(3);
//! let a = LeaderElector::start(storage.clone(), ElectorConfig::new("jobs", ttl).with_owner("a"))?;
//! let lease = a.wait_for_leadership().await?;
//! assert_eq!(lease.token().get(), 1);
//!
//! let b = LeaderElector::start(storage, ElectorConfig::new("jobs", ttl).with_owner("b"))?;
//! let mut state = b.subscribe();
//! state.wait_for(|s| matches!(s, LeadershipState::Standby { .. })).await?;
//!
//! a.shutdown().await?; // releases: b takes over at its next request
//! let lease = b.wait_for_leadership().await?;
//! assert_eq!(lease.token().get(), 2);
//! # b.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Events
//!
//! Every transition is logged with the fields `lease`, `owner` and `token`, and a
//! `transition` field naming it: `acquired`, `step_down_requested`, `step_down_withdrawn`,
//! `lost` (with a `reason`: `lapsed`, `taken_over`, `superseded`, `unconfirmed`),
//! `released` and `standby` at info or warn; `renewed` at debug; failed calls at warn
//! (`renewal_failed`, `unknown`, `release_failed`). An elector never adopts a tenure it did
//! not start: a holding answer that renews a tenure acquired before its request (another
//! process with the same owner id, or a predecessor that died within the ttl) is logged as
//! `foreign_tenure` (warn), the elector stands by without renewing it until it has ended
//! (`foreign_tenure_ended`), and a live process still renewing it is reported once, at
//! error, as `duplicate_owner`, naming the owner id. A [`Processor`]'s events carry `lease`,
//! `owner`, `token`, `reader` and an `action` instead (see its docs).
//!
//! Each elector step (one request and what came of it) and each release runs in a
//! `debug` span, and each storage call the elector or a processor makes in a `trace` span
//! inside it, with the fields `lease`, `owner`, `token` (and `op` for a storage call).
//!
//! # Metrics
//!
//! With the `metrics` feature, the elector and the processor record through the
//! [`metrics`](https://docs.rs/metrics) facade: a leader gauge per lease
//! (`tenure_leader{lease}`, 1 while this process leads it), transitions by kind, storage calls,
//! errors and latency by operation, handover times seen by a new leader, and the processor's
//! events, batches and bookmark lag. The crate installs no recorder or exporter: the
//! application does (`tenure run --metrics-listen` serves them to Prometheus). The names,
//! labels and meanings are in the operations guide
//! (<https://github.com/tenure-rs/tenure/blob/main/docs/operations.md>), with alerts and a
//! dashboard. Without the feature, nothing of `metrics` is compiled in. Call [`describe_metrics`] once the recorder is installed to give
//! each metric its help text and unit.

#![deny(missing_docs)]

mod campaign;
mod config;
mod elector;
mod error;
mod fencing;
mod identity;
mod lease;
mod metrics;
mod observe;
mod owner;
mod processor;
mod state;
mod wake;

pub use config::{ConfigError, ElectorConfig, MIN_ELECTOR_TTL, ValidConfig, safety_margin};
pub use elector::LeaderElector;
pub use error::ElectorError;
pub use fencing::{FencingGuard, StaleToken};
pub use lease::{LeaderLease, LeadershipLost};
#[cfg(feature = "metrics")]
pub use metrics::describe_metrics;
pub use processor::{
    Batch, DEFAULT_BATCH_SIZE, DEFAULT_CALL_TIMEOUT, DEFAULT_IDLE_POLL, Processor, ProcessorConfig,
    ProcessorConfigError, ProcessorError, Projection,
};
pub use state::LeadershipState;
pub use tenure_ports::Backoff;
