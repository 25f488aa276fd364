//! Exactly-once processing: a projection writes its effects, its own position and the fence
//! in one transaction of the application's database, so that neither a takeover (which
//! re-delivers the batch its predecessor did not bookmark) nor a zombie (a leader paused past
//! its ttl) causes a duplicate or a lost effect.
//!
//! `DATABASE_URL=postgres://app@db/app cargo run -p tenure-postgres --features sqlx-0_9
//! --example exactly_once` (start it twice: one projects, the other stands by; kill the
//! first and the second goes on from where the first committed, not from its bookmark). Each
//! run projects for a minute, then stops gracefully.
//!
//! The same recipe runs, with a takeover and a zombie, in `tests/transaction_fence.rs`
//! (`the_exactly_once_recipe_survives_a_takeover_and_a_zombie`).

use std::sync::Arc;
use std::time::Duration;

use tenure_election::{
    Batch, ElectorConfig, LeaderElector, Processor, ProcessorConfig, Projection,
};
use tenure_ports::{EventQuery, EventStorage};
use tenure_postgres::sqlx_0_9::{self as sqlx, PgPool};
use tenure_postgres::{FenceError, PostgresEventStorage, TransactionFence};

/// Ships each order once: one row per order event in `shipments`.
struct Shipments {
    pool: PgPool,
    fence: TransactionFence,
}

impl Projection for Shipments {
    type Error = FenceError;

    async fn project(&mut self, batch: Batch) -> Result<(), FenceError> {
        let db = |e: sqlx::Error| FenceError::Database(Box::new(e));
        let mut tx = self.pool.begin().await.map_err(db)?;
        // The fence first: a zombie's transaction fails here, and rolls back as `tx` drops.
        self.fence
            .check_sqlx(&mut tx, "shipments", batch.token())
            .await?;
        // The projection's own position, locked: it, not the storage's bookmark, says what is
        // done. A re-delivered event at or below it is skipped.
        let (done,): (i64,) = sqlx::query_as(
            "INSERT INTO shipments_position (reader, position) VALUES ('shipments', 0) \
             ON CONFLICT (reader) DO UPDATE SET position = shipments_position.position \
             RETURNING position",
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        for event in batch.events() {
            let position = event.position.get_i64();
            if position > done {
                sqlx::query("INSERT INTO shipments (order_position, token) VALUES ($1, $2)")
                    .bind(position)
                    .bind(batch.token().get_i64())
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
        }
        sqlx::query("UPDATE shipments_position SET position = greatest(position, $1)")
            .bind(batch.last_position().get_i64())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .test_before_acquire(false)
        .connect(&url)
        .await?;
    // The storage (its tables, the fence's included, are created if missing).
    let storage: Arc<dyn EventStorage> = Arc::new(
        PostgresEventStorage::builder()
            .pool(pool.clone())
            .build()
            .await?,
    );
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS shipments_position \
             (reader text PRIMARY KEY, position bigint NOT NULL); \
         CREATE TABLE IF NOT EXISTS shipments \
             (order_position bigint PRIMARY KEY, token bigint NOT NULL)",
    )
    .execute(&pool)
    .await?;

    let elector = LeaderElector::start(
        Arc::clone(&storage),
        ElectorConfig::new("shipments", Duration::from_secs(10)),
    )?;
    let config = ProcessorConfig::new("shipments").with_query(EventQuery::stream("orders"));
    let projection = Shipments {
        pool: pool.clone(),
        fence: TransactionFence::new(tenure_postgres::DEFAULT_PREFIX)?,
    };
    let mut processor = Processor::new(Arc::clone(&storage), elector.clone(), config, projection)?;
    // A minute of work, then a graceful stop: the last batch is bookmarked, the lease released.
    processor
        .run_until(tokio::time::sleep(Duration::from_secs(60)))
        .await?;

    elector.shutdown().await?;
    storage.close().await?;
    pool.close().await;
    Ok(())
}
