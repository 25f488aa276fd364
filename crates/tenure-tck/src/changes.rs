//! The lease-change scenarios ([`Capability::LeaseChanges`]): what a subscription is told, and
//! what it must not be told.
//!
//! A subscriber must hear of a release by the holder and of a step-down request (those are what
//! wake an elector), from every subscription, even one whose waits were cancelled; it must not
//! hear of a plain renewal (a backend that notifies on renewals makes every renewal dearer); and
//! one that fell behind must be told it missed changes ([`LeaseChange::Missed`]) rather than
//! lose them silently. `Acquired` is informational (no caller waits on it), so the kit does not
//! require it. A `Missed` is never wrong (it only causes an earlier request), so the kit accepts
//! one anywhere, but never in place of the change a scenario waits for.
//!
//! Changes are waited for in real time, with a patience of 10 s: a bound on a change
//! that never comes, far beyond what a working backend takes, not a speed target.

use std::future::ready;
use std::time::Duration;

use tenure_ports::{
    Capability, EventStorageError, LeaseChange, LeaseChangeKind, LeaseChanges, LeaseName,
    LeaseRequest, LeaseStatus,
};

use crate::check::{Failure, ensure, ensure_eq};
use crate::{Scenario, ScenarioFuture, Subject};

type Outcome = Result<(), Failure>;

const CHANGES: &[Capability] = &[Capability::Lease, Capability::LeaseChanges];

macro_rules! change_scenarios {
    ($($name:ident),* $(,)?) => {
        pub(crate) static SCENARIOS: &[Scenario] = &[
            $(Scenario {
                name: concat!("lease_changes_", stringify!($name)),
                needs: CHANGES,
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

change_scenarios![
    release_is_announced,
    step_down_request_is_announced,
    quiet_on_renewals,
    next_is_cancel_safe,
    lagging_subscriber_is_told,
    refused_when_closed,
];

/// How long a scenario waits for a change before it fails.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

const LEASE: &str = "tck-changes";
/// A lease of its own whose release marks a point in the stream of changes: every change made
/// before it has been delivered once the marker's release is.
const MARKER: &str = "tck-changes-marker";
/// Handovers made while a subscriber reads nothing: more changes than any reasonable buffer of
/// an in-process backend holds (the in-memory backend keeps 1,024).
const UNREAD_HANDOVERS: u32 = 600;

fn name(lease: &str) -> Result<LeaseName, Failure> {
    LeaseName::new(lease).map_err(|e| Failure::new(format!("{lease:?} is not a lease name: {e}")))
}

fn subscribe(s: &Subject) -> Result<Box<dyn LeaseChanges>, Failure> {
    Ok(s.storage.lease_changes()?)
}

async fn request(
    s: &Subject,
    lease: &str,
    owner: &str,
    priority: i64,
) -> Result<LeaseStatus, Failure> {
    let response = s
        .storage
        .request_lease(&LeaseRequest::new(lease, owner, priority, s.timing.long))
        .await?;
    Ok(response.status)
}

fn is(change: &LeaseChange, lease: &LeaseName, wanted: LeaseChangeKind) -> bool {
    matches!(change, LeaseChange::Changed { lease_name, kind }
        if lease_name == lease && *kind == wanted)
}

/// Reads `changes` until one is `wanted` of `lease`; returns every change read before it.
async fn until(
    changes: &mut dyn LeaseChanges,
    lease: &LeaseName,
    wanted: LeaseChangeKind,
    what: &str,
) -> Result<Vec<LeaseChange>, Failure> {
    let mut before = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, changes.next()).await {
            Err(_) => {
                return Err(Failure::new(format!(
                    "{what}: no {wanted:?} of {lease} within {PATIENCE:?}; read before: \
                     {before:?}"
                )));
            }
            Ok(None) => {
                return Err(Failure::new(format!(
                    "{what}: the subscription ended before a {wanted:?} of {lease}"
                )));
            }
            Ok(Some(change)) if is(&change, lease, wanted) => {
                ensure!(
                    change.wakes(lease) || wanted == LeaseChangeKind::Acquired,
                    "{what}: {change:?} does not wake a caller waiting on {lease}"
                );
                return Ok(before);
            }
            Ok(Some(change)) => before.push(change),
        }
    }
}

/// Marks the current point of the stream: acquires the marker lease and releases it.
async fn mark(s: &Subject) -> Outcome {
    request(s, MARKER, "marker", 0).await?;
    s.storage.release_lease(MARKER, "marker").await?;
    Ok(())
}

/// Reads `changes` up to the marker's release; fails if any change read before it is of
/// `lease` (a `Missed` is accepted).
async fn nothing_of(
    changes: &mut dyn LeaseChanges,
    lease: &LeaseName,
    what: &str,
) -> Result<(), Failure> {
    let marker = name(MARKER)?;
    let before = until(changes, &marker, LeaseChangeKind::Released, what).await?;
    let about: Vec<&LeaseChange> = before
        .iter()
        .filter(|c| matches!(c, LeaseChange::Changed { lease_name, .. } if lease_name == lease))
        .collect();
    ensure!(about.is_empty(), "{what}: told {about:?}");
    Ok(())
}

/// The holder releases: every subscription, one taken before the lease existed and one taken
/// while it was held, hears `Released`; a release by a contender that does not hold it is no
/// release of the lease.
async fn release_is_announced(s: &Subject) -> Outcome {
    let lease = name(LEASE)?;
    let mut early = subscribe(s)?;
    ensure_eq!(
        request(s, LEASE, "a", 0).await?,
        LeaseStatus::Leader,
        "a's first request"
    );
    let mut late = subscribe(s)?;
    ensure_eq!(
        request(s, LEASE, "b", 0).await?,
        LeaseStatus::Standby,
        "b's first request"
    );
    s.storage.release_lease(LEASE, "a").await?;
    until(
        early.as_mut(),
        &lease,
        LeaseChangeKind::Released,
        "the subscription taken before the lease existed",
    )
    .await?;
    until(
        late.as_mut(),
        &lease,
        LeaseChangeKind::Released,
        "the subscription taken while a held it",
    )
    .await?;

    // b takes it; a, no longer holding it, releases it again: nothing is released.
    ensure_eq!(
        request(s, LEASE, "b", 0).await?,
        LeaseStatus::Leader,
        "b after a's release"
    );
    s.storage.release_lease(LEASE, "a").await?;
    mark(s).await?;
    let read = until(
        late.as_mut(),
        &name(MARKER)?,
        LeaseChangeKind::Released,
        "after a's second release",
    )
    .await?;
    let released: Vec<&LeaseChange> = read
        .iter()
        .filter(|c| is(c, &lease, LeaseChangeKind::Released))
        .collect();
    ensure!(
        released.is_empty(),
        "a release by a contender that does not hold the lease was announced as a release: \
         {released:?}"
    );
    Ok(())
}

/// A contender with a higher priority than the holder's registers: the holder is told, so that
/// it can renew at once and hear `LeaderStepDownRequested`.
async fn step_down_request_is_announced(s: &Subject) -> Outcome {
    let lease = name(LEASE)?;
    ensure_eq!(
        request(s, LEASE, "a", 0).await?,
        LeaseStatus::Leader,
        "a's first request"
    );
    let mut changes = subscribe(s)?;
    ensure_eq!(
        request(s, LEASE, "b", 5).await?,
        LeaseStatus::Standby,
        "the higher-priority contender"
    );
    until(
        changes.as_mut(),
        &lease,
        LeaseChangeKind::StepDownRequested,
        "b outranks the holder",
    )
    .await?;
    ensure_eq!(
        request(s, LEASE, "a", 0).await?,
        LeaseStatus::LeaderStepDownRequested,
        "the holder's renewal after the change"
    );
    Ok(())
}

/// Renewals of the holder, and standbys that do not outrank it asking again, are not changes.
async fn quiet_on_renewals(s: &Subject) -> Outcome {
    let lease = name(LEASE)?;
    ensure_eq!(
        request(s, LEASE, "a", 5).await?,
        LeaseStatus::Leader,
        "a's first request"
    );
    ensure_eq!(
        request(s, LEASE, "b", 5).await?,
        LeaseStatus::Standby,
        "an equal-priority contender"
    );
    ensure_eq!(
        request(s, LEASE, "c", 1).await?,
        LeaseStatus::Standby,
        "a lower-priority contender"
    );
    let mut changes = subscribe(s)?;
    for round in 0..5 {
        s.tick().await;
        ensure_eq!(
            request(s, LEASE, "a", 5).await?,
            LeaseStatus::Leader,
            "a's renewal, round {round}"
        );
        ensure_eq!(
            request(s, LEASE, "b", 5).await?,
            LeaseStatus::Standby,
            "b asking again, round {round}"
        );
        ensure_eq!(
            request(s, LEASE, "c", 1).await?,
            LeaseStatus::Standby,
            "c asking again, round {round}"
        );
    }
    mark(s).await?;
    nothing_of(
        changes.as_mut(),
        &lease,
        "renewals and standbys asking again",
    )
    .await
}

/// A wait on the subscription that is given up (a `select!` whose other branch won) loses no
/// change: the changes made around such waits are all read afterwards.
async fn next_is_cancel_safe(s: &Subject) -> Outcome {
    let lease = name(LEASE)?;
    let mut changes = subscribe(s)?;
    let mut read = Vec::new();
    // A wait given up while nothing happens.
    if let Ok(Some(change)) = tokio::time::timeout(Duration::from_millis(20), changes.next()).await
    {
        read.push(change);
    }
    request(s, LEASE, "a", 0).await?;
    s.storage.release_lease(LEASE, "a").await?;
    // Waits given up at their first poll, while the release may or may not have arrived.
    for _ in 0..10 {
        tokio::select! {
            biased;
            change = changes.next() => match change {
                Some(change) => read.push(change),
                None => return Err(Failure::new("the subscription ended")),
            },
            () = ready(()) => {}
        }
        tokio::task::yield_now().await;
    }
    if read
        .iter()
        .any(|c| is(c, &lease, LeaseChangeKind::Released))
    {
        return Ok(());
    }
    until(
        changes.as_mut(),
        &lease,
        LeaseChangeKind::Released,
        "after cancelled waits",
    )
    .await?;
    Ok(())
}

/// A subscriber that reads nothing while many changes are made is, when it reads again, given
/// every one of them, or told that it missed some; and it is told of later changes.
async fn lagging_subscriber_is_told(s: &Subject) -> Outcome {
    let lease = name(LEASE)?;
    let mut changes = subscribe(s)?;
    for n in 0..UNREAD_HANDOVERS {
        let owner = if n.is_multiple_of(2) { "a" } else { "b" };
        ensure!(
            request(s, LEASE, owner, 0).await?.holds_lease(),
            "{owner} did not acquire the released lease (handover {n})"
        );
        s.storage.release_lease(LEASE, owner).await?;
    }
    mark(s).await?;
    let read = until(
        changes.as_mut(),
        &name(MARKER)?,
        LeaseChangeKind::Released,
        "the lagging subscriber",
    )
    .await?;
    let missed = read.contains(&LeaseChange::Missed);
    let released = read
        .iter()
        .filter(|c| is(c, &lease, LeaseChangeKind::Released))
        .count();
    ensure!(
        missed || released == UNREAD_HANDOVERS as usize,
        "{released} of {UNREAD_HANDOVERS} releases were delivered and no Missed: changes \
         were lost silently"
    );
    // Still subscribed: a later change arrives.
    request(s, LEASE, "c", 0).await?;
    s.storage.release_lease(LEASE, "c").await?;
    until(
        changes.as_mut(),
        &lease,
        LeaseChangeKind::Released,
        "a release after the lag",
    )
    .await?;
    Ok(())
}

/// A subscription is a call like any other: a closed storage refuses it.
async fn refused_when_closed(s: &Subject) -> Outcome {
    subscribe(s)?;
    s.storage.close().await?;
    ensure!(
        matches!(s.storage.lease_changes(), Err(EventStorageError::Closed)),
        "lease_changes on a closed storage must fail with Closed"
    );
    Ok(())
}
