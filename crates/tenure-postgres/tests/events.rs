//! The event log against a real server, where the conformance kit cannot reach: transactions
//! held open by hand, concurrent writers, duplicate keys, the locks appends and lease calls
//! take.
//!
//! A transaction held open holds back every reader of the whole cluster (the barrier is the
//! cluster's oldest transaction in flight). So the test that holds one open for long runs on a
//! throwaway cluster of its own, and the others take [`SERIAL`] so that they do not slow each
//! other's reads down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use support::{LOCK_KEY_SQL, admin, blocked_on_lock, builder, fresh_storage};
use tenure_pg_test::PrefixGuard;
use tenure_pg_test::cluster::Cluster;
use tenure_ports::{
    AppendRequest, EventPosition, EventQuery, EventStorage, EventStorageError, LeaseRequest,
    LeaseStatus, NewEvent, ReadOptions, StoredEvent,
};
use tenure_postgres::{PostgresDriver, PostgresEventStorage, SchemaMode};
use tokio::time::Instant;

/// Taken by every test of this file that runs on the shared server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn event(stream: &str, n: u64) -> NewEvent {
    NewEvent::new(stream, "T", json!({ "n": n })).tagged("t")
}

fn ns(events: &[StoredEvent]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e.payload["n"].as_u64().unwrap())
        .collect()
}

/// A second storage on the same prefix whose reads never wait for the barrier: what a reader
/// returns at once.
async fn impatient(driver: PostgresDriver, guard: &PrefixGuard) -> PostgresEventStorage {
    builder(driver, guard)
        .schema_mode(SchemaMode::Validate)
        .visibility_wait(Duration::ZERO)
        .build()
        .await
        .unwrap()
}

/// An append through the same function the adapter calls, on `client` (inside whatever
/// transaction it has open). The positions it stored, or the conflicting one.
async fn raw_append(
    client: &impl tokio_postgres::GenericClient,
    prefix: &str,
    stream: &str,
    n: u64,
    key: Option<&str>,
    condition_tag: Option<&str>,
) -> Result<(String, Vec<i64>), tokio_postgres::Error> {
    let c_tags: Vec<&str> = condition_tag.into_iter().collect();
    let none: Vec<&str> = Vec::new();
    let rows = client
        .query(
            &format!(
                "SELECT o_outcome, o_position FROM {prefix}append_events_v1(\
                 $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            &[
                &vec![stream],
                &vec!["T"],
                &vec![json!({ "n": n })],
                &vec!["t"],
                &key,
                &condition_tag.is_some(),
                &none,
                &none,
                &c_tags,
                &0i64,
            ],
        )
        .await?;
    let outcome: String = rows[0].get(0);
    Ok((outcome, rows.iter().map(|r| r.get(1)).collect()))
}

on_each_driver! {
/// The issue's test of the barrier: a slow transaction holds a smaller position while a later
/// one commits; a reader sees neither until the slow one commits, then both, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_transaction_hides_a_later_commit_until_it_commits(driver: PostgresDriver) {
    let cluster = tokio::task::spawn_blocking(|| {
        let cluster = Cluster::create()?;
        cluster.start().map(|()| cluster)
    })
    .await
    .unwrap()
    .expect("a throwaway cluster (this machine has PostgreSQL's binaries)");
    let url = cluster.url();
    let p = "barrier_";
    let on_cluster = |wait: Duration| {
        PostgresEventStorage::builder().driver(driver)
            .url(url.clone())
            .prefix(p)
            .visibility_wait(wait)
            .call_timeout(Duration::from_secs(20))
    };
    let storage = on_cluster(tenure_postgres::DEFAULT_VISIBILITY_WAIT)
        .build()
        .await
        .unwrap();
    let at_once = on_cluster(Duration::ZERO).build().await.unwrap();
    let connect = || async { tenure_pg_test::connect(&url).await.unwrap() };
    let all = EventQuery::all();

    // The slow transaction: an append through the adapter's own SQL, left uncommitted.
    let mut slow = connect().await;
    let slow_tx = slow.transaction().await.unwrap();
    let (_, slow_positions) = raw_append(&slow_tx, p, "slow", 1, None, None)
        .await
        .unwrap();

    // A later append commits, with a larger position.
    let later = storage
        .append(&AppendRequest::new(vec![event("later", 2)]))
        .await
        .unwrap();
    assert!(later[0].position.get_i64() > slow_positions[0]);
    // It is committed: a plain query sees it; only the barrier hides it.
    let visible: i64 = connect()
        .await
        .query_one(&format!("SELECT count(*) FROM {p}events"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 1);

    // A reader sees neither, forwards, backwards, by stream; waiting or not.
    for options in [ReadOptions::forwards(), ReadOptions::backwards()] {
        assert!(at_once.read_events(&all, options).await.unwrap().is_empty());
    }
    let stream = EventQuery::stream("later");
    assert!(
        at_once
            .read_events(&stream, ReadOptions::forwards())
            .await
            .unwrap()
            .is_empty()
    );
    let started = Instant::now();
    assert!(
        storage
            .read_events(&all, ReadOptions::forwards())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        started.elapsed() >= storage.visibility_wait(),
        "the read gave up before its visibility wait: {:?}",
        started.elapsed()
    );

    // A reader that may wait long enough sees both, as soon as the slow one commits.
    let patient = on_cluster(Duration::from_secs(5))
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let events = patient
            .read_events(&EventQuery::all(), ReadOptions::forwards())
            .await;
        (events, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the patient reader did not wait");
    let committed_at = Instant::now();
    slow_tx.commit().await.unwrap();
    let (events, answered_at) = waiting.await.unwrap();
    let events = events.unwrap();
    assert!(answered_at >= committed_at);
    assert_eq!(ns(&events), vec![1, 2], "both, in position order");
    assert_eq!(events[0].position.get_i64(), slow_positions[0]);
    assert_eq!(events[1], later[0]);

    // And every reader now sees both, in order.
    let events = at_once
        .read_events(&all, ReadOptions::forwards())
        .await
        .unwrap();
    assert_eq!(ns(&events), vec![1, 2]);
    let events = at_once
        .read_events(&all, ReadOptions::backwards())
        .await
        .unwrap();
    assert_eq!(ns(&events), vec![2, 1]);
    drop(cluster);
}
}

on_each_driver! {
/// Writers through the adapter and slow writers holding their transactions open, while a
/// follower reads on from the last position it got, never waiting: it must end with exactly
/// the log, in order, having skipped nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_never_skips_an_event_of_concurrent_and_slow_writers(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let run_for = Duration::from_secs(3);
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix().to_owned();
    let follower = impatient(driver, &guard).await;
    let deadline = Instant::now() + run_for;

    let mut writers = Vec::new();
    for w in 0..4u64 {
        let storage = storage.clone();
        writers.push(tokio::spawn(async move {
            let stream = format!("w{w}");
            let mut n = 0;
            while Instant::now() < deadline {
                let size = 1 + (n % 3);
                let batch = (n..n + size).map(|i| event(&stream, i)).collect();
                let stored = storage.append(&AppendRequest::new(batch)).await.unwrap();
                let positions: Vec<u64> = stored.iter().map(|e| e.position.get()).collect();
                let first = positions[0];
                assert_eq!(
                    positions,
                    (first..first + size).collect::<Vec<_>>(),
                    "one batch, consecutive positions"
                );
                n += size;
            }
        }));
    }
    for w in 0..2u64 {
        let p = p.clone();
        writers.push(tokio::spawn(async move {
            let mut client = admin().await;
            let stream = format!("slow{w}");
            let mut n = 0;
            while Instant::now() < deadline {
                let tx = client.transaction().await.unwrap();
                raw_append(&tx, &p, &stream, n, None, None).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5 + (n * 7 + w * 13) % 40)).await;
                tx.commit().await.unwrap();
                n += 1;
            }
        }));
    }

    let count_sql = format!("SELECT count(*) FROM {p}events");
    let counter = admin().await;
    let mut seen: Vec<EventPosition> = Vec::new();
    let mut reads = 0;
    let mut writers_done = false;
    let mut catch_up_until = None;
    loop {
        let options = ReadOptions::forwards()
            .starting_after(seen.last().copied())
            .with_limit(50);
        let batch = follower
            .read_events(&EventQuery::all(), options)
            .await
            .unwrap();
        reads += 1;
        for e in &batch {
            assert!(seen.last().is_none_or(|last| e.position > *last));
            seen.push(e.position);
        }
        if writers_done && batch.is_empty() {
            // Every writer has committed; the barrier passes everything once the cluster's
            // older transactions (anybody's) are done.
            let stored: i64 = counter.query_one(&count_sql, &[]).await.unwrap().get(0);
            if seen.len() as i64 >= stored {
                break;
            }
            let until = *catch_up_until.get_or_insert(Instant::now() + Duration::from_secs(30));
            assert!(Instant::now() < until, "the follower never caught up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !writers_done && writers.iter().all(|w| w.is_finished()) {
            for w in writers.drain(..) {
                w.await.unwrap();
            }
            writers_done = true;
        }
    }

    let client = admin().await;
    let log: Vec<i64> = client
        .query(
            &format!("SELECT position FROM {p}events ORDER BY position"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let seen: Vec<i64> = seen.iter().map(|p| p.get_i64()).collect();
    println!(
        "follower: {} events in {reads} reads, log of {}",
        seen.len(),
        log.len()
    );
    assert!(log.len() > 100, "too few events to mean anything");
    assert_eq!(seen, log, "the follower skipped or invented events");

    // What makes it so: positions increase with the writing transactions' ids.
    let out_of_order: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT transaction_id < lag(transaction_id) \
                   OVER (ORDER BY position) AS back FROM {p}events) t WHERE back"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        out_of_order, 0,
        "a younger transaction got a smaller position"
    );
}
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_with_one_key_store_one_batch(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, guard) = fresh_storage(driver).await;
    let mut tasks = Vec::new();
    for n in 0..8u64 {
        let storage = storage.clone();
        tasks.push(tokio::spawn(async move {
            let request = AppendRequest::new(vec![event("s", n * 10), event("s", n * 10 + 1)])
                .idempotent("k");
            storage.append(&request).await.unwrap()
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:#?}");
    let log = storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    assert_eq!(log, answers[0]);
    drop(guard);
}
}

on_each_driver! {
/// The path where the key's unique index decides: the first append with the key is still in
/// flight when the second arrives; the second waits, fails on the index, and replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_flight_makes_the_second_append_wait_and_replay(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix().to_owned();
    let mut first = admin().await;
    let tx = first.transaction().await.unwrap();
    let (_, positions) = raw_append(&tx, &p, "s", 1, Some("k"), None).await.unwrap();

    let second = tokio::spawn({
        let storage = storage.clone();
        async move {
            storage
                .append(&AppendRequest::new(vec![event("s", 2)]).idempotent("k"))
                .await
        }
    });
    blocked_on_lock(&p, "append_events_v1").await;
    tx.commit().await.unwrap();
    let replayed = second.await.unwrap().unwrap();
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].position.get_i64(), positions[0]);
    assert_eq!(ns(&replayed), vec![1], "the first append's events");
    let log = storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    assert_eq!(log, replayed);
}
}

on_each_driver! {
/// A conditional append waits for an append in flight, then sees its event: the check runs
/// after the lock, without the barrier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_append_waits_for_appends_in_flight_and_sees_them(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix().to_owned();
    let mut other = admin().await;
    let tx = other.transaction().await.unwrap();
    let (_, positions) = raw_append(&tx, &p, "seat", 1, None, None).await.unwrap();

    let conditional = tokio::spawn({
        let storage = storage.clone();
        async move {
            let request = AppendRequest::new(vec![event("seat", 2)])
                .on_condition(EventQuery::all().with_tag("t"), None);
            storage.append(&request).await
        }
    });
    blocked_on_lock(&p, "append_events_v1").await;
    tx.commit().await.unwrap();
    match conditional.await.unwrap() {
        Err(EventStorageError::AppendConflict { conflicting }) => {
            assert_eq!(conflicting.get_i64(), positions[0]);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
}
}

on_each_driver! {
/// While a conditional append is in flight, other appends wait for it, and see its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_wait_for_a_conditional_append_in_flight(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix().to_owned();
    let mut other = admin().await;
    let tx = other.transaction().await.unwrap();
    let (outcome, positions) = raw_append(&tx, &p, "seat", 1, None, Some("t"))
        .await
        .unwrap();
    assert_eq!(outcome, "appended");

    let plain = tokio::spawn({
        let storage = storage.clone();
        async move {
            storage
                .append(&AppendRequest::new(vec![event("x", 2)]))
                .await
        }
    });
    let conditional = tokio::spawn({
        let storage = storage.clone();
        async move {
            let request = AppendRequest::new(vec![event("seat", 3)])
                .on_condition(EventQuery::all().with_tag("t"), None);
            storage.append(&request).await
        }
    });
    blocked_on_lock(&p, "append_events_v1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!plain.is_finished() && !conditional.is_finished());
    tx.commit().await.unwrap();
    let plain = plain.await.unwrap().unwrap();
    assert!(plain[0].position.get_i64() > positions[0]);
    assert!(matches!(
        conditional.await.unwrap(),
        Err(EventStorageError::AppendConflict { conflicting }) if conflicting.get_i64() == positions[0]
    ));
}
}

on_each_driver! {
/// Lease calls go on while an append holds the events' locks, and appends and reads go on
/// while a lease call holds its lock: they share none. The locks an append holds are in the
/// two-int advisory key space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_lease_calls_share_no_lock(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let guard = support::fresh_prefix();
    let storage = builder(driver, &guard)
        .call_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let p = guard.prefix().to_owned();
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(30));
    storage.request_lease(&request).await.unwrap();

    // A conditional append in flight: the strongest lock an append takes.
    let mut appender = admin().await;
    let tx = appender.transaction().await.unwrap();
    raw_append(&tx, &p, "s", 1, Some("k"), Some("t"))
        .await
        .unwrap();
    let locks = admin()
        .await
        .query(
            "SELECT l.objsubid::int, l.mode FROM pg_locks l \
              WHERE l.locktype = 'advisory' AND l.pid = $1",
            &[&backend_pid(&tx).await],
        )
        .await
        .unwrap();
    let locks: Vec<(i32, String)> = locks.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        locks,
        vec![(2, "ExclusiveLock".to_owned())],
        "one two-int advisory lock (objsubid 2), the session lock already released"
    );
    for _ in 0..3 {
        let answer = storage.request_lease(&request).await.unwrap();
        assert_eq!(answer.status, LeaseStatus::Leader);
        storage.get_leases().await.unwrap();
        storage.get_lease_contenders("l").await.unwrap();
    }
    // Reads and bookmarks take no lock either.
    let committed = storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    assert!(committed.is_empty());
    tx.rollback().await.unwrap();

    // A lease call in flight holding its lock: appends, reads and bookmarks go on.
    let mut leaser = admin().await;
    let lease_tx = leaser.transaction().await.unwrap();
    lease_tx
        .execute(
            &format!("SELECT pg_advisory_xact_lock({LOCK_KEY_SQL})"),
            &[&p, &"l"],
        )
        .await
        .unwrap();
    let stored = storage
        .append(&AppendRequest::new(vec![event("s", 2)]).on_condition(EventQuery::all(), None))
        .await
        .unwrap();
    storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    storage
        .bookmark("r", stored[0].position, &[])
        .await
        .unwrap();
    lease_tx.rollback().await.unwrap();
}
}

async fn backend_pid(client: &impl tokio_postgres::GenericClient) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

on_each_driver! {
/// An append stuck on a lock past the call timeout is Unavailable in time, leaves no lock
/// behind, and the pool goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_past_its_timeout_is_unavailable_and_leaves_no_lock(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let guard = support::fresh_prefix();
    // Long enough to connect on a loaded machine (it is also the connect timeout).
    let timeout = Duration::from_secs(1);
    let storage = builder(driver, &guard)
        .pool_size(1)
        .call_timeout(timeout)
        .build()
        .await
        .unwrap();
    let p = guard.prefix().to_owned();
    let mut holder = admin().await;
    let tx = holder.transaction().await.unwrap();
    raw_append(&tx, &p, "s", 1, None, Some("t")).await.unwrap();

    let started = std::time::Instant::now();
    let err = storage
        .append(&AppendRequest::new(vec![event("s", 2)]))
        .await
        .unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
    assert!(started.elapsed() >= timeout);
    assert!(started.elapsed() < timeout + Duration::from_millis(900));
    // Reads go on meanwhile, on a new connection (the abandoned one was closed).
    storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The abandoned append may still have committed on the server: its outcome is unknown.
    // Either way, no advisory lock of the events' key is held by anybody after a moment.
    let client = admin().await;
    let mut held = -1i64;
    for _ in 0..100 {
        held = client
            .query_one(
                "SELECT count(*) FROM pg_locks \
                  WHERE locktype = 'advisory' AND objsubid = 2 AND classid = \
                        (hashtext($1 || 'events')::bigint & 4294967295)::oid",
                &[&p],
            )
            .await
            .unwrap()
            .get(0);
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        held, 0,
        "an advisory lock of the events outlived its append"
    );
    let again = storage
        .append(&AppendRequest::new(vec![event("s", 3)]))
        .await
        .unwrap();
    assert_eq!(ns(&again), vec![3]);
}
}

on_each_driver! {
/// A bookmark must point at a committed event: one still in flight does not count, and a
/// refused bookmark writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_on_an_uncommitted_event_is_refused(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix().to_owned();
    let placed = storage
        .append(&AppendRequest::new(vec![event("s", 1)]))
        .await
        .unwrap();
    storage
        .bookmark("r", placed[0].position, &[])
        .await
        .unwrap();
    let mut writer = admin().await;
    let tx = writer.transaction().await.unwrap();
    let (_, positions) = raw_append(&tx, &p, "s", 2, None, None).await.unwrap();
    let pending = EventPosition::new(positions[0] as u64).unwrap();
    match storage.bookmark("r", pending, &["x".to_owned()]).await {
        Err(EventStorageError::InvalidRequest(err)) => assert_eq!(err.field.as_str(), "position"),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
    let kept = storage.get_bookmark("r").await.unwrap().unwrap();
    assert_eq!(kept.position, placed[0].position);
    assert!(kept.tags.is_empty());
    tx.commit().await.unwrap();
    storage.bookmark("r", pending, &[]).await.unwrap();
}
}

on_each_driver! {
/// Payloads come back as stored, whatever JSON they are; stream, type and tag names travel as
/// parameters whatever they contain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_and_names_round_trip(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, _guard) = fresh_storage(driver).await;
    let payloads = [
        json!(null),
        json!(true),
        json!(-17),
        json!(u64::MAX),
        json!(0.1),
        json!(1.5e300),
        json!("naïve 'quoted' \"text\" \\ $1"),
        json!([1, "two", {"three": [3]}]),
        json!({"b": 1, "a": {"nested": [null, false]}, "": "empty key"}),
    ];
    let names = ["s'; DROP TABLE x; --", "ünïcödé", "$1", "%_\\", "a b"];
    let events: Vec<NewEvent> = payloads
        .iter()
        .enumerate()
        .map(|(i, payload)| {
            let name = names[i % names.len()];
            NewEvent::new(name, name, payload.clone())
                .tagged(name)
                .tagged("z")
                .tagged(name)
        })
        .collect();
    let stored = storage
        .append(&AppendRequest::new(events.clone()))
        .await
        .unwrap();
    let read = storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    assert_eq!(read, stored);
    for (event, stored) in events.iter().zip(&read) {
        assert_eq!(stored.payload, event.payload);
        let expected: BTreeSet<&String> = event.tags.iter().collect();
        assert_eq!(
            stored.tags,
            expected.into_iter().cloned().collect::<Vec<_>>()
        );
    }
    for name in names {
        let by_stream = storage
            .read_events(&EventQuery::stream(name), ReadOptions::forwards())
            .await
            .unwrap();
        let by_tag = storage
            .read_events(
                &EventQuery::all().of_type(name).with_tag(name),
                ReadOptions::forwards(),
            )
            .await
            .unwrap();
        assert!(!by_stream.is_empty(), "{name:?}");
        assert_eq!(by_stream, by_tag, "{name:?}");
    }

    // jsonb cannot hold a NUL character: such a payload is invalid input on every backend,
    // refused before anything is written.
    let err = storage
        .append(&AppendRequest::new(vec![
            event("s", 1),
            NewEvent::new("s", "T", json!({"text": "a\u{0}b"})),
        ]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EventStorageError::InvalidRequest(v) if v.field.as_str() == "payload"),
        "{err:?}"
    );
    let after = storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap();
    assert_eq!(after, read);
}
}

on_each_driver! {
/// Every shape of condition (each branch of the function's check) finds the first matching
/// event after the condition's position, and only a matching one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_condition_shape_finds_the_first_conflict(driver: PostgresDriver) {
    let _serial = SERIAL.lock().await;
    let (storage, _guard) = fresh_storage(driver).await;
    let e = |stream: &str, event_type: &str, tags: &[&str]| {
        tags.iter()
            .fold(NewEvent::new(stream, event_type, json!(null)), |e, t| {
                e.tagged(*t)
            })
    };
    let stored = storage
        .append(&AppendRequest::new(vec![
            e("a", "X", &["t1"]),
            e("b", "Y", &["t1", "t2"]),
            e("a", "Y", &["t2"]),
            e("c", "X", &[]),
        ]))
        .await
        .unwrap();
    let at = |i: usize| stored[i].position;
    let q = |streams: &[&str], types: &[&str], tags: &[&str]| EventQuery {
        streams: streams.iter().map(|s| s.to_string()).collect(),
        event_types: types.iter().map(|s| s.to_string()).collect(),
        tags: tags.iter().map(|s| s.to_string()).collect(),
    };
    // (query, after, the expected conflict, if any)
    let cases = [
        (q(&[], &[], &[]), None, Some(0)),
        (q(&[], &[], &[]), Some(at(2)), Some(3)),
        (q(&[], &[], &[]), Some(at(3)), None),
        (q(&["a"], &[], &[]), Some(at(0)), Some(2)),
        (q(&["a", "c"], &["X"], &[]), Some(at(0)), Some(3)),
        (q(&["a"], &["Y"], &["t2"]), None, Some(2)),
        (q(&["b"], &[], &["t1", "t2"]), Some(at(1)), None),
        (q(&[], &[], &["t2"]), None, Some(1)),
        (q(&[], &["X"], &["t1"]), Some(at(0)), None),
        (q(&[], &["Y"], &["t2"]), Some(at(1)), Some(2)),
        (q(&[], &["Y"], &[]), None, Some(1)),
        (q(&[], &["Z"], &[]), None, None),
        (q(&["nowhere"], &[], &[]), None, None),
    ];
    for (query, after, expected) in cases {
        let request =
            AppendRequest::new(vec![e("probe", "P", &[])]).on_condition(query.clone(), after);
        // A conflict stores nothing; a success stores a probe that matches none of the queries.
        match (storage.append(&request).await, expected) {
            (Err(EventStorageError::AppendConflict { conflicting }), Some(i)) => {
                assert_eq!(conflicting, at(i), "{query:?} after {after:?}");
            }
            (Ok(_), None) => {}
            (other, _) => panic!("{query:?} after {after:?}: expected {expected:?}, got {other:?}"),
        }
    }
}
}
