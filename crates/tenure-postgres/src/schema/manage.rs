//! Applying a schema mode on one connection of any driver: `Ensure` runs the shipped DDL in a
//! transaction, `Ensure` and `Validate` check every object against what the storage needs.

use tenure_ports::EventStorageError;

use super::{SchemaMode, render};
use crate::connection::{Checkout, Driver, Link, Param, Sql};
use crate::decode::{Row, get};
use crate::error::Failure;
use crate::prefix::TablePrefix;

/// The tables the storage relies on, as `Validate` checks them.
struct Expected {
    table: &'static str,
    columns: &'static [(&'static str, &'static str)],
}

/// The columns of [`TABLES`] that may hold NULL (every other one must be NOT NULL).
const NULLABLE: &[(&str, &str)] = &[
    ("leases", "released_at"),
    ("leases", "contender_priority_bound"),
    ("bookmarks", "fence_token"),
];

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
            ("contender_priority_bound", "bigint"),
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
            ("fence_token", "bigint"),
        ],
    },
    Expected {
        table: "fences",
        columns: &[
            ("resource", "text"),
            ("fencing_token", "bigint"),
            ("accepted_at", "timestamp with time zone"),
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
    ("fences_pkey", "i", "index"),
];

/// The functions, with their input argument types as `oidvectortypes` prints them.
const FUNCTIONS: &[(&str, &str)] = &[
    (
        "request_lease_v1",
        "text, text, bigint, bigint, timestamp with time zone",
    ),
    ("release_lease_v1", "text, text, timestamp with time zone"),
    (
        "request_lease_v2",
        "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
    ),
    (
        "request_lease_v3",
        "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
    ),
    (
        "request_lease_v4",
        "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
    ),
    (
        "request_lease_v5",
        "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
    ),
    (
        "request_leases_v1",
        "text[], text[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean[], timestamp with time zone",
    ),
    (
        "append_events_v1",
        "text[], text[], jsonb[], text[], text, boolean, text[], text[], text[], bigint",
    ),
    ("fence_v1", "text, bigint"),
    ("notify_lease_v1", ""),
    ("notify_contender_v1", ""),
    ("priority_bound_v1", ""),
];

/// The triggers of the wake-ups (`0007_lease_notifications.sql`): each one's name and its
/// table (both without the prefix). `Validate` requires each to exist on its table and to be
/// enabled.
pub(crate) const TRIGGERS: &[(&str, &str)] = &[
    ("leases_created", "leases"),
    ("leases_changed", "leases"),
    ("contenders_joined", "lease_contenders"),
    ("contenders_changed", "lease_contenders"),
    ("priority_bound_joined", "lease_contenders"),
    ("priority_bound_raised", "lease_contenders"),
];

/// Applies `mode` for `prefix` on one connection of `link`: `Ensure` runs the shipped DDL
/// first, then `Ensure` and `Validate` check every object. A connection whose work failed is
/// closed, never given back (it may be inside a failed transaction).
pub(crate) async fn apply<D: Driver>(
    link: &Link<D>,
    prefix: &TablePrefix,
    mode: SchemaMode,
) -> Result<(), EventStorageError> {
    if mode == SchemaMode::None {
        return Ok(());
    }
    let mut connection = link.checkout("connecting for the schema check").await?;
    let result = async {
        if mode == SchemaMode::Ensure {
            ensure(&mut connection, prefix).await?;
        }
        validate(&mut connection, prefix).await
    }
    .await;
    if result.is_err() {
        connection.discard();
    }
    result
}

/// Runs one catalog statement for `what`.
async fn catalog<D: Driver>(
    connection: &mut Checkout<'_, D>,
    what: &str,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<D::Row>, EventStorageError> {
    connection
        .query(&Sql::from(sql), params)
        .await
        .map_err(|e| e.into_storage(what))
}

/// Runs the shipped DDL for `prefix` in one transaction, serialized against every other
/// `Ensure` of the same prefix by an advisory lock.
///
/// Before running it, checks what is missing and whether the role may create anything in the
/// current schema: a role that may not fails with a `Schema` error naming the schema, the role
/// and every object it could not create, instead of the server's bare "permission denied".
async fn ensure<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
) -> Result<(), EventStorageError> {
    let what = "ensuring the schema";
    connection
        .script("BEGIN")
        .await
        .map_err(|e| e.into_storage(what))?;
    catalog(
        connection,
        what,
        "SELECT pg_advisory_xact_lock(hashtextextended('tenure-ensure:' || $1::text, 0))",
        &[Param::Text(prefix.as_str())],
    )
    .await?;
    let missing = problems(connection, prefix).await?;
    if missing.is_empty()
        && super::shape::outdated_functions(connection, prefix)
            .await?
            .is_empty()
        && super::shape::outdated_triggers(connection, prefix)
            .await?
            .is_empty()
    {
        // Everything is in place: nothing to create or replace, and no privilege to do so
        // needed (a least-privilege role may use Ensure).
        return connection
            .script("COMMIT")
            .await
            .map_err(|e| e.into_storage(what));
    }
    let rows = catalog(
        connection,
        what,
        "SELECT current_schema()::text, current_user::text, \
                coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)",
        &[],
    )
    .await?;
    let Some(row) = rows.first() else {
        return Err(EventStorageError::internal(
            "unexpected catalog query result: no row",
        ));
    };
    let schema: Option<String> = get(row, 0, "current_schema")?;
    let role: String = get(row, 1, "current_user")?;
    let may_create: bool = get(row, 2, "has_schema_privilege")?;
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
    connection
        .script(&render(prefix))
        .await
        .map_err(|e| ddl_error(e, prefix, &missing))?;
    connection
        .script("COMMIT")
        .await
        .map_err(|e| e.into_storage(what))
}

fn ddl_error(failure: Failure, prefix: &TablePrefix, missing: &[String]) -> EventStorageError {
    let Some((code, server_message)) = failure.server_message() else {
        return failure.into_storage("ensuring the schema");
    };
    let p = prefix.as_str();
    let missing = if missing.is_empty() {
        "nothing was missing (the DDL also replaces the functions, which needs their ownership)"
            .to_owned()
    } else {
        format!("missing were: {}", missing.join("; "))
    };
    let message = format!(
        "SchemaMode::Ensure could not apply the DDL for prefix {p:?}: {server_message} ({code}); \
         {missing}. Apply tenure_postgres::ddl({p:?}) as a role that may, and use \
         SchemaMode::Validate",
    );
    match failure {
        Failure::Server { source, .. } => EventStorageError::schema_with(message, source),
        _ => EventStorageError::schema(message),
    }
}

/// Checks every table, column (type and nullability), sequence, index and function, naming
/// each one that is missing or wrong.
async fn validate<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
) -> Result<(), EventStorageError> {
    let mut problems = problems(connection, prefix).await?;
    problems.extend(super::privileges::missing(connection, prefix).await?);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(EventStorageError::schema(format!(
            "the schema for prefix {:?} is incomplete or not granted: {}. Apply \
             tenure_postgres::ddl({:?}) and grant what docs/postgres.md lists, or use \
             SchemaMode::Ensure",
            prefix.as_str(),
            problems.join("; "),
            prefix.as_str()
        )))
    }
}

/// Every missing or wrong object, as `Validate` names them.
async fn problems<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
) -> Result<Vec<String>, EventStorageError> {
    let what = "validating the schema";
    let tables: Vec<String> = TABLES
        .iter()
        .map(|t| format!("{prefix}{}", t.table))
        .collect();
    let rows = catalog(
        connection,
        what,
        // From the catalog, not information_schema: information_schema.columns shows only
        // the columns the role has a privilege on, and a table the role may not touch (the
        // fence's, for a role that does not use it) would look missing.
        "SELECT c.relname::text, a.attname::text, format_type(a.atttypid, NULL)::text, \
                CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END \
           FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
           JOIN pg_namespace n ON n.oid = c.relnamespace \
          WHERE n.nspname = current_schema() AND c.relname = ANY($1) AND c.relkind = 'r' \
            AND a.attnum > 0 AND NOT a.attisdropped",
        &[Param::Texts(&tables)],
    )
    .await?;
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
    let relations: Vec<String> = RELATIONS
        .iter()
        .map(|(r, _, _)| format!("{prefix}{r}"))
        .collect();
    let rows = catalog(
        connection,
        what,
        "SELECT c.relname::text, c.relkind::text \
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
          WHERE n.nspname = current_schema() AND c.relname = ANY($1)",
        &[Param::Texts(&relations)],
    )
    .await?;
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
    let existing: Vec<String> = TABLES
        .iter()
        .map(|t| format!("{prefix}{}", t.table))
        .filter(|t| columns.iter().any(|c| c[0] == *t))
        .collect();
    problems.extend(super::shape::problems(connection, prefix, &existing).await?);
    let functions: Vec<String> = FUNCTIONS
        .iter()
        .map(|(f, _)| format!("{prefix}{f}"))
        .collect();
    let rows = catalog(
        connection,
        what,
        "SELECT p.proname::text, oidvectortypes(p.proargtypes) \
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
          WHERE n.nspname = current_schema() AND p.proname = ANY($1)",
        &[Param::Texts(&functions)],
    )
    .await?;
    let functions = texts(&rows, 2)?;
    for (function, arguments) in FUNCTIONS {
        let name = format!("{prefix}{function}");
        if !functions.iter().any(|f| f[0] == name && f[1] == *arguments) {
            problems.push(format!("function {name}({arguments}) is missing"));
        }
    }
    problems.extend(trigger_problems(connection, prefix, &existing).await?);
    Ok(problems)
}

/// Every trigger of [`TRIGGERS`] that is missing or disabled, on the tables that exist.
async fn trigger_problems<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
    existing: &[String],
) -> Result<Vec<String>, EventStorageError> {
    let names: Vec<String> = TRIGGERS
        .iter()
        .map(|(t, _)| format!("{prefix}{t}"))
        .collect();
    let rows = catalog(
        connection,
        "validating the schema",
        "SELECT t.tgname::text, c.relname::text, t.tgenabled::text \
           FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
           JOIN pg_namespace n ON n.oid = c.relnamespace \
          WHERE n.nspname = current_schema() AND t.tgname = ANY($1) AND NOT t.tgisinternal",
        &[Param::Texts(&names)],
    )
    .await?;
    let found = texts(&rows, 3)?;
    let mut problems = Vec::new();
    for (trigger, table) in TRIGGERS {
        let (name, table) = (format!("{prefix}{trigger}"), format!("{prefix}{table}"));
        if !existing.contains(&table) {
            continue;
        }
        match found.iter().find(|f| f[0] == name && f[1] == table) {
            None => problems.push(format!("trigger {name} on table {table} is missing")),
            // 'D': disabled (ALTER TABLE … DISABLE TRIGGER): no wake-up would ever come.
            Some(f) if f[2] == "D" => {
                problems.push(format!("trigger {name} on table {table} is disabled"));
            }
            Some(_) => {}
        }
    }
    Ok(problems)
}

/// The first `n` columns of every row, as text.
fn texts<R: Row>(rows: &[R], n: usize) -> Result<Vec<Vec<String>>, EventStorageError> {
    rows.iter()
        .map(|row| (0..n).map(|i| get(row, i, "catalog column")).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for (trigger, table) in TRIGGERS {
            assert!(
                sql.contains(&format!("CREATE TRIGGER tenure_{trigger}\n")),
                "{trigger}"
            );
            assert!(sql.contains(&format!(" ON tenure_{table}\n")), "{table}");
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
