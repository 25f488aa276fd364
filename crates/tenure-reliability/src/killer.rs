//! Connections killed at random with `pg_terminate_backend`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::workload::Rng;

/// A task that, until stopped, terminates one connection to one database at random every
/// 50 to 400 ms, counting what it killed.
#[derive(Debug)]
pub struct ConnectionKiller {
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl ConnectionKiller {
    /// Starts killing connections to `database` (only those: other tests' connections to
    /// other databases are left alone), through its own connection to `server_url`.
    pub async fn start(server_url: &str, database: &str, seed: u64) -> Result<Self, String> {
        let admin = tenure_pg_test::connect(server_url)
            .await
            .map_err(|e| format!("connecting the killer: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let kills = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (stop, kills, database) =
                (Arc::clone(&stop), Arc::clone(&kills), database.to_owned());
            async move {
                let mut rng = Rng::new(seed);
                while !stop.load(Ordering::Acquire) {
                    tokio::time::sleep(
                        rng.between(Duration::from_millis(50), Duration::from_millis(400)),
                    )
                    .await;
                    let killed = admin
                        .query(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                              WHERE datname = $1 AND pid <> pg_backend_pid() \
                              ORDER BY random() LIMIT 1",
                            &[&database],
                        )
                        .await
                        .map_or(0, |rows| rows.len() as u64);
                    kills.fetch_add(killed, Ordering::Relaxed);
                }
            }
        });
        Ok(ConnectionKiller { stop, kills, task })
    }

    /// Stops and returns how many connections were killed.
    pub async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Release);
        let _ = self.task.await;
        self.kills.load(Ordering::Relaxed)
    }
}
