//! The one thread that owns the storage engine.
//!
//! Without `--fsync`, SMTP sessions make their messages durable themselves,
//! in the ingest journal (see [`super::ingest`]), and the writer moves what
//! became visible there into the database once a [`MOVE_WINDOW`] passes with
//! nothing new (or a bound of [`DEFER_LIMIT`] is reached): many sessions'
//! messages in one transaction, before any removal that names them. A move that fails, or a record that does not read back,
//! is kept and tried again; a journal file is deleted once all it holds has
//! committed.
//!
//! With `--fsync`, group commit: SMTP sessions queue their messages (already
//! holding their ids) and wait; the writer takes everything queued while its
//! previous commit ran, up to [`Limits`], and writes it in one transaction
//! together with the removals (deletes, evictions, expiry) queued meanwhile.
//! Only after the commit are the messages handed to the core (visible to the
//! API, waits and events) and their senders answered, so a 250 always follows
//! a commit. A failed commit answers every message of its batch with the
//! error (the session replies 452 4.3.1) and inserts none; removals stay
//! queued and are tried again, so mailjar recovers by itself when writes work
//! again.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mailjar_core::api::Removal;
use mailjar_core::id::MessageId;
use mailjar_core::store::Email;
use tokio::sync::oneshot;

use mailjar_core::smtp::SmtpFacts;

use super::ingest::{Backlog, JournalSource, Span};
use super::journal::{self, JournalFile};
use super::{Loaded, Record, Storage, StorageError};

/// A message for the writer, with its id, and where its outcome goes.
pub struct Pending {
    /// The message as it will be stored, built outside every lock, under
    /// the id and receive time the core assigned.
    pub email: Email,
    /// Gets the id once the message is committed and in the core, or the error.
    pub reply: oneshot::Sender<Result<MessageId, StorageError>>,
}

/// What the writer is asked to do.
pub enum Job {
    /// Write this message.
    Store(Box<Pending>),
    /// Delete these messages from disk; `done` hears whether the write that
    /// held them committed (a failed one is tried again until it does).
    Remove(
        Vec<Removal>,
        Option<oneshot::Sender<Result<(), StorageError>>>,
    ),
    /// Records became visible in the journal while the writer was idle: look
    /// at them a [`MOVE_WINDOW`] from now (see [`DEFER_LIMIT`]).
    Journal,
    /// Write what came before, close the storage (and its lock), then say so on `done`.
    Stop(oneshot::Sender<()>),
}

/// How much one transaction takes at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Messages per transaction.
    pub messages: usize,
    /// Raw bytes per transaction (a single larger message still goes alone).
    pub bytes: usize,
}

impl Limits {
    /// The default bound of raw bytes per transaction: 64 MiB.
    pub const DEFAULT_BYTES: usize = 64 * 1024 * 1024;
}

impl Limits {
    /// How many of `spans`, from the first, one transaction takes: at most
    /// `messages`, and `bytes` unless the first alone is larger.
    fn fitting(&self, spans: &[Span]) -> usize {
        let mut bytes = 0u64;
        let mut taken = 0;
        for span in spans {
            if taken == self.messages || (taken > 0 && bytes + span.len > self.bytes as u64) {
                break;
            }
            bytes += span.len;
            taken += 1;
        }
        taken
    }
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

/// The storage's health as `/health` shows it: ok, or the last write's error,
/// and its size on disk. The writer updates both; `/health` reads them under
/// the API lock without touching the file system.
#[derive(Debug, Default)]
pub struct Status {
    error: Mutex<Option<String>>,
    /// The last journal write's error, if it failed (sessions set it).
    journal_error: Mutex<Option<String>>,
    /// Whether `journal_error` is set: a good write looks here, not at the mutex.
    journal_failed: std::sync::atomic::AtomicBool,
    bytes: std::sync::atomic::AtomicU64,
    /// The journal's files, as the journal itself keeps it (see [`Status::journal_gauge`]).
    journal_bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl Status {
    /// The storage's size on disk: the database's as the writer last looked
    /// (after its last batch once it has been idle for 2 ms, at most 100 ms
    /// old while it is busy), plus the journal's as of now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed) + self.journal_bytes()
    }

    /// The journal's part of [`Status::bytes`], as of now.
    pub fn journal_bytes(&self) -> u64 {
        self.journal_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where the journal keeps its size, for `/health` to read without its lock.
    pub fn journal_gauge(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.journal_bytes.clone()
    }

    /// Records the database's size on disk (the journal keeps its own).
    pub fn set_bytes(&self, bytes: u64) {
        self.bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The error of the last write, None when it succeeded: the journal's
    /// (a session's) first, then the database's (the writer's).
    pub fn error(&self) -> Option<String> {
        self.journal_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .or_else(|| self.writer_error())
    }

    /// The error of the writer's last transaction, None when it committed.
    fn writer_error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records how the last journal write went.
    pub fn set_journal(&self, error: Option<String>) {
        use std::sync::atomic::Ordering;
        if error.is_none() && !self.journal_failed.load(Ordering::Acquire) {
            return;
        }
        let mut slot = self.journal_error.lock().unwrap_or_else(|p| p.into_inner());
        match (&*slot, &error) {
            (None, Some(e)) => tracing::error!("journal write failed: {e}"),
            (Some(_), None) => tracing::info!("journal writes work again"),
            _ => {}
        }
        self.journal_failed
            .store(error.is_some(), Ordering::Release);
        *slot = error;
    }

    fn set(&self, error: Option<String>) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        match (&*slot, &error) {
            (None, Some(e)) => tracing::error!("storage write failed: {e}"),
            (Some(_), None) => tracing::info!("storage writes work again"),
            _ => {}
        }
        *slot = error;
    }
}

/// Hands committed messages, in id order, to the core; returns what that evicted.
pub type Committed = dyn FnMut(Vec<Email>) -> Vec<Removal> + Send;

/// How long the writer idles between two reclaiming steps when no batch comes.
const RECLAIM_PAUSE: Duration = Duration::from_millis(20);

/// How often, at most, a busy writer looks at the storage's size on disk.
const SIZE_EVERY: Duration = Duration::from_millis(100);

/// How long the writer must have had no work before it looks at the size.
const SIZE_IDLE: Duration = Duration::from_millis(2);

/// For how long after reclaiming ends, or after the size last changed, an
/// idle writer keeps looking at the size on disk (every SIZE_EVERY): the file
/// shrinks when the checkpoint thread next copies the log in.
const SETTLE: Duration = Duration::from_secs(2);

/// How long the writer waits before it tries a failed write again.
const RETRY: Duration = Duration::from_millis(200);

/// How long journaled records wait before they are moved into the database:
/// the records of many sessions go in one transaction (one a message cost the
/// writer as much as the sessions' own work), and a crash loses none of them.
pub const MOVE_WINDOW: Duration = Duration::from_millis(50);

/// While records keep arriving, the writer leaves them in the journal for up
/// to this long, [`DEFER_RECORDS`], [`DEFER_BYTES`] or until the journal is
/// pressed ([`Backlog::pressed`]), and moves them once a
/// window passes with none new: a burst of mail is moved after it rather
/// than beside it, where the writer's work slowed the sessions by more than
/// its own time (measured: about a sixth of the rate with 10 sessions on 2
/// cores). Under sustained load the bounds make it move as before, in
/// larger transactions.
pub const DEFER_LIMIT: Duration = Duration::from_secs(1);

/// See [`DEFER_LIMIT`].
pub const DEFER_RECORDS: usize = 8192;

/// See [`DEFER_LIMIT`].
pub const DEFER_BYTES: u64 = 16 * 1024 * 1024;

/// Whether the writer leaves `backlog` in the journal for another window at
/// `now`: records are still arriving (more than the `seen` of its last look),
/// and none of the deferral's bounds is reached.
fn defers(backlog: &Backlog, seen: usize, now: Instant) -> bool {
    backlog.records > seen
        && !backlog.pressed
        && backlog.records < DEFER_RECORDS
        && backlog.bytes < DEFER_BYTES
        && backlog
            .since
            .is_some_and(|since| now.saturating_duration_since(since) < DEFER_LIMIT)
}

/// [`JournalSource::prepare_files`]; a failure is logged (the current file
/// grows, or takes more, meanwhile) and tried again at the next look.
fn ready_files(journal: &dyn JournalSource) {
    if let Err(e) = journal.prepare_files() {
        tracing::warn!("{e}");
    }
}

/// The journal's records that the writer moves into the database, and the
/// files it deletes once they have been.
#[derive(Default)]
struct Moving {
    /// Records taken from the journal, not yet committed to the database.
    spans: Vec<Span>,
    /// Full journal files and their lengths, to delete once `spans` is committed.
    retired: Vec<(Arc<JournalFile>, u64)>,
    /// When to take what became visible next: a window after the first wake.
    due: Option<Instant>,
    /// Records visible at the last look that left them in the journal
    /// ([`defers`]), or when the writer was woken for them.
    seen: usize,
}

impl Moving {
    /// Takes what became visible in the journal (evictions join `removals`),
    /// and readies its files ([`JournalSource::prepare_files`]).
    fn take(&mut self, journal: &dyn JournalSource, removals: &mut Vec<Removal>) {
        self.due = None;
        self.seen = 0;
        let taken = journal.take();
        self.spans.extend(taken.spans);
        removals.extend(taken.removals);
        self.retired.extend(taken.retired);
        ready_files(journal);
    }

    /// Reads `spans` back from the journal (the page cache, as a rule). A
    /// record that does not read back fails the whole read, like a failed
    /// write: it was acknowledged, and the records after it must not reach
    /// the database before it (recovery moves only ids after the greatest there).
    fn read(spans: &[Span]) -> Result<Vec<(Loaded, SmtpFacts)>, StorageError> {
        let mut read = Vec::with_capacity(spans.len());
        for span in spans {
            let len = usize::try_from(span.len).unwrap_or(usize::MAX);
            let bytes = span.file.read_at(span.offset, len)?;
            let loaded = journal::decode(&bytes).ok_or_else(|| {
                StorageError(format!(
                    "{}: the record at byte {} does not read back as it was written",
                    span.file.path.display(),
                    span.offset
                ))
            })?;
            let smtp = loaded.smtp_facts();
            read.push((loaded, smtp));
        }
        Ok(read)
    }

    /// Writes `spans` (read back from the journal), then `batch`, and
    /// `removals` after them, in one transaction.
    fn write(
        storage: &mut dyn Storage,
        spans: &[Span],
        batch: &[Pending],
        removals: &[Removal],
    ) -> Result<(), StorageError> {
        let read = Moving::read(spans)?;
        let records: Vec<Record<'_>> = read
            .iter()
            .map(|(l, smtp)| l.record(smtp))
            .chain(batch.iter().map(|p| Record::of(&p.email)))
            .collect();
        storage.write(&records, removals)
    }

    /// Deletes the retired files: everything in them is in the database.
    fn delete_retired(&mut self, journal: Option<&dyn JournalSource>) {
        for (file, len) in self.retired.drain(..) {
            if let Err(e) = std::fs::remove_file(&file.path) {
                // Moved all the same: the next start finds nothing in it to move, and deletes it.
                tracing::warn!(
                    "{}: cannot delete a moved journal file: {e}",
                    file.path.display()
                );
            }
            if let Some(journal) = journal {
                journal.deleted(len);
            }
        }
    }
}

/// Runs the writer until every sender of `jobs` is gone and nothing is left
/// to write. `committed` hands committed messages, in id order, to the
/// core and returns what that evicted (written in the next transaction).
/// With a `journal`, it also moves journaled messages (already in the core)
/// into the database, once a [`MOVE_WINDOW`] passes with none new (see [`DEFER_LIMIT`]).
pub fn run(
    storage: &mut dyn Storage,
    jobs: Receiver<Job>,
    limits: Limits,
    status: &Status,
    committed: &mut dyn FnMut(Vec<Email>) -> Vec<Removal>,
    journal: Option<&dyn JournalSource>,
) -> Vec<oneshot::Sender<()>> {
    let mut stops = Vec::new();
    let mut removals: Vec<Removal> = Vec::new();
    let mut moving = Moving::default();
    let mut open = true;
    // Free pages are being handed back to the file system, a step between
    // batches. Also at start: what a lower limit removed at load, or what a
    // run that stopped midway left, is free but still in the file.
    let mut reclaiming = true;
    // Until then, an idle writer still looks at the size now and then (see SETTLE).
    let mut settling: Option<Instant> = None;
    // The size on disk changed since `status` last heard it, which was at `sized`.
    let mut size_stale = false;
    let mut sized = Instant::now();
    let mut next: Option<Job> = None;
    if let Some(journal) = journal {
        ready_files(journal);
    }
    loop {
        // Work that is written whatever comes: removals, and journal records taken.
        let pending = !removals.is_empty() || !moving.spans.is_empty();
        if !open && !pending && moving.due.is_none() {
            break;
        }
        if size_stale {
            // Looked at once the writer has had no work for SIZE_IDLE, and at
            // most every SIZE_EVERY while busy: two `statx` a batch were a
            // twelfth of its time, and under load the queue runs dry between
            // most batches for a few microseconds.
            let idle_wait = if pending || moving.due.is_some() {
                Duration::ZERO
            } else {
                SIZE_IDLE
            };
            if next.is_none() {
                match jobs.recv_timeout(idle_wait) {
                    Ok(job) => next = Some(job),
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
                }
            }
            if next.is_none() || sized.elapsed() >= SIZE_EVERY {
                let size = storage.size();
                if size != status.bytes() && settling.is_some() {
                    // Still shrinking (a slow checkpoint): keep looking.
                    settling = Some(Instant::now() + SETTLE);
                }
                status.set_bytes(size);
                size_stale = false;
                sized = Instant::now();
            }
        }
        let receive =
            |jobs: &Receiver<Job>, wait: Duration, open: &mut bool| match jobs.recv_timeout(wait) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    *open = false;
                    None
                }
            };
        let first = if next.is_some() {
            next.take()
        } else if pending && status.writer_error().is_some() {
            // The last write failed: try again a little later, or with the next message.
            if open {
                receive(&jobs, RETRY, &mut open)
            } else {
                std::thread::sleep(RETRY);
                None
            }
        } else if pending || !open {
            receive(&jobs, Duration::ZERO, &mut open)
        } else if let Some(due) = moving.due {
            receive(
                &jobs,
                due.saturating_duration_since(Instant::now()),
                &mut open,
            )
        } else if reclaiming {
            receive(&jobs, RECLAIM_PAUSE, &mut open)
        } else if settling.is_some_and(|until| Instant::now() < until) {
            // Reclaiming just ended: the checkpoint that shrinks the file runs
            // on its own thread, so look at the size again a few times.
            let job = receive(&jobs, SIZE_EVERY, &mut open);
            size_stale |= job.is_none();
            job
        } else {
            match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => {
                    open = false;
                    None
                }
            }
        };
        let mut batch: Vec<Pending> = Vec::new();
        let mut acks = Vec::new();
        let mut bytes = 0usize;
        let mut take = |job: Job,
                        batch: &mut Vec<Pending>,
                        bytes: &mut usize,
                        moving: &mut Moving| match job {
            Job::Store(pending) => {
                *bytes += pending.email.raw().len();
                batch.push(*pending);
            }
            Job::Remove(more, done) => {
                removals.extend(more);
                acks.extend(done);
            }
            Job::Journal => {
                if moving.due.is_none() {
                    moving.due = Some(Instant::now() + MOVE_WINDOW);
                    // What woke it counts as seen: one message alone is moved a window later.
                    moving.seen = journal.map_or(0, |j| j.backlog().records);
                }
            }
            Job::Stop(done) => stops.push(done),
        };
        if let Some(job) = first {
            take(job, &mut batch, &mut bytes, &mut moving);
        }
        // Group commit: everything queued while the last commit ran, within the limits.
        while batch.len() < limits.messages && bytes < limits.bytes {
            match jobs.try_recv() {
                Ok(job) => take(job, &mut batch, &mut bytes, &mut moving),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if let Some(journal) = journal {
            if !stops.is_empty() || !open {
                // Nothing new is journaled from here: move what is there.
                journal.close();
            }
            // Removals (and a stop) may name journaled messages: move them first, in the same write.
            let now = Instant::now();
            let mut due = moving.due.is_some_and(|d| now >= d);
            let forced = !removals.is_empty() || !acks.is_empty() || !stops.is_empty() || !open;
            if due && !forced {
                let backlog = journal.backlog();
                if defers(&backlog, moving.seen, now) {
                    moving.seen = backlog.records;
                    moving.due = Some(now + MOVE_WINDOW);
                    due = false;
                    // Records keep coming: the spare must be ready before the file is full.
                    ready_files(journal);
                }
            }
            if due || forced {
                moving.take(journal, &mut removals);
            }
        }
        if batch.is_empty() && removals.is_empty() && moving.spans.is_empty() {
            for ack in acks {
                let _ = ack.send(Ok(()));
            }
            if !moving.retired.is_empty() {
                moving.delete_retired(journal);
                size_stale = true;
            }
            if !stops.is_empty() {
                break;
            }
            if reclaiming {
                reclaiming = storage.tidy();
                // A step moves pages and shrinks the file: /health hears of it.
                size_stale = true;
                if !reclaiming {
                    settling = Some(Instant::now() + SETTLE);
                }
            }
            continue;
        }
        // Journaled records beyond one transaction's bound go first, on their own.
        let mut written = Ok(());
        while written.is_ok() {
            let fits = limits.fitting(&moving.spans);
            if fits == moving.spans.len() {
                break;
            }
            written = Moving::write(storage, &moving.spans[..fits], &[], &[]);
            if written.is_ok() {
                moving.spans.drain(..fits);
                if let Some(journal) = journal {
                    journal.moved(fits);
                }
            }
        }
        if written.is_ok() {
            written = Moving::write(storage, &moving.spans, &batch, &removals);
        }
        let removed = !removals.is_empty();
        // /health says what the deletes hear, before they hear it.
        status.set(written.as_ref().err().map(ToString::to_string));
        for ack in acks {
            let _ = ack.send(written.clone());
        }
        match written {
            Ok(()) => {
                removals.clear();
                if let Some(journal) = journal {
                    journal.moved(moving.spans.len());
                }
                moving.spans.clear();
                moving.delete_retired(journal);
                let mut replies = Vec::with_capacity(batch.len());
                let mut messages = Vec::with_capacity(batch.len());
                for p in batch {
                    replies.push((p.email.id, p.reply));
                    messages.push(p.email);
                }
                // Into the core, then the 250s.
                if !messages.is_empty() {
                    removals.extend(committed(messages));
                }
                for (id, reply) in replies {
                    let _ = reply.send(Ok(id));
                }
            }
            Err(e) => {
                for p in batch {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
        // Space is freed only by removals: reclaim it in steps from the batch that had them on.
        reclaiming |= removed;
        if reclaiming && status.writer_error().is_none() && removals.is_empty() {
            reclaiming = storage.tidy();
            if !reclaiming {
                settling = Some(Instant::now() + SETTLE);
            }
        }
        size_stale = true;
        if !stops.is_empty() {
            break;
        }
    }
    status.set_bytes(storage.size());
    stops
}

/// Starts the writer thread; the sender queues jobs for it.
pub fn spawn(
    mut storage: Box<dyn Storage>,
    limits: Limits,
    status: Arc<Status>,
    mut committed: Box<Committed>,
    journal: Option<Arc<dyn JournalSource>>,
) -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (sender, jobs) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("mailjar-writer".into())
        .spawn(move || {
            let stops = run(
                storage.as_mut(),
                jobs,
                limits,
                &status,
                committed.as_mut(),
                journal.as_deref(),
            );
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
    use crate::storage::ingest::{FILE_BYTES, Ingest};
    use crate::storage::journal::Encoded;
    use mailjar_core::api::{Api, ApiConfig, Assigned};
    use mailjar_core::smtp::{Envelope, Incoming};

    #[test]
    fn records_wait_in_the_journal_while_more_arrive_within_the_deferral_bounds() {
        let start = Instant::now();
        let backlog = |records, bytes| Backlog {
            records,
            bytes,
            since: Some(start),
            pressed: false,
        };
        let soon = start + MOVE_WINDOW;
        assert!(defers(&backlog(10, 20_000), 0, soon), "arriving");
        assert!(
            !defers(&backlog(10, 20_000), 10, soon),
            "none new in a window"
        );
        assert!(!defers(&backlog(DEFER_RECORDS, 1), 0, soon));
        assert!(!defers(&backlog(10, DEFER_BYTES), 0, soon));
        assert!(
            !defers(&backlog(10, 20_000), 0, start + DEFER_LIMIT),
            "waited long enough"
        );
        let pressed = Backlog {
            pressed: true,
            ..backlog(10, 20_000)
        };
        assert!(
            !defers(&pressed, 0, soon),
            "the journal is past half a bound"
        );
        let nothing = Backlog {
            since: None,
            ..backlog(0, 0)
        };
        assert!(!defers(&nothing, 0, soon));
    }

    /// Records every transaction; fails while `fail` is set.
    #[derive(Default)]
    struct Log {
        transactions: Vec<(Vec<MessageId>, Vec<Removal>)>,
        fail: bool,
        /// Fails the write that would be transaction number this (from 0), once.
        fail_once_at: Option<usize>,
        tidied: usize,
        /// How often the writer asked for the size on disk.
        sized: usize,
    }

    struct Shared(Arc<Mutex<Log>>);

    impl Storage for Shared {
        fn write(
            &mut self,
            records: &[Record<'_>],
            removals: &[Removal],
        ) -> Result<(), StorageError> {
            let mut log = self.0.lock().unwrap();
            if log.fail_once_at == Some(log.transactions.len()) {
                log.fail_once_at = None;
                return Err(StorageError("disk I/O error".into()));
            }
            if log.fail {
                return Err(StorageError("disk I/O error".into()));
            }
            log.transactions
                .push((records.iter().map(|r| r.id).collect(), removals.to_vec()));
            Ok(())
        }
        fn load(&mut self, _: &mut dyn FnMut(Vec<Loaded>)) -> Result<(), StorageError> {
            Ok(())
        }
        fn size(&self) -> u64 {
            let mut log = self.0.lock().unwrap();
            log.sized += 1;
            100 * log.transactions.len() as u64
        }
        fn tidy(&mut self) -> bool {
            self.0.lock().unwrap().tidied += 1;
            false
        }
    }

    type Evict<'a> = dyn FnMut(&[Email]) -> Vec<Removal> + 'a;

    type Reply = oneshot::Receiver<Result<MessageId, StorageError>>;

    fn message(api: &mut Api<()>, size: usize) -> (Job, Assigned, Reply) {
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
        });
        let job = Job::Store(Box::new(Pending {
            email: Email::new(assigned.id, assigned.received_at_ms, message),
            reply,
        }));
        (job, assigned, receiver)
    }

    /// A storage whose writes fail until `fail` is cleared.
    fn failing_log() -> Arc<Mutex<Log>> {
        Arc::new(Mutex::new(Log {
            fail: true,
            ..Log::default()
        }))
    }

    /// Queues `jobs`, closes the queue, runs the writer to the end.
    fn write_all(
        jobs: Vec<Job>,
        limits: Limits,
        log: &Arc<Mutex<Log>>,
        evict: &mut Evict<'_>,
    ) -> (Vec<Vec<MessageId>>, Status) {
        let (sender, receiver) = std::sync::mpsc::channel();
        for job in jobs {
            sender.send(job).unwrap();
        }
        drop(sender);
        let status = Status::default();
        let mut inserted = Vec::new();
        let mut storage = Shared(log.clone());
        run(
            &mut storage,
            receiver,
            limits,
            &status,
            &mut |batch| {
                let removals = evict(&batch);
                inserted.push(batch.iter().map(|e| e.id).collect());
                removals
            },
            None,
        );
        (inserted, status)
    }

    #[test]
    fn everything_queued_is_one_transaction_then_inserted_then_answered() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let (jobs, ids, mut replies): (Vec<_>, Vec<_>, Vec<_>) = {
            let mut jobs = Vec::new();
            let mut ids = Vec::new();
            let mut replies = Vec::new();
            for _ in 0..5 {
                let (job, assigned, reply) = message(&mut api, 100);
                jobs.push(job);
                ids.push(assigned.id);
                replies.push(reply);
            }
            (jobs, ids, replies)
        };
        let log = Arc::new(Mutex::new(Log::default()));
        let (inserted, status) = write_all(jobs, Limits::default(), &log, &mut |_| Vec::new());
        let log = log.lock().unwrap();
        assert_eq!(log.transactions.len(), 1, "one commit for five senders");
        assert_eq!(log.transactions[0].0, ids);
        assert_eq!(inserted, vec![ids.clone()]);
        for (reply, id) in replies.iter_mut().zip(&ids) {
            assert_eq!(reply.try_recv().unwrap(), Ok(*id));
        }
        assert_eq!(status.error(), None);
        assert!(
            log.tidied <= 1,
            "one look at start, none after: nothing was removed ({} looks)",
            log.tidied
        );
    }

    #[test]
    fn a_transaction_is_bounded_by_count_and_by_bytes() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let jobs: Vec<_> = (0..7).map(|_| message(&mut api, 10).0).collect();
        let log = Arc::new(Mutex::new(Log::default()));
        let limits = Limits {
            messages: 3,
            bytes: usize::MAX,
        };
        let (inserted, _) = write_all(jobs, limits, &log, &mut |_| Vec::new());
        let sizes: Vec<_> = inserted.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let jobs: Vec<_> = (0..4).map(|_| message(&mut api, 600).0).collect();
        let limits = Limits {
            messages: 100,
            bytes: 1000,
        };
        let (inserted, _) = write_all(jobs, limits, &log, &mut |_| Vec::new());
        let sizes: Vec<_> = inserted.iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            [2, 2],
            "a batch stops once it reaches the byte bound"
        );
    }

    #[test]
    fn a_failed_commit_answers_its_batch_with_the_error_and_inserts_nothing() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let (job, _, mut reply) = message(&mut api, 10);
        let log = failing_log();
        let (inserted, status) = write_all(vec![job], Limits::default(), &log, &mut |_| Vec::new());
        assert!(inserted.is_empty());
        let answer = reply.try_recv().unwrap();
        assert_eq!(answer, Err(StorageError("disk I/O error".into())));
        assert_eq!(status.error().as_deref(), Some("disk I/O error"));
        // Writes work again: the next batch commits and clears the error.
        log.lock().unwrap().fail = false;
        let (job, assigned, mut reply) = message(&mut api, 10);
        let (inserted, status) = write_all(vec![job], Limits::default(), &log, &mut |_| Vec::new());
        assert_eq!(inserted, vec![vec![assigned.id]]);
        assert_eq!(reply.try_recv().unwrap(), Ok(assigned.id));
        assert_eq!(status.error(), None);
    }

    #[test]
    fn evictions_and_deletes_are_written_in_a_following_transaction() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let (job, first, _reply) = message(&mut api, 10);
        let (done, mut acked) = oneshot::channel();
        let deleted = api.assign(1, [0; 10]).id;
        let jobs = vec![job, Job::Remove(vec![Removal::One(deleted)], Some(done))];
        let log = Arc::new(Mutex::new(Log::default()));
        let evicted = api.assign(1, [0; 10]).id;
        let (_, _) = write_all(jobs, Limits::default(), &log, &mut |_| {
            vec![Removal::One(evicted)]
        });
        let log = log.lock().unwrap();
        assert_eq!(
            log.transactions,
            [
                (vec![first.id], vec![Removal::One(deleted)]),
                (vec![], vec![Removal::One(evicted)])
            ]
        );
        assert_eq!(acked.try_recv(), Ok(Ok(())));
        assert!(log.tidied >= 1, "space is reclaimed after removals");
    }

    #[test]
    fn a_removal_that_fails_is_acked_with_the_error_and_written_once_writes_work() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let deleted = api.assign(1, [0; 10]).id;
        let (done, acked) = oneshot::channel();
        let log = failing_log();
        let mending = log.clone();
        let heard = std::thread::spawn(move || {
            let answer = acked.blocking_recv();
            // The error was heard; now the disk works again.
            mending.lock().unwrap().fail = false;
            answer
        });
        let jobs = vec![Job::Remove(vec![Removal::One(deleted)], Some(done))];
        // The writer runs until the removal is written: the queue is closed,
        // so it retries at once, until the helper thread mends the disk.
        let (_, status) = write_all(jobs, Limits::default(), &log, &mut |_| Vec::new());
        assert_eq!(
            heard.join().unwrap(),
            Ok(Err(StorageError("disk I/O error".into())))
        );
        assert_eq!(
            log.lock().unwrap().transactions,
            [(vec![], vec![Removal::One(deleted)])]
        );
        assert_eq!(status.error(), None);
    }

    #[test]
    fn a_busy_writer_looks_at_the_size_on_disk_once_it_is_idle() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let jobs: Vec<_> = (0..7).map(|_| message(&mut api, 10).0).collect();
        let log = Arc::new(Mutex::new(Log::default()));
        let limits = Limits {
            messages: 1,
            bytes: usize::MAX,
        };
        let (inserted, status) = write_all(jobs, limits, &log, &mut |_| Vec::new());
        assert_eq!(inserted.len(), 7);
        assert_eq!(status.bytes(), 700, "the size after the last batch");
        let sized = log.lock().unwrap().sized;
        // Twice here (queue dry, writer stopping), more only if a batch took 100 ms.
        assert!(
            sized < 7,
            "not after each of 7 queued batches: {sized} looks"
        );
    }

    #[test]
    fn an_idle_writer_has_reported_the_size_of_its_last_batch() {
        let mut api = Api::<()>::new(ApiConfig::default());
        let log = Arc::new(Mutex::new(Log::default()));
        let status = Arc::new(Status::default());
        let (sender, receiver) = std::sync::mpsc::channel();
        let writer = {
            let (log, status) = (log.clone(), status.clone());
            std::thread::spawn(move || {
                let mut storage = Shared(log);
                run(
                    &mut storage,
                    receiver,
                    Limits::default(),
                    &status,
                    &mut |_| Vec::new(),
                    None,
                );
            })
        };
        for n in 1..=2u64 {
            let (job, assigned, mut reply) = message(&mut api, 10);
            sender.send(job).unwrap();
            let waited = std::time::Instant::now();
            while status.bytes() != 100 * n {
                assert!(
                    waited.elapsed() < Duration::from_secs(5),
                    "size never reported"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(reply.try_recv().unwrap(), Ok(assigned.id));
        }
        drop(sender);
        writer.join().unwrap();
    }

    /// A journal in a fresh directory, as the sessions of a server write it.
    fn journal(name: &str) -> (std::path::PathBuf, Arc<Ingest<u32>>) {
        journal_bounded(name, usize::MAX)
    }

    /// [`journal`] with at most `max_unmoved` records waiting to be moved.
    fn journal_bounded(name: &str, max_unmoved: usize) -> (std::path::PathBuf, Arc<Ingest<u32>>) {
        let dir =
            std::env::temp_dir().join(format!("mailjar-writer-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = JournalFile::create(&dir, 1).unwrap();
        (
            dir.clone(),
            Arc::new(Ingest::new(dir, first, u64::MAX, max_unmoved)),
        )
    }

    /// Journals message `n` as a session does: reserve, write, complete; its record's length.
    fn journaled(ingest: &Ingest<u32>, n: u128) -> u64 {
        let envelope = Envelope {
            from: "s@x.test".into(),
            to: vec!["a@x.test".into()],
        };
        let smtp = SmtpFacts::default();
        let mut encoded = Encoded::new(&Record {
            id: MessageId::from_u128(0),
            received_at_ms: 0,
            envelope: &envelope,
            smtp: &smtp,
            raw: b"x",
        })
        .unwrap();
        let (reserved, ()) = ingest.reserve(encoded.len(), || ()).unwrap();
        encoded.seal(MessageId::from_u128(n), 1000, b"x");
        encoded
            .write(&reserved.span.file, b"x", reserved.span.offset)
            .unwrap();
        ingest.complete(reserved.ticket, Some(n as u32), |_| Vec::new());
        encoded.len()
    }

    /// Runs the writer on this thread, moving what `ingest` journals into `log`, until `jobs` is closed.
    fn move_all(
        ingest: &Ingest<u32>,
        log: &Arc<Mutex<Log>>,
        jobs: Receiver<Job>,
        limits: Limits,
        status: &Status,
    ) {
        let source: &dyn JournalSource = ingest;
        run(
            &mut Shared(log.clone()),
            jobs,
            limits,
            status,
            &mut |_| Vec::new(),
            Some(source),
        );
    }

    /// A writer thread moving what `ingest` journals into `log`, woken once; its queue and status.
    fn moving_writer(
        log: &Arc<Mutex<Log>>,
        ingest: &Arc<Ingest<u32>>,
        limits: Limits,
    ) -> (
        std::sync::mpsc::Sender<Job>,
        Arc<Status>,
        std::thread::JoinHandle<()>,
    ) {
        let status = Arc::new(Status::default());
        let (sender, receiver) = std::sync::mpsc::channel();
        let writer = {
            let (log, status, ingest) = (log.clone(), status.clone(), ingest.clone());
            std::thread::spawn(move || {
                let source: &dyn JournalSource = &*ingest;
                run(
                    &mut Shared(log),
                    receiver,
                    limits,
                    &status,
                    &mut |_| Vec::new(),
                    Some(source),
                );
            })
        };
        sender.send(Job::Journal).unwrap();
        (sender, status, writer)
    }

    /// Journals messages after `last`, about 10 ms apart, for `lasting`;
    /// the widest gap between two of them.
    fn burst(ingest: &Ingest<u32>, last: &mut u128, lasting: Duration) -> Duration {
        let (mut widest, started) = (Duration::ZERO, Instant::now());
        while started.elapsed() < lasting {
            let before = Instant::now();
            std::thread::sleep(Duration::from_millis(10));
            *last += 1;
            journaled(ingest, *last);
            widest = widest.max(before.elapsed());
        }
        widest
    }

    /// Stops a [`moving_writer`] and removes its directory.
    fn finish(
        sender: std::sync::mpsc::Sender<Job>,
        writer: std::thread::JoinHandle<()>,
        dir: &std::path::Path,
    ) {
        drop(sender);
        writer.join().unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Waits until `status` shows an error (`failing`) or none, for at most 5 s.
    fn until(status: &Status, failing: bool, what: &str) {
        let waited = std::time::Instant::now();
        while status.error().is_some() != failing {
            assert!(waited.elapsed() < Duration::from_secs(5), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn ids(log: &Log) -> Vec<(Vec<u128>, Vec<Removal>)> {
        log.transactions
            .iter()
            .map(|(ids, removals)| {
                (
                    ids.iter().map(|id| id.as_u128()).collect(),
                    removals.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_burst_waits_in_the_journal_until_it_ends_and_a_delete_cuts_the_wait_short() {
        let (dir, ingest) = journal("burst");
        journaled(&ingest, 1);
        let log = Arc::new(Mutex::new(Log::default()));
        let (sender, _status, writer) = moving_writer(&log, &ingest, Limits::default());
        // Records keep arriving, about 10 ms apart, for 300 ms (six windows).
        let mut n = 1;
        let widest = burst(&ingest, &mut n, Duration::from_millis(300));
        let during = log.lock().unwrap().transactions.len();
        // A machine too loaded to keep the gaps under a window ends the burst early.
        if widest < MOVE_WINDOW * 4 / 5 {
            assert_eq!(during, 0, "moved while records kept arriving");
        }
        let waited = Instant::now();
        while log.lock().unwrap().transactions.is_empty() {
            assert!(
                waited.elapsed() < DEFER_LIMIT * 2,
                "not moved after the burst"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        if during == 0 {
            assert_eq!(ids(&log.lock().unwrap()), [((1..=n).collect(), vec![])]);
        }
        // A second burst: a delete moves what came before it at once, in its own write.
        let first = n + 1;
        for _ in 0..3 {
            n += 1;
            journaled(&ingest, n);
        }
        sender.send(Job::Journal).unwrap();
        let (done, heard) = oneshot::channel();
        sender.send(Job::Remove(vec![], Some(done))).unwrap();
        assert!(heard.blocking_recv().unwrap().is_ok());
        let log = log.lock().unwrap();
        let last = ids(&log).pop().unwrap().0;
        assert_eq!(last, (first..=n).collect::<Vec<_>>());
        drop(log);
        finish(sender, writer, &dir);
    }

    #[test]
    fn while_a_burst_waits_the_spare_is_made_once_the_file_is_half_full() {
        let (dir, ingest) = journal("spare");
        journaled(&ingest, 1);
        let log = Arc::new(Mutex::new(Log::default()));
        let (sender, _status, writer) = moving_writer(&log, &ingest, Limits::default());
        // Half the file goes to a record whose write failed (nothing to move),
        // once the writer has started (it readies the files as it starts).
        std::thread::sleep(MOVE_WINDOW / 3);
        let (half, ()) = ingest.reserve(FILE_BYTES / 2, || ()).unwrap();
        ingest.complete(half.ticket, None, |_| Vec::new());
        let widest = burst(&ingest, &mut 1, Duration::from_millis(200));
        if widest < MOVE_WINDOW * 4 / 5 && log.lock().unwrap().transactions.is_empty() {
            assert_eq!(
                journal::list(&dir).unwrap().len(),
                2,
                "no spare while deferring"
            );
        }
        finish(sender, writer, &dir);
    }

    #[test]
    fn journaled_messages_are_moved_before_the_removals_that_name_them() {
        let (dir, ingest) = journal("move");
        for n in 1..=5 {
            journaled(&ingest, n);
        }
        let (sender, receiver) = std::sync::mpsc::channel();
        sender.send(Job::Journal).unwrap();
        let gone = Removal::One(MessageId::from_u128(2));
        let (done, mut heard) = oneshot::channel();
        sender.send(Job::Remove(vec![gone], Some(done))).unwrap();
        drop(sender);
        let log = Arc::new(Mutex::new(Log::default()));
        let status = Status::default();
        let limits = Limits {
            messages: 2,
            bytes: usize::MAX,
        };
        move_all(&ingest, &log, receiver, limits, &status);
        // Beyond a transaction's bound, on their own; the removal with the last of them.
        assert_eq!(
            ids(&log.lock().unwrap()),
            [
                (vec![1, 2], vec![]),
                (vec![3, 4], vec![]),
                (vec![5], vec![gone])
            ]
        );
        assert_eq!(heard.try_recv(), Ok(Ok(())));
        // The queue is gone: the writer closed the journal and deleted its files.
        assert!(journal::list(&dir).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn journaled_messages_are_moved_within_the_byte_bound_too() {
        let (dir, ingest) = journal("bytes");
        let record = (1..=5).map(|n| journaled(&ingest, n)).max().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        sender.send(Job::Journal).unwrap();
        drop(sender);
        let log = Arc::new(Mutex::new(Log::default()));
        // Two records a transaction by bytes; the count bound is far away.
        let limits = Limits {
            messages: 1000,
            bytes: usize::try_from(2 * record).unwrap(),
        };
        move_all(&ingest, &log, receiver, limits, &Status::default());
        assert_eq!(
            ids(&log.lock().unwrap()),
            [
                (vec![1, 2], vec![]),
                (vec![3, 4], vec![]),
                (vec![5], vec![])
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_moved_ahead_of_a_failed_transaction_count_as_moved() {
        let (dir, ingest) = journal_bounded("counted", 5);
        for n in 1..=5 {
            journaled(&ingest, n);
        }
        // The first two go on their own; the next two fail once, then go.
        let log = Arc::new(Mutex::new(Log {
            fail_once_at: Some(1),
            ..Log::default()
        }));
        let limits = Limits {
            messages: 2,
            bytes: usize::MAX,
        };
        let (sender, status, writer) = moving_writer(&log, &ingest, limits);
        until(&status, true, "not reported");
        until(&status, false, "not tried again");
        assert_eq!(
            ids(&log.lock().unwrap()),
            [
                (vec![1, 2], vec![]),
                (vec![3, 4], vec![]),
                (vec![5], vec![])
            ]
        );
        // All five are in the database: the journal takes five more.
        for n in 6..=10 {
            journaled(&ingest, n);
        }
        finish(sender, writer, &dir);
    }

    #[test]
    fn a_record_that_does_not_read_back_holds_back_its_batch_until_it_does() {
        let (dir, ingest) = journal("unreadable");
        let len = (1..=3).map(|n| journaled(&ingest, n)).max().unwrap();
        let second = journal::next_offset(journal::next_offset(journal::FILE_HEADER) + len);
        let path = dir.join(journal::file_name(1));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use std::os::unix::fs::FileExt;
        let mut byte = [0u8; 1];
        let at = second + journal::RECORD_HEADER as u64 + 3;
        file.read_exact_at(&mut byte, at).unwrap();
        file.write_all_at(&[byte[0] ^ 1], at).unwrap();
        let log = Arc::new(Mutex::new(Log::default()));
        let (sender, status, writer) = moving_writer(&log, &ingest, Limits::default());
        until(&status, true, "not reported");
        assert!(status.error().unwrap().contains("does not read back"));
        // Not 1 alone, not 1 and 3: a restart moves only ids after the greatest moved.
        assert!(log.lock().unwrap().transactions.is_empty());
        file.write_all_at(&byte, at).unwrap();
        until(&status, false, "not tried again");
        assert_eq!(ids(&log.lock().unwrap()), [(vec![1, 2, 3], vec![])]);
        finish(sender, writer, &dir);
    }

    #[test]
    fn a_failed_move_is_tried_again_and_its_file_outlives_it() {
        let (dir, ingest) = journal("retry");
        journaled(&ingest, 1);
        journaled(&ingest, 2);
        let log = failing_log();
        let (sender, status, writer) = moving_writer(&log, &ingest, Limits::default());
        until(&status, true, "no write tried");
        assert_eq!(
            journal::list(&dir).unwrap().len(),
            1,
            "the file (a spare comes once it is half full)"
        );
        log.lock().unwrap().fail = false;
        until(&status, false, "not tried again");
        assert_eq!(ids(&log.lock().unwrap()), [(vec![1, 2], vec![])]);
        assert!(
            !journal::list(&dir).unwrap().is_empty(),
            "still the current file"
        );
        drop(sender);
        writer.join().unwrap();
        assert!(journal::list(&dir).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
