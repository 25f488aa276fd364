//! The conformance kit against the in-memory backend on the system clock, in real time: the
//! same path a database backend takes, proving the kit's real-time margins hold.

use tenure_memory::MemoryEventStorage;
use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async {
    Subject::new(MemoryEventStorage::new()).with_suite_name("memory-real-time")
});
