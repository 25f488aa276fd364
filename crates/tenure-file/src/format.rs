//! The on-disk format: a file header, then framed records.
//!
//! ```text
//! header  (16 bytes)  magic "TENURLOG" | version u32 LE | CRC-32 of the 12 bytes before it (u32 LE)
//! record  (8 + n)     length n u32 LE  | CRC-32 of (length bytes ++ payload) (u32 LE) | payload
//! ```
//!
//! A payload is one JSON object with one key, saying what it is: `{"append": {...}}` (its events
//! and idempotency key), `{"bookmark": {...}}`, `{"fenced_bookmark": {...}}` (a bookmark with the token it was fenced by), `{"unbookmark":
//! {...}}` or `{"token": {...}}` (a
//! lease's new fencing token, written at each acquisition), exactly the
//! [`Change`]s that the in-memory log hands its journal. (Externally tagged: serde parses it in
//! one pass, where a `"kind"` field inside the object would make it buffer every record.) The
//! checksum covers the length too, so that a damaged length is caught like damaged data.

use serde::{Deserialize, Serialize};
use tenure_memory::{Change, EventLog};
use tenure_ports::{Bookmark, EventId, EventPosition, FencingToken, StoredEvent, Timestamp};

/// The first eight bytes of every log file.
pub(crate) const MAGIC: [u8; 8] = *b"TENURLOG";

/// The version of the format this crate writes and reads.
pub(crate) const VERSION: u32 = 1;

/// The length of the file header.
pub(crate) const HEADER_LEN: u64 = 16;

/// The length of a record's frame header (length and checksum).
pub(crate) const FRAME_HEADER_LEN: usize = 8;

/// The largest payload of one record: 256 MiB. A larger append is refused before anything is
/// written; a length above it found on disk is damage.
pub const MAX_RECORD_BYTES: usize = 256 * 1024 * 1024;

/// The 16 bytes every log file starts with.
pub(crate) fn header() -> [u8; HEADER_LEN as usize] {
    let mut header = [0u8; HEADER_LEN as usize];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32fast::hash(&header[..12]);
    header[12..].copy_from_slice(&crc.to_le_bytes());
    header
}

/// What a file's first bytes say about it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderCheck {
    /// Our header, in the version we read.
    Ours,
    /// Empty, or a prefix of our header: a file whose creation was interrupted.
    Unfinished,
    /// Not a log of ours.
    NotOurs,
    /// Our magic, but the header's checksum does not match.
    Damaged,
    /// Our magic and a valid header, in another version.
    Version(u32),
}

/// Classifies a file by its first bytes (at most [`HEADER_LEN`]; fewer if the file is shorter).
pub(crate) fn check_header(bytes: &[u8]) -> HeaderCheck {
    let ours = header();
    if bytes.len() < ours.len() {
        return if ours.starts_with(bytes) {
            HeaderCheck::Unfinished
        } else if MAGIC.starts_with(&bytes[..bytes.len().min(MAGIC.len())]) {
            HeaderCheck::Damaged
        } else {
            HeaderCheck::NotOurs
        };
    }
    if bytes[..8] != MAGIC {
        return HeaderCheck::NotOurs;
    }
    let crc = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    if crc32fast::hash(&bytes[..12]) != crc {
        return HeaderCheck::Damaged;
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version == VERSION {
        HeaderCheck::Ours
    } else {
        HeaderCheck::Version(version)
    }
}

/// The checksum of a record: CRC-32 (IEEE) of its length bytes followed by its payload.
pub(crate) fn record_crc(len: [u8; 4], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len);
    hasher.update(payload);
    hasher.finalize()
}

/// A frame header read from disk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameHeader {
    /// The payload's length as written.
    pub(crate) len_bytes: [u8; 4],
    /// The checksum as written.
    pub(crate) crc: u32,
}

impl FrameHeader {
    pub(crate) fn parse(bytes: [u8; FRAME_HEADER_LEN]) -> Self {
        FrameHeader {
            len_bytes: [bytes[0], bytes[1], bytes[2], bytes[3]],
            crc: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    /// The payload length, if it is one a record can have (1 to [`MAX_RECORD_BYTES`]).
    pub(crate) fn plausible_len(&self) -> Option<usize> {
        let len = usize::try_from(u32::from_le_bytes(self.len_bytes)).ok()?;
        (1..=MAX_RECORD_BYTES).contains(&len).then_some(len)
    }
}

/// Why a change could not be framed.
#[derive(Debug)]
pub(crate) enum EncodeError {
    /// The payload is larger than [`MAX_RECORD_BYTES`].
    TooLarge(usize),
    /// serde_json refused it (it cannot for these types; kept rather than unwrapped).
    Json(serde_json::Error),
}

/// Frames `change` into `out` (cleared first): frame header, then payload of at most `max`
/// bytes (at most [`MAX_RECORD_BYTES`]).
pub(crate) fn encode(change: Change<'_>, max: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.clear();
    out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
    let record = RecordRef::from_change(change);
    serde_json::to_writer(&mut *out, &record).map_err(EncodeError::Json)?;
    let payload_len = out.len() - FRAME_HEADER_LEN;
    let len = u32::try_from(payload_len)
        .ok()
        .filter(|_| payload_len <= max.min(MAX_RECORD_BYTES))
        .ok_or(EncodeError::TooLarge(payload_len))?;
    let len_bytes = len.to_le_bytes();
    let crc = record_crc(len_bytes, &out[FRAME_HEADER_LEN..]);
    out[..4].copy_from_slice(&len_bytes);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A record as written: borrowed from the change, so that nothing is cloned to write it.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum RecordRef<'a> {
    Append {
        #[serde(skip_serializing_if = "Option::is_none")]
        key: Option<&'a str>,
        events: Vec<EventRef<'a>>,
    },
    Bookmark {
        reader: &'a str,
        position: u64,
        tags: &'a [String],
        placed_at: i64,
    },
    FencedBookmark {
        reader: &'a str,
        position: u64,
        tags: &'a [String],
        placed_at: i64,
        token: u64,
    },
    Unbookmark {
        reader: &'a str,
    },
    Token {
        lease: &'a str,
        owner: &'a str,
        token: u64,
    },
}

#[derive(Serialize)]
struct EventRef<'a> {
    id: String,
    position: u64,
    stream: &'a str,
    event_type: &'a str,
    payload: &'a serde_json::Value,
    tags: &'a [String],
    recorded_at: i64,
}

impl<'a> RecordRef<'a> {
    fn from_change(change: Change<'a>) -> Self {
        match change {
            Change::Appended {
                events,
                idempotency_key,
            } => RecordRef::Append {
                key: idempotency_key,
                events: events
                    .iter()
                    .map(|e| EventRef {
                        id: e.id.to_string(),
                        position: e.position.get(),
                        stream: &e.stream,
                        event_type: &e.event_type,
                        payload: &e.payload,
                        tags: &e.tags,
                        recorded_at: e.recorded_at.as_micros(),
                    })
                    .collect(),
            },
            Change::BookmarkPlaced(bookmark) => RecordRef::Bookmark {
                reader: &bookmark.reader,
                position: bookmark.position.get(),
                tags: &bookmark.tags,
                placed_at: bookmark.placed_at.as_micros(),
            },
            Change::BookmarkFenced { bookmark, token } => RecordRef::FencedBookmark {
                reader: &bookmark.reader,
                position: bookmark.position.get(),
                tags: &bookmark.tags,
                placed_at: bookmark.placed_at.as_micros(),
                token: token.get(),
            },
            Change::BookmarkRemoved(reader) => RecordRef::Unbookmark { reader },
            Change::TokenIssued {
                lease_name,
                owner,
                token,
            } => RecordRef::Token {
                lease: lease_name,
                owner,
                token: token.get(),
            },
        }
    }
}

/// A record as read back.
#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Record {
    Append {
        #[serde(default)]
        key: Option<String>,
        events: Vec<EventOwned>,
    },
    Bookmark {
        reader: String,
        position: u64,
        tags: Vec<String>,
        placed_at: i64,
    },
    FencedBookmark {
        reader: String,
        position: u64,
        tags: Vec<String>,
        placed_at: i64,
        token: u64,
    },
    Unbookmark {
        reader: String,
    },
    Token {
        lease: String,
        owner: String,
        token: u64,
    },
}

#[derive(Deserialize, Debug)]
pub(crate) struct EventOwned {
    id: String,
    position: u64,
    stream: String,
    event_type: String,
    payload: serde_json::Value,
    tags: Vec<String>,
    recorded_at: i64,
}

impl Record {
    /// Parses a payload whose checksum matched.
    pub(crate) fn decode(payload: &[u8]) -> Result<Record, String> {
        serde_json::from_slice(payload).map_err(|e| format!("the record is not valid: {e}"))
    }

    /// The number of events the record carries.
    pub(crate) fn event_count(&self) -> usize {
        match self {
            Record::Append { events, .. } => events.len(),
            _ => 0,
        }
    }

    /// Replays the record into `log`. Fails, saying why, if the record cannot follow the log.
    pub(crate) fn apply(self, log: &mut EventLog) -> Result<(), String> {
        match self {
            Record::Append { key, events } => {
                let events = events
                    .into_iter()
                    .map(EventOwned::into_stored)
                    .collect::<Result<Vec<_>, _>>()?;
                if events.is_empty() {
                    return Err("an append record without events".to_owned());
                }
                log.apply_appended(events, key.as_deref())
                    .map_err(|e| e.to_string())
            }
            Record::Bookmark {
                reader,
                position,
                tags,
                placed_at,
            } => {
                let bookmark = bookmark_of(reader, position, tags, placed_at)?;
                log.apply(Change::BookmarkPlaced(&bookmark))
                    .map_err(|e| e.to_string())
            }
            Record::FencedBookmark {
                reader,
                position,
                tags,
                placed_at,
                token,
            } => {
                let bookmark = bookmark_of(reader, position, tags, placed_at)?;
                let token = FencingToken::new(token).ok_or_else(|| {
                    format!("a fenced bookmark of {:?} with token 0", bookmark.reader)
                })?;
                log.apply(Change::BookmarkFenced {
                    bookmark: &bookmark,
                    token,
                })
                .map_err(|e| e.to_string())
            }
            Record::Unbookmark { reader } => log
                .apply(Change::BookmarkRemoved(&reader))
                .map_err(|e| e.to_string()),
            Record::Token {
                lease,
                owner,
                token,
            } => {
                let token = FencingToken::new(token)
                    .ok_or_else(|| format!("a token record of lease {lease:?} with token 0"))?;
                log.apply(Change::TokenIssued {
                    lease_name: &lease,
                    owner: &owner,
                    token,
                })
                .map_err(|e| e.to_string())
            }
        }
    }
}

impl EventOwned {
    fn into_stored(self) -> Result<StoredEvent, String> {
        Ok(StoredEvent {
            id: EventId::parse(&self.id)
                .ok_or_else(|| format!("event id {:?} is not a UUID", self.id))?,
            position: position_of(self.position)?,
            stream: self.stream,
            event_type: self.event_type,
            payload: self.payload,
            tags: self.tags,
            recorded_at: Timestamp::from_micros(self.recorded_at),
        })
    }
}

/// A bookmark as a record stores it.
fn bookmark_of(
    reader: String,
    position: u64,
    tags: Vec<String>,
    placed_at: i64,
) -> Result<Bookmark, String> {
    Ok(Bookmark {
        reader,
        position: position_of(position)?,
        tags,
        placed_at: Timestamp::from_micros(placed_at),
    })
}

fn position_of(value: u64) -> Result<EventPosition, String> {
    EventPosition::new(value).ok_or_else(|| format!("{value} is not an event position"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crc_is_ieee_crc32() {
        // The check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn header_is_recognised() {
        let h = header();
        assert_eq!(check_header(&h), HeaderCheck::Ours);
        assert_eq!(check_header(&h[..5]), HeaderCheck::Unfinished);
        assert_eq!(check_header(&[]), HeaderCheck::Unfinished);
        assert_eq!(
            check_header(b"{\"hello\": 1}\n\n\n\n"),
            HeaderCheck::NotOurs
        );
        assert_eq!(check_header(b"PK"), HeaderCheck::NotOurs);
        let mut damaged = h;
        damaged[9] ^= 1;
        assert_eq!(check_header(&damaged), HeaderCheck::Damaged);
        let mut v2 = h;
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32fast::hash(&v2[..12]);
        v2[12..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(check_header(&v2), HeaderCheck::Version(2));
    }

    #[test]
    fn records_round_trip() {
        let event = StoredEvent {
            id: EventId::random(),
            position: EventPosition::new(1).unwrap(),
            stream: "s".into(),
            event_type: "T".into(),
            payload: json!({"n": [1, 2.5, "x", null]}),
            tags: vec!["a".into()],
            recorded_at: Timestamp::from_micros(-5),
        };
        let mut buf = Vec::new();
        let change = Change::Appended {
            events: std::slice::from_ref(&event),
            idempotency_key: Some("k"),
        };
        encode(change, MAX_RECORD_BYTES, &mut buf).unwrap();
        let header = FrameHeader::parse(buf[..8].try_into().unwrap());
        let len = header.plausible_len().unwrap();
        assert_eq!(len, buf.len() - 8);
        assert_eq!(record_crc(header.len_bytes, &buf[8..]), header.crc);
        let mut log = EventLog::new();
        let record = Record::decode(&buf[8..]).unwrap();
        assert_eq!(record.event_count(), 1);
        record.apply(&mut log).unwrap();
        let read = log
            .read(
                &tenure_ports::EventQuery::all(),
                tenure_ports::ReadOptions::forwards(),
            )
            .unwrap();
        assert_eq!(read, vec![event]);
    }
}
