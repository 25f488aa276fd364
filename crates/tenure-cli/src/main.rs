//! `tenure`: leader election on Tenure leases, from the command line.
//!
//! `tenure demo` tells the story of an election among replicas of a dispatcher, on the
//! embedded in-memory store or on PostgreSQL. `tenure run` runs a command only while holding a
//! lease, as `consul lock` does. `tenure leases`, `tenure ddl` and `tenure schema` inspect and
//! prepare a PostgreSQL database.
//!
//! It is a thin shell over `tenure-election` and the backends: it decides nothing about
//! leases itself. Every error ends it with one line on stderr and a non-zero exit code; a
//! password in a connection string never appears in its output.

#![deny(missing_docs)]

mod admin;
mod backend;
mod demo;
mod duration;
mod guard;
mod leases;
mod metrics;
mod permanent;
mod reaper;
mod run;
mod tree;

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::duration::parse_duration;

/// Leader election on Tenure leases.
#[derive(Parser, Debug)]
#[command(name = "tenure", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Watch replicas of an order dispatcher elect a leader, dispatch orders, hand over, crash,
    /// and fence off a zombie.
    Demo(DemoArgs),
    /// Run a command only while holding a lease; stop it as soon as leadership is in doubt.
    #[command(after_long_help = run::EXIT_CODES)]
    Run(run::RunArgs),
    /// List every lease, its holder and liveness (on the database's clock), and its contenders.
    Leases(LeasesArgs),
    /// Print the DDL of the lease tables, as `tenure schema ensure` applies it.
    Ddl(DdlArgs),
    /// Create the lease tables if missing, or check that they are in place.
    Schema(SchemaArgs),
    /// Internal: holds the deadline of `tenure run`'s command and ends its tree in time.
    #[command(name = "__guard", hide = true)]
    Guard(guard::GuardArgs),
    /// Internal: the parent of `tenure run`'s command, bounding its tree's life.
    #[command(name = "__reaper", hide = true)]
    Reaper(reaper::ReaperArgs),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// The lease ttl; the whole story scales with it (it takes about 5 ttls).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    ttl: Duration,
    /// Run the story on PostgreSQL instead of the in-memory store: at URL (a URL or a
    /// key/value string), or, with no value, the server the environment names
    /// (TENURE_DATABASE_URL, DATABASE_URL, libpq's PG* variables).
    #[arg(long, value_name = "URL", num_args = 0..=1)]
    postgres: Option<Option<String>>,
    /// The table prefix on PostgreSQL.
    #[arg(long, default_value = tenure_postgres::DEFAULT_PREFIX, requires = "postgres")]
    prefix: String,
}

/// Where the leases are.
#[derive(Args, Debug, Clone)]
struct DbArgs {
    /// The PostgreSQL server: a URL (postgres://user@host/db?sslmode=verify-full) or a
    /// key/value string (host=db user=app). Default: TENURE_DATABASE_URL, else DATABASE_URL,
    /// else libpq's PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, PGSSLROOTCERT.
    #[arg(long, value_name = "URL")]
    pub(crate) database_url: Option<String>,
    /// The prefix of the lease tables.
    #[arg(long, default_value = tenure_postgres::DEFAULT_PREFIX)]
    pub(crate) prefix: String,
}

#[derive(Args, Debug)]
struct LeasesArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Print JSON, for scripts (the fields are documented in docs/operations.md).
    #[arg(long)]
    json: bool,
    /// Refresh every INTERVAL (default 2s) until Ctrl-C, in place on a terminal; with --json,
    /// one document per line.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s",
          value_parser = parse_interval)]
    watch: Option<Duration>,
}

#[derive(Args, Debug)]
struct DdlArgs {
    /// The prefix of the lease tables.
    #[arg(long, default_value = tenure_postgres::DEFAULT_PREFIX)]
    prefix: String,
}

#[derive(Args, Debug)]
struct SchemaArgs {
    #[command(subcommand)]
    action: SchemaAction,
}

#[derive(Subcommand, Debug)]
enum SchemaAction {
    /// Create the lease tables and functions that are missing, then check them.
    Ensure(DbArgs),
    /// Check every lease table, column and function; create nothing.
    Validate(DbArgs),
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        interval if interval < Duration::from_millis(100) => Err(format!(
            "'{text}' is too short: refresh at most every 100ms"
        )),
        interval => Ok(interval),
    }
}

pub(crate) fn parse_schema_mode(text: &str) -> Result<tenure_postgres::SchemaMode, String> {
    match text {
        "ensure" => Ok(tenure_postgres::SchemaMode::Ensure),
        "validate" => Ok(tenure_postgres::SchemaMode::Validate),
        "none" => Ok(tenure_postgres::SchemaMode::None),
        other => Err(format!("'{other}' is not one of ensure, validate, none")),
    }
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let message = backend::scrub(&info.to_string());
        say(format_args!("internal error: {}", one_line(&message)));
    }));
    backend::remember_secrets(std::env::args_os());
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    // The guard sets up the command's PID namespace before any thread exists; the reaper
    // needs no runtime at all.
    let cli = match cli.command {
        Command::Guard(args) => return guard::main(args),
        Command::Reaper(args) => return reaper::reaper(args),
        command => Cli { command },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&anyhow::Error::new(error).context("starting the runtime")),
    };
    let outcome = runtime.block_on(dispatch(cli));
    // Do not wait for stray tasks (a hung connection) on the way out.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match outcome {
        Ok(code) => code,
        Err(error) => fail(&error),
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Demo(args) => {
            let narrator = demo::Narrator::new();
            init_logging("off", Some(demo::NarrationLayer::new(narrator.clone())));
            let store = match &args.postgres {
                None => backend::memory_for_demo(),
                Some(url) => backend::postgres_for_demo(url.as_deref(), &args.prefix).await?,
            };
            let options = demo::DemoOptions {
                ttl: args.ttl,
                storage: store.storage,
                backend: store.backend,
                lease: store.lease,
                orders: store.orders,
            };
            demo::run(options, narrator).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => {
            init_logging("warn", None);
            if let Some(listen) = args.metrics_listen {
                metrics::serve(listen)?;
            }
            run::run(args).await
        }
        Command::Leases(args) => {
            init_logging("warn", None);
            leases::leases(leases::LeasesOptions {
                target: backend::target(args.db.database_url.as_deref())?,
                prefix: args.db.prefix,
                json: args.json,
                watch: args.watch,
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ddl(args) => {
            admin::ddl(&args.prefix)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema(args) => {
            init_logging("warn", None);
            let (db, mode) = match args.action {
                SchemaAction::Ensure(db) => (db, tenure_postgres::SchemaMode::Ensure),
                SchemaAction::Validate(db) => (db, tenure_postgres::SchemaMode::Validate),
            };
            let target = backend::target(db.database_url.as_deref())?;
            admin::schema(&target, &db.prefix, mode).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Guard(_) | Command::Reaper(_) => {
            anyhow::bail!("internal subcommands are dispatched before the runtime starts")
        }
    }
}

/// Writes `tenure: <message>` to stderr as one write. A failed write (a closed pipe, a dead
/// log collector) is ignored: it must never end, or abort, the process that holds a lease.
pub(crate) fn say(message: impl std::fmt::Display) {
    let line = format!("tenure: {message}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Logs to stderr, filtered by `RUST_LOG` (default: `default`); the demo adds its narrator,
/// which hears the elector's events whatever the filter says.
fn init_logging(default: &str, narration: Option<demo::NarrationLayer>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only on a terminal; a failed write is dropped, never reported on the same
    // broken stderr (which would panic).
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .with_target(false)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(narration)
        .try_init();
}

/// A usage error in one line (help and version are printed as clap formats them).
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // The message is the first paragraph (a list of missing arguments included).
            let rendered = error.render().to_string();
            let paragraph: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|line| !line.is_empty())
                .collect();
            let first = paragraph.join(" ");
            let first = first.trim_start_matches("error: ");
            say(format_args!(
                "error: {} (see tenure --help)",
                backend::scrub(first)
            ));
            ExitCode::from(2)
        }
    }
}

fn fail(error: &anyhow::Error) -> ExitCode {
    let message = backend::scrub(&chain(error));
    say(format_args!("error: {}", one_line(&message)));
    ExitCode::FAILURE
}

/// The error and its causes, `: `-separated, leaving out a cause that its effect's message
/// already quotes (many errors print their source, and also return it as `source()`).
fn chain(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
