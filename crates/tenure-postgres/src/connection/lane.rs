//! The yielding lane: turns to check a connection out, for the calls that yield to renewals
//! (standbys' requests). Two rules, each measured with `cargo bench --bench scale`
//! (`docs/benchmarks.md`, 2026-12-05):
//!
//! 1. **Order of arrival, until a waiter runs out of patience** (an eighth of its ttl); then
//!    it goes behind every waiter that has not, the last found first. A caller waits for its
//!    answer for a bounded time (`LeaderElector` for half a poll, a sixth of the ttl with its
//!    defaults) and then gives up. Past capacity, a queue served in order of arrival grows
//!    until every call in it waits longer than its caller does: the turns go to calls whose
//!    callers are about to leave (or have left with their statement in flight, which the
//!    server still runs), and goodput falls with the offered load instead of staying at
//!    capacity. Served as here, the turns go to calls that still have time, and the overdue
//!    ones wait until nobody else does or until their callers give up, which costs the server
//!    nothing: they never took a connection. Below capacity nobody runs out of patience.
//! 2. **Established contenders before newcomers.** A contender that has had an answer about
//!    its lease (it has a sighting) stands by at little cost, its registration kept, or
//!    refreshed without waiting for a flush of the log; a newcomer's first call may create the
//!    lease record, which waits for its flush, holding its connection meanwhile. When a deploy
//!    starts thousands of contenders at once, their first calls held the lane's turns through
//!    those flushes while the established standbys' calls timed out behind them: in the
//!    surge's first second, the lane served 1,300 to 2,500 calls, against 6,000 a second
//!    before it (with the server's flushes switched off, for the diagnosis only, it kept up).
//!    Newcomers get the turns the established ones leave, and back off in `LeaderElector` when
//!    they time out; once answered, they are established.
//!
//! Orders tried and dropped: newest first as soon as the queue had not emptied for 50 ms or
//! 200 ms (adaptive LIFO) kept goodput at twice the sustained load, but near capacity the
//! queue rarely empties, and its oldest waiters were left without a turn until their callers
//! gave up; a patience of a twelfth of the ttl (half the elector's call bound) failed calls
//! that a short stall had delayed past it, which order of arrival answers in time; and
//! newcomers leaving two turns to established contenders (to keep them answered at three
//! times the sustained load) did not keep them answered any better there, and the 3,000-lease
//! step, a cold start in which every contender is a newcomer, was sustained in 1 run of 4
//! with it, 2 of 3 without.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A request's patience as a share of its lease's ttl: an eighth, three quarters of
/// `LeaderElector`'s default call bound (half a poll of a third of the ttl), so that a call
/// served before it runs out still has time to be answered.
pub(crate) const PATIENCE_PER_TTL: u32 = 8;

/// The patience of a request for a lease of `ttl`: an eighth of the ttl
/// ([`PATIENCE_PER_TTL`]).
///
/// Not shortened to fit a storage whose call timeout is shorter: such a storage's calls end at
/// its own bound before they run out of patience, so they keep the order of arrival. Serving
/// them by time left instead gives turns to calls with less time than a round trip, which are
/// then abandoned with their statement in flight, and the sqlx driver closes such a
/// connection: with a call timeout of 1 ms (`tests/overload.rs`), 53 sessions were opened for
/// a pool of 4, against 5 in order of arrival.
pub(crate) fn patience(ttl: Duration) -> Duration {
    ttl / PATIENCE_PER_TTL
}

/// A counted set of turns, handed to waiters as the module docs say.
pub(crate) struct Lane {
    queue: Mutex<Queue>,
}

/// One waiter: until when it keeps its place in the order of arrival, and where its turn goes
/// (closed once it left).
struct Waiter {
    patient_until: Instant,
    turn: oneshot::Sender<()>,
}

/// Whether a waiter is an established contender or a newcomer (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// A contender that has had an answer about its lease before.
    Established,
    /// A contender's first call about its lease (as far as this storage knows).
    Newcomer,
}

impl Standing {
    fn index(self) -> usize {
        match self {
            Standing::Established => 0,
            Standing::Newcomer => 1,
        }
    }
}

/// The lane's state.
struct Queue {
    /// Turns not taken.
    free: usize,
    /// The waiters that still have patience, by [`Standing::index`] (established first), each
    /// in order of arrival.
    patient: [VecDeque<Waiter>; 2],
    /// The waiters found out of patience at the head of `patient`, by standing, in the order
    /// found.
    overdue: [VecDeque<Waiter>; 2],
}

impl Queue {
    /// A lane of `turns` free turns.
    fn new(turns: usize) -> Self {
        Queue {
            free: turns,
            patient: [VecDeque::new(), VecDeque::new()],
            overdue: [VecDeque::new(), VecDeque::new()],
        }
    }

    /// Adds a waiter, dropping the oldest ones that left.
    fn push(&mut self, waiter: Waiter, standing: Standing) {
        for queue in self.patient.iter_mut().chain(self.overdue.iter_mut()) {
            while queue.front().is_some_and(|w| w.turn.is_closed()) {
                queue.pop_front();
            }
        }
        self.patient[standing.index()].push_back(waiter);
    }

    /// Hands a turn given back at `now` over: to the oldest established waiter that still has
    /// patience, else to the oldest such newcomer, else to the overdue one found last (an
    /// established one first); keeps it when nobody waits.
    fn give_back(&mut self, now: Instant) {
        for (patient, overdue) in self.patient.iter_mut().zip(self.overdue.iter_mut()) {
            while patient.front().is_some_and(|w| w.patient_until <= now) {
                if let Some(waiter) = patient.pop_front() {
                    overdue.push_back(waiter);
                }
            }
        }
        loop {
            let next = self
                .patient
                .iter_mut()
                .find_map(VecDeque::pop_front)
                .or_else(|| self.overdue.iter_mut().find_map(VecDeque::pop_back));
            let Some(waiter) = next else {
                self.free += 1;
                return;
            };
            // A waiter that left has its receiver dropped: the turn goes to the next one.
            if waiter.turn.send(()).is_ok() {
                return;
            }
        }
    }
}

impl Lane {
    /// A lane of `turns` turns.
    pub(crate) fn new(turns: usize) -> Self {
        Lane {
            queue: Mutex::new(Queue::new(turns)),
        }
    }

    /// How many callers wait for a turn (those that left not counted).
    #[cfg(feature = "testing")]
    pub(crate) fn waiting(&self) -> usize {
        let queue = self.lock();
        queue
            .patient
            .iter()
            .chain(queue.overdue.iter())
            .flatten()
            .filter(|w| !w.turn.is_closed())
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while the lock is held; a poisoned lock still holds a sound state.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a turn, as a waiter of `standing` that keeps its place in the order of arrival
    /// for `patience`; the turn is given back when the returned [`Turn`] is dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a waiter dropped before its turn came leaves the queue, and one dropped
    /// after its turn was handed to it (but before it saw it) gives the turn back.
    pub(crate) async fn turn(&self, standing: Standing, patience: Duration) -> Turn<'_> {
        loop {
            let receiver = {
                let mut queue = self.lock();
                if queue.free > 0 {
                    queue.free -= 1;
                    return Turn { lane: self };
                }
                let (turn, receiver) = oneshot::channel();
                let waiter = Waiter {
                    patient_until: Instant::now() + patience,
                    turn,
                };
                queue.push(waiter, standing);
                receiver
            };
            let mut waiting = Waiting {
                lane: self,
                receiver: Some(receiver),
            };
            let handed = match waiting.receiver.as_mut() {
                Some(receiver) => receiver.await.is_ok(),
                None => false,
            };
            // Seen: nothing left to give back when `waiting` drops.
            waiting.receiver = None;
            if handed {
                return Turn { lane: self };
            }
            // The sender was dropped without a turn (not done by the lane): wait again.
        }
    }

    /// Gives a turn back.
    fn give_back(&self) {
        self.lock().give_back(Instant::now());
    }
}

/// A turn of a [`Lane`], given back when dropped.
pub(crate) struct Turn<'a> {
    lane: &'a Lane,
}

impl Turn<'_> {
    /// Keeps the turn taken past this value, for [`Lane::taken_over`] to make its next holder
    /// (a call that goes on in a task of its own, see [`Detached`](super::Detached)).
    pub(crate) fn keep(self) {
        std::mem::forget(self);
    }
}

impl Lane {
    /// The holder of a turn kept with [`Turn::keep`]; exactly one per kept turn.
    pub(crate) fn taken_over(&self) -> Turn<'_> {
        Turn { lane: self }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.lane.give_back();
    }
}

/// A waiter in the queue; if dropped with a turn handed to it but not seen, gives it back.
struct Waiting<'a> {
    lane: &'a Lane,
    receiver: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut receiver) = self.receiver.take() {
            // Closed first: no turn can be handed over after this; then one handed before is
            // seen here.
            receiver.close();
            if receiver.try_recv().is_ok() {
                self.lane.give_back();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    const PATIENCE: Duration = Duration::from_millis(375);

    fn waiters(queue: &mut Queue, n: usize, at: Instant) -> Vec<oneshot::Receiver<()>> {
        waiters_of(Standing::Established, queue, n, at)
    }

    fn waiters_of(
        standing: Standing,
        queue: &mut Queue,
        n: usize,
        at: Instant,
    ) -> Vec<oneshot::Receiver<()>> {
        (0..n)
            .map(|_| {
                let (turn, receiver) = oneshot::channel();
                let patient_until = at + PATIENCE;
                queue.push(
                    Waiter {
                        patient_until,
                        turn,
                    },
                    standing,
                );
                receiver
            })
            .collect()
    }

    fn handed(receivers: &mut [oneshot::Receiver<()>]) -> Vec<usize> {
        receivers
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| r.try_recv().is_ok().then_some(i))
            .collect()
    }

    /// A lane of 7 turns, every one taken by an established contender.
    fn busy() -> Queue {
        let mut queue = Queue::new(7);
        queue.free = 0;
        queue
    }

    #[test]
    fn a_kept_turn_is_given_back_by_its_next_holder_only() {
        let lane = Lane::new(1);
        let mut next = pin!(lane.turn(Standing::Established, PATIENCE));
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(turn) = next.as_mut().poll(&mut cx) else {
            panic!("a free turn was not taken at once");
        };
        turn.keep();
        let mut waiter = pin!(lane.turn(Standing::Established, PATIENCE));
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
        drop(lane.taken_over());
        assert!(waiter.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn the_patience_is_an_eighth_of_the_ttl() {
        assert_eq!(patience(Duration::from_secs(3)), PATIENCE);
    }

    #[test]
    fn patient_waiters_are_served_in_order_of_arrival() {
        let start = Instant::now();
        let mut queue = busy();
        let mut receivers = waiters(&mut queue, 3, start);
        queue.give_back(start + PATIENCE / 2);
        assert_eq!(handed(&mut receivers), [0]);
        queue.give_back(start + PATIENCE / 2);
        assert_eq!(handed(&mut receivers), [1]);
    }

    #[test]
    fn overdue_waiters_go_behind_patient_ones_the_last_found_first() {
        let start = Instant::now();
        let mut queue = busy();
        let mut old = waiters(&mut queue, 2, start);
        let mut young = waiters(&mut queue, 2, start + PATIENCE);
        let now = start + PATIENCE + PATIENCE / 2;
        queue.give_back(now);
        assert_eq!(handed(&mut young), [0]);
        queue.give_back(now);
        assert_eq!(handed(&mut young), [1]);
        assert_eq!(handed(&mut old), Vec::<usize>::new());
        queue.give_back(now);
        assert_eq!(handed(&mut old), [1]);
        queue.give_back(now);
        assert_eq!(handed(&mut old), [0]);
        // Nobody left: the next turn is kept.
        queue.give_back(now);
        assert_eq!(queue.free, 1);
    }

    #[test]
    fn established_waiters_go_before_newcomers_until_they_run_out_of_patience() {
        let start = Instant::now();
        let mut queue = busy();
        let mut newcomers = waiters_of(Standing::Newcomer, &mut queue, 2, start);
        let mut established = waiters(&mut queue, 1, start + PATIENCE / 2);
        queue.give_back(start + PATIENCE / 2);
        assert_eq!(handed(&mut established), [0]);
        queue.give_back(start + PATIENCE / 2);
        assert_eq!(handed(&mut newcomers), [0]);
        // Out of patience, an established waiter goes behind a newcomer that is not.
        let mut late = waiters(&mut queue, 1, start);
        let mut young = waiters_of(Standing::Newcomer, &mut queue, 1, start + PATIENCE);
        queue.give_back(start + PATIENCE);
        assert_eq!(handed(&mut young), [0]);
        queue.give_back(start + PATIENCE);
        queue.give_back(start + PATIENCE);
        assert_eq!(handed(&mut late), [0]);
        assert_eq!(handed(&mut newcomers), [1]);
    }

    #[test]
    fn a_turn_skips_waiters_that_left() {
        let start = Instant::now();
        let mut queue = busy();
        let mut receivers = waiters(&mut queue, 3, start);
        drop(receivers.remove(0));
        queue.give_back(start);
        assert_eq!(handed(&mut receivers), [0]);
        // Waiters that left at the head are dropped as new ones come.
        drop(receivers);
        let _more = waiters(&mut queue, 1, start);
        assert_eq!(queue.patient[0].len(), 1);
    }

    fn poll<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_waiter_dropped_after_its_turn_came_gives_it_back() {
        let lane = Lane::new(1);
        let held = pin!(lane.turn(Standing::Established, PATIENCE));
        let Poll::Ready(held) = poll(held) else {
            panic!("a free turn is taken at once");
        };
        {
            let mut waiter = pin!(lane.turn(Standing::Established, PATIENCE));
            assert!(poll(waiter.as_mut()).is_pending());
            drop(held);
            // The turn is handed to the waiter, which is dropped without seeing it.
        }
        assert_eq!(lane.lock().free, 1);
        let again = pin!(lane.turn(Standing::Established, PATIENCE));
        assert!(poll(again).is_ready());
    }

    #[test]
    fn no_more_turns_are_taken_than_the_lane_has() {
        let lane = Lane::new(2);
        let mut first = Box::pin(lane.turn(Standing::Established, PATIENCE));
        let mut second = Box::pin(lane.turn(Standing::Established, PATIENCE));
        let mut third = Box::pin(lane.turn(Standing::Established, PATIENCE));
        let (a, b) = (poll(first.as_mut()), poll(second.as_mut()));
        assert!(a.is_ready() && b.is_ready());
        assert!(poll(third.as_mut()).is_pending());
        drop(a);
        assert!(poll(third.as_mut()).is_ready());
        assert!(lane.lock().patient.iter().all(VecDeque::is_empty));
    }
}
