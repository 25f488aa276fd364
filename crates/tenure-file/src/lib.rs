//! The file-persisted embedded backend of Tenure.
//!
//! [`FileEventStorage`] is for a single process that must keep its events and bookmarks across
//! restarts and crashes without running a database: it is the in-memory backend
//! (`tenure-memory`, whose code it shares rather than copies) with every change to the event
//! log written to an append-only file, checksummed and, by default, synced to disk before the
//! call returns, and replayed into memory when the file is opened. Leases work exactly as in
//! memory, with real contention between the tasks and threads of the process.
//!
//! It is **not** a way to share a storage between processes (the file is locked: a second
//! opener gets [`FileError::InUse`]), and it does **not** persist leases. A lease held by a
//! process that no longer runs must expire, not be resurrected on reload: after reopening, no
//! lease is held, [`get_leases`](EventStorage::get_leases) is empty and fencing tokens start
//! again at 1. That is safe inside the process (every holder of the previous run died with it,
//! and the lock keeps any other process out), but a token is then no longer unique across
//! restarts: a resource outside the process that remembers tokens would see them go back. For
//! fencing that holds across restarts and between replicas, use `tenure-postgres`.
//!
//! ```
//! use tenure_file::{FileEventStorage, FileError};
//! use tenure_ports::{AppendRequest, EventStorage, NewEvent};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("events.log");
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let storage = FileEventStorage::open(&path)?;
//! assert!(matches!(FileEventStorage::open(&path), Err(FileError::InUse { .. })));
//! let stored = storage
//!     .append(&AppendRequest::new(vec![NewEvent::new("order-1", "Placed", 42.into())]))
//!     .await?;
//! storage.close().await?; // synced, and the lock released
//!
//! let reopened = FileEventStorage::open(&path)?;
//! assert_eq!(reopened.recovery().events, 1);
//! # let _ = stored;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
//! # Durability and recovery
//!
//! See [`Durability`] for what each mode promises, and the [`recovery`] module (and the guide
//! to the file backend, <https://github.com/tenure-rs/tenure/blob/main/docs/file.md>) for the file format and the rule that tells a torn tail, which is cut with a
//! warning, from damage in the middle of the file, which is an error naming its offset.
//!
//! # Blocking
//!
//! The file is written and synced inside the storage's async methods, on the calling thread,
//! while the event log's (std) mutex is held: an append in [`Durability::Fsync`] mode blocks
//! its executor thread for one `write` and one `fdatasync` (typically well under a
//! millisecond on an SSD, milliseconds on a disk). No lock is held across an `.await`. Lease
//! calls never touch the file. [`FileEventStorage::open`] replays the whole file and blocks
//! accordingly: call it before starting the runtime, or through `spawn_blocking`.

#![deny(missing_docs)]

mod crc_index;
mod error;
mod format;
mod journal;
mod options;
pub mod recovery;

#[cfg(test)]
mod fault_tests;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    AppendRequest, Bookmark, Capabilities, Clock, Contender, EventPosition, EventQuery,
    EventStorage, EventStorageError, Fence, LeaseChanges, LeaseRequest, LeaseResponse,
    LeaseSnapshot, ReadOptions, StoredEvent, async_trait,
};

pub use error::FileError;
pub use format::MAX_RECORD_BYTES;
pub use options::{Durability, FileOptions};
pub use recovery::{Cut, RecoveryReport};

use journal::{FileJournal, JournalState, LogFile};

/// A storage whose events and bookmarks live in one append-only file. Clones share one state,
/// one clock and one file.
///
/// Every method of [`EventStorage`] behaves as on the in-memory backend; appends, bookmarks
/// and bookmark removals are on disk (per the [`Durability`]) before they are visible and
/// before the call returns.
#[derive(Clone, Debug)]
pub struct FileEventStorage {
    memory: MemoryEventStorage,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    durability: Durability,
    journal: Arc<Mutex<JournalState>>,
    recovery: RecoveryReport,
}

impl FileEventStorage {
    /// Opens (or creates) the log at `path` with the default [`FileOptions`]: durable, on the
    /// system clock.
    ///
    /// # Errors
    ///
    /// [`FileError::InUse`] if another open storage holds the file, in this process or another;
    /// [`FileError::IsDirectory`], [`FileError::NotRegularFile`], [`FileError::NotWritable`],
    /// [`FileError::DiskFull`] for a path that cannot be a log; [`FileError::NotOurs`] or
    /// [`FileError::UnsupportedVersion`] for a file that is not a log this build reads (left
    /// untouched); [`FileError::Corrupt`] for damage that is not a torn tail (left untouched).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FileError> {
        FileEventStorage::open_with(path, FileOptions::new())
    }

    /// Opens (or creates) the log at `path` with `options`. See [`FileEventStorage::open`].
    pub fn open_with(path: impl AsRef<Path>, options: FileOptions) -> Result<Self, FileError> {
        FileEventStorage::open_wrapped(path.as_ref(), options, |file| Box::new(file))
    }

    /// Opens the log, writing through `wrap(file)`: tests inject failures this way.
    pub(crate) fn open_wrapped(
        path: &Path,
        options: FileOptions,
        wrap: impl FnOnce(File) -> Box<dyn LogFile>,
    ) -> Result<Self, FileError> {
        let mut file = journal::open_locked(path)?;
        let recovered = recovery::recover(&mut file, path, options.truncate_damage)?;
        let journal = Arc::new(Mutex::new(JournalState::new(
            path.to_path_buf(),
            wrap(file),
            recovered.report.bytes,
            options.durability,
            options.max_record_bytes,
        )));
        let memory = MemoryEventStorage::with_journal(
            options.clock,
            recovered.log,
            Box::new(FileJournal(Arc::clone(&journal))),
        );
        Ok(FileEventStorage {
            memory,
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                durability: options.durability,
                journal,
                recovery: recovered.report,
            }),
        })
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// When changes reach the disk.
    pub fn durability(&self) -> Durability {
        self.shared.durability
    }

    /// What opening found in the file: records replayed, whether a torn tail was cut.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.shared.recovery
    }

    /// The length of the file's whole records, in bytes.
    pub fn file_len(&self) -> u64 {
        journal::lock(&self.shared.journal).end()
    }

    /// The storage's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        self.memory.clock()
    }
}

#[async_trait]
impl EventStorage for FileEventStorage {
    fn name(&self) -> &str {
        "file"
    }

    fn capabilities(&self) -> Capabilities {
        self.memory.capabilities()
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        self.memory.request_lease(request).await
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.memory.release_lease(lease_name, owner).await
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        self.memory.get_leases().await
    }

    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        self.memory.lease_changes()
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        self.memory.get_lease_contenders(lease_name).await
    }

    async fn append(&self, request: &AppendRequest) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.memory.append(request).await
    }

    async fn read_events(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.memory.read_events(query, options).await
    }

    async fn bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
    ) -> Result<Bookmark, EventStorageError> {
        self.memory.bookmark(reader, position, tags).await
    }

    async fn bookmark_fenced(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        fence: &Fence,
    ) -> Result<Bookmark, EventStorageError> {
        self.memory
            .bookmark_fenced(reader, position, tags, fence)
            .await
    }

    async fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        self.memory.get_bookmark(reader).await
    }

    async fn remove_bookmark(&self, reader: &str) -> Result<(), EventStorageError> {
        self.memory.remove_bookmark(reader).await
    }

    async fn get_bookmarks(&self) -> Result<Vec<Bookmark>, EventStorageError> {
        self.memory.get_bookmarks().await
    }

    /// Refuses every later call (on every clone), syncs the file and closes it, which
    /// releases its lock: the path can be opened again at once. Closing twice is harmless.
    async fn close(&self) -> Result<(), EventStorageError> {
        self.memory.close().await?;
        journal::lock(&self.shared.journal)
            .close()
            .map_err(EventStorageError::from)
    }
}
