//! The parts of the schema whose shape the storage relies on beyond its columns, as `Validate`
//! checks them: the primary keys (they enforce one row per lease, per contender, per position,
//! per idempotency key, per reader) and the fields of the lease functions' answer type (read by
//! position).

use tenure_ports::EventStorageError;

use crate::connection::{Checkout, Driver, Param, Sql};
use crate::decode::get;
use crate::prefix::TablePrefix;

/// Each table (without its prefix) and the columns of its primary key, in order.
pub(crate) const PRIMARY_KEYS: &[(&str, &str)] = &[
    ("leases", "lease_name"),
    ("lease_contenders", "lease_name, owner"),
    ("events", "position"),
    ("event_keys", "idempotency_key"),
    ("bookmarks", "reader"),
    ("fences", "resource"),
];

/// The answer type of `request_lease_v1` (without its prefix) and its fields, in order.
pub(crate) const ANSWER_TYPE: (&str, &[(&str, &str)]) = (
    "lease_outcome_v1",
    &[
        ("o_status", "text"),
        ("o_transition", "text"),
        ("o_owner", "text"),
        ("o_priority", "bigint"),
        ("o_fencing_token", "bigint"),
        ("o_acquired_at", "timestamp with time zone"),
        ("o_heartbeat_at", "timestamp with time zone"),
        ("o_ttl_micros", "bigint"),
    ],
);

/// Every primary key that is missing or on other columns, and every difference of the answer
/// type, in words. Tables that are missing are left out (`existing` lists the tables found).
pub(crate) async fn problems<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
    existing: &[String],
) -> Result<Vec<String>, EventStorageError> {
    let what = "validating the schema";
    let tables: Vec<String> = PRIMARY_KEYS
        .iter()
        .map(|(t, _)| format!("{prefix}{t}"))
        .collect();
    let sql: Sql = "SELECT c.relname::text, array_to_string(array( \
                SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY AS u(n, i) \
                  JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n \
                 ORDER BY u.i), ', ') \
           FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid \
           JOIN pg_namespace s ON s.oid = c.relnamespace \
          WHERE k.contype = 'p' AND s.nspname = current_schema() AND c.relname = ANY($1)"
        .into();
    let rows = connection
        .query(&sql, &[Param::Texts(&tables)])
        .await
        .map_err(|e| e.into_storage(what))?;
    let mut found = Vec::new();
    for row in &rows {
        let table: String = get(row, 0, "relname")?;
        let columns: String = get(row, 1, "columns")?;
        found.push((table, columns));
    }
    let mut problems = Vec::new();
    for (table, columns) in PRIMARY_KEYS {
        let table = format!("{prefix}{table}");
        if !existing.contains(&table) {
            continue;
        }
        match found.iter().find(|(t, _)| *t == table) {
            None => problems.push(format!(
                "the primary key of table {table} ({columns}) is missing"
            )),
            Some((_, actual)) if actual != columns => problems.push(format!(
                "the primary key of table {table} is on ({actual}), expected ({columns})"
            )),
            Some(_) => {}
        }
    }

    let (name, fields) = ANSWER_TYPE;
    let type_name = format!("{prefix}{name}");
    let sql: Sql = "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
           FROM pg_type t JOIN pg_namespace s ON s.oid = t.typnamespace \
           JOIN pg_attribute a ON a.attrelid = t.typrelid \
          WHERE s.nspname = current_schema() AND t.typname = $1 AND t.typtype = 'c' \
            AND a.attnum > 0 AND NOT a.attisdropped \
          ORDER BY a.attnum"
        .into();
    let rows = connection
        .query(&sql, &[Param::Text(&type_name)])
        .await
        .map_err(|e| e.into_storage(what))?;
    let mut actual = Vec::new();
    for row in &rows {
        let field: String = get(row, 0, "attname")?;
        let data_type: String = get(row, 1, "format_type")?;
        actual.push(format!("{field} {data_type}"));
    }
    let expected: Vec<String> = fields.iter().map(|(f, t)| format!("{f} {t}")).collect();
    if actual.is_empty() {
        problems.push(format!("type {type_name} is missing"));
    } else if actual != expected {
        problems.push(format!(
            "type {type_name} has the fields ({}), expected ({})",
            actual.join(", "),
            expected.join(", ")
        ));
    }
    Ok(problems)
}

/// The triggers (without their prefix) that the shipped DDL creates with a `WHEN` clause. One
/// found without it is of an earlier release (`leases_created` before
/// `0010_unannounced_creations.sql`): `Ensure` runs the DDL, which replaces it. A test checks
/// this list against the DDL.
pub(crate) const CONDITIONAL_TRIGGERS: &[&str] = &[
    "leases_created",
    "leases_changed",
    "contenders_changed",
    "priority_bound_raised",
];

/// The triggers of [`CONDITIONAL_TRIGGERS`] found without their `WHEN` clause: what `Ensure`
/// must replace. Missing ones are not listed (they are missing objects).
pub(crate) async fn outdated_triggers<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
) -> Result<Vec<String>, EventStorageError> {
    let names: Vec<String> = CONDITIONAL_TRIGGERS
        .iter()
        .map(|t| format!("{prefix}{t}"))
        .collect();
    let sql: Sql = "SELECT t.tgname::text FROM pg_trigger t \
           JOIN pg_class c ON c.oid = t.tgrelid \
           JOIN pg_namespace s ON s.oid = c.relnamespace \
          WHERE s.nspname = current_schema() AND t.tgname = ANY($1) AND t.tgqual IS NULL"
        .into();
    let rows = connection
        .query(&sql, &[Param::Texts(&names)])
        .await
        .map_err(|e| e.into_storage("comparing the triggers"))?;
    rows.iter().map(|row| get(row, 0, "tgname")).collect()
}

/// The functions of the shipped DDL whose body differs from the one in the database (or that
/// are missing): what `Ensure` must (re)create. When there is none and nothing else is
/// missing, `Ensure` runs no DDL at all, so that a role that owns nothing can use it.
pub(crate) async fn outdated_functions<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
) -> Result<Vec<String>, EventStorageError> {
    let shipped = function_bodies(&super::render(prefix));
    let names: Vec<String> = shipped.iter().map(|(n, _)| n.clone()).collect();
    let sql: Sql = "SELECT p.proname::text, p.prosrc \
           FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace \
          WHERE s.nspname = current_schema() AND p.proname = ANY($1)"
        .into();
    let rows = connection
        .query(&sql, &[Param::Texts(&names)])
        .await
        .map_err(|e| e.into_storage("comparing the functions"))?;
    let mut installed = Vec::new();
    for row in &rows {
        let name: String = get(row, 0, "proname")?;
        let body: String = get(row, 1, "prosrc")?;
        installed.push((name, body));
    }
    Ok(shipped
        .into_iter()
        .filter(|shipped| !installed.contains(shipped))
        .map(|(name, _)| name)
        .collect())
}

/// Each `CREATE OR REPLACE FUNCTION name(…) … AS $tag$body$tag$` of `ddl`: the name and the
/// body, as `pg_proc.prosrc` holds it.
fn function_bodies(ddl: &str) -> Vec<(String, String)> {
    const START: &str = "CREATE OR REPLACE FUNCTION ";
    let mut out = Vec::new();
    let mut rest = ddl;
    while let Some(at) = rest.find(START) {
        rest = &rest[at + START.len()..];
        let name_end = rest.find('(').unwrap_or(0);
        let name = rest[..name_end].trim().to_owned();
        let Some(as_at) = rest.find("\nAS $") else {
            break;
        };
        let after = &rest[as_at + 4..];
        let Some(tag_len) = after[1..].find('$').map(|i| i + 2) else {
            break;
        };
        let tag = &after[..tag_len];
        let body_start = tag_len;
        let Some(body_len) = after[body_start..].find(tag) else {
            break;
        };
        out.push((name, after[body_start..body_start + body_len].to_owned()));
        rest = &after[body_start + body_len + tag_len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conditional_triggers_are_those_the_ddl_creates_with_a_when_clause() {
        let ddl = super::super::render(&TablePrefix::default());
        for (trigger, _) in crate::schema::manage::TRIGGERS {
            // The last definition counts: a later migration may replace a trigger.
            let start = ddl
                .rfind(&format!("CREATE TRIGGER tenure_{trigger}\n"))
                .unwrap_or_else(|| panic!("{trigger} is not created"));
            let statement = &ddl[start..start + ddl[start..].find(';').unwrap_or(0)];
            assert_eq!(
                statement.contains("WHEN ("),
                CONDITIONAL_TRIGGERS.contains(trigger),
                "{trigger}: {statement}"
            );
        }
    }

    #[test]
    fn every_shipped_function_has_its_body_found() {
        let bodies = function_bodies(&super::super::render(&TablePrefix::default()));
        let names: Vec<&str> = bodies.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "tenure_request_lease_v1",
                "tenure_release_lease_v1",
                "tenure_append_events_v1",
                "tenure_fence_v1",
                "tenure_request_lease_v2",
                "tenure_notify_lease_v1",
                "tenure_notify_contender_v1",
                "tenure_request_lease_v3",
                "tenure_priority_bound_v1",
                "tenure_request_lease_v4",
                "tenure_request_lease_v5",
                "tenure_request_leases_v1"
            ]
        );
        for (name, body) in &bodies {
            assert!(
                body.contains("BEGIN") && body.trim_end().ends_with("END"),
                "{name}: {body}"
            );
        }
    }
}
