//! The DDL shipped in `migrations/postgres/`, and the three schema modes.

use std::fmt::Write as _;

use tenure_ports::EventStorageError;
use tokio_postgres::GenericClient;

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
    (
        "0003_events.sql",
        include_str!("../../../migrations/postgres/0003_events.sql"),
    ),
    (
        "0004_event_functions.sql",
        include_str!("../../../migrations/postgres/0004_event_functions.sql"),
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
    /// Create nothing; check every table, column, sequence, index and function, and fail naming
    /// each missing or wrong object. For deployments whose schema is applied by an operator
    /// from [`ddl`].
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

/// The tables the storage relies on, as `Validate` checks them.
struct Expected {
    table: &'static str,
    columns: &'static [(&'static str, &'static str)],
}

/// The columns of [`TABLES`] that may hold NULL (every other one must be NOT NULL).
const NULLABLE: &[(&str, &str)] = &[("leases", "released_at")];

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
            ("has_contenders", "boolean"),
            ("released_at", "timestamp with time zone"),
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
    Expected {
        table: "events",
        columns: &[
            ("position", "bigint"),
            ("event_id", "uuid"),
            ("stream", "text"),
            ("event_type", "text"),
            ("payload", "jsonb"),
            ("tags", "text[]"),
            ("recorded_at", "timestamp with time zone"),
            ("transaction_id", "xid8"),
        ],
    },
    Expected {
        table: "event_keys",
        columns: &[
            ("idempotency_key", "text"),
            ("first_position", "bigint"),
            ("last_position", "bigint"),
        ],
    },
    Expected {
        table: "bookmarks",
        columns: &[
            ("reader", "text"),
            ("position", "bigint"),
            ("tags", "text[]"),
            ("placed_at", "timestamp with time zone"),
        ],
    },
];

/// The other relations the event log relies on, with their `pg_class.relkind` and what to
/// call them. The primary keys of the event tables are listed because they enforce something
/// (one event per position, one batch per idempotency key, one bookmark per reader); the other
/// indexes because reads and conditions are scans of the whole log without them.
const RELATIONS: &[(&str, &str, &str)] = &[
    ("events_position_seq", "S", "sequence"),
    ("events_pkey", "i", "index"),
    ("events_stream_idx", "i", "index"),
    ("events_type_idx", "i", "index"),
    ("events_tags_idx", "i", "index"),
    ("event_keys_pkey", "i", "index"),
    ("bookmarks_pkey", "i", "index"),
];

/// The functions, with their input argument types as `oidvectortypes` prints them.
const FUNCTIONS: &[(&str, &str)] = &[
    (
        "request_lease_v1",
        "text, text, bigint, bigint, timestamp with time zone",
    ),
    ("release_lease_v1", "text, text, timestamp with time zone"),
    (
        "append_events_v1",
        "text[], text[], jsonb[], text[], text, boolean, text[], text[], text[], bigint",
    ),
];

/// Runs the shipped DDL for `prefix` in one transaction, serialized against every other
/// `Ensure` of the same prefix by an advisory lock.
///
/// Before running it, checks what is missing and whether the role may create anything in the
/// current schema: a role that may not fails with a `Schema` error naming the schema, the role
/// and every object it could not create, instead of the server's bare "permission denied".
pub(crate) async fn ensure(
    client: &mut tokio_postgres::Client,
    prefix: &TablePrefix,
) -> Result<(), EventStorageError> {
    let what = "ensuring the schema";
    let tx = client.transaction().await.map_err(|e| from_pg(what, e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('tenure-ensure:' || $1::text, 0))",
        &[&prefix.as_str()],
    )
    .await
    .map_err(|e| from_pg(what, e))?;
    let missing = problems(&tx, prefix).await?;
    let row = tx
        .query_one(
            "SELECT current_schema()::text, current_user::text, \
                    coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)",
            &[],
        )
        .await
        .map_err(|e| from_pg(what, e))?;
    let schema: Option<String> = try_get(&row, 0)?;
    let role: String = try_get(&row, 1)?;
    let may_create: bool = try_get(&row, 2)?;
    let p = prefix.as_str();
    let Some(schema) = schema else {
        return Err(EventStorageError::schema(format!(
            "SchemaMode::Ensure cannot create the schema for prefix {p:?}: no schema of the \
             search_path exists, so there is nowhere to create it. Missing: {}",
            missing.join("; ")
        )));
    };
    if !may_create && !missing.is_empty() {
        return Err(EventStorageError::schema(format!(
            "SchemaMode::Ensure cannot create the schema for prefix {p:?}: role {role:?} has \
             no CREATE privilege on schema {schema:?}, so it could not create: {}. Apply \
             tenure_postgres::ddl({p:?}) as a role that may, grant this role what \
             docs/postgres.md lists, and use SchemaMode::Validate",
            missing.join("; ")
        )));
    }
    tx.batch_execute(&render(prefix))
        .await
        .map_err(|e| map_ddl_error(e, prefix, &missing))?;
    tx.commit().await.map_err(|e| from_pg(what, e))?;
    Ok(())
}

fn map_ddl_error(
    err: tokio_postgres::Error,
    prefix: &TablePrefix,
    missing: &[String],
) -> EventStorageError {
    let Some(db) = err.as_db_error() else {
        return from_pg("ensuring the schema", err);
    };
    let p = prefix.as_str();
    let missing = if missing.is_empty() {
        "nothing was missing (the DDL also replaces the functions, which needs their ownership)"
            .to_owned()
    } else {
        format!("missing were: {}", missing.join("; "))
    };
    let message = format!(
        "SchemaMode::Ensure could not apply the DDL for prefix {p:?}: {} ({}); {missing}. \
         Apply tenure_postgres::ddl({p:?}) as a role that may, and use SchemaMode::Validate",
        db.message(),
        db.code().code(),
    );
    EventStorageError::schema_with(message, err)
}

/// Checks every table, column (type and nullability), sequence, index and function, naming
/// each one that is missing or wrong.
pub(crate) async fn validate(
    client: &impl GenericClient,
    prefix: &TablePrefix,
) -> Result<(), EventStorageError> {
    let problems = problems(client, prefix).await?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(EventStorageError::schema(format!(
            "the schema for prefix {:?} is incomplete: {}. Apply tenure_postgres::ddl({:?}) \
             (see docs/postgres.md) or use SchemaMode::Ensure",
            prefix.as_str(),
            problems.join("; "),
            prefix.as_str()
        )))
    }
}

/// Every missing or wrong object, as `Validate` names them.
async fn problems(
    client: &impl GenericClient,
    prefix: &TablePrefix,
) -> Result<Vec<String>, EventStorageError> {
    let what = "validating the schema";
    let rows = client
        .query(
            "SELECT table_name::text, column_name::text, \
                    CASE WHEN data_type = 'ARRAY' THEN substr(udt_name, 2) || '[]' \
                         ELSE data_type END::text, \
                    is_nullable::text \
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
                    if found[3] != "NO" && !NULLABLE.contains(&(expected.table, column)) {
                        problems.push(format!("column {table}.{column} must be NOT NULL"));
                    }
                }
            }
        }
    }
    let rows = client
        .query(
            "SELECT c.relname::text, c.relkind::text \
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = current_schema() AND c.relname = ANY($1)",
            &[&RELATIONS
                .iter()
                .map(|(r, _, _)| format!("{prefix}{r}"))
                .collect::<Vec<_>>()],
        )
        .await
        .map_err(|e| from_pg(what, e))?;
    let relations = texts(&rows, 2)?;
    for (relation, kind, noun) in RELATIONS {
        let name = format!("{prefix}{relation}");
        // The table's own absence says it already.
        let table_missing = TABLES.iter().any(|t| {
            relation.starts_with(&format!("{}_", t.table))
                && problems.contains(&format!("table {prefix}{} is missing", t.table))
        });
        if !table_missing && !relations.iter().any(|r| r[0] == name && r[1] == *kind) {
            problems.push(format!("{noun} {name} is missing"));
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
    Ok(problems)
}

fn try_get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    idx: usize,
) -> Result<T, EventStorageError> {
    row.try_get(idx)
        .map_err(|e| EventStorageError::internal_with("unexpected catalog query result", e))
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
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_events"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_event_keys"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS abc_bookmarks"));
        assert!(sql.contains("CREATE OR REPLACE FUNCTION abc_append_events_v1"));
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
            let lease_file = name.contains("lease");
            assert_eq!(
                sql.contains("{{prefix}}events") || sql.contains("{{prefix}}bookmarks"),
                !lease_file,
                "{name}"
            );
        }
    }

    #[test]
    fn validate_knows_every_object_the_ddl_creates() {
        let sql = render(&TablePrefix::default());
        for (relation, _, _) in RELATIONS {
            assert!(sql.contains(&format!("tenure_{relation}")), "{relation}");
        }
        for (function, _) in FUNCTIONS {
            assert!(
                sql.contains(&format!("FUNCTION tenure_{function}(")),
                "{function}"
            );
        }
        for table in TABLES {
            assert!(
                sql.contains(&format!(
                    "CREATE TABLE IF NOT EXISTS tenure_{} (",
                    table.table
                )),
                "{}",
                table.table
            );
        }
    }
}
