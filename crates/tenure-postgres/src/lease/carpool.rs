//! Requests carried together: the standby's request that gets a turn of the standbys' lane, or
//! the renewal that gets a connection, takes the others of its kind that wait with it, in one
//! call of `request_leases_v1`
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
//! Renewals are carried the same way, with renewals only: the first renewal that checks a
//! connection out (renewals do not wait for the lane) carries the renewals that wait for one,
//! so that a renewal never waits for standbys' decisions, and the renewals of thousands of
//! leases cost the server a fraction of as many calls (203 µs of the backend's CPU per renewal
//! alone, 35 among ten).

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
    /// Whether the caller held the lease at its last answer (`request_lease_v4`, else v5).
    pub(crate) held: bool,
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
    /// Told when a call takes the request, so that its caller stops waiting for a connection.
    taken: oneshot::Sender<()>,
}

/// A waiting request's side: its ticket, where its outcome comes, and the word that a call
/// took it.
pub(crate) struct Ticket<R> {
    pub(crate) id: u64,
    pub(crate) answer: oneshot::Receiver<Outcome<R>>,
    pub(crate) taken: oneshot::Receiver<()>,
}

/// The requests a turn's holder sends: its own first, then those it carries.
pub(crate) struct Load<R> {
    pub(crate) own: Carried,
    pub(crate) others: Vec<(Carried, oneshot::Sender<Outcome<R>>)>,
}

/// The requests of one storage that wait for a connection: renewals, and standbys' requests
/// (which wait for a turn of the lane first), each carried only with its own kind, so that a
/// renewal never waits for standbys' decisions.
pub(crate) struct Carpools<R> {
    pub(crate) renewals: Carpool<R>,
    pub(crate) standbys: Carpool<R>,
}

impl<R> Default for Carpools<R> {
    fn default() -> Self {
        Carpools {
            renewals: Carpool::default(),
            standbys: Carpool::default(),
        }
    }
}

/// Requests of one kind that wait, in order of arrival.
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

    /// Adds a request that keeps its place among the patient ones for `patience`; its
    /// [`Ticket`]. Dropping the ticket's `answer` withdraws it.
    pub(crate) fn board(&self, request: Carried, patience: Duration) -> Ticket<R> {
        let (answer, receiver) = oneshot::channel();
        let (taken, taken_receiver) = oneshot::channel();
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
            taken,
        });
        Ticket {
            id,
            answer: receiver,
            taken: taken_receiver,
        }
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
                let _ = rider.taken.send(());
                others.push((rider.request, rider.answer));
            } else {
                left.push_back(rider);
            }
        }
        // Room left means every patient one was taken: what is left is out of patience.
        while others.len() + 1 < MOST_CARRIED {
            let Some(rider) = left.pop_back() else { break };
            let _ = rider.taken.send(());
            others.push((rider.request, rider.answer));
        }
        state.riders = left;
        Some(Load { own, others })
    }

    /// Takes the request with ticket `id` back, unless a call has taken it already: whether it
    /// was still waiting.
    pub(crate) fn withdraw(&self, id: u64) -> bool {
        let mut state = self.lock();
        match state.riders.iter().position(|r| r.id == id) {
            Some(at) => {
                state.riders.remove(at);
                true
            }
            None => false,
        }
    }

    /// How many requests wait (those whose callers left included until they are dropped).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn waiting(&self) -> usize {
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
            held: false,
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
        let mut a = pool.board(request("a"), PATIENCE);
        let _b = pool.board(request("b"), PATIENCE);
        let mut c = pool.board(request("c"), PATIENCE);
        let load = pool.take(c.id, Instant::now()).unwrap();
        assert_eq!(leases(&load), ["c", "a", "b"]);
        assert_eq!(pool.waiting(), 0);
        // a is told, and its request is not there for a's turn; c took its own.
        assert!(a.taken.try_recv().is_ok());
        assert!(c.taken.try_recv().is_err());
        assert!(pool.take(a.id, Instant::now()).is_none());
        assert!(!pool.withdraw(a.id));
    }

    #[test]
    fn requests_whose_callers_left_are_not_carried() {
        let pool = Carpool::<()>::default();
        let a = pool.board(request("a"), PATIENCE);
        let b = pool.board(request("b"), PATIENCE);
        drop(b);
        let load = pool.take(a.id, Instant::now()).unwrap();
        assert_eq!(leases(&load), ["a"]);
        assert_eq!(pool.waiting(), 0);
    }

    #[test]
    fn one_call_carries_at_most_its_share_and_leaves_the_rest_waiting() {
        let pool = Carpool::<()>::default();
        let tickets: Vec<_> = (0..MOST_CARRIED + 5)
            .map(|i| pool.board(request(&format!("l{i}")), PATIENCE))
            .collect();
        let load = pool.take(tickets[0].id, Instant::now()).unwrap();
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
        let _old = pool.board(request("old"), PATIENCE);
        let _later = pool.board(request("later"), PATIENCE);
        let young = pool.board(request("young"), PATIENCE * 4);
        let _young2 = pool.board(request("young2"), PATIENCE * 4);
        let load = pool.take(young.id, start + PATIENCE * 2).unwrap();
        assert_eq!(leases(&load), ["young", "young2", "later", "old"]);
    }
}
