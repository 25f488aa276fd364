//! The orders of the story: a shop that places them in the event log, one at a time, and the
//! downstream system the leader dispatches them to, which fences every batch on its token.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;
use tenure_election::{FencingGuard, StaleToken};
use tenure_ports::{
    AppendRequest, EventPosition, EventQuery, EventStorage, FencingToken, NewEvent, StoredEvent,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::narrator::Narrator;

/// The type of every order event.
const ORDER_PLACED: &str = "OrderPlaced";

/// One order as stored: its number (1, 2, 3…) and its position in the event log.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Order {
    pub number: u64,
    pub position: EventPosition,
}

impl Order {
    /// The order an event of the orders stream carries, if it carries one.
    pub fn from_event(event: &StoredEvent) -> Option<Order> {
        let number = event.payload.get("order")?.as_u64()?;
        Some(Order {
            number,
            position: event.position,
        })
    }
}

/// The shop: places orders in the stream, and remembers the ones whose append was confirmed.
#[derive(Debug)]
pub struct Shop {
    stream: String,
    placed: Mutex<Vec<Order>>,
    close: Notify,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Shop {
    /// Opens the shop: from now on it places order 1, 2, 3… in `stream`, one every `every`,
    /// until [`close`](Self::close).
    pub fn open(
        stream: &str,
        storage: Arc<dyn EventStorage>,
        narrator: Arc<Narrator>,
        every: Duration,
    ) -> Arc<Shop> {
        let shop = Arc::new(Shop {
            stream: stream.to_owned(),
            placed: Mutex::new(Vec::new()),
            close: Notify::new(),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(place_orders(Arc::clone(&shop), storage, narrator, every));
        *shop.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        shop
    }

    /// The events a dispatcher reads: the orders of this shop's stream.
    pub fn query(&self) -> EventQuery {
        EventQuery::stream(self.stream.as_str()).of_type(ORDER_PLACED)
    }

    /// The numbers of every order placed so far, in order.
    pub fn placed(&self) -> Vec<u64> {
        let placed = self.placed.lock().unwrap_or_else(PoisonError::into_inner);
        placed.iter().map(|o| o.number).collect()
    }

    /// Stops placing orders; an append in flight is finished first.
    pub async fn close(&self) {
        self.close.notify_one();
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// Places one order at a time. Each append carries an idempotency key named after the order,
/// so that retrying an append whose outcome is unknown never places an order twice.
async fn place_orders(
    shop: Arc<Shop>,
    storage: Arc<dyn EventStorage>,
    narrator: Arc<Narrator>,
    every: Duration,
) {
    let mut number = 1;
    loop {
        let event = NewEvent::new(
            shop.stream.as_str(),
            ORDER_PLACED,
            json!({ "order": number }),
        );
        let request =
            AppendRequest::new(vec![event]).idempotent(format!("{}-{number}", shop.stream));
        match storage.append(&request).await {
            Ok(stored) => {
                if let Some(order) = stored.first().and_then(Order::from_event) {
                    let mut placed = shop.placed.lock().unwrap_or_else(PoisonError::into_inner);
                    placed.push(order);
                }
                number += 1;
            }
            Err(error) if error.is_unconfirmed() => narrator.say(
                "shop",
                format!("could not confirm order {number}; retrying: {error}"),
            ),
            Err(error) => {
                narrator.say("shop", format!("cannot place orders any more: {error}"));
                return;
            }
        }
        tokio::select! {
            () = shop.close.notified() => return,
            () = sleep(every) => {}
        }
    }
}

/// One batch the downstream accepted.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub who: String,
    pub token: u64,
    pub orders: Vec<Order>,
    /// When it was accepted.
    pub at: Instant,
}

/// One batch the downstream refused: who sent it, its orders, its token, and the higher token
/// accepted before.
#[derive(Clone, Debug)]
pub struct Rejection {
    pub who: String,
    pub orders: Vec<u64>,
    pub stale: u64,
    pub current: u64,
}

/// The system the dispatchers deliver orders to. It keeps the highest fencing token it has
/// accepted and refuses batches stamped with an older one.
#[derive(Debug, Default)]
pub struct Downstream {
    guard: FencingGuard,
    lease: String,
    accepted: Mutex<Vec<Delivery>>,
    rejected: Mutex<Vec<Rejection>>,
}

impl Downstream {
    pub fn new(lease: &str) -> Arc<Self> {
        Arc::new(Downstream {
            lease: lease.to_owned(),
            ..Downstream::default()
        })
    }

    /// Delivers one batch from `who`, stamped with `token`. Returns the numbers of the orders
    /// it had already received before (dispatched again), or the rejection.
    pub fn deliver(
        &self,
        who: &str,
        token: FencingToken,
        orders: &[Order],
    ) -> Result<Vec<u64>, StaleToken> {
        self.guard
            .admit_with(&self.lease, token, || {
                let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
                let seen: BTreeSet<u64> = accepted
                    .iter()
                    .flat_map(|d| d.orders.iter().map(|o| o.number))
                    .collect();
                accepted.push(Delivery {
                    who: who.to_owned(),
                    token: token.get(),
                    orders: orders.to_vec(),
                    at: Instant::now(),
                });
                orders
                    .iter()
                    .map(|o| o.number)
                    .filter(|n| seen.contains(n))
                    .collect()
            })
            .inspect_err(|stale| {
                self.rejected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Rejection {
                        who: who.to_owned(),
                        orders: orders.iter().map(|o| o.number).collect(),
                        stale: stale.stale.get(),
                        current: stale.current.get(),
                    });
            })
    }

    /// Every accepted batch, in the order accepted.
    pub fn accepted(&self) -> Vec<Delivery> {
        self.accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every rejected batch.
    pub fn rejected(&self) -> Vec<Rejection> {
        self.rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether every order in `orders` was delivered at least once.
    pub fn has_all(&self, orders: &[u64]) -> bool {
        let accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        let delivered: BTreeSet<u64> = accepted
            .iter()
            .flat_map(|d| d.orders.iter().map(|o| o.number))
            .collect();
        orders.iter().all(|n| delivered.contains(n))
    }
}

/// "order 7", "orders 3–9", "orders 1–4, 7": a list of order numbers in a few words.
pub fn describe(numbers: &[u64]) -> String {
    let spans = spans(numbers);
    match spans.as_slice() {
        [] => "no orders".to_owned(),
        [(a, b)] if a == b => format!("order {a}"),
        _ => format!("orders {}", join_spans(&spans)),
    }
}

/// The numbers as runs of consecutive numbers: `[(1, 4), (7, 7)]`.
fn spans(numbers: &[u64]) -> Vec<(u64, u64)> {
    let sorted: BTreeSet<u64> = numbers.iter().copied().collect();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for n in sorted {
        match spans.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => spans.push((n, n)),
        }
    }
    spans
}

fn join_spans(spans: &[(u64, u64)]) -> String {
    spans
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders(numbers: &[u64]) -> Vec<Order> {
        numbers
            .iter()
            .map(|&number| Order {
                number,
                position: EventPosition::new(number).unwrap(),
            })
            .collect()
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn order_lists_read_as_runs() {
        assert_eq!(describe(&[]), "no orders");
        assert_eq!(describe(&[7]), "order 7");
        assert_eq!(describe(&[3, 4, 5]), "orders 3–5");
        assert_eq!(describe(&[7, 1, 2, 2, 3, 4]), "orders 1–4, 7");
        assert_eq!(describe(&[1, 3]), "orders 1, 3");
    }

    #[test]
    fn the_downstream_notices_repeats_and_fences_old_tokens() {
        let downstream = Downstream::new("l");
        assert_eq!(
            downstream.deliver("a", token(1), &orders(&[1, 2])),
            Ok(vec![])
        );
        assert_eq!(
            downstream.deliver("b", token(2), &orders(&[2, 3])),
            Ok(vec![2])
        );
        let stale = downstream
            .deliver("a", token(1), &orders(&[4]))
            .unwrap_err();
        assert_eq!((stale.stale, stale.current), (token(1), token(2)));
        assert_eq!(downstream.accepted().len(), 2);
        let rejected = downstream.rejected();
        assert_eq!(rejected[0].orders, vec![4]);
        assert!(downstream.has_all(&[1, 2, 3]));
        assert!(!downstream.has_all(&[4]));
    }
}
