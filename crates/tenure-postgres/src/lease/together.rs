//! What the statements that answer carried requests together, before `request_leases_v1`,
//! have in common: the renewal statement for many ([`renewals`](super::renewals)) and the kept
//! standbys' read ([`kept`](super::kept)).
//!
//! Each such statement takes some of a load's requests as four arrays (names, owners,
//! priorities, ttls) and answers one row per request it decided: the answer (an anonymous row
//! with the fields of `<prefix>lease_outcome_v1`), then the request's place in the arrays (from
//! 1). Here: the arrays sent, the rows placed, the carried requests told their answers, and
//! what is left handed back for `request_leases_v1`, in its order.

use crate::connection::{Checkout, Driver, Param, Sql};
use crate::decode;
use crate::error::Failure;

use super::carpool::{Carried, Load, Outcome};

/// `load`'s requests, its own first.
pub(super) fn requests<R>(load: &Load<R>) -> impl Iterator<Item = &Carried> {
    std::iter::once(&load.own).chain(load.others.iter().map(|(r, _)| r))
}

/// What the statement left to decide.
pub(super) struct Left<R> {
    /// The own request's answer, if it was decided.
    pub(super) own: Option<R>,
    /// The requests it did not decide, the own one among them unless decided.
    pub(super) load: Load<R>,
}

/// Sends `sql` (named `what` in errors and logs; with `clock`, in tests) for the requests of
/// `load` at the places `sent` (0 for its own, then each carried one's from 1, ascending),
/// tells each decided carried request its answer, and gives back what is left. A statement
/// refused as a whole (in autocommit: nothing written) leaves everything; a call whose outcome
/// is unknown fails every request, as the carrying call's failure does.
pub(super) async fn answer<D: Driver>(
    connection: &mut Checkout<'_, D>,
    (sql, what): (&Sql, &str),
    clock: Option<i64>,
    load: Load<D::Row>,
    sent: Vec<usize>,
) -> Result<Left<D::Row>, (Failure, Load<D::Row>)> {
    if sent.is_empty() {
        return Ok(Left { own: None, load });
    }
    let all: Vec<&Carried> = requests(&load).collect();
    let picked = || sent.iter().map(|&i| all[i]);
    let names: Vec<&str> = picked().map(|r| r.lease_name.as_str()).collect();
    let owners: Vec<&str> = picked().map(|r| r.owner.as_str()).collect();
    let priorities: Vec<i64> = picked().map(|r| r.priority).collect();
    let ttls: Vec<i64> = picked().map(|r| r.ttl_micros).collect();
    let params = [
        Param::TextRefs(&names),
        Param::TextRefs(&owners),
        Param::Int8s(&priorities),
        Param::Int8s(&ttls),
        Param::Int8(clock.unwrap_or_default()),
    ];
    let params = &params[..4 + usize::from(clock.is_some())];
    let rows = match connection.query(sql, params).await {
        Ok(rows) => rows,
        Err(e @ Failure::Server { .. }) if !e.connection_broken() => {
            tracing::debug!(target: "tenure_postgres", statement = what, error = ?e.server_message(), "refused for the requests together; request_leases_v1 decides them");
            return Ok(Left { own: None, load });
        }
        Err(e) => return Err((e, load)),
    };
    // Each row's place in `load`, checked before anyone is told: a row that cannot be placed
    // is an answer whose request is unknown.
    let mut decided = Vec::with_capacity(rows.len());
    for row in rows {
        let place = decode::get::<i64>(&row, 1, "the answer's place")
            .ok()
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| sent.get(i).copied());
        match place {
            Some(place) if !decided.iter().any(|&(p, _)| p == place) => {
                decided.push((place, row));
            }
            _ => {
                let why = format!("{what} answered a row that no request it was sent matches");
                return Err((Failure::Driver(why.into()), load));
            }
        }
    }
    Ok(split(load, decided))
}

/// Tells the carried requests among `decided` (places in `load`, and their answers) their
/// answers, and gives back the rest.
fn split<R>(load: Load<R>, mut decided: Vec<(usize, R)>) -> Left<R> {
    decided.sort_unstable_by_key(|&(place, _)| place);
    let mut decided = decided.into_iter().peekable();
    let own = decided
        .next_if(|&(place, _)| place == 0)
        .map(|(_, row)| row);
    let mut others = Vec::with_capacity(load.others.len());
    for (place, passenger) in (1..).zip(load.others) {
        match decided.next_if(|&(p, _)| p == place) {
            Some((_, row)) => {
                let _ = passenger.1.send(Outcome::Answered(row));
            }
            None => others.push(passenger),
        }
    }
    Left {
        own,
        load: Load {
            own: load.own,
            others,
        },
    }
}

/// A load for the unit tests: its own request and one carried request per further name (all
/// holders'), and the carried ones' answers.
#[cfg(test)]
pub(super) fn load_of(
    names: &[&str],
) -> (Load<u32>, Vec<tokio::sync::oneshot::Receiver<Outcome<u32>>>) {
    let request = |lease_name: &str| Carried {
        lease_name: lease_name.to_owned(),
        owner: "owner".to_owned(),
        priority: 0,
        ttl_micros: 3_000_000,
        seen: [0; 3],
        held: true,
    };
    let (others, answers) = names[1..]
        .iter()
        .map(|name| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            ((request(name), tx), rx)
        })
        .unzip();
    (
        Load {
            own: request(names[0]),
            others,
        },
        answers,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decided_are_told_and_the_rest_keep_their_order() {
        let (load, mut answers) = load_of(&["a", "b", "c", "d"]);
        let left = split(load, vec![(3, 30), (0, 0), (1, 10)]);
        assert_eq!(left.own, Some(0));
        let names: Vec<_> = left
            .load
            .others
            .iter()
            .map(|(r, _)| &*r.lease_name)
            .collect();
        assert_eq!(names, ["c"]);
        assert!(matches!(answers[0].try_recv(), Ok(Outcome::Answered(10))));
        assert!(answers[1].try_recv().is_err(), "c is left, not told");
        assert!(matches!(answers[2].try_recv(), Ok(Outcome::Answered(30))));
    }
}
