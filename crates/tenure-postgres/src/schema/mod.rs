//! Schema: the DDL shipped in the crate's `migrations/`, the three schema modes, and what
//! `Validate` expects; `manage` applies them, on any driver.

use std::fmt::Write as _;

use crate::prefix::{PrefixError, TablePrefix};

#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod manage;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub(crate) use manage::apply;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub(crate) mod privileges;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod shape;

/// The placeholder for the table prefix in the migration files.
pub(crate) const PLACEHOLDER: &str = "{{prefix}}";

/// The migration files (in the crate, so that the package carries them), in the order they run: exactly what [`SchemaMode::Ensure`] runs.
pub(crate) const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_lease_tables.sql",
        include_str!("../../migrations/0001_lease_tables.sql"),
    ),
    (
        "0002_lease_functions.sql",
        include_str!("../../migrations/0002_lease_functions.sql"),
    ),
    (
        "0003_events.sql",
        include_str!("../../migrations/0003_events.sql"),
    ),
    (
        "0004_event_functions.sql",
        include_str!("../../migrations/0004_event_functions.sql"),
    ),
    (
        "0005_fences.sql",
        include_str!("../../migrations/0005_fences.sql"),
    ),
    (
        "0006_lease_functions_v2.sql",
        include_str!("../../migrations/0006_lease_functions_v2.sql"),
    ),
    (
        "0007_lease_notifications.sql",
        include_str!("../../migrations/0007_lease_notifications.sql"),
    ),
    (
        "0008_lease_functions_v3.sql",
        include_str!("../../migrations/0008_lease_functions_v3.sql"),
    ),
    (
        "0009_lease_functions_v4.sql",
        include_str!("../../migrations/0009_lease_functions_v4.sql"),
    ),
    (
        "0010_unannounced_creations.sql",
        include_str!("../../migrations/0010_unannounced_creations.sql"),
    ),
    (
        "0011_lease_functions_v5.sql",
        include_str!("../../migrations/0011_lease_functions_v5.sql"),
    ),
    (
        "0012_lease_requests_carried.sql",
        include_str!("../../migrations/0012_lease_requests_carried.sql"),
    ),
];

/// What the storage does to the database schema when it is built.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum SchemaMode {
    /// Create what is missing by running the shipped DDL (idempotent; concurrent builders are
    /// serialized by an advisory lock), then check it as [`SchemaMode::Validate`] does. When
    /// nothing is missing and every function's body is the shipped one, no DDL runs, and the
    /// role needs only what `Validate` checks; otherwise it needs the privilege to create
    /// tables and functions, and to own the functions.
    #[default]
    Ensure,
    /// Create nothing; check every table, column, primary key, sequence, index, function and
    /// the answer type, and every privilege the storage needs (`docs/postgres.md`,
    /// "Privileges"), and fail naming each missing or wrong object and each missing privilege. For deployments whose schema is applied by an operator
    /// from [`ddl`].
    Validate,
    /// Touch nothing and check nothing: the first lease call fails if the schema is missing.
    None,
}

/// The DDL for `prefix`: every file of the crate's `migrations/`, in order, with the prefix
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
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_request_lease_v2"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_request_lease_v3"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_request_lease_v4"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_request_lease_v5"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_release_lease_v1"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_events"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_event_keys"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_bookmarks"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_append_events_v1"));
        assert!(sql.contains("CREATE TRIGGER abc_leases_changed"));
        assert!(sql.contains("pg_notify('abc_lease_changes', "));
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

    #[test]
    fn the_event_tables_are_append_only_and_leases_and_events_never_meet() {
        for (name, sql) in MIGRATIONS {
            for table in ["events", "event_keys"] {
                for verb in ["UPDATE {{prefix}}", "DELETE FROM {{prefix}}"] {
                    assert!(
                        !sql.contains(&format!("{verb}{table} ")),
                        "{name}: {verb}{table}"
                    );
                }
            }
            // Only the event files touch the event tables (the lease files and the fence's
            // file never do).
            let event_file = name.contains("event");
            assert_eq!(
                sql.contains("{{prefix}}events") || sql.contains("{{prefix}}bookmarks"),
                event_file,
                "{name}"
            );
        }
    }
}
