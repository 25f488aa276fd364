//! What happens to a connection whose call was abandoned while its statement was in flight
//! (the call timed out, or its future was dropped).
//!
//! Throwing such a connection away makes the pool open a new one for the next caller; under
//! overload every call then times out during connection setup and the server spends its time
//! forking backends (issue 13). So, where the driver allows it, the connection is kept: the
//! statement is cancelled with PostgreSQL's cancel request, the connection is probed with a
//! trivial statement (which also checks that no transaction was left open), and only then does it go back to the pool. It is closed when anything in
//! that sequence fails or takes longer than [`abandon_bound`] (the connection holds its
//! pool slot meanwhile, so no new session is opened for it).
//!
//! Per driver:
//! * **deadpool (tokio-postgres)**: `Client::cancel_token()` sends the cancel request on a
//!   separate short-lived socket; tokio-postgres's connection task drains the answer of the
//!   dropped statement by itself, so after the probe the connection is clean. Kept.
//! * **sqlx 0.9**: sqlx has no public way to send a cancel request, and a dropped query leaves
//!   the connection to drain the pending answer on its next use; there is no way to bound that
//!   or to stop the server working on the statement. Closed, as before (see
//!   [`Driver::abandon`](super::Driver::abandon)'s default).
//!
//! The probe also protects the next caller from a late cancel: a cancel request that reaches
//! the backend after the abandoned statement ended can only hit the probe (which is retried
//! once), never a statement of the next caller, because the connection goes back to the pool
//! only after a probe succeeded.

use std::time::Duration;

use deadpool_postgres::Object;
use tokio_postgres::NoTls;

/// The bound on cancelling and probing one abandoned connection when the pool has no wait
/// timeout; past it, the connection is closed.
const DEFAULT_ABANDON_BOUND: Duration = Duration::from_secs(1);

/// The bound on cancelling and probing one abandoned connection of a pool whose callers wait
/// at most `pool_wait` for a connection: half of it, so that a caller queued behind a
/// connection that cannot be saved (a stalled server) still gets a new one in time.
pub(crate) fn abandon_bound(pool_wait: Option<Duration>) -> Duration {
    pool_wait.map_or(DEFAULT_ABANDON_BOUND, |wait| wait / 2)
}

/// How a cancel request reaches the server: over TLS as the pool's connections do when the
/// storage built the pool (a server that accepts only TLS refuses a plain cancel request);
/// in plain text for a pool the application built, whose TLS settings the storage does not
/// know (a refused cancel closes the connection: safe, only dearer).
#[cfg(feature = "tls")]
pub(crate) type CancelTls = Option<super::tls::MakeRustls>;
/// How a cancel request reaches the server: in plain text, without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub(crate) type CancelTls = Option<NoTls>;

// `CancelTls` is `Copy` without the `tls` feature, a connector to clone with it.
#[cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]
async fn send_cancel(connection: &Object, tls: &CancelTls) -> Result<(), tokio_postgres::Error> {
    match tls {
        Some(tls) => connection.cancel_token().cancel_query(tls.clone()).await,
        None => connection.cancel_token().cancel_query(NoTls).await,
    }
}

/// The probe: answers `t` when no transaction was left open on the connection.
const PROBE: &str = "SELECT now() = statement_timestamp()";

/// Whether the probe's answer says the connection is outside any transaction.
fn outside_transaction(messages: &[tokio_postgres::SimpleQueryMessage]) -> bool {
    messages.iter().any(
        |m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some("t")),
    )
}

/// SQLSTATE `query_canceled`.
const QUERY_CANCELED: &str = "57014";

/// Cancels the statement in flight on `connection` and returns the connection to its pool once
/// a probe succeeded; closes it otherwise. Runs in the background on the current tokio runtime;
/// without one, the connection is closed at once.
pub(crate) fn cancel_and_keep(connection: Object, bound: Duration, tls: CancelTls) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        drop(Object::take(connection));
        return;
    };
    runtime.spawn(async move {
        match tokio::time::timeout(bound, cancel_and_probe(&connection, &tls)).await {
            // Dropping the object gives it back to the pool.
            Ok(true) => drop(connection),
            _ => {
                tracing::debug!(target: "tenure_postgres", "abandoned connection closed");
                drop(Object::take(connection));
            }
        }
    });
}

/// Whether the connection is clean after cancelling what it was running.
async fn cancel_and_probe(connection: &Object, tls: &CancelTls) -> bool {
    if connection.is_closed() {
        return false;
    }
    if let Err(e) = send_cancel(connection, tls).await {
        tracing::debug!(target: "tenure_postgres", error = %e, "cancel request failed");
        return false;
    }
    // The first probe may itself be hit by the cancel if the abandoned statement had already
    // ended when the cancel arrived; the second cannot be.
    // `now()` is the transaction's start: it equals the statement's start only when the probe
    // runs in a transaction of its own, so a connection left inside a transaction (the schema
    // scripts open one) answers `f` and is closed rather than handed on.
    for _ in 0..2 {
        match connection.simple_query(PROBE).await {
            Ok(messages) => return outside_transaction(&messages),
            Err(e) if e.code().map(|c| c.code()) == Some(QUERY_CANCELED) => continue,
            Err(_) => return false,
        }
    }
    false
}
