//! The reference: the domain's decisions applied to a plain store.

use std::collections::BTreeMap;

use tenure_ports::BoxError;
use tenure_ports::domain::{
    Contender, Lease, LeaseName, LeaseResponse, Owner, RecordWrite, Timestamp, Transition,
    ValidLeaseRequest, decide_release, decide_request,
};

use super::{Decided, DecisionSystem, Observed};

/// The reference: the domain's decisions applied to a plain store, exactly as a backend keeps
/// it (a record written when the transition says so; registrations upserted, pruned and
/// withdrawn as the outcome says).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reference {
    leases: BTreeMap<LeaseName, Stored>,
    /// Whether a standby's fresh registration is kept as it is.
    keeps_fresh: bool,
    /// Whether an unchallenged renewal leaves the registrations alone.
    spares_on_renewal: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Stored {
    pub(super) record: Option<Lease>,
    pub(super) contenders: BTreeMap<Owner, Contender>,
}

/// What the reference decided on one request, with what it pruned.
pub(super) struct ReferenceOutcome {
    pub(super) transition: Transition,
    pub(super) response: LeaseResponse,
    pub(super) refreshed: bool,
    pub(super) pruned: Vec<Owner>,
}

impl Reference {
    /// A reference that keeps a standby's fresh registration as it is (the rule of a system
    /// whose [`DecisionSystem::keeps_fresh_registrations`] is true).
    pub fn keeping_fresh_registrations() -> Self {
        Reference {
            keeps_fresh: true,
            ..Reference::default()
        }
    }

    /// This reference, also leaving the registrations alone on an unchallenged renewal (the
    /// rule of a system whose
    /// [`DecisionSystem::spares_registrations_on_unchallenged_renewals`] is true).
    #[must_use]
    pub fn sparing_registrations_on_unchallenged_renewals(self) -> Self {
        Reference {
            spares_on_renewal: true,
            ..self
        }
    }

    pub(super) fn decide_request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<ReferenceOutcome, String> {
        let stored = self.leases.entry(request.lease_name.clone()).or_default();
        let registered: Vec<Contender> = stored.contenders.values().cloned().collect();
        let mut outcome = decide_request(stored.record.as_ref(), &registered, request, now)
            .map_err(|e| format!("decide_request failed: {e}"))?;
        if self.keeps_fresh {
            outcome = outcome.keeping_fresh_registration(&registered, now);
        }
        if self.spares_on_renewal {
            outcome = outcome.sparing_registrations_on_unchallenged_renewal(&registered);
        }
        match outcome.transition.record_write() {
            RecordWrite::Insert if stored.record.is_some() => {
                return Err("the domain asked for an Insert while a record exists".into());
            }
            RecordWrite::Update if stored.record.is_none() => {
                return Err("the domain asked for an Update while no record exists".into());
            }
            RecordWrite::Insert | RecordWrite::Update => {
                stored.record = Some(outcome.response.lease.clone());
            }
            RecordWrite::None => {}
        }
        for owner in &outcome.pruned {
            if stored.contenders.remove(owner).is_none() {
                return Err(format!(
                    "the domain pruned {owner}, which was not registered"
                ));
            }
        }
        stored
            .contenders
            .insert(outcome.contender.owner.clone(), outcome.contender);
        Ok(ReferenceOutcome {
            transition: outcome.transition,
            response: outcome.response,
            refreshed: outcome.refreshed,
            pruned: outcome.pruned,
        })
    }

    pub(super) fn decide_release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, String> {
        let stored = self.leases.entry(lease_name.clone()).or_default();
        let outcome = decide_release(stored.record.as_ref(), lease_name, owner, now)
            .map_err(|e| format!("decide_release failed: {e}"))?;
        if outcome.withdrawn != *owner {
            return Err("the domain withdrew someone else's registration".into());
        }
        let touched = outcome.updated.is_some();
        if let Some(updated) = outcome.updated {
            if stored.record.is_none() {
                return Err("a release wrote a record where there was none".into());
            }
            stored.record = Some(updated);
        }
        stored.contenders.remove(&outcome.withdrawn);
        Ok(touched)
    }

    pub(super) fn stored(&self, lease_name: &LeaseName) -> Option<&Stored> {
        self.leases.get(lease_name)
    }
}

impl DecisionSystem for Reference {
    fn request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<Decided, BoxError> {
        let outcome = self.decide_request(request, now)?;
        Ok(Decided::new(outcome.response).with_transition(outcome.transition))
    }

    fn release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        Ok(self.decide_release(lease_name, owner, now)?)
    }

    fn keeps_fresh_registrations(&self) -> bool {
        self.keeps_fresh
    }

    fn spares_registrations_on_unchallenged_renewals(&self) -> bool {
        self.spares_on_renewal
    }

    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError> {
        let Some(stored) = self.stored(lease_name) else {
            return Ok(Observed::default().with_stored_contenders(Vec::new()));
        };
        let all: Vec<Contender> = stored.contenders.values().cloned().collect();
        let live = all.iter().filter(|c| c.is_live_at(now)).cloned().collect();
        Ok(Observed::new(stored.record.clone(), live).with_stored_contenders(all))
    }
}
