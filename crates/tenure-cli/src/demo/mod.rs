//! `tenure demo`: replicas of an order dispatcher elect a leader among themselves, and the
//! story of what happens is told as it happens.
//!
//! The story is the same on every run: each chapter waits for what it shows before the next
//! begins, and at every race point only one contender can win (the others are not running
//! yet, are standing aside, or are outranked), so no chapter depends on who polls first.

mod narrator;
mod replica;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tenure_election::LeadershipState;
use tenure_ports::EventStorage;
use tokio::time::{sleep, timeout};

pub use narrator::{NarrationLayer, Narrator};
use replica::{Downstream, Replica, Setup};

use crate::duration::human;

/// What the demo runs on.
pub struct DemoOptions {
    /// The lease ttl; the whole story scales with it.
    pub ttl: Duration,
    /// The storage, and a few words naming it for the introduction.
    pub storage: Arc<dyn EventStorage>,
    pub backend: String,
    /// The lease contended for.
    pub lease: String,
}

/// Tells the whole story. Fails if something does not happen in time, or if the closing
/// checks find two overlapping tenures, a token that went backwards, or a misplaced write.
pub async fn run(options: DemoOptions, narrator: Arc<Narrator>) -> anyhow::Result<()> {
    let ttl = options.ttl;
    // Refuse a ttl the elector cannot run with before telling anything.
    tenure_election::ElectorConfig::new(options.lease.as_str(), ttl)
        .with_owner("replica-a")
        .validate()
        .context("invalid --ttl")?;
    let poll = ttl / 3;
    let setup = Setup {
        storage: Arc::clone(&options.storage),
        lease: options.lease.clone(),
        ttl,
        narrator: Arc::clone(&narrator),
        downstream: Downstream::new(&options.lease),
    };
    // Nothing in a chapter should take longer than a few ttls; a stuck step fails the demo.
    let patience = ttl * 4;
    let n = &narrator;

    n.text(&format!(
        "Tenure demo: leader election among the replicas of an order dispatcher\n\
         \n\
         Replicas of one dispatcher run in this process and contend for one lease:\n\
         \x20 lease  {lease:?}\n\
         \x20 store  {backend}\n\
         \x20 ttl    {ttl}: each replica asks every {poll} (ttl/3)\n\
         Only the leader dispatches, and every batch it publishes downstream is stamped with\n\
         its fencing token. A leader that cannot confirm a renewal within the ttl stops\n\
         leading on its own.\n",
        lease = options.lease,
        backend = options.backend,
        ttl = human(ttl),
        poll = human(poll),
    ));

    // Chapter 1.
    n.chapter(
        1,
        "the first election",
        &[
            "replica-a starts and asks for the lease. Nobody holds it, so it becomes leader",
            "with fencing token 1, and from then on renews it at every request.",
        ],
    );
    n.show_renewals(true);
    let a = Replica::start(&setup, "replica-a", 0)?;
    within(
        patience,
        "replica-a to be elected",
        leads(&a, &setup.downstream),
    )
    .await??;
    within(patience, "two renewals", renewals(&a, 2)).await??;
    n.show_renewals(false);

    // Chapter 2.
    n.chapter(
        2,
        "a planned handover",
        &[
            "replica-c starts with priority 10 (replica-a has 0). Its request registers it as a",
            "contender, and replica-a's next renewal is answered \"step down requested\":",
            "replica-a finishes its batch and releases, and replica-c takes the lease at its",
            "next request. replica-a stands aside for one ttl, then stands by.",
        ],
    );
    let c = Replica::start(&setup, "replica-c", 10)?;
    within(
        patience,
        "replica-c to be elected",
        leads(&c, &setup.downstream),
    )
    .await??;

    // Chapter 3.
    n.chapter(
        3,
        "a crash",
        &[
            "Once replica-a stands by again, the leader replica-c crashes: killed, without",
            "releasing. Its lease stays live on the storage until its ttl runs out, and only",
            "then can replica-a take over, with the next token.",
        ],
    );
    within(patience, "replica-a to stand by", a.wait_for(is_standby)).await??;
    n.say(
        "replica-c",
        "CRASHES: its process is killed, nothing is released",
    );
    let crashed_at = Instant::now();
    c.crash(n);
    within(
        patience,
        "replica-a to take over",
        leads(&a, &setup.downstream),
    )
    .await??;
    n.text(&format!(
        "  -> replica-a took over {} after the crash: the ttl ({}) had to run out first.\n",
        secs(crashed_at.elapsed()),
        human(ttl)
    ));

    // Chapter 4.
    n.chapter(
        4,
        "a graceful release",
        &[
            "replica-b starts and stands by. replica-a shuts down gracefully: it releases the",
            "lease on its way out, so replica-b acquires it at its very next request instead of",
            "waiting out a ttl. (The demo shuts replica-a down just before replica-b's next",
            "request; in general a release is taken up at most one poll interval later.)",
        ],
    );
    let b = Replica::start(&setup, "replica-b", 0)?;
    within(patience, "replica-b to stand by", b.wait_for(is_standby)).await??;
    // replica-b asked just now, and asks again exactly one poll interval later.
    let next_request = tokio::time::Instant::now() + poll;
    tokio::time::sleep_until(next_request - (poll / 10).min(Duration::from_millis(50))).await;
    n.say("replica-a", "shuts down gracefully");
    let released_at = Instant::now();
    within(patience, "replica-a to shut down", a.shut_down()).await??;
    within(
        patience,
        "replica-b to take over",
        leads(&b, &setup.downstream),
    )
    .await??;
    n.text(&format!(
        "  -> replica-b took over {} after the release; a crash costs a whole ttl ({}).\n",
        secs(released_at.elapsed()),
        human(ttl)
    ));

    // Chapter 5.
    n.chapter(
        5,
        "a zombie leader, stopped by its fencing token",
        &[
            "replica-d starts and stands by. Then replica-b freezes mid-batch, as a process does",
            "in a long GC pause or a suspended VM: it stops renewing, but still holds token 4",
            "and a batch to publish. Its lease runs out and replica-d takes over with token 5.",
            "When replica-b wakes up it still believes it leads, and publishes: the downstream,",
            "which keeps the highest token it has accepted, rejects the batch.",
        ],
    );
    let d = Replica::start(&setup, "replica-d", 0)?;
    within(patience, "replica-d to stand by", d.wait_for(is_standby)).await??;
    b.freeze(n);
    within(
        patience,
        "replica-d to take over",
        leads(&d, &setup.downstream),
    )
    .await??;
    sleep(ttl / 8).await;
    b.thaw();
    let downstream = Arc::clone(&setup.downstream);
    within(patience, "the zombie's batch", async {
        while downstream.rejected().is_empty() {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;

    n.say("replica-d", "shuts down gracefully: the story is over");
    within(patience, "replica-d to shut down", d.shut_down()).await??;
    let _ = within(patience, "replica-b to stop", b.shut_down()).await;
    let _ = options.storage.close().await;

    summary(n, &setup.downstream)
}

/// The closing table, and the checks that make the demo a test of itself.
fn summary(n: &Narrator, downstream: &Downstream) -> anyhow::Result<()> {
    let tenures = n.tenures();
    let mut text =
        String::from("\nSummary\n  token  leader      from      until     how it ended\n");
    for t in &tenures {
        let until = t.until.map_or_else(|| "-".to_owned(), secs);
        text.push_str(&format!(
            "  {:>5}  {:<10}  {:>8}  {:>8}  {}\n",
            t.token,
            t.owner,
            secs(t.from),
            until,
            t.ended
        ));
    }
    let accepted = downstream.accepted();
    let rejected = downstream.rejected();
    text.push_str(&format!(
        "  The downstream accepted {} batches, each stamped with its leader's token, in token\n  \
         order, and rejected {}",
        accepted.len(),
        rejected.len()
    ));
    for (who, stale, current) in &rejected {
        text.push_str(&format!(
            ": {who}'s, stamped {stale} after {current} had been accepted"
        ));
    }
    text.push_str(".\n");

    let tokens: Vec<u64> = tenures.iter().map(|t| t.token).collect();
    let consecutive = tokens.windows(2).all(|w| w[1] == w[0] + 1) && tokens.first() == Some(&1);
    let disjoint = tenures
        .windows(2)
        .all(|w| w[0].until.is_some_and(|until| until <= w[1].from));
    let ordered = accepted.windows(2).all(|w| w[0].1 <= w[1].1);
    text.push_str(&format!(
        "  Checked: {} tenures with tokens {}; no two overlapped; writes in token order.\n",
        tenures.len(),
        tokens
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    n.text(&text);
    if !(consecutive && disjoint && ordered && rejected.len() == 1 && tenures.len() == 5) {
        bail!(
            "the story went wrong: tokens {tokens:?} (consecutive: {consecutive}), \
             disjoint tenures: {disjoint}, ordered writes: {ordered}, rejections: {}",
            rejected.len()
        );
    }
    Ok(())
}

/// Waits until `replica` leads and its dispatcher has published its first batch, so that the
/// story of its election is told before the demo moves on.
async fn leads(replica: &Replica, downstream: &Downstream) -> anyhow::Result<()> {
    replica.wait_for(LeadershipState::is_leader).await?;
    let token = replica.elector.state().leader_token().map(|t| t.get());
    while !downstream
        .accepted()
        .iter()
        .any(|(who, t)| who == replica.name && Some(*t) == token)
    {
        sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// Waits until `replica` has renewed `count` times within its current tenure.
async fn renewals(replica: &Replica, count: usize) -> anyhow::Result<()> {
    let mut state = replica.state();
    let mut last = state.borrow_and_update().valid_until();
    let mut seen = 0;
    while seen < count {
        state
            .changed()
            .await
            .with_context(|| format!("{} stopped", replica.name))?;
        let now = state.borrow_and_update().valid_until();
        if now.is_none() {
            bail!("{} lost its lease", replica.name);
        }
        if now != last {
            seen += 1;
            last = now;
        }
    }
    Ok(())
}

async fn within<T>(
    limit: Duration,
    what: &str,
    future: impl Future<Output = T>,
) -> anyhow::Result<T> {
    timeout(limit, future)
        .await
        .with_context(|| format!("the demo waited {} for {what} in vain", human(limit)))
}

fn is_standby(state: &LeadershipState) -> bool {
    matches!(state, LeadershipState::Standby { .. })
}

fn secs(duration: Duration) -> String {
    format!("{:.3}s", duration.as_secs_f64())
}
