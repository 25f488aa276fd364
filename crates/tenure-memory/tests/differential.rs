//! The in-memory storage, driven through its public API at instants the check chooses, answers
//! and stores exactly what the domain decides: the kit's differential check over its hot-path
//! bookkeeping (shared names, registrations updated in place, the reused last request, the
//! record's fields copied on renewal, the shards).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tenure_memory::MemoryEventStorage;
use tenure_ports::domain::{LeaseName, Owner, Timestamp, ValidLeaseRequest};
use tenure_ports::{BoxError, Clock, EventStorage, LeaseRequest};
use tenure_tck::differential::{self, Decided, DecisionSystem, Observed};

/// A clock the test sets to the check's instant. Each case runs on a lease of its own, and
/// within a case the instants never go back, which is all a storage relies on.
#[derive(Debug, Default)]
struct SetClock(AtomicI64);

impl Clock for SetClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.0.load(Ordering::Acquire))
    }
}

struct Memory {
    clock: Arc<SetClock>,
    storage: MemoryEventStorage,
}

impl Memory {
    fn at(&self, now: Timestamp) {
        self.clock.0.store(now.as_micros(), Ordering::Release);
    }
}

/// Polls a memory call, which never waits, to its end.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

impl DecisionSystem for Memory {
    fn request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<Decided, BoxError> {
        self.at(now);
        let request = LeaseRequest::new(
            request.lease_name.as_str(),
            request.owner.as_str(),
            request.priority,
            request.ttl,
        );
        Ok(Decided::new(ready(self.storage.request_lease(&request))?))
    }

    fn release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        self.at(now);
        let before = ready(self.storage.get_leases())?;
        ready(
            self.storage
                .release_lease(lease_name.as_str(), owner.as_str()),
        )?;
        let after = ready(self.storage.get_leases())?;
        Ok(before.get(lease_name.as_str()) != after.get(lease_name.as_str()))
    }

    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError> {
        self.at(now);
        let record = ready(self.storage.get_leases())?
            .get(lease_name.as_str())
            .cloned();
        let live = ready(self.storage.get_lease_contenders(lease_name.as_str()))?;
        Ok(Observed::new(record, live))
    }
}

#[test]
fn the_memory_storage_decides_as_the_domain() {
    let clock = Arc::new(SetClock::default());
    let mut memory = Memory {
        storage: MemoryEventStorage::with_clock(clock.clone()),
        clock,
    };
    if let Err(mismatch) =
        differential::check_decisions_with(differential::Config::from_env_or(256), &mut memory)
    {
        panic!("{mismatch}");
    }
}
