//! The kit's test harness: every scenario as a trial of `cargo test`, skips shown as ignored.
//!
//! libtest has no run-time skip: a `#[test]` that returns early is counted as passed. The kit
//! therefore brings its own harness ([`libtest_mimic`], the same command line and output as
//! libtest): a scenario whose capability the storage lacks is reported *ignored*, with the
//! reason, in `cargo test`'s own lines and summary, and the kit closes with one line of its
//! own per suite, `tck <suite>: P passed, F failed, S skipped`.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use libtest_mimic::{Arguments, Completion, Failed, Trial};

use crate::{Scenario, Subject, scenarios};

/// What became of one scenario that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// It ran and every check held.
    Passed,
    /// The storage lacks a capability it needs (named, e.g. `` `lease` ``): it did not run.
    Skipped {
        /// The capabilities the storage lacks, as the kit prints them.
        missing: Vec<String>,
    },
}

/// The counts of one run of the suite, as the kit's closing line prints them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SuiteSummary {
    /// The suite's name: [`Subject::with_suite_name`], else the storage's name; `None` when
    /// no scenario ran (all filtered out, or only listed).
    pub suite: Option<String>,
    /// Scenarios that ran and held.
    pub passed: u64,
    /// Scenarios that failed (a check that did not hold, a failed call, a panic).
    pub failed: u64,
    /// Scenarios skipped for a capability the storage lacks, reported ignored to `cargo test`.
    pub skipped: u64,
    /// Scenarios the command line filtered out.
    pub filtered_out: u64,
}

impl SuiteSummary {
    /// The kit's closing line, `tck <suite>: P passed, F failed, S skipped`, or `None` when no
    /// scenario ran.
    pub fn line(&self) -> Option<String> {
        let suite = self.suite.as_deref()?;
        Some(format!(
            "tck {suite}: {} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        ))
    }

    /// Whether any scenario failed.
    pub fn has_failed(&self) -> bool {
        self.failed > 0
    }
}

/// The `main` of a conformance test target (`harness = false`): parses libtest's command line,
/// runs every scenario of the kit against fresh subjects from `factory`, prints the kit's
/// closing line, and returns the exit code. [`tck_suite!`](crate::tck_suite) calls it.
pub fn run_suite<F, Fut>(factory: F) -> ExitCode
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Subject>,
{
    let summary = run_suite_with(&Arguments::from_args(), factory);
    if let Some(line) = summary.line() {
        println!("{line}");
    }
    if summary.has_failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs the kit with the given command line (libtest's options: a filter, `--exact`,
/// `--ignored`, `--list`, `--test-threads`, …) and returns the counts, printing libtest's
/// lines but not the kit's closing line.
///
/// Whether a scenario is skipped is known only once its subject exists, so no scenario is
/// flagged ignored up front: `--ignored` runs none, and `--include-ignored` changes nothing.
pub fn run_suite_with<F, Fut>(args: &Arguments, factory: F) -> SuiteSummary
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Subject>,
{
    let factory = Arc::new(factory);
    let tally = Arc::new(Mutex::new(SuiteSummary::default()));
    let trials = scenarios()
        .into_iter()
        .map(|scenario| {
            let factory = Arc::clone(&factory);
            let tally = Arc::clone(&tally);
            Trial::ignorable_test(scenario.name, move || {
                let ran = catch_unwind(AssertUnwindSafe(|| run_one(scenario, &*factory)));
                let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
                match ran {
                    Ok((suite, result)) => {
                        tally.suite.get_or_insert(suite.clone());
                        match result {
                            Ok(Verdict::Passed) => {
                                tally.passed += 1;
                                Ok(Completion::Completed)
                            }
                            Ok(Verdict::Skipped { missing }) => {
                                tally.skipped += 1;
                                let noun = if missing.len() == 1 {
                                    "capability"
                                } else {
                                    "capabilities"
                                };
                                Ok(Completion::ignored_with(format!(
                                    "skipped: the storage lacks the {} {noun}",
                                    missing.join(" and ")
                                )))
                            }
                            Err(why) => {
                                tally.failed += 1;
                                Err(Failed::from(format!(
                                    "tck: failed {suite}::{}: {why}",
                                    scenario.name
                                )))
                            }
                        }
                    }
                    Err(panic) => {
                        tally.failed += 1;
                        Err(Failed::from(format!(
                            "tck: {} panicked: {}",
                            scenario.name,
                            panic_message(&*panic)
                        )))
                    }
                }
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(args, trials);
    let mut summary = tally.lock().unwrap_or_else(PoisonError::into_inner).clone();
    summary.filtered_out = conclusion.num_filtered_out;
    summary
}

/// Runs one scenario on a multi-threaded tokio runtime of its own, then the subject's
/// teardown (whatever the outcome); returns the suite's name and the verdict.
fn run_one<F, Fut>(scenario: Scenario, factory: &F) -> (String, Result<Verdict, String>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return (
                "tck".to_owned(),
                Err(format!("cannot build a tokio runtime: {err}")),
            );
        }
    };
    runtime.block_on(async move {
        let subject = factory().await;
        let suite = subject
            .suite
            .clone()
            .unwrap_or_else(|| subject.storage.name().to_owned());
        let teardown = subject
            .teardown
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let offered = subject.storage.capabilities();
        let missing: Vec<String> = scenario
            .needs
            .iter()
            .filter(|c| !offered.contains(**c))
            .map(|c| format!("`{c}`"))
            .collect();
        let result = if missing.is_empty() {
            (scenario.run)(&subject)
                .await
                .map(|()| Verdict::Passed)
                .map_err(|failure| failure.to_string())
        } else {
            Ok(Verdict::Skipped { missing })
        };
        drop(subject);
        if let Some(teardown) = teardown {
            teardown.await;
        }
        (suite, result)
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
