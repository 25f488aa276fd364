//! Connections that shed load instead of amplifying it, for the pools the deadpool driver
//! builds: paced connects, and abandoned calls that keep their connection.
//!
//! Past capacity, a pool that connects inside its callers' futures collapses: each caller
//! times out while its connection is being set up, the half-made connection is dropped, and
//! the next caller forks another backend, so the server spends itself on connection setups
//! while no call gets through (issue 13 measured goodput falling to zero and staying there).
//! Here instead:
//!
//! * **Connects are detached from their callers.** A connect runs in a task of its own, bounded
//!   by the connect timeout of the connection settings, not by the caller's patience. A
//!   connection that completes after its caller left is kept ([`Stash`]) and handed to the
//!   next connect the pool asks for, so every backend the server forked serves calls.
//! * **Connects are paced**: at most [`CONCURRENT_CONNECTS`] are under way at once (a
//!   semaphore), and a connect whose caller left before it got its turn is not made at all.
//!   With the pool's own bound on its size, the server sees at most the pool's size plus that
//!   many connections being set up, whatever the offered load.
//! * **An abandoned call keeps its connection** ([`drain`](Pacing::drain)): its statement is left to finish
//!   (tokio-postgres discards the answer nobody waits for), and the connection goes back to the
//!   pool once an empty statement queued behind it is answered. If that takes longer than
//!   [`GRACE`] (the statement waits on a lock, say), a cancel request (PostgreSQL's, on a
//!   connection of its own, and only when a connect slot is free) stops it first. A connection
//!   that a cancel does not make idle at once (a stalled backend), or that without a cancel
//!   does not come back within the connect timeout (what a replacement could take), is
//!   closed.
//! * **A connection let go of ends its session** ([`drive`]): when the pool closes or drops
//!   a connection, its session ends with PostgreSQL's Terminate message within [`GOODBYE`]
//!   instead of having its socket cut (which the server counts as an abandoned session).
//!
//! Pools an application hands in keep their own connect behaviour; their abandoned
//! connections are closed (the adapter cannot send a cancel request without their TLS setup).

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Connect, Object};
use futures::future::BoxFuture;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, Error, Socket};

use super::{GOODBYE, GRACE};

/// How many connects (and cancel requests) one storage has under way at once.
pub(crate) const CONCURRENT_CONNECTS: usize = 2;

/// A connection made for the pool: the client and the task driving its socket.
type Made = (Client, JoinHandle<()>);

/// Connections whose caller left before they were made, for the next connect; at most as many
/// as the pool holds.
#[derive(Default)]
struct Stash {
    made: Mutex<Vec<Made>>,
}

impl Stash {
    /// A stashed connection that is still open, if any (closed ones are dropped).
    fn take(&self) -> Option<Made> {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some((client, task)) = made.pop() {
            if !client.is_closed() {
                return Some((client, task));
            }
            task.abort();
        }
        None
    }

    /// Keeps `connection` unless `limit` are kept already (it is then closed).
    fn keep(&self, connection: Made, limit: usize) {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if made.len() < limit {
            made.push(connection);
        } else {
            connection.1.abort();
        }
    }
}

/// What connects and cancel requests of one storage share.
pub(crate) struct Pacing<T> {
    tls: T,
    slots: Arc<Semaphore>,
    stash: Stash,
    limit: usize,
}

impl<T> Pacing<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    /// Pacing for a pool of at most `pool_size` connections made with `tls`.
    pub(crate) fn new(tls: T, pool_size: usize) -> Arc<Self> {
        Arc::new(Pacing {
            tls,
            slots: Arc::new(Semaphore::new(CONCURRENT_CONNECTS)),
            stash: Stash::default(),
            limit: pool_size,
        })
    }

    /// Closes every stashed connection (the pool was closed).
    pub(crate) fn close(&self) {
        while let Some((_, task)) = self.stash.take() {
            task.abort();
        }
    }

    /// A connection made in a task of its own, at its turn; kept for the next caller if this
    /// one has left by then.
    async fn connect(self: Arc<Self>, config: Config) -> Result<Made, Error> {
        if let Some(made) = self.stash.take() {
            return Ok(made);
        }
        let (answer, wait) = oneshot::channel::<Result<Made, Error>>();
        let pacing = Arc::clone(&self);
        let inline = config.clone();
        tokio::spawn(async move {
            let Ok(_slot) = Arc::clone(&pacing.slots).acquire_owned().await else {
                return;
            };
            if answer.is_closed() {
                // Its caller left while it waited for its turn: no connection is made for it.
                return;
            }
            let made = config
                .connect(pacing.tls.clone())
                .await
                .map(|(client, socket)| (client, drive(socket)));
            if let Err(Ok(made)) = answer.send(made) {
                tracing::debug!(target: "tenure_postgres", "a connection made after its caller left is kept for the next");
                pacing.stash.keep(made, pacing.limit);
            }
        });
        match wait.await {
            Ok(made) => made,
            // The task ended without an answer (the runtime is shutting down): connect here.
            Err(_) => {
                let (client, socket) = inline.connect(self.tls.clone()).await?;
                Ok((client, drive(socket)))
            }
        }
    }

    /// Deals with `connection`, whose call was abandoned with a statement in flight, in a task
    /// of its own: see [`drain`](Self::drain).
    pub(crate) fn abandon(self: &Arc<Self>, connection: Object, bound: Duration) {
        let pacing = Arc::clone(self);
        tokio::spawn(async move { pacing.drain(connection, bound).await });
    }

    /// Gives `connection` back to the pool once its abandoned statement is done. A statement
    /// that runs past [`GRACE`] is cancelled, when a slot is free, and the connection is closed
    /// unless the cancel makes it idle within twice [`GRACE`] (a backend that ignores a cancel
    /// is stalled: its connection must not hold a place in the pool); without a free slot it
    /// may take up to `bound`, then it is closed.
    async fn drain(&self, connection: Object, bound: Duration) {
        if idle_within(&connection, GRACE).await {
            return;
        }
        // Only with a free slot: under overload a cancel request is one more connection setup.
        let patience = match self.slots.try_acquire() {
            Ok(_slot) => {
                let token = connection.cancel_token();
                match tokio::time::timeout(2 * GRACE, token.cancel_query(self.tls.clone())).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::debug!(target: "tenure_postgres", %error, "cancel request failed");
                    }
                    Err(_) => {
                        tracing::debug!(target: "tenure_postgres", "cancel request timed out");
                    }
                }
                2 * GRACE
            }
            Err(_) => bound,
        };
        // A cancel that was sent was delivered before its connection closed: the backend is
        // idle (where a cancel is ignored) or still in the abandoned statement (which it
        // stops), so the empty statement below cannot leave a cancel pending for the next
        // caller.
        if !idle_within(&connection, patience).await {
            tracing::debug!(target: "tenure_postgres", "an abandoned call's connection stayed busy: closed");
            drop(Object::take(connection));
        }
    }
}

/// Drives `socket`, a connection's future, in a task of its own; returns the handle of a
/// watcher task that stands for it, for deadpool.
///
/// deadpool aborts the task it is given when it drops a connection (its pool closed, or the
/// connection was taken out of it), which would cut the socket with the session still open.
/// Aborting the watcher instead tells the driving task to let the connection end as
/// tokio-postgres ends it once its client is dropped (the Terminate message, after any answer
/// still due), within [`GOODBYE`]; past that (a stalled server) the socket is cut.
fn drive<F>(socket: F) -> JoinHandle<()>
where
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    let (goodbye, said) = oneshot::channel::<()>();
    let driving = tokio::spawn(async move {
        tokio::pin!(socket);
        let ended = tokio::select! {
            ended = &mut socket => Some(ended),
            _ = said => tokio::time::timeout(GOODBYE, &mut socket).await.ok(),
        };
        match ended {
            Some(Ok(())) => {}
            Some(Err(error)) => {
                tracing::debug!(target: "tenure_postgres", %error, "connection ended");
            }
            None => {
                tracing::debug!(target: "tenure_postgres", "a connection let go of did not end within {GOODBYE:?}: cut");
            }
        }
    });
    tokio::spawn(async move {
        // Dropped when this task ends or is aborted; dropping `driving`'s handle leaves it
        // running.
        let _goodbye = goodbye;
        let _ = driving.await;
    })
}

/// Whether `connection` answers an empty statement (queued behind whatever it still runs)
/// within `bound`.
async fn idle_within(connection: &ClientWrapper, bound: Duration) -> bool {
    matches!(
        tokio::time::timeout(bound, connection.simple_query("")).await,
        Ok(Ok(_))
    )
}

/// The [`Connect`] of a pool the adapter builds: [`Pacing::connect`].
pub(crate) struct PacedConnect<T>(pub(crate) Arc<Pacing<T>>);

impl<T> Connect for PacedConnect<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn connect(&self, config: &Config) -> BoxFuture<'_, Result<Made, Error>> {
        Box::pin(Arc::clone(&self.0).connect(config.clone()))
    }
}
