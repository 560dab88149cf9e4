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

/// One subscriber's stream.
pub struct EventStream {
    shared: Arc<Shared>,
    id: SubscriberId,
    replay: mailjar_core::api::Replay,
    head: watch::Receiver<u64>,
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
            self.head.borrow_and_update();
            match self.shared.next_events(self.id).await {
                Sendable::Events(events) => {
                    self.frame(&events, &mut out);
                    if !out.is_empty() {
                        return Some(out);
                    }
                }
                Sendable::Idle => {
                    let keep_alive = Duration::from_millis(KEEP_ALIVE_MS);
                    tokio::select! {
                        changed = self.head.changed() => if changed.is_err() {
                            self.ended = true;
                            return None;
                        },
                        _ = tokio::time::sleep(keep_alive) => return Some(KEEP_ALIVE.to_vec()),
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

    /// Writes `events` to `out`, up to one that ends the stream.
    fn frame(&mut self, events: &[Event], out: &mut Vec<u8>) {
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
