//! The event-log and bookmark scenarios.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;
use tenure_ports::{
    AppendRequest, Capability, EventCursor, EventPosition, EventQuery, EventStorage,
    EventStorageError, Fence, LeaseName, LeaseRequest, MAX_PAYLOAD_DEPTH, MAX_READ_LIMIT, MAX_TAGS,
    NewEvent, ReadOptions, StoredEvent,
};

use crate::check::{Failure, ensure, ensure_eq};
use crate::{Scenario, ScenarioFuture, Subject};

type Outcome = Result<(), Failure>;

const EVENTS: &[Capability] = &[Capability::Events];
const BOOKMARKS: &[Capability] = &[Capability::Events, Capability::Bookmarks];
const FENCED: &[Capability] = &[
    Capability::Events,
    Capability::Bookmarks,
    Capability::Lease,
    Capability::FencedBookmarks,
];

macro_rules! scenarios {
    ($($prefix:literal $needs:ident: $name:ident),* $(,)?) => {
        pub(crate) static SCENARIOS: &[Scenario] = &[
            $(Scenario {
                name: concat!($prefix, stringify!($name)),
                needs: $needs,
                run: {
                    fn run(subject: &Subject) -> ScenarioFuture<'_> {
                        Box::pin($name(subject))
                    }
                    run
                },
            },)*
        ];
    };
}

scenarios![
    "events_" EVENTS: append_assigns_positions,
    "events_" EVENTS: read_filters,
    "events_" EVENTS: read_direction_and_limits,
    "events_" EVENTS: cursor_pages_through_log,
    "events_" EVENTS: condition_conflict,
    "events_" EVENTS: idempotent_append,
    "events_" EVENTS: payloads_within_the_limits_round_trip,
    "events_" EVENTS: invalid_append_stores_nothing,
    "events_" EVENTS: concurrent_conditional_appends,
    "events_" EVENTS: concurrent_appends_keep_order,
    "bookmarks_" BOOKMARKS: place_move_remove,
    "bookmarks_" BOOKMARKS: listed_by_reader,
    "bookmarks_" BOOKMARKS: must_point_at_stored_event,
    "bookmarks_" FENCED: fenced_refuse_an_older_tenure,
];

fn event(stream: &str, event_type: &str, n: u64) -> NewEvent {
    NewEvent::new(stream, event_type, json!({ "n": n }))
}

fn position(n: u64) -> Result<EventPosition, Failure> {
    EventPosition::new(n).ok_or_else(|| Failure::new(format!("{n} is not a valid position")))
}

async fn append(s: &Subject, events: Vec<NewEvent>) -> Result<Vec<StoredEvent>, Failure> {
    let count = events.len();
    let stored = s.storage.append(&AppendRequest::new(events)).await?;
    ensure_eq!(stored.len(), count, "events returned by an append");
    Ok(stored)
}

async fn read_all(s: &Subject, query: &EventQuery) -> Result<Vec<StoredEvent>, Failure> {
    let mut all = Vec::new();
    let storage: &dyn EventStorage = s.storage.as_ref();
    let mut cursor = EventCursor::new(storage, query.clone(), ReadOptions::forwards());
    while let Some(batch) = cursor.next_batch().await? {
        all.extend(batch);
    }
    Ok(all)
}

fn positions(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|e| e.position.get()).collect()
}

fn payload_ns(events: &[StoredEvent]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e.payload["n"].as_u64().unwrap_or(u64::MAX))
        .collect()
}

async fn append_assigns_positions(s: &Subject) -> Outcome {
    let batch = vec![
        event("order-1", "OrderPlaced", 1)
            .tagged("customer:7")
            .tagged("customer:7"),
        event("order-1", "OrderPaid", 2).tagged("b").tagged("a"),
        event("order-2", "OrderPlaced", 3),
    ];
    let stored = append(s, batch).await?;
    let first = stored[0].position.get();
    ensure_eq!(
        positions(&stored),
        vec![first, first + 1, first + 2],
        "positions of one batch"
    );
    let ids: HashSet<_> = stored.iter().map(|e| e.id).collect();
    ensure_eq!(ids.len(), 3, "distinct ids");
    ensure!(
        stored
            .iter()
            .all(|e| e.recorded_at == stored[0].recorded_at),
        "one batch is stored at one instant: {stored:?}"
    );
    ensure_eq!(
        stored[0].tags,
        vec!["customer:7".to_owned()],
        "tags, deduplicated"
    );
    ensure_eq!(
        stored[1].tags,
        vec!["a".to_owned(), "b".to_owned()],
        "tags, sorted"
    );
    ensure_eq!(stored[1].payload, json!({"n": 2}), "the payload");

    let more = append(s, vec![event("order-3", "OrderPlaced", 4)]).await?;
    ensure!(
        more[0].position > stored[2].position,
        "a later append got a smaller position: {} after {}",
        more[0].position,
        stored[2].position
    );
    let all = read_all(s, &EventQuery::all()).await?;
    ensure_eq!(payload_ns(&all), vec![1, 2, 3, 4], "the log, read forwards");
    ensure_eq!(&all[..3], &stored[..], "the events as read back");
    Ok(())
}

async fn read_filters(s: &Subject) -> Outcome {
    append(
        s,
        vec![
            event("a", "X", 1).tagged("t1"),
            event("b", "X", 2).tagged("t1").tagged("t2"),
            event("a", "Y", 3).tagged("t2"),
            event("c", "Z", 4),
        ],
    )
    .await?;
    let cases = [
        (EventQuery::stream("a"), vec![1, 3], "stream a"),
        (
            EventQuery {
                streams: vec!["a".into(), "c".into()],
                ..EventQuery::default()
            },
            vec![1, 3, 4],
            "streams a and c",
        ),
        (EventQuery::all().of_type("X"), vec![1, 2], "type X"),
        (
            EventQuery::all().of_type("X").of_type("Z"),
            vec![1, 2, 4],
            "types X or Z",
        ),
        (EventQuery::all().with_tag("t1"), vec![1, 2], "tag t1"),
        (
            EventQuery::all().with_tag("t1").with_tag("t2"),
            vec![2],
            "tags t1 and t2",
        ),
        (
            EventQuery::stream("a").with_tag("t2"),
            vec![3],
            "stream a with tag t2",
        ),
        (EventQuery::stream("nowhere"), vec![], "an unknown stream"),
    ];
    for (query, expected, what) in cases {
        let got = read_all(s, &query).await?;
        ensure_eq!(payload_ns(&got), expected, "{what}");
    }
    Ok(())
}

async fn read_direction_and_limits(s: &Subject) -> Outcome {
    let stored = append(s, (1..=10).map(|n| event("s", "T", n)).collect()).await?;
    let p = |i: usize| Some(stored[i].position);
    let all = EventQuery::all();
    let read = |options: ReadOptions| {
        let all = all.clone();
        async move { s.storage.read_events(&all, options).await }
    };
    let got = read(ReadOptions::forwards().with_limit(3)).await?;
    ensure_eq!(payload_ns(&got), vec![1, 2, 3], "forwards, limit 3");
    let got = read(ReadOptions::forwards().starting_after(p(2)).with_limit(3)).await?;
    ensure_eq!(
        payload_ns(&got),
        vec![4, 5, 6],
        "forwards after the third, limit 3"
    );
    let got = read(ReadOptions::backwards().with_limit(3)).await?;
    ensure_eq!(
        payload_ns(&got),
        vec![10, 9, 8],
        "backwards from the end, limit 3"
    );
    let got = read(ReadOptions::backwards().starting_after(p(7)).with_limit(3)).await?;
    ensure_eq!(
        payload_ns(&got),
        vec![7, 6, 5],
        "backwards before the eighth, limit 3"
    );
    let got = read(ReadOptions::forwards().starting_after(p(9))).await?;
    ensure!(got.is_empty(), "forwards after the last: {got:?}");
    let got = read(ReadOptions::backwards().starting_after(p(0))).await?;
    ensure!(got.is_empty(), "backwards before the first: {got:?}");

    for limit in [0, MAX_READ_LIMIT + 1] {
        match read(ReadOptions::forwards().with_limit(limit)).await {
            Err(EventStorageError::InvalidRequest(err)) => {
                ensure_eq!(
                    err.field.as_str(),
                    "limit",
                    "the field named for limit {limit}"
                );
            }
            other => {
                return Err(Failure::new(format!(
                    "a read with limit {limit}: expected InvalidRequest, got {other:?}"
                )));
            }
        }
    }
    Ok(())
}

async fn cursor_pages_through_log(s: &Subject) -> Outcome {
    append(s, (1..=25).map(|n| event("s", "T", n)).collect()).await?;
    let storage: &dyn EventStorage = s.storage.as_ref();
    let mut cursor = EventCursor::new(
        storage,
        EventQuery::all(),
        ReadOptions::forwards().with_limit(7),
    );
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    while let Some(batch) = cursor.next_batch().await? {
        sizes.push(batch.len());
        seen.extend(batch);
    }
    ensure_eq!(sizes, vec![7, 7, 7, 4], "batch sizes");
    ensure_eq!(
        payload_ns(&seen),
        (1..=25).collect::<Vec<_>>(),
        "every event, in order"
    );
    Ok(())
}

async fn condition_conflict(s: &Subject) -> Outcome {
    let tagged = EventQuery::all().with_tag("account:1");
    let first = append(s, vec![event("acct", "Opened", 1).tagged("account:1")]).await?;

    // A decision that saw nothing conflicts with the event that exists.
    let conditional = AppendRequest::new(vec![event("acct", "Debited", 2).tagged("account:1")])
        .on_condition(tagged.clone(), None);
    match s.storage.append(&conditional).await {
        Err(EventStorageError::AppendConflict { conflicting }) => {
            ensure_eq!(conflicting, first[0].position, "the conflicting position");
        }
        other => {
            return Err(Failure::new(format!(
                "a condition that saw nothing: expected AppendConflict, got {other:?}"
            )));
        }
    }
    ensure_eq!(
        read_all(s, &EventQuery::all()).await?.len(),
        1,
        "events after a conflict"
    );

    // A decision that saw the latest event succeeds.
    let ok = AppendRequest::new(vec![event("acct", "Debited", 2).tagged("account:1")])
        .on_condition(tagged.clone(), Some(first[0].position));
    let second = s.storage.append(&ok).await?;

    // Events outside the query never conflict.
    append(s, vec![event("other", "Noise", 3).tagged("account:2")]).await?;
    let unrelated = AppendRequest::new(vec![event("acct", "Debited", 4).tagged("account:1")])
        .on_condition(tagged.clone(), Some(second[0].position));
    s.storage.append(&unrelated).await?;

    // The same stale decision now conflicts with the newer event.
    match s.storage.append(&ok).await {
        Err(EventStorageError::AppendConflict { conflicting }) => {
            ensure_eq!(
                conflicting,
                second[0].position,
                "the oldest conflicting position"
            );
        }
        other => {
            return Err(Failure::new(format!(
                "a stale condition: expected AppendConflict, got {other:?}"
            )));
        }
    }
    ensure_eq!(
        payload_ns(&read_all(s, &EventQuery::all()).await?),
        vec![1, 2, 3, 4],
        "the log"
    );
    Ok(())
}

async fn idempotent_append(s: &Subject) -> Outcome {
    let request =
        AppendRequest::new(vec![event("s", "T", 1), event("s", "T", 2)]).idempotent("k-1");
    let first = s.storage.append(&request).await?;
    append(s, vec![event("s", "T", 3)]).await?;
    let again = s.storage.append(&request).await?;
    ensure_eq!(&again, &first, "the events returned for a repeated key");
    let different = AppendRequest::new(vec![event("s", "T", 99)]).idempotent("k-1");
    let replayed = s.storage.append(&different).await?;
    ensure_eq!(
        &replayed,
        &first,
        "a key names the batch stored under it, whatever is sent"
    );
    ensure_eq!(
        payload_ns(&read_all(s, &EventQuery::all()).await?),
        vec![1, 2, 3],
        "the log after repeated keys"
    );
    Ok(())
}

/// `depth` arrays and objects, alternating, around a string.
fn nested(depth: usize) -> serde_json::Value {
    (0..depth).fold(json!("core"), |inner, level| {
        if level % 2 == 0 {
            json!([inner, level])
        } else {
            json!({ "level": level, "inner": inner })
        }
    })
}

/// Whatever validation accepts, every backend stores and reads back unchanged: nesting at
/// [`MAX_PAYLOAD_DEPTH`], numbers at the ends of their ranges, text that JSON escapes.
async fn payloads_within_the_limits_round_trip(s: &Subject) -> Outcome {
    let payloads = [
        nested(MAX_PAYLOAD_DEPTH),
        json!({
            "u64_max": u64::MAX,
            "i64_min": i64::MIN,
            "big": 1e300,
            "tiny": -1e-300,
            "tenth": 0.1,
            "negative_zero": -0.0,
            "integral_float": 2.0,
        }),
        json!({
            "multibyte": "Grüße, 世界, 🦀",
            "escapes": "quote \" backslash \\ tab \t newline \n del \u{7f} sep \u{2028}",
            "controls": "\u{1}\u{1f}",
            "": "",
            "nested empties": [[], {}, [{}], {"a": []}],
        }),
        json!(null),
        json!("a bare string"),
        json!([true, false, null]),
    ];
    let events: Vec<NewEvent> = payloads
        .iter()
        .map(|payload| NewEvent::new("limits", "Limit", payload.clone()))
        .collect();
    let stored = append(s, events).await?;
    let read = read_all(s, &EventQuery::stream("limits")).await?;
    ensure_eq!(read.len(), payloads.len(), "events read back");
    for ((payload, stored), read) in payloads.iter().zip(&stored).zip(&read) {
        ensure_eq!(&stored.payload, payload, "the payload as acknowledged");
        ensure_eq!(&read.payload, payload, "the payload as read back");
    }
    Ok(())
}

async fn invalid_append_stores_nothing(s: &Subject) -> Outcome {
    let ok = || event("s", "T", 1);
    let too_many_tags = (0..=MAX_TAGS).fold(ok(), |e, n| e.tagged(format!("t{n}")));
    let cases: Vec<(&str, AppendRequest, &str)> = vec![
        ("no events", AppendRequest::new(vec![]), "events"),
        (
            "an empty stream",
            AppendRequest::new(vec![event("", "T", 1)]),
            "stream",
        ),
        (
            "a NUL in the stream",
            AppendRequest::new(vec![event("a\0", "T", 1)]),
            "stream",
        ),
        (
            "an empty type",
            AppendRequest::new(vec![event("s", "", 1)]),
            "event_type",
        ),
        (
            "a 256-byte type",
            AppendRequest::new(vec![event("s", &"t".repeat(256), 1)]),
            "event_type",
        ),
        (
            "an empty tag",
            AppendRequest::new(vec![ok().tagged("")]),
            "tag",
        ),
        (
            "too many tags",
            AppendRequest::new(vec![too_many_tags]),
            "tag",
        ),
        (
            "an empty key",
            AppendRequest::new(vec![ok()]).idempotent(""),
            "idempotency_key",
        ),
        (
            "a bad condition",
            AppendRequest::new(vec![ok()]).on_condition(EventQuery::stream("\u{7}"), None),
            "stream",
        ),
        (
            "a NUL in the payload",
            AppendRequest::new(vec![NewEvent::new("s", "T", json!({"text": "a\u{0}b"}))]),
            "payload",
        ),
        (
            "a payload nested deeper than MAX_PAYLOAD_DEPTH",
            AppendRequest::new(vec![NewEvent::new("s", "T", nested(MAX_PAYLOAD_DEPTH + 1))]),
            "payload",
        ),
        (
            "a bad event after good ones",
            AppendRequest::new(vec![ok(), ok(), event("s", "\n", 3)]),
            "event_type",
        ),
    ];
    for (what, request, field) in cases {
        match s.storage.append(&request).await {
            Err(EventStorageError::InvalidRequest(err)) => {
                ensure_eq!(err.field.as_str(), field, "the field named for {what}");
            }
            other => {
                return Err(Failure::new(format!(
                    "{what}: expected InvalidRequest, got {other:?}"
                )));
            }
        }
    }
    match s
        .storage
        .read_events(&EventQuery::all().with_tag(""), ReadOptions::forwards())
        .await
    {
        Err(EventStorageError::InvalidRequest(err)) => {
            ensure_eq!(err.field.as_str(), "tag", "a read with an empty tag");
        }
        other => {
            return Err(Failure::new(format!(
                "a read with an empty tag: expected InvalidRequest, got {other:?}"
            )));
        }
    }
    let all = read_all(s, &EventQuery::all()).await?;
    ensure!(all.is_empty(), "invalid appends stored events: {all:?}");
    Ok(())
}

/// Eight writers each decide on an empty boundary and append on that condition at once:
/// exactly one may succeed.
async fn concurrent_conditional_appends(s: &Subject) -> Outcome {
    let storage: Arc<dyn EventStorage> = Arc::clone(&s.storage);
    let mut tasks = Vec::new();
    for n in 0..8u64 {
        let storage = Arc::clone(&storage);
        tasks.push(tokio::spawn(async move {
            let request =
                AppendRequest::new(vec![event("seat-12", "Reserved", n).tagged("seat:12")])
                    .on_condition(EventQuery::all().with_tag("seat:12"), None);
            storage.append(&request).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await {
            Ok(Ok(_)) => won += 1,
            Ok(Err(EventStorageError::AppendConflict { .. })) => {}
            Ok(Err(other)) => return Err(other.into()),
            Err(join) => return Err(Failure::new(format!("a writer failed: {join}"))),
        }
    }
    ensure_eq!(won, 1, "conditional appends that succeeded on one boundary");
    ensure_eq!(
        read_all(s, &EventQuery::all()).await?.len(),
        1,
        "events stored on the boundary"
    );
    Ok(())
}

async fn concurrent_appends_keep_order(s: &Subject) -> Outcome {
    let storage: Arc<dyn EventStorage> = Arc::clone(&s.storage);
    let mut tasks = Vec::new();
    for writer in 0..8u64 {
        let storage = Arc::clone(&storage);
        tasks.push(tokio::spawn(async move {
            let mut stored = Vec::new();
            for n in 0..20u64 {
                let batch = vec![
                    event(&format!("w{writer}"), "T", n * 2),
                    event(&format!("w{writer}"), "T", n * 2 + 1),
                ];
                stored.extend(storage.append(&AppendRequest::new(batch)).await?);
            }
            Ok::<_, EventStorageError>(stored)
        }));
    }
    let mut acknowledged = Vec::new();
    for task in tasks {
        match task.await {
            Ok(result) => acknowledged.extend(result?),
            Err(join) => return Err(Failure::new(format!("a writer failed: {join}"))),
        }
    }
    let all = read_all(s, &EventQuery::all()).await?;
    ensure_eq!(all.len(), 320, "events stored by 8 writers");
    ensure!(
        all.windows(2).all(|w| w[0].position < w[1].position),
        "positions read forwards are not strictly increasing"
    );
    for writer in 0..8u64 {
        let mine = read_all(s, &EventQuery::stream(format!("w{writer}"))).await?;
        ensure_eq!(
            payload_ns(&mine),
            (0..40).collect::<Vec<_>>(),
            "writer {writer}'s events, in its order"
        );
    }
    acknowledged.sort_by_key(|e| e.position);
    ensure_eq!(
        &acknowledged,
        &all,
        "what the appends returned and what is read back"
    );
    Ok(())
}

async fn place_move_remove(s: &Subject) -> Outcome {
    let stored = append(s, (1..=3).map(|n| event("s", "T", n)).collect()).await?;
    let tags = vec!["b".to_owned(), "a".to_owned()];
    let placed = s
        .storage
        .bookmark("reader-1", stored[0].position, &tags)
        .await?;
    ensure_eq!(placed.position, stored[0].position, "the placed position");
    ensure_eq!(
        placed.tags,
        vec!["a".to_owned(), "b".to_owned()],
        "the placed tags"
    );
    let got = s.storage.get_bookmark("reader-1").await?;
    ensure_eq!(got.as_ref(), Some(&placed), "the bookmark read back");

    s.tick().await;
    let moved = s
        .storage
        .bookmark("reader-1", stored[2].position, &[])
        .await?;
    ensure_eq!(moved.position, stored[2].position, "the moved position");
    ensure!(
        moved.placed_at > placed.placed_at,
        "placed_at did not advance: {} then {}",
        placed.placed_at,
        moved.placed_at
    );
    ensure_eq!(
        s.storage.get_bookmark("reader-1").await?.as_ref(),
        Some(&moved),
        "the moved bookmark read back"
    );
    s.storage.remove_bookmark("reader-1").await?;
    ensure_eq!(
        s.storage.get_bookmark("reader-1").await?,
        None,
        "after removal"
    );
    s.storage.remove_bookmark("reader-1").await?;
    s.storage.remove_bookmark("never-placed").await?;
    ensure!(
        s.storage.get_bookmarks().await?.is_empty(),
        "bookmarks after removal"
    );
    Ok(())
}

/// A zombie's late bookmark never moves the bookmark backwards: a fenced write is refused
/// once a newer tenure has written the reader's bookmark, or merely holds the lease.
async fn fenced_refuse_an_older_tenure(s: &Subject) -> Outcome {
    let stored = append(s, (1..=3).map(|n| event("s", "T", n)).collect()).await?;
    let ttl = std::time::Duration::from_secs(30);
    let lease = "fenced-projection";
    let name = LeaseName::new(lease).map_err(|e| Failure::new(e.to_string()))?;
    let first = s
        .storage
        .request_lease(&LeaseRequest::new(lease, "zombie", 0, ttl))
        .await?;
    let zombie = Fence::new(name.clone(), first.fencing_token);
    s.storage
        .bookmark_fenced("projection", stored[0].position, &[], &zombie)
        .await?;
    // The holder is paused; its tenure ends (a release stands in for its expiry) and a
    // successor takes over and bookmarks further.
    s.storage.release_lease(lease, "zombie").await?;
    let second = s
        .storage
        .request_lease(&LeaseRequest::new(lease, "successor", 0, ttl))
        .await?;
    ensure!(
        second.fencing_token > first.fencing_token,
        "the successor's token {} is not above {}",
        second.fencing_token,
        first.fencing_token
    );
    let successor = Fence::new(name.clone(), second.fencing_token);
    s.storage
        .bookmark_fenced("projection", stored[2].position, &[], &successor)
        .await?;
    // The zombie wakes up and writes its late bookmark: refused, nothing written.
    match s
        .storage
        .bookmark_fenced("projection", stored[1].position, &[], &zombie)
        .await
    {
        Err(EventStorageError::Fenced { token, newer, .. }) => {
            ensure_eq!(token, first.fencing_token.get(), "the refused token");
            ensure_eq!(newer, second.fencing_token.get(), "the newer token named");
        }
        other => {
            return Err(Failure::new(format!(
                "a superseded tenure's bookmark: expected Fenced, got {other:?}"
            )));
        }
    }
    ensure_eq!(
        s.storage
            .get_bookmark("projection")
            .await?
            .map(|b| b.position),
        Some(stored[2].position),
        "the bookmark after the zombie's write"
    );
    // A reader the successor never wrote is still fenced by the lease's current tenure.
    match s
        .storage
        .bookmark_fenced("other-reader", stored[1].position, &[], &zombie)
        .await
    {
        Err(EventStorageError::Fenced { .. }) => {}
        other => {
            return Err(Failure::new(format!(
                "a write under a tenure that no longer holds the lease: expected Fenced, got {other:?}"
            )));
        }
    }
    ensure_eq!(
        s.storage.get_bookmark("other-reader").await?,
        None,
        "a refused write wrote nothing"
    );
    // The current tenure writes again, and an unfenced write stays possible.
    s.storage
        .bookmark_fenced("projection", stored[2].position, &[], &successor)
        .await?;
    s.storage
        .bookmark("unfenced", stored[0].position, &[])
        .await?;
    Ok(())
}

async fn listed_by_reader(s: &Subject) -> Outcome {
    let stored = append(s, (1..=2).map(|n| event("s", "T", n)).collect()).await?;
    s.storage.bookmark("zeta", stored[1].position, &[]).await?;
    s.storage
        .bookmark("alpha", stored[0].position, &["x".to_owned()])
        .await?;
    let all = s.storage.get_bookmarks().await?;
    let listed: Vec<(&str, u64)> = all
        .iter()
        .map(|b| (b.reader.as_str(), b.position.get()))
        .collect();
    ensure_eq!(
        listed,
        vec![
            ("alpha", stored[0].position.get()),
            ("zeta", stored[1].position.get())
        ],
        "bookmarks by reader"
    );
    ensure!(
        all.iter().all(|b| b.placed_at >= stored[0].recorded_at),
        "a bookmark placed before the event it points at: {all:?}"
    );
    Ok(())
}

async fn must_point_at_stored_event(s: &Subject) -> Outcome {
    let missing = position(999_999)?;
    match s.storage.bookmark("reader", missing, &[]).await {
        Err(EventStorageError::InvalidRequest(err)) => {
            ensure_eq!(err.field.as_str(), "position", "the field named");
        }
        other => {
            return Err(Failure::new(format!(
                "a bookmark on an empty log: expected InvalidRequest, got {other:?}"
            )));
        }
    }
    let stored = append(s, vec![event("s", "T", 1)]).await?;
    let beyond = position(stored[0].position.get() + 1)?;
    ensure!(
        matches!(
            s.storage.bookmark("reader", beyond, &[]).await,
            Err(EventStorageError::InvalidRequest(_))
        ),
        "a bookmark beyond the last event must be refused"
    );
    for (reader, tags) in [("", vec![]), ("r\0", vec![]), ("r", vec![String::new()])] {
        ensure!(
            matches!(
                s.storage.bookmark(reader, stored[0].position, &tags).await,
                Err(EventStorageError::InvalidRequest(_))
            ),
            "bookmark({reader:?}, tags {tags:?}) must be refused"
        );
    }
    ensure!(
        matches!(
            s.storage.get_bookmark("").await,
            Err(EventStorageError::InvalidRequest(_))
        ),
        "get_bookmark(\"\") must be refused"
    );
    ensure!(
        s.storage.get_bookmarks().await?.is_empty(),
        "refused bookmarks were stored"
    );
    Ok(())
}
