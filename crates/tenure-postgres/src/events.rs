//! The event log and the bookmarks: their SQL, and the calls themselves, on any driver.
//!
//! The counterpart of `tenure_ports::events`. As for leases, every statement is built once per
//! storage from the validated prefix, and every value travels as a bind parameter.

use std::fmt::Write as _;
use std::time::Duration;

use tenure_ports::domain::{Field, Reason, ValidationError};
use tenure_ports::{
    AppendRequest, Bookmark, Direction, EventPosition, EventQuery, EventStorageError, Fence,
    ReadOptions, StoredEvent, normalize_tags, validate_bookmark, validate_reader,
};
use tokio::time::Instant;

use crate::connection::{Checkout, Driver, Link, Param, Sql};
use crate::decode;
use crate::prefix::TablePrefix;

/// Joins one event's tags in the `p_tags` argument of `append_events_v1`: a control character,
/// which no valid tag contains.
const TAG_SEPARATOR: &str = "\u{1f}";

/// The columns of a stored event, in the order `decode::events` reads them.
const EVENT_COLUMNS: &str =
    "e.position, e.event_id::text, e.stream, e.event_type, e.payload, e.tags, e.recorded_at";

/// The statements of the event log and the bookmarks of one storage.
pub(crate) struct EventStatements {
    append: Sql,
    /// Indexed by [`read_index`].
    reads: Vec<Sql>,
    horizon_passed: Sql,
    bookmark: Sql,
    bookmark_fenced: Sql,
    fence_of: Sql,
    get_bookmark: Sql,
    remove_bookmark: Sql,
    bookmarks: Sql,
    /// The constraint whose violation means "an append with this key committed first".
    keys_constraint: String,
}

/// How a read filters on one list (streams, or event types).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ListFilter {
    /// The list is empty: no filter.
    None,
    /// One value: `column = ($n)[1]`, so that the (column, position) index returns the rows
    /// in position order and a batch reads only what it returns.
    One,
    /// Several values: `column = ANY ($n)`.
    Many,
}

impl ListFilter {
    const ALL: [ListFilter; 3] = [ListFilter::None, ListFilter::One, ListFilter::Many];

    fn of(list: &[String]) -> ListFilter {
        match list.len() {
            0 => ListFilter::None,
            1 => ListFilter::One,
            _ => ListFilter::Many,
        }
    }

    fn index(self) -> usize {
        match self {
            ListFilter::None => 0,
            ListFilter::One => 1,
            ListFilter::Many => 2,
        }
    }
}

/// Which of the 36 read statements serves a read: direction, and which filters it has.
fn read_index(direction: Direction, query: &EventQuery) -> usize {
    shape_index(
        direction == Direction::Backwards,
        ListFilter::of(&query.streams),
        ListFilter::of(&query.event_types),
        !query.tags.is_empty(),
    )
}

fn shape_index(backwards: bool, streams: ListFilter, types: ListFilter, tags: bool) -> usize {
    ((usize::from(backwards) * 3 + streams.index()) * 3 + types.index()) * 2 + usize::from(tags)
}

impl EventStatements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let p = prefix.as_str();
        let mut reads: Vec<Sql> = vec![Sql::from(""); 36];
        for backwards in [false, true] {
            for streams in ListFilter::ALL {
                for types in ListFilter::ALL {
                    for tags in [false, true] {
                        reads[shape_index(backwards, streams, types, tags)] =
                            read_sql(p, backwards, streams, types, tags).into();
                    }
                }
            }
        }
        EventStatements {
            append: format!(
                "SELECT o_outcome, o_position, o_event_id::text, o_recorded_at, o_stream, \
                        o_event_type, o_payload, o_tags \
                   FROM {p}append_events_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            )
            .into(),
            reads,
            horizon_passed: "SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8"
                .into(),
            // One statement: the event must exist (it can never be deleted), and nothing is
            // written when it does not.
            bookmark: format!(
                "INSERT INTO {p}bookmarks AS b (reader, position, tags, placed_at) \
                 SELECT $1, $2, $3, clock_timestamp() \
                  WHERE EXISTS (SELECT FROM {p}events e WHERE e.position = $2) \
                 ON CONFLICT (reader) DO UPDATE \
                    SET position = excluded.position, tags = excluded.tags, \
                        placed_at = excluded.placed_at \
                 RETURNING b.placed_at"
            )
            .into(),
            // One statement, so one round trip: the lease's row is locked (FOR SHARE) so that
            // no acquisition commits between the check and the write, and the upsert's own row
            // lock re-checks the reader's fence against a concurrent fenced write (the `WHERE`
            // of `DO UPDATE` sees the latest row). `placed_at` is read once that row lock is
            // held, so that one reader's fenced writes are placed in the order they were
            // decided on. It answers the placed instant (NULL when
            // nothing was written), the newest token seen, and whether the event exists, so
            // that a refusal is told apart from a missing event.
            bookmark_fenced: format!(
                "WITH lease AS ( \
                     SELECT fencing_token FROM {p}leases WHERE lease_name = $4 FOR SHARE), \
                 newer AS ( \
                     SELECT GREATEST((SELECT fencing_token FROM lease), \
                                     (SELECT fence_token FROM {p}bookmarks \
                                       WHERE reader = $1)) AS token), \
                 placed AS ( \
                     INSERT INTO {p}bookmarks AS b \
                            (reader, position, tags, placed_at, fence_token) \
                     SELECT $1, $2, $3, clock_timestamp(), $5 \
                      WHERE EXISTS (SELECT FROM {p}events e WHERE e.position = $2) \
                        AND COALESCE((SELECT token FROM newer), 0) <= $5 \
                     ON CONFLICT (reader) DO UPDATE \
                        SET position = excluded.position, tags = excluded.tags, \
                            placed_at = clock_timestamp(), \
                            fence_token = excluded.fence_token \
                      WHERE b.fence_token IS NULL OR b.fence_token <= excluded.fence_token \
                     RETURNING b.placed_at) \
                 SELECT (SELECT placed_at FROM placed), (SELECT token FROM newer), \
                        EXISTS (SELECT FROM {p}events e WHERE e.position = $2)"
            )
            .into(),
            fence_of: format!("SELECT fence_token FROM {p}bookmarks WHERE reader = $1").into(),
            get_bookmark: format!(
                "SELECT reader, position, tags, placed_at FROM {p}bookmarks WHERE reader = $1"
            )
            .into(),
            remove_bookmark: format!("DELETE FROM {p}bookmarks WHERE reader = $1").into(),
            bookmarks: format!(
                "SELECT reader, position, tags, placed_at FROM {p}bookmarks ORDER BY reader"
            )
            .into(),
            keys_constraint: format!("{p}event_keys_pkey"),
        }
    }

    /// The read statement for `query` in `direction`. Its parameters: `$1` the bound (see
    /// [`read_bound`]), `$2` the limit, then the streams, types and tags the query has, in
    /// that order.
    fn read(&self, direction: Direction, query: &EventQuery) -> &Sql {
        &self.reads[read_index(direction, query)]
    }
}

/// One read statement. The CTE reads, once, the barrier (`pg_snapshot_xmin` of the statement's
/// own snapshot) and the transaction id of the newest committed event; the events returned are
/// those written by transactions below the barrier. The outer join yields one row (with NULL
/// event columns) when no event qualifies, so that the barrier information always arrives.
fn read_sql(
    p: &str,
    backwards: bool,
    streams: ListFilter,
    types: ListFilter,
    tags: bool,
) -> String {
    let mut filters = String::new();
    let mut n = 3;
    for (filter, column) in [(streams, "stream"), (types, "event_type")] {
        match filter {
            ListFilter::None => continue,
            ListFilter::One => {
                let _ = write!(filters, " AND e.{column} = (${n}::text[])[1]");
            }
            ListFilter::Many => {
                let _ = write!(filters, " AND e.{column} = ANY (${n})");
            }
        }
        n += 1;
    }
    if tags {
        let _ = write!(filters, " AND e.tags @> ${n}");
    }
    let (bound, order) = if backwards { ("<=", "DESC") } else { (">", "") };
    format!(
        "WITH b AS MATERIALIZED ( \
             SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon, \
                    (SELECT n.transaction_id FROM {p}events n \
                      ORDER BY n.position DESC LIMIT 1) AS newest) \
         SELECT b.newest >= b.horizon, b.newest::text, {EVENT_COLUMNS} \
           FROM b LEFT JOIN LATERAL ( \
                SELECT * FROM {p}events e \
                 WHERE e.transaction_id < b.horizon AND e.position {bound} $1{filters} \
                 ORDER BY e.position {order} LIMIT $2) AS e ON true"
    )
}

/// The `$1` of a read: forwards, events after it (0 from the beginning); backwards, events at
/// or before it (`i64::MAX` from the end).
fn read_bound(direction: Direction, start: Option<EventPosition>) -> i64 {
    match (direction, start) {
        (Direction::Forwards, None) => 0,
        (Direction::Forwards, Some(start)) => start.get_i64(),
        (Direction::Backwards, None) => i64::MAX,
        (Direction::Backwards, Some(start)) => start.get_i64() - 1,
    }
}

/// `append`: one call of `<prefix>append_events_v1`.
pub(crate) async fn append<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
    request: &AppendRequest,
) -> Result<Vec<StoredEvent>, EventStorageError> {
    request.validate()?;
    let what = "append";
    let tags: Vec<Vec<String>> = request
        .events
        .iter()
        .map(|e| normalize_tags(&e.tags))
        .collect();
    let joined_tags: Vec<String> = tags.iter().map(|t| t.join(TAG_SEPARATOR)).collect();
    let streams: Vec<&str> = request.events.iter().map(|e| e.stream.as_str()).collect();
    let types: Vec<&str> = request
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    let payloads: Vec<&serde_json::Value> = request.events.iter().map(|e| &e.payload).collect();
    let key = request.idempotency_key.as_deref();
    let none: &[String] = &[];
    let (conditional, c_streams, c_types, c_tags, c_after) = match &request.condition {
        Some(c) => (
            true,
            c.query.streams.as_slice(),
            c.query.event_types.as_slice(),
            c.query.tags.as_slice(),
            c.after.map_or(0, EventPosition::get_i64),
        ),
        None => (false, none, none, none, 0),
    };
    let params = [
        Param::TextRefs(&streams),
        Param::TextRefs(&types),
        Param::Jsonbs(&payloads),
        Param::Texts(&joined_tags),
        Param::OptionalText(key),
        Param::Bool(conditional),
        Param::Texts(c_streams),
        Param::Texts(c_types),
        Param::Texts(c_tags),
        Param::Int8(c_after),
    ];
    let sql = &statements.append;
    let rows = link
        .timed(what, || async {
            let mut connection = link.checkout(what).await?;
            let mut result = connection.query(sql, &params).await;
            if key.is_some()
                && matches!(&result, Err(e) if e.is_unique_violation_of(&statements.keys_constraint))
            {
                // An append with the same key committed while this one ran: this one was
                // rolled back, and running it again replays the other's events.
                tracing::debug!(target: "tenure_postgres", "idempotency key taken meanwhile; replaying");
                result = connection.query(sql, &params).await;
            }
            result.map_err(|failure| {
                // Whatever failed, the connection is not trusted again (the function releases
                // its session lock on error, and closing is the belt to those braces).
                connection.discard();
                failure.into_storage(what)
            })
        })
        .await?;
    decode::events::appended(&rows, request, tags)
}

/// `read_events`: one statement behind the barrier; if the barrier hides committed events the
/// read needs, waits for at most `visibility_wait` and reads again.
pub(crate) async fn read<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
    query: &EventQuery,
    options: ReadOptions,
    visibility_wait: Duration,
) -> Result<Vec<StoredEvent>, EventStorageError> {
    query.validate()?;
    options.validate()?;
    let what = "read_events";
    let bound = read_bound(options.direction, options.start);
    let limit = i64::try_from(options.limit)
        .map_err(|_| EventStorageError::internal("a validated limit does not fit in i64"))?;
    let mut params = Vec::with_capacity(5);
    params.extend([Param::Int8(bound), Param::Int8(limit)]);
    for filter in [&query.streams, &query.event_types, &query.tags] {
        if !filter.is_empty() {
            params.push(Param::Texts(filter));
        }
    }
    let sql = statements.read(options.direction, query);
    link.timed(what, || async {
        let mut connection = link.checkout(what).await?;
        let rows = connection
            .query(sql, &params)
            .await
            .map_err(|e| e.into_storage(what))?;
        let read = decode::events::read(&rows, options.direction)?;
        let Some(newest) = read.hidden_newest else {
            return Ok(read.events);
        };
        // The barrier hid committed events: transactions older than the newest one were still
        // in flight. A forwards read that filled its limit has its answer anyway; otherwise
        // wait (briefly) for them, so that a read returns what was committed before it began,
        // then read again.
        let filled = read.events.len() == options.limit;
        let wait = visibility_wait.min(link.call_timeout() / 2);
        if (options.direction == Direction::Forwards && filled)
            || !wait_for_horizon(&mut connection, statements, &newest, wait).await?
        {
            return Ok(read.events);
        }
        let rows = connection
            .query(sql, &params)
            .await
            .map_err(|e| e.into_storage(what))?;
        Ok(decode::events::read(&rows, options.direction)?.events)
    })
    .await
}

/// Waits, polling, until every transaction older than `xid` has finished, for at most `wait`.
/// Says whether they did.
async fn wait_for_horizon<D: Driver>(
    connection: &mut Checkout<'_, D>,
    statements: &EventStatements,
    xid: &str,
    wait: Duration,
) -> Result<bool, EventStorageError> {
    if wait.is_zero() {
        return Ok(false);
    }
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    loop {
        let now = Instant::now();
        if now >= deadline {
            tracing::debug!(target: "tenure_postgres", ?wait, "read: older transactions still in flight; returning what the barrier allows");
            return Ok(false);
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(20));
        let rows = connection
            .query(&statements.horizon_passed, &[Param::Text(xid)])
            .await
            .map_err(|e| e.into_storage("read_events"))?;
        if decode::events::horizon_passed(&rows)? {
            return Ok(true);
        }
    }
}

/// `bookmark`: one upsert, on the database clock, written only if `position` is a stored
/// event.
pub(crate) async fn place_bookmark<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
    reader: &str,
    position: EventPosition,
    tags: &[String],
) -> Result<Bookmark, EventStorageError> {
    validate_bookmark(reader, tags)?;
    let tags = normalize_tags(tags);
    let params = [
        Param::Text(reader),
        Param::Int8(position.get_i64()),
        Param::Texts(&tags),
    ];
    let rows = link
        .query("bookmark", &statements.bookmark, &params)
        .await?;
    let Some(placed_at) = decode::events::placed_at(&rows)? else {
        return Err(ValidationError::new(
            Field::Position,
            Reason::NoSuchEvent {
                position: position.get(),
            },
        )
        .into());
    };
    Ok(Bookmark {
        reader: reader.to_owned(),
        position,
        tags,
        placed_at,
    })
}

/// `bookmark_fenced`: one statement (see [`EventStatements`]); a refusal writes nothing and
/// names the newer token.
pub(crate) async fn place_bookmark_fenced<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
    reader: &str,
    position: EventPosition,
    tags: &[String],
    fence: &Fence,
) -> Result<Bookmark, EventStorageError> {
    validate_bookmark(reader, tags)?;
    let tags = normalize_tags(tags);
    let token = fence.token.get_i64();
    let params = [
        Param::Text(reader),
        Param::Int8(position.get_i64()),
        Param::Texts(&tags),
        Param::Text(fence.lease_name.as_str()),
        Param::Int8(token),
    ];
    let rows = link
        .query("bookmark_fenced", &statements.bookmark_fenced, &params)
        .await?;
    let answer = decode::events::fenced_placement(&rows)?;
    if let Some(placed_at) = answer.placed_at {
        return Ok(Bookmark {
            reader: reader.to_owned(),
            position,
            tags,
            placed_at,
        });
    }
    if !answer.event_exists {
        return Err(ValidationError::new(
            Field::Position,
            Reason::NoSuchEvent {
                position: position.get(),
            },
        )
        .into());
    }
    let newer = match answer.newer.filter(|newer| *newer > token) {
        Some(newer) => newer,
        // A concurrent fenced write with a higher token took the row first: its token is the
        // reader's fence now.
        None => {
            let rows = link
                .query(
                    "bookmark_fenced",
                    &statements.fence_of,
                    &[Param::Text(reader)],
                )
                .await?;
            decode::events::fence_token(&rows)?
                .filter(|newer| *newer > token)
                .ok_or_else(|| {
                    EventStorageError::internal(
                        "bookmark_fenced: nothing written, yet no newer token found",
                    )
                })?
        }
    };
    Err(EventStorageError::Fenced {
        reader: reader.to_owned(),
        lease_name: fence.lease_name.to_string(),
        token: fence.token.get(),
        newer: newer.unsigned_abs(),
    })
}

/// `get_bookmark`: one read of `<prefix>bookmarks`.
pub(crate) async fn bookmark<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
    reader: &str,
) -> Result<Option<Bookmark>, EventStorageError> {
    validate_reader(reader)?;
    let rows = link
        .query(
            "get_bookmark",
            &statements.get_bookmark,
            &[Param::Text(reader)],
        )
        .await?;
    rows.first().map(decode::events::bookmark).transpose()
}

/// `remove_bookmark`: one delete; removing a bookmark that does not exist does nothing.
pub(crate) async fn remove_bookmark<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
    reader: &str,
) -> Result<(), EventStorageError> {
    validate_reader(reader)?;
    link.query(
        "remove_bookmark",
        &statements.remove_bookmark,
        &[Param::Text(reader)],
    )
    .await
    .map(|_| ())
}

/// `get_bookmarks`: one read of `<prefix>bookmarks`, ordered by reader (byte order).
pub(crate) async fn bookmarks<D: Driver>(
    link: &Link<D>,
    statements: &EventStatements,
) -> Result<Vec<Bookmark>, EventStorageError> {
    let rows = link
        .query("get_bookmarks", &statements.bookmarks, &[])
        .await?;
    rows.iter().map(decode::events::bookmark).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_shape_has_its_statement() {
        let statements = EventStatements::new(&TablePrefix::default());
        let query = EventQuery::stream("s").of_type("T").with_tag("t");
        let sql = statements.read(Direction::Backwards, &query);
        assert!(sql.contains("e.stream = ($3::text[])[1]"), "{sql}");
        assert!(sql.contains("e.event_type = ($4::text[])[1]"), "{sql}");
        assert!(sql.contains("e.tags @> $5"), "{sql}");
        assert!(sql.contains("e.position <= $1"), "{sql}");
        assert!(sql.contains("DESC LIMIT $2"), "{sql}");
        let two = EventQuery {
            streams: vec!["a".into(), "b".into()],
            event_types: vec!["X".into(), "Y".into()],
            tags: vec![],
        };
        let sql = statements.read(Direction::Forwards, &two);
        assert!(sql.contains("e.stream = ANY ($3)"), "{sql}");
        assert!(sql.contains("e.event_type = ANY ($4)"), "{sql}");
        let sql = statements.read(Direction::Forwards, &EventQuery::all().with_tag("t"));
        assert!(sql.contains("e.tags @> $3"), "{sql}");
        assert!(!sql.contains("ANY"), "{sql}");
        assert!(sql.contains("e.position > $1"), "{sql}");
        let distinct: std::collections::HashSet<&Sql> = statements.reads.iter().collect();
        assert_eq!(distinct.len(), 36);
    }

    #[test]
    fn bounds_follow_the_direction() {
        let p = EventPosition::new(7);
        assert_eq!(read_bound(Direction::Forwards, None), 0);
        assert_eq!(read_bound(Direction::Forwards, p), 7);
        assert_eq!(read_bound(Direction::Backwards, None), i64::MAX);
        assert_eq!(read_bound(Direction::Backwards, p), 6);
    }
}
