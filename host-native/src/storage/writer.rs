//! The one thread that owns the storage engine, and the policy it follows.
//!
//! Group commit: SMTP sessions queue their messages (already holding their
//! ids) and wait; the writer takes everything queued while its previous
//! commit ran, up to [`Limits`], and writes it in one transaction together
//! with the removals (deletes, evictions, expiry) queued meanwhile. Only after
//! the commit are the messages handed to the core (visible to the API, waits
//! and events) and their senders answered, so a 250 always follows a commit.
//! A failed commit answers every message of its batch with the error (the
//! session replies 452 4.3.1) and inserts none; its removals stay queued and
//! are tried again, so mailjar recovers by itself when writes work again.
//!
//! [`Writer`] is that policy, with no thread or clock of its own: it takes
//! jobs and outcomes (`handle_*`) and says what to do next ([`Writer::poll`]):
//! write a transaction, take a step of upkeep, look at the size on disk, wait
//! for a job until a deadline, or stop. [`run`] is the thread's loop that does it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use mailjar_core::api::{Change, FaultRecord, InboxRecord, Removal};
use mailjar_core::id::MessageId;
use mailjar_core::store::Email;
use tokio::sync::oneshot;

use super::{Record, Storage, StorageError};

/// A message for the writer, with its id, and where its outcome goes.
pub struct Pending {
    /// The message as it will be stored, built outside every lock, under
    /// the id and receive time the core assigned.
    pub email: Email,
    /// Gets the id once the message is committed and in the core, or the error.
    pub reply: oneshot::Sender<Result<MessageId, StorageError>>,
}

/// Hears whether the transaction that held some removals committed.
pub type Ack = oneshot::Sender<Result<(), StorageError>>;

/// What the writer is asked to do.
pub enum Job {
    /// Write this message.
    Store(Box<Pending>),
    /// Delete these messages from disk; the ack hears whether the write that
    /// held them committed (a failed one is tried again until it does).
    Remove(Vec<Removal>, Option<Ack>),
    /// Write what came before, close the storage (and its lock), then say so.
    Stop(oneshot::Sender<()>),
    /// Write the inboxes: the core's as the writer takes them
    /// ([`Core::current`]), newer than these when they changed since; the ack hears the write.
    Inboxes(Vec<InboxRecord>, Ack),
    /// Write the fault rules as the core holds them (several nodes share
    /// them); the ack, if any, hears the write.
    Faults(Option<Ack>),
    /// Another node committed (or the database came back): apply what this
    /// node has not, in id order ([`Storage::catch_up`]). Jobs coalesce.
    CatchUp,
    /// A reader saw a message, or marked it unseen ([`Storage::set_seen`]).
    Seen(MessageId, bool),
    /// Another node committed messages up to this id and nothing else: a
    /// catch-up unless this node holds it already ([`super::CatchUp::Past`]).
    Heard(MessageId),
}

/// How much one transaction takes at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Messages per transaction.
    pub messages: usize,
    /// Raw bytes per transaction: no message is added once they are reached
    /// (so one message may pass them, and a larger message goes alone).
    pub bytes: usize,
}

impl Limits {
    /// The default bound of raw bytes per transaction: 64 MiB.
    pub const DEFAULT_BYTES: usize = 64 * 1024 * 1024;
}

impl Default for Limits {
    /// 1000 messages or 64 MiB.
    fn default() -> Self {
        Limits {
            messages: 1000,
            bytes: Limits::DEFAULT_BYTES,
        }
    }
}

/// The storage's health as `/health` shows it: ok, or the last write's
/// error, and its size on disk. The writer updates both; `/health` reads
/// them under the API lock without touching the file system.
#[derive(Debug, Default)]
pub struct Status {
    error: Mutex<Option<String>>,
    bytes: AtomicU64,
}

impl Status {
    /// The size on disk as the writer last looked (after its last batch once
    /// it has been idle for [`SIZE_IDLE`], at most [`SIZE_EVERY`] old while it is busy).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Records the size on disk.
    pub fn set_bytes(&self, bytes: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// The error of the last write, None when it committed.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records how the last write went, and logs when that changes.
    pub fn set(&self, error: Option<&StorageError>) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        match (&*slot, error) {
            (None, Some(e)) => tracing::error!("storage write failed: {e}"),
            (Some(_), None) => tracing::info!("storage writes work again"),
            _ => {}
        }
        *slot = error.map(ToString::to_string);
    }
}

/// Hands committed messages, in id order, to the core (what they evict there
/// comes back to the writer as a removal of its own, through the core's outputs).
pub type Committed = dyn FnMut(Vec<Email>) + Send;

/// Removes from the core what another node removed (a shared database's change log).
pub type Removed = dyn FnMut(Vec<Removal>) + Send;

/// The inboxes and fault rules the core holds now, as the storage keeps them.
pub type Current = dyn FnMut() -> (Vec<InboxRecord>, Vec<FaultRecord>) + Send;

/// Applies in the core what other nodes changed of the inboxes and fault rules.
pub type Changed = dyn FnMut(Vec<Change<InboxRecord>>, Vec<Change<FaultRecord>>) + Send;

/// Applies in the core the seen flags readers on other nodes set, without writing them back.
pub type SeenHeard = dyn FnMut(Vec<(MessageId, bool)>) + Send;

/// Where the writer hands what it commits and what it catches up with.
pub struct Core<'a> {
    /// Committed messages, in id order ([`Committed`]).
    pub committed: &'a mut dyn FnMut(Vec<Email>),
    /// What other nodes removed ([`Removed`]).
    pub removed: &'a mut dyn FnMut(Vec<Removal>),
    /// The core's inboxes and fault rules now ([`Current`]): what a write of them writes.
    pub current: &'a mut dyn FnMut() -> (Vec<InboxRecord>, Vec<FaultRecord>),
    /// What other nodes changed of them ([`Changed`]).
    pub changed: &'a mut dyn FnMut(Vec<Change<InboxRecord>>, Vec<Change<FaultRecord>>),
    /// The seen flags other nodes set ([`SeenHeard`]).
    pub seen: &'a mut dyn FnMut(Vec<(MessageId, bool)>),
}

/// How long the writer idles between two reclaiming steps.
const RECLAIM_PAUSE: Duration = Duration::from_millis(20);

/// How often, at most, a busy writer looks at the storage's size on disk
/// (two `statx` a batch were a twelfth of its time).
pub const SIZE_EVERY: Duration = Duration::from_millis(100);

/// How long the writer must have had no work before it looks at the size.
pub const SIZE_IDLE: Duration = Duration::from_millis(2);

/// For how long after reclaiming ends, or after the size last changed, an
/// idle writer keeps looking at the size (every [`SIZE_EVERY`]): the file
/// shrinks when the checkpoint thread next copies the log in.
const SETTLE: Duration = Duration::from_secs(2);

/// How long the writer waits before it tries a failed write again, unless new work comes first.
const RETRY: Duration = Duration::from_millis(200);

/// One transaction: messages and removals, written all or nothing.
pub struct Transaction {
    /// The messages, in id order.
    pub messages: Vec<Pending>,
    /// The removals, written after the messages (they may name them).
    pub removals: Vec<Removal>,
    acks: Vec<Ack>,
}

impl Transaction {
    /// The records of its messages.
    pub fn records(&self) -> Vec<Record<'_>> {
        self.messages.iter().map(|p| Record::of(&p.email)).collect()
    }
}

/// What a committed transaction leaves to do, in this order: hand its
/// messages to the core, then [`Done::answer`] their senders.
pub struct Done {
    /// The committed messages, in id order.
    pub emails: Vec<Email>,
    replies: Vec<(MessageId, oneshot::Sender<Result<MessageId, StorageError>>)>,
}

impl Done {
    /// Tells each sender its message is stored (its session answers 250).
    pub fn answer(self) {
        for (id, reply) in self.replies {
            let _ = reply.send(Ok(id));
        }
    }
}

/// What the writer does next.
pub enum Action {
    /// Write this, then [`Writer::handle_written`].
    Write(Transaction),
    /// One step of upkeep ([`Storage::tidy`]), then [`Writer::handle_tidied`].
    Tidy,
    /// Look at the size on disk, then [`Writer::handle_sized`].
    Size,
    /// Wait for a job, until this deadline if there is one ([`Writer::handle_job`]).
    Wait(Option<Instant>),
    /// Close the storage, then tell these it is closed.
    Stop(Vec<oneshot::Sender<()>>),
    /// Write these seen flags ([`Storage::set_seen`]).
    Seen(Vec<(MessageId, bool)>),
    /// Write the core's inboxes ([`Core::current`]), then tell the acks how it went.
    Inboxes(Vec<Ack>),
    /// Write the core's fault rules, then tell the acks how it went.
    Faults(Vec<Ack>),
    /// Apply what other nodes committed ([`Storage::catch_up`] in this mode), then [`Writer::handle_caught_up`].
    CatchUp(super::CatchUp),
}

/// The writer's policy: what goes in the next transaction, and when to write,
/// retry, reclaim space and look at the size on disk.
pub struct Writer {
    limits: Limits,
    /// The next transaction's messages, and their raw bytes.
    messages: Vec<Pending>,
    bytes: usize,
    /// The next transaction's removals (a failed write's are kept).
    removals: Vec<Removal>,
    acks: Vec<Ack>,
    stops: Vec<oneshot::Sender<()>>,
    /// Every sender is gone.
    closed: bool,
    /// A stop was asked and the write before it was made: stop now.
    done: bool,
    /// When the last write failed (None: it committed).
    failed_at: Option<Instant>,
    /// A job came since the last write (a retry does not wait for `RETRY` then).
    fresh: bool,
    /// Free pages are handed back a step at a time: when the next step is due.
    next_tidy: Option<Instant>,
    /// The size on disk may have changed since it was last looked at, at `sized_at`.
    size_stale: bool,
    sized_at: Instant,
    /// When the writer last had work (the size is looked at [`SIZE_IDLE`] after).
    busy_at: Instant,
    /// Until then an idle writer looks at the size every [`SIZE_EVERY`].
    settle_until: Option<Instant>,
    /// Seen flags to write (one per message: a later change replaces an earlier one).
    seen: std::collections::BTreeMap<MessageId, bool>,
    /// The inboxes are to be written, and who waits for them.
    inboxes: Option<Vec<Ack>>,
    /// The fault rules are to be written, and who waits for them.
    faults: Option<Vec<Ack>>,
    /// A catch-up was asked for (or one failed and is due again at `failed_at` + `RETRY`).
    catch_up: bool,
    /// Only [`Job::Heard`] asked for it since the last one: up to this id.
    heard: Option<MessageId>,
    /// A whole catch-up was asked for ([`Job::CatchUp`], or a failed one).
    whole: bool,
    /// The last step was a catch-up: a write waiting goes next, so that
    /// another node's stream of commits cannot starve this node's own.
    caught_up_last: bool,
}

impl Writer {
    /// A writer that starts by reclaiming space: what a lower limit removed
    /// at load, or what a run that stopped midway left, is free but still in the file.
    pub fn new(limits: Limits, now: Instant) -> Writer {
        Writer {
            limits,
            messages: Vec::new(),
            bytes: 0,
            removals: Vec::new(),
            acks: Vec::new(),
            stops: Vec::new(),
            closed: false,
            done: false,
            failed_at: None,
            fresh: false,
            next_tidy: Some(now),
            size_stale: false,
            sized_at: now,
            busy_at: now,
            settle_until: None,
            inboxes: None,
            seen: std::collections::BTreeMap::new(),
            faults: None,
            catch_up: false,
            heard: None,
            whole: false,
            caught_up_last: false,
        }
    }

    /// Whether the next transaction takes more jobs: not once it is full, nor after a stop.
    pub fn wants_jobs(&self) -> bool {
        self.stops.is_empty()
            && self.messages.len() < self.limits.messages
            && self.bytes < self.limits.bytes
    }

    /// Takes a job into the next transaction.
    pub fn handle_job(&mut self, job: Job, now: Instant) {
        self.fresh = true;
        self.busy_at = now;
        match job {
            Job::Store(pending) => {
                self.bytes += pending.email.raw().len();
                self.messages.push(*pending);
            }
            Job::Remove(removals, ack) => {
                self.removals.extend(removals);
                self.acks.extend(ack);
            }
            Job::Stop(done) => self.stops.push(done),
            Job::Seen(id, seen) => {
                // Bounded by the stored messages: one entry each.
                self.seen.insert(id, seen);
            }
            Job::CatchUp => {
                self.catch_up = true;
                self.whole = true;
            }
            Job::Heard(id) => {
                self.catch_up = true;
                self.heard = self.heard.max(Some(id));
            }
            Job::Inboxes(_, ack) => self.inboxes.get_or_insert_default().push(ack),
            Job::Faults(ack) => self.faults.get_or_insert_default().extend(ack),
        }
    }

    /// Every sender is gone: write what is left, then stop.
    pub fn handle_closed(&mut self) {
        self.closed = true;
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Instant) -> Action {
        if self.messages.is_empty() && self.removals.is_empty() {
            // Nothing to write for them: their removals are on disk already.
            for ack in self.acks.drain(..) {
                let _ = ack.send(Ok(()));
            }
        }
        // Inboxes first, before a stop too: a few rows, and an admin waits.
        if let Some(acks) = self.inboxes.take() {
            return Action::Inboxes(acks);
        }
        if let Some(acks) = self.faults.take() {
            return Action::Faults(acks);
        }
        // They name messages in the core, so committed: never one queued here.
        if !self.seen.is_empty() {
            return Action::Seen(std::mem::take(&mut self.seen).into_iter().collect());
        }
        let retry_due = self
            .failed_at
            .is_none_or(|failed| now >= failed + RETRY || self.fresh);
        let work = !self.messages.is_empty() || !self.removals.is_empty();
        let turn = !(work && self.caught_up_last);
        if self.catch_up && retry_due && turn && self.stops.is_empty() {
            self.catch_up = false;
            self.caught_up_last = true;
            let heard = self.heard.take();
            return Action::CatchUp(match (std::mem::take(&mut self.whole), heard) {
                (false, Some(id)) => super::CatchUp::Past(id),
                _ => super::CatchUp::All,
            });
        }
        self.caught_up_last = false;
        if self.done || (!work && (self.closed || !self.stops.is_empty())) {
            return Action::Stop(std::mem::take(&mut self.stops));
        }
        let tidy_due = self.failed_at.is_none()
            && self.removals.is_empty()
            && self.next_tidy.is_some_and(|due| now >= due);
        if tidy_due {
            return Action::Tidy;
        }
        if work {
            return self.poll_write(now);
        }
        self.poll_idle(now)
    }

    /// With something to write: write it, unless a failed write waits to be
    /// tried again or a busy writer is due to look at the size first.
    fn poll_write(&mut self, now: Instant) -> Action {
        let retry = self.failed_at.map(|failed| failed + RETRY);
        if let Some(retry) = retry.filter(|&retry| now < retry && !self.fresh) {
            return Action::Wait(Some(retry));
        }
        if self.size_stale && now >= self.sized_at + SIZE_EVERY {
            return Action::Size;
        }
        if !self.stops.is_empty() {
            self.done = true;
        }
        self.fresh = false;
        self.bytes = 0;
        Action::Write(Transaction {
            messages: std::mem::take(&mut self.messages),
            removals: std::mem::take(&mut self.removals),
            acks: std::mem::take(&mut self.acks),
        })
    }

    /// With nothing to write: look at the size once idle, and now and then
    /// while the file settles, else wait for a job until the next step is due.
    fn poll_idle(&mut self, now: Instant) -> Action {
        if self.settle_until.is_some_and(|until| now >= until) {
            self.settle_until = None;
        }
        let mut due = Vec::with_capacity(3);
        if self.size_stale {
            due.push(self.busy_at + SIZE_IDLE);
        }
        if self.settle_until.is_some() {
            due.push(self.sized_at + SIZE_EVERY);
        }
        if due.iter().any(|&at| now >= at) {
            return Action::Size;
        }
        due.extend(self.next_tidy.filter(|_| self.failed_at.is_none()));
        if self.catch_up {
            due.extend(self.failed_at.map(|failed| failed + RETRY));
        }
        Action::Wait(due.into_iter().min())
    }

    /// The outcome of a [`Action::Write`] (the storage's health already says
    /// it): the acks hear it; a commit returns what is left to do, a failure
    /// answers the messages with the error and keeps the removals.
    pub fn handle_written(
        &mut self,
        transaction: Transaction,
        written: Result<(), StorageError>,
        now: Instant,
    ) -> Option<Done> {
        self.size_stale = true;
        self.busy_at = now;
        for ack in transaction.acks {
            let _ = ack.send(written.clone());
        }
        if let Err(e) = written {
            self.failed_at = Some(now);
            for pending in transaction.messages {
                let _ = pending.reply.send(Err(e.clone()));
            }
            let mut kept = transaction.removals;
            kept.append(&mut self.removals);
            self.removals = kept;
            return None;
        }
        self.failed_at = None;
        if !transaction.removals.is_empty() {
            // Space is freed only by removals: reclaim it a step at a time from now.
            self.next_tidy = Some(now);
        }
        let mut emails = Vec::with_capacity(transaction.messages.len());
        let mut replies = Vec::with_capacity(transaction.messages.len());
        for pending in transaction.messages {
            replies.push((pending.email.id, pending.reply));
            emails.push(pending.email);
        }
        Some(Done { emails, replies })
    }

    /// A catch-up ran: a failed one is tried again after `RETRY`.
    pub fn handle_caught_up(&mut self, caught_up: Result<(), StorageError>, now: Instant) {
        self.busy_at = now;
        self.size_stale = true;
        match caught_up {
            Ok(()) => self.failed_at = None,
            Err(_) => {
                self.failed_at = Some(now);
                self.catch_up = true;
                self.whole = true;
            }
        }
    }

    /// A step of upkeep was taken; `more` when there is more to do.
    pub fn handle_tidied(&mut self, more: bool, now: Instant) {
        // A step moves pages and shrinks the file: /health hears of it.
        self.size_stale = true;
        self.busy_at = now;
        if more {
            self.next_tidy = Some(now + RECLAIM_PAUSE);
        } else {
            self.next_tidy = None;
            self.settle_until = Some(now + SETTLE);
        }
    }

    /// The size on disk was looked at; `changed` since the last look.
    pub fn handle_sized(&mut self, changed: bool, now: Instant) {
        self.size_stale = false;
        self.sized_at = now;
        if changed && self.settle_until.is_some() {
            // Still shrinking (a slow checkpoint): keep looking.
            self.settle_until = Some(now + SETTLE);
        }
    }
}

/// Waits for the next job until `deadline` (forever without one) and hands
/// it to `writer`; once every sender is gone, only sleeps until the deadline.
fn wait(writer: &mut Writer, jobs: &Receiver<Job>, deadline: Option<Instant>) {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    if writer.closed {
        std::thread::sleep(left.unwrap_or(RETRY));
        return;
    }
    let job = match left {
        None => jobs.recv().map_err(|_| RecvTimeoutError::Disconnected),
        Some(left) => jobs.recv_timeout(left),
    };
    match job {
        Ok(job) => writer.handle_job(job, Instant::now()),
        Err(RecvTimeoutError::Timeout) => {}
        Err(RecvTimeoutError::Disconnected) => writer.handle_closed(),
    }
}

/// Runs the writer until it is stopped, or every sender of `jobs` is gone
/// and nothing is left to write; returns who asked it to stop. `core.committed`
/// hands committed messages, in id order, to the core.
pub fn run(
    storage: &mut dyn Storage,
    jobs: Receiver<Job>,
    limits: Limits,
    status: &Status,
    core: &mut Core<'_>,
) -> Vec<oneshot::Sender<()>> {
    let mut writer = Writer::new(limits, Instant::now());
    loop {
        // Group commit: everything queued while the last step ran, within one transaction's bounds.
        while writer.wants_jobs() {
            match jobs.try_recv() {
                Ok(job) => writer.handle_job(job, Instant::now()),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    writer.handle_closed();
                    break;
                }
            }
        }
        match writer.poll(Instant::now()) {
            Action::Write(transaction) => write(storage, &mut writer, status, core, transaction),
            Action::CatchUp(mode) => {
                let caught_up = catch_up(storage, core, mode);
                if caught_up.is_err() {
                    status.set(caught_up.as_ref().err());
                }
                writer.handle_caught_up(caught_up, Instant::now());
            }
            Action::Inboxes(acks) => {
                // The core's newest: changes other nodes made since the job was queued are in it.
                let (inboxes, faults) = (core.current)();
                // A deleted inbox took its fault rules out of the core: out of a shared database too.
                let written = storage
                    .save_inboxes(&inboxes)
                    .and_then(|()| storage.save_faults(&faults));
                status.set(written.as_ref().err());
                for ack in acks {
                    let _ = ack.send(written.clone());
                }
            }
            Action::Faults(acks) => {
                let written = storage.save_faults(&(core.current)().1);
                status.set(written.as_ref().err());
                for ack in acks {
                    let _ = ack.send(written.clone());
                }
            }
            Action::Seen(changes) => {
                if let Err(e) = storage.set_seen(&changes) {
                    // A flag, not mail: logged, and the next change writes again.
                    tracing::warn!("writing {} seen flags: {e}", changes.len());
                }
            }
            Action::Tidy => writer.handle_tidied(storage.tidy(), Instant::now()),
            Action::Size => {
                let size = storage.size();
                let changed = size != status.bytes();
                status.set_bytes(size);
                writer.handle_sized(changed, Instant::now());
            }
            Action::Wait(deadline) => wait(&mut writer, &jobs, deadline),
            Action::Stop(stops) => {
                status.set_bytes(storage.size());
                return stops;
            }
        }
    }
}

/// Writes a transaction (the storage may renumber its messages: a shared
/// database orders them after every committed one) and, once committed,
/// applies what other nodes committed before it, then its own messages,
/// then answers their senders.
fn write(
    storage: &mut dyn Storage,
    writer: &mut Writer,
    status: &Status,
    core: &mut Core<'_>,
    mut transaction: Transaction,
) {
    let written = {
        let mut emails: Vec<&mut Email> = transaction
            .messages
            .iter_mut()
            .map(|p| &mut p.email)
            .collect();
        storage.write_emails(&mut emails, &transaction.removals)
    };
    // /health says what the deletes hear, before they hear it.
    status.set(written.as_ref().err());
    let Some(mut done) = writer.handle_written(transaction, written, Instant::now()) else {
        return;
    };
    let emails = std::mem::take(&mut done.emails);
    if emails.is_empty() {
        return done.answer();
    }
    match catch_up(storage, core, super::CatchUp::Gap) {
        // Into the core, then the 250s.
        Ok(()) => (core.committed)(emails),
        Err(e) => {
            // Committed but not in order here yet: a later catch-up brings
            // them from the database, after what came before them.
            tracing::warn!("cannot fetch what other nodes committed before this batch: {e}");
            status.set(Some(&e));
            writer.handle_job(Job::CatchUp, Instant::now());
        }
    }
    done.answer();
}

/// Applies, in id order, what other nodes committed that this node has not
/// (only the gap before its own batch with [`super::CatchUp::Gap`]), and what they removed.
fn catch_up(
    storage: &mut dyn Storage,
    core: &mut Core<'_>,
    mode: super::CatchUp,
) -> Result<(), StorageError> {
    loop {
        let remote = storage.catch_up(mode)?;
        // What other nodes changed of the inboxes and rules goes first: the
        // messages committed after a change are routed with it.
        if !remote.inboxes.is_empty() || !remote.faults.is_empty() {
            (core.changed)(remote.inboxes, remote.faults);
        }
        let mut seen = Vec::new();
        if !remote.rows.is_empty() {
            // Asking the system for its cores reads cgroup files: only when they would be used.
            let threads = if remote.rows.len() < super::PARALLEL_ROWS {
                1
            } else {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            };
            let emails = super::parse_all(remote.rows, threads)
                .into_iter()
                .map(|(email, flag)| {
                    if flag {
                        seen.push((email.id, true));
                    }
                    email
                })
                .collect();
            // What they evict here was evicted (and logged) where they were committed.
            (core.committed)(emails);
        }
        // After the rows: a flag set since a row was read is applied to it.
        seen.extend(remote.seen);
        if !seen.is_empty() {
            (core.seen)(seen);
        }
        if !remote.removed.is_empty() {
            (core.removed)(remote.removed);
        }
        if !remote.more {
            return Ok(());
        }
    }
}

/// What the writer thread calls into the core with ([`Core`]'s, owned).
pub struct Hooks {
    /// Committed messages, in id order.
    pub committed: Box<Committed>,
    /// What other nodes removed.
    pub removed: Box<Removed>,
    /// The core's inboxes and fault rules now.
    pub current: Box<Current>,
    /// What other nodes changed of them.
    pub changed: Box<Changed>,
    /// The seen flags other nodes set.
    pub seen: Box<SeenHeard>,
}

/// Starts the writer thread; the sender queues jobs for it.
pub fn spawn(
    mut storage: Box<dyn Storage>,
    limits: Limits,
    status: std::sync::Arc<Status>,
    mut hooks: Hooks,
) -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (sender, jobs) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("mailjar-writer".into())
        .spawn(move || {
            let mut core = Core {
                committed: hooks.committed.as_mut(),
                removed: hooks.removed.as_mut(),
                current: hooks.current.as_mut(),
                changed: hooks.changed.as_mut(),
                seen: hooks.seen.as_mut(),
            };
            let stops = run(storage.as_mut(), jobs, limits, &status, &mut core);
            // The connection and the directory's lock go before anyone hears of the stop.
            drop(storage);
            for done in stops {
                let _ = done.send(());
            }
        })?;
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Loaded;
    use mailjar_core::api::{Api, ApiConfig};
    use mailjar_core::smtp::{Envelope, Incoming};
    use std::sync::Arc;

    type Reply = oneshot::Receiver<Result<MessageId, StorageError>>;

    /// A message of `size` bytes to store under a new id; its id and where its outcome goes.
    fn message(api: &mut Api<()>, size: usize) -> (Job, MessageId, Reply) {
        let assigned = api.assign(1000, [0; 10]);
        let (reply, receiver) = oneshot::channel();
        let message = mailjar_core::store::Prepared::new(Incoming {
            envelope: Envelope {
                from: "s@x.test".into(),
                to: vec!["a@x.test".into()],
            },
            raw: vec![b'x'; size],
            helo: Some("client".into()),
            session: Default::default(),
            transcript: Default::default(),
        });
        let job = Job::Store(Box::new(Pending {
            email: Email::new(assigned.id, assigned.received_at_ms, message),
            reply,
        }));
        (job, assigned.id, receiver)
    }

    /// Queues `jobs` as the thread loop does: while the transaction takes more.
    fn queue(writer: &mut Writer, jobs: &mut Vec<Job>, now: Instant) {
        while writer.wants_jobs() && !jobs.is_empty() {
            writer.handle_job(jobs.remove(0), now);
        }
    }

    /// The transaction `writer` writes at `at`, once it has looked at the size if it was due to.
    fn next_write(writer: &mut Writer, at: Instant) -> Transaction {
        loop {
            match writer.poll(at) {
                Action::Write(transaction) => return transaction,
                Action::Size => writer.handle_sized(false, at),
                _ => panic!("not a write"),
            }
        }
    }

    fn ids(transaction: &Transaction) -> Vec<MessageId> {
        transaction.messages.iter().map(|p| p.email.id).collect()
    }

    /// A writer past its first reclaiming step (nothing was free).
    fn settled(limits: Limits, now: Instant) -> Writer {
        let mut writer = Writer::new(limits, now);
        assert!(matches!(writer.poll(now), Action::Tidy));
        writer.handle_tidied(false, now);
        writer.settle_until = None;
        writer
    }

    #[test]
    fn what_is_queued_is_one_transaction_inserted_then_answered() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (mut jobs, mut sent, mut replies) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            let (job, id, reply) = message(&mut api, 100);
            jobs.push(job);
            sent.push(id);
            replies.push(reply);
        }
        queue(&mut writer, &mut jobs, now);
        let transaction = next_write(&mut writer, now);
        assert_eq!(ids(&transaction), sent);
        let mut done = writer.handle_written(transaction, Ok(()), now).unwrap();
        let emails = std::mem::take(&mut done.emails);
        assert_eq!(emails.iter().map(|e| e.id).collect::<Vec<_>>(), sent);
        assert!(
            replies[0].try_recv().is_err(),
            "not answered before it is in the core"
        );
        done.answer();
        for (reply, id) in replies.iter_mut().zip(&sent) {
            assert_eq!(reply.try_recv().unwrap(), Ok(*id));
        }
    }

    #[test]
    fn seen_flags_coalesce_per_message_and_are_written_before_a_stop() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (a, b) = (api.assign(1, [0; 10]).id, api.assign(1, [0; 10]).id);
        let (job, _, _reply) = message(&mut api, 10);
        writer.handle_job(job, now);
        writer.handle_job(Job::Seen(a, true), now);
        writer.handle_job(Job::Seen(b, true), now);
        writer.handle_job(Job::Seen(a, false), now);
        let (stop, _stopped) = oneshot::channel();
        writer.handle_job(Job::Stop(stop), now);
        // A queued message does not hold them back, and the last change of each wins.
        match writer.poll(now) {
            Action::Seen(changes) => assert_eq!(changes, [(a, false), (b, true)]),
            _ => panic!("the seen flags first"),
        }
        let transaction = next_write(&mut writer, now);
        writer.handle_written(transaction, Ok(()), now);
        assert!(matches!(writer.poll(now), Action::Stop(_)));
    }

    #[test]
    fn catch_ups_and_writes_take_turns() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (job, id, _reply) = message(&mut api, 10);
        writer.handle_job(job, now);
        writer.handle_job(Job::CatchUp, now);
        assert!(matches!(writer.poll(now), Action::CatchUp(_)));
        writer.handle_caught_up(Ok(()), now);
        // Another node committed again meanwhile: this node's message goes first.
        writer.handle_job(Job::CatchUp, now);
        let transaction = next_write(&mut writer, now);
        assert_eq!(ids(&transaction), [id]);
        writer.handle_written(transaction, Ok(()), now);
        assert!(matches!(writer.poll(now), Action::CatchUp(_)));
    }

    #[test]
    fn heard_commits_coalesce_into_one_catch_up_past_the_newest_unless_a_whole_one_was_asked() {
        use crate::storage::CatchUp;
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (early, late) = (MessageId::from_u128(5), MessageId::from_u128(9));
        writer.handle_job(Job::Heard(late), now);
        writer.handle_job(Job::Heard(early), now);
        assert!(matches!(writer.poll(now), Action::CatchUp(CatchUp::Past(id)) if id == late));
        writer.handle_caught_up(Ok(()), now);
        writer.handle_job(Job::Heard(late), now);
        writer.handle_job(Job::CatchUp, now);
        assert!(matches!(writer.poll(now), Action::CatchUp(CatchUp::All)));
        // A failed catch-up is tried again whole.
        writer.handle_caught_up(Err(StorageError("down".into())), now);
        writer.handle_job(Job::Heard(early), now);
        assert!(matches!(writer.poll(now), Action::CatchUp(CatchUp::All)));
    }

    #[test]
    fn a_transaction_is_bounded_by_count_and_by_bytes() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut sizes = |limits: Limits, size: usize, n: usize| {
            let mut writer = settled(limits, now);
            let mut jobs: Vec<Job> = (0..n).map(|_| message(&mut api, size).0).collect();
            let mut sizes = Vec::new();
            while !jobs.is_empty() {
                queue(&mut writer, &mut jobs, now);
                let transaction = next_write(&mut writer, now);
                sizes.push(transaction.messages.len());
                writer.handle_written(transaction, Ok(()), now);
            }
            sizes
        };
        let count = Limits {
            messages: 3,
            bytes: usize::MAX,
        };
        assert_eq!(sizes(count, 10, 7), [3, 3, 1]);
        let bytes = Limits {
            messages: 100,
            bytes: 1000,
        };
        assert_eq!(
            sizes(bytes, 600, 4),
            [2, 2],
            "stops once it reaches the bound"
        );
        assert_eq!(sizes(bytes, 5000, 2), [1, 1], "a larger message goes alone");
    }

    #[test]
    fn a_failed_commit_answers_its_messages_keeps_its_removals_and_retries_them() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (job, _, mut reply) = message(&mut api, 10);
        let gone = Removal::One(api.assign(1, [0; 10]).id);
        let (ack, mut heard) = oneshot::channel();
        writer.handle_job(job, now);
        writer.handle_job(Job::Remove(vec![gone], Some(ack)), now);
        let transaction = next_write(&mut writer, now);
        let failure = StorageError("disk I/O error".into());
        assert!(
            writer
                .handle_written(transaction, Err(failure.clone()), now)
                .is_none()
        );
        assert_eq!(reply.try_recv().unwrap(), Err(failure.clone()));
        assert_eq!(heard.try_recv().unwrap(), Err(failure));
        // Tried again after a pause, not in a loop; no reclaiming meanwhile.
        assert!(matches!(writer.poll(now), Action::Wait(Some(at)) if at == now + RETRY));
        let later = now + RETRY;
        let transaction = next_write(&mut writer, later);
        assert_eq!(transaction.removals, [gone]);
        assert!(transaction.messages.is_empty());
        // A new message does not wait for the pause: it goes with the kept removals.
        writer.handle_written(transaction, Err(StorageError("again".into())), later);
        let (job, id, mut reply) = message(&mut api, 10);
        writer.handle_job(job, later);
        let transaction = next_write(&mut writer, later);
        assert_eq!(
            (ids(&transaction), transaction.removals.clone()),
            (vec![id], vec![gone])
        );
        writer
            .handle_written(transaction, Ok(()), later)
            .unwrap()
            .answer();
        assert_eq!(reply.try_recv().unwrap(), Ok(id));
        // Its removals freed space: reclaimed now.
        assert!(matches!(writer.poll(later), Action::Tidy));
    }

    #[test]
    fn an_ack_with_nothing_to_write_hears_at_once() {
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (ack, mut heard) = oneshot::channel();
        writer.handle_job(Job::Remove(Vec::new(), Some(ack)), now);
        assert!(matches!(writer.poll(now), Action::Wait(_)));
        assert_eq!(heard.try_recv(), Ok(Ok(())));
    }

    #[test]
    fn a_stop_writes_what_came_before_it_then_stops() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        let (first, id, _reply) = message(&mut api, 10);
        let (stop, _) = oneshot::channel();
        let (after, _, _) = message(&mut api, 10);
        let mut jobs = vec![first, Job::Stop(stop), after];
        queue(&mut writer, &mut jobs, now);
        assert_eq!(jobs.len(), 1, "nothing is taken after the stop");
        let transaction = next_write(&mut writer, now);
        assert_eq!(ids(&transaction), [id]);
        // Stops even when that write failed (what is lost was answered with the error).
        writer.handle_written(transaction, Err(StorageError("full".into())), now);
        assert!(matches!(writer.poll(now), Action::Stop(stops) if stops.len() == 1));
        // Every sender gone, nothing to write: stops too.
        let mut writer = settled(Limits::default(), now);
        writer.handle_closed();
        assert!(matches!(writer.poll(now), Action::Stop(stops) if stops.is_empty()));
    }

    #[test]
    fn space_is_reclaimed_in_steps_between_waits_and_the_size_followed_while_it_settles() {
        let now = Instant::now();
        let mut writer = Writer::new(Limits::default(), now);
        assert!(matches!(writer.poll(now), Action::Tidy), "at start");
        writer.handle_tidied(true, now);
        // The size is looked at once idle, then the next step waits its pause.
        assert!(matches!(writer.poll(now), Action::Wait(Some(at)) if at == now + SIZE_IDLE));
        let idle = now + SIZE_IDLE;
        assert!(matches!(writer.poll(idle), Action::Size));
        writer.handle_sized(true, idle);
        assert!(matches!(writer.poll(idle), Action::Wait(Some(at)) if at == now + RECLAIM_PAUSE));
        let step = now + RECLAIM_PAUSE;
        assert!(matches!(writer.poll(step), Action::Tidy));
        writer.handle_tidied(false, step);
        writer.handle_sized(true, step);
        // Done: the file shrinks when the log is copied in, so the size is looked at a while.
        let mut at = step;
        let mut looks = 0;
        loop {
            match writer.poll(at) {
                Action::Size => {
                    looks += 1;
                    writer.handle_sized(false, at);
                }
                Action::Wait(Some(next)) => at = next,
                Action::Wait(None) => break,
                _ => panic!("only looks at the size"),
            }
        }
        assert_eq!(at, step + SETTLE, "until it settles");
        assert_eq!(looks, 19, "every 100 ms for 2 s");
    }

    #[test]
    fn a_busy_writer_looks_at_the_size_at_most_every_interval() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let now = Instant::now();
        let mut writer = settled(Limits::default(), now);
        writer.handle_sized(false, now);
        let mut looks = 0;
        for ms in 0..300u64 {
            let at = now + Duration::from_millis(ms);
            let (job, _, _reply) = message(&mut api, 10);
            writer.handle_job(job, at);
            let transaction = loop {
                match writer.poll(at) {
                    Action::Write(transaction) => break transaction,
                    Action::Size => {
                        looks += 1;
                        writer.handle_sized(false, at);
                    }
                    _ => panic!("a message waits"),
                }
            };
            writer.handle_written(transaction, Ok(()), at);
        }
        assert_eq!(looks, 2, "at 100 and 200 ms, not after each of 300 batches");
    }

    /// Records every transaction; fails while `fail` is set.
    #[derive(Default)]
    struct Log {
        transactions: Vec<(Vec<MessageId>, Vec<Removal>)>,
        fail: bool,
    }

    struct Shared(Arc<Mutex<Log>>);

    impl Storage for Shared {
        fn write(
            &mut self,
            records: &[Record<'_>],
            removals: &[Removal],
        ) -> Result<(), StorageError> {
            let mut log = self.0.lock().unwrap();
            if log.fail {
                return Err(StorageError("disk I/O error".into()));
            }
            log.transactions
                .push((records.iter().map(|r| r.id).collect(), removals.to_vec()));
            Ok(())
        }
        fn load(
            &mut self,
            _: &mut dyn FnMut(Vec<Loaded>),
        ) -> Result<crate::storage::LoadReport, StorageError> {
            Ok(Default::default())
        }
        fn size(&self) -> u64 {
            100 * self.0.lock().unwrap().transactions.len() as u64
        }
        fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
            serde_json::Map::new()
        }
    }

    #[test]
    fn the_thread_commits_inserts_removes_and_reports_the_size() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let log = Arc::new(Mutex::new(Log::default()));
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut replies = Vec::new();
        for _ in 0..3 {
            let (job, id, reply) = message(&mut api, 10);
            sender.send(job).unwrap();
            replies.push((id, reply));
        }
        // What the core evicts comes back as a removal job of its own.
        let evicted = Removal::One(api.assign(1, [0; 10]).id);
        sender.send(Job::Remove(vec![evicted], None)).unwrap();
        drop(sender);
        let status = Status::default();
        let mut inserted = Vec::new();
        run(
            &mut Shared(log.clone()),
            receiver,
            Limits::default(),
            &status,
            &mut Core {
                committed: &mut |emails| inserted.extend(emails.iter().map(|e| e.id)),
                removed: &mut |_| {},
                current: &mut || (Vec::new(), Vec::new()),
                changed: &mut |_, _| {},
                seen: &mut |_| {},
            },
        );
        let sent: Vec<MessageId> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(inserted, sent);
        for (id, mut reply) in replies {
            assert_eq!(reply.try_recv().unwrap(), Ok(id));
        }
        assert_eq!(log.lock().unwrap().transactions, [(sent, vec![evicted])]);
        assert_eq!(status.bytes(), 100, "the size after the (one) write");
        assert_eq!(status.error(), None);
    }

    #[test]
    fn the_thread_retries_a_failed_removal_until_the_disk_takes_it() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let deleted = Removal::One(api.assign(1, [0; 10]).id);
        let log = Arc::new(Mutex::new(Log {
            fail: true,
            ..Log::default()
        }));
        let (ack, heard) = oneshot::channel();
        let mending = log.clone();
        let helper = std::thread::spawn(move || {
            let answer = heard.blocking_recv();
            // The error was heard; now the disk works again.
            mending.lock().unwrap().fail = false;
            answer
        });
        let (sender, receiver) = std::sync::mpsc::channel();
        sender.send(Job::Remove(vec![deleted], Some(ack))).unwrap();
        drop(sender);
        let status = Status::default();
        run(
            &mut Shared(log.clone()),
            receiver,
            Limits::default(),
            &status,
            &mut Core {
                committed: &mut |_| {},
                removed: &mut |_| {},
                current: &mut || (Vec::new(), Vec::new()),
                changed: &mut |_, _| {},
                seen: &mut |_| {},
            },
        );
        let heard = helper.join().unwrap();
        assert_eq!(heard, Ok(Err(StorageError("disk I/O error".into()))));
        assert_eq!(log.lock().unwrap().transactions, [(vec![], vec![deleted])]);
        assert_eq!(status.error(), None, "writes work again");
    }
}
