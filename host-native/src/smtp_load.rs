//! The bytes SMTP sessions hold, over every connection, against `--max-inflight-bytes`.
//!
//! Every session asks the [`SmtpLoad`] shared by all connections for room
//! before it holds more message text or envelope. Each connection may hold up
//! to [`FREE_BYTES_PER_CONNECTION`] (one read buffer) without asking, so a
//! small message still gets through while big ones fill the budget; beyond
//! that the bytes are charged to the budget, and a session refused room reads
//! its message to the end without keeping it and answers 452 4.3.1. So the
//! bytes in flight stay under the budget plus one read buffer per open
//! connection. A message's charge is released once it is stored, and a
//! connection's on RSET (at its next read) and when it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mailjar_core::smtp::Budget;

/// How much one read takes at most.
pub const READ_BUFFER_BYTES: usize = 16 * 1024;

/// What one connection may hold without charging the shared budget: one read buffer.
pub const FREE_BYTES_PER_CONNECTION: usize = READ_BUFFER_BYTES;

/// The bytes SMTP sessions hold (message text and envelopes) over every
/// connection, the budget they are charged against, and the open connections.
#[derive(Debug)]
pub struct SmtpLoad {
    /// `--max-inflight-bytes`.
    limit: usize,
    /// Bytes charged against `limit`: what each session holds beyond its free allowance.
    charged: AtomicUsize,
    /// Bytes every session holds, free allowances included.
    held: AtomicUsize,
    /// Open SMTP connections.
    connections: AtomicUsize,
}

impl SmtpLoad {
    /// No bytes in flight yet, under this budget.
    pub fn new(limit: usize) -> SmtpLoad {
        SmtpLoad {
            limit,
            charged: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
        }
    }

    /// The bytes SMTP sessions hold now (for `/health`'s `inflightBytes`).
    pub fn inflight_bytes(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The SMTP connections open now (for `/health`'s `smtpConnections`).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// The budget, `--max-inflight-bytes`.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Counts one open connection in [`SmtpLoad`] while it lives.
pub struct OpenConnection(Arc<SmtpLoad>);

impl OpenConnection {
    /// Counts one more connection until the value is dropped.
    pub fn new(load: Arc<SmtpLoad>) -> OpenConnection {
        load.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(load)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection's share of [`SmtpLoad`]; gives it all back when dropped.
pub struct ConnectionBudget {
    load: Arc<SmtpLoad>,
    /// What the session last said it holds.
    held: usize,
}

impl ConnectionBudget {
    /// A connection's share, holding nothing yet.
    pub fn new(load: Arc<SmtpLoad>) -> ConnectionBudget {
        ConnectionBudget { load, held: 0 }
    }
}

impl Budget for ConnectionBudget {
    fn hold(&mut self, total: usize) -> bool {
        let before = self.held.saturating_sub(FREE_BYTES_PER_CONNECTION);
        let after = total.saturating_sub(FREE_BYTES_PER_CONNECTION);
        if after > before {
            let extra = after - before;
            let limit = self.load.limit;
            let charged =
                self.load
                    .charged
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                        c.checked_add(extra).filter(|&n| n <= limit)
                    });
            if charged.is_err() {
                return false;
            }
        } else if before > after {
            self.load
                .charged
                .fetch_sub(before - after, Ordering::AcqRel);
        }
        if total > self.held {
            self.load
                .held
                .fetch_add(total - self.held, Ordering::Relaxed);
        } else {
            self.load
                .held
                .fetch_sub(self.held - total, Ordering::Relaxed);
        }
        self.held = total;
        true
    }
}

impl Drop for ConnectionBudget {
    fn drop(&mut self) {
        self.hold(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(load: &Arc<SmtpLoad>) -> ConnectionBudget {
        ConnectionBudget {
            load: load.clone(),
            held: 0,
        }
    }

    #[test]
    fn each_connection_holds_one_read_buffer_free_and_the_rest_is_charged() {
        let load = Arc::new(SmtpLoad::new(100_000));
        let (mut a, mut b) = (budget(&load), budget(&load));
        assert!(a.hold(FREE_BYTES_PER_CONNECTION));
        assert_eq!(load.charged.load(Ordering::Relaxed), 0);
        assert!(a.hold(FREE_BYTES_PER_CONNECTION + 60_000));
        assert_eq!(load.charged.load(Ordering::Relaxed), 60_000);
        // b may still use its free allowance, and the 40,000 left, but no more.
        assert!(b.hold(FREE_BYTES_PER_CONNECTION + 40_000));
        assert!(!b.hold(FREE_BYTES_PER_CONNECTION + 40_001));
        assert_eq!(load.charged.load(Ordering::Relaxed), 100_000);
        assert_eq!(
            load.inflight_bytes(),
            2 * FREE_BYTES_PER_CONNECTION + 100_000
        );
        // In flight never passes the budget plus one read buffer per connection.
        assert!(load.inflight_bytes() <= load.limit() + 2 * FREE_BYTES_PER_CONNECTION);
        // Shrinking releases; a connection that ends gives everything back.
        assert!(a.hold(10));
        assert_eq!(load.charged.load(Ordering::Relaxed), 40_000);
        drop(b);
        drop(a);
        assert_eq!(load.charged.load(Ordering::Relaxed), 0);
        assert_eq!(load.inflight_bytes(), 0);
    }

    #[test]
    fn a_refused_growth_changes_nothing() {
        let load = Arc::new(SmtpLoad::new(1000));
        let mut a = budget(&load);
        assert!(a.hold(FREE_BYTES_PER_CONNECTION + 500));
        assert!(!a.hold(FREE_BYTES_PER_CONNECTION + 1001));
        assert_eq!(a.held, FREE_BYTES_PER_CONNECTION + 500);
        assert_eq!(load.charged.load(Ordering::Relaxed), 500);
        assert_eq!(load.inflight_bytes(), FREE_BYTES_PER_CONNECTION + 500);
    }

    #[test]
    fn open_connections_are_counted_while_they_live() {
        let load = Arc::new(SmtpLoad::new(1));
        let first = OpenConnection::new(load.clone());
        let second = OpenConnection::new(load.clone());
        assert_eq!(load.connections(), 2);
        drop(first);
        assert_eq!(load.connections(), 1);
        drop(second);
        assert_eq!(load.connections(), 0);
    }
}
