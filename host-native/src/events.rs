//! `GET /api/events` on the wire: a subscription's replay, then its live
//! events, as `text/event-stream`, with a keep-alive comment while idle.
//!
//! The stream is pulled by the HTTP driver one write at a time, and each
//! write is one step of the core's ([`mailjar_core::api::EventBatch`]): at most
//! [`STEP_BYTES`] of events (plus one), written as pieces of the summaries
//! and deletion lists every stream shares, never copied. A client that reads
//! slowly slows only its own stream and holds one step; meanwhile the event
//! log goes on without it, and when it falls too far behind the core ends it
//! with `overflow`. A stream that has more to send yields to other tasks
//! between steps, and a step that reads large messages runs on the blocking
//! pool. Dropping the stream (the client left, the server stops) ends the
//! subscription.
//!
//! [`STEP_BYTES`]: mailjar_core::api::STEP_BYTES

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mailjar_core::api::{Event, SsePieces, SubscriberId, Subscription};
use mailjar_core::api::{KEEP_ALIVE, KEEP_ALIVE_MS};
use tokio::sync::watch;

use crate::http1::{LiveNext, LiveSource};
use crate::state::{Sendable, Shared};

/// How long a stream waits before its next look at the log when, since it
/// last caught up, it has sent more than one event: mail is arriving faster
/// than it drains, and each write wakes its client, so it takes a few
/// milliseconds' worth of events per write instead of one. A stream whose
/// looks find one event at a time (a test sending one message and waiting
/// for its event) is never delayed.
const LINGER: Duration = Duration::from_millis(20);

/// One subscriber's stream.
pub struct EventStream {
    shared: Arc<Shared>,
    id: SubscriberId,
    head: watch::Receiver<u64>,
    /// Moves when the core ended subscriptions elsewhere: look whether this one stands.
    ended_elsewhere: watch::Receiver<u64>,
    /// The log head it has caught up with: it has news when the published head passes it.
    seen: Option<u64>,
    /// Events sent since it last caught up.
    burst: usize,
    /// Wait [`LINGER`] before the next look.
    linger: bool,
    /// Its last step left more to send: take the next one at once (after a yield).
    more: bool,
    ended: bool,
}

impl EventStream {
    /// The stream of a new subscription.
    pub fn new(shared: Arc<Shared>, subscription: Subscription) -> EventStream {
        let head = shared.event_head();
        let ended_elsewhere = shared.ended_subscriptions();
        EventStream {
            id: subscription.id,
            shared,
            head,
            ended_elsewhere,
            seen: None,
            burst: 0,
            linger: false,
            // A replay, if it resumes, is waiting.
            more: true,
            ended: false,
        }
    }

    /// The next pieces to write: one step's events, or a keep-alive comment
    /// after [`KEEP_ALIVE_MS`] without any; None when the stream is over.
    pub async fn next_pieces(&mut self) -> Option<Vec<Bytes>> {
        loop {
            if self.ended {
                return None;
            }
            if self.more {
                // Between the steps of a long catch-up: let other tasks run.
                tokio::task::yield_now().await;
            }
            // Marked seen before looking: a change after the look wakes us.
            let published = *self.head.borrow_and_update();
            if !self.more {
                if self.seen.is_some_and(|seen| published <= seen) {
                    // Nothing published past what it has: no need to ask.
                    if !self.idle().await {
                        return Some(keep_alive());
                    }
                    continue;
                }
                if std::mem::take(&mut self.linger) {
                    tokio::time::sleep(LINGER).await;
                }
            }
            match self.shared.next_events(self.id).await {
                Sendable::Events(ran, head) => {
                    self.more = !ran.caught_up;
                    self.burst += ran.events.len();
                    if ran.caught_up {
                        self.caught_up(head);
                    }
                    if let Some(pieces) = self.frame(&ran.events) {
                        return Some(pieces);
                    }
                }
                Sendable::Idle => {
                    self.more = false;
                    self.caught_up(published);
                    if !self.idle().await {
                        return Some(keep_alive());
                    }
                }
                Sendable::End(last) => {
                    self.ended = true;
                    return self.frame(&[last?]);
                }
            }
        }
    }

    /// It has everything up to log head `head`.
    fn caught_up(&mut self, head: u64) {
        self.seen = Some(head);
        self.linger = std::mem::take(&mut self.burst) > 1;
    }

    /// Waits for the published head to move: true when it did (or the server
    /// stopped: the stream ends), false after the keep-alive interval. When
    /// subscriptions were ended elsewhere it is true too, and the next look
    /// asks the core even with nothing published ([`Sendable::End`] ends it).
    async fn idle(&mut self) -> bool {
        let keep_alive = Duration::from_millis(KEEP_ALIVE_MS);
        tokio::select! {
            changed = self.head.changed() => {
                if changed.is_err() {
                    self.ended = true;
                }
                true
            }
            changed = self.ended_elsewhere.changed() => {
                match changed {
                    Ok(()) => self.more = true,
                    Err(_) => self.ended = true,
                }
                true
            }
            _ = tokio::time::sleep(keep_alive) => false,
        }
    }

    /// `events` as pieces to write, up to one that ends the stream; None for none.
    fn frame(&mut self, events: &[Event]) -> Option<Vec<Bytes>> {
        let mut pieces = SsePieces::with_capacity(events.len());
        for event in events {
            pieces.push(event);
            if event.ends_stream() {
                self.ended = true;
                break;
            }
        }
        (!pieces.is_empty()).then(|| pieces.into_pieces())
    }
}

/// The keep-alive comment, as pieces.
fn keep_alive() -> Vec<Bytes> {
    let mut pieces = SsePieces::default();
    pieces.push_comment(KEEP_ALIVE);
    pieces.into_pieces()
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.shared.unsubscribe(self.id);
    }
}

impl LiveSource for EventStream {
    fn next(mut self: Box<Self>) -> LiveNext {
        Box::pin(async move {
            let pieces = self.next_pieces().await?;
            Some((pieces, self as Box<dyn LiveSource>))
        })
    }
}
