//! The conformance kit against the file backend, on a manual clock, each scenario on a fresh
//! log file in a temporary directory that the teardown removes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tenure_file::{FileEventStorage, FileOptions};
use tenure_ports::ManualClock;
use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let clock = ManualClock::new();
    let storage = FileEventStorage::open_with(
        dir.path().join("tck.log"),
        FileOptions::new().clock(clock.clone()),
    )
    .expect("a fresh log opens");
    Subject::new(storage)
        .with_clock(clock)
        .with_teardown(async move {
            // Every handle on the storage is dropped before the teardown runs.
            dir.close().expect("the temporary directory is removed");
        })
});
