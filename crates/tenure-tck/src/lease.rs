//! The lease scenarios: one function per rule of the contract.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tenure_ports::{
    Capability, EventStorage, EventStorageError, FencingToken, Lease, LeaseRequest, LeaseResponse,
    LeaseStatus,
};

use crate::check::{Failure, ensure, ensure_eq};
use crate::{Scenario, ScenarioFuture, Subject};

type Outcome = Result<(), Failure>;

macro_rules! lease_scenarios {
    ($($name:ident),* $(,)?) => {
        pub(crate) static SCENARIOS: &[Scenario] = &[
            $(Scenario {
                name: concat!("lease_", stringify!($name)),
                needs: &[Capability::Lease],
                run: {
                    fn run(subject: &Subject) -> ScenarioFuture<'_> {
                        Box::pin($name(subject))
                    }
                    run
                },
            },)*
        ];
    };
}

lease_scenarios![
    first_acquisition,
    renewal_keeps_token,
    second_owner_stands_by,
    takeover_after_expiry,
    first_sight_of_an_expired_lease,
    expired_holder_returns_with_new_token,
    released_owner_returns_with_new_token,
    release_hands_over_at_once,
    release_of_foreign_lease_is_harmless,
    release_is_idempotent,
    release_withdraws_contender,
    step_down_higher_priority,
    step_down_not_for_equal_or_lower,
    step_down_ends_when_contender_expires,
    step_down_ends_when_contender_releases,
    holder_ignoring_step_down_keeps_lease,
    shorter_ttl_shortens_liveness,
    fifty_handovers,
    names_are_independent,
    invalid_input_is_refused,
    contenders_listed_live_only,
    concurrent_contention,
    registry_stays_bounded,
    closed_storage_refuses_calls,
];

const LEASE: &str = "tck-lease";

async fn request(
    s: &Subject,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> Result<LeaseResponse, Failure> {
    request_on(s, LEASE, owner, priority, ttl).await
}

async fn request_on(
    s: &Subject,
    lease: &str,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> Result<LeaseResponse, Failure> {
    let response = s
        .storage
        .request_lease(&LeaseRequest::new(lease, owner, priority, ttl))
        .await?;
    ensure_eq!(
        response.fencing_token,
        response.lease.fencing_token,
        "a response's token must be its lease record's token"
    );
    ensure_eq!(
        response.lease.lease_name.as_str(),
        lease,
        "the response's record must be of the lease requested"
    );
    if response.status.holds_lease() {
        ensure_eq!(
            response.lease.owner.as_str(),
            owner,
            "a holder's response must name the holder"
        );
    } else {
        ensure!(
            response.lease.owner != *owner,
            "{owner} was told to stand by for its own lease: {response:?}"
        );
    }
    Ok(response)
}

async fn release(s: &Subject, lease: &str, owner: &str) -> Outcome {
    s.storage.release_lease(lease, owner).await?;
    Ok(())
}

async fn record(s: &Subject, lease: &str) -> Result<Option<(Lease, bool)>, Failure> {
    let snapshot = s.storage.get_leases().await?;
    Ok(snapshot
        .get(lease)
        .map(|l| (l.clone(), l.is_live_at(snapshot.now))))
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap_or(FencingToken::MAX)
}

fn leader(r: &LeaseResponse, n: u64, what: &str) -> Outcome {
    ensure_eq!(r.status, LeaseStatus::Leader, "{what}: status");
    ensure_eq!(r.fencing_token, token(n), "{what}: token");
    Ok(())
}

fn standby(r: &LeaseResponse, n: u64, what: &str) -> Outcome {
    ensure_eq!(r.status, LeaseStatus::Standby, "{what}: status");
    ensure_eq!(r.fencing_token, token(n), "{what}: the holder's token");
    Ok(())
}

/// A contender whose first sight of a lease is after it expired (a standby that starts after
/// the holder died) may have to see it unchanged for a ttl of its own before taking it over
/// (a backend whose clock is not the contender's must make it wait; see `Sighting`), and then
/// takes it over. Never does it get the lease while its holder's tenure is live.
async fn first_sight_of_an_expired_lease(s: &Subject) -> Outcome {
    let (short, long) = (s.timing.short, s.timing.long);
    let a = request(s, "a", 0, short).await?;
    leader(&a, 1, "a's first request")?;
    s.wait_past(short).await;
    let first = request(s, "b", 0, long).await?;
    if first.status == LeaseStatus::Standby {
        ensure_eq!(first.fencing_token, token(1), "b's first answer: a's token");
        ensure_eq!(
            &first.lease,
            &a.lease,
            "the record while b has not seen it end"
        );
        s.wait_past(short).await;
        let second = request(s, "b", 0, long).await?;
        leader(
            &second,
            2,
            "b a ttl after its first sight of the expired lease",
        )?;
    } else {
        leader(&first, 2, "b's takeover at its first sight")?;
    }
    Ok(())
}

async fn first_acquisition(s: &Subject) -> Outcome {
    let long = s.timing.long;
    let r = request(s, "a", 0, long).await?;
    leader(&r, 1, "the first request")?;
    ensure_eq!(
        r.lease.acquired_at,
        r.lease.heartbeat_at,
        "acquired_at of a new lease"
    );
    ensure_eq!(r.lease.ttl, long, "the record's ttl");
    ensure_eq!(r.lease.priority, 0, "the record's priority");

    let snapshot = s.storage.get_leases().await?;
    ensure_eq!(snapshot.leases.len(), 1, "records listed by get_leases");
    ensure_eq!(&snapshot.leases[0], &r.lease, "the listed record");
    ensure!(
        snapshot.now >= r.lease.heartbeat_at,
        "the snapshot's now ({}) is before the heartbeat ({})",
        snapshot.now,
        r.lease.heartbeat_at
    );
    ensure!(
        r.lease.is_live_at(snapshot.now),
        "the lease is not live at the snapshot's now"
    );
    let contenders = s.storage.get_lease_contenders(LEASE).await?;
    ensure_eq!(contenders.len(), 1, "live contenders");
    ensure_eq!(contenders[0].owner.as_str(), "a", "the contender");
    Ok(())
}

async fn renewal_keeps_token(s: &Subject) -> Outcome {
    let first = request(s, "a", 0, s.timing.long).await?;
    s.tick().await;
    let longer = s.timing.long + Duration::from_secs(60);
    let renewed = request(s, "a", 7, longer).await?;
    leader(&renewed, 1, "a renewal")?;
    ensure_eq!(
        renewed.lease.acquired_at,
        first.lease.acquired_at,
        "acquired_at across a renewal"
    );
    ensure!(
        renewed.lease.heartbeat_at > first.lease.heartbeat_at,
        "the heartbeat did not advance: {} then {}",
        first.lease.heartbeat_at,
        renewed.lease.heartbeat_at
    );
    ensure_eq!(
        renewed.lease.priority,
        7,
        "a renewal takes the request's priority"
    );
    ensure_eq!(
        renewed.lease.ttl,
        longer,
        "a renewal takes the request's ttl"
    );
    let (stored, live) = record(s, LEASE).await?.ok_or(Failure::new("no record"))?;
    ensure_eq!(
        &stored,
        &renewed.lease,
        "the stored record after the renewal"
    );
    ensure!(live, "the renewed lease is not live");
    Ok(())
}

async fn second_owner_stands_by(s: &Subject) -> Outcome {
    let long = s.timing.long;
    let a = request(s, "a", 0, long).await?;
    s.tick().await;
    let b = request(s, "b", 100, long).await?;
    ensure_eq!(b.status, LeaseStatus::Standby, "the second owner's status");
    ensure_eq!(
        b.fencing_token,
        a.fencing_token,
        "a standby gets the holder's token"
    );
    ensure_eq!(
        &b.lease,
        &a.lease,
        "a standby's request must not touch the record"
    );
    let (stored, _) = record(s, LEASE).await?.ok_or(Failure::new("no record"))?;
    ensure_eq!(&stored, &a.lease, "the stored record");
    let again = request(s, "b", 100, long).await?;
    ensure_eq!(again.status, LeaseStatus::Standby, "a standby asking again");
    Ok(())
}

async fn takeover_after_expiry(s: &Subject) -> Outcome {
    let (short, long) = (s.timing.short, s.timing.long);
    let a = request(s, "a", 0, short).await?;
    leader(&a, 1, "a's first request")?;
    // b sees a's tenure before it expires, so that b has seen it end, on any backend.
    standby(&request(s, "b", 0, long).await?, 1, "b while a is live")?;
    s.wait_past(short).await;
    let (expired, live) = record(s, LEASE)
        .await?
        .ok_or(Failure::new("an expired lease lost its record"))?;
    ensure!(!live, "the lease is still live after its ttl: {expired:?}");
    ensure!(
        expired.released_at.is_none() && !expired.is_released(),
        "an expired lease must not look released: {expired:?}"
    );
    let b = request(s, "b", 0, long).await?;
    leader(&b, 2, "b after a expired")?;
    ensure_eq!(b.lease.owner.as_str(), "b", "the new holder");
    ensure_eq!(
        b.lease.acquired_at,
        b.lease.heartbeat_at,
        "acquired_at of a takeover"
    );
    ensure!(
        b.lease.acquired_at >= a.lease.expires_at(),
        "b took over at {} before a's lease expired at {}",
        b.lease.acquired_at,
        a.lease.expires_at()
    );
    let a_again = request(s, "a", 0, long).await?;
    ensure_eq!(
        a_again.status,
        LeaseStatus::Standby,
        "the old holder coming back late"
    );
    ensure_eq!(
        a_again.fencing_token,
        token(2),
        "the old holder sees the new token"
    );
    Ok(())
}

async fn expired_holder_returns_with_new_token(s: &Subject) -> Outcome {
    let short = s.timing.short;
    let first = request(s, "a", 0, short).await?;
    leader(&first, 1, "the first tenure")?;
    s.wait_past(short).await;
    let second = request(s, "a", 0, s.timing.long).await?;
    leader(&second, 2, "the same owner after its lease expired")?;
    ensure!(
        second.lease.acquired_at > first.lease.acquired_at,
        "a new tenure must have a new acquired_at"
    );
    ensure_eq!(
        second.lease.acquired_at,
        second.lease.heartbeat_at,
        "acquired_at"
    );
    Ok(())
}

async fn released_owner_returns_with_new_token(s: &Subject) -> Outcome {
    let long = s.timing.long;
    leader(&request(s, "a", 0, long).await?, 1, "the first tenure")?;
    release(s, LEASE, "a").await?;
    let back = request(s, "a", 0, long).await?;
    leader(&back, 2, "the same owner after releasing")?;
    Ok(())
}

async fn release_hands_over_at_once(s: &Subject) -> Outcome {
    let long = s.timing.long;
    let a = request(s, "a", 0, long).await?;
    let b = request(s, "b", 0, long).await?;
    ensure_eq!(b.status, LeaseStatus::Standby, "b before the release");
    release(s, LEASE, "a").await?;

    let (kept, live) = record(s, LEASE)
        .await?
        .ok_or(Failure::new("a release deleted the record"))?;
    ensure!(!live, "the released lease is still live: {kept:?}");
    ensure_eq!(kept.owner.as_str(), "a", "the released record's owner");
    ensure_eq!(kept.fencing_token, token(1), "the released record's token");
    ensure_eq!(
        kept.acquired_at,
        a.lease.acquired_at,
        "the released record's acquired_at"
    );
    ensure!(
        kept.is_released() && kept.released_at >= Some(a.lease.heartbeat_at),
        "a released lease must say when it was released (released_at, after its last \
         heartbeat): {kept:?}"
    );

    let b = request(s, "b", 0, long).await?;
    leader(&b, 2, "b right after the release")?;
    let (taken, _) = record(s, LEASE)
        .await?
        .ok_or(Failure::new("the record vanished"))?;
    ensure!(
        taken.released_at.is_none(),
        "a new tenure starts without released_at: {taken:?}"
    );
    Ok(())
}

async fn release_of_foreign_lease_is_harmless(s: &Subject) -> Outcome {
    let (short, long) = (s.timing.short, s.timing.long);
    let a = request(s, "a", 0, long).await?;
    release(s, LEASE, "b").await?;
    release(s, "tck-never-requested", "a").await?;
    let snapshot = s.storage.get_leases().await?;
    ensure_eq!(snapshot.leases.len(), 1, "records after foreign releases");
    ensure_eq!(
        &snapshot.leases[0],
        &a.lease,
        "the holder's record after foreign releases"
    );

    // A lease that was taken over: its old holder's release must not touch the new holder.
    let other = "tck-taken-over";
    request_on(s, other, "a", 0, short).await?;
    request_on(s, other, "b", 0, long).await?;
    s.wait_past(short).await;
    let b = request_on(s, other, "b", 0, long).await?;
    leader(&b, 2, "b's takeover")?;
    release(s, other, "a").await?;
    let (after, live) = record(s, other).await?.ok_or(Failure::new("no record"))?;
    ensure_eq!(&after, &b.lease, "b's record after a's late release");
    ensure!(live, "a's late release ended b's lease");
    Ok(())
}

async fn release_is_idempotent(s: &Subject) -> Outcome {
    request(s, "a", 0, s.timing.long).await?;
    release(s, LEASE, "a").await?;
    let once = record(s, LEASE).await?;
    release(s, LEASE, "a").await?;
    let twice = record(s, LEASE).await?;
    ensure!(
        once.as_ref().map(|(l, _)| l) == twice.as_ref().map(|(l, _)| l),
        "a second release changed the record: {once:?} then {twice:?}"
    );
    ensure!(
        matches!(twice, Some((_, false))),
        "the released lease must be kept, expired"
    );
    Ok(())
}

async fn release_withdraws_contender(s: &Subject) -> Outcome {
    let long = s.timing.long;
    let a = request(s, "a", 0, long).await?;
    request(s, "b", 5, long).await?;
    let before = s.storage.get_lease_contenders(LEASE).await?;
    ensure_eq!(before.len(), 2, "live contenders before b's release");
    release(s, LEASE, "b").await?;
    let after = s.storage.get_lease_contenders(LEASE).await?;
    let owners: Vec<&str> = after.iter().map(|c| c.owner.as_str()).collect();
    ensure_eq!(owners, vec!["a"], "live contenders after b's release");
    let (stored, live) = record(s, LEASE).await?.ok_or(Failure::new("no record"))?;
    ensure!(
        live && stored == a.lease,
        "a standby's release touched the record"
    );
    let renewed = request(s, "a", 0, long).await?;
    leader(&renewed, 1, "a once b withdrew")?;
    Ok(())
}

async fn step_down_higher_priority(s: &Subject) -> Outcome {
    let long = s.timing.long;
    request(s, "a", 0, long).await?;
    let b = request(s, "b", 5, long).await?;
    ensure_eq!(
        b.status,
        LeaseStatus::Standby,
        "a higher-priority contender's status"
    );
    let a = request(s, "a", 0, long).await?;
    ensure_eq!(
        a.status,
        LeaseStatus::LeaderStepDownRequested,
        "the holder's status"
    );
    ensure_eq!(
        a.fencing_token,
        token(1),
        "the token while asked to step down"
    );
    let b = request(s, "b", 5, long).await?;
    ensure_eq!(
        b.status,
        LeaseStatus::Standby,
        "the storage must never revoke a live lease"
    );
    Ok(())
}

async fn step_down_not_for_equal_or_lower(s: &Subject) -> Outcome {
    let long = s.timing.long;
    request(s, "a", 5, long).await?;
    request(s, "b", 5, long).await?;
    request(s, "c", 1, long).await?;
    request(s, "d", i64::MIN, long).await?;
    let a = request(s, "a", 5, long).await?;
    leader(&a, 1, "a holder with equal and lower contenders")?;
    // The holder's own, just-updated priority counts: lowering it below b's triggers it.
    let a = request(s, "a", 4, long).await?;
    ensure_eq!(
        a.status,
        LeaseStatus::LeaderStepDownRequested,
        "a holder that lowered its priority below a contender's"
    );
    Ok(())
}

async fn step_down_ends_when_contender_expires(s: &Subject) -> Outcome {
    let (short, long) = (s.timing.short, s.timing.long);
    request(s, "a", 0, long).await?;
    request(s, "b", 9, short).await?;
    let a = request(s, "a", 0, long).await?;
    ensure_eq!(
        a.status,
        LeaseStatus::LeaderStepDownRequested,
        "while b is live"
    );
    s.wait_past(short).await;
    let a = request(s, "a", 0, long).await?;
    leader(&a, 1, "once b's registration expired")?;
    Ok(())
}

async fn step_down_ends_when_contender_releases(s: &Subject) -> Outcome {
    let long = s.timing.long;
    request(s, "a", 0, long).await?;
    request(s, "b", 9, long).await?;
    let a = request(s, "a", 0, long).await?;
    ensure_eq!(
        a.status,
        LeaseStatus::LeaderStepDownRequested,
        "while b is live"
    );
    release(s, LEASE, "b").await?;
    let a = request(s, "a", 0, long).await?;
    leader(&a, 1, "once b released")?;
    Ok(())
}

async fn holder_ignoring_step_down_keeps_lease(s: &Subject) -> Outcome {
    let long = s.timing.long;
    request(s, "a", 0, long).await?;
    for round in 0..5 {
        let b = request(s, "b", 10, long).await?;
        ensure_eq!(b.status, LeaseStatus::Standby, "b, round {round}");
        ensure_eq!(
            b.fencing_token,
            token(1),
            "b's view of the token, round {round}"
        );
        s.tick().await;
        let a = request(s, "a", 0, long).await?;
        ensure_eq!(
            a.status,
            LeaseStatus::LeaderStepDownRequested,
            "a, round {round}"
        );
        ensure_eq!(a.fencing_token, token(1), "a's token, round {round}");
    }
    let (stored, live) = record(s, LEASE).await?.ok_or(Failure::new("no record"))?;
    ensure!(
        live && stored.owner == "a",
        "a lost a lease it kept renewing"
    );
    Ok(())
}

async fn shorter_ttl_shortens_liveness(s: &Subject) -> Outcome {
    let (short, long) = (s.timing.short, s.timing.long);
    request(s, "a", 0, long).await?;
    let renewed = request(s, "a", 0, short).await?;
    leader(&renewed, 1, "a renewal with a shorter ttl")?;
    ensure_eq!(
        renewed.lease.ttl,
        short,
        "the record's ttl after the renewal"
    );
    standby(&request(s, "b", 0, long).await?, 1, "b while a is live")?;
    s.wait_past(short).await;
    let b = request(s, "b", 0, long).await?;
    leader(&b, 2, "b after the shortened lease expired")?;
    Ok(())
}

async fn fifty_handovers(s: &Subject) -> Outcome {
    let long = s.timing.long;
    for n in 1..=50u64 {
        let owner = if !n.is_multiple_of(2) { "a" } else { "b" };
        let r = request(s, owner, 0, long).await?;
        leader(&r, n, &format!("handover {n} to {owner}"))?;
        release(s, LEASE, owner).await?;
    }
    let (last, live) = record(s, LEASE).await?.ok_or(Failure::new("no record"))?;
    ensure_eq!(last.fencing_token, token(50), "the token after 50 tenures");
    ensure!(!live, "the last tenure was released");
    Ok(())
}

async fn names_are_independent(s: &Subject) -> Outcome {
    let long = s.timing.long;
    let alpha = request_on(s, "alpha", "a", 0, long).await?;
    let beta = request_on(s, "beta", "b", 0, long).await?;
    leader(&alpha, 1, "a on alpha")?;
    leader(&beta, 1, "b on beta")?;
    let cross = request_on(s, "beta", "a", 99, long).await?;
    ensure_eq!(cross.status, LeaseStatus::Standby, "a on beta");
    let alpha = request_on(s, "alpha", "a", 0, long).await?;
    leader(
        &alpha,
        1,
        "a on alpha, with a high-priority contender on beta only",
    )?;
    release(s, "alpha", "a").await?;
    let beta_after = request_on(s, "beta", "b", 0, long).await?;
    ensure_eq!(
        beta_after.status,
        LeaseStatus::LeaderStepDownRequested,
        "b on beta after alpha's release (a still contends on beta)"
    );
    ensure_eq!(beta_after.fencing_token, token(1), "beta's token");
    let names: Vec<String> = s
        .storage
        .get_leases()
        .await?
        .leases
        .iter()
        .map(|l| l.lease_name.to_string())
        .collect();
    ensure_eq!(
        names,
        vec!["alpha", "beta"],
        "get_leases lists both, by name"
    );
    Ok(())
}

async fn invalid_input_is_refused(s: &Subject) -> Outcome {
    let ok_ttl = s.timing.long;
    let long_name = "x".repeat(256);
    let cases: Vec<(&str, LeaseRequest, &str)> = vec![
        (
            "an empty lease name",
            LeaseRequest::new("", "a", 0, ok_ttl),
            "lease_name",
        ),
        (
            "a 256-byte lease name",
            LeaseRequest::new(long_name.clone(), "a", 0, ok_ttl),
            "lease_name",
        ),
        (
            "a NUL in the lease name",
            LeaseRequest::new("a\0b", "a", 0, ok_ttl),
            "lease_name",
        ),
        (
            "a newline in the lease name",
            LeaseRequest::new("a\nb", "a", 0, ok_ttl),
            "lease_name",
        ),
        (
            "an empty owner",
            LeaseRequest::new(LEASE, "", 0, ok_ttl),
            "owner",
        ),
        (
            "a 256-byte owner",
            LeaseRequest::new(LEASE, long_name.clone(), 0, ok_ttl),
            "owner",
        ),
        (
            "an escape in the owner",
            LeaseRequest::new(LEASE, "a\u{1b}[31m", 0, ok_ttl),
            "owner",
        ),
        (
            "a zero ttl",
            LeaseRequest::new(LEASE, "a", 0, Duration::ZERO),
            "ttl",
        ),
        (
            "a ttl under 1 ms",
            LeaseRequest::new(LEASE, "a", 0, Duration::from_micros(999)),
            "ttl",
        ),
        (
            "a ttl over 7 days",
            LeaseRequest::new(LEASE, "a", 0, Duration::from_secs(7 * 86_400 + 1)),
            "ttl",
        ),
        (
            "the largest ttl",
            LeaseRequest::new(LEASE, "a", 0, Duration::MAX),
            "ttl",
        ),
    ];
    for (what, request, field) in cases {
        match s.storage.request_lease(&request).await {
            Err(EventStorageError::InvalidRequest(err)) => {
                ensure_eq!(err.field.as_str(), field, "the field named for {what}");
            }
            other => {
                return Err(Failure::new(format!(
                    "{what}: expected InvalidRequest, got {other:?}"
                )));
            }
        }
    }
    let bad_releases = [
        ("", "a", "lease_name"),
        (LEASE, "", "owner"),
        ("a\0", "a", "lease_name"),
    ];
    for (lease, owner, field) in bad_releases {
        match s.storage.release_lease(lease, owner).await {
            Err(EventStorageError::InvalidRequest(err)) => {
                ensure_eq!(err.field.as_str(), field, "release({lease:?}, {owner:?})");
            }
            other => {
                return Err(Failure::new(format!(
                    "release({lease:?}, {owner:?}): expected InvalidRequest, got {other:?}"
                )));
            }
        }
    }
    match s.storage.get_lease_contenders("").await {
        Err(EventStorageError::InvalidRequest(_)) => {}
        other => {
            return Err(Failure::new(format!(
                "get_lease_contenders(\"\"): expected InvalidRequest, got {other:?}"
            )));
        }
    }
    let snapshot = s.storage.get_leases().await?;
    ensure!(
        snapshot.leases.is_empty(),
        "invalid requests recorded leases: {:?}",
        snapshot.leases
    );
    let contenders = s.storage.get_lease_contenders(LEASE).await?;
    ensure!(
        contenders.is_empty(),
        "invalid requests registered contenders: {contenders:?}"
    );
    // Boundaries that are valid.
    let max_name = "n".repeat(255);
    let ok = request_on(s, &max_name, "é", i64::MAX, Duration::from_millis(1)).await?;
    leader(&ok, 1, "a 255-byte name, a 2-byte owner, a 1 ms ttl")?;
    Ok(())
}

async fn contenders_listed_live_only(s: &Subject) -> Outcome {
    let (short, long) = (s.timing.short, s.timing.long);
    let a = request(s, "a", 1, long).await?;
    request(s, "b", 1, short).await?;
    request(s, "c", 3, long).await?;
    let listed = s.storage.get_lease_contenders(LEASE).await?;
    let owners: Vec<&str> = listed.iter().map(|c| c.owner.as_str()).collect();
    ensure_eq!(
        owners,
        vec!["c", "a", "b"],
        "contenders by priority, then owner"
    );
    let c_entry = &listed[0];
    ensure_eq!(c_entry.priority, 3, "c's priority");
    ensure_eq!(c_entry.ttl, long, "c's ttl");
    ensure!(
        c_entry.last_seen >= a.lease.heartbeat_at,
        "c's last_seen ({}) is before a's earlier request ({})",
        c_entry.last_seen,
        a.lease.heartbeat_at
    );
    s.wait_past(short).await;
    let listed = s.storage.get_lease_contenders(LEASE).await?;
    let owners: Vec<&str> = listed.iter().map(|c| c.owner.as_str()).collect();
    ensure_eq!(
        owners,
        vec!["c", "a"],
        "contenders once b's registration expired"
    );
    let none = s.storage.get_lease_contenders("tck-nobody").await?;
    ensure!(none.is_empty(), "contenders of an unknown lease: {none:?}");
    Ok(())
}

/// 16 tasks contend on one lease at once; some holders go silent past their ttl so that the
/// lease changes hands. Checked over every response: no token is ever given to two owners, and
/// a new tenure never begins before the previous tenure's last confirmed heartbeat expired
/// (on the storage's clock), so no two holders were ever live at once.
async fn concurrent_contention(s: &Subject) -> Outcome {
    let ttl = if s.has_clock() {
        Duration::from_millis(50)
    } else {
        s.timing.short / 5
    };
    let storage: Arc<dyn EventStorage> = Arc::clone(&s.storage);
    let mut tasks = Vec::new();
    let subject_timing = s.timing;
    let clock = s.clock.clone();
    for task in 0..16u32 {
        let storage = Arc::clone(&storage);
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("task-{task:02}");
            let mut seen = Vec::new();
            let mut held = 0u32;
            for _ in 0..25 {
                let request = LeaseRequest::new(LEASE, owner.as_str(), i64::from(task % 3), ttl);
                let response = storage.request_lease(&request).await?;
                let holds = response.status.holds_lease();
                seen.push(response);
                let pause = if holds {
                    held += 1;
                    held.is_multiple_of(4)
                } else {
                    false
                };
                match (&clock, pause) {
                    (Some(clock), true) => clock.advance(ttl),
                    (Some(clock), false) => clock.advance(Duration::from_millis(1)),
                    (None, true) => tokio::time::sleep(ttl + subject_timing.margin).await,
                    (None, false) => tokio::time::sleep(ttl / 4).await,
                }
            }
            Ok::<_, EventStorageError>(seen)
        }));
    }
    let mut responses = Vec::new();
    for task in tasks {
        match task.await {
            Ok(result) => responses.extend(result?),
            Err(join) => return Err(Failure::new(format!("a contending task failed: {join}"))),
        }
    }

    // Tenures by token: owner, first acquisition, last confirmed heartbeat and its ttl.
    let mut tenures: HashMap<FencingToken, (String, Lease)> = HashMap::new();
    for r in &responses {
        let lease = &r.lease;
        match tenures.get_mut(&lease.fencing_token) {
            None => {
                tenures.insert(
                    lease.fencing_token,
                    (lease.owner.to_string(), lease.clone()),
                );
            }
            Some((owner, latest)) => {
                ensure!(
                    *owner == lease.owner.as_str(),
                    "token {} was given to {owner} and to {}",
                    lease.fencing_token,
                    lease.owner
                );
                ensure_eq!(
                    latest.acquired_at,
                    lease.acquired_at,
                    "acquired_at of token {}",
                    lease.fencing_token
                );
                if lease.heartbeat_at > latest.heartbeat_at {
                    *latest = lease.clone();
                }
            }
        }
    }
    let mut tokens: Vec<FencingToken> = tenures.keys().copied().collect();
    tokens.sort_unstable();
    ensure!(
        tokens.len() >= 2,
        "the lease never changed hands ({} responses), so nothing was tested",
        responses.len()
    );
    for pair in tokens.windows(2) {
        let (_, earlier) = &tenures[&pair[0]];
        let (_, later) = &tenures[&pair[1]];
        ensure!(
            later.acquired_at >= earlier.expires_at(),
            "two live holders: token {} ({}) was acquired at {}, while token {} ({}) was live \
             until {}",
            later.fencing_token,
            later.owner,
            later.acquired_at,
            earlier.fencing_token,
            earlier.owner,
            earlier.expires_at()
        );
    }
    ensure_eq!(tokens.first().copied(), Some(token(1)), "the first token");
    Ok(())
}

async fn registry_stays_bounded(s: &Subject) -> Outcome {
    let short = s.timing.short;
    let storage = Arc::clone(&s.storage);
    let mut tasks = Vec::new();
    for worker in 0..8u32 {
        let storage = Arc::clone(&storage);
        tasks.push(tokio::spawn(async move {
            for n in 0..125u32 {
                let owner = format!("transient-{worker}-{n}");
                storage
                    .request_lease(&LeaseRequest::new(LEASE, owner, 0, short))
                    .await?;
            }
            Ok::<_, EventStorageError>(())
        }));
    }
    for task in tasks {
        match task.await {
            Ok(result) => result?,
            Err(join) => return Err(Failure::new(format!("a requesting task failed: {join}"))),
        }
    }
    request(s, "survivor", 0, s.timing.long).await?;
    s.wait_past(short).await;
    let r = request(s, "survivor", 0, s.timing.long).await?;
    ensure!(
        r.status.holds_lease(),
        "the survivor did not get the abandoned lease"
    );
    let live = s.storage.get_lease_contenders(LEASE).await?;
    let owners: Vec<&str> = live.iter().map(|c| c.owner.as_str()).collect();
    ensure_eq!(
        owners,
        vec!["survivor"],
        "live contenders after 1,000 vanished"
    );
    Ok(())
}

async fn closed_storage_refuses_calls(s: &Subject) -> Outcome {
    request(s, "a", 0, s.timing.long).await?;
    s.storage.close().await?;
    let req = LeaseRequest::new(LEASE, "a", 0, s.timing.long);
    ensure!(
        matches!(
            s.storage.request_lease(&req).await,
            Err(EventStorageError::Closed)
        ),
        "request_lease on a closed storage must fail with Closed"
    );
    ensure!(
        matches!(
            s.storage.release_lease(LEASE, "a").await,
            Err(EventStorageError::Closed)
        ),
        "release_lease on a closed storage must fail with Closed"
    );
    ensure!(
        matches!(s.storage.get_leases().await, Err(EventStorageError::Closed)),
        "get_leases on a closed storage must fail with Closed"
    );
    ensure!(
        matches!(
            s.storage.get_lease_contenders(LEASE).await,
            Err(EventStorageError::Closed)
        ),
        "get_lease_contenders on a closed storage must fail with Closed"
    );
    s.storage.close().await?;
    Ok(())
}
