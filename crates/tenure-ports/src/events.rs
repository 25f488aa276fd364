//! The event log and bookmarks: types, queries and their validation.
//!
//! A lease decides *who* processes, a bookmark decides *from where*, and the event log is what
//! is processed. Every backend that lists [`Capability::Events`](crate::Capability::Events) or
//! [`Capability::Bookmarks`](crate::Capability::Bookmarks) validates its inputs with the
//! functions here and answers reads with [`EventQuery::matches`], so that the rules are the same
//! everywhere.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use tenure_domain::{Field, Reason, Timestamp, ValidationError, check_name};

/// The most events one append may carry.
pub const MAX_APPEND_EVENTS: usize = 10_000;

/// The most tags one event or one query may carry.
pub const MAX_TAGS: usize = 64;

/// The deepest a payload may nest arrays and objects (`[1]` is 1 deep, `{"a": [1]}` 2).
///
/// Every backend stores and reads back any payload within it; deeper ones are
/// [`EventStorageError::InvalidRequest`](crate::EventStorageError::InvalidRequest) at append,
/// on every backend. (serde_json refuses to parse JSON nested more than 128 deep, so a file
/// record or a PostgreSQL read would otherwise fail on a payload accepted earlier.)
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// The most events one read may return.
pub const MAX_READ_LIMIT: usize = 10_000;

/// The global position of a stored event: 1 for the first, increasing with every event.
///
/// Positions are unique and ordered by commit visibility: a reader that has seen position `p`
/// never later sees a new event below `p`. They may have gaps (a backend may burn positions).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct EventPosition(u64);

impl EventPosition {
    /// The position `value`, or `None` for 0 or above `i64::MAX`.
    pub const fn new(value: u64) -> Option<Self> {
        if value == 0 || value > i64::MAX as u64 {
            None
        } else {
            Some(EventPosition(value))
        }
    }

    /// The position's value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The position's value as an `i64` (always positive).
    pub const fn get_i64(self) -> i64 {
        self.0 as i64
    }
}

impl fmt::Display for EventPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The unique id of a stored event, displayed as a UUID (version 4, random).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(u128);

impl EventId {
    /// An id from its 128 bits.
    pub const fn from_u128(value: u128) -> Self {
        EventId(value)
    }

    /// The id's 128 bits.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// A new random id (UUID version 4 layout), for backends that make their own ids.
    pub fn random() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut bits = 0u128;
        for _ in 0..2 {
            let mut hasher = RandomState::new().build_hasher();
            hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            bits = (bits << 64) | u128::from(hasher.finish());
        }
        // Version 4, variant RFC 4122.
        bits = (bits & !(0xf << 76)) | (0x4 << 76);
        bits = (bits & !(0x3 << 62)) | (0x2 << 62);
        EventId(bits)
    }

    /// Parses the hyphenated UUID form (`8-4-4-4-12` hex digits).
    pub fn parse(text: &str) -> Option<Self> {
        let hex: String = text.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 || text.len() != 36 {
            return None;
        }
        u128::from_str_radix(&hex, 16).ok().map(EventId)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            (v >> 96) as u32,
            (v >> 80) as u16,
            (v >> 64) as u16,
            (v >> 48) as u16,
            v & 0xffff_ffff_ffff
        )
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({self})")
    }
}

/// An event to append.
#[derive(Clone, PartialEq, Debug)]
pub struct NewEvent {
    /// The stream it belongs to, e.g. `order-42`.
    pub stream: String,
    /// Its type, e.g. `OrderPlaced`.
    pub event_type: String,
    /// Its data.
    pub payload: serde_json::Value,
    /// Tags a query can select it by, e.g. `customer:7` (at most [`MAX_TAGS`]).
    pub tags: Vec<String>,
}

impl NewEvent {
    /// An event without tags.
    pub fn new(
        stream: impl Into<String>,
        event_type: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        NewEvent {
            stream: stream.into(),
            event_type: event_type.into(),
            payload,
            tags: Vec::new(),
        }
    }

    /// The event with `tag` added.
    #[must_use]
    pub fn tagged(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }
}

/// An event as stored.
#[derive(Clone, PartialEq, Debug)]
pub struct StoredEvent {
    /// Its unique id.
    pub id: EventId,
    /// Its global position.
    pub position: EventPosition,
    /// The stream it belongs to.
    pub stream: String,
    /// Its type.
    pub event_type: String,
    /// Its data.
    pub payload: serde_json::Value,
    /// Its tags, deduplicated and sorted.
    pub tags: Vec<String>,
    /// When it was stored (storage clock).
    pub recorded_at: Timestamp,
}

/// Which events a read or an append condition selects.
///
/// An event matches when its stream is one of `streams` (or `streams` is empty), its type is
/// one of `event_types` (or that is empty), and it carries every tag of `tags`.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct EventQuery {
    /// Streams to select; empty selects every stream.
    pub streams: Vec<String>,
    /// Event types to select; empty selects every type.
    pub event_types: Vec<String>,
    /// Tags an event must all carry.
    pub tags: Vec<String>,
}

impl EventQuery {
    /// A query that selects every event.
    pub fn all() -> Self {
        EventQuery::default()
    }

    /// A query for the events of one stream.
    pub fn stream(stream: impl Into<String>) -> Self {
        EventQuery {
            streams: vec![stream.into()],
            ..EventQuery::default()
        }
    }

    /// The query, also requiring `event_type` (or one of the types listed so far).
    #[must_use]
    pub fn of_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_types.push(event_type.into());
        self
    }

    /// The query, also requiring `tag`.
    #[must_use]
    pub fn with_tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Whether `event` matches.
    pub fn matches(&self, event: &StoredEvent) -> bool {
        (self.streams.is_empty() || self.streams.contains(&event.stream))
            && (self.event_types.is_empty() || self.event_types.contains(&event.event_type))
            && self.tags.iter().all(|t| event.tags.contains(t))
    }

    /// Checks every stream, type and tag of the query.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for stream in &self.streams {
            check_name(Field::Stream, stream)?;
        }
        for event_type in &self.event_types {
            check_name(Field::EventType, event_type)?;
        }
        check_tags(&self.tags)
    }
}

/// The optimistic-concurrency check of an append (a dynamic consistency boundary): the append
/// fails with [`EventStorageError::AppendConflict`](crate::EventStorageError::AppendConflict) if
/// any event matching `query` is stored after `after` (or at all, when `after` is `None`).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct AppendCondition {
    /// The events the decision was based on.
    pub query: EventQuery,
    /// The last position the decision saw; `None` when it saw none.
    pub after: Option<EventPosition>,
}

/// An append: a batch of events stored atomically, with an optional condition and key.
#[derive(Clone, PartialEq, Debug)]
#[non_exhaustive]
pub struct AppendRequest {
    /// The events, stored in this order with consecutive positions (1 to
    /// [`MAX_APPEND_EVENTS`]).
    pub events: Vec<NewEvent>,
    /// Fail instead of appending if the condition's query matches a newer event.
    pub condition: Option<AppendCondition>,
    /// A key that makes the append idempotent: if an append with this key was stored before,
    /// the events stored then are returned and nothing is stored again. The key names the
    /// whole batch.
    pub idempotency_key: Option<String>,
}

impl AppendRequest {
    /// An unconditional append of `events`.
    pub fn new(events: Vec<NewEvent>) -> Self {
        AppendRequest {
            events,
            condition: None,
            idempotency_key: None,
        }
    }

    /// The append, failing if `query` matches an event after `after`.
    #[must_use]
    pub fn on_condition(mut self, query: EventQuery, after: Option<EventPosition>) -> Self {
        self.condition = Some(AppendCondition { query, after });
        self
    }

    /// The append, made idempotent by `key`.
    #[must_use]
    pub fn idempotent(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Checks every field; nothing may be stored unless this passes.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.events.is_empty() {
            return Err(ValidationError::new(Field::Events, Reason::Empty));
        }
        if self.events.len() > MAX_APPEND_EVENTS {
            return Err(ValidationError::new(
                Field::Events,
                Reason::TooMany {
                    count: self.events.len(),
                    max: MAX_APPEND_EVENTS,
                },
            ));
        }
        for event in &self.events {
            check_name(Field::Stream, &event.stream)?;
            check_name(Field::EventType, &event.event_type)?;
            check_tags(&event.tags)?;
            check_payload(&event.payload)?;
        }
        if let Some(condition) = &self.condition {
            condition.query.validate()?;
        }
        if let Some(key) = &self.idempotency_key {
            check_name(Field::IdempotencyKey, key)?;
        }
        Ok(())
    }
}

/// Refuses a payload that not every backend can store and read back: U+0000 in any string or
/// key (PostgreSQL's `jsonb` cannot store it), or nesting deeper than [`MAX_PAYLOAD_DEPTH`]
/// (serde_json cannot read it back), so that the same payload behaves the same everywhere.
/// Walks the value with its own stack: a hostile depth cannot overflow the caller's.
fn check_payload(payload: &serde_json::Value) -> Result<(), ValidationError> {
    let nul = || ValidationError::new(Field::Payload, Reason::NulInJson);
    let mut pending = vec![(payload, 0)];
    while let Some((value, depth)) = pending.pop() {
        let inner = depth + 1;
        match value {
            serde_json::Value::String(s) if s.contains('\0') => return Err(nul()),
            serde_json::Value::Array(_) | serde_json::Value::Object(_)
                if inner > MAX_PAYLOAD_DEPTH =>
            {
                return Err(ValidationError::new(
                    Field::Payload,
                    Reason::TooDeep {
                        max: MAX_PAYLOAD_DEPTH,
                    },
                ));
            }
            serde_json::Value::Array(items) => pending.extend(items.iter().map(|v| (v, inner))),
            serde_json::Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    return Err(nul());
                }
                pending.extend(map.values().map(|v| (v, inner)));
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_tags(tags: &[String]) -> Result<(), ValidationError> {
    if tags.len() > MAX_TAGS {
        return Err(ValidationError::new(
            Field::Tag,
            Reason::TooMany {
                count: tags.len(),
                max: MAX_TAGS,
            },
        ));
    }
    tags.iter().try_for_each(|t| check_name(Field::Tag, t))
}

/// Tags as stored: deduplicated and sorted.
pub fn normalize_tags(tags: &[String]) -> Vec<String> {
    let mut tags = tags.to_vec();
    tags.sort_unstable();
    tags.dedup();
    tags
}

/// Which way a read goes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Direction {
    /// Oldest first: positions after the start.
    #[default]
    Forwards,
    /// Newest first: positions before the start.
    Backwards,
}

/// Where a read starts, which way it goes, and how much it returns.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub struct ReadOptions {
    /// Which way to read.
    pub direction: Direction,
    /// Exclusive start: forwards, events after it; backwards, events before it. `None` starts
    /// at the beginning (forwards) or the end (backwards) of the log.
    pub start: Option<EventPosition>,
    /// The most events to return (1 to [`MAX_READ_LIMIT`]).
    pub limit: usize,
}

impl ReadOptions {
    /// Forwards from the beginning, 1,000 at a time.
    pub const fn forwards() -> Self {
        ReadOptions {
            direction: Direction::Forwards,
            start: None,
            limit: 1_000,
        }
    }

    /// Backwards from the end, 1,000 at a time.
    pub const fn backwards() -> Self {
        ReadOptions {
            direction: Direction::Backwards,
            start: None,
            limit: 1_000,
        }
    }

    /// The options with an exclusive start position.
    #[must_use]
    pub const fn starting_after(mut self, start: Option<EventPosition>) -> Self {
        self.start = start;
        self
    }

    /// The options with another limit.
    #[must_use]
    pub const fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Checks the limit.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.limit == 0 {
            return Err(ValidationError::new(Field::Limit, Reason::Zero));
        }
        if self.limit > MAX_READ_LIMIT {
            return Err(ValidationError::new(
                Field::Limit,
                Reason::TooMany {
                    count: self.limit,
                    max: MAX_READ_LIMIT,
                },
            ));
        }
        Ok(())
    }

    /// Whether `position` lies beyond the start in the read's direction.
    pub fn admits(&self, position: EventPosition) -> bool {
        match (self.direction, self.start) {
            (_, None) => true,
            (Direction::Forwards, Some(start)) => position > start,
            (Direction::Backwards, Some(start)) => position < start,
        }
    }
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions::forwards()
    }
}

/// Where a reader got to.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Bookmark {
    /// The reader's name, e.g. `order-dispatcher`.
    pub reader: String,
    /// The position of the last event the reader processed.
    pub position: EventPosition,
    /// Tags the reader attached (deduplicated and sorted).
    pub tags: Vec<String>,
    /// When it was last placed (storage clock).
    pub placed_at: Timestamp,
}

/// Checks a reader's name.
pub fn validate_reader(reader: &str) -> Result<(), ValidationError> {
    check_name(Field::Reader, reader)
}

/// Checks the inputs of a bookmark (the position is checked against the log by the backend).
pub fn validate_bookmark(reader: &str, tags: &[String]) -> Result<(), ValidationError> {
    validate_reader(reader)?;
    check_tags(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_ids_look_like_uuid_v4_and_round_trip() {
        let id = EventId::random();
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "4");
        assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(EventId::parse(&text), Some(id));
        assert_ne!(EventId::random(), EventId::random());
        assert_eq!(EventId::parse("nope"), None);
    }

    /// `depth` arrays and objects, alternating, around a number.
    fn nested(depth: usize) -> serde_json::Value {
        (0..depth).fold(json!(1), |inner, level| {
            if level % 2 == 0 {
                json!([inner])
            } else {
                json!({ "k": inner })
            }
        })
    }

    #[test]
    fn payloads_nested_beyond_the_limit_are_refused() {
        let append = |payload| AppendRequest::new(vec![NewEvent::new("s", "T", payload)]);
        assert!(append(nested(MAX_PAYLOAD_DEPTH)).validate().is_ok());
        assert!(
            append(json!({"a": [1, {"b": "c"}], "d": []}))
                .validate()
                .is_ok()
        );
        for depth in [MAX_PAYLOAD_DEPTH + 1, 200] {
            let err = append(nested(depth)).validate().unwrap_err();
            assert_eq!(
                (err.field, err.reason.clone()),
                (
                    Field::Payload,
                    Reason::TooDeep {
                        max: MAX_PAYLOAD_DEPTH
                    }
                )
            );
            assert_eq!(
                err.to_string(),
                "invalid payload: nests arrays and objects more than 64 deep"
            );
        }
        // An empty container at the limit's edge counts as one level too.
        let edge = nested(MAX_PAYLOAD_DEPTH - 1);
        assert!(append(json!([edge.clone()])).validate().is_ok());
        assert!(append(json!([[edge]])).validate().is_err());
    }

    #[test]
    fn appends_are_validated() {
        let ok = NewEvent::new("order-1", "OrderPlaced", json!({"n": 1})).tagged("customer:7");
        assert!(AppendRequest::new(vec![ok.clone()]).validate().is_ok());
        let err = AppendRequest::new(vec![]).validate().unwrap_err();
        assert_eq!((err.field, err.reason), (Field::Events, Reason::Empty));
        let mut bad = ok.clone();
        bad.stream = String::new();
        assert_eq!(
            AppendRequest::new(vec![bad]).validate().unwrap_err().field,
            Field::Stream
        );
        let mut nul = ok.clone();
        nul.payload = json!({"deep": [1, {"x": "a\u{0}b"}]});
        let err = AppendRequest::new(vec![nul]).validate().unwrap_err();
        assert_eq!((err.field, err.reason), (Field::Payload, Reason::NulInJson));
        let mut nul_key = ok.clone();
        nul_key.payload = json!({"k\u{0}": 1});
        assert_eq!(
            AppendRequest::new(vec![nul_key])
                .validate()
                .unwrap_err()
                .field,
            Field::Payload
        );
        let bad = ok.clone().tagged("a\0");
        assert_eq!(
            AppendRequest::new(vec![bad]).validate().unwrap_err().field,
            Field::Tag
        );
        let err = AppendRequest::new(vec![ok.clone()])
            .idempotent("")
            .validate()
            .unwrap_err();
        assert_eq!(err.field, Field::IdempotencyKey);
        let err = AppendRequest::new(vec![ok])
            .on_condition(EventQuery::all().of_type("\n"), None)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, Field::EventType);
    }

    #[test]
    fn queries_match_streams_types_and_all_tags() {
        let event = StoredEvent {
            id: EventId::random(),
            position: EventPosition::new(3).unwrap(),
            stream: "s".into(),
            event_type: "T".into(),
            payload: json!(null),
            tags: vec!["a".into(), "b".into()],
            recorded_at: Timestamp::UNIX_EPOCH,
        };
        assert!(EventQuery::all().matches(&event));
        assert!(
            EventQuery::stream("s")
                .of_type("T")
                .with_tag("a")
                .matches(&event)
        );
        assert!(!EventQuery::stream("x").matches(&event));
        assert!(
            !EventQuery::all()
                .with_tag("a")
                .with_tag("c")
                .matches(&event)
        );
        assert!(!EventQuery::all().of_type("U").matches(&event));
    }

    #[test]
    fn read_options_admit_by_direction() {
        let p = |n| EventPosition::new(n).unwrap();
        let fwd = ReadOptions::forwards().starting_after(Some(p(5)));
        assert!(fwd.admits(p(6)) && !fwd.admits(p(5)));
        let back = ReadOptions::backwards().starting_after(Some(p(5)));
        assert!(back.admits(p(4)) && !back.admits(p(5)));
        assert_eq!(
            ReadOptions::forwards()
                .with_limit(0)
                .validate()
                .unwrap_err()
                .reason,
            Reason::Zero
        );
    }
}
