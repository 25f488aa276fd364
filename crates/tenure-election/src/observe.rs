//! The `tracing` spans of the election and the processor, and the one place every storage
//! call they make goes through: bounded by its call timeout, inside a span, and counted and
//! timed (see [`crate::metrics`]).
//!
//! | span | level | fields | around |
//! |---|---|---|---|
//! | `elector_step` | debug | `lease`, `owner`, `token` (held before the step, if any) | one request and what the elector made of its answer |
//! | `elector_release` | debug | `lease`, `owner`, `token` | a release, or a withdrawal |
//! | `storage_call` | trace | `op`, `lease`, `owner`, `token` | one storage call, from sending to answer or timeout |
//!
//! Spans cost nothing unless a subscriber enables their level; the defaults of the `tenure`
//! binary (`warn`) enable neither.

use std::future::Future;
use std::time::Duration;

use tenure_ports::{EventStorageError, FencingToken, LeaseName, Owner};
use tokio::time::error::Elapsed;
use tokio::time::{Instant, timeout};
use tracing::{Instrument as _, Span, debug_span, trace_span};

use crate::metrics;

/// The span of one elector step.
pub(crate) fn step_span(lease: &LeaseName, owner: &Owner, token: Option<FencingToken>) -> Span {
    debug_span!(
        "elector_step",
        lease = %lease,
        owner = %owner,
        token = token.map(FencingToken::get)
    )
}

/// The span of a release.
pub(crate) fn release_span(lease: &LeaseName, owner: &Owner, token: Option<FencingToken>) -> Span {
    debug_span!(
        "elector_release",
        lease = %lease,
        owner = %owner,
        token = token.map(FencingToken::get)
    )
}

/// Makes one storage call of `figures`' operation for (`lease`, `owner`, `token`), bounded by
/// `limit`, in a `storage_call` span, and records its outcome in `figures`. A call dropped
/// before it answers (its caller gave up on it) is not recorded.
pub(crate) async fn storage_call<T>(
    figures: &metrics::CallFigures,
    (lease, owner, token): (&LeaseName, &Owner, Option<FencingToken>),
    limit: Duration,
    call: impl Future<Output = Result<T, EventStorageError>>,
) -> Result<Result<T, EventStorageError>, Elapsed> {
    let op = figures.op();
    let span = trace_span!(
        "storage_call",
        op,
        lease = %lease,
        owner = %owner,
        token = token.map(FencingToken::get)
    );
    let sent = Instant::now();
    let answer = timeout(limit, call).instrument(span).await;
    figures.record(match &answer {
        Ok(Ok(_)) => Ok(sent.elapsed()),
        Ok(Err(error)) => Err(metrics::error_kind(error)),
        Err(_) => Err(metrics::TIMEOUT),
    });
    answer
}
