//! The answers of the event-log and bookmark statements, as the SPI's values.

use tenure_ports::{
    AppendRequest, Bookmark, Direction, EventId, EventPosition, EventStorageError, StoredEvent,
};

use super::{Row, get};

/// A stored position.
pub(crate) fn position(value: i64) -> Result<EventPosition, EventStorageError> {
    u64::try_from(value)
        .ok()
        .and_then(EventPosition::new)
        .ok_or_else(|| EventStorageError::corrupt(format!("event position {value} is invalid")))
}

fn event_id(text: &str) -> Result<EventId, EventStorageError> {
    EventId::parse(text)
        .ok_or_else(|| EventStorageError::corrupt(format!("event id {text:?} is not a UUID")))
}

/// The columns of `events::EVENT_COLUMNS`, starting at `at`.
fn event_at(row: &impl Row, at: usize) -> Result<StoredEvent, EventStorageError> {
    Ok(StoredEvent {
        position: position(get(row, at, "position")?)?,
        id: event_id(get(row, at + 1, "event_id")?)?,
        stream: get(row, at + 2, "stream")?,
        event_type: get(row, at + 3, "event_type")?,
        payload: get(row, at + 4, "payload")?,
        tags: get(row, at + 5, "tags")?,
        recorded_at: get(row, at + 6, "recorded_at")?,
    })
}

/// A bookmark row: reader, position, tags, placed_at.
pub(crate) fn bookmark(row: &impl Row) -> Result<Bookmark, EventStorageError> {
    Ok(Bookmark {
        reader: get(row, 0, "reader")?,
        position: position(get(row, 1, "position")?)?,
        tags: get(row, 2, "tags")?,
        placed_at: get(row, 3, "placed_at")?,
    })
}

/// The answer of the bookmark upsert: when it was placed, if the position is a stored event.
pub(crate) fn placed_at<R: Row>(
    rows: &[R],
) -> Result<Option<tenure_ports::Timestamp>, EventStorageError> {
    rows.first().map(|row| get(row, 0, "placed_at")).transpose()
}

/// The answer of a fenced bookmark write.
pub(crate) struct FencedPlacement {
    /// When the bookmark was placed; `None`: nothing was written.
    pub(crate) placed_at: Option<tenure_ports::Timestamp>,
    /// The highest token the statement saw (the lease's, the reader's fence), if any.
    pub(crate) newer: Option<i64>,
    /// Whether the bookmark's event exists.
    pub(crate) event_exists: bool,
}

/// The one row of the fenced bookmark statement.
pub(crate) fn fenced_placement<R: Row>(rows: &[R]) -> Result<FencedPlacement, EventStorageError> {
    let Some(row) = rows.first() else {
        return Err(EventStorageError::internal("bookmark_fenced: no row"));
    };
    Ok(FencedPlacement {
        placed_at: get(row, 0, "placed_at")?,
        newer: get(row, 1, "newer token")?,
        event_exists: get(row, 2, "event exists")?,
    })
}

/// A reader's fence token, if it has a bookmark with one.
pub(crate) fn fence_token<R: Row>(rows: &[R]) -> Result<Option<i64>, EventStorageError> {
    Ok(rows
        .first()
        .map(|row| get::<Option<i64>>(row, 0, "fence_token"))
        .transpose()?
        .flatten())
}

/// The answer of the horizon check: whether every older transaction has finished.
pub(crate) fn horizon_passed<R: Row>(rows: &[R]) -> Result<bool, EventStorageError> {
    match rows.first() {
        Some(row) => get(row, 0, "horizon passed"),
        None => Err(EventStorageError::internal("read_events: no row")),
    }
}

/// The answer of `append_events_v1` for `request` (whose events' tags, normalized, are
/// `tags`): the events as stored, or the conflict.
pub(crate) fn appended<R: Row>(
    rows: &[R],
    request: &AppendRequest,
    tags: Vec<Vec<String>>,
) -> Result<Vec<StoredEvent>, EventStorageError> {
    let Some(first) = rows.first() else {
        return Err(EventStorageError::internal("append: no row"));
    };
    match get::<&str>(first, 0, "o_outcome")? {
        "appended" => {
            if rows.len() != request.events.len() {
                return Err(EventStorageError::internal(format!(
                    "append: {} events sent, {} stored",
                    request.events.len(),
                    rows.len()
                )));
            }
            let mut stored = Vec::with_capacity(rows.len());
            for ((row, event), tags) in rows.iter().zip(&request.events).zip(tags) {
                stored.push(StoredEvent {
                    position: position(get(row, 1, "o_position")?)?,
                    id: event_id(get(row, 2, "o_event_id")?)?,
                    recorded_at: get(row, 3, "o_recorded_at")?,
                    stream: event.stream.clone(),
                    event_type: event.event_type.clone(),
                    payload: event.payload.clone(),
                    tags,
                });
            }
            Ok(stored)
        }
        "replayed" => rows
            .iter()
            .map(|row| {
                Ok(StoredEvent {
                    position: position(get(row, 1, "o_position")?)?,
                    id: event_id(get(row, 2, "o_event_id")?)?,
                    recorded_at: get(row, 3, "o_recorded_at")?,
                    stream: get(row, 4, "o_stream")?,
                    event_type: get(row, 5, "o_event_type")?,
                    payload: get(row, 6, "o_payload")?,
                    tags: get(row, 7, "o_tags")?,
                })
            })
            .collect(),
        "conflict" => Err(EventStorageError::AppendConflict {
            conflicting: position(get(first, 1, "o_position")?)?,
        }),
        other => Err(EventStorageError::corrupt(format!(
            "append: unknown outcome {other:?}"
        ))),
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
pub(crate) fn read<R: Row>(
    rows: &[R],
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
    // The first event (in the read's direction) that cannot be decoded, and why.
    let mut undecodable: Option<(EventPosition, EventStorageError)> = None;
    for row in rows {
        let Some(at) = get::<Option<i64>>(row, 2, "position")? else {
            continue; // the outer join's row when no event qualifies
        };
        match event_at(row, 2) {
            Ok(event) => events.push(event),
            Err(error) => {
                let at = position(at)?;
                if undecodable
                    .as_ref()
                    .is_none_or(|(first, _)| comes_before(direction, at, *first))
                {
                    undecodable = Some((at, error));
                }
            }
        }
    }
    // The lateral subquery is ordered; the join does not promise to keep that order.
    match direction {
        Direction::Forwards => events.sort_by_key(|e| e.position),
        Direction::Backwards => events.sort_by_key(|e| std::cmp::Reverse(e.position)),
    }
    // One event that cannot be read does not hide the ones before it: they are returned (a
    // short read), and the read that starts at it fails, naming it.
    if let Some((at, error)) = undecodable {
        events.retain(|e| comes_before(direction, e.position, at));
        if events.is_empty() {
            return Err(EventStorageError::corrupt_with(
                format!("the event at position {at} cannot be read"),
                error,
            ));
        }
    }
    Ok(ReadRows {
        events,
        hidden_newest,
    })
}

/// Whether `a` comes before `b` in a read in `direction`.
fn comes_before(direction: Direction, a: EventPosition, b: EventPosition) -> bool {
    match direction {
        Direction::Forwards => a < b,
        Direction::Backwards => a > b,
    }
}
