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
mod run;

use std::ffi::OsString;
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
    Run(RunArgs),
    /// List every lease, its holder and liveness (on the database's clock), and its contenders.
    Leases(LeasesArgs),
    /// Print the DDL of the lease tables, as `tenure schema ensure` applies it.
    Ddl(DdlArgs),
    /// Create the lease tables if missing, or check that they are in place.
    Schema(SchemaArgs),
    /// Internal: supervises the command of `tenure run` in its own process group.
    #[command(name = "__guard", hide = true)]
    Guard(GuardArgs),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// The lease ttl; the whole story scales with it (it takes about 5 ttls).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    ttl: Duration,
    /// Run the story on PostgreSQL (a connection URL) instead of the in-memory store.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// The table prefix on PostgreSQL.
    #[arg(long, default_value = tenure_postgres::DEFAULT_PREFIX, requires = "postgres")]
    prefix: String,
}

/// Where the leases are.
#[derive(Args, Debug, Clone)]
struct DbArgs {
    /// The PostgreSQL connection URL.
    #[arg(
        long,
        env = "TENURE_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    database_url: String,
    /// The prefix of the lease tables.
    #[arg(long, default_value = tenure_postgres::DEFAULT_PREFIX)]
    prefix: String,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The lease to hold while the command runs.
    #[arg(long)]
    lease: String,
    /// This contender's id (default: the host name and a random suffix).
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
    /// long before the lease would lapse without a confirmed renewal, and SIGKILL when it does.
    #[arg(long, value_parser = parse_duration)]
    grace: Option<Duration>,
    #[command(flatten)]
    db: DbArgs,
    /// What to do to the lease tables first: ensure (create if missing), validate, or none.
    #[arg(long, default_value = "ensure", value_parser = parse_schema_mode)]
    schema: tenure_postgres::SchemaMode,
    /// Serve the election's metrics as Prometheus text on this address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
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

#[derive(Args, Debug)]
struct GuardArgs {
    /// The `tenure run` process: if it dies, the command is killed.
    #[arg(long)]
    parent: u32,
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        interval if interval < Duration::from_millis(100) => Err(format!(
            "'{text}' is too short: refresh at most every 100ms"
        )),
        interval => Ok(interval),
    }
}

fn parse_schema_mode(text: &str) -> Result<tenure_postgres::SchemaMode, String> {
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
        eprintln!("tenure: internal error: {}", one_line(&message));
    }));
    backend::remember_secrets(std::env::args_os());
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
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
                Some(url) => backend::postgres_for_demo(url, &args.prefix).await?,
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
            run::run(run::RunOptions {
                lease: args.lease,
                owner: args.owner,
                priority: args.priority,
                ttl: args.ttl,
                poll: args.poll,
                grace: args.grace,
                url: args.db.database_url,
                prefix: args.db.prefix,
                schema: args.schema,
                command: args.command,
            })
            .await
        }
        Command::Leases(args) => {
            init_logging("warn", None);
            leases::leases(leases::LeasesOptions {
                url: args.db.database_url,
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
            admin::schema(&db.database_url, &db.prefix, mode).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Guard(args) => guard::guard(args.parent, args.command).await,
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default: `default`); the demo adds its narrator,
/// which hears the elector's events whatever the filter says.
fn init_logging(default: &str, narration: Option<demo::NarrationLayer>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
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
            eprintln!(
                "tenure: error: {} (see tenure --help)",
                backend::scrub(first)
            );
            ExitCode::from(2)
        }
    }
}

fn fail(error: &anyhow::Error) -> ExitCode {
    let message = backend::scrub(&format!("{error:#}"));
    eprintln!("tenure: error: {}", one_line(&message));
    ExitCode::FAILURE
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
