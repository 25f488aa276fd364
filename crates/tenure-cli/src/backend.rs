//! Opening a storage, and keeping connection passwords out of everything printed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use tenure_memory::MemoryEventStorage;
use tenure_ports::EventStorage;
use tenure_postgres::{PostgresEventStorage, PostgresEventStorageBuilder, SchemaMode, redact};

/// Passwords seen on the command line or in the environment; [`scrub`] hides them.
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers the password of every argument (and of `TENURE_DATABASE_URL`) that looks like
/// a connection string, before anything can be printed.
pub fn remember_secrets(args: impl IntoIterator<Item = std::ffi::OsString>) {
    let env = std::env::var_os("TENURE_DATABASE_URL");
    for arg in args.into_iter().chain(env) {
        let text = arg.to_string_lossy();
        if let Some(password) = password_of(&text) {
            let mut secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
            secrets.push(percent_decode(&password));
            secrets.push(password);
        }
    }
}

/// `text` with every remembered password replaced by `***`.
pub fn scrub(text: &str) -> String {
    let secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "***")
        })
}

/// The password of a URL (`scheme://user:password@host`) or of a key/value connection string
/// (`password=...`).
fn password_of(text: &str) -> Option<String> {
    if let Some(scheme_end) = text.find("://") {
        let rest = &text[scheme_end + 3..];
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        let userinfo = &authority[..authority.rfind('@')?];
        let (_, password) = userinfo.split_once(':')?;
        return Some(password.to_owned());
    }
    let start = text.find("password=")? + "password=".len();
    let value = &text[start..];
    let value = match value.strip_prefix('\'') {
        Some(quoted) => &quoted[..quoted.find('\'').unwrap_or(quoted.len())],
        None => &value[..value.find(char::is_whitespace).unwrap_or(value.len())],
    };
    Some(value.to_owned())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Opens the PostgreSQL storage at `url`, applying `mode` to the lease tables.
pub async fn open_postgres(
    url: &str,
    prefix: &str,
    mode: SchemaMode,
    pool_size: usize,
) -> anyhow::Result<PostgresEventStorage> {
    build_postgres(postgres_builder(url, prefix, mode, pool_size), url).await
}

fn postgres_builder(
    url: &str,
    prefix: &str,
    mode: SchemaMode,
    pool_size: usize,
) -> PostgresEventStorageBuilder {
    PostgresEventStorage::builder()
        .url(url)
        .prefix(prefix)
        .schema_mode(mode)
        .pool_size(pool_size)
        .call_timeout(Duration::from_secs(5))
}

async fn build_postgres(
    builder: PostgresEventStorageBuilder,
    url: &str,
) -> anyhow::Result<PostgresEventStorage> {
    builder
        .build()
        .await
        .with_context(|| format!("opening the lease tables at {}", redact(url)))
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
pub async fn postgres_for_demo(url: &str, prefix: &str) -> anyhow::Result<DemoStore> {
    // The processors read in a loop, every few hundred milliseconds: an event that an older
    // transaction still hides is read at the next turn, so a read need not wait for it (and
    // a read that waits would hold up a graceful handover).
    let builder =
        postgres_builder(url, prefix, SchemaMode::Ensure, 8).visibility_wait(Duration::ZERO);
    let storage = build_postgres(builder, url).await?;
    let suffix = std::hash::BuildHasher::hash_one(
        &std::hash::RandomState::new(),
        std::time::SystemTime::now(),
    );
    let suffix = format!("{:08x}", suffix & 0xffff_ffff);
    Ok(DemoStore {
        storage: Arc::new(storage),
        backend: format!("PostgreSQL at {} (tables {prefix}*)", redact(url)),
        lease: format!("demo-order-dispatcher-{suffix}"),
        orders: format!("demo-orders-{suffix}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_and_scrubbed() {
        assert_eq!(password_of("postgres://u:pw@h/db").as_deref(), Some("pw"));
        assert_eq!(password_of("postgres://u@h/db"), None);
        assert_eq!(
            password_of("host=h password=pw user=u").as_deref(),
            Some("pw")
        );
        assert_eq!(password_of("host=h password='a b'").as_deref(), Some("a b"));
        assert_eq!(percent_decode("p%40ss"), "p@ss");
        remember_secrets(["postgres://u:s3cr%40t@h/db".into()]);
        assert_eq!(scrub("failed: s3cr@t and s3cr%40t"), "failed: *** and ***");
    }
}
