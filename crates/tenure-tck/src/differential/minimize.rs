//! Shrinking a failing case further than proptest does.

use proptest::test_runner::TestCaseError;

use super::play::Failure;
use super::{Case, Step};

/// Replays beyond this many are not tried: the case found so far is reported.
const MINIMIZE_REPLAYS: usize = 5_000;

/// Makes a failing `case` (as proptest shrank it) as small as plain edits can: cut after the
/// failing step, drop single steps, then pairs and triples of steps, merge adjacent clock
/// moves, for as long as the case still fails. Proptest's shrinking stops at a local minimum
/// that depends on the random case it started from (a redundant renewal kept, a clock move
/// split in two); the case reported is then 3-minimal: without any one, two or three of its
/// steps, it passes. `fails` replays a case; `Err` when even the case given no longer fails.
pub(super) fn minimize(
    case: Case,
    mut fails: impl FnMut(&Case) -> Option<Failure>,
) -> Result<(Case, Failure), String> {
    let mut failing =
        |candidate: &Case| fails(candidate).filter(|f| matches!(f.error, TestCaseError::Fail(_)));
    let mut replays = 1;
    let Some(mut failure) = failing(&case) else {
        return Err(
            "the case proptest reported failing passes when played again: the system \
                    under test does not decide the same way twice"
                .into(),
        );
    };
    let mut case = case;
    loop {
        if let Some(step) = failure.step {
            case.steps.truncate(step + 1);
        }
        let mut smaller = None;
        for edit in edits(&case) {
            if replays >= MINIMIZE_REPLAYS {
                break;
            }
            replays += 1;
            if let Some(f) = failing(&edit) {
                smaller = Some((edit, f));
                break;
            }
        }
        match smaller {
            Some((edit, f)) => (case, failure) = (edit, f),
            None => return Ok((case, failure)),
        }
    }
}

/// The cases one edit smaller than `case`, smallest edits first: each single step removed
/// (from the last), each pair, each three steps, each two adjacent clock moves merged into one.
fn edits(case: &Case) -> impl Iterator<Item = Case> + '_ {
    let n = case.steps.len();
    let without = move |drop: &[usize]| {
        let mut smaller = case.clone();
        smaller.steps = (0..n)
            .filter(|i| !drop.contains(i))
            .map(|i| case.steps[i].clone())
            .collect();
        smaller
    };
    let singles = (0..n).rev().map(move |i| without(&[i]));
    let pairs = (0..n)
        .rev()
        .flat_map(move |j| (0..j).rev().map(move |i| (i, j)))
        .map(move |(i, j)| without(&[i, j]));
    let triples = (0..n)
        .rev()
        .flat_map(move |k| (0..k).rev().map(move |j| (j, k)))
        .flat_map(move |(j, k)| (0..j).rev().map(move |i| [i, j, k]))
        .map(move |drop| without(&drop));
    let merges = (1..n).filter_map(move |i| match (&case.steps[i - 1], &case.steps[i]) {
        (Step::Advance { micros: a }, Step::Advance { micros: b }) => {
            let mut merged = without(&[i]);
            merged.steps[i - 1] = Step::Advance {
                micros: a.saturating_add(*b),
            };
            Some(merged)
        }
        _ => None,
    });
    singles
        .chain(pairs)
        .chain(triples)
        .chain(merges)
        .filter(|c| !c.steps.is_empty())
}

#[cfg(test)]
mod tests {
    use tenure_ports::domain::MIN_TTL;

    use super::super::play::fail;
    use super::*;

    fn advance(micros: i64) -> Step {
        Step::Advance { micros }
    }

    fn request(owner: usize) -> Step {
        Step::Request {
            owner,
            priority: None,
            ttl: MIN_TTL,
        }
    }

    /// Fails at the first step where the clock has moved 10 µs or more since owner 0's release.
    fn after_a_release(case: &Case) -> Option<Failure> {
        let mut moved = None;
        for (i, step) in case.steps.iter().enumerate() {
            match *step {
                Step::Release { owner: 0 } => moved = Some(0),
                Step::Advance { micros } => moved = moved.map(|m| m + micros),
                _ => {}
            }
            if moved.is_some_and(|m| m >= 10) {
                return Some(Failure {
                    step: Some(i),
                    error: fail(format!("step {i}")),
                });
            }
        }
        None
    }

    #[test]
    fn minimize_cuts_after_the_failure_drops_what_is_not_needed_and_merges_clock_moves() {
        let case = Case {
            start: 0,
            priorities: vec![0, 0],
            steps: vec![
                request(0),
                advance(4),
                Step::Release { owner: 0 },
                request(1),
                advance(6),
                advance(5),
                request(1),
            ],
        };
        let Ok((minimal, failure)) = minimize(case, after_a_release) else {
            panic!("a failing case was not minimized");
        };
        assert_eq!(minimal.steps, [Step::Release { owner: 0 }, advance(11)]);
        assert_eq!(failure.step, Some(1));
    }

    #[test]
    fn minimize_refuses_a_case_that_passes_when_played_again() {
        let case = Case {
            start: 0,
            priorities: vec![0, 0],
            steps: vec![request(0)],
        };
        let Err(reason) = minimize(case, after_a_release) else {
            panic!("a passing case was reported minimal");
        };
        assert!(
            reason.contains("does not decide the same way twice"),
            "{reason}"
        );
    }
}
