//! The DDL shipped in `migrations/postgres/`, and the three schema modes.

use std::fmt::Write as _;

use deadpool_postgres::Object;
use tenure_ports::EventStorageError;

use crate::error::from_pg;
use crate::prefix::{PrefixError, TablePrefix};

/// The placeholder for the table prefix in the migration files.
pub(crate) const PLACEHOLDER: &str = "{{prefix}}";

/// The migration files, in the order they run: exactly what [`SchemaMode::Ensure`] runs.
pub(crate) const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_lease_tables.sql",
        include_str!("../../../migrations/postgres/0001_lease_tables.sql"),
    ),
    (
        "0002_lease_functions.sql",
        include_str!("../../../migrations/postgres/0002_lease_functions.sql"),
    ),
];

/// What the storage does to the database schema when it is built.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum SchemaMode {
    /// Create what is missing by running the shipped DDL (idempotent; concurrent builders are
    /// serialized by an advisory lock), then check it as [`SchemaMode::Validate`] does. Needs
    /// the privilege to create tables and functions, and to own the functions.
    #[default]
    Ensure,
    /// Create nothing; check every table, column and function, and fail naming each missing or
    /// wrong object. For deployments whose schema is applied by an operator from [`ddl`].
    Validate,
    /// Touch nothing and check nothing: the first lease call fails if the schema is missing.
    None,
}

/// The DDL for `prefix`: every file of `migrations/postgres/`, in order, with the prefix
/// substituted. This is exactly what [`SchemaMode::Ensure`] runs; apply it by hand (for
/// example with `psql -v ON_ERROR_STOP=1`) for a deployment pinned to
/// [`SchemaMode::Validate`] or [`SchemaMode::None`].
///
/// ```
/// let sql = tenure_postgres::ddl("billing_")?;
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS billing_leases"));
/// assert!(tenure_postgres::ddl("Robert'); DROP TABLE students;--").is_err());
/// # Ok::<(), tenure_postgres::PrefixError>(())
/// ```
pub fn ddl(prefix: &str) -> Result<String, PrefixError> {
    Ok(render(&TablePrefix::new(prefix)?))
}

/// The DDL for an already validated prefix.
pub(crate) fn render(prefix: &TablePrefix) -> String {
    let mut out = String::new();
    for (name, sql) in MIGRATIONS {
        let _ = writeln!(out, "-- migrations/postgres/{name}");
        out.push_str(&sql.replace(PLACEHOLDER, prefix.as_str()));
        out.push('\n');
    }
    out
}

/// The objects the lease operations rely on, as `Validate` checks them.
struct Expected {
    table: &'static str,
    columns: &'static [(&'static str, &'static str)],
}

const TABLES: &[Expected] = &[
    Expected {
        table: "leases",
        columns: &[
            ("lease_name", "text"),
            ("owner", "text"),
            ("priority", "bigint"),
            ("fencing_token", "bigint"),
            ("acquired_at", "timestamp with time zone"),
            ("heartbeat_at", "timestamp with time zone"),
            ("ttl_micros", "bigint"),
        ],
    },
    Expected {
        table: "lease_contenders",
        columns: &[
            ("lease_name", "text"),
            ("owner", "text"),
            ("priority", "bigint"),
            ("last_seen", "timestamp with time zone"),
            ("ttl_micros", "bigint"),
        ],
    },
];

/// The functions, with their input argument types as `oidvectortypes` prints them.
const FUNCTIONS: &[(&str, &str)] = &[
    (
        "request_lease_v1",
        "text, text, bigint, bigint, timestamp with time zone",
    ),
    ("release_lease_v1", "text, text, timestamp with time zone"),
];

/// Runs the shipped DDL for `prefix` in one transaction, serialized against every other
/// `Ensure` of the same prefix by an advisory lock.
pub(crate) async fn ensure(
    client: &mut Object,
    prefix: &TablePrefix,
) -> Result<(), EventStorageError> {
    let what = "ensuring the lease schema";
    let tx = client.transaction().await.map_err(|e| from_pg(what, e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('tenure-ensure:' || $1::text, 0))",
        &[&prefix.as_str()],
    )
    .await
    .map_err(|e| from_pg(what, e))?;
    tx.batch_execute(&render(prefix))
        .await
        .map_err(|e| map_ddl_error(e, prefix))?;
    tx.commit().await.map_err(|e| from_pg(what, e))?;
    Ok(())
}

fn map_ddl_error(err: tokio_postgres::Error, prefix: &TablePrefix) -> EventStorageError {
    if err.code().is_some() {
        EventStorageError::schema_with(
            format!(
                "SchemaMode::Ensure could not apply the lease DDL for prefix {p:?}; apply \
                 tenure_postgres::ddl({p:?}) as a role that may, and use SchemaMode::Validate",
                p = prefix.as_str()
            ),
            err,
        )
    } else {
        from_pg("ensuring the lease schema", err)
    }
}

/// Checks every table, column (type and nullability) and function, naming each one that is
/// missing or wrong.
pub(crate) async fn validate(
    client: &Object,
    prefix: &TablePrefix,
) -> Result<(), EventStorageError> {
    let what = "validating the lease schema";
    let rows = client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text \
               FROM information_schema.columns \
              WHERE table_schema = current_schema() AND table_name = ANY($1)",
            &[&TABLES
                .iter()
                .map(|t| format!("{prefix}{}", t.table))
                .collect::<Vec<_>>()],
        )
        .await
        .map_err(|e| from_pg(what, e))?;
    let columns = texts(&rows, 4)?;
    let mut problems = Vec::new();
    for expected in TABLES {
        let table = format!("{prefix}{}", expected.table);
        let of_table: Vec<&Vec<String>> = columns.iter().filter(|c| c[0] == table).collect();
        if of_table.is_empty() {
            problems.push(format!("table {table} is missing"));
            continue;
        }
        for (column, data_type) in expected.columns {
            match of_table.iter().find(|c| c[1] == *column) {
                None => problems.push(format!("column {table}.{column} is missing")),
                Some(found) => {
                    if found[2] != *data_type {
                        problems.push(format!(
                            "column {table}.{column} is {}, expected {data_type}",
                            found[2]
                        ));
                    }
                    if found[3] != "NO" {
                        problems.push(format!("column {table}.{column} must be NOT NULL"));
                    }
                }
            }
        }
    }
    let rows = client
        .query(
            "SELECT p.proname::text, oidvectortypes(p.proargtypes) \
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
              WHERE n.nspname = current_schema() AND p.proname = ANY($1)",
            &[&FUNCTIONS
                .iter()
                .map(|(f, _)| format!("{prefix}{f}"))
                .collect::<Vec<_>>()],
        )
        .await
        .map_err(|e| from_pg(what, e))?;
    let functions = texts(&rows, 2)?;
    for (function, arguments) in FUNCTIONS {
        let name = format!("{prefix}{function}");
        if !functions.iter().any(|f| f[0] == name && f[1] == *arguments) {
            problems.push(format!("function {name}({arguments}) is missing"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(EventStorageError::schema(format!(
            "the lease schema for prefix {:?} is incomplete: {}. Apply \
             tenure_postgres::ddl({:?}) (see docs/postgres.md) or use SchemaMode::Ensure",
            prefix.as_str(),
            problems.join("; "),
            prefix.as_str()
        )))
    }
}

/// The first `n` columns of every row, as text.
fn texts(rows: &[tokio_postgres::Row], n: usize) -> Result<Vec<Vec<String>>, EventStorageError> {
    rows.iter()
        .map(|row| {
            (0..n)
                .map(|i| {
                    row.try_get::<_, String>(i).map_err(|e| {
                        EventStorageError::internal_with("unexpected catalog query result", e)
                    })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::LONGEST_SUFFIX;

    #[test]
    fn ddl_substitutes_every_placeholder() {
        let sql = ddl("abc_").unwrap();
        assert!(!sql.contains(PLACEHOLDER));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_leases"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_lease_contenders"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_request_lease_v1"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_release_lease_v1"));
        assert!(ddl("ABC").is_err());
    }

    #[test]
    fn longest_suffix_is_the_longest_identifier_in_the_ddl() {
        let mut longest = "";
        for (_, sql) in MIGRATIONS {
            for (i, _) in sql.match_indices(PLACEHOLDER) {
                let rest = &sql[i + PLACEHOLDER.len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if end > longest.len() {
                    longest = &rest[..end];
                }
            }
        }
        assert_eq!(longest, LONGEST_SUFFIX);
    }

    #[test]
    fn the_leases_table_is_never_deleted_from() {
        for (_, sql) in MIGRATIONS {
            assert!(!sql.contains("DELETE FROM {{prefix}}leases"));
        }
    }
}
