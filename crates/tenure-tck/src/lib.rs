//! The conformance test kit of Tenure: the storage contract as executable scenarios.
//!
//! Every backend, ours or a third party's, proves that it keeps the lease contract by passing
//! this kit. An adapter's author writes a factory that makes a fresh storage, and one macro
//! call turns every scenario into a `#[test]` of its own, named after the scenario:
//!
//! ```
//! // tests/tck.rs of a backend crate
//! use tenure_ports::{async_trait, Capabilities, EventStorage};
//! use tenure_tck::Subject;
//!
//! #[derive(Debug, Default)]
//! struct MyStorage; // a backend that has not implemented leases yet
//!
//! #[async_trait]
//! impl EventStorage for MyStorage {
//!     fn name(&self) -> &str { "mine" }
//!     fn capabilities(&self) -> Capabilities { Capabilities::NONE }
//! }
//!
//! tenure_tck::tck_suite!(|| async { Subject::new(MyStorage) });
//! ```
//!
//! A backend whose clock can be moved hands the kit a handle on it with
//! [`Subject::with_clock`]; `crates/tenure-memory/tests/tck.rs` is the complete example, and
//! `examples/partial-adapter` in the repository shows a backend without leases whose lease
//! scenarios are reported as skipped.
//!
//! `cargo test` then lists `lease_first_acquisition`, `lease_renewal_keeps_token`, … and
//! `tck_covers_every_scenario`, which fails if the suite and the kit ever disagree.
//!
//! # Time
//!
//! Give the subject a handle on the storage clock ([`Subject::with_clock`]) where the backend
//! has one: scenarios then advance it instead of sleeping. A backend that reads a real clock (a
//! database's) runs in real time with the ttls and margins of [`Timing::REAL_TIME`]: a ttl the
//! scenario lets expire is slept past with a margin, and a registration that must stay live is
//! given a ttl of minutes, so that a loaded machine slows the suite down but never fails it.
//!
//! # Capabilities and skipping
//!
//! Each scenario needs a [`Capability`](tenure_ports::Capability). When the storage's
//! `capabilities()` lack it, the scenario prints `tck: skipped <backend>::<scenario> …` and
//! returns: libtest has no run-time skip, so the test shows as passed in `cargo test`, and the
//! line (visible with `--nocapture`) is what `cargo xtask tck` counts as a skip. A scenario that
//! ran prints `tck: passed …`. A failure panics with `tck: failed <backend>::<scenario>: why`.
//!
//! # History checking
//!
//! [`history`] records lease calls, leadership spans and fenced writes from any workload
//! (stress tests, fault injection) and checks the contract's safety properties over the whole
//! run.
//!
//! # What it is not
//!
//! Not a benchmark and not a fault-injection suite: it checks what a correct backend answers,
//! including under concurrent contention, but it does not kill connections or servers.

#![deny(missing_docs)]

mod check;
mod events;
pub mod history;
mod lease;
mod subject;

use std::future::Future;
use std::pin::Pin;

use tenure_ports::Capability;

pub use check::Failure;
pub use subject::{AdvanceClock, Subject, Teardown, Timing};

/// The future of one running scenario.
pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

/// One scenario of the kit.
#[derive(Clone, Copy)]
pub struct Scenario {
    /// Its name, which is also the name of its `#[test]`.
    pub name: &'static str,
    /// The capabilities it needs; without any one of them, it is skipped.
    pub needs: &'static [Capability],
    /// Runs it against a subject.
    pub run: for<'a> fn(&'a Subject) -> ScenarioFuture<'a>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("needs", &self.needs)
            .finish()
    }
}

/// Every scenario of the kit.
pub fn scenarios() -> Vec<Scenario> {
    [lease::SCENARIOS, events::SCENARIOS].concat()
}

/// What became of one scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It ran and every check held.
    Passed,
    /// The storage lacks the capability it needs.
    Skipped,
}

/// Runs the scenario called `name` against a subject made by `factory`, on a multi-threaded
/// tokio runtime of its own, and prints its verdict.
///
/// # Panics
///
/// When the scenario fails, when `name` is not a scenario of the kit, or when no runtime can
/// be built: this is meant to be called from a `#[test]`, where a panic is a failure.
pub fn run_scenario<F, Fut>(name: &str, factory: F) -> Verdict
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Subject>,
{
    let Some(scenario) = scenarios().into_iter().find(|s| s.name == name) else {
        panic!("tck: no scenario is called {name:?}");
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => panic!("tck: cannot build a tokio runtime: {err}"),
    };
    runtime.block_on(async move {
        let subject = factory().await;
        let backend = subject
            .suite
            .clone()
            .unwrap_or_else(|| subject.storage.name().to_owned());
        let teardown = subject
            .teardown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let offered = subject.storage.capabilities();
        let missing: Vec<String> = scenario
            .needs
            .iter()
            .filter(|c| !offered.contains(**c))
            .map(|c| format!("`{c}`"))
            .collect();
        let result = if missing.is_empty() {
            Some((scenario.run)(&subject).await)
        } else {
            None
        };
        drop(subject);
        if let Some(teardown) = teardown {
            teardown.await;
        }
        match result {
            None => {
                println!(
                    "tck: skipped {backend}::{name}: the storage lacks the {} capability",
                    missing.join(" and ")
                );
                Verdict::Skipped
            }
            Some(Ok(())) => {
                println!("tck: passed {backend}::{name}");
                Verdict::Passed
            }
            Some(Err(failure)) => panic!("tck: failed {backend}::{name}: {failure}"),
        }
    })
}

/// Expands into one `#[test]` per scenario of the kit, each running against a fresh subject
/// from `factory` (an expression callable as `Fn() -> impl Future<Output = Subject>`), and a
/// test `tck_covers_every_scenario` that fails if this list and [`scenarios()`] disagree.
///
/// See the [crate documentation](crate) for an example.
#[macro_export]
macro_rules! tck_suite {
    ($factory:expr $(,)?) => {
        $crate::__tck_tests! { $factory;
            lease_first_acquisition,
            lease_renewal_keeps_token,
            lease_second_owner_stands_by,
            lease_takeover_after_expiry,
            lease_expired_holder_returns_with_new_token,
            lease_released_owner_returns_with_new_token,
            lease_release_hands_over_at_once,
            lease_release_of_foreign_lease_is_harmless,
            lease_release_is_idempotent,
            lease_release_withdraws_contender,
            lease_step_down_higher_priority,
            lease_step_down_not_for_equal_or_lower,
            lease_step_down_ends_when_contender_expires,
            lease_step_down_ends_when_contender_releases,
            lease_holder_ignoring_step_down_keeps_lease,
            lease_shorter_ttl_shortens_liveness,
            lease_fifty_handovers,
            lease_names_are_independent,
            lease_invalid_input_is_refused,
            lease_contenders_listed_live_only,
            lease_concurrent_contention,
            lease_registry_stays_bounded,
            lease_closed_storage_refuses_calls,
            events_append_assigns_positions,
            events_read_filters,
            events_read_direction_and_limits,
            events_cursor_pages_through_log,
            events_condition_conflict,
            events_idempotent_append,
            events_payloads_within_the_limits_round_trip,
            events_invalid_append_stores_nothing,
            events_concurrent_conditional_appends,
            events_concurrent_appends_keep_order,
            bookmarks_place_move_remove,
            bookmarks_listed_by_reader,
            bookmarks_must_point_at_stored_event,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __tck_tests {
    ($factory:expr; $($name:ident,)*) => {
        $(
            #[test]
            fn $name() {
                $crate::run_scenario(stringify!($name), $factory);
            }
        )*

        #[test]
        fn tck_covers_every_scenario() {
            let listed: &[&str] = &[$(stringify!($name)),*];
            let known: Vec<&str> = $crate::scenarios().iter().map(|s| s.name).collect();
            assert_eq!(listed, known.as_slice(), "tck_suite! and tenure_tck::scenarios() disagree");
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn scenario_names_are_unique() {
        let mut names: Vec<&str> = super::scenarios().iter().map(|s| s.name).collect();
        let total = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total);
    }
}
