//! How a log file is opened: durability, clock, and what recovery may cut.

use std::sync::Arc;

use tenure_ports::{Clock, SystemClock};

/// When a change is on disk, relative to the call that made it returning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// The default. Every append, bookmark and bookmark removal is written and
    /// `fdatasync`ed before the call returns: once it has returned `Ok`, it survives a crash
    /// of the process, of the operating system, and a power loss (on storage that honours
    /// flushes).
    #[default]
    Fsync,
    /// Every change is handed to the operating system (`write`) before the call returns, but
    /// not synced; the file is synced on [`close`](tenure_ports::EventStorage::close) and when
    /// the last handle is dropped.
    ///
    /// **What may be lost:** nothing when only the process crashes or is killed (the data is
    /// in the kernel's page cache). On an operating-system crash or power loss, the changes
    /// of the last few seconds (whatever the kernel had not yet written back: up to about
    /// 30 s with Linux's default `dirty_expire_centisecs`) are lost, and because the kernel
    /// writes pages back in no particular order, the file may then be damaged before its
    /// tail: opening it fails with [`FileError::Corrupt`](crate::FileError::Corrupt) naming the
    /// offset, and [`FileOptions::truncate_damage`] is the way out.
    NoFsync,
}

/// Options for [`FileEventStorage::open_with`](crate::FileEventStorage::open_with).
///
/// ```
/// use tenure_file::{Durability, FileOptions};
/// use tenure_ports::ManualClock;
/// let options = FileOptions::new()
///     .durability(Durability::NoFsync)
///     .clock(ManualClock::new());
/// ```
#[derive(Clone, Debug)]
pub struct FileOptions {
    pub(crate) durability: Durability,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) truncate_damage: bool,
    /// The largest record written: [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES), lowered by
    /// tests.
    pub(crate) max_record_bytes: usize,
}

impl FileOptions {
    /// Durable ([`Durability::Fsync`]), on the system clock, refusing to open a file damaged
    /// before its tail.
    pub fn new() -> Self {
        FileOptions {
            durability: Durability::Fsync,
            clock: Arc::new(SystemClock::new()),
            truncate_damage: false,
            max_record_bytes: crate::MAX_RECORD_BYTES,
        }
    }

    /// When changes reach the disk.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The storage clock (timestamps of events and bookmarks, lease times): e.g. a
    /// [`ManualClock`](tenure_ports::ManualClock) in tests.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// **Loses data; for an operator repairing a damaged file.** When set, damage found before
    /// the tail is treated like a torn tail: the file is cut at the first damaged record and
    /// *every record after it is discarded*, with a warning naming the offset and the number
    /// of bytes cut. Off by default: such damage then fails the open with
    /// [`FileError::Corrupt`](crate::FileError::Corrupt) and leaves the file untouched, so
    /// that it can be copied and examined first.
    #[must_use]
    pub fn truncate_damage(mut self, truncate: bool) -> Self {
        self.truncate_damage = truncate;
        self
    }
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions::new()
    }
}
