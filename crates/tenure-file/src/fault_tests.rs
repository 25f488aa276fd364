//! Failures of the disk, injected under the journal: a full disk part-way through a record, a
//! failing sync, a partial write that cannot be cut off.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::json;
use tenure_ports::{
    AppendRequest, EventQuery, EventStorage, EventStorageError, NewEvent, ReadOptions,
};

use crate::journal::LogFile;
use crate::{FileError, FileEventStorage, FileOptions};

/// A file on a disk with `budget` bytes free, whose sync and truncation can be made to fail.
#[derive(Debug)]
struct Faulty {
    inner: File,
    knobs: Arc<Knobs>,
}

#[derive(Debug)]
struct Knobs {
    budget: AtomicU64,
    fail_sync: AtomicBool,
    fail_set_len: AtomicBool,
}

impl Knobs {
    fn new() -> Arc<Self> {
        Arc::new(Knobs {
            budget: AtomicU64::new(u64::MAX),
            fail_sync: AtomicBool::new(false),
            fail_set_len: AtomicBool::new(false),
        })
    }
}

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

impl LogFile for Faulty {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let budget = self.knobs.budget.load(Ordering::SeqCst);
        let fits = usize::try_from(budget)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        self.inner.write_all(&bytes[..fits])?;
        self.knobs
            .budget
            .store(budget - fits as u64, Ordering::SeqCst);
        if fits < bytes.len() {
            // What a full disk does: part of the write lands, then ENOSPC.
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        if self.knobs.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.inner.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.inner.sync_all()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        if self.knobs.fail_set_len.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.inner.set_len(len)
    }
}

fn open_faulty(path: &std::path::Path, knobs: &Arc<Knobs>) -> FileEventStorage {
    let knobs = Arc::clone(knobs);
    let mut options = FileOptions::new();
    options.max_record_bytes = 4096;
    FileEventStorage::open_wrapped(path, options, move |inner| {
        Box::new(Faulty { inner, knobs })
    })
    .unwrap()
}

fn one(n: u64) -> AppendRequest {
    AppendRequest::new(vec![NewEvent::new(
        "s",
        "T",
        json!({ "n": n, "pad": "x".repeat(100) }),
    )])
}

async fn numbers(storage: &FileEventStorage) -> Vec<u64> {
    storage
        .read_events(&EventQuery::all(), ReadOptions::forwards())
        .await
        .unwrap()
        .iter()
        .map(|e| e.payload["n"].as_u64().unwrap())
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn a_full_disk_fails_the_append_cleanly_and_the_storage_recovers_when_space_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.log");
    let knobs = Knobs::new();
    runtime().block_on(async {
        let storage = open_faulty(&path, &knobs);
        storage.append(&one(1)).await.unwrap();
        let len = storage.file_len();

        knobs.budget.store(10, Ordering::SeqCst);
        let err = storage.append(&one(2)).await.unwrap_err();
        assert!(matches!(err, EventStorageError::Io { .. }), "{err:?}");
        assert!(
            matches!(FileError::find(&err), Some(FileError::DiskFull { .. })),
            "{err:?}"
        );
        assert!(err.to_string().contains("no space left"), "{err}");
        assert_eq!(
            storage.file_len(),
            len,
            "nothing of the failed record is counted"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len,
            "the partial record was cut off"
        );
        assert_eq!(
            numbers(&storage).await,
            [1],
            "the failed append is not visible"
        );

        knobs.budget.store(u64::MAX, Ordering::SeqCst);
        let stored = storage.append(&one(3)).await.unwrap();
        assert_eq!(
            stored[0].position.get(),
            2,
            "positions continue after the failure"
        );
        storage.close().await.unwrap();
    });
    runtime().block_on(async {
        let storage = FileEventStorage::open(&path).unwrap();
        assert_eq!(storage.recovery().cut, None, "no fragment was left behind");
        assert_eq!(numbers(&storage).await, [1, 3]);
    });
}

#[test]
fn a_failed_sync_is_unconfirmed_and_the_storage_refuses_changes_until_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sync.log");
    let knobs = Knobs::new();
    runtime().block_on(async {
        let storage = open_faulty(&path, &knobs);
        storage.append(&one(1)).await.unwrap();
        knobs.fail_sync.store(true, Ordering::SeqCst);
        let err = storage.append(&one(2)).await.unwrap_err();
        assert!(err.is_unconfirmed(), "{err:?}");
        assert!(FileError::find(&err).is_some(), "{err:?}");
        knobs.fail_sync.store(false, Ordering::SeqCst);
        let err = storage.append(&one(3)).await.unwrap_err();
        assert!(
            matches!(FileError::find(&err), Some(FileError::Failed { .. })),
            "{err:?}"
        );
        let err = storage
            .bookmark("r", stored_position(1), &[])
            .await
            .unwrap_err();
        assert!(matches!(
            FileError::find(&err),
            Some(FileError::Failed { .. })
        ));
        assert_eq!(numbers(&storage).await, [1], "reads still work");
        storage.close().await.unwrap();
    });
    runtime().block_on(async {
        let storage = FileEventStorage::open(&path).unwrap();
        assert_eq!(numbers(&storage).await, [1]);
        storage.append(&one(4)).await.unwrap();
        assert_eq!(numbers(&storage).await, [1, 4]);
    });
}

#[test]
fn a_partial_write_that_cannot_be_cut_off_is_cut_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("partial.log");
    let knobs = Knobs::new();
    runtime().block_on(async {
        let storage = open_faulty(&path, &knobs);
        storage.append(&one(1)).await.unwrap();
        knobs.budget.store(20, Ordering::SeqCst);
        knobs.fail_set_len.store(true, Ordering::SeqCst);
        let err = storage.append(&one(2)).await.unwrap_err();
        assert!(matches!(
            FileError::find(&err),
            Some(FileError::DiskFull { .. })
        ));
        knobs.budget.store(u64::MAX, Ordering::SeqCst);
        let err = storage.append(&one(3)).await.unwrap_err();
        assert!(
            matches!(FileError::find(&err), Some(FileError::Failed { .. })),
            "a record written after the fragment would read as damage: {err:?}"
        );
        storage.close().await.unwrap();
    });
    runtime().block_on(async {
        let storage = FileEventStorage::open(&path).unwrap();
        let cut = storage.recovery().cut.clone().unwrap();
        assert_eq!(cut.bytes, 20);
        assert!(!cut.discarded_records);
        assert_eq!(numbers(&storage).await, [1]);
    });
}

#[test]
fn an_append_too_large_for_one_record_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.log");
    runtime().block_on(async {
        let storage = open_faulty(&path, &Knobs::new());
        let big = "x".repeat(1000);
        let events = (0..5)
            .map(|_| NewEvent::new("s", "T", json!(big)))
            .collect();
        let err = storage
            .append(&AppendRequest::new(events))
            .await
            .unwrap_err();
        assert!(
            matches!(err, EventStorageError::InvalidRequest(_)),
            "{err:?}"
        );
        assert_eq!(storage.file_len(), crate::format::HEADER_LEN);
        storage.append(&one(1)).await.unwrap();
        assert_eq!(numbers(&storage).await, [1]);
    });
}

fn stored_position(n: u64) -> tenure_ports::EventPosition {
    tenure_ports::EventPosition::new(n).unwrap()
}
