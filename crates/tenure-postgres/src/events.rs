//! The SQL of the event log and the bookmarks, and the conversion of its rows into domain
//! values.
//!
//! As for leases, every statement is built once per storage from the validated prefix, and
//! every value travels as a bind parameter.

use std::fmt::Write as _;
use std::time::SystemTime;

use tenure_ports::{
    Bookmark, Direction, EventId, EventPosition, EventQuery, EventStorageError, StoredEvent,
    Timestamp,
};
use tokio_postgres::Row;

use crate::ops::get;
use crate::prefix::TablePrefix;

/// Joins one event's tags in the `p_tags` argument of `append_events_v1`: a control character,
/// which no valid tag contains.
pub(crate) const TAG_SEPARATOR: &str = "\u{1f}";

/// The columns of a stored event, in the order [`event_at`] reads them.
const EVENT_COLUMNS: &str =
    "e.position, e.event_id::text, e.stream, e.event_type, e.payload, e.tags, e.recorded_at";

/// The statements of the event log and the bookmarks of one storage.
pub(crate) struct EventStatements {
    pub(crate) append: String,
    /// Indexed by [`read_index`].
    reads: Vec<String>,
    pub(crate) horizon_passed: String,
    pub(crate) bookmark: String,
    pub(crate) get_bookmark: String,
    pub(crate) remove_bookmark: String,
    pub(crate) bookmarks: String,
    /// The constraint whose violation means "an append with this key committed first".
    pub(crate) keys_constraint: String,
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
        let mut reads = vec![String::new(); 36];
        for backwards in [false, true] {
            for streams in ListFilter::ALL {
                for types in ListFilter::ALL {
                    for tags in [false, true] {
                        reads[shape_index(backwards, streams, types, tags)] =
                            read_sql(p, backwards, streams, types, tags);
                    }
                }
            }
        }
        EventStatements {
            append: format!(
                "SELECT o_outcome, o_position, o_event_id::text, o_recorded_at, o_stream, \
                        o_event_type, o_payload, o_tags \
                   FROM {p}append_events_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            reads,
            horizon_passed: "SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8"
                .to_owned(),
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
            ),
            get_bookmark: format!(
                "SELECT reader, position, tags, placed_at FROM {p}bookmarks WHERE reader = $1"
            ),
            remove_bookmark: format!("DELETE FROM {p}bookmarks WHERE reader = $1"),
            bookmarks: format!(
                "SELECT reader, position, tags, placed_at FROM {p}bookmarks ORDER BY reader"
            ),
            keys_constraint: format!("{p}event_keys_pkey"),
        }
    }

    /// The read statement for `query` in `direction`. Its parameters: `$1` the bound (see
    /// [`read_bound`]), `$2` the limit, then the streams, types and tags the query has, in
    /// that order.
    pub(crate) fn read(&self, direction: Direction, query: &EventQuery) -> &str {
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
pub(crate) fn read_bound(direction: Direction, start: Option<EventPosition>) -> i64 {
    match (direction, start) {
        (Direction::Forwards, None) => 0,
        (Direction::Forwards, Some(start)) => start.get_i64(),
        (Direction::Backwards, None) => i64::MAX,
        (Direction::Backwards, Some(start)) => start.get_i64() - 1,
    }
}

/// What a read returned: the events, and whether the barrier hid committed events.
pub(crate) struct ReadRows {
    pub(crate) events: Vec<StoredEvent>,
    /// The transaction id (as text) of the newest committed event, when the barrier hid it:
    /// transactions older than it were still in flight.
    pub(crate) hidden_newest: Option<String>,
}

/// The answer of a read statement, events in the read's direction.
pub(crate) fn read_from_rows(
    rows: &[Row],
    direction: Direction,
) -> Result<ReadRows, EventStorageError> {
    let Some(first) = rows.first() else {
        return Err(EventStorageError::internal("read_events: no row"));
    };
    let hidden = get::<Option<bool>>(first, 0, "newest >= horizon")?.unwrap_or(false);
    let hidden_newest = if hidden {
        get::<Option<String>>(first, 1, "newest")?
    } else {
        None
    };
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        if get::<Option<i64>>(row, 2, "position")?.is_none() {
            continue; // the outer join's row when no event qualifies
        }
        events.push(event_at(row, 2)?);
    }
    // The lateral subquery is ordered; the join does not promise to keep that order.
    match direction {
        Direction::Forwards => events.sort_by_key(|e| e.position),
        Direction::Backwards => events.sort_by_key(|e| std::cmp::Reverse(e.position)),
    }
    Ok(ReadRows {
        events,
        hidden_newest,
    })
}

/// A stored position.
pub(crate) fn position(value: i64) -> Result<EventPosition, EventStorageError> {
    u64::try_from(value)
        .ok()
        .and_then(EventPosition::new)
        .ok_or_else(|| EventStorageError::corrupt(format!("event position {value} is invalid")))
}

pub(crate) fn timestamp(time: SystemTime, name: &str) -> Result<Timestamp, EventStorageError> {
    Timestamp::from_system_time(time)
        .ok_or_else(|| EventStorageError::corrupt(format!("{name} is out of range")))
}

pub(crate) fn event_id(text: &str) -> Result<EventId, EventStorageError> {
    EventId::parse(text)
        .ok_or_else(|| EventStorageError::corrupt(format!("event id {text:?} is not a UUID")))
}

/// The columns of [`EVENT_COLUMNS`], starting at `at`.
pub(crate) fn event_at(row: &Row, at: usize) -> Result<StoredEvent, EventStorageError> {
    Ok(StoredEvent {
        position: position(get(row, at, "position")?)?,
        id: event_id(get(row, at + 1, "event_id")?)?,
        stream: get(row, at + 2, "stream")?,
        event_type: get(row, at + 3, "event_type")?,
        payload: get(row, at + 4, "payload")?,
        tags: get(row, at + 5, "tags")?,
        recorded_at: timestamp(get(row, at + 6, "recorded_at")?, "recorded_at")?,
    })
}

/// A bookmark row: reader, position, tags, placed_at.
pub(crate) fn bookmark_from_row(row: &Row) -> Result<Bookmark, EventStorageError> {
    Ok(Bookmark {
        reader: get(row, 0, "reader")?,
        position: position(get(row, 1, "position")?)?,
        tags: get(row, 2, "tags")?,
        placed_at: timestamp(get(row, 3, "placed_at")?, "placed_at")?,
    })
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
        let distinct: std::collections::HashSet<&String> = statements.reads.iter().collect();
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
