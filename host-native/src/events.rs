//! `GET /api/events` on the wire: a subscription's replay, then its live
//! events, as `text/event-stream`, with a keep-alive comment while idle.
//!
//! The stream is pulled by the HTTP driver one write at a time, so a client
//! that reads slowly slows only its own stream; meanwhile the event log goes
//! on without it, and when it falls too far behind the core ends it with
//! `overflow`. Dropping the stream (the client left, the server stops) ends
//! the subscription.

use std::sync::Arc;
use std::time::Duration;

use mailjar_core::api::{Event, SubscriberId, Subscription};
use mailjar_core::events::{KEEP_ALIVE, KEEP_ALIVE_MS};
use tokio::sync::watch;

use crate::http1::{LiveNext, LiveSource};
use crate::state::{Sendable, Shared};

/// How many stored messages one step of a replay looks at.
const REPLAY_BATCH: usize = 256;

/// How long a stream waits before its next look at the log when its last
/// look found more than one new entry: mail is arriving faster than it
/// drains, and each write wakes its client, so it takes a few milliseconds'
/// worth of events per write instead of one. A stream whose looks find one
/// entry at a time (a test sending one message and waiting for its event)
/// is never delayed.
const LINGER: Duration = Duration::from_millis(20);

/// One subscriber's stream.
pub struct EventStream {
    shared: Arc<Shared>,
    id: SubscriberId,
    replay: mailjar_core::api::Replay,
    head: watch::Receiver<u64>,
    /// The log head its last batch reached: it has news when the published head passes it.
    seen: u64,
    /// Its last look found more than one entry: wait [`LINGER`] before the next.
    linger: bool,
    ended: bool,
}

impl EventStream {
    /// The stream of a new subscription.
    pub fn new(shared: Arc<Shared>, subscription: Subscription) -> EventStream {
        let head = shared.event_head();
        EventStream {
            id: subscription.id,
            replay: subscription.replay,
            shared,
            head,
            seen: 0,
            linger: false,
            ended: false,
        }
    }

    /// The next bytes to write: events, or a keep-alive comment after
    /// [`KEEP_ALIVE_MS`] without any; None when the stream is over.
    pub async fn next_bytes(&mut self) -> Option<Vec<u8>> {
        if self.ended {
            return None;
        }
        let mut out = Vec::new();
        while let Some(batch) = self.replay.next_batch(REPLAY_BATCH) {
            let events = self.shared.run_events(batch).await;
            self.frame(&events, &mut out);
            if !out.is_empty() {
                return Some(out);
            }
        }
        loop {
            // Marked seen before looking: a change after the look wakes us.
            let published = *self.head.borrow_and_update();
            if published <= self.seen {
                // Nothing published past what the last batch took: no need to ask.
                if !self.idle().await {
                    return Some(KEEP_ALIVE.to_vec());
                }
                continue;
            }
            if self.linger {
                tokio::time::sleep(LINGER).await;
            }
            match self.shared.next_events(self.id).await {
                Sendable::Events(events, head, entries) => {
                    self.seen = head;
                    self.linger = entries > 1;
                    self.frame(&events, &mut out);
                    if !out.is_empty() {
                        return Some(out);
                    }
                }
                Sendable::Idle => {
                    self.seen = published;
                    self.linger = false;
                    if !self.idle().await {
                        return Some(KEEP_ALIVE.to_vec());
                    }
                }
                Sendable::End(last) => {
                    self.ended = true;
                    last.as_ref()?.write_sse(&mut out);
                    return Some(out);
                }
            }
        }
    }

    /// Waits for the published head to move: true when it did (or the server
    /// stopped: the next look ends the stream), false after the keep-alive interval.
    async fn idle(&mut self) -> bool {
        let keep_alive = Duration::from_millis(KEEP_ALIVE_MS);
        tokio::select! {
            changed = self.head.changed() => {
                if changed.is_err() {
                    self.ended = true;
                }
                true
            }
            _ = tokio::time::sleep(keep_alive) => false,
        }
    }

    /// Writes `events` to `out`, up to one that ends the stream.
    fn frame(&mut self, events: &[Event], out: &mut Vec<u8>) {
        // Room for all of them at once (an event's name, id and framing take
        // well under 64 bytes): a large batch is not copied as it grows.
        out.reserve(events.iter().map(|e| e.data().len() + 64).sum());
        for event in events {
            event.write_sse(out);
            if event.ends_stream() {
                self.ended = true;
                // No more replay after an error.
                self.replay = mailjar_core::api::Replay::empty();
                break;
            }
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.shared.unsubscribe(self.id);
    }
}

impl LiveSource for EventStream {
    fn next(mut self: Box<Self>) -> LiveNext {
        Box::pin(async move {
            let bytes = self.next_bytes().await?;
            Some((bytes, self as Box<dyn LiveSource>))
        })
    }
}
