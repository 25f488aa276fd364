//! Telling the errors no retry can mend from those a retry may: `tenure run` keeps retrying an
//! unavailable server, but gives up, with the reason, on a refused login (bad password, unknown
//! role or database), a missing object or privilege, or corrupt data.

use tenure_ports::{
    Capabilities, EventStorage, EventStorageError, LeaseChanges, LeaseRequest, LeaseResponse,
    LeaseSnapshot, async_trait,
};
use tenure_postgres::PostgresEventStorage;
use tokio::sync::watch;

/// Why `error` is permanent, if it is: an operator must act before any retry can succeed.
pub fn permanent(error: &EventStorageError) -> Option<String> {
    match error {
        EventStorageError::Schema { .. } | EventStorageError::Corrupt { .. } => Some(chain(error)),
        EventStorageError::Unavailable { .. } if refused_login(error) => Some(chain(error)),
        _ => None,
    }
}

/// Whether the server refused the login itself (SQLSTATE classes 28, invalid authorization,
/// and 3D, invalid catalog name): the same settings will be refused again.
fn refused_login(error: &EventStorageError) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        if let Some(pg) = inner.downcast_ref::<tenure_postgres::tokio_postgres::Error>()
            && let Some(code) = pg.code()
        {
            let code = code.code();
            return code.starts_with("28") || code.starts_with("3D");
        }
        source = inner.source();
    }
    false
}

fn chain(error: &EventStorageError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = inner.source();
    }
    text
}

/// The lease calls of a storage, reporting the first permanent error on a channel.
#[derive(Debug)]
pub struct Watched {
    inner: PostgresEventStorage,
    report: watch::Sender<Option<String>>,
}

/// `storage`, watched, and the receiver of the first permanent error of its lease calls.
pub fn watch(storage: PostgresEventStorage) -> (Watched, watch::Receiver<Option<String>>) {
    let (report, receiver) = watch::channel(None);
    (
        Watched {
            inner: storage,
            report,
        },
        receiver,
    )
}

impl Watched {
    fn seen<T>(&self, result: Result<T, EventStorageError>) -> Result<T, EventStorageError> {
        if let Err(error) = &result
            && let Some(why) = permanent(error)
        {
            self.report.send_if_modified(|slot| {
                let first = slot.is_none();
                if first {
                    *slot = Some(why);
                }
                first
            });
        }
        result
    }
}

#[async_trait]
impl EventStorage for Watched {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        self.inner.lease_changes()
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        self.seen(self.inner.request_lease(request).await)
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.seen(self.inner.release_lease(lease_name, owner).await)
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        self.seen(self.inner.get_leases().await)
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<tenure_ports::Contender>, EventStorageError> {
        self.seen(self.inner.get_lease_contenders(lease_name).await)
    }

    async fn close(&self) -> Result<(), EventStorageError> {
        self.inner.close().await
    }
}
