//! The stop signal of `Processor::run_until`: polled until it fires, never after.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

/// A stop signal that remembers having fired, so that a future that must not be polled after
/// completing is not.
pub(crate) struct Stop<'a, S> {
    signal: Pin<&'a mut S>,
    fired: bool,
}

impl<'a, S: Future<Output = ()>> Stop<'a, S> {
    pub(crate) fn new(signal: Pin<&'a mut S>) -> Self {
        Stop {
            signal,
            fired: false,
        }
    }

    /// Whether the signal has fired, polling it once if it has not yet.
    pub(crate) async fn has_fired(&mut self) -> bool {
        if !self.fired {
            let signal = &mut self.signal;
            self.fired = poll_fn(|cx| Poll::Ready(signal.as_mut().poll(cx).is_ready())).await;
        }
        self.fired
    }

    /// Completes when the signal fires, at once if it has.
    ///
    /// Cancel safe: dropping it before the signal fires changes nothing.
    pub(crate) async fn fired(&mut self) {
        if !self.fired {
            self.signal.as_mut().await;
            self.fired = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fired_signal_is_never_polled_again() {
        // An `async` block panics when polled after completing.
        let done = std::pin::pin!(async {});
        let mut stop = Stop::new(done);
        assert!(stop.has_fired().await);
        assert!(stop.has_fired().await);
        stop.fired().await;

        let never = std::pin::pin!(std::future::pending::<()>());
        let mut pending = Stop::new(never);
        assert!(!pending.has_fired().await);
    }
}
