//! The one lock around the core's [`Api`] and the clients parked on its waits.
//!
//! The lock is held only for the core's O(1) and O(log n) steps, never across
//! IO and never for work that grows with the input: messages are parsed before
//! it is taken, filtering and pattern matching run as jobs on the blocking
//! pool (at most one per core, so a costly pattern slows only other
//! matching), responses are written after it is released, and what the core
//! lets go of is freed after it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mailjar_core::api::{
    Api, Done, Event, Job, Matches, NextEvents, Ran, Request, Response, Step, SubscriberId,
    Subscription, WaitId,
};
use mailjar_core::budget::Clock;
use mailjar_core::id::{Entropy, MessageId};
use mailjar_core::smtp::{FaultEvent, Fired, Incoming};
use mailjar_core::store::{Email, Prepared};
use tokio::sync::{Notify, Semaphore, oneshot, watch};

use crate::storage::{self, StorageError, writer};

/// Messages at least this large are parsed on the blocking pool, not on an async worker.
const PARSE_INLINE_BYTES: usize = 64 * 1024;

/// The API, which keeps each parked wait with the sender its answer goes to.
type WaitingApi = Api<oneshot::Sender<Response>>;

/// The API and its parked waits, shared by every connection.
pub struct Shared {
    inner: Mutex<WaitingApi>,
    /// One permit per core: how many jobs and match batches run at once.
    workers: Semaphore,
    /// Wakes the matcher when a message is stored while waits are parked.
    stored: Notify,
    /// The event log's head as published to event streams: idle streams wait for it to move.
    event_head: watch::Sender<u64>,
    /// The event log's head as the core has it (the pump publishes it).
    logged_head: AtomicU64,
    /// Wakes the event pump when the log moved.
    logged: Notify,
    /// Event streams take their light steps one at a time: however many
    /// streams have events to send, the async workers' queue holds one of
    /// them, and `/health`, SMTP and the API never wait behind more.
    event_steps: Semaphore,
    /// With `--data-dir`: the storage writer's queue (see [`crate::storage::writer`]).
    writer: std::sync::OnceLock<std::sync::mpsc::Sender<writer::Job>>,
    /// Whether the API holds a fault rule, as of the last time the lock was
    /// released (see [`Locked`]): SMTP sessions skip the lock while it is false.
    any_faults: AtomicBool,
}

/// The API, locked; when released it records whether a fault rule is held,
/// so a rule a request added acts on the next SMTP command of any session.
struct Locked<'a> {
    api: MutexGuard<'a, WaitingApi>,
    any_faults: &'a AtomicBool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = WaitingApi;

    fn deref(&self) -> &WaitingApi {
        &self.api
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut WaitingApi {
        &mut self.api
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Still under the lock: no change of the rules slips in between.
        self.any_faults
            .store(self.api.fault_count() > 0, Ordering::Release);
    }
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
        /// Where a delivery sends the response.
        receiver: oneshot::Receiver<Response>,
    },
    /// An event stream: send its replay, then its live events ([`Shared::next_events`]).
    Subscribe(Subscription),
}

/// Hears whether the writer committed the removals a request caused.
type Persisting = oneshot::Receiver<Result<(), StorageError>>;

/// The 503 text of a delete that left memory but not the disk: the writer
/// keeps trying (`Some` error), and until it succeeds a restart would bring
/// the message back; a stopped writer (`None`: shutting down) tries nothing more.
fn unwritten_delete(e: Option<&StorageError>) -> String {
    match e {
        Some(e) => format!(
            "deleted from memory, but not yet from disk: {e}; mailjar retries the write until the disk takes it (a restart before that brings the messages back)"
        ),
        None => format!(
            "deleted from memory, but not from disk: {} (mailjar is stopping; the messages come back at the next start)",
            writer_stopped()
        ),
    }
}

/// Why a write was not made: the writer has stopped (mailjar is shutting down).
fn writer_stopped() -> StorageError {
    StorageError("the storage writer has stopped".to_owned())
}

/// What an event stream has to send next.
pub enum Sendable {
    /// What one step made, and the log head when it was taken.
    Events(Ran, u64),
    /// Nothing yet: wait for the event log's head to move ([`Shared::event_head`]).
    Idle,
    /// The stream is over (it fell behind, or it was ended).
    End(Option<Event>),
}

/// Whether this runs on a multi-thread runtime, where a task may block its
/// worker for a while ([`tokio::task::block_in_place`]) and others move on.
fn multi_thread() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// The wall clock in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The monotonic clock the core's pattern budgets are measured with.
struct MonotonicClock(Instant);

impl Clock for MonotonicClock {
    fn nanos(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

fn entropy() -> Entropy {
    let mut bytes = Entropy::default();
    if getrandom::fill(&mut bytes).is_err() {
        // Ids stay unique without entropy: the generator counts up within a millisecond.
        tracing::warn!("no OS randomness for message ids");
    }
    bytes
}

/// A seed for the fault rules' probability rolls, from the OS.
pub fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        tracing::warn!("no OS randomness for fault probabilities");
    }
    u64::from_le_bytes(bytes)
}

impl Shared {
    /// The fault that fires for an SMTP session's `event`: asked under the
    /// lock only while a rule is held, so sessions cost nothing without rules.
    pub fn fire_fault(&self, event: &FaultEvent<'_>) -> Option<Fired> {
        if !self.any_faults.load(Ordering::Acquire) {
            return None;
        }
        self.lock().fire_fault(event)
    }

    /// Shares this API; `workers` is how many jobs may run at once (the core count).
    pub fn new(api: WaitingApi, workers: usize) -> Shared {
        Shared {
            inner: Mutex::new(api),
            workers: Semaphore::new(workers.max(1)),
            stored: Notify::new(),
            event_head: watch::Sender::new(0),
            logged_head: AtomicU64::new(0),
            logged: Notify::new(),
            event_steps: Semaphore::new(1),
            writer: std::sync::OnceLock::new(),
            any_faults: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> Locked<'_> {
        // A panic elsewhere must not stop mail from being stored: the data is still consistent
        // because every mutation happens inside the core in one call.
        let api = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Locked {
            api,
            any_faults: &self.any_faults,
        }
    }

    /// Runs `f` on the blocking pool while holding a worker permit.
    async fn on_worker<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Clock) -> T + Send + 'static,
    ) -> Option<T> {
        let _permit = self.workers.acquire().await.ok()?;
        tokio::task::spawn_blocking(move || f(&MonotonicClock(Instant::now())))
            .await
            .map_err(|e| tracing::error!("a job failed: {e}"))
            .ok()
    }

    /// Parses a message (off the async workers when it is large), stores it,
    /// and wakes the matcher when waits are parked; returns its id once it is stored.
    pub fn deliver(&self, incoming: Incoming) -> MessageId {
        let multi_thread = multi_thread();
        let prepared = if incoming.raw.len() >= PARSE_INLINE_BYTES && multi_thread {
            // Other connections' tasks move to another worker while this one parses.
            tokio::task::block_in_place(|| Prepared::new(incoming))
        } else {
            Prepared::new(incoming)
        };
        self.store(prepared)
    }

    /// With `--data-dir`: assigns the message its id and has the writer
    /// commit it, then it is stored in the core; returns its id once all that
    /// is done, or the write's error (nothing is stored then). Without
    /// `--data-dir` it is [`Shared::deliver`].
    pub async fn deliver_durable(&self, incoming: Incoming) -> Result<MessageId, StorageError> {
        let Some(writer) = self.writer.get() else {
            return Ok(self.deliver(incoming));
        };
        let multi_thread = multi_thread();
        // Parsed and built outside the lock; its id and time are set under it.
        let build = |incoming| Email::new(MessageId::from_u128(0), 0, Prepared::new(incoming));
        let mut email = if incoming.raw.len() >= PARSE_INLINE_BYTES && multi_thread {
            tokio::task::block_in_place(|| build(incoming))
        } else {
            build(incoming)
        };
        let entropy = entropy();
        let (reply, receiver) = oneshot::channel();
        {
            let mut api = self.lock();
            // Assigned and queued under one lock: the writer sees messages in id order.
            let assigned = api.assign(now_ms(), entropy);
            email.id = assigned.id;
            email.received_at_ms = assigned.received_at_ms;
            let pending = writer::Pending { email, reply };
            writer
                .send(writer::Job::Store(Box::new(pending)))
                .map_err(|_| writer_stopped())?;
        }
        receiver.await.unwrap_or_else(|_| Err(writer_stopped()))
    }

    /// With `--data-dir`: has the writer finish what is queued and close the
    /// database and its lock; returns once it has. Later deliveries get 452.
    pub async fn stop_writer(&self) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        let (done, stopped) = oneshot::channel();
        if writer.send(writer::Job::Stop(done)).is_ok() {
            let _ = stopped.await;
        }
    }

    /// Starts the storage writer (once, at start): it owns `storage` from
    /// now on and hands what it commits to this state. Held weakly: the state
    /// holds the writer's queue, so a strong reference would keep both alive
    /// after the server stops, and the database's lock with them.
    pub fn start_writer(self: &Arc<Self>, storage: storage::Opened) -> std::io::Result<()> {
        let inserting = Arc::downgrade(self);
        let sender = storage.spawn(Box::new(move |batch| match inserting.upgrade() {
            Some(shared) => shared.insert_committed(batch),
            None => Vec::new(),
        }))?;
        let _ = self.writer.set(sender);
        Ok(())
    }

    /// Stores messages the writer committed, in id order; returns what that
    /// evicted, for the writer to delete from disk.
    pub fn insert_committed(&self, emails: Vec<Email>) -> Vec<mailjar_core::api::Removal> {
        let (trash, head, parked) = {
            let mut api = self.lock();
            let mut parked = false;
            for email in emails {
                parked |= api.insert_email(email).waits_parked;
            }
            (api.take_trash(), api.event_head(), parked)
        };
        let removals = trash.removals();
        drop(trash);
        self.publish(head);
        if parked {
            self.stored.notify_one();
        }
        removals
    }

    /// Evicts what `--max-age` expired (a timer calls it) and has it deleted from disk.
    pub fn expire_old(&self) {
        let (trash, head) = {
            let mut api = self.lock();
            if api.expire_old(now_ms()) == 0 {
                return;
            }
            (api.take_trash(), api.event_head())
        };
        drop(self.persist_removals(&trash));
        drop(trash);
        self.publish(head);
    }

    /// Queues what left the store for the writer to delete from disk; the
    /// receiver hears whether that committed. None without `--data-dir` or removals.
    fn persist_removals(&self, trash: &mailjar_core::api::Trash) -> Option<Persisting> {
        let writer = self.writer.get()?;
        if trash.is_empty() {
            return None;
        }
        let removals = trash.removals();
        if removals.is_empty() {
            return None;
        }
        let (done, receiver) = oneshot::channel();
        // A stopped writer (shutting down) drops the job, and `done` with it:
        // the receiver hears that the delete is not on disk.
        let _ = writer.send(writer::Job::Remove(removals, Some(done)));
        Some(receiver)
    }

    /// Stores a parsed message; returns its id.
    pub fn store(&self, prepared: Prepared) -> MessageId {
        let entropy = entropy();
        let (stored, trash, head) = {
            let mut api = self.lock();
            // Read under the lock that orders deliveries, so receivedAt follows receive order.
            let stored = api.deliver(prepared, now_ms(), entropy);
            (stored, api.take_trash(), api.event_head())
        };
        drop(trash);
        self.publish(head);
        if stored.waits_parked {
            self.stored.notify_one();
        }
        stored.id
    }

    /// Tries newly stored messages against the parked waits, forever: one
    /// batch at a time, outside the lock, split over the workers, each wait
    /// answered once and as soon as it is settled.
    pub async fn match_deliveries(self: Arc<Self>) {
        loop {
            self.stored.notified().await;
            loop {
                let batch = self.lock().match_batch();
                let Some(batch) = batch else { break };
                if !batch.is_heavy() {
                    let matches = batch.run(&MonotonicClock(Instant::now()));
                    self.answer(matches);
                    continue;
                }
                let parts = batch.split(self.workers.available_permits().max(1));
                let runs: Vec<_> = parts
                    .into_iter()
                    .map(|part| {
                        let shared = self.clone();
                        tokio::spawn(async move {
                            let answering = shared.clone();
                            shared
                                .on_worker(move |clock| {
                                    part.run_each(clock, &mut |id, found| {
                                        answering.answer(Matches::one(id, found));
                                    });
                                })
                                .await
                        })
                    })
                    .collect();
                for run in runs {
                    // A part that failed leaves its waits parked until their deadline.
                    let _ = run.await;
                }
            }
        }
    }

    /// Resolves settled waits under the lock and sends their answers after it.
    fn answer(&self, matches: Matches) {
        let woken = self.lock().resolve(matches);
        for (sender, response) in woken {
            // A client that left between its wake-up and now cancels nothing: fine to drop.
            let _ = sender.send(response);
        }
    }

    /// Answers a request, running its work outside the lock, or parks it as a
    /// wait whose sender is registered atomically with it.
    pub async fn handle(&self, request: &Request) -> Handled {
        let now = now_ms();
        let mut next = self.step(|api| api.handle(request, now));
        loop {
            let job = match next {
                Ok((handled, persisted)) => {
                    // A DELETE is answered once it is on disk, or with the disk's
                    // error. Any other request may have expired messages too
                    // (`--max-age`): those are written, or retried, on their own.
                    if let Some(persisted) = persisted
                        && request.method == "DELETE"
                    {
                        let unwritten = match persisted.await {
                            Ok(Ok(())) => None,
                            Ok(Err(e)) => Some(unwritten_delete(Some(&e))),
                            Err(_) => Some(unwritten_delete(None)),
                        };
                        if let Some(text) = unwritten {
                            return Handled::Ready(Response::error(503, &text));
                        }
                    }
                    return handled;
                }
                Err(job) => job,
            };
            next = match self.run(job).await {
                Done::Response(response) => Ok((Handled::Ready(response), None)),
                Done::Commit(commit) => self.step(|api| api.complete(commit, now)),
            };
        }
    }

    /// Calls the core under the lock: a response, a parked wait (registered in
    /// the same critical section), or a job to run. What the core let go of is
    /// freed after the lock is released.
    fn step(
        &self,
        f: impl FnOnce(&mut WaitingApi) -> Step,
    ) -> Result<(Handled, Option<Persisting>), Job> {
        let (next, trash, head) = {
            let mut api = self.lock();
            let next = match f(&mut api) {
                Step::Ready(response) => Ok(Handled::Ready(response)),
                Step::Work(job) => Err(job),
                Step::Wait(parking) => {
                    let (sender, receiver) = oneshot::channel();
                    let spec = api.park(parking, sender);
                    Ok(Handled::Wait {
                        id: spec.id,
                        deadline_ms: spec.deadline_ms,
                        receiver,
                    })
                }
                Step::Subscribe(subscription) => Ok(Handled::Subscribe(subscription)),
            };
            (next, api.take_trash(), api.event_head())
        };
        let persisted = self.persist_removals(&trash);
        drop(trash);
        self.publish(head);
        next.map(|handled| (handled, persisted))
    }

    /// Tells the event pump that the event log moved (outside the lock).
    fn publish(&self, head: u64) {
        if self.logged_head.fetch_max(head, Ordering::AcqRel) < head {
            self.logged.notify_one();
        }
    }

    /// Publishes the event log's head to the event streams, forever, off the
    /// delivery path: a delivery only bumps a counter and wakes this task.
    pub async fn pump_events(self: Arc<Self>) {
        loop {
            self.logged.notified().await;
            let head = self.logged_head.load(Ordering::Acquire);
            let published = *self.event_head.borrow();
            if head <= published {
                continue;
            }
            self.event_head.send_replace(head);
        }
    }

    /// Watches the event log's head: it moves when there are events to fetch.
    pub fn event_head(&self) -> watch::Receiver<u64> {
        self.event_head.subscribe()
    }

    /// The next step of a subscriber: taken under the lock and run outside
    /// it, light steps one at a time on the async workers, heavy ones (a
    /// pattern, a large message to read) on the blocking pool.
    pub async fn next_events(&self, id: SubscriberId) -> Sendable {
        // Taken before the step, so that a step waiting for its turn holds no snapshot.
        let Ok(turn) = self.event_steps.acquire().await else {
            return Sendable::End(None);
        };
        let next = self.lock().next_events(id);
        let batch = match next {
            NextEvents::Batch(batch) => batch,
            NextEvents::Idle => return Sendable::Idle,
            NextEvents::Overflow => return Sendable::End(Some(Event::Overflow)),
            NextEvents::Ended => return Sendable::End(None),
        };
        let head = batch.head();
        if !batch.is_heavy() {
            return Sendable::Events(batch.run(&MonotonicClock(Instant::now())), head);
        }
        drop(turn);
        let ran = self.on_worker(move |clock| batch.run(clock)).await;
        Sendable::Events(
            ran.unwrap_or_else(|| {
                let error = br#"{"error":"the event stream failed inside the server"}"#;
                Ran {
                    events: vec![Event::Error(bytes::Bytes::from_static(error))],
                    caught_up: false,
                }
            }),
            head,
        )
    }

    /// Ends a subscription.
    pub fn unsubscribe(&self, id: SubscriberId) {
        self.lock().unsubscribe(id);
    }

    /// Runs a job where it stands when it is light, else on the blocking pool.
    async fn run(&self, job: Job) -> Done {
        if !job.is_heavy() {
            return job.run(&MonotonicClock(Instant::now()));
        }
        self.on_worker(move |clock| job.run(clock))
            .await
            .unwrap_or_else(|| {
                Done::Response(Response::error(503, "the request failed inside the server"))
            })
    }

    /// Ends a wait at its deadline: the 408, or None when a delivery answered it first.
    pub fn expire(&self, id: WaitId) -> Option<Response> {
        let expired = self.lock().expire(id);
        expired.map(|(_, response)| response)
    }

    /// Forgets a wait whose client went away.
    pub fn cancel(&self, id: WaitId) {
        let sender = self.lock().cancel(id);
        drop(sender);
    }
}
