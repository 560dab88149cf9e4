//! The kept-alive connections that are waiting for their next request, oldest
//! first: at the connection cap, the one that has been idle longest is asked
//! to close so that a new connection can open. Clients reconnect to a closed
//! kept-alive connection; idle sockets they keep (a pool of `fetch`
//! connections) then no longer lock other clients out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// The idle kept-alive connections, in the order they went idle.
#[derive(Debug, Clone, Default)]
pub struct IdleConnections {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Debug, Default)]
struct Registry {
    next: u64,
    /// By the order they went idle: when, and how to ask each to close.
    waiting: BTreeMap<u64, (Instant, oneshot::Sender<()>)>,
}

impl IdleConnections {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the connection that has been idle longest, if for at least
    /// `grace`, to close; false when there is none.
    pub(super) fn close_oldest(&self, grace: Duration) -> bool {
        let mut registry = self.registry();
        while let Some(oldest) = registry.waiting.first_entry() {
            if oldest.get().0.elapsed() < grace {
                return false;
            }
            let (_, close) = oldest.remove();
            // A connection that left its idle wait without dropping its guard yet: the next one.
            if close.send(()).is_ok() {
                return true;
            }
        }
        false
    }

    /// Counts a connection as idle until the guard drops.
    pub(super) fn waiting(&self) -> IdleGuard<'_> {
        let (close, asked) = oneshot::channel();
        let mut registry = self.registry();
        let key = registry.next;
        registry.next += 1;
        registry.waiting.insert(key, (Instant::now(), close));
        IdleGuard {
            idle: self,
            key,
            asked,
        }
    }

    /// How many connections are idle now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.registry().waiting.len()
    }
}

/// One idle connection, in [`IdleConnections`] while the guard lives.
pub(super) struct IdleGuard<'a> {
    idle: &'a IdleConnections,
    key: u64,
    asked: oneshot::Receiver<()>,
}

impl IdleGuard<'_> {
    /// Completes when this connection is asked to close; never otherwise.
    pub(super) async fn asked(&mut self) {
        if (&mut self.asked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for IdleGuard<'_> {
    fn drop(&mut self) {
        self.idle.registry().waiting.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn asked_within(guard: &mut IdleGuard<'_>, ms: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(ms), guard.asked())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn the_oldest_idle_connection_is_asked_first_and_only_it() {
        let idle = IdleConnections::default();
        let mut first = idle.waiting();
        let mut second = idle.waiting();
        assert!(idle.close_oldest(Duration::ZERO));
        assert!(asked_within(&mut first, 50).await);
        assert!(!asked_within(&mut second, 50).await);
        assert!(idle.close_oldest(Duration::ZERO));
        assert!(asked_within(&mut second, 50).await);
        assert!(!idle.close_oldest(Duration::ZERO), "no one is left");
    }

    #[tokio::test]
    async fn a_request_for_a_connection_that_left_is_not_kept_for_the_next_one() {
        let idle = IdleConnections::default();
        let gone = idle.waiting();
        drop(gone);
        assert!(!idle.close_oldest(Duration::ZERO));
        // Nothing was stored: a connection that goes idle later is not closed for it.
        let mut later = idle.waiting();
        assert!(!asked_within(&mut later, 50).await);
        assert_eq!(idle.len(), 1);
        drop(later);
        assert_eq!(idle.len(), 0);
    }

    #[tokio::test]
    async fn a_connection_idle_for_less_than_the_grace_keeps_its_slot() {
        let idle = IdleConnections::default();
        let mut fresh = idle.waiting();
        assert!(!idle.close_oldest(Duration::from_secs(60)));
        assert!(!asked_within(&mut fresh, 50).await);
        assert!(idle.close_oldest(Duration::ZERO));
        assert!(asked_within(&mut fresh, 50).await);
    }
}
