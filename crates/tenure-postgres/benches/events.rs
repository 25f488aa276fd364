//! Event log throughput: appends and reads per second, on `tenure-memory` and on PostgreSQL,
//! the PostgreSQL figures each against plain SQL measured in the same run.
//!
//! `cargo bench -p tenure-postgres --bench events` (or `cargo xtask bench events`) finds its
//! server as the tests do (`TENURE_DATABASE_URL`, a container, or the local server), creates a prefix
//! of its own and drops it afterwards (its baseline tables included). It measures:
//!
//! * **appends**: events/s and appends/s with batches of 1 and of 100 events, 1 writer and 8
//!   concurrent writers, unconditional; and conditional appends of 1 event (each writer on a
//!   stream of its own, conditioned on that stream after its last append: never a conflict,
//!   but serialized by the append lock). Against, on PostgreSQL, a plain `INSERT` of the same
//!   rows (single-row for batches of 1, one multi-row `VALUES` for batches of 100) into a bare
//!   table with the same columns (primary key only), and into one with the events table's
//!   indexes too, both as large as the log. The sides of a shape (conditional appends with the
//!   batch-1 sides) are interleaved in 8 slices.
//! * **reads**: events/s reading forwards through `read_events` (with `EventCursor`) over a log
//!   seeded with `TENURE_BENCH_EVENTS` events: the whole log in batches of 100 and of 1,000,
//!   the start of the log in batches of 1 (for a time bound), whole streams (1 % of the log
//!   each) and one whole tag (10 %) in batches of 100. Against, on PostgreSQL, a plain `SELECT`
//!   of the same rows from the same table (no barrier), decoded into the same values. The
//!   sides alternate: twice each for whole-log reads, in 8 slices for the time-bounded ones.
//!
//! Memory has no baseline: its figures say what the shared log logic costs.
//!
//! Settings: `TENURE_BENCH_QUICK=1` (a short smoke run), `TENURE_BENCH_SECONDS` (seconds per
//! append measurement and per time-bounded read, default 2), `TENURE_BENCH_EVENTS` (the log the
//! reads go through, default 50,000). The default run takes about a minute.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    AppendRequest, EventCursor, EventId, EventPosition, EventQuery, EventStorage, NewEvent,
    ReadOptions, StoredEvent, Timestamp, normalize_tags,
};
use tenure_postgres::PostgresEventStorage;
use tenure_postgres::deadpool_postgres::Pool;
use tenure_postgres::deadpool_postgres::tokio_postgres::Row;
use tenure_postgres::deadpool_postgres::tokio_postgres::types::ToSql;

const WRITERS: usize = 8;
/// Slices per measurement, the sides interleaved slice by slice.
/// Whole-log reads: each slice reads the whole log.
const READ_SLICES: u32 = 2;
/// Time-bounded reads and appends.
const TIMED_SLICES: u32 = 8;
const STREAMS: u64 = 100;
const CUSTOMERS: u64 = 10;
const TYPES: [&str; 3] = ["OrderPlaced", "OrderPaid", "OrderShipped"];
const SEED_BATCH: usize = 1_000;
const TAG: &str = "customer:3";

/// Event `n`: stream `order-{n % 100}`, one of three types, a ~140-byte JSON payload, tags
/// `customer:{n % 10}` and `region:{n % 3}`.
fn event(n: u64) -> NewEvent {
    NewEvent::new(
        format!("order-{}", n % STREAMS),
        TYPES[(n % 3) as usize],
        json!({
            "order": n,
            "customer": n % CUSTOMERS,
            "amount_cents": 1_999 + n % 5_000,
            "currency": "EUR",
            "lines": [{"sku": format!("SKU-{:05}", n % 9_973), "qty": 1 + n % 4}],
            "note": "leave the parcel at the door",
        }),
    )
    .tagged(format!("customer:{}", n % CUSTOMERS))
    .tagged(format!("region:{}", n % 3))
}

struct Settings {
    seconds: f64,
    events: usize,
}

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var_os("TENURE_BENCH_QUICK").is_some();
        let number = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| *v > 0.0)
                .unwrap_or(default)
        };
        Settings {
            seconds: number("TENURE_BENCH_SECONDS", if quick { 0.3 } else { 2.0 }),
            events: number(
                "TENURE_BENCH_EVENTS",
                if quick { 10_000.0 } else { 50_000.0 },
            ) as usize,
        }
    }
}

/// Calls, events, and the time they took.
#[derive(Clone, Copy, Default)]
struct Rate {
    calls: u64,
    events: u64,
    secs: f64,
}

impl Rate {
    fn add(&mut self, other: Rate) {
        self.calls += other.calls;
        self.events += other.events;
        self.secs += other.secs;
    }

    fn calls_per_s(&self) -> f64 {
        self.calls as f64 / self.secs
    }

    fn events_per_s(&self) -> f64 {
        self.events as f64 / self.secs
    }
}

// ---------------------------------------------------------------------------------------------
// Appends

#[derive(Clone, Copy)]
struct AppendShape {
    batch: usize,
    writers: usize,
    conditional: bool,
}

impl AppendShape {
    fn label(self) -> String {
        let writers = if self.writers == 1 {
            "1 writer".to_owned()
        } else {
            format!("{} writers", self.writers)
        };
        if self.conditional {
            format!("conditional, batch {}, {writers}", self.batch)
        } else {
            format!("{:<11}{writers}", format!("batch {},", self.batch))
        }
    }
}

/// Where appends go.
#[derive(Clone)]
enum AppendTarget {
    Storage(Arc<dyn EventStorage>),
    /// A plain `INSERT` statement of `rows` rows.
    Insert {
        pool: Pool,
        sql: Arc<String>,
    },
}

/// One writer's request, reused for every call (only a condition's position changes).
struct WriterState {
    request: AppendRequest,
    tags: Vec<Vec<String>>,
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

fn writer_state(shape: AppendShape, writer: usize) -> WriterState {
    let base = writer as u64 * 1_000_000;
    let mut events: Vec<NewEvent> = (0..shape.batch as u64).map(|i| event(base + i)).collect();
    let request = if shape.conditional {
        let stream = format!("cond-{}", UNIQUE.fetch_add(1, Ordering::Relaxed));
        for e in &mut events {
            e.stream.clone_from(&stream);
        }
        AppendRequest::new(events).on_condition(EventQuery::stream(stream), None)
    } else {
        AppendRequest::new(events)
    };
    let tags = request
        .events
        .iter()
        .map(|e| normalize_tags(&e.tags))
        .collect();
    WriterState { request, tags }
}

impl AppendTarget {
    async fn append(&self, state: &mut WriterState) {
        match self {
            AppendTarget::Storage(storage) => {
                let stored = storage.append(&state.request).await.unwrap();
                assert_eq!(stored.len(), state.request.events.len());
                if let Some(condition) = &mut state.request.condition {
                    condition.after = stored.last().map(|e| e.position);
                }
                black_box(stored);
            }
            AppendTarget::Insert { pool, sql } => {
                let client = pool.get().await.unwrap();
                let statement = client.prepare_cached(sql).await.unwrap();
                let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(4 * state.tags.len());
                for (e, tags) in state.request.events.iter().zip(&state.tags) {
                    params.extend([
                        &e.stream as &(dyn ToSql + Sync),
                        &e.event_type,
                        &e.payload,
                        tags,
                    ]);
                }
                let rows = client.query(&statement, &params).await.unwrap();
                assert_eq!(rows.len(), state.tags.len());
                // What the adapter decodes of its answer: position, id, instant.
                for row in &rows {
                    black_box((
                        EventPosition::new(row.get::<_, i64>(0) as u64).unwrap(),
                        EventId::parse(row.get(1)).unwrap(),
                        Timestamp::from_system_time(row.get(2)).unwrap(),
                    ));
                }
            }
        }
    }
}

/// `shape.writers` concurrent writers appending for `seconds`.
async fn append_slice(target: &AppendTarget, shape: AppendShape, seconds: f64) -> Rate {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..shape.writers)
        .map(|w| {
            let target = target.clone();
            let mut state = writer_state(shape, w);
            tokio::spawn(async move {
                let mut calls = 0u64;
                while Instant::now() < deadline {
                    target.append(&mut state).await;
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut calls = 0;
    for task in tasks {
        calls += task.await.unwrap();
    }
    Rate {
        calls,
        events: calls * shape.batch as u64,
        secs: started.elapsed().as_secs_f64(),
    }
}

fn insert_sql(table: &str, rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let b = r * 4;
            format!(
                "(${}, ${}, ${}, ${}, now(), pg_current_xact_id())",
                b + 1,
                b + 2,
                b + 3,
                b + 4
            )
        })
        .collect();
    format!(
        "INSERT INTO {table} (stream, event_type, payload, tags, recorded_at, transaction_id) \
         VALUES {} RETURNING position, event_id::text, recorded_at",
        values.join(", ")
    )
}

// ---------------------------------------------------------------------------------------------
// Reads

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadShape {
    /// The whole log (or its start, for batches of 1, within the time bound).
    All(usize),
    /// Whole streams of 1 % of the log each, one after the other, within the time bound.
    Streams,
    /// One tag's 10 % of the log.
    Tag,
}

impl ReadShape {
    const ALL: [ReadShape; 5] = [
        ReadShape::All(1),
        ReadShape::All(100),
        ReadShape::All(1_000),
        ReadShape::Streams,
        ReadShape::Tag,
    ];

    fn label(self) -> String {
        match self {
            ReadShape::All(1) => "all, batch 1 (start of log, timed)".to_owned(),
            ReadShape::All(limit) => format!("all, batch {limit} (whole log)"),
            ReadShape::Streams => "by stream (1 % each), batch 100".to_owned(),
            ReadShape::Tag => format!("by tag ({TAG}, 10 %), batch 100"),
        }
    }
}

#[derive(Clone, Copy)]
enum Filter<'a> {
    None,
    Stream(&'a str),
    Tag(&'a str),
}

impl Filter<'_> {
    fn query(self) -> EventQuery {
        match self {
            Filter::None => EventQuery::all(),
            Filter::Stream(s) => EventQuery::stream(s),
            Filter::Tag(t) => EventQuery::all().with_tag(t),
        }
    }
}

enum ReadTarget<'a> {
    Storage(&'a dyn EventStorage),
    /// A plain `SELECT` of the same rows from `<prefix>events`.
    Plain {
        pool: &'a Pool,
        prefix: &'a str,
    },
}

const PLAIN_COLUMNS: &str =
    "position, event_id::text, stream, event_type, payload, tags, recorded_at";

/// What the adapter builds from each row.
fn decode(row: &Row) -> StoredEvent {
    StoredEvent {
        position: EventPosition::new(row.get::<_, i64>(0) as u64).unwrap(),
        id: EventId::parse(row.get(1)).unwrap(),
        stream: row.get(2),
        event_type: row.get(3),
        payload: row.get(4),
        tags: row.get(5),
        recorded_at: Timestamp::from_system_time(row.get::<_, SystemTime>(6)).unwrap(),
    }
}

impl ReadTarget<'_> {
    /// Reads `filter`'s events forwards in batches of `limit` until the end (or the deadline).
    async fn read_through(
        &self,
        filter: Filter<'_>,
        limit: usize,
        deadline: Option<Instant>,
    ) -> (u64, u64) {
        let (mut calls, mut events) = (0u64, 0u64);
        let past = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
        match self {
            ReadTarget::Storage(storage) => {
                let options = ReadOptions::forwards().with_limit(limit);
                let mut cursor = EventCursor::new(*storage, filter.query(), options);
                loop {
                    calls += 1;
                    let Some(batch) = cursor.next_batch().await.unwrap() else {
                        break;
                    };
                    events += batch.len() as u64;
                    black_box(batch);
                    if past(deadline) {
                        break;
                    }
                }
            }
            ReadTarget::Plain { pool, prefix } => {
                let condition = match filter {
                    Filter::None => "",
                    Filter::Stream(_) => " AND stream = $3",
                    Filter::Tag(_) => " AND tags @> $3",
                };
                let sql = format!(
                    "SELECT {PLAIN_COLUMNS} FROM {prefix}events \
                      WHERE position > $1{condition} ORDER BY position LIMIT $2"
                );
                let limit = limit as i64;
                let tags: Vec<&str> = match filter {
                    Filter::Tag(t) => vec![t],
                    _ => Vec::new(),
                };
                let mut after = 0i64;
                loop {
                    calls += 1;
                    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after, &limit];
                    match &filter {
                        Filter::None => {}
                        Filter::Stream(s) => params.push(s),
                        Filter::Tag(_) => params.push(&tags),
                    }
                    let client = pool.get().await.unwrap();
                    let statement = client.prepare_cached(&sql).await.unwrap();
                    let rows = client.query(&statement, &params).await.unwrap();
                    drop(client);
                    let batch: Vec<StoredEvent> = rows.iter().map(decode).collect();
                    events += batch.len() as u64;
                    let full = batch.len() as i64 == limit;
                    if let Some(last) = batch.last() {
                        after = last.position.get_i64();
                    }
                    black_box(batch);
                    if !full || past(deadline) {
                        break;
                    }
                }
            }
        }
        (calls, events)
    }

    async fn read(&self, shape: ReadShape, seconds: f64) -> Rate {
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(seconds);
        let (calls, events) = match shape {
            ReadShape::All(1) => self.read_through(Filter::None, 1, Some(deadline)).await,
            ReadShape::All(limit) => self.read_through(Filter::None, limit, None).await,
            ReadShape::Tag => self.read_through(Filter::Tag(TAG), 100, None).await,
            ReadShape::Streams => {
                let (mut calls, mut events) = (0, 0);
                for s in 0..STREAMS {
                    let stream = format!("order-{s}");
                    let (c, e) = self.read_through(Filter::Stream(&stream), 100, None).await;
                    calls += c;
                    events += e;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                (calls, events)
            }
        };
        Rate {
            calls,
            events,
            secs: started.elapsed().as_secs_f64(),
        }
    }
}

// ---------------------------------------------------------------------------------------------

async fn seed(storage: &dyn EventStorage, count: usize) -> Duration {
    let started = Instant::now();
    let mut n = 0u64;
    while (n as usize) < count {
        let size = SEED_BATCH.min(count - n as usize) as u64;
        let events = (n..n + size).map(event).collect();
        storage.append(&AppendRequest::new(events)).await.unwrap();
        n += size;
    }
    started.elapsed()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}x", a / b)
}

fn main() {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, guard) = support::server_and_prefix();
    let prefix = guard.prefix().to_owned();
    let run_started = Instant::now();
    let load_before = load_average();
    runtime.block_on(async {
        // One pool for the adapter and the baselines: the same client code path.
        let pool = support::application_pool(&server.url, WRITERS);
        let pg = PostgresEventStorage::builder()
            .pool(pool.clone())
            .prefix(&prefix)
            .build()
            .await
            .unwrap();
        let setup = server.connect().await.unwrap();
        let show = |name: &'static str| {
            let setup = &setup;
            async move {
                setup
                    .query_one(&format!("SHOW {name}"), &[])
                    .await
                    .unwrap()
                    .get::<_, String>(0)
            }
        };
        println!(
            "events: PostgreSQL {} at {}, synchronous_commit={}, fsync={}; {} cores, load average {}",
            show("server_version").await,
            server.redacted_url(),
            show("synchronous_commit").await,
            show("fsync").await,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_before
        );
        println!(
            "events: ~140-byte JSON payloads, 2 tags, {STREAMS} streams; reads over a log of {} events; \
             {} s per append measurement ({TIMED_SLICES} interleaved slices)",
            settings.events, settings.seconds
        );

        // The reads' log, on both backends.
        let memory = MemoryEventStorage::new();
        let memory_seed = seed(&memory, settings.events).await;
        let pg_seed = seed(&pg, settings.events).await;
        eprintln!(
            "events: seeded {} events in batches of {SEED_BATCH}: memory {:.2} s, PostgreSQL {:.2} s",
            settings.events,
            memory_seed.as_secs_f64(),
            pg_seed.as_secs_f64()
        );
        // Stable plans, hint bits set, visibility map: as a table autovacuum has visited.
        setup
            .batch_execute(&format!("VACUUM ANALYZE {prefix}events"))
            .await
            .unwrap();
        // The barrier: wait until the whole log is visible (a transaction of another session
        // that began before the seeding ended would hide it).
        let last = settings.events as u64;
        let waiting = Instant::now();
        loop {
            let newest = pg
                .read_events(&EventQuery::all(), ReadOptions::backwards().with_limit(1))
                .await
                .unwrap();
            if newest.first().map(|e| e.position.get()) == Some(last) {
                break;
            }
            if waiting.elapsed() > Duration::from_secs(30) {
                eprintln!("events: the barrier still hides the end of the log after 30 s");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // Reads: memory, then PostgreSQL interleaved with its plain SELECT.
        eprintln!("events: reads");
        let read_secs = settings.seconds;
        let mut memory_reads = Vec::new();
        for shape in ReadShape::ALL {
            memory_reads.push(ReadTarget::Storage(&memory).read(shape, read_secs / 2.0).await);
        }
        let adapter = ReadTarget::Storage(&pg);
        let plain = ReadTarget::Plain {
            pool: &pool,
            prefix: &prefix,
        };
        // Warm the statements and the buffers.
        for target in [&adapter, &plain] {
            target.read(ReadShape::All(1_000), 0.0).await;
        }
        let mut pg_reads = Vec::new();
        for shape in ReadShape::ALL {
            let mut sides = [Rate::default(); 2];
            // Whole-log reads whole in every slice; the others within the time bound.
            let slices = match shape {
                ReadShape::All(1) | ReadShape::Streams => TIMED_SLICES,
                _ => READ_SLICES,
            };
            let secs = read_secs / f64::from(slices);
            for _ in 0..slices {
                sides[0].add(adapter.read(shape, secs).await);
                sides[1].add(plain.read(shape, secs).await);
            }
            pg_reads.push(sides);
        }
        memory.close().await.unwrap();
        drop(memory);

        // Appends. The baseline tables: same columns, as large as the log; one with the
        // primary key only, one with the events table's indexes too.
        eprintln!("events: appends");
        for (table, indexes) in [("bare", false), ("indexed", true)] {
            let t = format!("{prefix}{table}");
            setup
                .batch_execute(&format!(
                    "CREATE TABLE {t} ( \
                         position       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
                         event_id       uuid NOT NULL DEFAULT gen_random_uuid(), \
                         stream         text COLLATE \"C\" NOT NULL, \
                         event_type     text COLLATE \"C\" NOT NULL, \
                         payload        jsonb NOT NULL, \
                         tags           text[] COLLATE \"C\" NOT NULL, \
                         recorded_at    timestamptz NOT NULL, \
                         transaction_id xid8 NOT NULL); \
                     INSERT INTO {t} (stream, event_type, payload, tags, recorded_at, transaction_id) \
                     SELECT stream, event_type, payload, tags, recorded_at, transaction_id \
                       FROM {prefix}events ORDER BY position;"
                ))
                .await
                .unwrap();
            if indexes {
                setup
                    .batch_execute(&format!(
                        "CREATE INDEX ON {t} (stream, position); \
                         CREATE INDEX ON {t} (event_type, position); \
                         CREATE INDEX ON {t} USING gin (tags) WITH (fastupdate = off);"
                    ))
                    .await
                    .unwrap();
            }
            setup
                .batch_execute(&format!("VACUUM ANALYZE {t}"))
                .await
                .unwrap();
        }
        let pg_target = AppendTarget::Storage(Arc::new(pg.clone()));
        let insert = |table: &str, rows: usize| AppendTarget::Insert {
            pool: pool.clone(),
            sql: Arc::new(insert_sql(&format!("{prefix}{table}"), rows)),
        };
        let slice = settings.seconds / f64::from(TIMED_SLICES);
        // Warm every connection's statements.
        for batch in [1, 100] {
            let shape = AppendShape {
                batch,
                writers: WRITERS,
                conditional: false,
            };
            for target in [&pg_target, &insert("bare", batch), &insert("indexed", batch)] {
                append_slice(target, shape, 0.2).await;
            }
        }
        // One row per shape: memory, the adapter, the bare INSERT, the indexed INSERT. A
        // conditional row's INSERTs are the batch-1 ones of as many writers, measured
        // interleaved with it.
        let mut rows: Vec<(AppendShape, [Rate; 4])> = Vec::new();
        let mut conditional_rows = Vec::new();
        for (batch, writers) in [(1, 1), (100, 1), (1, WRITERS), (100, WRITERS)] {
            let plain = AppendShape {
                batch,
                writers,
                conditional: false,
            };
            let conditional = AppendShape {
                conditional: true,
                ..plain
            };
            let mut shapes = vec![plain];
            let mut sides = vec![
                (pg_target.clone(), plain),
                (insert("bare", batch), plain),
                (insert("indexed", batch), plain),
            ];
            if batch == 1 {
                shapes.push(conditional);
                sides.push((pg_target.clone(), conditional));
            }
            let mut memory_rates = vec![Rate::default(); shapes.len()];
            let mut pg_rates = vec![Rate::default(); sides.len()];
            for _ in 0..TIMED_SLICES {
                for (rate, shape) in memory_rates.iter_mut().zip(&shapes) {
                    // A fresh memory log per slice, so that memory use stays bounded.
                    let fresh = AppendTarget::Storage(Arc::new(MemoryEventStorage::new()));
                    rate.add(append_slice(&fresh, *shape, slice / 4.0).await);
                }
                for (rate, (target, shape)) in pg_rates.iter_mut().zip(&sides) {
                    rate.add(append_slice(target, *shape, slice).await);
                }
            }
            rows.push((
                plain,
                [memory_rates[0], pg_rates[0], pg_rates[1], pg_rates[2]],
            ));
            if batch == 1 {
                conditional_rows.push((
                    conditional,
                    [memory_rates[1], pg_rates[3], pg_rates[1], pg_rates[2]],
                ));
            }
        }
        let unconditional_batch_1: Vec<Rate> = rows
            .iter()
            .filter(|(shape, _)| shape.batch == 1)
            .map(|(_, rates)| rates[1])
            .collect();
        rows.extend(conditional_rows);

        // The tables.
        println!();
        println!(
            "{:<34} {:>10} {:>10} {:>14} {:>7} {:>14} {:>7}",
            "PostgreSQL appends", "appends/s", "events/s", "bare INSERT/s", "ratio",
            "indexed INS/s", "ratio"
        );
        for (shape, [_, a, bare, indexed]) in &rows {
            println!(
                "{:<34} {:>10.0} {:>10.0} {:>14.0} {:>7} {:>14.0} {:>7}",
                shape.label(),
                a.calls_per_s(),
                a.events_per_s(),
                bare.events_per_s(),
                ratio(a.events_per_s(), bare.events_per_s()),
                indexed.events_per_s(),
                ratio(a.events_per_s(), indexed.events_per_s()),
            );
        }
        let conditional: Vec<Rate> = rows
            .iter()
            .filter(|(shape, _)| shape.conditional)
            .map(|(_, rates)| rates[1])
            .collect();
        println!(
            "(conditional rows: against the batch-1 INSERTs of as many writers; \
             conditional / unconditional adapter: {} with 1 writer, {} with {WRITERS})",
            ratio(
                conditional[0].events_per_s(),
                unconditional_batch_1[0].events_per_s()
            ),
            ratio(
                conditional[1].events_per_s(),
                unconditional_batch_1[1].events_per_s()
            ),
        );

        println!();
        println!(
            "{:<40} {:>9} {:>10} {:>9} {:>9} {:>14} {:>7}",
            "PostgreSQL reads", "reads/s", "events/s", "events", "reads", "plain SELECT/s", "ratio"
        );
        for (shape, [a, plain]) in ReadShape::ALL.iter().zip(&pg_reads) {
            println!(
                "{:<40} {:>9.0} {:>10.0} {:>9} {:>9} {:>14.0} {:>7}",
                shape.label(),
                a.calls_per_s(),
                a.events_per_s(),
                a.events,
                a.calls,
                plain.events_per_s(),
                ratio(a.events_per_s(), plain.events_per_s()),
            );
        }

        println!();
        println!("{:<34} {:>10} {:>10}", "memory appends", "appends/s", "events/s");
        for (shape, [rate, ..]) in &rows {
            println!(
                "{:<34} {:>10.0} {:>10.0}",
                shape.label(),
                rate.calls_per_s(),
                rate.events_per_s()
            );
        }
        println!();
        println!(
            "{:<40} {:>9} {:>10} {:>9} {:>9}",
            "memory reads", "reads/s", "events/s", "events", "reads"
        );
        for (shape, rate) in ReadShape::ALL.iter().zip(&memory_reads) {
            println!(
                "{:<40} {:>9.0} {:>10.0} {:>9} {:>9}",
                shape.label(),
                rate.calls_per_s(),
                rate.events_per_s(),
                rate.events,
                rate.calls
            );
        }
        // Every whole-log read must have returned the whole log (the barrier hides nothing
        // once the seeding is visible).
        let whole = settings.events as u64;
        for (label, reads, expected) in [
            ("PostgreSQL", &pg_reads[1][0], whole * u64::from(READ_SLICES)),
            ("plain SELECT", &pg_reads[1][1], whole * u64::from(READ_SLICES)),
            ("memory", &memory_reads[1], whole),
        ] {
            if reads.events != expected {
                println!(
                    "WARNING: {label} read {} events, expected {expected}",
                    reads.events
                );
            }
        }
        pg.close().await.unwrap();
    });
    drop(guard);
    println!();
    println!(
        "events: {:.0} s in all; load average before {load_before}, after {}",
        run_started.elapsed().as_secs_f64(),
        load_average()
    );
}
