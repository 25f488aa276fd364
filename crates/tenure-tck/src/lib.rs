//! The conformance test kit of Tenure: the storage contract as executable scenarios.
//!
//! Every backend, ours or a third party's, proves that it keeps the lease contract by passing
//! this kit. An adapter's author writes a factory that makes a fresh storage, and one macro
//! call turns the kit into a test target of its own, one test per scenario, named after it.
//!
//! In the backend crate's `Cargo.toml` (the kit brings its own harness, so that a skipped
//! scenario shows as skipped):
//!
//! ```toml
//! [dev-dependencies]
//! tenure-tck = "0.1"
//! tokio = { version = "1", features = ["rt"] }
//!
//! [[test]]
//! name = "tck"
//! harness = false
//! ```
//!
//! and in `tests/tck.rs`:
//!
//! ```no_run
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
//! `cargo test --test tck` then runs `lease_first_acquisition`, `lease_renewal_keeps_token`, …
//! (libtest's options work: a filter, `--exact`, `--test-threads`, `--list`) and closes with
//! libtest's summary and the kit's own line:
//!
//! ```text
//! test lease_first_acquisition ... ignored (skipped: the storage lacks the `lease` capability)
//! …
//! test result: ok. 0 passed; 0 failed; 44 ignored; 0 measured; 0 filtered out; finished in 0.01s
//!
//! tck mine: 0 passed, 0 failed, 44 skipped
//! ```
//!
//! A backend whose clock can be moved hands the kit a handle on it with
//! [`Subject::with_clock`], and one that needs cleaning up after each scenario a teardown
//! ([`Subject::with_teardown`]). The guide "Adding a backend" in the repository
//! (<https://github.com/tenure-rs/tenure/blob/main/docs/adding-a-backend.md>) walks through
//! a whole adapter, in a crate of its own.
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
//! Each scenario needs a [`Capability`]. When the storage's
//! `capabilities()` lack it, the scenario does not run and `cargo test` reports it *ignored*,
//! with the reason ("skipped: the storage lacks the `lease` capability"); it is never counted
//! as passed. A failure is reported as `tck: failed <suite>::<scenario>: why`. The closing line
//! `tck <suite>: P passed, F failed, S skipped` is the kit's verdict on the backend.
//!
//! # Lease decisions computed outside the domain
//!
//! A backend that computes lease decisions in its own code (SQL, another language) instead of
//! calling `tenure_domain`'s state machine proves that it decides exactly as the domain does
//! with [`differential::check_decisions`].
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

mod changes;
mod check;
pub mod differential;
mod events;
pub mod history;
mod lease;
mod subject;
mod suite;

use std::future::Future;
use std::pin::Pin;

use tenure_ports::Capability;

pub use check::Failure;
pub use libtest_mimic::Arguments;
pub use subject::{AdvanceClock, Subject, Teardown, Timing};
pub use suite::{SuiteSummary, Verdict, run_suite, run_suite_with};

/// The future of one running scenario.
pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

/// One scenario of the kit.
#[derive(Clone, Copy)]
#[non_exhaustive]
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
    [lease::SCENARIOS, changes::SCENARIOS, events::SCENARIOS].concat()
}

/// Expands into the `main` of a conformance test target: every scenario of the kit, each
/// against a fresh subject from `factory` (an expression callable as
/// `Fn() -> impl Future<Output = Subject>`, `Send + Sync + 'static`), through
/// [`run_suite`]. The target needs `harness = false` in `Cargo.toml`; under libtest's own
/// harness, the target instead runs one test, which fails saying so.
///
/// See the [crate documentation](crate) for an example.
#[macro_export]
macro_rules! tck_suite {
    ($factory:expr $(,)?) => {
        // Compiled only under libtest's own harness, where `main` below never runs: fails
        // loudly instead of letting the target pass with no scenario run.
        #[test]
        fn tck_suite_needs_harness_false() {
            panic!(
                "tenure_tck::tck_suite! brings its own harness: add `[[test]]`, `name = \"<this \
                 file's name>\"`, `harness = false` to Cargo.toml"
            );
        }

        fn main() -> ::std::process::ExitCode {
            $crate::run_suite($factory)
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

    use tenure_ports::{Capabilities, Capability, EventStorage, async_trait};

    /// Claims `capabilities` but implements nothing: every scenario that runs must fail.
    #[derive(Debug)]
    struct Pretender(Capabilities);

    #[async_trait]
    impl EventStorage for Pretender {
        fn name(&self) -> &str {
            "pretender"
        }
        fn capabilities(&self) -> Capabilities {
            self.0
        }
    }

    fn quiet() -> super::Arguments {
        // JSON, so that these inner runs print no `test result:` line of libtest's.
        super::Arguments::from_iter(["tck", "--format", "json", "--test-threads", "2"])
    }

    #[test]
    fn a_storage_without_capabilities_has_every_scenario_skipped() {
        let summary = super::run_suite_with(&quiet(), || async {
            super::Subject::new(Pretender(Capabilities::NONE))
        });
        let total = super::scenarios().len() as u64;
        assert_eq!(
            (summary.passed, summary.failed, summary.skipped),
            (0, 0, total)
        );
        assert_eq!(
            summary.line().as_deref(),
            Some(format!("tck pretender: 0 passed, 0 failed, {total} skipped").as_str())
        );
    }

    #[test]
    fn a_storage_that_claims_leases_without_them_fails_the_lease_scenarios() {
        let summary = super::run_suite_with(&quiet(), || async {
            super::Subject::new(Pretender(Capabilities::from([Capability::Lease])))
                .with_suite_name("claims-leases")
        });
        // The scenarios it can be asked to run: those that need leases and nothing else (one
        // that also needs events or fenced bookmarks is skipped).
        let lease = super::scenarios()
            .iter()
            .filter(|s| {
                s.needs.contains(&Capability::Lease)
                    && s.needs.iter().all(|c| *c == Capability::Lease)
            })
            .count() as u64;
        assert!(lease > 0);
        assert_eq!(summary.suite.as_deref(), Some("claims-leases"));
        assert_eq!(summary.passed, 0);
        assert_eq!(summary.failed, lease);
        assert_eq!(summary.skipped, super::scenarios().len() as u64 - lease);
        assert!(summary.has_failed());
    }

    #[test]
    fn a_filter_runs_only_the_scenarios_it_names() {
        let args = super::Arguments::from_iter([
            "tck",
            "--format",
            "json",
            "--exact",
            "lease_first_acquisition",
        ]);
        let summary = super::run_suite_with(&args, || async {
            super::Subject::new(Pretender(Capabilities::NONE))
        });
        assert_eq!(summary.skipped, 1);
        assert_eq!(summary.filtered_out, super::scenarios().len() as u64 - 1);
    }
}
