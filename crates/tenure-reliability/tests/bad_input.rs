//! Every kind of bad input to every public operation, in one table: each gets a typed, clear
//! error, writes nothing, and panics nowhere. Extreme but valid inputs (the largest priorities,
//! the longest names) are accepted and behave.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::json;
use tenure_election::{ElectorConfig, LeaderElector};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    AppendRequest, EventPosition, EventQuery, EventStorage, EventStorageError, LeaseRequest,
    LeaseStatus, NewEvent, ReadOptions,
};
use tenure_postgres::{BuildError, PostgresEventStorage, SchemaMode};

type Check<'a> = Pin<Box<dyn Future<Output = Result<String, String>> + 'a>>;

/// Passes when `result` is `InvalidRequest` naming `field`; returns the error's text.
fn invalid<T: std::fmt::Debug>(
    result: Result<T, EventStorageError>,
    field: &str,
) -> Result<String, String> {
    let err = match result {
        Ok(value) => return Err(format!("accepted: {value:?}")),
        Err(err) => err,
    };
    let text = chain(&err);
    match err {
        EventStorageError::InvalidRequest(v) if v.field.as_str() == field => Ok(text),
        _ => Err(format!("expected InvalidRequest on {field}, got {text}")),
    }
}

/// The error and every cause, as one line.
fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn memory_is_empty(storage: &MemoryEventStorage) {
    assert!(
        storage.get_leases().await.unwrap().leases.is_empty(),
        "a lease was written"
    );
    assert!(
        storage
            .read_events(&EventQuery::all(), ReadOptions::forwards())
            .await
            .unwrap()
            .is_empty(),
        "an event was written"
    );
    assert!(
        storage.get_bookmarks().await.unwrap().is_empty(),
        "a bookmark was written"
    );
    assert_eq!(
        storage.contender_registrations().unwrap(),
        0,
        "a contender was registered"
    );
}

#[tokio::test]
async fn bad_input_to_the_storage_api() {
    let s = MemoryEventStorage::new();
    let long = "n".repeat(256);
    let ttl = Duration::from_secs(30);
    let req = |name: &str, owner: &str, ttl| LeaseRequest::new(name, owner, 0, ttl);
    let ev = |stream: &str, kind: &str| NewEvent::new(stream, kind, json!({"k": 1}));
    let missing = EventPosition::new(42).unwrap();
    let too_many_events = AppendRequest::new((0..10_001).map(|_| ev("s", "T")).collect());
    let too_many_tags = AppendRequest::new(vec![
        (0..65).fold(ev("s", "T"), |e, n| e.tagged(format!("t{n}"))),
    ]);

    let cases: Vec<(&str, Check<'_>)> = vec![
        (
            "request: empty lease name",
            Box::pin(async { invalid(s.request_lease(&req("", "a", ttl)).await, "lease_name") }),
        ),
        (
            "request: 256-byte lease name",
            Box::pin(async { invalid(s.request_lease(&req(&long, "a", ttl)).await, "lease_name") }),
        ),
        (
            "request: NUL in lease name",
            Box::pin(async {
                invalid(s.request_lease(&req("a\0b", "a", ttl)).await, "lease_name")
            }),
        ),
        (
            "request: bell in lease name",
            Box::pin(async {
                invalid(
                    s.request_lease(&req("a\u{7}", "a", ttl)).await,
                    "lease_name",
                )
            }),
        ),
        (
            "request: empty owner",
            Box::pin(async { invalid(s.request_lease(&req("l", "", ttl)).await, "owner") }),
        ),
        (
            "request: 256-byte owner",
            Box::pin(async { invalid(s.request_lease(&req("l", &long, ttl)).await, "owner") }),
        ),
        (
            "request: newline in owner",
            Box::pin(async { invalid(s.request_lease(&req("l", "pod\n1", ttl)).await, "owner") }),
        ),
        (
            "request: zero ttl",
            Box::pin(async {
                invalid(s.request_lease(&req("l", "a", Duration::ZERO)).await, "ttl")
            }),
        ),
        (
            "request: ttl under 1 ms",
            Box::pin(async {
                invalid(
                    s.request_lease(&req("l", "a", Duration::from_nanos(999_999)))
                        .await,
                    "ttl",
                )
            }),
        ),
        (
            "request: ttl over 7 days",
            Box::pin(async {
                invalid(
                    s.request_lease(&req("l", "a", Duration::from_secs(604_801)))
                        .await,
                    "ttl",
                )
            }),
        ),
        (
            "request: Duration::MAX ttl",
            Box::pin(async {
                invalid(s.request_lease(&req("l", "a", Duration::MAX)).await, "ttl")
            }),
        ),
        (
            "release: empty lease name",
            Box::pin(async { invalid(s.release_lease("", "a").await, "lease_name") }),
        ),
        (
            "release: NUL in owner",
            Box::pin(async { invalid(s.release_lease("l", "\0").await, "owner") }),
        ),
        (
            "contenders: 256-byte lease name",
            Box::pin(async { invalid(s.get_lease_contenders(&long).await, "lease_name") }),
        ),
        (
            "append: no events",
            Box::pin(async { invalid(s.append(&AppendRequest::new(vec![])).await, "events") }),
        ),
        (
            "append: 10,001 events",
            Box::pin(async { invalid(s.append(&too_many_events).await, "events") }),
        ),
        (
            "append: empty stream",
            Box::pin(async {
                invalid(
                    s.append(&AppendRequest::new(vec![ev("", "T")])).await,
                    "stream",
                )
            }),
        ),
        (
            "append: escape in type",
            Box::pin(async {
                invalid(
                    s.append(&AppendRequest::new(vec![ev("s", "\u{1b}[2J")]))
                        .await,
                    "event_type",
                )
            }),
        ),
        (
            "append: 65 tags",
            Box::pin(async { invalid(s.append(&too_many_tags).await, "tag") }),
        ),
        (
            "append: empty idempotency key",
            Box::pin(async {
                invalid(
                    s.append(&AppendRequest::new(vec![ev("s", "T")]).idempotent(""))
                        .await,
                    "idempotency_key",
                )
            }),
        ),
        (
            "append: bad condition",
            Box::pin(async {
                invalid(
                    s.append(
                        &AppendRequest::new(vec![ev("s", "T")])
                            .on_condition(EventQuery::all().with_tag("\0"), None),
                    )
                    .await,
                    "tag",
                )
            }),
        ),
        (
            "read: limit 0",
            Box::pin(async {
                invalid(
                    s.read_events(&EventQuery::all(), ReadOptions::forwards().with_limit(0))
                        .await,
                    "limit",
                )
            }),
        ),
        (
            "read: limit 10,001",
            Box::pin(async {
                invalid(
                    s.read_events(
                        &EventQuery::all(),
                        ReadOptions::forwards().with_limit(10_001),
                    )
                    .await,
                    "limit",
                )
            }),
        ),
        (
            "read: 256-byte stream",
            Box::pin(async {
                invalid(
                    s.read_events(&EventQuery::stream(long.clone()), ReadOptions::forwards())
                        .await,
                    "stream",
                )
            }),
        ),
        (
            "bookmark: missing event",
            Box::pin(async { invalid(s.bookmark("r", missing, &[]).await, "position") }),
        ),
        (
            "bookmark: empty reader",
            Box::pin(async { invalid(s.bookmark("", missing, &[]).await, "reader") }),
        ),
        (
            "get_bookmark: NUL reader",
            Box::pin(async { invalid(s.get_bookmark("\0").await, "reader") }),
        ),
        (
            "remove_bookmark: 256-byte reader",
            Box::pin(async { invalid(s.remove_bookmark(&long).await, "reader") }),
        ),
    ];
    let total = cases.len();
    let mut failures = Vec::new();
    for (name, check) in cases {
        match check.await {
            Ok(text) => println!("ok: {name}: {text}"),
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total >= 28);
    memory_is_empty(&s).await;

    // Extreme but valid: the largest and smallest priorities, 255-byte names, 1 ms and 7 days.
    let name = "n".repeat(255);
    let low = s
        .request_lease(&LeaseRequest::new(
            &name,
            "low",
            i64::MIN,
            Duration::from_secs(604_800),
        ))
        .await
        .unwrap();
    assert_eq!(low.status, LeaseStatus::Leader);
    s.request_lease(&LeaseRequest::new(
        &name,
        "high",
        i64::MAX,
        Duration::from_millis(1),
    ))
    .await
    .unwrap();
    let renewed = s
        .request_lease(&LeaseRequest::new(
            &name,
            "low",
            i64::MIN,
            Duration::from_secs(604_800),
        ))
        .await
        .unwrap();
    assert_eq!(renewed.status, LeaseStatus::LeaderStepDownRequested);
}

#[tokio::test]
async fn bad_input_to_the_election_config() {
    let storage = std::sync::Arc::new(MemoryEventStorage::new());
    let ttl = Duration::from_secs(3);
    let configs = [
        ("zero ttl", ElectorConfig::new("l", Duration::ZERO)),
        (
            "ttl below the elector's minimum",
            ElectorConfig::new("l", Duration::from_millis(5)),
        ),
        (
            "ttl over 7 days",
            ElectorConfig::new("l", Duration::from_secs(604_801)),
        ),
        ("empty lease name", ElectorConfig::new("", ttl)),
        (
            "NUL in owner",
            ElectorConfig::new("l", ttl).with_owner("a\0"),
        ),
        (
            "poll interval longer than the ttl",
            ElectorConfig::new("l", ttl).with_poll_interval(ttl * 2),
        ),
        (
            "zero poll interval",
            ElectorConfig::new("l", ttl).with_poll_interval(Duration::ZERO),
        ),
        (
            "call timeout not below the poll interval",
            ElectorConfig::new("l", ttl)
                .with_poll_interval(Duration::from_secs(1))
                .with_call_timeout(Duration::from_secs(1)),
        ),
    ];
    for (what, config) in configs {
        match LeaderElector::start(storage.clone(), config) {
            Ok(_) => panic!("{what}: accepted"),
            Err(err) => println!("ok: elector, {what}: {}", chain(&err)),
        }
    }
    memory_is_empty(&storage).await;
}

/// Builds a storage expecting an error; returns the error's whole text.
async fn build_error(
    builder: tenure_postgres::PostgresEventStorageBuilder,
) -> (BuildError, String) {
    match builder.build().await {
        Ok(storage) => panic!("built a storage that should have been refused: {storage:?}"),
        Err(err) => {
            let text = chain(&err);
            (err, text)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_to_the_postgres_backend() {
    let server = tenure_pg_test::required_server();
    let admin = tenure_pg_test::connect(&server.url).await.unwrap();
    let canary = tenure_pg_test::unique_name("canary");
    admin
        .batch_execute(&format!("CREATE TABLE {canary} (x int)"))
        .await
        .unwrap();
    let objects = |like: String| {
        let admin = &admin;
        async move {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_class WHERE relname LIKE $1",
                    &[&like],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    let before = objects("%".into()).await;

    let url = server.url.clone();
    let builder = || PostgresEventStorage::builder().url(url.clone());
    let prefixes = [
        format!("x; DROP TABLE {canary}; --"),
        format!("{canary}\"; DROP TABLE {canary}; --"),
        "Tenure_".to_owned(),
        "1tenure_".to_owned(),
        "tenure-".to_owned(),
        String::new(),
        "t".repeat(60),
        "tenure_\0".to_owned(),
        "tenure_é".to_owned(),
    ];
    for prefix in &prefixes {
        let (err, text) = build_error(builder().prefix(prefix.clone())).await;
        assert!(
            matches!(err, BuildError::Prefix(_)),
            "prefix {prefix:?}: {text}"
        );
        println!("ok: prefix {prefix:?}: {text}");
    }

    let secret = "s3cret-pw";
    let bad_urls = [
        "not a url at all".to_owned(),
        format!("postgres://app:{secret}@127.0.0.1:notaport/db"),
        format!("postgres://app:{secret}@[::1/db"),
        format!("postgres://app:{secret}@127.0.0.1:1/db"), // nothing listens on port 1
    ];
    for bad in &bad_urls {
        let (err, text) = build_error(
            PostgresEventStorage::builder()
                .url(bad.clone())
                .call_timeout(Duration::from_secs(2))
                .schema_timeout(Duration::from_secs(3)),
        )
        .await;
        assert!(!text.contains(secret), "the password leaked: {text}");
        assert!(
            !format!("{err:?}").contains(secret),
            "the password leaked in Debug: {err:?}"
        );
        println!("ok: url {}: {text}", tenure_postgres::redact(bad));
    }

    for (what, b) in [
        ("pool size 0", builder().pool_size(0)),
        ("call timeout 0", builder().call_timeout(Duration::ZERO)),
        ("no connection", PostgresEventStorage::builder()),
    ] {
        let (_, text) = build_error(b).await;
        println!("ok: {what}: {text}");
    }

    // A schema in the wrong shape under Validate: named, nothing created or changed.
    let prefix = tenure_pg_test::unique_prefix();
    let _guard = tenure_pg_test::PrefixGuard::new(server.url.clone(), prefix.clone());
    admin
        .batch_execute(&format!("CREATE TABLE {prefix}leases (lease_name int)"))
        .await
        .unwrap();
    let (err, text) = build_error(
        builder()
            .prefix(prefix.clone())
            .schema_mode(SchemaMode::Validate),
    )
    .await;
    assert!(
        matches!(err, BuildError::Storage(EventStorageError::Schema { .. })),
        "{text}"
    );
    assert!(text.contains(&format!("{prefix}leases")), "{text}");
    assert!(
        text.contains(&format!("{prefix}lease_contenders")),
        "{text}"
    );
    println!("ok: wrong-shaped schema under Validate: {text}");

    // Nothing was created by any refused build, and the canary survived every injection.
    assert_eq!(
        objects("%".into()).await,
        before + 1,
        "a refused build created objects"
    );
    admin
        .batch_execute(&format!("DROP TABLE {canary}"))
        .await
        .unwrap();
}
