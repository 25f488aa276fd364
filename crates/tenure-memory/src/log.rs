//! The event log and bookmarks, in memory, with an optional journal that persists every change
//! before it is applied (the file backend's hook).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::ops::Range;

use tenure_ports::domain::{Field, Reason, ValidationError};
use tenure_ports::{
    AppendRequest, Bookmark, Direction, EventId, EventPosition, EventQuery, EventStorageError,
    Fence, FencingToken, ReadOptions, StoredEvent, Timestamp, normalize_tags, validate_bookmark,
    validate_reader,
};

/// A change to the log, as a journal must persist it.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    /// Events were appended (under an idempotency key, if any).
    Appended {
        /// The events, with their positions, ids and timestamps.
        events: &'a [StoredEvent],
        /// The append's idempotency key.
        idempotency_key: Option<&'a str>,
    },
    /// A bookmark was placed or moved.
    BookmarkPlaced(&'a Bookmark),
    /// A bookmark was placed or moved by a write fenced by `token` (the reader's fence is
    /// raised to it).
    BookmarkFenced {
        /// The bookmark as placed.
        bookmark: &'a Bookmark,
        /// The token of the tenure the write was made under.
        token: FencingToken,
    },
    /// A bookmark was removed.
    BookmarkRemoved(&'a str),
    /// An acquisition of `lease_name` by `owner` issued fencing token `token`. Journaled
    /// before the acquisition answers (never for a renewal), so that a persistent backend
    /// continues above the highest token it ever issued after a restart, while the lease
    /// itself is not persisted.
    TokenIssued {
        /// The lease.
        lease_name: &'a str,
        /// The owner the token was issued to.
        owner: &'a str,
        /// The token.
        token: FencingToken,
    },
}

/// The highest fencing token a lease was ever issued, and to whom: what a persistent backend
/// keeps of a lease across a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedToken {
    /// The owner of the tenure that token named.
    pub owner: String,
    /// The token.
    pub token: FencingToken,
}

/// Persists changes to the log before they are applied in memory.
///
/// [`Journal::record`] runs while the log is locked: when it fails, the change is not applied
/// and the caller gets its error. Replaying every recorded change in order with
/// [`EventLog::apply`] rebuilds the log.
pub trait Journal: Send + Debug {
    /// Persists `change`; the in-memory log applies it only if this succeeds.
    fn record(&mut self, change: Change<'_>) -> Result<(), EventStorageError>;
}

/// Events and bookmarks, in memory. [`crate::MemoryEventStorage`] keeps one behind a mutex.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Vec<StoredEvent>,
    by_key: HashMap<String, Range<usize>>,
    bookmarks: BTreeMap<String, Bookmark>,
    tokens: BTreeMap<String, IssuedToken>,
    /// Each reader's fence: the highest token that wrote its bookmark.
    fences: BTreeMap<String, FencingToken>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        EventLog::default()
    }

    /// The highest token issued for each lease, by lease name, as replayed from
    /// [`Change::TokenIssued`] records.
    pub fn issued_tokens(&self) -> &BTreeMap<String, IssuedToken> {
        &self.tokens
    }

    /// The number of stored events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event is stored.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The position of the newest event.
    pub fn last_position(&self) -> Option<EventPosition> {
        self.events.last().map(|e| e.position)
    }

    /// Appends as [`EventStorage::append`](tenure_ports::EventStorage::append) says: validates,
    /// replays an idempotent append, checks the condition, records the change in `journal` and
    /// applies it.
    pub fn append(
        &mut self,
        request: &AppendRequest,
        now: Timestamp,
        journal: Option<&mut dyn Journal>,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        request.validate()?;
        if let Some(range) = request
            .idempotency_key
            .as_ref()
            .and_then(|key| self.by_key.get(key))
        {
            return Ok(self.events[range.clone()].to_vec());
        }
        if let Some(condition) = &request.condition {
            let options = ReadOptions::forwards()
                .starting_after(condition.after)
                .with_limit(1);
            if let Some(conflict) = self.matching(&condition.query, options).next() {
                return Err(EventStorageError::AppendConflict {
                    conflicting: conflict.position,
                });
            }
        }
        let first = self.last_position().map_or(1, |p| p.get() + 1);
        let mut events = Vec::with_capacity(request.events.len());
        for (offset, event) in (0u64..).zip(&request.events) {
            let position = EventPosition::new(first + offset)
                .ok_or_else(|| EventStorageError::internal("event positions are exhausted"))?;
            events.push(StoredEvent {
                id: EventId::random(),
                position,
                stream: event.stream.clone(),
                event_type: event.event_type.clone(),
                payload: event.payload.clone(),
                tags: normalize_tags(&event.tags),
                recorded_at: now,
            });
        }
        let change = Change::Appended {
            events: &events,
            idempotency_key: request.idempotency_key.as_deref(),
        };
        if let Some(journal) = journal {
            journal.record(change)?;
        }
        self.apply(change)?;
        Ok(events)
    }

    /// Reads as [`EventStorage::read_events`](tenure_ports::EventStorage::read_events) says.
    pub fn read(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        query.validate()?;
        options.validate()?;
        Ok(self
            .matching(query, options)
            .take(options.limit)
            .cloned()
            .collect())
    }

    fn matching<'a>(
        &'a self,
        query: &'a EventQuery,
        options: ReadOptions,
    ) -> Box<dyn Iterator<Item = &'a StoredEvent> + 'a> {
        // Positions increase along the vector: find the start by binary search.
        let split = match options.start {
            None => match options.direction {
                Direction::Forwards => 0,
                Direction::Backwards => self.events.len(),
            },
            Some(start) => match options.direction {
                Direction::Forwards => self.events.partition_point(|e| e.position <= start),
                Direction::Backwards => self.events.partition_point(|e| e.position < start),
            },
        };
        let matches = move |e: &&StoredEvent| query.matches(e);
        match options.direction {
            Direction::Forwards => Box::new(self.events[split..].iter().filter(matches)),
            Direction::Backwards => Box::new(self.events[..split].iter().rev().filter(matches)),
        }
    }

    /// The bookmark `reader` would place at `position`: its name and tags valid, `position`
    /// that of a stored event.
    fn checked_bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        now: Timestamp,
    ) -> Result<Bookmark, EventStorageError> {
        validate_bookmark(reader, tags)?;
        if self
            .events
            .binary_search_by_key(&position, |e| e.position)
            .is_err()
        {
            return Err(ValidationError::new(
                Field::Position,
                Reason::NoSuchEvent {
                    position: position.get(),
                },
            )
            .into());
        }
        Ok(Bookmark {
            reader: reader.to_owned(),
            position,
            tags: normalize_tags(tags),
            placed_at: now,
        })
    }

    /// Places a bookmark, which must point at a stored event.
    pub fn bookmark(
        &mut self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        now: Timestamp,
        journal: Option<&mut dyn Journal>,
    ) -> Result<Bookmark, EventStorageError> {
        let bookmark = self.checked_bookmark(reader, position, tags, now)?;
        let change = Change::BookmarkPlaced(&bookmark);
        if let Some(journal) = journal {
            journal.record(change)?;
        }
        self.apply(change)?;
        Ok(bookmark)
    }

    /// Places `reader`'s bookmark as [`bookmark`](Self::bookmark) does, fenced by `fence`
    /// (see [`EventStorage::bookmark_fenced`](tenure_ports::EventStorage::bookmark_fenced)):
    /// `lease_token` is the lease's current token, read by the caller under the lease's lock,
    /// which it holds until this returns.
    #[allow(clippy::too_many_arguments)]
    pub fn bookmark_fenced(
        &mut self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        fence: &Fence,
        lease_token: Option<FencingToken>,
        now: Timestamp,
        journal: Option<&mut dyn Journal>,
    ) -> Result<Bookmark, EventStorageError> {
        let bookmark = self.checked_bookmark(reader, position, tags, now)?;
        let newer = [self.fences.get(reader).copied(), lease_token]
            .into_iter()
            .flatten()
            .filter(|t| *t > fence.token)
            .max();
        if let Some(newer) = newer {
            return Err(EventStorageError::Fenced {
                reader: reader.to_owned(),
                lease_name: fence.lease_name.to_string(),
                token: fence.token.get(),
                newer: newer.get(),
            });
        }
        let change = Change::BookmarkFenced {
            bookmark: &bookmark,
            token: fence.token,
        };
        if let Some(journal) = journal {
            journal.record(change)?;
        }
        self.apply(change)?;
        Ok(bookmark)
    }

    /// `reader`'s bookmark.
    pub fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        validate_reader(reader)?;
        Ok(self.bookmarks.get(reader).cloned())
    }

    /// Removes `reader`'s bookmark, if any.
    pub fn remove_bookmark(
        &mut self,
        reader: &str,
        journal: Option<&mut dyn Journal>,
    ) -> Result<(), EventStorageError> {
        validate_reader(reader)?;
        if !self.bookmarks.contains_key(reader) {
            return Ok(());
        }
        let change = Change::BookmarkRemoved(reader);
        if let Some(journal) = journal {
            journal.record(change)?;
        }
        self.apply(change)
    }

    /// Every bookmark, by reader.
    pub fn bookmarks(&self) -> Vec<Bookmark> {
        self.bookmarks.values().cloned().collect()
    }

    /// Applies a change without validating or journaling it: how a journal replays what it
    /// recorded. Fails with [`EventStorageError::Corrupt`] if the change cannot follow the log
    /// (positions not increasing, a bookmark on a missing event).
    pub fn apply(&mut self, change: Change<'_>) -> Result<(), EventStorageError> {
        match change {
            Change::Appended {
                events,
                idempotency_key,
            } => {
                self.check_follows(events)?;
                let start = self.events.len();
                self.events.extend_from_slice(events);
                if let Some(key) = idempotency_key {
                    self.by_key.insert(key.to_owned(), start..self.events.len());
                }
            }
            Change::BookmarkPlaced(bookmark) => {
                if self
                    .events
                    .binary_search_by_key(&bookmark.position, |e| e.position)
                    .is_err()
                {
                    return Err(EventStorageError::corrupt(format!(
                        "bookmark of {:?} points at missing event {}",
                        bookmark.reader, bookmark.position
                    )));
                }
                self.bookmarks
                    .insert(bookmark.reader.clone(), bookmark.clone());
            }
            Change::BookmarkFenced { bookmark, token } => {
                self.apply(Change::BookmarkPlaced(bookmark))?;
                let fence = self.fences.entry(bookmark.reader.clone()).or_insert(token);
                *fence = (*fence).max(token);
            }
            Change::BookmarkRemoved(reader) => {
                // The fence stays: a removed bookmark cannot be put back by an older tenure.
                self.bookmarks.remove(reader);
            }
            Change::TokenIssued {
                lease_name,
                owner,
                token,
            } => {
                let issued = IssuedToken {
                    owner: owner.to_owned(),
                    token,
                };
                match self.tokens.get_mut(lease_name) {
                    Some(known) if known.token >= token => {}
                    Some(known) => *known = issued,
                    None => {
                        self.tokens.insert(lease_name.to_owned(), issued);
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies a [`Change::Appended`] whose events the caller owns, moving them into the log
    /// instead of copying them: how a journal replays a large log without cloning every
    /// payload. Same checks as [`EventLog::apply`].
    pub fn apply_appended(
        &mut self,
        events: Vec<StoredEvent>,
        idempotency_key: Option<&str>,
    ) -> Result<(), EventStorageError> {
        self.check_follows(&events)?;
        let start = self.events.len();
        self.events.extend(events);
        if let Some(key) = idempotency_key {
            self.by_key.insert(key.to_owned(), start..self.events.len());
        }
        Ok(())
    }

    /// Fails with [`EventStorageError::Corrupt`] unless `events`' positions increase from the
    /// log's last one.
    fn check_follows(&self, events: &[StoredEvent]) -> Result<(), EventStorageError> {
        let mut last = self.last_position();
        for event in events {
            if last.is_some_and(|l| event.position <= l) {
                return Err(EventStorageError::corrupt(format!(
                    "event position {} does not follow {}",
                    event.position,
                    last.map_or(0, EventPosition::get)
                )));
            }
            last = Some(event.position);
        }
        Ok(())
    }
}
