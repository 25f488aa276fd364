//! A sqlx application elects one leader among its replicas, on the `PgPool` it already has.
//!
//! `DATABASE_URL=postgres://app@db/app cargo run -p tenure-postgres --features sqlx-0_9
//! --example sqlx_election` (start it twice: one leads, the other stands by).

use std::sync::Arc;
use std::time::Duration;

use tenure_election::{ElectorConfig, LeaderElector};
use tenure_ports::EventStorage;
use tenure_postgres::PostgresEventStorage;
use tenure_postgres::sqlx_0_9::postgres::PgPoolOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    // The application's own pool (no ping before every checkout: a lease call is one round
    // trip, not two).
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .test_before_acquire(false)
        .connect(&url)
        .await?;

    // Tenure's storage on that pool: its tables are created if missing (SchemaMode::Ensure).
    let storage = Arc::new(
        PostgresEventStorage::builder()
            .pool(pool.clone())
            .build()
            .await?,
    );

    // Campaign for the lease; only the leader runs the work, stamped with its fencing token.
    let config = ElectorConfig::new("nightly-report", Duration::from_secs(10));
    let elector = LeaderElector::start(storage.clone(), config)?;
    elector
        .run_while_leader(|lease| async move {
            println!("leading, fencing token {}", lease.token());
            tokio::select! {
                () = lease.lost() => println!("leadership lost: stopping"),
                () = tokio::time::sleep(Duration::from_secs(1)) => println!("work done"),
            }
        })
        .await?;

    // Release the lease (the next replica takes over at once), then close the storage. The
    // pool stays the application's, open until it closes it.
    elector.shutdown().await?;
    storage.close().await?;
    pool.close().await;
    Ok(())
}
