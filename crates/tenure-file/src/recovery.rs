//! Recovery: checking the header, replaying every whole record into an [`EventLog`], and
//! deciding what to do with the first record that is not whole.
//!
//! # The rule
//!
//! Records are read in order from the header on. The first record that is not whole (its
//! frame header or payload runs past the end of the file, its length is 0 or above
//! [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES), or its checksum does not match) at offset `o`
//! is either a **torn tail** or **damage**:
//!
//! * if no whole record (a plausible length, a matching checksum, and a payload that parses as
//!   a record) starts anywhere after `o`, it is a torn tail: what a crash in the middle of the
//!   last write leaves. The file is cut back to `o`, with a warning; nothing before `o` is lost,
//!   and nothing after it was whole.
//! * if a whole record starts after `o`, something damaged the file in its middle (a write
//!   cannot tear a record that already had a successor): opening fails with
//!   [`FileError::Corrupt`] naming `o`, and the file is not touched.
//!
//! A record whose checksum matches but that does not parse, or that cannot follow the log
//! (positions not increasing, a bookmark on a missing event), is damage too, wherever it is: a
//! torn write cannot produce it.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use tenure_memory::EventLog;

use crate::FileError;
use crate::crc_index::PrefixCrcs;
use crate::format::{self, FRAME_HEADER_LEN, FrameHeader, HEADER_LEN, HeaderCheck, Record};
use crate::journal::sync_parent_dir;

/// What opening found in the file and did to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Whether the file was created (or found empty, or with an unfinished header) and given a
    /// fresh header.
    pub created: bool,
    /// The number of whole records replayed.
    pub records: u64,
    /// The number of events they held.
    pub events: u64,
    /// The file's length after recovery: the end of its last whole record.
    pub bytes: u64,
    /// What was cut off the end of the file, if anything.
    pub cut: Option<Cut>,
}

/// Bytes cut off the end of the file by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cut {
    /// Where the cut was made: the offset of the first record that was not whole.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// Why the record at `offset` was not whole.
    pub reason: String,
    /// `false` for a torn tail. `true` when whole records followed the damage and were
    /// discarded, which happens only with
    /// [`FileOptions::truncate_damage`](crate::FileOptions::truncate_damage).
    pub discarded_records: bool,
}

/// The outcome of a successful recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub(crate) log: EventLog,
    pub(crate) report: RecoveryReport,
}

/// Recovers the log file `file` (opened for reading and appending, and locked).
pub(crate) fn recover(
    file: &mut File,
    path: &Path,
    truncate_damage: bool,
) -> Result<Recovered, FileError> {
    let io = |action| move |err| FileError::from_io(path, action, err);
    let len = file.metadata().map_err(io("inspect"))?.len();
    let mut head = Vec::with_capacity(HEADER_LEN as usize);
    file.seek(SeekFrom::Start(0)).map_err(io("read"))?;
    Read::take(&mut *file, HEADER_LEN)
        .read_to_end(&mut head)
        .map_err(io("read"))?;
    match format::check_header(&head) {
        HeaderCheck::Ours => {}
        HeaderCheck::Unfinished => {
            if len > 0 {
                tracing::warn!(
                    path = %path.display(),
                    bytes = len,
                    "tenure-file: the log's header was never completed (a crash while creating \
                     it); starting an empty log"
                );
            }
            write_header(file, path)?;
            return Ok(Recovered {
                log: EventLog::new(),
                report: RecoveryReport {
                    created: true,
                    bytes: HEADER_LEN,
                    ..RecoveryReport::default()
                },
            });
        }
        HeaderCheck::NotOurs => {
            return Err(FileError::NotOurs {
                path: path.to_path_buf(),
            });
        }
        HeaderCheck::Damaged => {
            return Err(FileError::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                reason: "the file header's checksum does not match".to_owned(),
            });
        }
        HeaderCheck::Version(version) => {
            return Err(FileError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
                supported: format::VERSION,
            });
        }
    }

    let mut log = EventLog::new();
    let mut report = RecoveryReport::default();
    let (end, stop) = replay(file, len, &mut log, &mut report).map_err(io("read"))?;
    report.bytes = end;
    let Some(stop) = stop else {
        return Ok(Recovered { log, report });
    };
    let next = if stop.whole {
        None
    } else {
        next_whole_record(file, stop.offset, len).map_err(io("read"))?
    };
    let damage = stop.whole || next.is_some();
    let reason = match next {
        Some(next) => format!(
            "{}; a whole record follows at offset {next}, so this is not a torn tail",
            stop.reason
        ),
        None => stop.reason,
    };
    if damage && !truncate_damage {
        return Err(FileError::Corrupt {
            path: path.to_path_buf(),
            offset: stop.offset,
            reason,
        });
    }
    let cut = len - stop.offset;
    if damage {
        tracing::warn!(
            path = %path.display(),
            offset = stop.offset,
            bytes = cut,
            reason = %reason,
            "tenure-file: damage in the log; truncate_damage is set, so the file is cut at the \
             damage and every record after it is DISCARDED"
        );
    } else {
        tracing::warn!(
            path = %path.display(),
            offset = stop.offset,
            bytes = cut,
            reason = %reason,
            "tenure-file: torn tail (an interrupted write); cutting the log back to its last \
             whole record"
        );
    }
    file.set_len(stop.offset).map_err(io("truncate"))?;
    file.sync_all().map_err(io("sync"))?;
    report.cut = Some(Cut {
        offset: stop.offset,
        bytes: cut,
        reason,
        discarded_records: damage,
    });
    Ok(Recovered { log, report })
}

/// Gives an empty (or unfinished) file its header, durably.
fn write_header(file: &mut File, path: &Path) -> Result<(), FileError> {
    let io = |action| move |err| FileError::from_io(path, action, err);
    file.set_len(0).map_err(io("truncate"))?;
    file.write_all(&format::header()).map_err(io("write"))?;
    file.sync_all().map_err(io("sync"))?;
    sync_parent_dir(path)
}

/// Where replay stopped before the end of the file.
#[derive(Debug)]
struct Stop {
    /// The offset of the record that was not replayed.
    offset: u64,
    /// Why.
    reason: String,
    /// Whether the record was whole (its checksum matched) but unusable: damage, never a torn
    /// tail.
    whole: bool,
}

/// Replays records from the header on; returns the end of the last one replayed and, if it
/// stopped before the end of the file, where and why.
fn replay(
    file: &mut File,
    len: u64,
    log: &mut EventLog,
    report: &mut RecoveryReport,
) -> io::Result<(u64, Option<Stop>)> {
    file.seek(SeekFrom::Start(HEADER_LEN))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut offset = HEADER_LEN;
    let mut payload = Vec::new();
    let torn = |offset, reason: String| {
        Ok((
            offset,
            Some(Stop {
                offset,
                reason,
                whole: false,
            }),
        ))
    };
    while offset < len {
        let remaining = len - offset;
        if remaining < FRAME_HEADER_LEN as u64 {
            return torn(
                offset,
                format!("{remaining} bytes, too few for a record's frame header"),
            );
        }
        let mut head = [0u8; FRAME_HEADER_LEN];
        reader.read_exact(&mut head)?;
        let frame = FrameHeader::parse(head);
        let Some(plen) = frame.plausible_len() else {
            return torn(
                offset,
                format!(
                    "a record length of {} bytes is impossible",
                    u32::from_le_bytes(frame.len_bytes)
                ),
            );
        };
        let available = remaining - FRAME_HEADER_LEN as u64;
        if plen as u64 > available {
            return torn(
                offset,
                format!("a record of {plen} bytes with only {available} bytes left in the file"),
            );
        }
        payload.resize(plen, 0);
        reader.read_exact(&mut payload)?;
        if format::record_crc(frame.len_bytes, &payload) != frame.crc {
            return torn(offset, "the record's checksum does not match".to_owned());
        }
        let applied = Record::decode(&payload).and_then(|record| {
            let events = record.event_count();
            record.apply(log).map(|()| events)
        });
        match applied {
            Ok(events) => {
                report.records += 1;
                report.events += events as u64;
            }
            Err(reason) => {
                return Ok((
                    offset,
                    Some(Stop {
                        offset,
                        reason: format!("a record with a valid checksum is unusable: {reason}"),
                        whole: true,
                    }),
                ));
            }
        }
        offset += (FRAME_HEADER_LEN + plen) as u64;
    }
    Ok((offset, None))
}

/// The offset of the first whole record that starts after `damaged` (exclusive), if any.
///
/// It reads the rest of the file into memory: this runs only when a record is not whole, and
/// the whole log is about to be held in memory anyway.
fn next_whole_record(file: &mut File, damaged: u64, len: u64) -> io::Result<Option<u64>> {
    let start = damaged + 1;
    if start >= len {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(start))?;
    let mut rest = Vec::new();
    Read::take(&mut *file, len - start).read_to_end(&mut rest)?;
    Ok(find_whole_record(&rest).map(|at| start + at as u64))
}

/// The first index of `bytes` at which a whole record starts.
///
/// Linear in `bytes.len()`: each candidate's checksum comes from [`PrefixCrcs`] in constant
/// time, however long a length its frame header claims.
pub(crate) fn find_whole_record(bytes: &[u8]) -> Option<usize> {
    let crcs = PrefixCrcs::new(bytes);
    (0..bytes.len()).find(|&at| is_whole_record(bytes, &crcs, at))
}

fn is_whole_record(bytes: &[u8], crcs: &PrefixCrcs<'_>, at: usize) -> bool {
    let Some(head) = bytes[at..].first_chunk::<FRAME_HEADER_LEN>() else {
        return false;
    };
    let frame = FrameHeader::parse(*head);
    let Some(plen) = frame.plausible_len() else {
        return false;
    };
    let (start, end) = (at + FRAME_HEADER_LEN, at + FRAME_HEADER_LEN + plen);
    // Every record is a JSON object as serde_json writes it: a cheap first test that spares
    // the checksum for all but one candidate in 256 of random bytes.
    if bytes.get(start) != Some(&b'{') {
        return false;
    }
    if crcs.crc_after(&frame.len_bytes, start, end) != Some(frame.crc) {
        return false;
    }
    bytes
        .get(start..end)
        .is_some_and(|payload| Record::decode(payload).is_ok())
}
