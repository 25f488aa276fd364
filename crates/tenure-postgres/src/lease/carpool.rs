//! Standbys' requests carried together: the request that gets a turn of the standbys' lane
//! takes the others that wait with it, in one call of `request_leases_v1`
//! (`migrations/0012_lease_requests_carried.sql`).
//!
//! Below capacity nobody waits, and every request is its own call, as before. Past about
//! three quarters of the server's capacity, standbys' requests queue in the lane; most of a
//! call's cost on the server is the call itself (the round trip, the statement, its
//! transaction), not its decision, so one call deciding the waiting requests costs the server
//! a fraction of what as many calls do (measured with `pgbench`: 42 µs of the backend's CPU
//! per standby's request among ten in one statement, against 140 alone). The busier the
//! server, the more each call carries: saturation instead of a queue that grows.
//!
//! The carried requests are decided by `request_lease_v5` one after the other, exactly as
//! separate calls in that order would be; a request whose lease's lock is held elsewhere is
//! left undecided by that call and goes on its own ([`Outcome::Alone`]), so that a busy
//! lease never holds up the others.
//!
//! Renewals are never carried: they keep their own way to a connection, ahead of the lane.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// The most requests one call carries, its own included.
pub(crate) const MOST_CARRIED: usize = 32;

/// A standby's request as the call's arrays take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Carried {
    pub(crate) lease_name: String,
    pub(crate) owner: String,
    pub(crate) priority: i64,
    pub(crate) ttl_micros: i64,
    /// The sighting: token, heartbeat, µs unchanged (see `sighting_params`).
    pub(crate) seen: [i64; 3],
}

/// What a waiting request learns from the call that carried it.
#[derive(Debug)]
pub(crate) enum Outcome<R> {
    /// Decided: the row of its answer.
    Answered(R),
    /// Not decided, nothing written for it (its lease's lock was held elsewhere, the call was
    /// refused as a whole, or no connection could be had): it goes on its own.
    Alone,
    /// The call failed with its outcome unknown (why).
    Failed(String),
}

/// One waiting request.
struct Rider<R> {
    id: u64,
    patient_until: Instant,
    request: Carried,
    answer: oneshot::Sender<Outcome<R>>,
}

/// The requests a turn's holder sends: its own first, then those it carries.
pub(crate) struct Load<R> {
    pub(crate) own: Carried,
    pub(crate) others: Vec<(Carried, oneshot::Sender<Outcome<R>>)>,
}

/// The standbys' requests that wait for a turn, in order of arrival.
pub(crate) struct Carpool<R> {
    state: Mutex<State<R>>,
}

struct State<R> {
    next_id: u64,
    riders: VecDeque<Rider<R>>,
}

impl<R> Default for Carpool<R> {
    fn default() -> Self {
        Carpool {
            state: Mutex::new(State {
                next_id: 0,
                riders: VecDeque::new(),
            }),
        }
    }
}

impl<R> Carpool<R> {
    fn lock(&self) -> MutexGuard<'_, State<R>> {
        // Nothing panics while the lock is held; a poisoned lock still holds a sound state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a request that keeps its place among the patient ones for `patience`; its ticket,
    /// and where its outcome comes if another request's call carries it. Dropping the receiver
    /// withdraws it.
    pub(crate) fn board(
        &self,
        request: Carried,
        patience: Duration,
    ) -> (u64, oneshot::Receiver<Outcome<R>>) {
        let (answer, receiver) = oneshot::channel();
        let mut state = self.lock();
        while state.riders.front().is_some_and(|r| r.answer.is_closed()) {
            state.riders.pop_front();
        }
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1);
        state.riders.push_back(Rider {
            id,
            patient_until: Instant::now() + patience,
            request,
            answer,
        });
        (id, receiver)
    }

    /// For the holder of a turn with ticket `id`: its request and up to [`MOST_CARRIED`] − 1
    /// others, the patient ones in order of arrival, then, if there is room, those out of
    /// patience at `now`, the latest first (as the lane serves them); `None` when another
    /// call has taken its request already. Requests whose callers left are dropped.
    pub(crate) fn take(&self, id: u64, now: Instant) -> Option<Load<R>> {
        let mut state = self.lock();
        let at = state.riders.iter().position(|r| r.id == id)?;
        let own = state.riders.remove(at)?.request;
        let mut others = Vec::new();
        let mut left = VecDeque::with_capacity(state.riders.len());
        for rider in state.riders.drain(..) {
            if rider.answer.is_closed() {
                continue;
            }
            if others.len() + 1 < MOST_CARRIED && rider.patient_until > now {
                others.push((rider.request, rider.answer));
            } else {
                left.push_back(rider);
            }
        }
        // Room left means every patient one was taken: what is left is out of patience.
        while others.len() + 1 < MOST_CARRIED {
            let Some(rider) = left.pop_back() else { break };
            others.push((rider.request, rider.answer));
        }
        state.riders = left;
        Some(Load { own, others })
    }

    /// How many requests wait (those whose callers left included until they are dropped).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().riders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(lease: &str) -> Carried {
        Carried {
            lease_name: lease.to_owned(),
            owner: "o".to_owned(),
            priority: 0,
            ttl_micros: 3_000_000,
            seen: [0; 3],
        }
    }

    fn leases(load: &Load<()>) -> Vec<&str> {
        std::iter::once(&load.own)
            .chain(load.others.iter().map(|(r, _)| r))
            .map(|r| r.lease_name.as_str())
            .collect()
    }

    const PATIENCE: Duration = Duration::from_millis(375);

    #[test]
    fn the_holder_carries_the_others_in_order_of_arrival() {
        let pool = Carpool::<()>::default();
        let (a, _ra) = pool.board(request("a"), PATIENCE);
        let (_b, _rb) = pool.board(request("b"), PATIENCE);
        let (c, _rc) = pool.board(request("c"), PATIENCE);
        let load = pool.take(c, Instant::now()).unwrap();
        assert_eq!(leases(&load), ["c", "a", "b"]);
        assert_eq!(pool.waiting(), 0);
        // Carried by c's call, a's request is not there for a's turn.
        assert!(pool.take(a, Instant::now()).is_none());
    }

    #[test]
    fn requests_whose_callers_left_are_not_carried() {
        let pool = Carpool::<()>::default();
        let (a, _ra) = pool.board(request("a"), PATIENCE);
        let (_b, rb) = pool.board(request("b"), PATIENCE);
        drop(rb);
        let load = pool.take(a, Instant::now()).unwrap();
        assert_eq!(leases(&load), ["a"]);
        assert_eq!(pool.waiting(), 0);
    }

    #[test]
    fn one_call_carries_at_most_its_share_and_leaves_the_rest_waiting() {
        let pool = Carpool::<()>::default();
        let tickets: Vec<_> = (0..MOST_CARRIED + 5)
            .map(|i| pool.board(request(&format!("l{i}")), PATIENCE))
            .collect();
        let load = pool.take(tickets[0].0, Instant::now()).unwrap();
        assert_eq!(load.others.len(), MOST_CARRIED - 1);
        assert_eq!(pool.waiting(), 5);
        assert_eq!(
            leases(&load)[MOST_CARRIED - 1],
            format!("l{}", MOST_CARRIED - 1)
        );
    }

    #[test]
    fn out_of_patience_requests_ride_only_where_there_is_room_the_latest_first() {
        let pool = Carpool::<()>::default();
        let start = Instant::now();
        let (_old, _r1) = pool.board(request("old"), PATIENCE);
        let (_older, _r2) = pool.board(request("later"), PATIENCE);
        let (young, _r3) = pool.board(request("young"), PATIENCE * 4);
        let (_y2, _r4) = pool.board(request("young2"), PATIENCE * 4);
        let load = pool.take(young, start + PATIENCE * 2).unwrap();
        assert_eq!(leases(&load), ["young", "young2", "later", "old"]);
    }
}
