//! The loop the lease contract asks of every caller: request on a timer, believe in
//! leadership only until the ttl measured from the sending of the last confirmed request has
//! run out, release on the way out.
//!
//! One task runs one campaign. It owns the `watch` sender of the elector's state, so the state
//! is published from one place, in order, and every transition is logged there.
//!
//! A holding answer that renews a tenure this elector did not start is not leadership (see
//! [`identity`](crate::identity)): the campaign stops requesting, waits that tenure out on
//! snapshots of the leases, and contends again once it has ended.

use std::future::pending;
use std::sync::Arc;

use tenure_ports::{
    Backoff, EventStorage, EventStorageError, FencingToken, Lease, LeaseChanges, LeaseRequest,
    LeaseResponse, LeaseStatus,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout};
use tracing::{Instrument as _, debug, error, info, warn};

use crate::config::ValidConfig;
use crate::identity::{Holding, Verdict, holding, judge};
use crate::metrics::{self, HandoverWatch};
use crate::observe;
use crate::state::LeadershipState;
use crate::wake;

/// What an elector handle asks of its campaign.
#[derive(Debug)]
pub(crate) enum Command {
    /// Release the lease now and stand aside for one ttl, then contend again.
    Release(oneshot::Sender<Result<(), EventStorageError>>),
    /// Release the lease and stop.
    Shutdown(oneshot::Sender<Result<(), EventStorageError>>),
}

pub(crate) struct Campaign {
    storage: Arc<dyn EventStorage>,
    config: ValidConfig,
    request: LeaseRequest,
    state: watch::Sender<LeadershipState>,
    commands: mpsc::UnboundedReceiver<Command>,
    handover: HandoverWatch,
    /// The token of the last tenure this elector started.
    own: Option<FencingToken>,
    /// A tenure under this elector's owner id that it did not start, as last seen, while it
    /// waits for it to end. Nothing is released meanwhile: a release would end it.
    foreign: Option<Lease>,
    /// Whether the live twin holding `foreign` has been reported (once per episode).
    twin_reported: bool,
    /// The storage's lease changes, if it has them (see [`wake`](crate::wake)).
    changes: Option<Box<dyn LeaseChanges>>,
    /// Consecutive failed requests, for the backoff of a contender without a tenure.
    backoff: Backoff,
}

/// Whether the campaign goes on after waiting out a foreign tenure.
enum Flow {
    Contend,
    Stop,
}

/// How one request ended, from the loop's point of view.
type Answer = Result<Result<LeaseResponse, EventStorageError>, tokio::time::error::Elapsed>;

impl Campaign {
    pub(crate) fn new(
        storage: Arc<dyn EventStorage>,
        config: ValidConfig,
        state: watch::Sender<LeadershipState>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let request = config.request();
        Campaign {
            storage,
            config,
            request,
            state,
            commands,
            handover: HandoverWatch::new(),
            own: None,
            foreign: None,
            twin_reported: false,
            changes: None,
            backoff: Backoff::new(),
        }
    }

    /// Runs until shut down, or until every handle to the elector is dropped; releases the
    /// lease either way.
    pub(crate) async fn run(mut self) {
        metrics::started(self.config.lease_name().as_str());
        self.changes = wake::subscribe(self.storage.as_ref());
        let mut next_request = Instant::now();
        // After a release, wake-ups are ignored until this instant (the stand-aside).
        let mut stand_aside_until = Instant::now();
        loop {
            let mut woken = false;
            // Between requests: the deadline, a command, the next tick, or a wake-up.
            tokio::select! {
                biased;
                () = sleep_until_deadline(self.deadline()) => {
                    self.lapse();
                    continue;
                }
                command = self.commands.recv() => {
                    match command {
                        Some(Command::Release(done)) => {
                            let result = self.release().await;
                            let _ = done.send(result);
                            // Stand aside for one ttl, so that the contender that asked for
                            // the handover gets the lease rather than this elector again.
                            next_request = Instant::now() + self.config.ttl();
                            stand_aside_until = next_request;
                            continue;
                        }
                        Some(Command::Shutdown(done)) => {
                            let result = self.release().await;
                            let _ = done.send(result);
                            return;
                        }
                        None => {
                            let _ = self.release().await;
                            return;
                        }
                    }
                }
                () = sleep_until_due(next_request) => {}
                wakes = wake::next(&mut self.changes, self.config.lease_name()),
                    if Instant::now() >= stand_aside_until =>
                {
                    if !wakes {
                        continue;
                    }
                    woken = true;
                }
            }

            let sent_at = Instant::now();
            if woken {
                // An extra request: the poll's schedule stays as it was.
                metrics::woken(self.config.lease_name().as_str());
            } else {
                next_request = next_tick(next_request, self.config.poll_interval(), sent_at);
            }
            let step = observe::step_span(
                self.config.lease_name(),
                self.config.owner(),
                self.state.borrow().leader_token(),
            );
            let answer = self.request_once().instrument(step.clone()).await;
            let failed = !matches!(answer, Ok(Ok(_)));
            step.in_scope(|| self.answer(sent_at, answer));
            next_request = self.back_off(failed, next_request);
            if self.foreign.is_some() {
                match self.wait_out().await {
                    Flow::Contend => next_request = Instant::now(),
                    Flow::Stop => return,
                }
            }
        }
    }

    /// Waits, without renewing it, until the foreign tenure has ended on the storage's clock:
    /// first one ttl (plus the safety margin, for the clocks' rates) after the answer that
    /// renewed it, then as long as each snapshot says it stays live. Release and shutdown
    /// are answered without touching the storage. If no snapshot can be had, the campaign
    /// contends again, and an answer that still renews the same tenure shows a live twin.
    async fn wait_out(&mut self) -> Flow {
        let margin = self.config.safety_margin();
        let mut wake = Instant::now() + self.config.ttl() + margin;
        loop {
            tokio::select! {
                command = self.commands.recv() => match command {
                    // Nothing of this elector's is held: nothing to release.
                    Some(Command::Release(done)) => {
                        let _ = done.send(Ok(()));
                        continue;
                    }
                    Some(Command::Shutdown(done)) => {
                        self.state.send_replace(LeadershipState::Unknown);
                        let _ = done.send(Ok(()));
                        return Flow::Stop;
                    }
                    None => return Flow::Stop,
                },
                () = sleep_until(wake) => {}
            }
            let Some(seen) = self.foreign.clone() else {
                return Flow::Contend;
            };
            let snapshot = timeout(self.config.call_timeout(), self.storage.get_leases()).await;
            let Ok(Ok(snapshot)) = snapshot else {
                return Flow::Contend;
            };
            match judge(&snapshot, &seen) {
                Verdict::Ended => {
                    info!(
                        lease = %self.config.lease_name(), owner = %self.config.owner(),
                        token = seen.fencing_token.get(), transition = "foreign_tenure_ended",
                        "the tenure this elector did not start has ended; contending for a new one"
                    );
                    self.foreign = None;
                    self.twin_reported = false;
                    return Flow::Contend;
                }
                Verdict::Live {
                    renewed,
                    remaining,
                    record,
                } => {
                    if renewed {
                        self.report_twin(&record);
                    }
                    self.foreign = Some(record);
                    wake = Instant::now() + remaining + margin;
                }
            }
        }
    }

    /// A holding answer renewed a tenure this elector did not start: do not act on it.
    fn refuse(&mut self, lease: Lease) -> LeadershipState {
        let waited_already = self
            .foreign
            .as_ref()
            .is_some_and(|seen| seen.fencing_token == lease.fencing_token);
        if waited_already {
            // This elector left it unrenewed for a whole ttl, and it is still live.
            self.report_twin(&lease);
        } else {
            warn!(
                lease = %self.config.lease_name(), owner = %self.config.owner(),
                token = lease.fencing_token.get(), transition = "foreign_tenure",
                acquired_at = %lease.acquired_at,
                "the lease is held under this elector's owner id by a tenure it did not start \
                 (another process with the same owner id, or a predecessor within the ttl): \
                 not acting as leader; waiting for that tenure to end"
            );
        }
        let state = LeadershipState::Standby {
            holder: lease.owner.clone(),
            token: lease.fencing_token,
        };
        self.foreign = Some(lease);
        state
    }

    fn report_twin(&mut self, lease: &Lease) {
        if !self.twin_reported {
            error!(
                lease = %self.config.lease_name(), owner = %self.config.owner(),
                token = lease.fencing_token.get(), transition = "duplicate_owner",
                "another live process holds lease {} as owner {}: owner ids must be unique \
                 per process; waiting until its tenure ends",
                self.config.lease_name(), self.config.owner()
            );
            self.twin_reported = true;
        }
    }

    /// Sends one request and waits for its answer (at most the call timeout). Leadership
    /// lapses at its deadline even while the call hangs.
    async fn request_once(&self) -> Answer {
        let figures = metrics::CallFigures::new("request_lease");
        let call = observe::storage_call(
            &figures,
            (
                self.config.lease_name(),
                self.config.owner(),
                self.state.borrow().leader_token(),
            ),
            self.config.call_timeout(),
            self.storage.request_lease(&self.request),
        );
        tokio::pin!(call);
        loop {
            tokio::select! {
                biased;
                () = sleep_until_deadline(self.deadline()) => self.lapse(),
                answer = &mut call => return answer,
            }
        }
    }

    /// When the next request goes out after one that `failed`: on the cadence, except for a
    /// contender without a tenure after a failure, which backs off with jitter (a leader keeps
    /// its cadence; see [`backoff`](crate::backoff)).
    fn back_off(&mut self, failed: bool, next_request: Instant) -> Instant {
        if !failed {
            self.backoff.succeeded();
            return next_request;
        }
        if self.deadline().is_some() {
            return next_request;
        }
        let poll = self.config.poll_interval();
        let delay = self.backoff.failed(poll, self.config.ttl());
        next_request.max(Instant::now() + delay)
    }

    /// Until when the current tenure holds, if this elector holds the lease.
    fn deadline(&self) -> Option<Instant> {
        self.state.borrow().valid_until()
    }

    fn answer(&mut self, sent_at: Instant, answer: Answer) {
        let error = match answer {
            Ok(Ok(response)) => return self.confirmed(sent_at, response),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!(
                "no answer within the call timeout of {:?}",
                self.config.call_timeout()
            ),
        };
        let current = self.state.borrow().clone();
        let (lease, owner) = (self.config.lease_name(), self.config.owner());
        match current.tenure() {
            // A failed renewal is not evidence of leadership, nor of its loss: leadership
            // holds until its deadline, when `lapse` ends it unless a renewal succeeds first.
            Some((token, valid_until)) => warn!(
                lease = %lease, owner = %owner, token = token.get(), transition = "renewal_failed",
                error = %error,
                remaining_ms = valid_until.saturating_duration_since(Instant::now()).as_millis(),
                "lease renewal failed; leadership holds until its deadline unless a renewal is confirmed"
            ),
            None => {
                warn!(
                    lease = %lease, owner = %owner, transition = "unknown", error = %error,
                    "lease request failed"
                );
                self.state.send_replace(LeadershipState::Unknown);
            }
        }
    }

    fn confirmed(&mut self, sent_at: Instant, response: LeaseResponse) {
        self.handover
            .observe(self.config.lease_name().as_str(), sent_at, &response);
        let token = response.fencing_token;
        let next = match response.status {
            LeaseStatus::Standby => {
                self.foreign = None;
                self.twin_reported = false;
                LeadershipState::Standby {
                    holder: response.lease.owner,
                    token,
                }
            }
            _ if holding(self.own, &response.lease) == Holding::Foreign => {
                self.refuse(response.lease)
            }
            held => {
                self.own = Some(token);
                self.foreign = None;
                self.twin_reported = false;
                let valid_until = sent_at + self.config.leadership_span();
                if valid_until <= Instant::now() {
                    warn!(
                        lease = %self.config.lease_name(), owner = %self.config.owner(),
                        token = token.get(), transition = "unknown",
                        "the storage confirmed the lease too late to act on it"
                    );
                    LeadershipState::Unknown
                } else if held == LeaseStatus::LeaderStepDownRequested {
                    LeadershipState::StepDownRequested { token, valid_until }
                } else {
                    LeadershipState::Leader { token, valid_until }
                }
            }
        };
        self.publish(next);
    }

    /// The deadline passed without a confirmed renewal: leadership ends now.
    fn lapse(&self) {
        if let Some((token, _)) = self.state.borrow().tenure() {
            warn!(
                lease = %self.config.lease_name(), owner = %self.config.owner(),
                token = token.get(), transition = "lost", reason = "lapsed",
                "leadership lost: no renewal was confirmed within the ttl"
            );
            metrics::lapsed(self.config.lease_name().as_str());
        }
        self.state.send_replace(LeadershipState::Unknown);
    }

    /// Publishes `next`, logging the transition from the current state first, so that the
    /// log tells a transition before anything that reacts to it.
    fn publish(&self, next: LeadershipState) {
        let previous = self.state.borrow().clone();
        log_transition(&self.config, &previous, &next);
        metrics::published(self.config.lease_name().as_str(), &previous, &next);
        self.state.send_replace(next);
    }

    /// Ends any tenure, then releases the lease (withdrawing the registration too).
    async fn release(&self) -> Result<(), EventStorageError> {
        let previous = self.state.send_replace(LeadershipState::Unknown);
        let (lease, owner) = (self.config.lease_name(), self.config.owner());
        metrics::unpublished(lease.as_str(), &previous);
        if self.foreign.is_some() {
            // The record under this owner id is another process's tenure: leave it alone.
            debug!(
                lease = %lease, owner = %owner, transition = "withdrawn",
                "not releasing a tenure this elector did not start"
            );
            return Ok(());
        }
        let result = match observe::storage_call(
            &metrics::CallFigures::new("release_lease"),
            (lease, owner, previous.leader_token()),
            self.config.call_timeout(),
            self.storage.release_lease(lease.as_str(), owner.as_str()),
        )
        .instrument(observe::release_span(lease, owner, previous.leader_token()))
        .await
        {
            Ok(result) => result,
            Err(_) => Err(EventStorageError::unavailable(format!(
                "release_lease did not answer within {:?}",
                self.config.call_timeout()
            ))),
        };
        match (&result, previous.leader_token()) {
            (Ok(()), Some(token)) => info!(
                lease = %lease, owner = %owner, token = token.get(), transition = "released",
                "released the lease"
            ),
            (Ok(()), None) => debug!(
                lease = %lease, owner = %owner, transition = "withdrawn",
                "withdrew from the election"
            ),
            (Err(error), token) => warn!(
                lease = %lease, owner = %owner, token = token.map(|t| t.get()),
                transition = "release_failed", error = %error,
                "release failed; a held lease expires after its ttl"
            ),
        }
        metrics::released(lease.as_str(), &previous, result.is_ok());
        result
    }
}

impl Drop for Campaign {
    /// However the campaign ends (shut down, every handle dropped, aborted), this process no
    /// longer leads.
    fn drop(&mut self) {
        metrics::unpublished(self.config.lease_name().as_str(), &self.state.borrow());
    }
}

/// The next request goes out one poll interval after the previous one was *scheduled*, so
/// that call latency never shifts the cadence; a tick missed by more than a whole interval
/// (a starved runtime) restarts the cadence from now instead of bursting.
fn next_tick(scheduled: Instant, poll_interval: std::time::Duration, sent_at: Instant) -> Instant {
    let next = scheduled + poll_interval;
    if next <= sent_at {
        sent_at + poll_interval
    } else {
        next
    }
}

/// Sleeps until `at`, or not at all once it has come: tokio rounds a timer's deadline up to
/// its next millisecond tick, which would delay every request due *now* (an elector's first,
/// the one after a foreign tenure ended) by up to a millisecond, the whole cost of a planned
/// handover in memory.
async fn sleep_until_due(at: Instant) {
    if Instant::now() < at {
        sleep_until(at).await;
    }
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => pending().await,
    }
}

fn log_transition(config: &ValidConfig, previous: &LeadershipState, next: &LeadershipState) {
    use LeadershipState::{Leader, Standby, StepDownRequested, Unknown};
    let (lease, owner) = (config.lease_name(), config.owner());
    let now = Instant::now();
    match (previous.leader_token(), next) {
        (Some(old), Leader { token, valid_until } | StepDownRequested { token, valid_until })
            if old == *token =>
        {
            let valid_for_ms = valid_until.saturating_duration_since(now).as_millis();
            match (
                previous.is_step_down_requested(),
                next.is_step_down_requested(),
            ) {
                (false, true) => info!(
                    lease = %lease, owner = %owner, token = token.get(),
                    transition = "step_down_requested", valid_for_ms,
                    "step-down requested: a contender with a higher priority is waiting"
                ),
                (true, false) => info!(
                    lease = %lease, owner = %owner, token = token.get(),
                    transition = "step_down_withdrawn", valid_for_ms,
                    "step-down no longer requested"
                ),
                _ => debug!(
                    lease = %lease, owner = %owner, token = token.get(),
                    transition = "renewed", valid_for_ms,
                    "renewed the lease"
                ),
            }
        }
        (old, Leader { token, valid_until } | StepDownRequested { token, valid_until }) => {
            if let Some(old) = old {
                warn!(
                    lease = %lease, owner = %owner, token = old.get(), transition = "lost",
                    reason = "superseded", "leadership lost: the lease has a new tenure"
                );
            }
            info!(
                lease = %lease, owner = %owner, token = token.get(), transition = "acquired",
                valid_for_ms = valid_until.saturating_duration_since(now).as_millis(),
                step_down_requested = next.is_step_down_requested(),
                "acquired leadership"
            );
        }
        (Some(old), Standby { holder, token }) => warn!(
            lease = %lease, owner = %owner, token = old.get(), transition = "lost",
            reason = "taken_over", holder = %holder, holder_token = token.get(),
            "leadership lost: another contender holds the lease"
        ),
        (None, Standby { holder, token }) => {
            if previous != next {
                info!(
                    lease = %lease, owner = %owner, transition = "standby", holder = %holder,
                    holder_token = token.get(), "standing by"
                );
            }
        }
        (Some(old), Unknown) => warn!(
            lease = %lease, owner = %owner, token = old.get(), transition = "lost",
            reason = "unconfirmed", "leadership lost"
        ),
        (None, Unknown) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cadence_does_not_drift_with_latency() {
        let start = Instant::now();
        let poll = Duration::from_millis(100);
        let sent = start + Duration::from_millis(7);
        assert_eq!(next_tick(start, poll, sent), start + poll);
        // A tick missed by more than an interval restarts from now.
        let late = start + Duration::from_millis(250);
        assert_eq!(next_tick(start, poll, late), late + poll);
    }
}
