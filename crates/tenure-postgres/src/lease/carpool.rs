//! Requests carried together: the standby's request that gets a turn of the standbys' lane, or
//! the renewal that gets a connection, takes the others of its kind that wait with it, in one
//! call of `request_leases_v1`
//! (`migrations/0012_lease_requests_carried.sql`).
//!
//! Below capacity nobody waits, and every request is its own call, as before: a request that
//! gets its connection (and turn) at once boards nothing, and copies nothing (`Way::start` in
//! the parent module). Past about
//! three quarters of the server's capacity, standbys' requests queue in the lane; most of a
//! call's cost on the server is the call itself (the round trip, the statement, its
//! transaction), not its decision, so one call deciding the waiting requests costs the server
//! a fraction of what as many calls do (measured with `pgbench`: 42 µs of the backend's CPU
//! per standby's request among ten in one statement, against 140 alone). The busier the
//! server, the more each call carries: saturation instead of a queue that grows.
//!
//! The carried requests are decided by `request_lease_v4` or `_v5` one after the other,
//! exactly as separate calls in that order would be; a request whose lease's lock is held
//! elsewhere is left undecided by that call and goes on its own ([`Outcome::Alone`]), so that
//! a busy lease never holds up the others.
//!
//! Renewals are carried the same way, with renewals only: the first renewal that checks a
//! connection out (renewals do not wait for the lane) carries the renewals that wait for one,
//! so that a renewal never waits for standbys' decisions, and the renewals of thousands of
//! leases cost the server a fraction of as many calls (203 µs of the backend's CPU per renewal
//! alone, 35 among ten). Such a call first renews, in one `UPDATE`, every unchallenged holder
//! among them (12 µs of the server's time each among 64, against 33 through
//! `request_leases_v1`), and `request_leases_v1` decides only what that leaves
//! ([`renewals`](super::renewals)). Likewise, a call that carries standbys' requests first
//! answers, in one read, every one whose registration is fresh ([`kept`](super::kept)).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// The most requests one call carries, its own included.
///
/// Past capacity the calls are full, and the call's own cost (the round trip, the statement,
/// its transaction) is shared by this many requests. 64 rather than the first 32: in a 3x
/// overload of 6,000 leases (`benches/scale.rs`), alternated with 32 on the same hour, the
/// least second's goodput was higher in all four pairs (by 1 % to 37 %; the eleventh session's
/// section of `docs/benchmarks.md`). 128 measured a little higher again in two pairs, but it
/// doubles once more how long a call holds its leases' locks and how many requests one broken
/// connection fails.
pub(crate) const MOST_CARRIED: usize = 64;

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

/// A request carried by another's call, and where its outcome goes.
pub(crate) type Passenger<R> = (Carried, oneshot::Sender<Outcome<R>>);

/// The requests a connection's holder sends: its own first, then those it carries.
pub(crate) struct Load<R> {
    pub(crate) own: Carried,
    pub(crate) others: Vec<Passenger<R>>,
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

/// The waiting requests, in two queues ordered by ticket (tickets are handed out in order), so
/// that a call finds its own by bisection and takes the others from the ends: no call walks
/// the whole queue, which past capacity holds thousands.
struct State<R> {
    next_id: u64,
    /// Those that still have patience, in order of arrival.
    patient: VecDeque<Rider<R>>,
    /// Those found out of patience at the head of `patient`, in the order found (as the lane
    /// keeps them: a request with a longer patience at the head keeps those behind it among
    /// the patient until it leaves the head).
    overdue: VecDeque<Rider<R>>,
}

impl<R> Default for Carpool<R> {
    fn default() -> Self {
        Carpool {
            state: Mutex::new(State {
                next_id: 0,
                patient: VecDeque::new(),
                overdue: VecDeque::new(),
            }),
        }
    }
}

impl<R> State<R> {
    /// Takes the request with ticket `id` out, wherever it waits.
    fn remove(&mut self, id: u64) -> Option<Rider<R>> {
        for queue in [&mut self.patient, &mut self.overdue] {
            if let Ok(at) = queue.binary_search_by_key(&id, |r| r.id) {
                return queue.remove(at);
            }
        }
        None
    }

    /// Up to `room` waiting requests, each told it was taken: the patient ones in order of
    /// arrival, then those out of patience at `now`, the latest found first (as the lane serves
    /// them). Requests whose callers left are dropped on the way.
    fn take(&mut self, room: usize, now: Instant) -> Vec<Passenger<R>> {
        while let Some(rider) = self.patient.pop_front() {
            if rider.patient_until > now {
                self.patient.push_front(rider);
                break;
            }
            if !rider.answer.is_closed() {
                self.overdue.push_back(rider);
            }
        }
        let mut taken = Vec::new();
        while taken.len() < room {
            let next = match self.patient.pop_front() {
                Some(rider) => rider,
                None => match self.overdue.pop_back() {
                    Some(rider) => rider,
                    None => break,
                },
            };
            if next.answer.is_closed() {
                continue;
            }
            let _ = next.taken.send(());
            taken.push((next.request, next.answer));
        }
        taken
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
        let mut guard = self.lock();
        let state = &mut *guard;
        for queue in [&mut state.patient, &mut state.overdue] {
            while queue.front().is_some_and(|r| r.answer.is_closed()) {
                queue.pop_front();
            }
        }
        let id = state.next_id;
        state.next_id += 1;
        state.patient.push_back(Rider {
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

    /// For the holder of a connection with ticket `id`: its request and up to
    /// [`MOST_CARRIED`] − 1 others, the patient ones in order of arrival, then, if there is
    /// room, those out of patience at `now`, the latest first (as the lane serves them);
    /// `None` when another call has taken its request already. Requests whose callers left are
    /// dropped.
    pub(crate) fn take(&self, id: u64, now: Instant) -> Option<Load<R>> {
        let mut state = self.lock();
        let own = state.remove(id)?.request;
        let others = state.take(MOST_CARRIED - 1, now);
        Some(Load { own, others })
    }

    /// For a request that got a connection without waiting (it has no ticket): up to
    /// [`MOST_CARRIED`] − 1 requests that wait, as [`take`](Self::take) chooses them; none
    /// (and nothing allocated) when none waits, the common case below capacity.
    pub(crate) fn take_waiting(&self, now: Instant) -> Vec<Passenger<R>> {
        self.lock().take(MOST_CARRIED - 1, now)
    }

    /// Takes the request with ticket `id` back, unless a call has taken it already: whether it
    /// was still waiting.
    pub(crate) fn withdraw(&self, id: u64) -> bool {
        self.lock().remove(id).is_some()
    }

    /// How many requests wait (those whose callers left included until they are dropped).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn waiting(&self) -> usize {
        let state = self.lock();
        state.patient.len() + state.overdue.len()
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

    /// A pool with one request out of patience ("old") and, after it, a call's share of
    /// patient ones and one more ("last"), left after a call that took the share: "old" among
    /// the overdue, "last" among the patient; their tickets, "old" first.
    fn one_overdue_one_patient(pool: &Carpool<()>, at: Instant) -> Vec<Ticket<()>> {
        let old = pool.board(request("old"), Duration::ZERO);
        let patient = (0..MOST_CARRIED).map(|i| {
            let name = if i + 1 == MOST_CARRIED {
                "last".to_owned()
            } else {
                format!("p{i}")
            };
            pool.board(request(&name), PATIENCE)
        });
        let tickets = std::iter::once(old).chain(patient).collect();
        assert_eq!(pool.take_waiting(at).len(), MOST_CARRIED - 1);
        assert_eq!(pool.waiting(), 2);
        tickets
    }

    #[test]
    fn a_request_out_of_patience_is_found_by_its_own_call() {
        let pool = Carpool::<()>::default();
        let at = Instant::now() + Duration::from_millis(1);
        let tickets = one_overdue_one_patient(&pool, at);
        let load = pool.take(tickets[0].id, at).unwrap();
        assert_eq!(leases(&load), ["old", "last"]);
        assert_eq!(pool.waiting(), 0);
    }

    #[test]
    fn a_request_out_of_patience_can_be_withdrawn() {
        let pool = Carpool::<()>::default();
        let at = Instant::now() + Duration::from_millis(1);
        let tickets = one_overdue_one_patient(&pool, at);
        assert!(pool.withdraw(tickets[0].id));
        assert!(!pool.withdraw(tickets[0].id));
        let taken = pool.take_waiting(at);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].0.lease_name, "last");
    }

    #[test]
    fn nobody_waiting_means_nothing_taken() {
        let pool = Carpool::<()>::default();
        assert!(pool.take_waiting(Instant::now()).is_empty());
        let a = pool.board(request("a"), PATIENCE);
        assert!(pool.withdraw(a.id));
        assert!(pool.take_waiting(Instant::now()).is_empty());
    }
}
