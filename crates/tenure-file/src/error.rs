//! The typed errors of the file backend.

use std::io;
use std::path::{Path, PathBuf};

use tenure_ports::EventStorageError;

/// Everything opening, writing or closing a log file can fail with.
///
/// [`FileEventStorage::open`](crate::FileEventStorage::open) returns it as is. A storage call
/// (an append, a bookmark, `close`) returns an [`EventStorageError`] whose
/// [`source`](std::error::Error::source) is a `FileError`: find it with [`FileError::find`].
/// `From<FileError> for EventStorageError` maps damage ([`Corrupt`](Self::Corrupt),
/// [`NotOurs`](Self::NotOurs), [`UnsupportedVersion`](Self::UnsupportedVersion)) to
/// [`EventStorageError::Corrupt`] and everything else to [`EventStorageError::Io`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// Another open storage holds the file's lock: another process, or another
    /// [`FileEventStorage`](crate::FileEventStorage) in this one that was not closed or dropped.
    #[error("{path} is in use by another open storage (in this process or another)")]
    InUse {
        /// The log file.
        path: PathBuf,
    },

    /// The path names a directory.
    #[error("{path} is a directory, not a log file")]
    IsDirectory {
        /// The path given.
        path: PathBuf,
    },

    /// The path names something that is neither a file nor a directory (a device, a FIFO, a
    /// socket).
    #[error("{path} is not a regular file")]
    NotRegularFile {
        /// The path given.
        path: PathBuf,
    },

    /// The file, or the directory it is to be created in, cannot be written (permissions, a
    /// read-only file system).
    #[error("{path} is not writable")]
    NotWritable {
        /// The path given.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// The file system is full (or the user's quota is reached). Nothing of the change that
    /// failed was kept; the storage goes on working once space is freed.
    #[error("no space left for {path}")]
    DiskFull {
        /// The log file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// The file exists and is not a Tenure log: it was left untouched.
    #[error("{path} is not a Tenure log file (its first bytes are not a Tenure log header)")]
    NotOurs {
        /// The path given.
        path: PathBuf,
    },

    /// The file is a Tenure log in a format version this crate does not read.
    #[error(
        "{path} is a Tenure log of format version {version}, this build reads version {supported}"
    )]
    UnsupportedVersion {
        /// The log file.
        path: PathBuf,
        /// The version found.
        version: u32,
        /// The version this crate reads and writes.
        supported: u32,
    },

    /// Damage that is not a torn tail: the file is left untouched and the storage does not
    /// open. The guide to the file backend (<https://github.com/tenure-rs/tenure/blob/main/docs/file.md>) has the recovery rule and what an
    /// operator can do.
    #[error("{path} is damaged at byte offset {offset}: {reason}")]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// The byte offset of the first damaged record (or of the header).
        offset: u64,
        /// What is wrong there.
        reason: String,
    },

    /// An earlier write failed and could not be undone, or a sync failed (after which the
    /// state of the file's cached pages is unknown): the storage refuses further changes.
    /// Close it and open the file again; recovery then keeps exactly the whole records.
    #[error("{path} refuses changes after an earlier failure: {cause}; reopen it")]
    Failed {
        /// The log file.
        path: PathBuf,
        /// The earlier failure.
        cause: String,
    },

    /// Any other failure of the operating system.
    #[error("cannot {action} {path}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// What was being done, e.g. `open`, `lock`, `sync`.
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl FileError {
    /// Classifies an I/O error met while doing `action` on `path`.
    pub(crate) fn from_io(path: &Path, action: &'static str, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                FileError::NotWritable { path, source }
            }
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
                FileError::DiskFull { path, source }
            }
            io::ErrorKind::IsADirectory => FileError::IsDirectory { path },
            _ => FileError::Io {
                path,
                action,
                source,
            },
        }
    }

    /// The byte offset of the damage, for [`FileError::Corrupt`].
    pub fn offset(&self) -> Option<u64> {
        match self {
            FileError::Corrupt { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// The `FileError` behind a storage call's error, if there is one.
    ///
    /// ```
    /// # use tenure_file::FileError;
    /// # use tenure_ports::EventStorageError;
    /// # fn handle(err: &EventStorageError) {
    /// if let Some(FileError::DiskFull { path, .. }) = FileError::find(err) {
    ///     eprintln!("free some space where {} lives", path.display());
    /// }
    /// # }
    /// ```
    pub fn find(err: &EventStorageError) -> Option<&FileError> {
        let mut source = std::error::Error::source(err);
        while let Some(err) = source {
            if let Some(found) = err.downcast_ref::<FileError>() {
                return Some(found);
            }
            source = err.source();
        }
        None
    }
}

impl From<FileError> for EventStorageError {
    fn from(err: FileError) -> Self {
        match err {
            FileError::Corrupt { .. }
            | FileError::NotOurs { .. }
            | FileError::UnsupportedVersion { .. } => {
                EventStorageError::corrupt_with(err.to_string(), err)
            }
            _ => EventStorageError::io_with(err.to_string(), err),
        }
    }
}
