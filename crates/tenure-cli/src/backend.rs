//! Opening a storage, and keeping connection passwords out of everything printed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use tenure_memory::MemoryEventStorage;
use tenure_ports::EventStorage;
use tenure_postgres::tenure_conninfo::{self, LIBPQ_VARIABLES, URL_VARIABLES};
use tenure_postgres::{PostgresEventStorage, PostgresEventStorageBuilder, SchemaMode};

/// Secrets seen on the command line, in the environment or in the password file; [`scrub`]
/// hides them.
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers every secret of the arguments (any of them may be a connection string) and of the
/// variables that may name a server, before anything can be printed.
pub fn remember_secrets(args: impl IntoIterator<Item = std::ffi::OsString>) {
    let vars = URL_VARIABLES.iter().filter_map(std::env::var_os);
    for arg in args.into_iter().chain(vars) {
        for secret in tenure_conninfo::secrets(&arg.to_string_lossy()) {
            remember(secret);
        }
    }
    for (variable, key) in LIBPQ_VARIABLES {
        if *key == "password"
            && let Some(value) = std::env::var_os(variable)
        {
            remember(value.to_string_lossy().into_owned());
        }
    }
}

fn remember(secret: String) {
    if !secret.is_empty() {
        let mut secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
        if !secrets.contains(&secret) {
            secrets.push(secret);
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }
}

/// `text` with every remembered secret replaced by `***`.
pub fn scrub(text: &str) -> String {
    let secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret.as_str(), "***")
    })
}

/// A server, as named by `--database-url` or the environment ([`tenure_conninfo::resolve`]).
pub struct Target {
    /// The parameters to connect with, as a string for the builder (secrets included).
    conninfo: String,
    /// How messages name it, secrets hidden, and where it came from.
    pub shown: String,
}

/// Finds the server: `explicit`, else `TENURE_DATABASE_URL`, else `DATABASE_URL`, else libpq's
/// variables. The error names the variables tried.
pub fn target(explicit: Option<&str>) -> anyhow::Result<Target> {
    let found = tenure_conninfo::resolve(explicit)?;
    if let Some(password) = found.info.password() {
        // From the password file, perhaps: it must not be printed either.
        remember(password.to_owned());
    }
    Ok(Target {
        conninfo: found.info.to_key_value_string(),
        shown: found.to_string(),
    })
}

/// Opens the PostgreSQL storage at `target`, applying `mode` to the lease tables.
pub async fn open_postgres(
    target: &Target,
    prefix: &str,
    mode: SchemaMode,
    pool_size: usize,
) -> anyhow::Result<PostgresEventStorage> {
    build_postgres(postgres_builder(target, prefix, mode, pool_size), target).await
}

/// [`open_postgres`] without the listening connection of the wake-ups: for a command that
/// looks once and leaves (`leases`, `schema`), where nobody waits for a wake-up, and for
/// `tenure run --no-notifications` (behind a PgBouncer in transaction pooling mode, where
/// `LISTEN` silently does nothing).
pub async fn open_postgres_without_wake_ups(
    target: &Target,
    prefix: &str,
    mode: SchemaMode,
    pool_size: usize,
) -> anyhow::Result<PostgresEventStorage> {
    let builder = postgres_builder(target, prefix, mode, pool_size).notifications(false);
    build_postgres(builder, target).await
}

fn postgres_builder(
    target: &Target,
    prefix: &str,
    mode: SchemaMode,
    pool_size: usize,
) -> PostgresEventStorageBuilder {
    PostgresEventStorage::builder()
        .url(target.conninfo.as_str())
        .prefix(prefix)
        .schema_mode(mode)
        .pool_size(pool_size)
        .call_timeout(Duration::from_secs(5))
}

async fn build_postgres(
    builder: PostgresEventStorageBuilder,
    target: &Target,
) -> anyhow::Result<PostgresEventStorage> {
    builder
        .build()
        .await
        .with_context(|| format!("opening the lease tables at {}", target.shown))
}

/// Where the demo runs: the storage, a few words naming it, the lease (also the name of the
/// dispatchers' bookmark), and the stream of orders.
pub struct DemoStore {
    pub storage: Arc<dyn EventStorage>,
    pub backend: String,
    pub lease: String,
    pub orders: String,
}

/// The demo's in-memory store.
pub fn memory_for_demo() -> DemoStore {
    DemoStore {
        storage: Arc::new(MemoryEventStorage::new()),
        backend: "the embedded in-memory store".to_owned(),
        lease: "order-dispatcher".to_owned(),
        orders: "orders".to_owned(),
    }
}

/// The demo on PostgreSQL: a lease, a bookmark and a stream of its own, so that every run
/// starts at token 1 with no orders.
pub async fn postgres_for_demo(url: Option<&str>, prefix: &str) -> anyhow::Result<DemoStore> {
    let target = target(url)?;
    // The processors read in a loop, every few hundred milliseconds: an event that an older
    // transaction still hides is read at the next turn, so a read need not wait for it (and
    // a read that waits would hold up a graceful handover).
    let builder =
        postgres_builder(&target, prefix, SchemaMode::Ensure, 8).visibility_wait(Duration::ZERO);
    let storage = build_postgres(builder, &target).await?;
    let suffix = std::hash::BuildHasher::hash_one(
        &std::hash::RandomState::new(),
        std::time::SystemTime::now(),
    );
    let suffix = format!("{:08x}", suffix & 0xffff_ffff);
    Ok(DemoStore {
        storage: Arc::new(storage),
        backend: format!("PostgreSQL at {} (tables {prefix}*)", target.shown),
        lease: format!("demo-order-dispatcher-{suffix}"),
        orders: format!("demo-orders-{suffix}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_secrets_are_scrubbed_in_every_form() {
        remember_secrets([
            "postgres://u:s3cr%40t@h/db".into(),
            "host=h password='k v'".into(),
        ]);
        assert_eq!(
            scrub("failed: s3cr@t and s3cr%40t, k v"),
            "failed: *** and ***, ***"
        );
    }
}
