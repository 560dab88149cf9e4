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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mailjar_core::api::{
    Api, ApiError, Done, Event, Job, MatchBatch, Matches, NextEvents, Output, Ran, Removal,
    Removed, Request, RequestId, Response, SubscriberId, Subscription, WriteError,
};
use mailjar_core::budget::Clock;
use mailjar_core::id::{Entropy, MessageId};
use mailjar_core::smtp::{FaultEvent, Fired, Incoming};
use mailjar_core::store::{Email, Prepared};
use tokio::sync::{Notify, Semaphore, broadcast, oneshot, watch};

use crate::storage::{self, StorageError, writer};

/// Messages at least this large are parsed on the blocking pool, not on an async worker.
const PARSE_INLINE_BYTES: usize = 64 * 1024;

/// What a request comes to: a response, or an event stream to open.
pub enum Answer {
    /// Send this.
    Response(Response),
    /// Open this event stream: send its replay, then its live events ([`Shared::next_events`]).
    Subscribe(Subscription),
}

/// Where the core sends a request's answer.
type Client = oneshot::Sender<Answer>;

/// How many seen-flag changes the IMAP sessions' shared ring holds (a fixed
/// 24 bytes each, about 24 KiB): a session further behind rescans its flags.
pub const SEEN_CHANGES: usize = 1024;

/// The API, which keeps each request's client until it is answered.
type ClientApi = Api<Client>;

/// The API and its clients, shared by every connection.
pub struct Shared {
    inner: Mutex<ClientApi>,
    /// One permit per core: how many jobs and match batches run at once.
    workers: Semaphore,
    /// The event log's head as published to event streams: idle streams wait for it to move.
    event_head: watch::Sender<u64>,
    /// The store's size and newest id, which move whenever mail arrives or
    /// leaves: IMAP sessions watch them for new mail and deletions (the
    /// event log only records while an event stream is open).
    store_mark: watch::Sender<(usize, Option<MessageId>)>,
    /// Each change of a message's seen flag (UI, POP3, IMAP), for the IMAP
    /// sessions that have it selected: a ring of [`SEEN_CHANGES`]; a session
    /// that falls behind it rescans its flags instead.
    seen_changes: broadcast::Sender<(MessageId, bool)>,
    /// The event log's head as the core has it (the pump publishes it).
    logged_head: AtomicU64,
    /// Wakes the event pump when the log moved.
    logged: Notify,
    /// Bumped when the core ended subscriptions from outside their streams
    /// (an inbox's token rotated, the inbox deleted): idle streams look once,
    /// and those ended close at once instead of at the next event.
    ended_subscriptions: watch::Sender<u64>,
    /// Event streams take their light steps one at a time: however many
    /// streams have events to send, the async workers' queue holds one of
    /// them, and `/health`, SMTP and the API never wait behind more.
    event_steps: Semaphore,
    /// The core's next deadline ([`Api::poll_timeout`]) as last read: the timer task sleeps until it.
    deadline: watch::Sender<Option<u64>>,
    /// Where work started off an async worker (the storage writer's thread) is spawned.
    runtime: Option<tokio::runtime::Handle>,
    /// With `--data-dir` or `--database`: the storage writer's queue (see [`crate::storage::writer`]).
    writer: std::sync::OnceLock<std::sync::mpsc::Sender<writer::Job>>,
    /// With `--database`: the storage is shared by several nodes (a failed write is an outage: 451).
    storage_shared: AtomicBool,
    /// Whether the API holds a fault rule, as of the last call into it
    /// ([`Shared::call`]): SMTP sessions skip the lock while it is false.
    any_faults: AtomicBool,
    /// Whether an inbox exists, as of the last call into the API: SMTP
    /// sessions ask about logins and routes only while one does.
    pub(crate) any_inboxes: AtomicBool,
    /// The counters and histograms of `GET /metrics`.
    pub metrics: crate::metrics::Metrics,
    /// With `--webhook`: where stored messages are announced (set once, at start).
    pub webhooks: std::sync::OnceLock<Arc<crate::webhooks::Webhooks>>,
    /// With `--relay-auto`: the releases of stored messages (set once, at start).
    pub relay_auto: std::sync::OnceLock<Arc<crate::relay_auto::AutoRelay>>,
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

/// Randomness for what a request creates (an inbox's token and password):
/// from the OS for a POST, none for the others.
pub fn request_entropy(method: &warp::http::Method) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    if method == warp::http::Method::POST && getrandom::fill(&mut bytes).is_err() {
        tracing::warn!("no OS randomness for a request");
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
        let mut api = self.lock();
        let fired = api.fire_fault(event);
        self.any_faults
            .store(api.fault_count() > 0, Ordering::Release);
        let counted = fired.as_ref().is_some_and(|f| api.fault_counted(&f.id));
        drop(api);
        // A rule that counts its firings changed: the other nodes hear its new count.
        if counted
            && self.storage_shared()
            && let Some(writer) = self.writer.get()
        {
            let _ = writer.send(writer::Job::Faults(None));
        }
        fired
    }

    /// Shares this API; `workers` is how many jobs may run at once (the core count).
    pub fn new(api: ClientApi, workers: usize) -> Shared {
        let deadline = api.poll_timeout();
        let any_inboxes = AtomicBool::new(api.inboxes().any());
        Shared {
            inner: Mutex::new(api),
            workers: Semaphore::new(workers.max(1)),
            event_head: watch::Sender::new(0),
            store_mark: watch::Sender::new((0, None)),
            seen_changes: broadcast::Sender::new(SEEN_CHANGES),
            logged_head: AtomicU64::new(0),
            logged: Notify::new(),
            ended_subscriptions: watch::Sender::new(0),
            event_steps: Semaphore::new(1),
            deadline: watch::Sender::new(deadline),
            runtime: tokio::runtime::Handle::try_current().ok(),
            writer: std::sync::OnceLock::new(),
            storage_shared: AtomicBool::new(false),
            any_faults: AtomicBool::new(false),
            any_inboxes,
            metrics: crate::metrics::Metrics::default(),
            webhooks: std::sync::OnceLock::new(),
            relay_auto: std::sync::OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ClientApi> {
        // A panic elsewhere must not stop mail from being stored: the data is still consistent
        // because every mutation happens inside the core in one call.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The one way into the core: takes the lock, gives `f` one input,
    /// drains the outputs and the next deadline, releases the lock, and then
    /// carries the outputs out (answers sent, jobs started, what left the
    /// store freed and written to disk).
    pub(crate) fn call<T>(self: &Arc<Self>, f: impl FnOnce(&mut ClientApi) -> T) -> T {
        let (value, outputs, head, deadline, mark) = {
            let mut api = self.lock();
            let value = f(&mut api);
            // Still under the lock: no change of the rules slips in between.
            self.any_faults
                .store(api.fault_count() > 0, Ordering::Release);
            self.any_inboxes
                .store(api.inboxes().any(), Ordering::Release);
            let outputs: Vec<Output<Client>> = std::iter::from_fn(|| api.poll_output()).collect();
            let mark = (api.store().len(), api.store().newest());
            (value, outputs, api.event_head(), api.poll_timeout(), mark)
        };
        self.store_mark.send_if_modified(|known| {
            let changed = *known != mark;
            *known = mark;
            changed
        });
        self.deadline.send_if_modified(|armed| {
            let changed = *armed != deadline;
            *armed = deadline;
            changed
        });
        self.publish(head);
        for output in outputs {
            self.carry_out(output);
        }
        value
    }

    fn carry_out(self: &Arc<Self>, output: Output<Client>) {
        match output {
            // A client that left between its request and now cancels nothing: fine to drop.
            Output::Respond(client, response) => drop(client.send(Answer::Response(response))),
            Output::Subscribed(client, subscription) => {
                if let Err(Answer::Subscribe(subscription)) =
                    client.send(Answer::Subscribe(subscription))
                {
                    self.unsubscribe(subscription.id);
                }
            }
            Output::Run(job) => self.start_job(job),
            Output::Match(batch) => self.spawn({
                let shared = self.clone();
                async move { shared.match_batch(batch).await }
            }),
            Output::Removed(removed) => self.remove(removed),
            Output::Seen { id, seen, stored } => {
                let _ = self.seen_changes.send((id, seen));
                if !stored && let Some(writer) = self.writer.get() {
                    let _ = writer.send(writer::Job::Seen(id, seen));
                }
            }
        }
    }

    /// Runs `task` on the runtime, from an async worker or the writer's thread.
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        match tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
        {
            Some(runtime) => drop(runtime.spawn(task)),
            None => tracing::error!("no runtime to run work on"),
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

    /// Runs a job where it stands when it is light, else on the blocking
    /// pool; its result goes back to the core.
    fn start_job(self: &Arc<Self>, job: Job) {
        if !job.is_heavy() {
            let done = job.run(&MonotonicClock(Instant::now()));
            return self.call(|api| api.handle_done(done, now_ms()));
        }
        let shared = self.clone();
        self.spawn(async move {
            let request = job.request();
            let done = shared.on_worker(move |clock| job.run(clock)).await;
            let done = done.unwrap_or_else(|| Done::failed(request));
            shared.call(|api| api.handle_done(done, now_ms()));
        });
    }

    /// Tries newly stored messages against the parked waits: split over the
    /// workers when heavy, each wait answered as soon as it is settled.
    async fn match_batch(self: Arc<Self>, batch: MatchBatch) {
        if !batch.is_heavy() {
            let matches = batch.run(&MonotonicClock(Instant::now()));
            return self.call(|api| api.handle_matches(matches));
        }
        let parts = batch.split(self.workers.available_permits().max(1));
        let runs: Vec<_> = parts
            .into_iter()
            .map(|part| {
                let shared = self.clone();
                tokio::spawn(async move {
                    let waits = part.waits();
                    let answering = shared.clone();
                    let rest = shared
                        .on_worker(move |clock| {
                            part.run_each(clock, &mut |id, found| {
                                answering.call(|api| api.handle_matches(Matches::one(id, found)));
                            })
                        })
                        .await;
                    // A part that failed leaves its waits parked until their deadline.
                    let rest = rest.unwrap_or_else(|| Matches::nothing(waits));
                    shared.call(|api| api.handle_matches(rest));
                })
            })
            .collect();
        for run in runs {
            let _ = run.await;
        }
    }

    /// Frees what left the store and, with `--data-dir`, has the writer
    /// delete it from disk; a `DELETE` waiting for that is answered once it is written.
    fn remove(self: &Arc<Self>, removed: Removed) {
        let Removed {
            trash,
            answer_after_write,
        } = removed;
        let Some(writer) = self.writer.get() else {
            if let Some(request) = answer_after_write {
                self.call(|api| api.handle_written(request, Ok(())));
            }
            return;
        };
        let removals = trash.removals();
        drop(trash);
        let Some(request) = answer_after_write else {
            let _ = writer.send(writer::Job::Remove(removals, None));
            return;
        };
        let (done, written) = oneshot::channel();
        // A stopped writer (shutting down) drops the job, and `done` with it:
        // the answer says that the delete is not on disk.
        let _ = writer.send(writer::Job::Remove(removals, Some(done)));
        let shared = self.clone();
        self.spawn(async move {
            let written = match written.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(WriteError::Failed(e.to_string())),
                Err(_) => Err(WriteError::Stopped),
            };
            shared.call(|api| api.handle_written(request, written));
        });
    }

    /// Parses a message (off the async workers when it is large) and stores
    /// it; returns its id once it is stored.
    pub fn deliver(self: &Arc<Self>, incoming: Incoming) -> MessageId {
        let prepared = if incoming.raw.len() >= PARSE_INLINE_BYTES && multi_thread() {
            // Other connections' tasks move to another worker while this one parses.
            tokio::task::block_in_place(|| Prepared::new(incoming))
        } else {
            Prepared::new(incoming)
        };
        let entropy = entropy();
        // The time is read under the lock that orders deliveries, so receivedAt follows receive order.
        self.call(|api| api.deliver(prepared, now_ms(), entropy))
    }

    /// With `--data-dir`: assigns the message its id and has the writer
    /// commit it, then it is stored in the core; returns its id once all that
    /// is done, or the write's error (nothing is stored then). Without
    /// `--data-dir` it is [`Shared::deliver`].
    pub async fn deliver_durable(
        self: &Arc<Self>,
        incoming: Incoming,
    ) -> Result<MessageId, StorageError> {
        let started = Instant::now();
        let stored = self.deliver_durable_untimed(incoming).await;
        if let Ok(id) = &stored {
            self.metrics.stored(started.elapsed());
            self.announce(*id);
        }
        stored
    }

    async fn deliver_durable_untimed(
        self: &Arc<Self>,
        incoming: Incoming,
    ) -> Result<MessageId, StorageError> {
        let Some(writer) = self.writer.get() else {
            return Ok(self.deliver(incoming));
        };
        // Parsed and built outside the lock; its id and time are set under it.
        let build = |incoming| Email::new(MessageId::from_u128(0), 0, Prepared::new(incoming));
        let mut email = if incoming.raw.len() >= PARSE_INLINE_BYTES && multi_thread() {
            tokio::task::block_in_place(|| build(incoming))
        } else {
            build(incoming)
        };
        let entropy = entropy();
        let (reply, receiver) = oneshot::channel();
        self.call(|api| {
            // Assigned and queued under one lock: the writer sees messages in id order.
            let assigned = api.assign(now_ms(), entropy);
            email.id = assigned.id;
            email.received_at_ms = assigned.received_at_ms;
            let pending = writer::Pending { email, reply };
            writer
                .send(writer::Job::Store(Box::new(pending)))
                .map_err(|_| writer_stopped())
        })?;
        let queued = Instant::now();
        let written = receiver.await.unwrap_or_else(|_| Err(writer_stopped()));
        self.metrics.written(queued.elapsed());
        written
    }

    /// With `--data-dir`: the storage writer's queue.
    pub(crate) fn writer(&self) -> Option<&std::sync::mpsc::Sender<writer::Job>> {
        self.writer.get()
    }

    /// With `--data-dir`: has the writer finish what is queued and close the
    /// database and its lock; returns once it has, or after `grace` when it
    /// has not (nothing it had not committed was acknowledged). Later deliveries get 452.
    pub async fn stop_writer(&self, grace: std::time::Duration) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        let (done, stopped) = oneshot::channel();
        if writer.send(writer::Job::Stop(done)).is_ok() {
            // A database that hangs (its host partitioned or frozen) never answers the
            // write in progress: its messages were not acknowledged, so give up on it.
            if tokio::time::timeout(grace, stopped).await.is_err() {
                tracing::warn!(
                    "the storage's last write did not end within {} ms; stopping without it",
                    grace.as_millis()
                );
            }
        }
    }

    /// Starts the storage writer (once, at start): it owns `storage` from
    /// now on and hands what it commits to this state. Held weakly: the state
    /// holds the writer's queue, so a strong reference would keep both alive
    /// after the server stops, and the database's lock with them.
    pub fn start_writer(self: &Arc<Self>, storage: storage::Opened) -> std::io::Result<()> {
        self.storage_shared
            .store(storage.shared(), Ordering::Release);
        let (inserting, removing) = (Arc::downgrade(self), Arc::downgrade(self));
        let (reading, changing) = (Arc::downgrade(self), Arc::downgrade(self));
        let hearing = Arc::downgrade(self);
        let sender = storage.spawn(writer::Hooks {
            committed: Box::new(move |batch| {
                // What the messages evict reaches the writer's queue as its own removal.
                if let Some(shared) = inserting.upgrade() {
                    shared.insert_committed(batch);
                }
            }),
            removed: Box::new(move |removals| {
                if let Some(shared) = removing.upgrade() {
                    shared.remove_remote(&removals);
                }
            }),
            current: Box::new(move || match reading.upgrade() {
                Some(shared) => shared.call(|api| (api.inboxes().records(), api.fault_records())),
                None => (Vec::new(), Vec::new()),
            }),
            changed: Box::new(move |inboxes, faults| {
                if let Some(shared) = changing.upgrade() {
                    shared.apply_remote_config(inboxes, faults);
                }
            }),
            seen: Box::new(move |flags| {
                if let Some(shared) = hearing.upgrade() {
                    shared.call(|api| api.hear_seen(flags));
                }
            }),
        })?;
        let _ = self.writer.set(sender);
        Ok(())
    }

    /// Whether the storage is a database shared by several nodes (`--database`).
    pub fn storage_shared(&self) -> bool {
        self.storage_shared.load(Ordering::Acquire)
    }

    /// Stores messages the writer committed, in id order; later ids sort after them.
    pub fn insert_committed(self: &Arc<Self>, emails: Vec<Email>) {
        self.call(|api| {
            for email in emails {
                let id = api.handle_message(email);
                // Another node's, or renumbered by a shared database: assign after it.
                api.resume_after(id);
            }
        });
    }

    /// Applies what another node changed of the inboxes and fault rules; a
    /// rotated or deleted inbox's event streams close now, as they do here.
    pub fn apply_remote_config(
        self: &Arc<Self>,
        inboxes: Vec<mailjar_core::api::Change<mailjar_core::api::InboxRecord>>,
        faults: Vec<mailjar_core::api::Change<mailjar_core::api::FaultRecord>>,
    ) {
        let any_inbox = !inboxes.is_empty();
        let (inbox_errors, fault_errors) = self.call(|api| {
            (
                api.handle_inbox_changes(inboxes),
                api.handle_fault_changes(faults),
            )
        });
        for e in inbox_errors {
            tracing::warn!("an inbox change from another node: {e}");
        }
        for e in fault_errors {
            tracing::warn!("a fault rule change from another node: {e}");
        }
        if any_inbox {
            self.subscriptions_ended();
        }
    }

    /// With `--database`: writes the fault rules after a change (made over
    /// the API, or a rule that fired its `times`); the other nodes hear of it.
    pub async fn save_faults(self: &Arc<Self>) -> Result<(), StorageError> {
        let Some(writer) = self.writer.get().filter(|_| self.storage_shared()) else {
            return Ok(());
        };
        let (ack, written) = oneshot::channel();
        writer
            .send(writer::Job::Faults(Some(ack)))
            .map_err(|_| writer_stopped())?;
        written.await.unwrap_or_else(|_| Err(writer_stopped()))
    }

    /// Removes what another node removed: each stored message in these
    /// ranges, by an internal `DELETE` (so waits, events and inboxes hear of
    /// it as of any delete). The store is looked through outside the lock.
    pub fn remove_remote(self: &Arc<Self>, removals: &[Removal]) {
        let mut ranges: Vec<(MessageId, MessageId)> = removals
            .iter()
            .map(|r| match *r {
                Removal::One(id) => (id, id),
                Removal::Range { first, last } => (first, last),
            })
            .collect();
        ranges.sort_unstable();
        // Merged, so that only the nearest range starting at or before an id can cover it.
        let mut merged: Vec<(MessageId, MessageId)> = Vec::with_capacity(ranges.len());
        for (first, last) in ranges {
            match merged.last_mut() {
                Some(prev) if first <= prev.1 => prev.1 = prev.1.max(last),
                _ => merged.push((first, last)),
            }
        }
        let snapshot = self.lock().store().snapshot();
        let ids: Vec<MessageId> = snapshot
            .iter()
            .map(|e| e.id)
            .filter(|id| {
                let before = merged.partition_point(|(first, _)| first <= id);
                before > 0 && *id <= merged[before - 1].1
            })
            .collect();
        // Everything it holds (another node cleared the store): one delete.
        // Only the writer's thread, which runs this, inserts: nothing came since.
        let everything = !ids.is_empty() && ids.len() == snapshot.len();
        drop(snapshot);
        let targets: Vec<String> = if everything {
            vec!["/api/emails".to_owned()]
        } else {
            ids.iter().map(|id| format!("/api/emails/{id}")).collect()
        };
        for target in targets {
            let request = Request::new("DELETE", &target);
            // Nobody waits for the answer.
            let (client, _) = oneshot::channel();
            self.call(|api| api.handle_request(client, &request, now_ms()));
        }
    }

    /// Sleeps until the core's next deadline and hands it the time, forever:
    /// parked waits end with their 408, and `--max-age` expires messages, on time.
    pub async fn run_timers(self: Arc<Self>) {
        let mut armed = self.deadline.subscribe();
        loop {
            let next = *armed.borrow_and_update();
            let Some(at) = next else {
                if armed.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let sleep = Duration::from_millis(at.saturating_sub(now_ms()));
            tokio::select! {
                _ = tokio::time::sleep(sleep) => self.call(|api| api.handle_timeout(now_ms())),
                changed = armed.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Answers a request: the core's answer, once it has one (a parked wait
    /// is answered by a delivery or its deadline). Dropped before that (the
    /// client left), the request is cancelled.
    pub async fn handle(self: &Arc<Self>, request: &Request) -> Answer {
        let (client, answer) = oneshot::channel();
        let id = self.call(|api| api.handle_request(client, request, now_ms()));
        let mut guard = Cancel {
            shared: self,
            id,
            armed: true,
        };
        let answer = answer.await;
        guard.armed = false;
        answer.unwrap_or_else(|_| {
            Answer::Response(Response::error(503, "the request ended without an answer"))
        })
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

    /// Watches the store: it changes when mail arrives or leaves.
    pub fn store_changes(&self) -> watch::Receiver<(usize, Option<MessageId>)> {
        self.store_mark.subscribe()
    }

    /// Hears each change of a seen flag (see [`SEEN_CHANGES`] for lagging).
    pub fn seen_changes(&self) -> broadcast::Receiver<(MessageId, bool)> {
        self.seen_changes.subscribe()
    }

    /// Tells every event stream to look whether its subscription still
    /// stands: the core ended some (an inbox rotated or deleted).
    pub fn subscriptions_ended(&self) {
        self.ended_subscriptions
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// Watches [`Shared::subscriptions_ended`].
    pub fn ended_subscriptions(&self) -> watch::Receiver<u64> {
        self.ended_subscriptions.subscribe()
    }

    /// The next step of a subscriber: taken under the lock and run outside
    /// it, light steps one at a time on the async workers, heavy ones (a
    /// pattern, a large message to read) on the blocking pool; what it went
    /// through is handed back to the core.
    pub async fn next_events(self: &Arc<Self>, id: SubscriberId) -> Sendable {
        // Taken before the step, so that a step waiting for its turn holds no snapshot.
        let Ok(turn) = self.event_steps.acquire().await else {
            return Sendable::End(None);
        };
        let next = self.call(|api| api.poll_events(id));
        let batch = match next {
            NextEvents::Batch(batch) => batch,
            NextEvents::Idle => return Sendable::Idle,
            NextEvents::Overflow => return Sendable::End(Some(Event::Overflow)),
            NextEvents::Ended => return Sendable::End(None),
        };
        let head = batch.head();
        let ran = if batch.is_heavy() {
            drop(turn);
            self.on_worker(move |clock| batch.run(clock)).await
        } else {
            Some(batch.run(&MonotonicClock(Instant::now())))
        };
        let Some(mut ran) = ran else {
            let error = br#"{"error":"the event stream failed inside the server"}"#;
            let ran = Ran {
                events: vec![Event::Error(bytes::Bytes::from_static(error))],
                caught_up: false,
                progress: None,
            };
            return Sendable::Events(ran, head);
        };
        if let Some(progress) = ran.progress.take() {
            self.call(|api| api.handle_progress(progress));
        }
        Sendable::Events(ran, head)
    }

    /// Ends a subscription.
    pub fn unsubscribe(self: &Arc<Self>, id: SubscriberId) {
        self.call(|api| api.handle_unsubscribe(id));
    }

    /// Hands a stored message to the webhooks and `--relay-auto`, when
    /// configured: looked up in O(log n), queued after the lock is released.
    fn announce(&self, id: MessageId) {
        let (webhooks, relay) = (self.webhooks.get(), self.relay_auto.get());
        if webhooks.is_none() && relay.is_none() {
            return;
        }
        let Some(email) = self.stored(id) else {
            tracing::debug!(%id, "not announced: the message left the store at once");
            return;
        };
        if let Some(webhooks) = webhooks {
            webhooks.stored(email.summary());
        }
        if let Some(relay) = relay {
            relay.stored(id, &email.envelope.to);
        }
    }

    /// Stored message `id`, whoever's it is (the lock is held to find it and clone its `Arc`).
    pub fn stored(&self, id: MessageId) -> Option<Arc<Email>> {
        self.lock().store().get(id)
    }

    /// The store's and the API's counts for `/metrics`: O(1) reads under the lock.
    pub fn gauges(&self) -> crate::metrics::Gauges {
        let api = self.lock();
        crate::metrics::Gauges {
            stored: api.store().len(),
            bytes: api.store().bytes(),
            evicted: api.store().evicted(),
            waits: api.pending_waits(),
            subscribers: api.subscriber_count(),
        }
    }

    /// Stored message `id` as `request`'s scope sees it, for the host's
    /// checks: the lock is held only to look it up and clone its `Arc`.
    pub fn email(&self, request: &Request, id: &str) -> Result<Arc<Email>, ApiError> {
        self.lock().inboxes().message_for(request, id)
    }
}

/// Release and `--relay-auto` find their messages in the store.
impl crate::release::Messages for Shared {
    fn email(&self, request: &Request, id: &str) -> Result<Arc<Email>, ApiError> {
        Shared::email(self, request, id)
    }

    fn stored(&self, id: MessageId) -> Option<Arc<Email>> {
        Shared::stored(self, id)
    }
}

/// Cancels a request whose answer was not awaited to the end.
struct Cancel<'a> {
    shared: &'a Arc<Shared>,
    id: RequestId,
    armed: bool,
}

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        if self.armed {
            let id = self.id;
            self.shared.call(|api| api.handle_cancel(id));
        }
    }
}
