//! The journal: opening and locking the file, and writing each change to it before the
//! in-memory log applies it.
//!
//! The in-memory log calls [`Journal::record`] while it holds its own lock, so changes reach the
//! file one at a time and in the order the log applies them. The file is opened in append mode:
//! every write lands at the end, whatever happened before.

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenure_memory::{Change, Journal};
use tenure_ports::EventStorageError;
use tenure_ports::domain::{Field, Reason, ValidationError};

use crate::format::{self, EncodeError, MAX_RECORD_BYTES};
use crate::{Durability, FileError};

/// The writing side of a log file. [`File`] in production; tests wrap it to inject failures
/// (a full disk, a failing sync).
pub(crate) trait LogFile: Send + Debug {
    /// Writes all of `bytes` at the end of the file (it may have written part of them when it
    /// fails).
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// `fdatasync`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// `fsync`.
    fn sync_all(&mut self) -> io::Result<()>;
    /// Cuts or extends the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl LogFile for File {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        File::sync_all(self)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

/// Opens `path` for reading and appending, creating it if it does not exist, and takes its
/// exclusive advisory lock without waiting.
///
/// The lock is `flock`-style (`File::try_lock`): it belongs to this open file, so a second open
/// of the same path fails with [`FileError::InUse`] whether it comes from another process or
/// from this one, and it is released when the file is closed, including by the kernel when the
/// process dies.
pub(crate) fn open_locked(path: &Path) -> Result<File, FileError> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(FileError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        Ok(meta) if !meta.is_file() => {
            return Err(FileError::NotRegularFile {
                path: path.to_path_buf(),
            });
        }
        Ok(_) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(FileError::from_io(path, "inspect", err)),
    }
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|err| FileError::from_io(path, "open", err))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(FileError::InUse {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(err)) => Err(FileError::from_io(path, "lock", err)),
    }
}

/// Makes the file's directory entry durable: after creating a file, syncing the file is not
/// enough for it to survive a power loss, its directory must be synced too.
pub(crate) fn sync_parent_dir(path: &Path) -> Result<(), FileError> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|err| FileError::from_io(parent, "sync the directory", err))
}

/// The journal's state: shared between the [`FileJournal`] that the in-memory log calls and
/// the storage, which closes it.
#[derive(Debug)]
pub(crate) struct JournalState {
    path: PathBuf,
    /// `None` once closed: dropping the file released its lock.
    file: Option<Box<dyn LogFile>>,
    /// The length of the file's whole records: where the next record starts.
    end: u64,
    durability: Durability,
    /// The largest payload written.
    max_record_bytes: usize,
    /// Set when a failure left the file in a state this process cannot vouch for.
    failed: Option<String>,
    /// The frame being written, kept to reuse its allocation.
    buf: Vec<u8>,
}

/// The largest frame buffer kept between writes.
const KEPT_BUFFER: usize = 1 << 20;

impl JournalState {
    pub(crate) fn new(
        path: PathBuf,
        file: Box<dyn LogFile>,
        end: u64,
        durability: Durability,
        max_record_bytes: usize,
    ) -> Self {
        JournalState {
            path,
            file: Some(file),
            end,
            durability,
            max_record_bytes,
            failed: None,
            buf: Vec::new(),
        }
    }

    /// Writes `change` as one record (and syncs it, if durable). On failure nothing of it is
    /// left in the file, or the journal refuses every later change.
    fn record(&mut self, change: Change<'_>) -> Result<(), EventStorageError> {
        let Some(file) = self.file.as_mut() else {
            return Err(EventStorageError::Closed);
        };
        if let Some(cause) = &self.failed {
            return Err(FileError::Failed {
                path: self.path.clone(),
                cause: cause.clone(),
            }
            .into());
        }
        if self.buf.capacity() > KEPT_BUFFER {
            // Do not keep the memory of one huge append for the storage's whole life.
            self.buf = Vec::new();
        }
        match format::encode(change, self.max_record_bytes, &mut self.buf) {
            Ok(()) => {}
            Err(EncodeError::TooLarge(len)) => {
                return Err(ValidationError::new(
                    Field::Events,
                    Reason::TooLong {
                        len,
                        max: self.max_record_bytes.min(MAX_RECORD_BYTES),
                    },
                )
                .into());
            }
            Err(EncodeError::Json(err)) => {
                return Err(EventStorageError::internal_with(
                    "cannot encode a journal record",
                    err,
                ));
            }
        }
        let written = self.buf.len() as u64;
        if let Err(err) = file.append(&self.buf) {
            // Part of the frame may have reached the file: cut it off, so that the next record
            // follows the last whole one instead of a fragment that would read as damage.
            if let Err(undo) = file.set_len(self.end) {
                self.failed = Some(format!(
                    "a write failed ({err}) and cutting the partial record off failed ({undo})"
                ));
            }
            return Err(FileError::from_io(&self.path, "append to", err).into());
        }
        if self.durability == Durability::Fsync
            && let Err(err) = file.sync_data()
        {
            // After a failed fsync the kernel may have dropped the dirty pages, or kept them:
            // whether the record is on disk is unknown. Cut it off and refuse further changes
            // (a retry could "succeed" on pages that never reach the disk).
            let _ = file.set_len(self.end);
            self.failed = Some(format!("a sync failed ({err})"));
            let err = FileError::from_io(&self.path, "sync", err);
            return Err(EventStorageError::unavailable_with(
                format!("{err}: the change may or may not be on disk"),
                err,
            ));
        }
        self.end += written;
        Ok(())
    }

    /// Syncs the file and closes it, which releases its lock. Closing twice does nothing.
    pub(crate) fn close(&mut self) -> Result<(), FileError> {
        let Some(mut file) = self.file.take() else {
            return Ok(());
        };
        let synced = if self.failed.is_none() {
            file.sync_all()
        } else {
            Ok(())
        };
        drop(file);
        synced.map_err(|err| FileError::from_io(&self.path, "sync", err))
    }

    /// The length of the file's whole records.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }
}

impl Drop for JournalState {
    fn drop(&mut self) {
        // Dropped without close(): in `NoFsync` mode, sync what the OS still holds. Nothing
        // needs syncing in `Fsync` mode.
        if self.durability == Durability::NoFsync
            && self.failed.is_none()
            && let Some(file) = self.file.as_mut()
            && let Err(err) = file.sync_all()
        {
            tracing::warn!(path = %self.path.display(), error = %err, "tenure-file: sync on drop failed");
        }
    }
}

/// The journal handed to the in-memory log: a handle on the shared state.
#[derive(Debug)]
pub(crate) struct FileJournal(pub(crate) Arc<Mutex<JournalState>>);

impl Journal for FileJournal {
    fn record(&mut self, change: Change<'_>) -> Result<(), EventStorageError> {
        lock(&self.0).record(change)
    }
}

/// Locks the journal state. A panic while it was held cannot leave it inconsistent (a failed
/// write is undone or marks it failed before anything can panic), so poisoning is ignored.
pub(crate) fn lock(state: &Mutex<JournalState>) -> MutexGuard<'_, JournalState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}
