//! The schema modes, prefixes, privileges and connection strings, against a real server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::error::Error as _;
use std::time::Duration;

use serde_json::json;
use support::{admin, builder, fresh_prefix, fresh_storage, named_builder, server};
use tenure_pg_test::PrefixGuard;
use tenure_ports::{
    AppendRequest, EventQuery, EventStorage, EventStorageError, LeaseRequest, LeaseStatus,
    NewEvent, ReadOptions,
};
use tenure_postgres::{BuildError, PostgresDriver, PostgresEventStorage, SchemaMode, ddl};

fn request(lease: &str, owner: &str) -> LeaseRequest {
    LeaseRequest::new(lease, owner, 0, Duration::from_secs(60))
}

async fn count_objects(prefix: &str) -> i64 {
    admin()
        .await
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class WHERE left(relname, length($1)) = $1) \
                  + (SELECT count(*) FROM pg_proc WHERE left(proname, length($1)) = $1)",
            &[&prefix],
        )
        .await
        .unwrap()
        .get(0)
}

on_each_driver! {
#[tokio::test]
async fn ensure_twice_is_harmless_and_keeps_the_data(driver: PostgresDriver) {
    let (first, guard) = fresh_storage(driver).await;
    let granted = first.request_lease(&request("l", "a")).await.unwrap();
    let objects = count_objects(guard.prefix()).await;
    // Leases: two tables, their primary key indexes, the row type of request_lease_v1's
    // answer (v2's to v5's too), seven functions (request v1 to v5, the carried requests'
    // request_leases_v1, release v1). Events:
    // three tables, their primary key indexes, the position sequence, three more indexes, one
    // function. The transaction fence: a table, its primary key index, a function. The
    // wake-ups: two trigger functions, and the priority bound's (the triggers are not
    // relations). And no more after a second run.
    assert_eq!(objects, 12 + 11 + 3 + 3);
    let second = builder(driver, &guard).build().await.unwrap();
    assert_eq!(count_objects(guard.prefix()).await, objects);
    let standby = second.request_lease(&request("l", "b")).await.unwrap();
    assert_eq!(standby.status, LeaseStatus::Standby);
    assert_eq!(standby.lease, granted.lease);
}
}

on_each_driver! {
#[tokio::test]
async fn concurrent_ensures_are_serialized(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let builds = (0..4).map(|_| {
        let b = builder(driver, &guard);
        tokio::spawn(async move { b.build().await })
    });
    for build in builds.collect::<Vec<_>>() {
        build.await.unwrap().unwrap();
    }
}
}

on_each_driver! {
#[tokio::test]
async fn validate_on_an_empty_schema_names_every_missing_object(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let err = builder(driver, &guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap_err();
    let message = err.to_string();
    let p = guard.prefix();
    for name in [
        format!("table {p}leases is missing"),
        format!("table {p}lease_contenders is missing"),
        format!("function {p}request_lease_v1("),
        format!("function {p}release_lease_v1("),
        format!("table {p}events is missing"),
        format!("table {p}event_keys is missing"),
        format!("table {p}bookmarks is missing"),
        format!(
            "function {p}append_events_v1(text[], text[], jsonb[], text[], text, boolean, \
             text[], text[], text[], bigint) is missing"
        ),
    ] {
        assert!(message.contains(&name), "{name:?} not in {message}");
    }
    assert!(matches!(
        err,
        BuildError::Storage(EventStorageError::Schema { .. })
    ));
    assert_eq!(count_objects(p).await, 0, "Validate created something");
}
}

on_each_driver! {
#[tokio::test]
async fn validate_after_ensure_passes(driver: PostgresDriver) {
    let (_ensured, guard) = fresh_storage(driver).await;
    let validated = builder(driver, &guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap();
    validated.request_lease(&request("l", "a")).await.unwrap();
}
}

/// Applies the DDL for the guard's prefix, then `damage` (SQL), and returns what `Validate` says.
async fn validate_after_damage(
    driver: PostgresDriver,
    guard: &PrefixGuard,
    damage: &str,
) -> String {
    let client = admin().await;
    client
        .batch_execute(&ddl(guard.prefix()).unwrap())
        .await
        .unwrap();
    client.batch_execute(damage).await.unwrap();
    builder(driver, guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap_err()
        .to_string()
}

on_each_driver! {
#[tokio::test]
async fn validate_names_wrong_and_missing_columns(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let p = guard.prefix();
    let message = validate_after_damage(
        driver,
        &guard,
        &format!(
            "ALTER TABLE {p}leases ALTER COLUMN priority TYPE integer; \
             ALTER TABLE {p}lease_contenders DROP COLUMN last_seen CASCADE; \
             ALTER TABLE {p}leases ALTER COLUMN owner DROP NOT NULL;"
        ),
    )
    .await;
    for expected in [
        format!("column {p}leases.priority is integer, expected bigint"),
        format!("column {p}lease_contenders.last_seen is missing"),
        format!("column {p}leases.owner must be NOT NULL"),
        // The column went with the trigger that watches it (CASCADE).
        format!("trigger {p}contenders_changed on table {p}lease_contenders is missing"),
    ] {
        assert!(message.contains(&expected), "{expected:?} not in {message}");
    }
}
}

on_each_driver! {
#[tokio::test]
async fn validate_names_missing_and_disabled_notification_triggers(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let p = guard.prefix();
    let message = validate_after_damage(
        driver,
        &guard,
        &format!(
            "DROP TRIGGER {p}leases_changed ON {p}leases; \
             ALTER TABLE {p}lease_contenders DISABLE TRIGGER {p}contenders_joined;"
        ),
    )
    .await;
    for expected in [
        format!("trigger {p}leases_changed on table {p}leases is missing"),
        format!("trigger {p}contenders_joined on table {p}lease_contenders is disabled"),
    ] {
        assert!(message.contains(&expected), "{expected:?} not in {message}");
    }
    assert!(!message.contains(&format!("{p}leases_created")), "{message}");
    // Ensure puts the missing one back (it does not re-enable a disabled one: that was an
    // operator's decision, and Validate keeps naming it).
    let client = admin().await;
    client
        .batch_execute(&format!(
            "ALTER TABLE {p}lease_contenders ENABLE TRIGGER {p}contenders_joined"
        ))
        .await
        .unwrap();
    builder(driver, &guard).build().await.unwrap();
    builder(driver, &guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap();
}
}

on_each_driver! {
#[tokio::test]
async fn validate_names_wrong_event_columns_and_missing_indexes(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let p = guard.prefix();
    let message = validate_after_damage(
        driver,
        &guard,
        &format!(
            "DROP INDEX {p}events_tags_idx; \
             ALTER TABLE {p}events ALTER COLUMN transaction_id TYPE bigint USING 0; \
             ALTER TABLE {p}events ALTER COLUMN tags TYPE text; \
             ALTER TABLE {p}bookmarks DROP COLUMN placed_at; \
             ALTER TABLE {p}event_keys DROP CONSTRAINT {p}event_keys_pkey;"
        ),
    )
    .await;
    for expected in [
        format!("column {p}events.transaction_id is bigint, expected xid8"),
        format!("column {p}events.tags is text, expected text[]"),
        format!("column {p}bookmarks.placed_at is missing"),
        format!("index {p}events_tags_idx is missing"),
        format!("index {p}event_keys_pkey is missing"),
    ] {
        assert!(message.contains(&expected), "{expected:?} not in {message}");
    }
    assert!(!message.contains("sequence"), "{message}");
}
}

on_each_driver! {
#[tokio::test]
async fn none_touches_nothing(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard)
        .schema_mode(SchemaMode::None)
        .build()
        .await
        .unwrap();
    assert_eq!(count_objects(guard.prefix()).await, 0);
    // Without the schema, a call is a schema error, and still creates nothing.
    let err = storage.request_lease(&request("l", "a")).await.unwrap_err();
    assert!(matches!(err, EventStorageError::Schema { .. }), "{err:?}");
    assert_eq!(count_objects(guard.prefix()).await, 0);
}
}

on_each_driver! {
#[tokio::test]
async fn none_builds_without_a_reachable_server(driver: PostgresDriver) {
    // Nothing listens on port 1: None mode does not connect while building.
    let storage = PostgresEventStorage::builder().driver(driver)
        .url("postgres://u@127.0.0.1:1/db")
        .schema_mode(SchemaMode::None)
        .call_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let err = storage.request_lease(&request("l", "a")).await.unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
}
}

on_each_driver! {
#[tokio::test]
async fn ddl_applied_by_hand_satisfies_validate(driver: PostgresDriver) {
    let guard = fresh_prefix();
    admin()
        .await
        .batch_execute(&ddl(guard.prefix()).unwrap())
        .await
        .unwrap();
    let storage = builder(driver, &guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap();
    assert_eq!(
        storage
            .request_lease(&request("l", "a"))
            .await
            .unwrap()
            .status,
        LeaseStatus::Leader
    );
}
}

on_each_driver! {
#[tokio::test]
async fn two_prefixes_are_independent(driver: PostgresDriver) {
    let (a, _ga) = fresh_storage(driver).await;
    let (b, _gb) = fresh_storage(driver).await;
    let in_a = a.request_lease(&request("same", "x")).await.unwrap();
    let in_b = b.request_lease(&request("same", "y")).await.unwrap();
    assert_eq!(in_a.status, LeaseStatus::Leader);
    assert_eq!(in_b.status, LeaseStatus::Leader);
    assert_eq!(in_b.lease.owner, "y");
    a.release_lease("same", "x").await.unwrap();
    let again_b = b.request_lease(&request("same", "z")).await.unwrap();
    assert_eq!(again_b.status, LeaseStatus::Standby);
    assert_eq!(a.get_leases().await.unwrap().leases.len(), 1);
    assert_eq!(b.get_lease_contenders("same").await.unwrap().len(), 2);
    assert_eq!(a.get_lease_contenders("same").await.unwrap().len(), 0);
}
}

on_each_driver! {
#[tokio::test]
async fn invalid_prefixes_and_settings_are_refused_before_connecting(driver: PostgresDriver) {
    for prefix in ["", "Upper", "1x", "semi;colon", "quote'", &"x".repeat(43)] {
        let err = PostgresEventStorage::builder().driver(driver)
            .url("postgres://u@127.0.0.1:1/db")
            .prefix(prefix)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(err, BuildError::Prefix(_)), "{prefix:?}: {err:?}");
    }
    let err = PostgresEventStorage::builder().driver(driver).build().await.unwrap_err();
    assert!(matches!(err, BuildError::NoConnection));
    let err = PostgresEventStorage::builder().driver(driver)
        .url("postgres://u@127.0.0.1:1/db")
        .pool_size(0)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::Setting {
            name: "pool_size",
            ..
        }
    ));
    let err = PostgresEventStorage::builder().driver(driver)
        .url("postgres://u@127.0.0.1:1/db")
        .call_timeout(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::Setting {
            name: "call_timeout",
            ..
        }
    ));
}
}

/// Every text an error shows: Display, Debug, and its whole source chain.
fn all_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{err} {err:?}");
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(&format!(" {s} {s:?}"));
        source = s.source();
    }
    text
}

on_each_driver! {
#[tokio::test]
async fn a_password_never_appears_in_error_text(driver: PostgresDriver) {
    let secret = "Sup3rS3cretPa55";
    // Refused connection, wrong password, unparseable URL, unknown database.
    let urls = [
        format!("postgres://app:{secret}@127.0.0.1:1/db"),
        format!("postgres://nosuchrole_tenure:{secret}@127.0.0.1:5432/postgres"),
        format!("postgres://app:{secret}@127.0.0.1:notaport/db"),
        format!("host=127.0.0.1 port=1 user=app password={secret} dbname=db"),
        format!("host=127.0.0.1 port=1 user=app password='{secret}' bogus"),
    ];
    for url in urls {
        let builder = PostgresEventStorage::builder().driver(driver)
            .url(url.clone())
            .call_timeout(Duration::from_secs(3));
        assert!(!format!("{builder:?}").contains(secret));
        let err = builder.build().await.unwrap_err();
        let text = all_text(&err);
        assert!(!text.contains(secret), "{url}: {text}");
        // And from a lease call on a storage built without checking the schema.
        if let Ok(storage) = PostgresEventStorage::builder().driver(driver)
            .url(url.clone())
            .schema_mode(SchemaMode::None)
            .call_timeout(Duration::from_secs(3))
            .build()
            .await
        {
            assert!(!format!("{storage:?}").contains(secret));
            let err = storage.request_lease(&request("l", "a")).await.unwrap_err();
            assert!(err.is_unconfirmed(), "{err:?}");
            let text = all_text(&err);
            assert!(!text.contains(secret), "{url}: {text}");
        }
    }
    let _ = server();
}
}

on_each_driver! {
#[tokio::test]
async fn least_privilege_role_runs_leases_events_and_bookmarks(driver: PostgresDriver) {
    let (owner_storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix().to_owned();
    let role = tenure_pg_test::unique_name("tenure_role");
    let client = admin().await;
    // Exactly what docs/postgres.md lists, and nothing else.
    client
        .batch_execute(&tenure_pg_test::serialized(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{role}_pw'; \
             GRANT USAGE ON SCHEMA public TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON {p}leases TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {p}lease_contenders TO {role}; \
             GRANT SELECT, INSERT ON {p}events, {p}event_keys TO {role}; \
             GRANT USAGE, UPDATE ON SEQUENCE {p}events_position_seq TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {p}bookmarks TO {role}"
        )))
        .await
        .unwrap();
    let _drop_role = tenure_pg_test::DropGuard::role(server().url.clone(), &role);
    let role_url = role_url(&role);

    for mode in [SchemaMode::Validate, SchemaMode::None] {
        let storage = PostgresEventStorage::builder().driver(driver)
            .url(role_url.clone())
            .prefix(&p)
            .schema_mode(mode)
            .build()
            .await
            .unwrap();
        let lease = format!("lp-{mode:?}");
        // a's registration must lapse below; its ttl is short, but long enough that its three
        // calls stay within it on a loaded machine.
        let a = LeaseRequest::new(&lease, "a", 0, Duration::from_secs(1));
        let b = LeaseRequest::new(&lease, "b", 1, Duration::from_secs(60));
        assert_eq!(
            storage.request_lease(&a).await.unwrap().status,
            LeaseStatus::Leader
        );
        assert_eq!(
            storage.request_lease(&b).await.unwrap().status,
            LeaseStatus::Standby
        );
        assert_eq!(
            storage.request_lease(&a).await.unwrap().status,
            LeaseStatus::LeaderStepDownRequested
        );
        storage.release_lease(&lease, "a").await.unwrap();
        let taken = storage.request_lease(&b).await.unwrap();
        assert_eq!(taken.fencing_token.get(), 2);
        tokio::time::sleep(Duration::from_millis(1050)).await;
        storage.request_lease(&b).await.unwrap();
        assert!(storage.get_leases().await.unwrap().get(&lease).is_some());
        let contenders = storage.get_lease_contenders(&lease).await.unwrap();
        assert_eq!(contenders.len(), 1, "{contenders:?}");

        // The event log and the bookmarks: every kind of append, a read, every bookmark call.
        let stream = format!("s-{mode:?}");
        let event = |n: u64| NewEvent::new(&stream, "T", json!({ "n": n })).tagged("t");
        let first = storage
            .append(&AppendRequest::new(vec![event(1), event(2)]))
            .await
            .unwrap();
        let keyed = AppendRequest::new(vec![event(3)]).idempotent(format!("k-{mode:?}"));
        let stored = storage.append(&keyed).await.unwrap();
        assert_eq!(storage.append(&keyed).await.unwrap(), stored);
        let conditional = AppendRequest::new(vec![event(4)])
            .on_condition(EventQuery::stream(&stream), Some(stored[0].position));
        storage.append(&conditional).await.unwrap();
        assert!(matches!(
            storage.append(&conditional).await,
            Err(EventStorageError::AppendConflict { .. })
        ));
        let read = storage
            .read_events(
                &EventQuery::stream(&stream).with_tag("t"),
                ReadOptions::forwards(),
            )
            .await
            .unwrap();
        assert_eq!(read.len(), 4);
        let reader = format!("r-{mode:?}");
        storage
            .bookmark(&reader, first[0].position, &[])
            .await
            .unwrap();
        storage
            .bookmark(&reader, read[3].position, &[])
            .await
            .unwrap();
        assert_eq!(
            storage
                .get_bookmark(&reader)
                .await
                .unwrap()
                .unwrap()
                .position,
            read[3].position
        );
        assert_eq!(storage.get_bookmarks().await.unwrap().len(), 1);
        storage.remove_bookmark(&reader).await.unwrap();
        storage.close().await.unwrap();
    }
    // The role really cannot delete a lease record.
    let role_client = tenure_pg_test::connect(&role_url).await.unwrap();
    let err = role_client
        .execute(&format!("DELETE FROM {p}leases"), &[])
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // Nor change or remove an event, nor an idempotency key.
    for statement in [
        format!("UPDATE {p}events SET stream = 'x'"),
        format!("DELETE FROM {p}events"),
        format!("UPDATE {p}event_keys SET last_position = 0"),
        format!("DELETE FROM {p}event_keys"),
    ] {
        let err = role_client.execute(&statement, &[]).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}"
        );
    }
    // And Ensure, the default, works for this role: nothing is missing or outdated, so it
    // creates and replaces nothing (issue 14).
    let storage = PostgresEventStorage::builder().driver(driver)
        .url(role_url)
        .prefix(&p)
        .build()
        .await
        .unwrap();
    storage.close().await.unwrap();
    drop(owner_storage);
}
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

on_each_driver! {
/// Issue 7: no log line shows a password. Every event, at every level, of builds and calls
/// with passwords in URLs and key/value strings, succeeding, refused, and timed out.
#[tokio::test]
async fn no_tracing_event_shows_a_password(driver: PostgresDriver) {
    let secret = "Tr4c3dS3cretPa55";
    let role = tenure_pg_test::unique_name("tenure_role");
    admin()
        .await
        .batch_execute(&tenure_pg_test::serialized(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{secret}'; \
             GRANT USAGE ON SCHEMA public TO {role}"
        )))
        .await
        .unwrap();
    let _drop_role = tenure_pg_test::DropGuard::role(server().url.clone(), &role);
    let good_url = role_url_with_password(&role, secret);

    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    // This test runs on one thread (a current-thread runtime): every event reaches it.
    let _default = tracing::subscriber::set_default(subscriber);

    // A storage that connects with the password, and calls that reach the server.
    let storage = PostgresEventStorage::builder().driver(driver)
        .url(good_url.clone())
        .prefix(tenure_pg_test::unique_prefix())
        .schema_mode(SchemaMode::None)
        .call_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let err = storage.request_lease(&request("l", "a")).await.unwrap_err();
    assert!(matches!(err, EventStorageError::Schema { .. }), "{err:?}");
    // A call that times out (the warning): a lease call kept waiting on its lock.
    let (_ensured, guard) = fresh_storage(driver).await;
    let p = guard.prefix();
    admin()
        .await
        .batch_execute(&format!(
            "GRANT SELECT, INSERT, UPDATE ON {p}leases TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {p}lease_contenders TO {role};"
        ))
        .await
        .unwrap();
    let mut holder = admin().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT pg_advisory_xact_lock({})", support::LOCK_KEY_SQL),
        &[&p, &"l"],
    )
    .await
    .unwrap();
    let hurried = PostgresEventStorage::builder().driver(driver)
        .url(good_url.clone())
        .prefix(p)
        .schema_mode(SchemaMode::None)
        .call_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let err = hurried.request_lease(&request("l", "a")).await.unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
    tx.rollback().await.unwrap();
    // And builds that fail.
    for url in [
        good_url,
        format!("postgres://{role}:{secret}@127.0.0.1:1/postgres"),
        format!("host=127.0.0.1 port=1 user={role} password={secret} dbname=postgres"),
        format!("postgres://{role}:{secret}@127.0.0.1:notaport/postgres"),
    ] {
        let _ = PostgresEventStorage::builder().driver(driver)
            .url(url)
            .schema_mode(SchemaMode::Validate)
            .call_timeout(Duration::from_secs(3))
            .build()
            .await;
    }

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("building the storage"), "{log}");
    assert!(log.contains("call timed out"), "{log}");
    assert!(log.contains(":***@"), "the URL, redacted: {log}");
    assert!(!log.contains(secret), "{log}");
}
}

on_each_driver! {
/// Issue 7: a role that may not create anything in its schema gets, from Ensure, a Schema error
/// that says so and names every object it could not create; nothing is created.
#[tokio::test]
async fn ensure_without_create_privilege_names_what_it_could_not_create(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let p = guard.prefix().to_owned();
    let role = tenure_pg_test::unique_name("tenure_role");
    let schema = tenure_pg_test::unique_name("tenure_schema");
    // A schema of the test's own, on which the role has USAGE only, first on its search_path:
    // whatever the server grants PUBLIC on `public`.
    admin()
        .await
        .batch_execute(&tenure_pg_test::serialized(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{role}_pw'; \
             CREATE SCHEMA {schema}; \
             GRANT USAGE ON SCHEMA {schema} TO {role}; \
             ALTER ROLE {role} SET search_path = {schema}"
        )))
        .await
        .unwrap();
    let _cleanup = tenure_pg_test::DropGuard::new(
        server().url.clone(),
        format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; DROP OWNED BY {role}; DROP ROLE IF EXISTS {role}"
        ),
    );

    let err = PostgresEventStorage::builder().driver(driver)
        .url(role_url(&role))
        .prefix(&p)
        .schema_mode(SchemaMode::Ensure)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, BuildError::Storage(EventStorageError::Schema { .. })),
        "{err:?}"
    );
    let message = err.to_string();
    for expected in [
        "SchemaMode::Ensure cannot create".to_owned(),
        format!("role \"{role}\" has no CREATE privilege on schema \"{schema}\""),
        format!("table {p}leases is missing"),
        format!("table {p}lease_contenders is missing"),
        format!("table {p}events is missing"),
        format!("table {p}event_keys is missing"),
        format!("table {p}bookmarks is missing"),
        format!("function {p}append_events_v1("),
        format!("tenure_postgres::ddl(\"{p}\")"),
    ] {
        assert!(message.contains(&expected), "{expected:?} not in {message}");
    }
    assert!(!message.contains(&format!("{role}_pw")), "{message}");
    let created: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = $1",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(created, 0);
}
}

/// The test server's URL with `role` (and its password, `<role>_pw`) as the user.
fn role_url(role: &str) -> String {
    role_url_with_password(role, &format!("{role}_pw"))
}

/// The test server's URL with `role` and `password` as the user.
fn role_url_with_password(role: &str, password: &str) -> String {
    let url = &server().url;
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            format!("{scheme}://{role}:{password}@{host}")
        }
        None => format!("{url} user={role} password={password}"),
    }
}

/// The number of server processes serving `application_name`, as the server counts them.
async fn backends_named(application_name: &str) -> i64 {
    admin()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&application_name],
        )
        .await
        .unwrap()
        .get(0)
}

on_each_driver! {
#[tokio::test]
async fn closing_makes_every_clone_fail_with_closed_and_closes_its_own_pool(
    driver: PostgresDriver
) {
    let guard = fresh_prefix();
    let name = format!("closing-{}", guard.prefix());
    let storage = named_builder(driver, &guard, &name)
        .build()
        .await
        .unwrap();
    let clone = storage.clone();
    storage.request_lease(&request("l", "a")).await.unwrap();
    // sqlx may hold two: it pings a returned connection before it is idle again.
    assert!(backends_named(&name).await >= 1);
    storage.close().await.unwrap();
    storage.close().await.unwrap();
    for err in [
        clone.request_lease(&request("l", "a")).await.unwrap_err(),
        clone.release_lease("l", "a").await.unwrap_err(),
        clone.get_leases().await.unwrap_err(),
        clone.get_lease_contenders("l").await.unwrap_err(),
    ] {
        assert!(matches!(err, EventStorageError::Closed), "{err:?}");
    }
    // The pool the storage built is closed: the server sees its connection go.
    let mut left = backends_named(&name).await;
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = backends_named(&name).await;
    }
    assert_eq!(left, 0, "the storage's own pool kept {left} connections open");
}
}

on_each_driver! {
#[tokio::test]
async fn closing_leaves_an_application_pool_open(driver: PostgresDriver) {
    let guard = fresh_prefix();
    builder(driver, &guard).build().await.unwrap().close().await.unwrap();
    let shared = |pool: tenure_postgres::ApplicationPool| {
        PostgresEventStorage::builder()
            .pool(pool)
            .prefix(guard.prefix())
            .schema_mode(SchemaMode::Validate)
            .build()
    };
    // The application's own pool, and a query of its own on it after the storage closed.
    let still_open: Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = i64>>>>;
    let storage = match driver {
        PostgresDriver::Deadpool => {
            let pool = support::deadpool_pool(&server().url, 2);
            let storage = shared(pool.clone().into()).await.unwrap();
            still_open = Box::new(move || {
                let pool = pool.clone();
                Box::pin(async move {
                    let client = pool.get().await.unwrap();
                    client.query_one("SELECT 1::int8", &[]).await.unwrap().get(0)
                })
            });
            storage
        }
        PostgresDriver::Sqlx09 => {
            let pool = support::sqlx_pool(&server().url, 2).await;
            let storage = shared(pool.clone().into()).await.unwrap();
            still_open = Box::new(move || {
                let pool = pool.clone();
                Box::pin(async move {
                    use tenure_postgres::sqlx_0_9::Row as _;
                    let row = tenure_postgres::sqlx_0_9::query("SELECT 1::int8")
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                    row.get::<i64, _>(0)
                })
            });
            storage
        }
        other => panic!("no test for driver {other}"),
    };
    assert_eq!(storage.driver(), driver);
    storage.request_lease(&request("l", "a")).await.unwrap();
    storage.close().await.unwrap();
    assert!(matches!(
        storage.request_lease(&request("l", "a")).await,
        Err(EventStorageError::Closed)
    ));
    assert_eq!(still_open().await, 1);
    let e = EventStorageError::Closed;
    assert!(e.source().is_none());
}
}

/// Whether every connection `pool` holds is idle in it, within `bound` (polled).
async fn all_idle_within(pool: &tenure_postgres::sqlx_0_9::PgPool, bound: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if pool.size() > 0 && pool.num_idle() == pool.size() as usize {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The sqlx driver keeps a connection of an application's pool for a moment after its call,
/// for the storage's next call (sqlx would ping it on its way back): it must go back to the
/// application's pool soon after the calls stop, and at once when the storage closes.
#[tokio::test]
async fn an_application_pool_gets_its_connections_back_after_the_calls_and_the_close() {
    let guard = fresh_prefix();
    let pool = support::sqlx_pool(&server().url, 2).await;
    // The schema made on the application's pool too (`Ensure`, the default).
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(guard.prefix())
        .build()
        .await
        .unwrap();
    let (first, second) = (request("l1", "a"), request("l2", "a"));
    for round in 0..3 {
        let (a, b) = tokio::join!(
            storage.request_lease(&first),
            storage.request_lease(&second)
        );
        a.unwrap();
        b.unwrap();
        // Checked out between the calls, as sqlx sees it.
        assert!(
            all_idle_within(&pool, Duration::from_secs(5)).await,
            "round {round}: {} of {} connections idle in the application's pool",
            pool.num_idle(),
            pool.size()
        );
    }
    storage.request_lease(&first).await.unwrap();
    storage.close().await.unwrap();
    assert!(
        all_idle_within(&pool, Duration::from_secs(5)).await,
        "after the close: {} of {} connections idle",
        pool.num_idle(),
        pool.size()
    );
    pool.close().await;
}

/// The `WHEN` clause of the trigger `<prefix>leases_created`, if it exists (`None` when it
/// does not, `Some(None)` when it has none).
async fn creation_trigger_condition(prefix: &str) -> Option<Option<String>> {
    admin()
        .await
        .query_opt(
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t \
              WHERE t.tgname = $1 || 'leases_created'",
            &[&prefix],
        )
        .await
        .unwrap()
        .map(|row| {
            let definition: String = row.get(0);
            definition
                .split_once(" WHEN ")
                .map(|(_, rest)| rest.split(" EXECUTE ").next().unwrap_or(rest).to_owned())
        })
}

on_each_driver! {
#[tokio::test]
async fn ensure_stops_announcing_creations_on_a_schema_of_the_previous_release(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let p = guard.prefix().to_owned();
    let full = ddl(&p).unwrap();
    let cut = full
        .find("-- migrations/postgres/0010_unannounced_creations.sql")
        .expect("migration 0010 is shipped");
    // Every migration but 0010 (the later ones add functions under new names).
    let after = full
        .find("-- migrations/postgres/0011_lease_functions_v5.sql")
        .expect("migration 0011 is shipped");
    admin()
        .await
        .batch_execute(&tenure_pg_test::serialized(&format!(
            "{}{}",
            &full[..cut],
            &full[after..]
        )))
        .await
        .unwrap();
    assert_eq!(creation_trigger_condition(&p).await, Some(None), "0007's trigger");
    // A schema without 0010 passes Validate as it is (0010 changes no name).
    builder(driver, &guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    for _ in 0..2 {
        builder(driver, &guard).build().await.unwrap().close().await.unwrap();
        assert_eq!(
            creation_trigger_condition(&p).await,
            Some(Some("((new.fencing_token > 1))".to_owned())),
            "Ensure did not replace the creation trigger once"
        );
    }
    drop(guard);
}
}
