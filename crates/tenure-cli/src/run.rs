//! `tenure run`: a command that runs only while this process holds a lease.
//!
//! 1. Stand by until elected (Ctrl-C or SIGTERM meanwhile: withdraw and exit).
//! 2. Start the command through [the guard](crate::guard) and [the reaper](crate::reaper)
//!    with `TENURE_FENCING_TOKEN`, `TENURE_LEASE` and `TENURE_OWNER` in its environment. The
//!    guard holds the leadership deadline itself (this process tells it every confirmed
//!    renewal), so that the command's tree ends in time even if this process is stopped or
//!    killed.
//! 3. While it runs, keep renewing. When no renewal has been confirmed and less than the grace
//!    period of leadership is left, or a step-down is requested, or this process is asked to
//!    stop: SIGTERM to the whole tree, SIGKILL after the grace period. When leadership lapses
//!    (the deadline itself): SIGKILL. So the tree is gone by the time the lease can expire on
//!    the storage.
//! 4. When the guard has exited, make sure no process of the tree is left (this process is a
//!    subreaper: whatever the guard left behind is its own), then release the lease, and exit
//!    with a code that says what happened (see [`Outcome`]).
//!
//! Leadership lost means the end: `tenure run` does not contend again (a supervisor restarts
//! it if it should).

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::PathBuf;
use std::process::{ExitCode, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tenure_election::{ElectorConfig, LeaderElector, LeaderLease, LeadershipState, ValidConfig};
use tenure_postgres::SchemaMode;
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixListener;
use tokio::process::Child;
use tokio::signal::unix::{Signal as SignalStream, SignalKind, signal};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout};

use crate::backend::{open_postgres, open_postgres_without_wake_ups};
use crate::duration::{human, parse_duration};
use crate::guard::{Contain, to_monotonic};
use crate::{DbArgs, parse_schema_mode, say, tree};

/// The exit code when leadership was lost (not confirmed in time, or taken over) while the
/// command ran.
pub const EXIT_LOST: u8 = 75;
/// The exit code when the command was stopped to hand the lease over to a contender with a
/// higher priority.
pub const EXIT_HANDED_OVER: u8 = 76;
/// The exit code when a Tenure process between this one and the command (the guard or the
/// reaper) was killed, and the command's tree with it.
pub const EXIT_GUARD_KILLED: u8 = 70;

/// The exit codes, for `tenure run --help`.
pub const EXIT_CODES: &str = "Exit codes:
  the command's     it exited on its own during the tenure (128 + N if signal N ended it)
  128 + N           tenure run received signal N and stopped the command
  75                leadership was lost (not confirmed in time, or taken over)
  76                the command was stopped to hand the lease to a higher priority
  70                the guard was killed, and the command's tree with it
  1, 2              an error before the command started; a usage error";

/// What `tenure run` is asked to do.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The lease to hold while the command runs.
    #[arg(long)]
    lease: String,
    /// This contender's id (default: the host name and a random suffix, new for every
    /// process). Two live processes must never share one.
    #[arg(long)]
    owner: Option<String>,
    /// The priority: a live contender with a higher one asks the holder to step down.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// The lease ttl.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// How often to renew or ask (default: ttl/3).
    #[arg(long, value_parser = parse_duration)]
    poll: Option<Duration>,
    /// The time between SIGTERM and SIGKILL (default: ttl/4). The command gets SIGTERM this
    /// long before the lease would lapse without a confirmed renewal, and SIGKILL when it
    /// does; after a step-down request or a signal, SIGKILL this long after SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    grace: Option<Duration>,
    /// How the command's process tree is held, so that nothing of it outlives leadership.
    #[arg(long, value_enum, default_value = "auto")]
    contain: Contain,
    #[command(flatten)]
    db: DbArgs,
    /// What to do to the lease tables first: ensure (create if missing), validate, or none.
    #[arg(long, default_value = "ensure", value_parser = parse_schema_mode)]
    schema: SchemaMode,
    /// Do not listen for lease changes: a release or a step-down request is then taken up at
    /// the next poll instead of at once. For a server behind a PgBouncer in transaction
    /// pooling mode, where `LISTEN` silently does nothing.
    #[arg(long)]
    no_notifications: bool,
    /// Serve the election's metrics as Prometheus text on this address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// The settings, checked once: the elector's configuration and the grace period.
struct Settings {
    config: ValidConfig,
    grace: Duration,
}

impl Settings {
    fn check(args: &RunArgs) -> anyhow::Result<Settings> {
        let mut config =
            ElectorConfig::new(args.lease.as_str(), args.ttl).with_priority(args.priority);
        if let Some(owner) = &args.owner {
            config = config.with_owner(owner.as_str());
        }
        if let Some(poll) = args.poll {
            config = config.with_poll_interval(poll);
        }
        let config = config.validate()?;
        // A healthy leader's remaining leadership never drops below this before a renewal is
        // confirmed; the grace period must fit inside it, or SIGTERM would fire on every poll.
        let floor = config
            .leadership_span()
            .saturating_sub(config.poll_interval() + config.call_timeout());
        let grace = args.grace.unwrap_or(config.ttl() / 4);
        if grace.is_zero() || grace >= floor {
            bail!(
                "invalid --grace {}: must be above zero and below {} (the leadership a healthy \
                 leader has left just before a renewal: ttl less poll interval, call timeout and \
                 safety margin)",
                human(grace),
                human(floor)
            );
        }
        Ok(Settings { config, grace })
    }
}

/// The exit code a shell would report: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let settings = Settings::check(&args)?;
    let config = &settings.config;
    // Whatever the guard leaves behind if it dies is re-parented here, and killed.
    if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
        say(format_args!("cannot become a subreaper ({error})"));
    }
    let mut signals = Signals::new()?;
    let target = crate::backend::target(args.db.database_url.as_deref())?;
    let storage = if args.no_notifications {
        open_postgres_without_wake_ups(&target, &args.db.prefix, args.schema, 2).await?
    } else {
        open_postgres(&target, &args.db.prefix, args.schema, 2).await?
    };
    let (storage, mut permanent) = crate::permanent::watch(storage);
    let elector = LeaderElector::start_validated(Arc::new(storage), config.clone())?;
    say(format_args!(
        "waiting for lease {} as {} (priority {}, ttl {})",
        config.lease_name(),
        config.owner(),
        config.priority(),
        human(config.ttl())
    ));

    let lease = tokio::select! {
        lease = elector.wait_for_leadership() => lease?,
        signal = signals.recv() => {
            let _ = elector.shutdown().await;
            say(format_args!("received {} while standing by; withdrew from the election", signal.name()));
            return Ok(ExitCode::from(128 + signal.number()));
        }
        why = permanent.wait_for(Option::is_some) => {
            let why = why.ok().and_then(|w| w.clone()).unwrap_or_default();
            let _ = elector.shutdown().await;
            bail!("gave up on lease {}: no retry can succeed: {why}", config.lease_name());
        }
    };
    say(format_args!(
        "elected leader of {} (token {}); starting the command",
        lease.lease_name(),
        lease.token()
    ));

    let outcome = match Guarded::start(&args, &settings, &lease).await {
        Ok(guarded) => guarded.supervise(&lease, &elector, &mut signals).await,
        Err(error) => {
            release(&elector, &lease).await;
            return Err(error);
        }
    };
    // The guard is gone; so must be every process it held.
    tokio::task::spawn_blocking(tree::kill_and_reap_all).await?;
    let outcome = outcome?;
    let released = release(&elector, &lease).await;
    say(format_args!("{}{released}", outcome.describe(&lease)));
    Ok(ExitCode::from(outcome.code()))
}

/// Shuts the elector down; tells what became of the lease, for the last line.
async fn release(elector: &LeaderElector, lease: &LeaderLease) -> String {
    let held = elector.state().is_leader();
    match elector.shutdown().await {
        Ok(()) if held => format!("; released lease {}", lease.lease_name()),
        Ok(()) => String::new(),
        Err(error) => format!("; {error}; the lease expires after its ttl instead"),
    }
}

/// How the command's run ended.
enum Outcome {
    /// It exited on its own during the tenure, with this code.
    Exited(u8),
    /// This process received a signal and stopped it.
    Signalled(Stop, u8),
    /// Leadership was lost, and the command stopped.
    Lost(u8),
    /// A contender with a higher priority asked for the lease, and the command stopped.
    HandedOver(u8),
    /// The guard (or the reaper) was killed, and the command's tree with it.
    GuardKilled(u8),
}

impl Outcome {
    fn code(&self) -> u8 {
        match self {
            Outcome::Exited(code) => *code,
            Outcome::Signalled(signal, _) => 128 + signal.number(),
            Outcome::Lost(_) => EXIT_LOST,
            Outcome::HandedOver(_) => EXIT_HANDED_OVER,
            Outcome::GuardKilled(_) => EXIT_GUARD_KILLED,
        }
    }

    fn describe(&self, lease: &LeaderLease) -> String {
        match self {
            Outcome::Exited(code) => format!("the command exited with code {code}"),
            Outcome::Signalled(signal, code) => format!(
                "the command was stopped on {} (its code: {code})",
                signal.name()
            ),
            Outcome::Lost(code) => format!(
                "leadership of {} (token {}) was lost; the command was stopped (its code: {code})",
                lease.lease_name(),
                lease.token()
            ),
            Outcome::HandedOver(code) => format!(
                "the command was stopped to hand {} over (its code: {code})",
                lease.lease_name()
            ),
            Outcome::GuardKilled(code) => format!(
                "the guard process was killed (code {code}); the command's tree was killed with it"
            ),
        }
    }
}

/// What the guard is told, latest first: a writer task sends it, so that a stopped guard
/// never blocks this process.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Told {
    deadline: u64,
    stop: bool,
}

/// The guard's process, and the channel to it.
struct Guarded {
    child: Child,
    group: Pid,
    told: watch::Sender<Told>,
    grace: Duration,
}

impl Guarded {
    /// Starts `tenure __guard` as the leader of a new process group and waits for it to
    /// connect.
    async fn start(
        args: &RunArgs,
        settings: &Settings,
        lease: &LeaderLease,
    ) -> anyhow::Result<Guarded> {
        let deadline = lease
            .valid_until()
            .context("leadership ended before the command could start")?;
        let dir = ControlDir::create()?;
        let listener = UnixListener::bind(dir.socket()).context("listening for the guard")?;
        let exe = std::env::current_exe().context("finding the tenure executable")?;
        let contain = match args.contain {
            Contain::Auto => "auto",
            Contain::PidNamespace => "pid-namespace",
            Contain::Subreaper => "subreaper",
        };
        let mut child = tokio::process::Command::new(exe)
            .arg("__guard")
            .arg("--control")
            .arg(dir.socket())
            .args(["--deadline", &to_monotonic(deadline).to_string()])
            .args(["--grace", &format!("{}ms", settings.grace.as_millis())])
            .args(["--contain", contain])
            .arg("--")
            .args(&args.command)
            .env("TENURE_FENCING_TOKEN", lease.token().to_string())
            .env("TENURE_LEASE", lease.lease_name().as_str())
            .env("TENURE_OWNER", lease.owner().as_str())
            .process_group(0)
            .spawn()
            .context("starting the command")?;
        let group = pid_of(&child).context("the guard has no pid")?;
        let stream = tokio::select! {
            accepted = timeout(Duration::from_secs(10), listener.accept()) => match accepted {
                Ok(Ok((stream, _))) => stream,
                Ok(Err(error)) => {
                    let _ = killpg(group, Signal::SIGKILL);
                    return Err(error).context("accepting the guard's connection");
                }
                Err(_) => {
                    let _ = killpg(group, Signal::SIGKILL);
                    bail!("the guard did not connect within 10s");
                }
            },
            status = child.wait() => {
                let status = status.context("waiting for the guard")?;
                bail!("the guard exited before it started the command (code {})", exit_code(status));
            }
        };
        drop(dir);
        let first = Told {
            deadline: to_monotonic(deadline),
            stop: false,
        };
        let (told, mut hear) = watch::channel(first);
        tokio::spawn(async move {
            let mut stream = stream;
            let mut sent = first;
            while hear.changed().await.is_ok() {
                let now = *hear.borrow_and_update();
                let mut message = String::new();
                if now.deadline != sent.deadline {
                    message.push_str(&format!("deadline {}\n", now.deadline));
                }
                if now.stop && !sent.stop {
                    message.push_str("stop\n");
                }
                if stream.write_all(message.as_bytes()).await.is_err() {
                    return; // the guard is gone: its exit tells the rest
                }
                sent = now;
            }
        });
        Ok(Guarded {
            child,
            group,
            told,
            grace: settings.grace,
        })
    }

    /// Waits for the guard to exit, telling it every confirmed deadline, and stopping the
    /// command as leadership requires. The guard does the same on its own deadline; the
    /// SIGKILLs here are for a guard that is stopped.
    async fn supervise(
        mut self,
        lease: &LeaderLease,
        elector: &LeaderElector,
        signals: &mut Signals,
    ) -> anyhow::Result<Outcome> {
        let mut state = elector.subscribe();
        let mut elector_running = true;
        let mut why: Option<Why> = None;
        let mut killed = false;
        let mut kill_at: Option<Instant> = None;
        let grace = self.grace;

        loop {
            let deadline = lease.valid_until();
            if let Some(deadline) = deadline {
                let deadline = to_monotonic(deadline);
                self.told.send_if_modified(|told| {
                    let newer = told.deadline != deadline;
                    told.deadline = deadline;
                    newer
                });
            } else if !killed {
                let how = match elector.state() {
                    LeadershipState::Standby { holder, token } => {
                        format!("was taken over by {holder} (token {token})")
                    }
                    _ => "lapsed: no renewal was confirmed in time".to_owned(),
                };
                say(format_args!(
                    "leadership of {} {how}; killing the command",
                    lease.lease_name()
                ));
                why.get_or_insert(Why::Lost);
                self.kill();
                killed = true;
            }
            let term_at = deadline.map(|d| d.checked_sub(grace).unwrap_or(d));
            if why.is_none() {
                if term_at.is_some_and(|t| Instant::now() >= t) {
                    say(format_args!(
                        "no renewal of {} confirmed, and less than {} of leadership left: \
                         stopping the command (SIGTERM)",
                        lease.lease_name(),
                        human(grace)
                    ));
                    why = Some(Why::Lost);
                } else if lease.is_step_down_requested() {
                    say(format_args!(
                        "a contender with a higher priority waits for {}: stopping the command \
                         (SIGTERM, SIGKILL after {})",
                        lease.lease_name(),
                        human(grace)
                    ));
                    why = Some(Why::HandedOver);
                    kill_at = Some(Instant::now() + grace);
                }
                if why.is_some() {
                    self.told.send_modify(|told| told.stop = true);
                }
            }
            let wake = [
                why.is_none().then_some(term_at).flatten(),
                (!killed).then_some(deadline).flatten(),
                (!killed).then_some(kill_at).flatten(),
            ]
            .into_iter()
            .flatten()
            .min();

            tokio::select! {
                status = self.child.wait() => {
                    let status = status.context("waiting for the guard")?;
                    // The guard may have ended the command on its own deadline while this
                    // process could not run (stopped): leadership was lost all the same.
                    if why.is_none() && !lease.is_valid() {
                        why = Some(Why::Lost);
                    }
                    return Ok(self.outcome(status, why, killed));
                }
                changed = state.changed(), if elector_running => {
                    elector_running = changed.is_ok();
                }
                () = sleep_until_opt(wake) => {
                    if !killed && kill_at.is_some_and(|k| Instant::now() >= k) {
                        say(format_args!(
                            "the command outlived its grace period of {}: killing it (SIGKILL)",
                            human(grace)
                        ));
                        self.kill();
                        killed = true;
                    }
                }
                signal = signals.recv() => {
                    if why.is_none() {
                        say(format_args!(
                            "received {}: stopping the command (SIGTERM, SIGKILL after {})",
                            signal.name(),
                            human(grace)
                        ));
                        why = Some(Why::Signal(signal));
                        self.told.send_modify(|told| told.stop = true);
                        kill_at = Some(Instant::now() + grace);
                    }
                }
            }
        }
    }

    /// SIGKILL to the guard's process group: the guard, the reaper (PID 1 of the command's
    /// namespace, whose death kills the rest) and the command.
    fn kill(&self) {
        let _ = killpg(self.group, Signal::SIGKILL);
    }

    fn outcome(&self, status: ExitStatus, why: Option<Why>, killed: bool) -> Outcome {
        use std::os::unix::process::ExitStatusExt as _;
        let code = exit_code(status);
        match why {
            Some(Why::Lost) => Outcome::Lost(code),
            Some(Why::HandedOver) => Outcome::HandedOver(code),
            Some(Why::Signal(signal)) => Outcome::Signalled(signal, code),
            // The guard exits with a code; a signal means somebody killed it.
            None if status.signal().is_some() && !killed => Outcome::GuardKilled(code),
            None => Outcome::Exited(code),
        }
    }
}

/// Why this process stopped the command.
#[derive(Clone, Copy)]
enum Why {
    Lost,
    HandedOver,
    Signal(Stop),
}

/// A private directory (mode 0700) for the guard's socket, removed once it has connected.
struct ControlDir {
    path: PathBuf,
}

impl ControlDir {
    fn create() -> anyhow::Result<ControlDir> {
        let name = format!(
            "tenure-run-{}-{:x}",
            std::process::id(),
            crate::guard::monotonic_now().as_nanos()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(ControlDir { path })
    }

    fn socket(&self) -> PathBuf {
        self.path.join("guard")
    }
}

impl Drop for ControlDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// The pid of a child that has not been reaped yet.
pub fn pid_of(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
}

/// Sleeps until `deadline`, or for ever without one.
pub async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The signals that ask `tenure run` to stop.
struct Signals {
    interrupt: SignalStream,
    terminate: SignalStream,
    hangup: SignalStream,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    Interrupt,
    Terminate,
    Hangup,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
            Stop::Hangup => "SIGHUP",
        }
    }

    fn number(self) -> u8 {
        match self {
            Stop::Interrupt => 2,
            Stop::Terminate => 15,
            Stop::Hangup => 1,
        }
    }
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        let listen = |kind| signal(kind).context("listening for signals");
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
            _ = self.hangup.recv() => Stop::Hangup,
        }
    }
}
