//! `tenure demo`: replicas of an order dispatcher elect a leader among themselves, the
//! leader's processor dispatches the orders a shop keeps placing, and the story of what
//! happens is told as it happens.
//!
//! The story is the same on every run: each chapter waits for what it shows before the next
//! begins, and at every race point only one contender can win (the others are not running
//! yet, are standing aside, or are outranked), so no chapter depends on who polls first. The
//! crash and the freeze strike at a chosen point of a batch, not at a random one.

mod narrator;
mod orders;
mod replica;
mod summary;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tenure_election::LeadershipState;
use tenure_ports::{Capability, EventStorage};
use tokio::time::{sleep, timeout};

pub use narrator::{NarrationLayer, Narrator};
use orders::{Downstream, Shop};
use replica::{Replica, Setup};
use summary::{Expected, secs, short, summary};

use crate::duration::human;

/// What the demo runs on.
pub struct DemoOptions {
    /// The lease ttl; the whole story scales with it.
    pub ttl: Duration,
    /// The storage, and a few words naming it for the introduction.
    pub storage: Arc<dyn EventStorage>,
    pub backend: String,
    /// The lease contended for; also the name of the dispatchers' bookmark.
    pub lease: String,
    /// The stream the shop places its orders in.
    pub orders: String,
}

/// Tells the whole story. Fails if something does not happen in time, or if the closing
/// checks find an order not dispatched, a repeat the story does not explain, a batch
/// accepted from a superseded leader, two overlapping tenures, or a token that went backwards.
pub async fn run(options: DemoOptions, narrator: Arc<Narrator>) -> anyhow::Result<()> {
    let ttl = options.ttl;
    // Refuse a ttl the elector cannot run with before telling anything.
    replica::elector_config(&options.lease, ttl, "replica-a")
        .validate()
        .context("invalid --ttl")?;
    let poll = ttl / 3;
    let every = ttl / 8;
    // Nothing in a chapter should take longer than a few ttls; a stuck step fails the demo.
    let patience = ttl * 4;
    let n = &narrator;

    n.text(&format!(
        "Tenure demo: leader election among the replicas of an order dispatcher\n\
         \n\
         Replicas of one dispatcher run in this process and contend for one lease:\n\
         \x20 lease   {lease:?}\n\
         \x20 store   {backend}\n\
         \x20 ttl     {ttl}: each replica asks every {poll} (ttl/3)\n\
         \x20 orders  a shop places one in the stream {orders:?} every {every}\n\
         Only the leader dispatches: its processor reads the orders after the bookmark, sends\n\
         them downstream in batches stamped with its fencing token, and moves the bookmark\n\
         after each batch. A leader that cannot confirm a renewal within the ttl stops leading\n\
         on its own.\n",
        lease = options.lease,
        backend = options.backend,
        ttl = human(ttl),
        poll = human(poll),
        orders = options.orders,
        every = human(every),
    ));
    let shop = Shop::open(
        &options.orders,
        Arc::clone(&options.storage),
        Arc::clone(&narrator),
        every,
    );
    let setup = Setup {
        storage: Arc::clone(&options.storage),
        lease: options.lease.clone(),
        ttl,
        narrator: Arc::clone(&narrator),
        downstream: Downstream::new(&options.lease),
        shop: Arc::clone(&shop),
    };

    // Chapter 1.
    n.chapter(
        1,
        "the first election",
        &[
            "replica-a starts and asks for the lease. Nobody holds it, so it becomes leader",
            "with fencing token 1, and from then on renews it at every request. There is no",
            "bookmark yet: it dispatches from the first order on.",
        ],
    );
    n.show_renewals(true);
    let a = Replica::start(&setup, "replica-a", 0)?;
    within(patience, "replica-a to be elected", a.leads()).await??;
    within(patience, "two renewals", renewals(&a, 2)).await??;
    n.show_renewals(false);

    // Chapter 2.
    n.chapter(
        2,
        "a planned handover",
        &[
            "replica-c starts with priority 10 (replica-a has 0). Its request registers it as a",
            "contender; the storage tells replica-a at once, and replica-a's renewal is answered",
            "\"step down requested\": it finishes its batch, bookmarks it, and releases. The",
            "release wakes replica-c, which takes the lease and resumes after that bookmark.",
            "replica-a stands aside for one ttl, then stands by. (On a storage that cannot tell",
            "its electors of changes, each step waits for the next request: a poll interval.)",
        ],
    );
    // replica-a renewed just now. Half a poll interval later, replica-c's requests fall
    // between replica-a's: the release that answers a step-down then always comes before
    // replica-c's next request, never racing it.
    sleep(poll / 2).await;
    let c_started = Instant::now();
    let c = Replica::start(&setup, "replica-c", 10)?;
    within(patience, "replica-c to be elected", c.elected()).await??;
    let took = c_started.elapsed();
    within(patience, "replica-c's first batch", c.leads()).await??;
    n.text(&format!(
        "  -> replica-c took over {} after it started, replica-a's last batch and bookmark included.\n",
        short(took)
    ));

    // Chapter 3.
    n.chapter(
        3,
        "a crash",
        &[
            "Once replica-a stands by again, the leader replica-c crashes right after",
            "dispatching a batch, before it can bookmark it: killed, without releasing. Its",
            "lease stays live on the storage until its ttl runs out, and only then can",
            "replica-a take over, with the next token. It resumes after the last bookmark, so",
            "it dispatches that batch a second time: delivery is at least once.",
        ],
    );
    within(
        patience,
        "replica-a to stand by",
        a.wait_for(LeadershipState::is_standby),
    )
    .await??;
    let crashed_batch = within(
        patience,
        "replica-c's next batch",
        c.dispatch_one_more_batch(),
    )
    .await??;
    n.say(
        "replica-c",
        format!(
            "CRASHES before bookmarking {}: its process is killed, nothing is released",
            if crashed_batch.len() == 1 {
                "it"
            } else {
                "them"
            }
        ),
    );
    let crashed_at = Instant::now();
    c.crash(n);
    within(patience, "replica-a to take over", a.elected()).await??;
    let took = crashed_at.elapsed();
    within(patience, "replica-a's first batch", a.leads()).await??;
    n.text(&format!(
        "  -> replica-a took over {} after the crash: replica-c's lease had to run out first,\n     \
         a ttl ({}) after its last renewal.\n",
        secs(took),
        human(ttl)
    ));

    // Chapter 4.
    n.chapter(
        4,
        "a graceful release",
        &[
            "replica-b starts and stands by. replica-a shuts down gracefully: it stops between",
            "batches and releases the lease on its way out; the storage tells replica-b at once,",
            "so it acquires the lease within milliseconds instead of waiting out a ttl. (On a",
            "storage that cannot tell, at replica-b's next request: at most a poll interval.)",
        ],
    );
    let mut b = Replica::start(&setup, "replica-b", 0)?;
    within(
        patience,
        "replica-b to stand by",
        b.wait_for(LeadershipState::is_standby),
    )
    .await??;
    if !options
        .storage
        .capabilities()
        .contains(Capability::LeaseChanges)
    {
        // Without wake-ups, the release is taken up at replica-b's next request: it asked
        // just now, and asks again exactly one poll interval later.
        let next_request = tokio::time::Instant::now() + poll;
        tokio::time::sleep_until(next_request - (poll / 10).min(Duration::from_millis(50))).await;
    }
    n.say("replica-a", "shuts down gracefully");
    let released_at = Instant::now();
    within(patience, "replica-a to shut down", a.shut_down()).await??;
    within(patience, "replica-b to take over", b.elected()).await??;
    let took = released_at.elapsed();
    within(patience, "replica-b's first batch", b.leads()).await??;
    n.text(&format!(
        "  -> replica-b took over {} after the release; a crash costs a whole ttl ({}).\n",
        short(took),
        human(ttl)
    ));

    // Chapter 5.
    n.chapter(
        5,
        "a zombie leader, stopped by its fencing token",
        &[
            "replica-d starts and stands by. Then replica-b freezes mid-batch, as a process does",
            "in a long GC pause or a suspended VM: it has checked that it leads and holds a",
            "batch to dispatch with token 4, but it stops renewing. Its lease runs out and",
            "replica-d takes over with token 5, resuming after replica-b's last bookmark. When",
            "replica-b wakes up it still believes it leads, and dispatches: the downstream,",
            "which keeps the highest token it has accepted, rejects the batch. The bookmark its",
            "processor would then write with token 4 is refused by the storage too: a zombie",
            "never moves the bookmark back.",
        ],
    );
    let d = Replica::start(&setup, "replica-d", 0)?;
    within(
        patience,
        "replica-d to stand by",
        d.wait_for(LeadershipState::is_standby),
    )
    .await??;
    let zombie_batch = within(patience, "replica-b to freeze", b.freeze(n)).await??;
    within(patience, "replica-d to take over", d.leads()).await??;
    sleep(ttl / 8).await;
    b.thaw();
    within(patience, "replica-b to stop", b.stopped()).await??;
    b.zombie_bookmark(&*setup.storage, &setup.lease, n).await;

    // The end: the shop closes, and the leader dispatches what is left.
    shop.close().await;
    let placed = shop.placed();
    n.say(
        "shop",
        format!(
            "closes after {} orders; replica-d dispatches what is left",
            placed.len()
        ),
    );
    let downstream = Arc::clone(&setup.downstream);
    within(patience, "every order to be dispatched", async {
        while !downstream.has_all(&placed) {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    n.say("replica-d", "shuts down gracefully: the story is over");
    within(patience, "replica-d to shut down", d.shut_down()).await??;
    let _ = options.storage.close().await;

    let expected = Expected {
        placed,
        crashed_batch,
        zombie_batch,
    };
    summary(n, &setup.downstream, &expected)
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
