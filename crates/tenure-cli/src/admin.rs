//! `tenure ddl`, `tenure schema`: preparing a database (`tenure leases` looks at it: see
//! [`crate::leases`]).

use std::io::Write as _;

use anyhow::Context as _;
use tenure_ports::EventStorage;
use tenure_postgres::SchemaMode;

use crate::backend::{Target, open_postgres_without_wake_ups};

/// Prints the DDL of the lease tables for `prefix`.
pub fn ddl(prefix: &str) -> anyhow::Result<()> {
    let sql = tenure_postgres::ddl(prefix).context("invalid --prefix")?;
    write_stdout(&sql)
}

/// Applies `mode` (ensure or validate) to the lease tables, and says so.
pub async fn schema(target: &Target, prefix: &str, mode: SchemaMode) -> anyhow::Result<()> {
    let storage = open_postgres_without_wake_ups(target, prefix, mode, 1).await?;
    let _ = storage.close().await;
    let done = match mode {
        SchemaMode::Ensure => "are in place",
        _ => "are valid",
    };
    write_stdout(&format!(
        "the lease tables {prefix}leases and {prefix}lease_contenders {done} at {}\n",
        target.shown
    ))
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // `tenure leases | head` closing the pipe is not an error.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(error).context("writing to standard output"),
    }
}
