//! The one thread that owns the storage engine: group commit.
//!
//! SMTP sessions queue their messages (already holding their ids) and wait;
//! the writer takes everything queued while its previous commit ran, up to
//! [`Limits`], and writes it in one transaction together with the removals
//! (deletes, evictions, expiry) queued meanwhile. Only after the commit are
//! the messages handed to the core (visible to the API, waits and events)
//! and their senders answered, so a 250 always follows a commit. A failed
//! commit answers every message of its batch with the error (the session
//! replies 452 4.3.1) and inserts none; removals stay queued and are tried
//! again, so mailjar recovers by itself when writes work again.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mailjar_core::api::Removal;
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
    bytes: std::sync::atomic::AtomicU64,
}

impl Status {
    /// The storage's size on disk: after the writer's last batch once it has
    /// been idle for 2 ms, at most 100 ms old while it is busy.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records the storage's size on disk.
    pub fn set_bytes(&self, bytes: u64) {
        self.bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The error of the last write, None when it succeeded.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
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

/// How long the writer waits before it tries failed removals again.
const RETRY: Duration = Duration::from_millis(200);

/// Runs the writer until every sender of `jobs` is gone and nothing is left
/// to write. `committed` hands committed messages, in id order, to the
/// core and returns what that evicted (written in the next transaction).
pub fn run(
    storage: &mut dyn Storage,
    jobs: Receiver<Job>,
    limits: Limits,
    status: &Status,
    committed: &mut dyn FnMut(Vec<Email>) -> Vec<Removal>,
) -> Vec<oneshot::Sender<()>> {
    let mut stops = Vec::new();
    let mut removals: Vec<Removal> = Vec::new();
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
    while open || !removals.is_empty() {
        if size_stale {
            // Looked at once the writer has had no work for SIZE_IDLE, and at
            // most every SIZE_EVERY while busy: two `statx` a batch were a
            // twelfth of its time, and under load the queue runs dry between
            // most batches for a few microseconds.
            let idle_wait = if removals.is_empty() {
                SIZE_IDLE
            } else {
                Duration::ZERO
            };
            match jobs.recv_timeout(idle_wait) {
                Ok(job) => next = Some(job),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
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
        let first = if next.is_some() {
            next.take()
        } else if removals.is_empty() && reclaiming {
            match jobs.recv_timeout(RECLAIM_PAUSE) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    None
                }
            }
        } else if removals.is_empty() && settling.is_some_and(|until| Instant::now() < until) {
            // Reclaiming just ended: the checkpoint that shrinks the file runs
            // on its own thread, so look at the size again a few times.
            match jobs.recv_timeout(SIZE_EVERY) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => {
                    size_stale = true;
                    None
                }
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    None
                }
            }
        } else if removals.is_empty() {
            match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            }
        } else if status.error().is_some() {
            // Removals failed last time: try again a little later, or with the next message.
            match jobs.recv_timeout(RETRY) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    None
                }
            }
        } else {
            match jobs.try_recv() {
                Ok(job) => Some(job),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    None
                }
            }
        };
        let mut batch: Vec<Pending> = Vec::new();
        let mut acks = Vec::new();
        let mut bytes = 0usize;
        let mut take = |job: Job, batch: &mut Vec<Pending>, bytes: &mut usize| match job {
            Job::Store(pending) => {
                *bytes += pending.email.raw().len();
                batch.push(*pending);
            }
            Job::Remove(more, done) => {
                removals.extend(more);
                acks.extend(done);
            }
            Job::Stop(done) => stops.push(done),
        };
        if let Some(job) = first {
            take(job, &mut batch, &mut bytes);
        }
        // Group commit: everything queued while the last commit ran, within the limits.
        while batch.len() < limits.messages && bytes < limits.bytes {
            match jobs.try_recv() {
                Ok(job) => take(job, &mut batch, &mut bytes),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if batch.is_empty() && removals.is_empty() {
            for ack in acks {
                let _ = ack.send(Ok(()));
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
        let records: Vec<Record<'_>> = batch
            .iter()
            .map(|p| Record {
                id: p.email.id,
                received_at_ms: p.email.received_at_ms,
                envelope: &p.email.envelope,
                smtp: p.email.smtp(),
                raw: p.email.raw(),
            })
            .collect();
        let removed = !removals.is_empty();
        let written = storage.write(&records, &removals);
        drop(records);
        // /health says what the deletes hear, before they hear it.
        status.set(written.as_ref().err().map(ToString::to_string));
        for ack in acks {
            let _ = ack.send(written.clone());
        }
        match written {
            Ok(()) => {
                removals.clear();
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
        if reclaiming && status.error().is_none() && removals.is_empty() {
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
) -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (sender, jobs) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("mailjar-writer".into())
        .spawn(move || {
            let stops = run(storage.as_mut(), jobs, limits, &status, committed.as_mut());
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
    use mailjar_core::api::{Api, ApiConfig, Assigned};
    use mailjar_core::smtp::{Envelope, Incoming};

    /// Records every transaction; fails while `fail` is set.
    #[derive(Default)]
    struct Log {
        transactions: Vec<(Vec<MessageId>, Vec<Removal>)>,
        fail: bool,
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
        run(&mut storage, receiver, limits, &status, &mut |batch| {
            let removals = evict(&batch);
            inserted.push(batch.iter().map(|e| e.id).collect());
            removals
        });
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
}
