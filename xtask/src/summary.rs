//! Reading libtest's and the conformance kit's output into counts.

use std::collections::BTreeMap;

#[derive(Default, Debug, PartialEq)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl Totals {
    /// Adds up libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; …` lines.
    pub fn parse(output: &str) -> Totals {
        let mut totals = Totals::default();
        for line in output.lines() {
            let Some(rest) = line.strip_prefix("test result: ") else {
                continue;
            };
            for part in rest.split([';', '.']) {
                let mut words = part.split_whitespace();
                if let (Some(n), Some(what)) = (words.next(), words.next()) {
                    let Ok(n) = n.parse::<u64>() else { continue };
                    match what {
                        "passed" => totals.passed += n,
                        "failed" => totals.failed += n,
                        "ignored" => totals.ignored += n,
                        _ => {}
                    }
                }
            }
        }
        totals
    }

    pub fn add(&mut self, other: &Totals) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

#[derive(Default, Debug)]
pub struct TckSummary {
    /// passed, failed, skipped per suite.
    pub by_backend: BTreeMap<String, [u64; 3]>,
}

impl TckSummary {
    /// Adds up the kit's closing lines, `tck <suite>: P passed, F failed, S skipped`, one per
    /// conformance test target (see `tenure_tck::run_suite`).
    pub fn parse(output: &str) -> TckSummary {
        let mut summary = TckSummary::default();
        for line in output.lines() {
            let Some((suite, counts)) = line
                .trim()
                .strip_prefix("tck ")
                .and_then(|rest| rest.split_once(": "))
            else {
                continue;
            };
            if suite.contains(char::is_whitespace) {
                continue;
            }
            let mut found = [None; 3];
            for part in counts.split(", ") {
                let mut words = part.split_whitespace();
                let (Some(n), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else { continue };
                let slot = match what {
                    "passed" => 0,
                    "failed" => 1,
                    "skipped" => 2,
                    _ => continue,
                };
                found[slot] = Some(n);
            }
            let [Some(passed), Some(failed), Some(skipped)] = found else {
                continue;
            };
            let entry = summary.by_backend.entry(suite.to_owned()).or_default();
            entry[0] += passed;
            entry[1] += failed;
            entry[2] += skipped;
        }
        summary
    }

    /// The same counts, the suites that `pick` chooses renamed `<suite> (<label>)`: which
    /// server a PostgreSQL suite ran against.
    pub fn labelled(self, pick: impl Fn(&str) -> bool, label: &str) -> TckSummary {
        let by_backend = self
            .by_backend
            .into_iter()
            .map(|(suite, counts)| {
                if pick(&suite) {
                    (format!("{suite} ({label})"), counts)
                } else {
                    (suite, counts)
                }
            })
            .collect();
        TckSummary { by_backend }
    }

    /// Adds another run's counts.
    pub fn merge(&mut self, other: TckSummary) {
        for (suite, counts) in other.by_backend {
            let slot = self.by_backend.entry(suite).or_default();
            for (total, n) in slot.iter_mut().zip(counts) {
                *total += n;
            }
        }
    }

    /// The scenarios reported (passed, failed or skipped) in suite `suite`, under any label of it
    /// (`postgres` counts `postgres (local server)` too, not `postgres-sqlx`).
    pub fn ran(&self, suite: &str) -> u64 {
        let labelled = format!("{suite} (");
        self.by_backend
            .iter()
            .filter(|(name, _)| *name == suite || name.starts_with(&labelled))
            .map(|(_, c)| c[0] + c[1] + c[2])
            .sum()
    }

    pub fn failed(&self) -> u64 {
        self.by_backend.values().map(|c| c[1]).sum()
    }

    pub fn print(&self) {
        if self.by_backend.is_empty() {
            println!("tck: no scenario ran");
        }
        for (suite, [passed, failed, skipped]) in &self.by_backend {
            println!("tck {suite}: {passed} passed, {failed} failed, {skipped} skipped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_libtest_lines() {
        let out = "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s\n\
                   noise\n\
                   test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.2s\n";
        assert_eq!(
            Totals::parse(out),
            Totals {
                passed: 5,
                failed: 1,
                ignored: 1
            }
        );
    }

    #[test]
    fn tck_lines_are_counted_per_suite() {
        let out = "tck memory: 2 passed, 0 failed, 0 skipped\n\
                   tck partial: 0 passed, 0 failed, 1 skipped\n\
                   thread 'x' panicked at src/lib.rs:1:\n\
                   tck postgres: 0 passed, 1 failed, 0 skipped\n";
        let summary = TckSummary::parse(out);
        assert_eq!(summary.by_backend["memory"], [2, 0, 0]);
        assert_eq!(summary.by_backend["partial"], [0, 0, 1]);
        assert_eq!(summary.by_backend["postgres"], [0, 1, 0]);
        assert_eq!(summary.failed(), 1);
    }

    #[test]
    fn postgres_suites_are_labelled_by_server_and_runs_add_up() {
        let local = TckSummary::parse(
            "tck postgres: 1 passed, 0 failed, 0 skipped\ntck memory: 1 passed, 0 failed, 0 skipped\ntck postgres-sqlx: 1 passed, 0 failed, 0 skipped\n",
        )
        .labelled(|s| s.starts_with("postgres"), "local server");
        let mut all = TckSummary::parse("tck postgres: 1 passed, 1 failed, 0 skipped\n")
            .labelled(|s| s.starts_with("postgres"), "container, PostgreSQL 17");
        all.merge(local);
        assert_eq!(all.by_backend["postgres (local server)"], [1, 0, 0]);
        assert_eq!(
            all.by_backend["postgres (container, PostgreSQL 17)"],
            [1, 1, 0]
        );
        assert_eq!(all.by_backend["memory"], [1, 0, 0]);
        assert_eq!(all.ran("postgres (container, PostgreSQL 17)"), 2);
        assert_eq!(all.ran("postgres (container, PostgreSQL 15)"), 0);
        assert_eq!(all.ran("postgres"), 3);
        assert_eq!(all.ran("postgres-sqlx (local server)"), 1);
        let skipped = TckSummary::parse("tck partial: 0 passed, 0 failed, 1 skipped\n");
        assert_eq!(
            skipped.ran("partial"),
            1,
            "a backend whose scenarios all skip did run"
        );
        assert_eq!(all.failed(), 1);
    }
}
