//! The one lock around the core's [`Api`] and the clients parked on its waits.
//!
//! The lock is held only for in-memory work on the store, never across IO:
//! messages are parsed before it is taken and responses are sent after it is
//! released.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use mailjar_core::api::{Api, Outcome, Request, Response, WaitId};
use mailjar_core::id::{Entropy, MessageId};
use mailjar_core::smtp::Incoming;
use mailjar_core::store::Prepared;
use tokio::sync::oneshot;

/// The API and its parked waits, shared by every connection.
pub struct Shared {
    inner: Mutex<Inner>,
}

struct Inner {
    api: Api,
    /// One sender per parked wait: the only way a delivery reaches a waiting client.
    waiters: HashMap<WaitId, oneshot::Sender<Response>>,
}

/// What a request turned into: a response now, or one to wait for.
pub enum Handled {
    /// Send this now.
    Ready(Response),
    /// A parked wait: its response arrives on `receiver` unless the deadline comes first.
    Wait {
        /// Names the wait for [`Shared::expire`] and [`Shared::cancel`].
        id: WaitId,
        /// When the wait ends with a 408, in milliseconds since the Unix epoch.
        deadline_ms: u64,
        /// Where [`Shared::deliver`] sends the response.
        receiver: oneshot::Receiver<Response>,
    },
}

/// The wall clock in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn entropy() -> Entropy {
    let mut bytes = Entropy::default();
    if getrandom::fill(&mut bytes).is_err() {
        // Ids stay unique without entropy: the generator counts up within a millisecond.
        tracing::warn!("no OS randomness for message ids");
    }
    bytes
}

impl Shared {
    /// Shares this API.
    pub fn new(api: Api) -> Shared {
        Shared {
            inner: Mutex::new(Inner {
                api,
                waiters: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not stop mail from being stored: the data is still consistent
        // because every mutation happens inside the core in one call.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stores a message and answers the waits it matches; returns its id.
    pub fn deliver(&self, incoming: Incoming) -> MessageId {
        let prepared = Prepared::new(incoming);
        let entropy = entropy();
        let (delivered, senders) = {
            let mut inner = self.lock();
            // Read under the lock that orders deliveries, so receivedAt follows receive order.
            let now = now_ms();
            let delivered = inner.api.deliver(prepared, now, entropy);
            let senders: Vec<_> = delivered
                .woken
                .iter()
                .filter_map(|(id, _)| inner.waiters.remove(id))
                .collect();
            (delivered, senders)
        };
        for (sender, (_, response)) in senders.into_iter().zip(delivered.woken) {
            // A client that left between its wake-up and now cancels nothing: fine to drop.
            let _ = sender.send(response);
        }
        delivered.id
    }

    /// Answers a request, or parks it as a wait whose sender is registered atomically with it.
    pub fn handle(&self, request: &Request) -> Handled {
        let now = now_ms();
        let mut inner = self.lock();
        match inner.api.handle(request, now) {
            Outcome::Ready(response) => Handled::Ready(response),
            Outcome::Wait(spec) => {
                let (sender, receiver) = oneshot::channel();
                inner.waiters.insert(spec.id, sender);
                Handled::Wait {
                    id: spec.id,
                    deadline_ms: spec.deadline_ms,
                    receiver,
                }
            }
        }
    }

    /// Ends a wait at its deadline: the 408, or None when a delivery answered it first.
    pub fn expire(&self, id: WaitId) -> Option<Response> {
        let mut inner = self.lock();
        inner.waiters.remove(&id);
        inner.api.expire(id)
    }

    /// Forgets a wait whose client went away.
    pub fn cancel(&self, id: WaitId) {
        let mut inner = self.lock();
        inner.waiters.remove(&id);
        inner.api.cancel(id);
    }

    /// How many waits are parked, in the core and in this host (they must agree).
    pub fn pending_waits(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.api.pending_waits(), inner.waiters.len())
    }

    /// How many messages are stored.
    pub fn stored(&self) -> usize {
        self.lock().api.store().len()
    }
}
