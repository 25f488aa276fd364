//! What the PostgreSQL benchmarks share.

use std::time::Duration;

use tenure_postgres::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

/// A deadpool pool of `size` on `url`, as an application builds it (no ping before a
/// checkout) and connected as the storage connects (TLS as the string's `sslmode` asks), so
/// that a baseline through it and the storage share one client code path.
pub fn application_pool(url: &str, size: usize) -> Pool {
    let info = tenure_postgres::tenure_conninfo::ConnInfo::parse(url).unwrap();
    let (config, tls) =
        tenure_postgres::tokio_postgres_config(&info, Duration::from_secs(10)).unwrap();
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager).max_size(size).build().unwrap()
}
