//! The conformance kit against the in-memory backend, on a manual clock.

use std::sync::Arc;

use tenure_memory::MemoryEventStorage;
use tenure_ports::ManualClock;
use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async {
    let clock = ManualClock::new();
    let storage = MemoryEventStorage::with_clock(Arc::new(clock.clone()));
    Subject::new(storage).with_clock(clock)
});
