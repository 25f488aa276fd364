//! The processor's `tracing` events, in a test binary of its own: a thread-local subscriber
//! is only reliable when no other test registers the same callsites in parallel.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use support::processing::{
    Captured, Effects, LEASE, Recorder, Replica, append_orders, bookmark_of, elector_config,
    eventually, processor_config,
};
use support::{Backend, ms, wait_for_leader};
use tenure_election::FencingGuard;

#[tokio::test(start_paused = true)]
async fn batches_bookmarks_and_step_downs_are_told_with_lease_owner_token_and_position() {
    let captured = Captured::default();
    let _guard = captured.install();
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 150).await;
    let p1 = Replica::start(
        &backend,
        "p1",
        elector_config(),
        processor_config(),
        Recorder::new("p1", LEASE, &backend, &fence, &effects),
    );
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 150
    })
    .await;
    let p2 = Replica::start(
        &backend,
        "p2",
        elector_config().with_priority(5),
        processor_config(),
        Recorder::new("p2", LEASE, &backend, &fence, &effects),
    );
    wait_for_leader(&p2.elector).await;

    let field = |event: &std::collections::BTreeMap<String, String>, name: &str| {
        event.get(name).cloned().unwrap_or_default()
    };
    let projected = captured.with_action("projected");
    assert_eq!(projected.len(), 2);
    let first = &projected[0];
    assert_eq!(
        [
            "lease", "owner", "token", "reader", "first", "last", "count", "level"
        ]
        .map(|f| field(first, f)),
        [LEASE, "p1", "1", LEASE, "1", "100", "100", "DEBUG"]
    );
    let bookmarked = captured.with_action("bookmarked");
    assert_eq!(
        bookmarked
            .iter()
            .map(|e| field(e, "position"))
            .collect::<Vec<_>>(),
        ["100", "150"]
    );
    assert_eq!(field(&bookmarked[1], "token"), "1");
    let resumed = captured.with_action("resumed");
    assert_eq!(field(&resumed[0], "level"), "INFO");
    assert!(!resumed[0].contains_key("position"), "no bookmark yet");
    let stepping_down = captured.with_action("stepping_down");
    assert_eq!(stepping_down.len(), 1);
    assert_eq!(
        ["owner", "token", "position"].map(|f| field(&stepping_down[0], f)),
        ["p1", "1", "150"]
    );
    assert!(
        captured
            .with_action("stopped")
            .iter()
            .any(|e| field(e, "reason") == "step_down")
    );
    p1.task.abort();
    p2.task.abort();
}
