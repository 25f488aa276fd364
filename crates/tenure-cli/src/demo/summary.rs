//! The closing table, and the checks that make the demo a test of itself.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::bail;

use super::narrator::Narrator;
use super::orders::{Delivery, Downstream, describe};

/// What the story arranged, for the checks to compare with what happened.
pub struct Expected {
    /// Every order the shop placed.
    pub placed: Vec<u64>,
    /// The orders of the batch dispatched just before the crash, never bookmarked.
    pub crashed_batch: Vec<u64>,
    /// The orders the frozen zombie held.
    pub zombie_batch: Vec<u64>,
}

/// Prints the summary and checks it: tokens, tenures, every order dispatched, repeats only
/// where the story explains them, and nothing accepted from a fenced zombie.
pub fn summary(n: &Narrator, downstream: &Downstream, expected: &Expected) -> anyhow::Result<()> {
    let tenures = n.tenures();
    let accepted = downstream.accepted();
    let rejected = downstream.rejected();
    let mut text = String::from(
        "\nSummary\n  token  leader      from      until     how it ended                dispatched\n",
    );
    for t in &tenures {
        let until = t.until.map_or_else(|| "-".to_owned(), secs);
        let dispatched: Vec<u64> = accepted
            .iter()
            .filter(|d| d.token == t.token)
            .flat_map(numbers)
            .collect();
        let _ = writeln!(
            text,
            "  {:>5}  {:<10}  {:>8}  {:>8}  {:<26}  {}",
            t.token,
            t.owner,
            secs(t.from),
            until,
            t.ended,
            describe(&dispatched)
        );
    }
    let mut say = |paragraph: String| text.push_str(&wrap(&paragraph));
    say(format!(
        "The shop placed {} orders; the downstream accepted {} batches and rejected {}.",
        expected.placed.len(),
        accepted.len(),
        rejected.len()
    ));

    // 1. Every order placed was dispatched.
    let dispatched: BTreeSet<u64> = accepted.iter().flat_map(numbers).collect();
    let missing: Vec<u64> = expected
        .placed
        .iter()
        .copied()
        .filter(|n| !dispatched.contains(n))
        .collect();
    say(if missing.is_empty() {
        format!(
            "Checked: every order placed ({}) was dispatched at least once.",
            describe(&expected.placed)
        )
    } else {
        format!("NOT dispatched: {}.", describe(&missing))
    });

    // 2. Which were dispatched more than once, and why.
    let repeats = repeats(&accepted);
    let repeated: Vec<u64> = repeats.iter().flat_map(|r| r.orders.clone()).collect();
    if repeats.is_empty() {
        say("Dispatched more than once: none; every batch was bookmarked in time.".into());
    }
    for r in &repeats {
        let ended = tenures
            .iter()
            .find(|t| t.token == r.first_token)
            .map_or("ended", |t| t.ended);
        let why = if ended == "crashed" {
            "which crashed".to_owned()
        } else {
            format!("whose tenure ended ({ended})")
        };
        say(format!(
            "Dispatched twice: {}, by {} with token {}, {why} before bookmarking them, and \
             again by {} with token {}, which resumed after the last bookmark. Delivery is at \
             least once: a batch dispatched but not bookmarked is dispatched again by the next \
             leader.",
            describe(&r.orders),
            r.first_by,
            r.first_token,
            r.again_by,
            r.again_token,
        ));
    }

    // 3. Nothing accepted from a fenced zombie: each accepted batch carried the token of
    //    the newest tenure at the moment it was accepted.
    let stale: Vec<&Delivery> = accepted
        .iter()
        .filter(|d| {
            let at = n.time_of(d.at);
            let current = tenures.iter().rev().find(|t| t.from <= at);
            current.is_none_or(|t| t.token != d.token || t.owner != d.who)
        })
        .collect();
    let zombie_rejected = matches!(rejected.as_slice(), [r] if r.orders == expected.zombie_batch);
    for d in &stale {
        say(format!(
            "ACCEPTED from a superseded tenure: {}'s batch of {} (token {}) at {}.",
            d.who,
            describe(&numbers(d)),
            d.token,
            secs(n.time_of(d.at))
        ));
    }
    if stale.is_empty() {
        let zombie = match rejected.as_slice() {
            [r] => format!(
                "; {}'s late batch ({}, token {}) was rejected, token {} having been accepted",
                r.who,
                describe(&r.orders),
                r.stale,
                r.current
            ),
            _ => format!("; but {} batches were rejected, not one", rejected.len()),
        };
        say(format!(
            "Checked: no order was dispatched by a fenced zombie. Every batch accepted carried \
             the token of the leader at the time{zombie}."
        ));
    }

    // 4. The tenures themselves.
    let tokens: Vec<u64> = tenures.iter().map(|t| t.token).collect();
    let consecutive = tokens.windows(2).all(|w| w[1] == w[0] + 1) && tokens.first() == Some(&1);
    let disjoint = tenures
        .windows(2)
        .all(|w| w[0].until.is_some_and(|until| until <= w[1].from));
    let ordered = accepted.windows(2).all(|w| w[0].token <= w[1].token);
    say(format!(
        "Checked: {} tenures, tokens {}; no two overlapped; writes in token order.",
        tenures.len(),
        tokens
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    n.text(&text);

    let mut crashed = expected.crashed_batch.clone();
    crashed.sort_unstable();
    let explained = repeated == crashed && repeats.len() == 1;
    if !(missing.is_empty()
        && explained
        && stale.is_empty()
        && zombie_rejected
        && consecutive
        && disjoint
        && ordered
        && tenures.len() == 5)
    {
        bail!(
            "the story went wrong: missing orders {missing:?}; repeated {repeated:?} \
             (expected {crashed:?}); {} batches accepted from superseded tenures; zombie \
             rejected: {zombie_rejected}; tokens {tokens:?} (consecutive: {consecutive}); \
             disjoint tenures: {disjoint}; ordered writes: {ordered}",
            stale.len()
        );
    }
    Ok(())
}

/// Orders dispatched twice, grouped by the two batches that dispatched them.
struct Repeat {
    orders: Vec<u64>,
    first_by: String,
    first_token: u64,
    again_by: String,
    again_token: u64,
}

fn repeats(accepted: &[Delivery]) -> Vec<Repeat> {
    let mut first: BTreeMap<u64, &Delivery> = BTreeMap::new();
    let mut groups: Vec<Repeat> = Vec::new();
    for d in accepted {
        for number in numbers(d) {
            let Some(earlier) = first.get(&number) else {
                first.insert(number, d);
                continue;
            };
            let same = groups.iter_mut().find(|g| {
                g.first_token == earlier.token
                    && g.first_by == earlier.who
                    && g.again_token == d.token
                    && g.again_by == d.who
            });
            match same {
                Some(group) => group.orders.push(number),
                None => groups.push(Repeat {
                    orders: vec![number],
                    first_by: earlier.who.clone(),
                    first_token: earlier.token,
                    again_by: d.who.clone(),
                    again_token: d.token,
                }),
            }
        }
    }
    groups
}

fn numbers(delivery: &Delivery) -> Vec<u64> {
    delivery.orders.iter().map(|o| o.number).collect()
}

/// A paragraph of the summary, wrapped to fit 88 columns: its first line indented by two
/// spaces, the others by four.
fn wrap(paragraph: &str) -> String {
    const WIDTH: usize = 88;
    let mut text = String::from("  ");
    let mut line = 2;
    for (i, word) in paragraph.split_whitespace().enumerate() {
        let width = word.chars().count();
        if i > 0 && line + 1 + width > WIDTH {
            text.push_str("\n    ");
            line = 4;
        } else if i > 0 {
            text.push(' ');
            line += 1;
        }
        text.push_str(word);
        line += width;
    }
    text.push('\n');
    text
}

pub fn secs(duration: Duration) -> String {
    format!("{:.3}s", duration.as_secs_f64())
}

/// A handover's duration: in milliseconds below a second (as a wake-up makes it), else as
/// [`secs`].
pub fn short(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
    } else {
        secs(duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    use tenure_ports::EventPosition;

    use crate::demo::orders::Order;

    fn delivery(who: &str, token: u64, numbers: &[u64]) -> Delivery {
        Delivery {
            who: who.to_owned(),
            token,
            orders: numbers
                .iter()
                .map(|&number| Order {
                    number,
                    position: EventPosition::new(number).unwrap(),
                })
                .collect(),
            at: Instant::now(),
        }
    }

    #[test]
    fn repeats_are_grouped_by_the_two_batches_that_dispatched_them() {
        let accepted = [
            delivery("c", 2, &[7, 8]),
            delivery("c", 2, &[9, 10]),
            delivery("a", 3, &[9, 10, 11]),
        ];
        let found = repeats(&accepted);
        assert_eq!(found.len(), 1);
        let r = &found[0];
        assert_eq!(r.orders, vec![9, 10]);
        assert_eq!((r.first_by.as_str(), r.first_token), ("c", 2));
        assert_eq!((r.again_by.as_str(), r.again_token), ("a", 3));
        assert!(repeats(&[delivery("a", 1, &[1]), delivery("a", 1, &[2])]).is_empty());
    }

    #[test]
    fn paragraphs_wrap_at_88_columns() {
        let words = "word ".repeat(40);
        let text = wrap(&words);
        assert!(text.starts_with("  word"));
        assert!(text.lines().all(|l| l.chars().count() <= 88));
        assert!(text.lines().skip(1).all(|l| l.starts_with("    word")));
        assert_eq!(text.split_whitespace().count(), 40);
    }
}
