//! The privileges `Validate` checks, one by one (issue 14): a role with every privilege the
//! storage needs but one is refused by `Validate`, whose error names that privilege and its
//! object; and with `SchemaMode::None` the first call that needs it fails with a permission
//! error naming the privilege and the object. Also: `Validate` finds a dropped primary key and
//! a changed field of the answer type, and `Ensure` works for the least-privilege role.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::{admin, server};
use tenure_pg_test::{DropGuard, unique_name};
use tenure_ports::{
    AppendRequest, EventQuery, EventStorage, EventStorageError, LeaseRequest, NewEvent, ReadOptions,
};
use tenure_postgres::{BuildError, PostgresDriver, PostgresEventStorage, SchemaMode, ddl};

/// A schema of its own holding the tables of `p`, and a role whose search_path is that schema,
/// with every grant docs/postgres.md lists.
struct Scene {
    schema: String,
    role: String,
    url: String,
    _cleanup: DropGuard,
}

async fn scene(p: &str) -> Scene {
    let schema = unique_name("tenure_priv");
    let role = unique_name("tenure_role");
    let cleanup = DropGuard::new(
        server().url.clone(),
        format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; DROP OWNED BY {role}; \
             DROP ROLE IF EXISTS {role}"
        ),
    );
    let sql = ddl(p).unwrap();
    admin()
        .await
        .batch_execute(&tenure_pg_test::serialized(&format!(
            "CREATE SCHEMA {schema}; SET LOCAL search_path = {schema}; {sql}; \
             CREATE ROLE {role} LOGIN PASSWORD '{role}_pw'; \
             ALTER ROLE {role} SET search_path = {schema}; \
             GRANT USAGE ON SCHEMA {schema} TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON {schema}.{p}leases TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.{p}lease_contenders TO {role}; \
             GRANT SELECT, INSERT ON {schema}.{p}events, {schema}.{p}event_keys TO {role}; \
             GRANT USAGE, UPDATE ON SEQUENCE {schema}.{p}events_position_seq TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.{p}bookmarks TO {role}"
        )))
        .await
        .unwrap();
    let url = &server().url;
    let url = match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            format!("{scheme}://{role}:{role}_pw@{host}")
        }
        None => format!("{url} user={role} password={role}_pw"),
    };
    Scene {
        schema,
        role,
        url,
        _cleanup: cleanup,
    }
}

async fn build(
    driver: PostgresDriver,
    url: &str,
    p: &str,
    mode: SchemaMode,
) -> Result<PostgresEventStorage, BuildError> {
    PostgresEventStorage::builder()
        .driver(driver)
        .url(url)
        .prefix(p)
        .schema_mode(mode)
        .call_timeout(Duration::from_secs(5))
        .build()
        .await
}

/// Every kind of call, in turn; the first error.
async fn first_error(storage: &PostgresEventStorage) -> Option<EventStorageError> {
    let lease = "l";
    let a = LeaseRequest::new(lease, "a", 0, Duration::from_secs(60));
    let b = LeaseRequest::new(lease, "b", 1, Duration::from_secs(60));
    let event = NewEvent::new("s", "T", json!({ "n": 1 })).tagged("t");
    let keyed = AppendRequest::new(vec![event.clone()]).idempotent("k");
    let steps: Vec<Result<(), EventStorageError>> = vec![
        // A contender's first call (request_lease_v5), a standby's, and a renewal (v4).
        storage.request_lease(&a).await.map(drop),
        storage.request_lease(&b).await.map(drop),
        storage.request_lease(&a).await.map(drop),
        storage.get_leases().await.map(drop),
        storage.get_lease_contenders(lease).await.map(drop),
        storage.release_lease(lease, "a").await.map(drop),
        storage
            .append(&AppendRequest::new(vec![event.clone()]))
            .await
            .map(drop),
        // A batch draws its positions with nextval and setval.
        storage
            .append(&AppendRequest::new(vec![event.clone(), event.clone()]))
            .await
            .map(drop),
        storage.append(&keyed).await.map(drop),
        storage.append(&keyed).await.map(drop),
        storage
            .read_events(&EventQuery::stream("s"), ReadOptions::forwards())
            .await
            .map(drop),
    ];
    if let Some(err) = steps.into_iter().find_map(Result::err) {
        return Some(err);
    }
    let position = match storage
        .read_events(&EventQuery::stream("s"), ReadOptions::forwards())
        .await
    {
        Ok(events) => events.last().map(|e| e.position),
        Err(err) => return Some(err),
    };
    let Some(position) = position else {
        return Some(EventStorageError::internal("no event was read"));
    };
    let steps = vec![
        storage.bookmark("r", position, &[]).await.map(drop),
        storage.bookmark("r", position, &[]).await.map(drop),
        storage.get_bookmark("r").await.map(drop),
        storage.get_bookmarks().await.map(drop),
        storage.remove_bookmark("r").await.map(drop),
    ];
    steps.into_iter().find_map(Result::err)
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_needed_privilege_is_named_by_validate_and_by_the_failing_call(driver: PostgresDriver) {
    let p = "priv_";
    // The whole grant list works, in every mode: Ensure creates nothing and replaces nothing.
    let full = scene(p).await;
    for mode in [SchemaMode::Ensure, SchemaMode::Validate, SchemaMode::None] {
        let storage = build(driver, &full.url, p, mode)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert!(first_error(&storage).await.is_none(), "{mode:?}");
        storage.close().await.unwrap();
    }
    drop(full);

    // (what to take away, the kind and object Validate names, the privilege)
    let t = |table: &str, privilege: &str| {
        (
            format!("REVOKE {privilege} ON {{schema}}.{p}{table} FROM {{role}}"),
            format!("table {p}{table}"),
            privilege.to_owned(),
        )
    };
    let mut cases = vec![
        t("leases", "SELECT"),
        t("leases", "INSERT"),
        t("leases", "UPDATE"),
        t("lease_contenders", "SELECT"),
        t("lease_contenders", "INSERT"),
        t("lease_contenders", "UPDATE"),
        t("lease_contenders", "DELETE"),
        t("events", "SELECT"),
        t("events", "INSERT"),
        t("event_keys", "SELECT"),
        t("event_keys", "INSERT"),
        t("bookmarks", "SELECT"),
        t("bookmarks", "INSERT"),
        t("bookmarks", "UPDATE"),
        t("bookmarks", "DELETE"),
        (
            format!("REVOKE UPDATE ON SEQUENCE {{schema}}.{p}events_position_seq FROM {{role}}"),
            format!("sequence {p}events_position_seq"),
            "UPDATE".to_owned(),
        ),
    ];
    for (function, arguments) in [
        ("release_lease_v1", "text, text, timestamp with time zone"),
        (
            "request_lease_v4",
            "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
        ),
        (
            "request_lease_v5",
            "text, text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone",
        ),
        (
            "append_events_v1",
            "text[], text[], jsonb[], text[], text, boolean, text[], text[], text[], bigint",
        ),
    ] {
        cases.push((
            format!("REVOKE EXECUTE ON FUNCTION {{schema}}.{p}{function}({arguments}) FROM PUBLIC"),
            format!("function {p}{function}"),
            "EXECUTE".to_owned(),
        ));
    }
    cases.push((
        "REVOKE USAGE ON SCHEMA {schema} FROM {role}".to_owned(),
        "schema {schema}".to_owned(),
        "USAGE".to_owned(),
    ));

    for (except, object, privilege) in cases {
        let scene = scene_with(p, &except).await;
        let object = object.replace("{schema}", &scene.schema);
        let case = format!("{driver}: without {privilege} on {object}");

        let err = match build(driver, &scene.url, p, SchemaMode::Validate).await {
            Ok(_) => panic!("{case}: Validate passed"),
            Err(err) => err.to_string(),
        };
        let named = format!("role \"{}\" lacks {privilege} on {object}", scene.role);
        assert!(err.contains(&named), "{case}: {named:?} not in: {err}");

        let storage = build(driver, &scene.url, p, SchemaMode::None).await.unwrap();
        let err = first_error(&storage).await.unwrap_or_else(|| panic!("{case}: every call passed"));
        assert!(matches!(err, EventStorageError::Schema { .. }), "{case}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(&privilege), "{case}: the privilege not in: {message}");
        if object.starts_with("schema") {
            // The server skips a schema the role may not use: its objects look missing.
            assert!(message.contains("USAGE on their schema"), "{case}: {message}");
        } else {
            assert!(message.contains(&object), "{case}: the object not in: {message}");
        }
        storage.close().await.unwrap();
    }
}
}

/// [`scene`], then `except` run (a statement that takes a grant away or changes an object),
/// with `{schema}` and `{role}` in it standing for the scene's names.
async fn scene_with(p: &str, except: &str) -> Scene {
    let scene = scene(p).await;
    let statement = except
        .replace("{schema}", &scene.schema)
        .replace("{role}", &scene.role);
    admin()
        .await
        .batch_execute(&tenure_pg_test::serialized(&statement))
        .await
        .unwrap();
    scene
}

on_each_driver! {
#[tokio::test]
async fn validate_finds_a_dropped_primary_key_and_a_changed_answer_type(driver: PostgresDriver) {
    let p = "shape_";
    for (change, expected) in [
        (
            format!("ALTER TABLE {{schema}}.{p}leases DROP CONSTRAINT {p}leases_pkey"),
            format!("the primary key of table {p}leases (lease_name) is missing"),
        ),
        (
            format!(
                "ALTER TABLE {{schema}}.{p}lease_contenders DROP CONSTRAINT \
                 {p}lease_contenders_pkey"
            ),
            format!("the primary key of table {p}lease_contenders (lease_name, owner) is missing"),
        ),
        (
            format!(
                "ALTER TYPE {{schema}}.{p}lease_outcome_v1 ALTER ATTRIBUTE o_fencing_token \
                 TYPE integer"
            ),
            format!("type {p}lease_outcome_v1 has the fields ("),
        ),
    ] {
        let scene = scene_with(p, &change).await;
        let err = match build(driver, &scene.url, p, SchemaMode::Validate).await {
            Ok(_) => panic!("{driver}: Validate passed after {change}"),
            Err(err) => err.to_string(),
        };
        assert!(err.contains(&expected), "{driver}: {expected:?} not in: {err}");
        if change.contains("TYPE integer") {
            assert!(err.contains("o_fencing_token integer"), "{err}");
        }
    }
}
}
