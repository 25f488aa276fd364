//! A primary and a streaming standby of a test's own, and a failover between them: the
//! primary killed (an immediate stop, as a crash) and the standby promoted.

use std::time::Duration;

use tenure_pg_test::cluster::{Cluster, StopMode};
use tokio::time::{Instant, sleep};

/// How the standby is replicated to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = '*'`: a commit is acknowledged once the standby has
    /// flushed it (`synchronous_commit = on`, the default).
    Synchronous,
    /// The default: the standby may lag behind what the primary acknowledged.
    Asynchronous,
}

/// The highest token any lease of the default prefix has, on a server.
pub const MAX_TOKEN: &str = "SELECT coalesce(max(fencing_token), 0)::int8 FROM tenure_leases";

/// A running primary and a standby streaming from it.
#[derive(Debug)]
pub struct ReplicatedPair {
    /// The primary.
    pub primary: Cluster,
    /// The standby.
    pub standby: Cluster,
    replication: Replication,
}

impl ReplicatedPair {
    /// A new primary and its standby, both running, the standby streaming.
    pub async fn start(replication: Replication) -> Result<ReplicatedPair, String> {
        let primary = tokio::task::spawn_blocking(|| {
            let primary = Cluster::create()?;
            primary.start()?;
            Ok::<_, String>(primary)
        })
        .await
        .map_err(|e| e.to_string())??;
        ReplicatedPair::attach(primary, replication).await
    }

    /// Gives a running `primary` (a promoted standby, say) a standby of its own, streaming.
    pub async fn attach(
        primary: Cluster,
        replication: Replication,
    ) -> Result<ReplicatedPair, String> {
        let (primary, standby) = tokio::task::spawn_blocking(move || {
            let standby = Cluster::standby_of(&primary)?;
            standby.start()?;
            if replication == Replication::Synchronous {
                // After the base backup, so that the standby, once promoted, does not wait
                // for a standby of its own.
                primary.configure(&[("synchronous_standby_names", "'*'")])?;
                primary.reload()?;
            }
            Ok::<_, String>((primary, standby))
        })
        .await
        .map_err(|e| e.to_string())??;
        let sync_state = match replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let streaming = format!(
            "SELECT count(*)::int8 FROM pg_stat_replication WHERE state = 'streaming' AND \
             sync_state = '{sync_state}'"
        );
        let url = primary.url();
        wait_for("the standby to stream", || async {
            Ok(query_i64(&url, &streaming).await? == 1)
        })
        .await?;
        Ok(ReplicatedPair {
            primary,
            standby,
            replication,
        })
    }

    /// How the standby is replicated to.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// Cuts the standby off from the primary (a wrong `primary_conninfo`), then waits until
    /// the primary has handed out a token the standby never received: what an asynchronous
    /// standby loses in a failover, made certain rather than left to a race.
    pub async fn diverge(&self) -> Result<(), String> {
        let standby = self.standby.url();
        execute(
            &standby,
            "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 user=postgres'",
        )
        .await?;
        execute(&standby, "SELECT pg_reload_conf()").await?;
        let seen = query_i64(&standby, MAX_TOKEN).await?;
        let primary = self.primary.url();
        wait_for("a token the standby never received", || async {
            Ok(query_i64(&primary, MAX_TOKEN).await? > seen
                && query_i64(&standby, MAX_TOKEN).await? == seen)
        })
        .await
    }

    /// Kills the primary (an immediate stop: a crash) and promotes the standby; returns the
    /// promoted standby, the new primary.
    pub async fn fail_over(self) -> Result<Cluster, String> {
        tokio::task::spawn_blocking(move || {
            self.primary.stop(StopMode::Immediate)?;
            self.standby.promote()?;
            Ok(self.standby)
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

async fn query_i64(url: &str, sql: &str) -> Result<i64, String> {
    let client = tenure_pg_test::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let row = client
        .query_one(sql, &[])
        .await
        .map_err(|e| e.to_string())?;
    row.try_get(0).map_err(|e| e.to_string())
}

async fn execute(url: &str, sql: &str) -> Result<(), String> {
    let client = tenure_pg_test::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    client.batch_execute(sql).await.map_err(|e| e.to_string())
}

async fn wait_for<F, Fut>(what: &str, mut done: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after 30 s waiting for {what}"));
        }
        sleep(Duration::from_millis(100)).await;
    }
}
