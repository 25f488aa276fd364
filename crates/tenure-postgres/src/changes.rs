//! Wake-ups: the storage's lease changes ([`Capability::LeaseChanges`]), from PostgreSQL's
//! `LISTEN`/`NOTIFY`.
//!
//! The triggers of `0007_lease_notifications.sql` notify on the channel
//! `<prefix>lease_changes` with `<kind>:<lease name>` when a lease is released, acquired, or
//! asked to step down. A storage with notifications on keeps **one** session connection of its
//! own (never one of the pool: a notification arrives only on the connection that listens),
//! opened with the storage's connection settings and TLS, with `application_name`
//! `<its application_name>-listener` (`tenure-listener` by default). It is started when the
//! storage is built ([`Notifications::start`], which waits until it listens, so that every
//! subscription hears every change committed after it was taken) and fans every notification
//! out to every subscription through a broadcast channel; a subscription that falls behind is told
//! [`LeaseChange::Missed`].
//!
//! Notifications sent while the listener is disconnected are lost, so after every connection
//! (the first one included) the listener sends [`LeaseChange::Missed`] to every subscription:
//! every waiting elector requests at once and learns the state by its answer. A lost
//! connection is reconnected by the listener itself, after a jittered, doubling delay (from
//! [`RECONNECT_FIRST`] up to [`RECONNECT_CAP`]); a connection that went silently dead is found
//! by a ping every [`PING_EVERY`]. The listener stops when the storage is closed or dropped.
//!
//! Correctness never depends on it: a change only causes an earlier request, whose answer is
//! decided by the lease functions as always, and the electors keep polling.
//!
//! [`Capability::LeaseChanges`]: tenure_ports::Capability::LeaseChanges

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tenure_ports::{
    Backoff, Capability, EventStorageError, LeaseChange, LeaseChangeKind, LeaseChanges, LeaseName,
    async_trait,
};
use tokio::sync::{broadcast, oneshot};

use crate::prefix::TablePrefix;

/// The first delay before reconnecting after a connection was lost (then doubling, jittered).
pub(crate) const RECONNECT_FIRST: Duration = Duration::from_millis(100);
/// The longest delay between two connection attempts.
pub(crate) const RECONNECT_CAP: Duration = Duration::from_secs(10);
/// How often the listener checks that its connection is alive.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(30);
/// How many changes a subscription may fall behind before it is told it missed some.
const BUFFERED: usize = 1024;

/// The channel the triggers notify on for `prefix`: `<prefix>lease_changes`, an identifier of
/// at most 63 bytes (the prefix is at most [`crate::MAX_PREFIX_BYTES`] long, made for a longer
/// suffix).
pub(crate) fn channel(prefix: &TablePrefix) -> String {
    format!("{prefix}lease_changes")
}

/// A notification's payload as a change: `released:<name>`, `acquired:<name>`,
/// `step_down_requested:<name>`. Anything else (a kind of a later release, a name that is not
/// a valid lease name) is `None`, and ignored.
pub(crate) fn parse(payload: &str) -> Option<LeaseChange> {
    let (kind, name) = payload.split_once(':')?;
    let kind = match kind {
        "released" => LeaseChangeKind::Released,
        "acquired" => LeaseChangeKind::Acquired,
        "step_down_requested" => LeaseChangeKind::StepDownRequested,
        _ => return None,
    };
    let lease_name = LeaseName::new(name).ok()?;
    Some(LeaseChange::Changed { lease_name, kind })
}

/// The TLS connector of the tokio-postgres listener: the pool's.
#[cfg(all(feature = "deadpool", feature = "tls"))]
pub(crate) type Tls = crate::connection::tls::MakeRustls;
/// The TLS connector of the tokio-postgres listener: none, without the `tls` feature.
#[cfg(all(feature = "deadpool", not(feature = "tls")))]
pub(crate) type Tls = tokio_postgres::NoTls;

/// Where the listener connects: the storage's settings, on its driver.
pub(crate) enum Source {
    /// tokio-postgres, with the connector the pool uses.
    #[cfg(feature = "deadpool")]
    Tokio {
        config: Box<tokio_postgres::Config>,
        tls: Tls,
    },
    /// sqlx, with the pool's connect options.
    #[cfg(feature = "sqlx-0_9")]
    Sqlx(Box<sqlx::postgres::PgConnectOptions>),
}

impl Source {
    /// The same settings, with `application_name` `<application_name>-listener`, so that an
    /// operator (or a test) tells the listener from the pool's connections.
    #[cfg(feature = "deadpool")]
    pub(crate) fn tokio(mut config: tokio_postgres::Config, tls: Tls) -> Self {
        let name = listener_name(config.get_application_name());
        config.application_name(&name);
        Source::Tokio {
            config: Box::new(config),
            tls,
        }
    }

    /// The same settings, with `application_name` `<application_name>-listener`.
    #[cfg(feature = "sqlx-0_9")]
    pub(crate) fn sqlx(options: sqlx::postgres::PgConnectOptions) -> Self {
        let name = listener_name(options.get_application_name());
        Source::Sqlx(Box::new(options.application_name(&name)))
    }
}

fn listener_name(application_name: Option<&str>) -> String {
    format!("{}-listener", application_name.unwrap_or("tenure"))
}

/// The wake-ups of one storage: off, not started yet, running, or closed.
pub(crate) struct Notifications {
    state: Mutex<State>,
}

enum State {
    /// Turned off, or not possible for this storage (see [`Notifications::off`]).
    Off(&'static str),
    /// On; the listener starts when the storage is built (or with the first subscription).
    Idle(Box<Start>),
    /// The listener runs; dropping `stop` stops it.
    Running {
        sender: broadcast::Sender<LeaseChange>,
        _stop: oneshot::Sender<()>,
    },
    /// The storage was closed.
    Closed,
}

/// What the listener needs.
struct Start {
    source: Source,
    channel: String,
    timeout: Duration,
}

impl fmt::Debug for Notifications {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state.lock() {
            Ok(state) => match &*state {
                State::Off(_) => "off",
                State::Idle(_) => "not started",
                State::Running { .. } => "listening",
                State::Closed => "closed",
            },
            Err(_) => "poisoned",
        };
        f.write_str(state)
    }
}

impl Notifications {
    /// No wake-ups, for `reason` (said in the log when an elector asks).
    pub(crate) fn off(reason: &'static str) -> Self {
        Notifications {
            state: Mutex::new(State::Off(reason)),
        }
    }

    /// Wake-ups from `source`, listening on `prefix`'s channel; each connection attempt (and
    /// each ping) bounded by `timeout`.
    pub(crate) fn on(source: Source, prefix: &TablePrefix, timeout: Duration) -> Self {
        Notifications {
            state: Mutex::new(State::Idle(Box::new(Start {
                source,
                channel: channel(prefix),
                timeout,
            }))),
        }
    }

    /// Whether the storage has [`Capability::LeaseChanges`].
    pub(crate) fn available(&self) -> bool {
        self.state
            .lock()
            .is_ok_and(|state| !matches!(*state, State::Off(_)))
    }

    /// Starts the listener (if it is on and not started yet) and waits until it listens, or
    /// its first connection attempt failed, or `patience` passed: from then on (while it stays
    /// connected) every change committed after a subscription was taken reaches it. Without
    /// this wait, changes made before the listener's first `LISTEN` would be lost, and only a
    /// `Missed` would say so. A listener that cannot connect yet keeps trying on its own.
    pub(crate) async fn start(&self, patience: Duration) {
        let started = match self.lock().map(|mut state| launch(&mut state)) {
            Ok(Some(started)) => started,
            Ok(None) | Err(_) => return,
        };
        let Started {
            mut subscription,
            first_failed,
        } = started;
        let outcome = tokio::time::timeout(patience, async {
            tokio::select! {
                change = subscription.next() => change == Some(LeaseChange::Missed),
                _ = first_failed => false,
            }
        })
        .await;
        if matches!(outcome, Ok(true)) {
            tracing::debug!(target: "tenure_postgres", "the storage's listener is listening");
        } else {
            tracing::warn!(target: "tenure_postgres", ?patience,
                "the lease-change listener is not listening yet; it keeps trying, and electors \
                 poll until it does");
        }
    }

    /// A subscription; the first one starts the listener (on the current tokio runtime) if
    /// [`start`](Self::start) did not.
    pub(crate) fn subscribe(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        let mut state = self.lock()?;
        match &*state {
            State::Off(reason) => {
                tracing::debug!(target: "tenure_postgres", reason, "no lease changes");
                return Err(EventStorageError::Unsupported(Capability::LeaseChanges));
            }
            State::Closed => return Err(EventStorageError::Closed),
            State::Running { sender, .. } => {
                return Ok(Box::new(Subscription(sender.subscribe())));
            }
            State::Idle(_) => {}
        }
        // The state is `Idle`: `launch` fails only outside a runtime.
        match launch(&mut state) {
            Some(started) => Ok(Box::new(started.subscription)),
            None => Err(EventStorageError::unavailable(
                "lease changes need a tokio runtime: subscribe from within one",
            )),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, EventStorageError> {
        self.state
            .lock()
            .map_err(|_| EventStorageError::internal("the listener's state is poisoned"))
    }

    /// Stops the listener (if it runs); every subscription ends once it has taken what was
    /// sent before.
    pub(crate) fn close(&self) {
        if let Ok(mut state) = self.state.lock()
            && !matches!(*state, State::Off(_))
        {
            *state = State::Closed;
        }
    }
}

/// A listener just spawned: a subscription taken before it could send anything, and word of
/// its first connection attempt failing.
struct Started {
    subscription: Subscription,
    first_failed: oneshot::Receiver<()>,
}

/// Spawns the listener of an `Idle` state on the current runtime and makes the state
/// `Running`; `None` in any other state, or outside a runtime.
fn launch(state: &mut State) -> Option<Started> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    if !matches!(state, State::Idle(_)) {
        return None;
    }
    let State::Idle(start) = std::mem::replace(state, State::Closed) else {
        return None;
    };
    let (sender, receiver) = broadcast::channel(BUFFERED);
    let (stop, stopped) = oneshot::channel();
    let (failed, first_failed) = oneshot::channel();
    drop(runtime.spawn(run(*start, sender.clone(), stopped, failed)));
    *state = State::Running {
        sender,
        _stop: stop,
    };
    Some(Started {
        subscription: Subscription(receiver),
        first_failed,
    })
}

/// A subscription to a PostgreSQL storage's lease changes.
#[derive(Debug)]
struct Subscription(broadcast::Receiver<LeaseChange>);

#[async_trait]
impl LeaseChanges for Subscription {
    async fn next(&mut self) -> Option<LeaseChange> {
        // `recv` is cancel safe: a change not yet taken stays in the channel.
        match self.0.recv().await {
            Ok(change) => Some(change),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(LeaseChange::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// The listener: connects, listens, forwards, and reconnects after a jittered delay, until
/// `stopped` (the storage closed or dropped). `first_failed` is told when the first session
/// ends (whether or not it got to listen).
async fn run(
    start: Start,
    sender: broadcast::Sender<LeaseChange>,
    mut stopped: oneshot::Receiver<()>,
    first_failed: oneshot::Sender<()>,
) {
    let mut backoff = Backoff::new();
    let mut first_failed = Some(first_failed);
    loop {
        let session = session(&start, &sender, &mut backoff);
        let ended = tokio::select! {
            _ = &mut stopped => return,
            ended = session => ended,
        };
        if let Some(told) = first_failed.take() {
            let _ = told.send(()); // nobody may be waiting any more
        }
        let delay = backoff.failed(RECONNECT_FIRST, RECONNECT_CAP);
        tracing::info!(target: "tenure_postgres", reason = %ended, ?delay,
            "the lease-change listener lost its connection; reconnecting");
        tokio::select! {
            _ = &mut stopped => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One connection: connect, `LISTEN`, tell every subscription it may have missed changes,
/// then forward notifications until the connection fails; why it ended.
async fn session(
    start: &Start,
    sender: &broadcast::Sender<LeaseChange>,
    backoff: &mut Backoff,
) -> String {
    match &start.source {
        #[cfg(feature = "deadpool")]
        Source::Tokio { config, tls } => {
            #[allow(clippy::clone_on_copy)] // `NoTls` without the `tls` feature
            let tls = tls.clone();
            tokio_session::run(config, tls, start, sender, backoff).await
        }
        #[cfg(feature = "sqlx-0_9")]
        Source::Sqlx(options) => sqlx_session::run(options, start, sender, backoff).await,
    }
}

/// Forwards one notification's payload, if it is one of ours.
fn forward(sender: &broadcast::Sender<LeaseChange>, payload: &str) {
    match parse(payload) {
        // No subscription left is not an error: the next one subscribes to the same sender.
        Some(change) => drop(sender.send(change)),
        None => tracing::debug!(target: "tenure_postgres", payload, "ignoring a notification"),
    }
}

/// The session had its `LISTEN` in place: tell everyone, and start backing off afresh.
fn connected(sender: &broadcast::Sender<LeaseChange>, backoff: &mut Backoff) {
    backoff.succeeded();
    tracing::debug!(target: "tenure_postgres", "the lease-change listener is listening");
    drop(sender.send(LeaseChange::Missed));
}

#[cfg(feature = "deadpool")]
mod tokio_session {
    use std::future::Future;

    use futures::{Stream, StreamExt as _};
    use tokio_postgres::AsyncMessage;
    use tokio_postgres::tls::MakeTlsConnect;

    use super::{Backoff, LeaseChange, PING_EVERY, Start, broadcast, connected, forward};
    use crate::connection::GOODBYE;

    /// A session on tokio-postgres: the connection is driven here (not by a task of its own),
    /// so that its notifications are read (`poll_message`) rather than dropped.
    pub(super) async fn run<T>(
        config: &tokio_postgres::Config,
        tls: T,
        start: &Start,
        sender: &broadcast::Sender<LeaseChange>,
        backoff: &mut Backoff,
    ) -> String
    where
        T: MakeTlsConnect<tokio_postgres::Socket>,
        T::Stream: Send + 'static,
    {
        let connecting = tokio::time::timeout(start.timeout, config.connect(tls));
        let (client, mut connection) = match connecting.await {
            Ok(Ok(pair)) => pair,
            Ok(Err(err)) => return format!("connecting: {err}"),
            Err(_) => return format!("connecting: no answer within {:?}", start.timeout),
        };
        let mut session = Open {
            client: Some(client),
            messages: Some(futures::stream::poll_fn(move |cx| {
                connection.poll_message(cx)
            })),
        };
        let (Some(client), Some(messages)) = (&session.client, &mut session.messages) else {
            return "the session was let go of before it listened".to_owned();
        };
        let listen = format!("LISTEN {}", start.channel);
        if let Err(why) = alongside(
            &start.timeout,
            client.batch_execute(&listen),
            messages,
            sender,
        )
        .await
        {
            return format!("listening: {why}");
        }
        connected(sender, backoff);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.reset();
        loop {
            tokio::select! {
                message = messages.next() => {
                    if let Err(why) = handle(message, sender) {
                        return why;
                    }
                }
                _ = ping.tick() => {
                    if let Err(why) =
                        alongside(&start.timeout, client.simple_query(""), messages, sender)
                            .await
                    {
                        return format!("pinging: {why}");
                    }
                }
            }
        }
    }

    /// A session's client and its connection's messages. Dropped (the session failed, or the
    /// storage closed and the listener was dropped with it), it lets the connection end its
    /// session with the Terminate message in a task of its own, within [`GOODBYE`], instead of
    /// cutting the socket.
    struct Open<S>
    where
        S: Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Send + Unpin + 'static,
    {
        client: Option<tokio_postgres::Client>,
        messages: Option<S>,
    }

    impl<S> Drop for Open<S>
    where
        S: Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Send + Unpin + 'static,
    {
        fn drop(&mut self) {
            // tokio-postgres sends Terminate once its client is gone and nothing is due.
            drop(self.client.take());
            let (Some(mut messages), Ok(runtime)) =
                (self.messages.take(), tokio::runtime::Handle::try_current())
            else {
                return;
            };
            drop(runtime.spawn(async move {
                // Until the connection ends or fails (after a failure it may fail again at
                // every poll, without ever waiting: not a loop to go on with).
                let ended = async { while let Some(Ok(_)) = messages.next().await {} };
                let _ = tokio::time::timeout(GOODBYE, ended).await;
            }));
        }
    }

    /// Runs `work` (a statement of `client`) within `timeout` while reading the connection's
    /// messages (a statement's answer only comes while the connection is polled).
    async fn alongside<W, O>(
        timeout: &std::time::Duration,
        work: W,
        messages: &mut (impl Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Unpin),
        sender: &broadcast::Sender<LeaseChange>,
    ) -> Result<(), String>
    where
        W: Future<Output = Result<O, tokio_postgres::Error>>,
    {
        let work = tokio::time::timeout(*timeout, work);
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => {
                    return match done {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(err)) => Err(err.to_string()),
                        Err(_) => Err(format!("no answer within {timeout:?}")),
                    };
                }
                message = messages.next() => handle(message, sender)?,
            }
        }
    }

    /// One message of the connection: a notification is forwarded; an error or the end of
    /// the connection ends the session.
    fn handle(
        message: Option<Result<AsyncMessage, tokio_postgres::Error>>,
        sender: &broadcast::Sender<LeaseChange>,
    ) -> Result<(), String> {
        match message {
            Some(Ok(AsyncMessage::Notification(notification))) => {
                forward(sender, notification.payload());
                Ok(())
            }
            Some(Ok(_)) => Ok(()),
            Some(Err(err)) => Err(err.to_string()),
            None => Err("the connection closed".to_owned()),
        }
    }
}

#[cfg(feature = "sqlx-0_9")]
mod sqlx_session {
    use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

    use super::{Backoff, LeaseChange, PING_EVERY, Start, broadcast, connected, forward};
    use crate::connection::GOODBYE;

    /// A session on sqlx: a `PgListener` on a pool of one connection of its own (not the
    /// storage's pool), closed when the session ends.
    pub(super) async fn run(
        options: &PgConnectOptions,
        start: &Start,
        sender: &broadcast::Sender<LeaseChange>,
        backoff: &mut Backoff,
    ) -> String {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(start.timeout)
            .idle_timeout(None)
            .max_lifetime(None)
            .test_before_acquire(false)
            .connect_lazy_with(options.clone());
        // The session's connection is not reused: the next session opens a new one.
        let pool = Closing(pool);
        listen(&pool.0, start, sender, backoff).await
    }

    /// The session's pool, closed when the session ends or is dropped (the storage closed):
    /// sqlx ends its connection's session with the Terminate message, within [`GOODBYE`],
    /// instead of the socket being cut with the listener.
    struct Closing(sqlx::PgPool);

    impl Drop for Closing {
        fn drop(&mut self) {
            let pool = self.0.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(async move {
                    let _ = tokio::time::timeout(GOODBYE, pool.close()).await;
                }));
            }
        }
    }

    async fn listen(
        pool: &sqlx::PgPool,
        start: &Start,
        sender: &broadcast::Sender<LeaseChange>,
        backoff: &mut Backoff,
    ) -> String {
        let connecting = async {
            let mut listener = PgListener::connect_with(pool).await?;
            // Reconnections are this module's (each one is followed by `Missed`).
            listener.eager_reconnect(false);
            listener.ignore_pool_close_event(true);
            listener.listen(&start.channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = match tokio::time::timeout(start.timeout, connecting).await {
            Ok(Ok(listener)) => listener,
            Ok(Err(err)) => return format!("connecting: {err}"),
            Err(_) => return format!("connecting: no answer within {:?}", start.timeout),
        };
        connected(sender, backoff);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.reset();
        loop {
            tokio::select! {
                // Cancel safe (sqlx itself cancels it when its pool closes).
                received = listener.try_recv() => match received {
                    Ok(Some(notification)) => forward(sender, notification.payload()),
                    Ok(None) => return "the connection closed".to_owned(),
                    Err(err) => return err.to_string(),
                },
                _ = ping.tick() => {
                    let pinged = tokio::time::timeout(
                        start.timeout,
                        sqlx::query("SELECT 1").execute(&mut listener),
                    );
                    match pinged.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(err)) => return format!("pinging: {err}"),
                        Err(_) => return format!("pinging: no answer within {:?}", start.timeout),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_into_changes_and_anything_else_is_ignored() {
        let name = |n: &str| LeaseName::new(n).unwrap();
        assert_eq!(
            parse("released:jobs"),
            Some(LeaseChange::Changed {
                lease_name: name("jobs"),
                kind: LeaseChangeKind::Released
            })
        );
        assert_eq!(
            parse("acquired:a:b"),
            Some(LeaseChange::Changed {
                lease_name: name("a:b"),
                kind: LeaseChangeKind::Acquired
            })
        );
        assert_eq!(
            parse("step_down_requested:x"),
            Some(LeaseChange::Changed {
                lease_name: name("x"),
                kind: LeaseChangeKind::StepDownRequested
            })
        );
        assert_eq!(parse("renewed:x"), None);
        assert_eq!(parse("released:"), None);
        assert_eq!(parse("released"), None);
    }

    #[test]
    fn the_channel_is_an_identifier_that_fits_for_the_longest_prefix() {
        let longest = TablePrefix::new("a".repeat(crate::MAX_PREFIX_BYTES)).unwrap();
        assert!(channel(&longest).len() <= 63);
        assert_eq!(channel(&TablePrefix::default()), "tenure_lease_changes");
    }

    #[test]
    fn reconnect_delays_double_up_to_the_cap_jittered_and_restart_after_a_connection() {
        let mut backoff = Backoff::new();
        let mut bound = RECONNECT_FIRST;
        for _ in 0..12 {
            let delay = backoff.failed(RECONNECT_FIRST, RECONNECT_CAP);
            assert!(
                delay >= bound / 2 && delay <= bound,
                "{delay:?} for {bound:?}"
            );
            bound = (bound * 2).min(RECONNECT_CAP);
        }
        backoff.succeeded();
        assert!(backoff.failed(RECONNECT_FIRST, RECONNECT_CAP) <= RECONNECT_FIRST);
    }
}
