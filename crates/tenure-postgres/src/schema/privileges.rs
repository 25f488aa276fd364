//! The privileges the storage needs at run time, as `Validate` checks them
//! (`has_schema_privilege`, `has_table_privilege`, `has_sequence_privilege`,
//! `has_function_privilege`), and the words a runtime permission error is put in.
//!
//! The table is the one `docs/postgres.md` prints: each object (named without its prefix), its
//! kind, and the privileges the storage's statements use on it.

use tenure_ports::EventStorageError;

use crate::connection::{Checkout, Driver, Param, Sql};
use crate::decode::get;
use crate::prefix::TablePrefix;

/// What kind of object a privilege is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The current schema (its name is not prefixed).
    Schema,
    /// A table.
    Table,
    /// A sequence.
    Sequence,
    /// A function, with its input argument types.
    Function(&'static str),
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Schema => "schema",
            Kind::Table => "table",
            Kind::Sequence => "sequence",
            Kind::Function(_) => "function",
        }
    }
}

/// Every privilege the storage needs at run time: the object (without its prefix; empty for
/// the current schema), its kind, and the privileges. The sequence needs `UPDATE` (for
/// `setval`; it also allows `nextval`, so `USAGE` is not needed besides).
pub(crate) const NEEDED: &[(&str, Kind, &[&str])] = &[
    ("", Kind::Schema, &["USAGE"]),
    ("leases", Kind::Table, &["SELECT", "INSERT", "UPDATE"]),
    (
        "lease_contenders",
        Kind::Table,
        &["SELECT", "INSERT", "UPDATE", "DELETE"],
    ),
    ("events", Kind::Table, &["SELECT", "INSERT"]),
    ("event_keys", Kind::Table, &["SELECT", "INSERT"]),
    ("events_position_seq", Kind::Sequence, &["UPDATE"]),
    (
        "bookmarks",
        Kind::Table,
        &["SELECT", "INSERT", "UPDATE", "DELETE"],
    ),
    (
        "release_lease_v1",
        Kind::Function("text, text, timestamp with time zone"),
        &["EXECUTE"],
    ),
    (
        "request_lease_v4",
        Kind::Function(
            "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
        ),
        &["EXECUTE"],
    ),
    (
        "request_lease_v5",
        Kind::Function(
            "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
        ),
        &["EXECUTE"],
    ),
    (
        "request_leases_v1",
        Kind::Function(
            "text[], text[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean[], timestamp with time zone",
        ),
        &["EXECUTE"],
    ),
    (
        "append_events_v1",
        Kind::Function(
            "text[], text[], jsonb[], text[], text, boolean, text[], text[], text[], bigint",
        ),
        &["EXECUTE"],
    ),
];

/// Each privilege of [`NEEDED`] the current role lacks, as `Validate` names it ("role "app"
/// lacks INSERT on table tenure_leases"). Objects that do not exist are left out: their
/// absence is reported as such.
pub(crate) async fn missing<D: Driver>(
    connection: &mut Checkout<'_, D>,
    prefix: &TablePrefix,
) -> Result<Vec<String>, EventStorageError> {
    let (mut kinds, mut names, mut privileges) = (Vec::new(), Vec::new(), Vec::new());
    for (object, kind, needed) in NEEDED {
        let name = match kind {
            Kind::Schema => String::new(),
            Kind::Function(arguments) => format!("{prefix}{object}({arguments})"),
            _ => format!("{prefix}{object}"),
        };
        for privilege in *needed {
            kinds.push(kind.as_str().to_owned());
            names.push(name.clone());
            privileges.push((*privilege).to_owned());
        }
    }
    let sql: Sql =
        "SELECT t.k, t.n, t.p, current_user::text, coalesce(current_schema()::text, ''), \
             CASE t.k \
               WHEN 'schema' THEN has_schema_privilege(current_schema(), t.p) \
               WHEN 'table' THEN has_table_privilege( \
                   to_regclass(quote_ident(current_schema()) || '.' || t.n), t.p) \
               WHEN 'sequence' THEN has_sequence_privilege( \
                   to_regclass(quote_ident(current_schema()) || '.' || t.n), t.p) \
               WHEN 'function' THEN has_function_privilege( \
                   to_regprocedure(quote_ident(current_schema()) || '.' || t.n), t.p) \
             END \
           FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS t(k, n, p, i) \
          ORDER BY t.i"
            .into();
    let rows = connection
        .query(
            &sql,
            &[
                Param::Texts(&kinds),
                Param::Texts(&names),
                Param::Texts(&privileges),
            ],
        )
        .await
        .map_err(|e| e.into_storage("validating the privileges"))?;
    let mut problems = Vec::new();
    // A schema of the search_path the role may not use is skipped by the server, silently:
    // the objects in it look missing. Name it.
    let sql: Sql = "SELECT current_user::text, y.s FROM \
             unnest(string_to_array(current_setting('search_path'), ',')) AS x(raw), \
             LATERAL (SELECT btrim(x.raw, ' \"') AS s) AS y \
          WHERE y.s <> '$user' AND to_regnamespace(quote_ident(y.s)) IS NOT NULL \
            AND NOT has_schema_privilege(to_regnamespace(quote_ident(y.s)), 'USAGE')"
        .into();
    let hidden = connection
        .query(&sql, &[])
        .await
        .map_err(|e| e.into_storage("validating the privileges"))?;
    for row in &hidden {
        let role: String = get(row, 0, "current_user")?;
        let schema: String = get(row, 1, "schema")?;
        problems.push(format!("role {role:?} lacks USAGE on schema {schema}"));
    }
    for row in &rows {
        let kind: String = get(row, 0, "kind")?;
        let name: String = get(row, 1, "name")?;
        let privilege: String = get(row, 2, "privilege")?;
        let role: String = get(row, 3, "current_user")?;
        let schema: String = get(row, 4, "current_schema")?;
        let granted: Option<bool> = get(row, 5, "granted")?;
        if granted == Some(false) {
            let name = if kind == "schema" { schema } else { name };
            problems.push(format!("role {role:?} lacks {privilege} on {kind} {name}"));
        }
    }
    Ok(problems)
}

/// The words for a runtime `insufficient_privilege` error whose server message is
/// `server_message` ("permission denied for table tenure_leases"): the object it names and the
/// privileges the storage needs on it.
pub(crate) fn explain(server_message: &str) -> String {
    let needed = server_message
        .strip_prefix("permission denied for ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(kind, name)| {
            let name = name.trim_matches('"');
            let base = name.split('(').next().unwrap_or(name);
            NEEDED
                .iter()
                .filter(|(object, k, _)| k.as_str() == kind && !object.is_empty())
                .filter(|(object, _, _)| base.ends_with(object))
                .max_by_key(|(object, _, _)| object.len())
                .map(|(_, _, privileges)| {
                    format!(
                        "; the role needs {} on {kind} {base}",
                        privileges.join(", ")
                    )
                })
                .or_else(|| {
                    (kind == "schema").then(|| format!("; the role needs USAGE on schema {base}"))
                })
        })
        .unwrap_or_default();
    format!(
        "PostgreSQL refused: {server_message}{needed} (grant what docs/postgres.md lists, or \
         check with SchemaMode::Validate)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_name_the_privileges_of_the_object() {
        assert_eq!(
            explain("permission denied for table t_lease_contenders"),
            "PostgreSQL refused: permission denied for table t_lease_contenders; the role needs \
             SELECT, INSERT, UPDATE, DELETE on table t_lease_contenders (grant what \
             docs/postgres.md lists, or check with SchemaMode::Validate)"
        );
        assert!(
            explain("permission denied for table t_leases")
                .contains("SELECT, INSERT, UPDATE on table t_leases")
        );
        assert!(
            explain("permission denied for sequence t_events_position_seq")
                .contains("UPDATE on sequence")
        );
        assert!(
            explain("permission denied for function t_request_lease_v4")
                .contains("EXECUTE on function t_request_lease_v4")
        );
        assert!(explain("permission denied for schema s").contains("USAGE on schema s"));
        assert!(
            explain("permission denied to create role")
                .contains("refused: permission denied to create role (")
        );
    }
}
