//! `--relay-auto PATTERN`: every stored message with a recipient matching a
//! pattern is released to those recipients, from a bounded queue, never
//! delaying its 250.
//!
//! After a message is stored, its id and matching recipients (never its
//! bytes) are offered to a queue of `--relay-queue` with `try_send`, outside
//! every lock; a full queue drops it (counted, logged). At most
//! [`MAX_IN_FLIGHT`] releases run at once; each looks the message up when
//! its turn comes (one that left the store by then is counted `failed`),
//! sends it through the [`Relay`], and retries a transient refusal (4xx)
//! or a connection error after 1, 2, 4, 8 and 16 s; a permanent refusal
//! (5xx) is not retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mailjar_core::api::Pattern;
use mailjar_core::id::MessageId;
use tokio::sync::{Semaphore, mpsc};

use crate::release::{Messages, Relay};

/// Releases running at once.
pub const MAX_IN_FLIGHT: usize = 4;

const BACKOFF_SECS: [u64; 5] = [1, 2, 4, 8, 16];

/// One message to release: its id and the recipients the patterns matched.
struct Job {
    id: MessageId,
    to: Vec<String>,
}

#[derive(Debug, Default)]
struct Counts {
    queued: AtomicU64,
    released: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    /// Releases given up because their message had left the store (in `failed` too).
    gone: AtomicU64,
}

/// The automatic releases' patterns, queue and counts.
pub struct AutoRelay {
    patterns: Vec<Pattern>,
    queue: mpsc::Sender<Job>,
    counts: Arc<Counts>,
    capacity: usize,
}

impl AutoRelay {
    /// Starts the releasing task; None without `--relay-auto`.
    pub fn start(
        patterns: &[String],
        capacity: usize,
        relay: Option<Arc<Relay>>,
        shared: Arc<dyn Messages>,
    ) -> Result<Option<Arc<AutoRelay>>, String> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let relay = relay.ok_or("--relay-auto needs --relay HOST:PORT")?;
        if capacity == 0 {
            return Err("--relay-queue must be greater than 0".to_owned());
        }
        let patterns = patterns
            .iter()
            .map(|p| Pattern::parse(p).map_err(|e| format!("--relay-auto: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let (queue, receiver) = mpsc::channel(capacity);
        let counts = Arc::new(Counts::default());
        let weak = Arc::downgrade(&shared);
        tokio::spawn(run(receiver, relay, weak, counts.clone()));
        Ok(Some(Arc::new(AutoRelay {
            patterns,
            queue,
            counts,
            capacity,
        })))
    }

    /// Queues the release of a stored message whose recipients match, never waiting.
    pub fn stored(&self, id: MessageId, recipients: &[String]) {
        let to: Vec<String> = recipients
            .iter()
            .filter(|r| self.patterns.iter().any(|p| crate::release::matches(p, r)))
            .cloned()
            .collect();
        if to.is_empty() {
            return;
        }
        self.counts.queued.fetch_add(1, Ordering::Relaxed);
        if self.queue.try_send(Job { id, to }).is_err() {
            self.counts.queued.fetch_sub(1, Ordering::Relaxed);
            let dropped = self.counts.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if !sparse(dropped) {
                return;
            }
            tracing::warn!(%id, dropped, "relay queue full (--relay-queue {}): not released", self.capacity);
        }
    }

    /// `/health`'s `relay`.
    pub fn health(&self) -> serde_json::Value {
        let c = &self.counts;
        serde_json::json!({
            "queued": c.queued.load(Ordering::Relaxed),
            "released": c.released.load(Ordering::Relaxed),
            "failed": c.failed.load(Ordering::Relaxed),
            "dropped": c.dropped.load(Ordering::Relaxed),
        })
    }
}

/// Whether the `n`th of a kind of event is logged: the 1st, 2nd, 4th... and
/// every 1000th, so that a flood of them is not a flood of lines.
fn sparse(n: u64) -> bool {
    n.is_power_of_two() || n.is_multiple_of(1000)
}

async fn run(
    mut receiver: mpsc::Receiver<Job>,
    relay: Arc<Relay>,
    shared: std::sync::Weak<dyn Messages>,
    counts: Arc<Counts>,
) {
    let running = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(job) = receiver.recv().await {
        let Ok(permit) = running.clone().acquire_owned().await else {
            return;
        };
        let (relay, shared, counts) = (relay.clone(), shared.clone(), counts.clone());
        tokio::spawn(async move {
            let released = release(&relay, &shared, &job, &counts).await;
            let counter = if released {
                &counts.released
            } else {
                &counts.failed
            };
            counter.fetch_add(1, Ordering::Relaxed);
            counts.queued.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// Releases one message, with retries; whether the relay took it.
async fn release(
    relay: &Relay,
    shared: &std::sync::Weak<dyn Messages>,
    job: &Job,
    counts: &Counts,
) -> bool {
    let id = job.id;
    let mut last = String::new();
    for attempt in 0..=BACKOFF_SECS.len() {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(BACKOFF_SECS[attempt - 1])).await;
        }
        // Looked up each time: a queued release holds no message bytes.
        let Some(email) = shared.upgrade().and_then(|s| s.stored(id)) else {
            let gone = counts.gone.fetch_add(1, Ordering::Relaxed) + 1;
            // Sparse, like the drops: a store that turns over fast would log each one.
            if sparse(gone) {
                tracing::warn!(%id, gone, "not released: the message left the store first");
            }
            return false;
        };
        match relay.send(&email.envelope.from, &job.to, email.raw()).await {
            Ok(reply) => {
                tracing::info!(%id, recipients = job.to.len(), "message released: {reply}");
                return true;
            }
            Err(reply) if reply.starts_with("permanent error") => {
                tracing::warn!(%id, "release refused, not retried: {reply}");
                return false;
            }
            Err(reply) => last = reply,
        }
        tracing::debug!(%id, attempt, "release failed: {last}");
    }
    tracing::warn!(%id, "release given up after {} retries: {last}", BACKOFF_SECS.len());
    false
}
