//! The order in which journaled messages become visible.
//!
//! A session reserves its record's place in the journal and gets its id in
//! one step under the [`Ingest`] lock, writes the record with no lock held
//! (see [`super::journal`]), then completes: the run of written records at
//! the front of the queue is handed to the core at once, in id order, so no
//! message is ever visible before one with a smaller id, and an `afterId`
//! cursor never skips one. A session whose predecessor is still writing
//! waits for it, which is rare (the window is one `pwrite`) and costs that
//! session alone. Nothing under the lock grows with a message's size.
//!
//! The storage writer takes what became visible ([`JournalSource::take`]),
//! moves it into SQLite in large transactions, and deletes a journal file
//! once nothing in it is waiting to be written or moved.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use mailjar_core::api::Removal;
use tokio::sync::oneshot;

use super::StorageError;
use super::journal::{FILE_HEADER, JournalFile, next_offset};

/// A journal file is closed to new records once it is this long (and a spare is ready).
pub const FILE_BYTES: u64 = 32 * 1024 * 1024;

/// A record in the journal: which file, where, and how long (padding included).
#[derive(Debug, Clone)]
pub struct Span {
    /// The file it is in.
    pub file: Arc<JournalFile>,
    /// Where it starts.
    pub offset: u64,
    /// Its length in the file.
    pub len: u64,
}

/// A place reserved in the journal for one record.
#[derive(Debug)]
pub struct Reservation {
    /// Names the record when it is completed.
    pub ticket: u64,
    /// Where to write it.
    pub span: Span,
}

/// What became of a completed record.
#[derive(Debug)]
pub enum Completed {
    /// It is visible.
    Visible,
    /// It becomes visible when this fires (a record before it was still being written).
    Waiting(oneshot::Receiver<()>),
    /// Its write failed: nothing was made visible for it.
    Failed,
}

/// What the storage writer takes to move into the database.
#[derive(Debug, Default)]
pub struct Taken {
    /// Records that became visible, in id order.
    pub spans: Vec<Span>,
    /// What left the store while they became visible (evictions), after them.
    pub removals: Vec<Removal>,
    /// Journal files no longer written to, with no record still being
    /// written, and their lengths: to delete once everything taken so far
    /// has been moved (then [`JournalSource::deleted`]).
    pub retired: Vec<(Arc<JournalFile>, u64)>,
}

/// What became visible since the storage writer last took, without taking it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Records.
    pub records: usize,
    /// Their bytes in the journal.
    pub bytes: u64,
    /// When the first of them became visible.
    pub since: Option<Instant>,
    /// The journal is past a quarter of its count bound or half of its byte
    /// bound: move now (the writer looks only every window, and records keep
    /// coming meanwhile).
    pub pressed: bool,
}

/// The storage writer's side of the journal.
pub trait JournalSource: Send + Sync {
    /// Everything that became visible since the last take; the writer counts as idle after it.
    fn take(&self) -> Taken;
    /// What [`JournalSource::take`] would take, and how pressing it is.
    fn backlog(&self) -> Backlog;
    /// Readies the files records go to, with no lock held: gives the
    /// current file its space the first time (see [`JournalFile::allocate`]),
    /// and once the current file is half full, creates (and allocates) the
    /// file new records go to once it is full, if there is none and the
    /// journal's byte bound has room for it (else the current file grows).
    fn prepare_files(&self) -> Result<(), StorageError>;
    /// Refuses new records from now on (mailjar is stopping); every file is
    /// handed over for deletion once no record in it is still being written
    /// (one that is stays, and the next start moves it in).
    fn close(&self);
    /// Bytes the journal's files take on disk (each at least its allocation).
    fn bytes(&self) -> u64;
    /// A retired file of this length was deleted.
    fn deleted(&self, bytes: u64);
    /// This many taken records committed to the database.
    fn moved(&self, records: usize);
}

enum State<E> {
    Writing,
    Written(E),
    Failed,
}

struct Slot<E> {
    ticket: u64,
    span: Span,
    state: State<E>,
    waiter: Option<oneshot::Sender<()>>,
}

struct Sequence<E> {
    open: bool,
    file: Arc<JournalFile>,
    end: u64,
    spare: Option<JournalFile>,
    next_ticket: u64,
    slots: VecDeque<Slot<E>>,
    visible: Vec<Span>,
    /// The bytes of `visible`, and when its first record became visible.
    visible_bytes: u64,
    visible_since: Option<Instant>,
    removals: Vec<Removal>,
    /// Full files, and their length.
    retired: Vec<(Arc<JournalFile>, u64)>,
    /// Bytes of every journal file not yet deleted.
    bytes: u64,
    /// Records reserved and not yet moved into the database (nor failed).
    unmoved: usize,
    mover_idle: bool,
    /// The current file was given its space (the first one is given it by the writer).
    allocated: bool,
}

/// The journal's reservations and the queue of records being written.
pub struct Ingest<E> {
    sequence: Mutex<Sequence<E>>,
    /// Where spare files are created.
    dir: std::path::PathBuf,
    /// The most bytes the journal's files may hold, and the most records
    /// not yet moved: past either, records are refused until the storage
    /// writer has moved (and deleted) some.
    max_bytes: u64,
    max_unmoved: usize,
    /// Debug builds: while this file exists, journal writes fail (tests of the failure path).
    fail_while: Option<std::path::PathBuf>,
    /// Where the files' size is published, for readers that must not take the lock.
    gauge: Arc<std::sync::atomic::AtomicU64>,
    /// The space each file is given ahead of its records.
    allocation: u64,
}

impl<E> Ingest<E> {
    /// New records go to `first`; spares are created in `dir`; the files
    /// hold at most `max_bytes`, and at most `max_unmoved` records wait to
    /// be moved (see [`Ingest::reserve`]).
    pub fn new(
        dir: std::path::PathBuf,
        first: JournalFile,
        max_bytes: u64,
        max_unmoved: usize,
    ) -> Ingest<E> {
        Ingest {
            dir,
            max_bytes,
            max_unmoved,
            fail_while: None,
            gauge: Arc::default(),
            allocation: FILE_BYTES,
            sequence: Mutex::new(Sequence {
                open: true,
                file: Arc::new(first),
                end: FILE_HEADER,
                spare: None,
                next_ticket: 0,
                slots: VecDeque::new(),
                visible: Vec::new(),
                visible_bytes: 0,
                visible_since: None,
                removals: Vec::new(),
                retired: Vec::new(),
                bytes: FILE_BYTES,
                unmoved: 0,
                mover_idle: true,
                allocated: false,
            }),
        }
    }

    /// Gives each file `bytes` of space ahead of its records instead of
    /// [`FILE_BYTES`] (0: none, the file grows with its records).
    pub fn allocating(mut self, bytes: u64) -> Ingest<E> {
        self.allocation = bytes;
        let sequence = self.sequence.get_mut().unwrap_or_else(|p| p.into_inner());
        sequence.bytes = sequence.end.max(bytes);
        self
    }

    /// What a file that ends at `end` takes on disk: at least its allocation.
    fn counted(&self, end: u64) -> u64 {
        end.max(self.allocation)
    }

    /// Publishes the files' size to `gauge` from now on.
    pub fn report_bytes_to(self, gauge: Arc<std::sync::atomic::AtomicU64>) -> Ingest<E> {
        gauge.store(self.lock().bytes, std::sync::atomic::Ordering::Relaxed);
        Ingest { gauge, ..self }
    }

    /// Debug builds: journal writes fail while `flag` exists.
    pub fn fail_while(mut self, flag: Option<std::path::PathBuf>) -> Ingest<E> {
        self.fail_while = flag;
        self
    }

    /// The injected failure of a journal write, while its flag file exists.
    pub fn check_fault(&self) -> Result<(), StorageError> {
        match &self.fail_while {
            Some(flag) if flag.exists() => Err(StorageError(format!(
                "{}: attempt to write a readonly journal (debug write fault)",
                self.dir.display()
            ))),
            _ => Ok(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Sequence<E>> {
        self.sequence.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `len` bytes for a record and, under the same lock, calls
    /// `assign` (which gives the record its id): records lie in the journal
    /// in id order. Refused once the files would hold more than their bound,
    /// which only a database that cannot be written for long gets to.
    pub fn reserve<A>(
        &self,
        len: u64,
        assign: impl FnOnce() -> A,
    ) -> Result<(Reservation, A), StorageError> {
        let mut sequence = self.lock();
        if !sequence.open {
            return Err(StorageError("the storage writer has stopped".to_owned()));
        }
        if sequence.end >= FILE_BYTES
            && let Some(spare) = sequence.spare.take()
        {
            // The spare's space was counted when it was created.
            let full = std::mem::replace(&mut sequence.file, Arc::new(spare));
            let length = self.counted(sequence.end);
            sequence.retired.push((full, length));
            sequence.end = FILE_HEADER;
        }
        let offset = next_offset(sequence.end);
        let growth = self.counted(offset + len) - self.counted(sequence.end);
        if sequence.bytes.saturating_add(growth) > self.max_bytes
            || sequence.unmoved >= self.max_unmoved
        {
            return Err(StorageError(format!(
                "{}: the journal is full ({} bytes, {} messages not yet moved into the database); the database is not being written (see /health)",
                self.dir.display(),
                sequence.bytes,
                sequence.unmoved
            )));
        }
        sequence.bytes += growth;
        self.gauge
            .store(sequence.bytes, std::sync::atomic::Ordering::Relaxed);
        sequence.end = offset + len;
        let assigned = assign();
        let ticket = sequence.next_ticket;
        sequence.next_ticket += 1;
        sequence.unmoved += 1;
        let span = Span {
            file: sequence.file.clone(),
            offset,
            len,
        };
        sequence.slots.push_back(Slot {
            ticket,
            span: span.clone(),
            state: State::Writing,
            waiter: None,
        });
        Ok((Reservation { ticket, span }, assigned))
    }

    /// Records that `ticket`'s write is over: `Some` with what to make
    /// visible, `None` when it failed. Every written record at the front of
    /// the queue is handed to `publish` in id order, under the lock; what it
    /// returns (evictions) goes to the storage writer after them. The flag
    /// is true when the storage writer was idle and now has records to move:
    /// the caller wakes it.
    pub fn complete(
        &self,
        ticket: u64,
        outcome: Option<E>,
        publish: impl FnOnce(Vec<E>) -> Vec<Removal>,
    ) -> (Completed, bool) {
        let mut sequence = self.lock();
        let failed = outcome.is_none();
        // Tickets are handed out in order and leave from the front: O(1).
        let index = sequence
            .slots
            .front()
            .and_then(|front| usize::try_from(ticket.checked_sub(front.ticket)?).ok())
            .filter(|&i| sequence.slots.get(i).is_some_and(|s| s.ticket == ticket));
        let Some(index) = index else {
            return (Completed::Failed, false);
        };
        if failed {
            sequence.unmoved = sequence.unmoved.saturating_sub(1);
        }
        sequence.slots[index].state = match outcome {
            Some(e) => State::Written(e),
            None => State::Failed,
        };
        let mut ready = Vec::new();
        let mut waiters = Vec::new();
        let mut mine_done = false;
        let mut popped = 0;
        while sequence
            .slots
            .front()
            .is_some_and(|s| !matches!(s.state, State::Writing))
        {
            let Some(slot) = sequence.slots.pop_front() else {
                break;
            };
            popped += 1;
            mine_done |= slot.ticket == ticket;
            waiters.extend(slot.waiter);
            if let State::Written(e) = slot.state {
                ready.push(e);
                if sequence.visible.is_empty() {
                    sequence.visible_since = Some(Instant::now());
                }
                sequence.visible_bytes += slot.span.len;
                sequence.visible.push(slot.span);
            }
        }
        let wake_mover = !ready.is_empty() && sequence.mover_idle;
        if !ready.is_empty() {
            let removals = publish(ready);
            sequence.removals.extend(removals);
            sequence.mover_idle = false;
        }
        // Only now, once they are in the core: their sessions answer 250 when woken.
        for waiter in waiters {
            let _ = waiter.send(());
        }
        let completed = if failed {
            Completed::Failed
        } else if mine_done {
            Completed::Visible
        } else {
            let (sender, receiver) = oneshot::channel();
            // Still queued, behind a record being written (which is at the
            // front, so nothing was popped: the front is never a finished one).
            let queued = index.checked_sub(popped);
            if let Some(slot) = queued.and_then(|i| sequence.slots.get_mut(i)) {
                slot.waiter = Some(sender);
            }
            Completed::Waiting(receiver)
        };
        (completed, wake_mover)
    }
}

impl<E: Send> JournalSource for Ingest<E> {
    fn take(&self) -> Taken {
        let mut sequence = self.lock();
        sequence.mover_idle = true;
        // A file is done with once no record in it is still being written.
        let oldest_live = sequence.slots.front().map_or(
            if sequence.open {
                sequence.file.generation
            } else {
                u64::MAX
            },
            |s| s.span.file.generation,
        );
        let (retired, live): (Vec<_>, Vec<_>) = std::mem::take(&mut sequence.retired)
            .into_iter()
            .partition(|(f, _)| f.generation < oldest_live);
        sequence.retired = live;
        Taken {
            spans: {
                sequence.visible_bytes = 0;
                sequence.visible_since = None;
                std::mem::take(&mut sequence.visible)
            },
            removals: std::mem::take(&mut sequence.removals),
            retired,
        }
    }

    fn backlog(&self) -> Backlog {
        let sequence = self.lock();
        Backlog {
            records: sequence.visible.len(),
            bytes: sequence.visible_bytes,
            since: sequence.visible_since,
            pressed: sequence.unmoved.saturating_mul(4) >= self.max_unmoved
                || sequence.bytes.saturating_mul(2) >= self.max_bytes,
        }
    }

    fn prepare_files(&self) -> Result<(), StorageError> {
        let (unallocated, generation) = {
            let mut sequence = self.lock();
            if !sequence.open {
                return Ok(());
            }
            let unallocated = (!sequence.allocated).then(|| sequence.file.clone());
            sequence.allocated = true;
            let room = sequence.bytes.saturating_add(self.counted(FILE_HEADER)) <= self.max_bytes;
            let spare = (sequence.spare.is_none() && sequence.end >= FILE_BYTES / 2 && room)
                .then_some(sequence.file.generation + 1);
            (unallocated, spare)
        };
        if let Some(current) = unallocated {
            // Counted as allocated from the start: records are written meanwhile.
            current.allocate(self.allocation);
        }
        let Some(generation) = generation else {
            return Ok(());
        };
        let file = JournalFile::create(&self.dir, generation)?;
        file.allocate(self.allocation);
        let mut sequence = self.lock();
        if sequence.open && sequence.spare.is_none() && sequence.file.generation + 1 == generation {
            sequence.spare = Some(file);
            sequence.bytes += self.counted(FILE_HEADER);
            self.gauge
                .store(sequence.bytes, std::sync::atomic::Ordering::Relaxed);
        } else {
            drop(sequence);
            let _ = std::fs::remove_file(&file.path);
        }
        Ok(())
    }

    fn close(&self) {
        let mut sequence = self.lock();
        if !sequence.open {
            return;
        }
        sequence.open = false;
        let length = self.counted(sequence.end);
        let current = sequence.file.clone();
        sequence.retired.push((current, length));
        if let Some(spare) = sequence.spare.take() {
            sequence
                .retired
                .push((Arc::new(spare), self.counted(FILE_HEADER)));
        }
    }

    fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn deleted(&self, bytes: u64) {
        let mut sequence = self.lock();
        sequence.bytes = sequence.bytes.saturating_sub(bytes);
        self.gauge
            .store(sequence.bytes, std::sync::atomic::Ordering::Relaxed);
    }

    fn moved(&self, records: usize) {
        let mut sequence = self.lock();
        sequence.unmoved = sequence.unmoved.saturating_sub(records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailjar_core::id::MessageId;

    fn ingest(name: &str) -> (std::path::PathBuf, Ingest<u32>) {
        let dir =
            std::env::temp_dir().join(format!("mailjar-ingest-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = JournalFile::create(&dir, 1).unwrap();
        (
            dir.clone(),
            Ingest::new(dir, first, u64::MAX, usize::MAX).allocating(0),
        )
    }

    /// [`ingest`] with bounds.
    fn bounded(
        name: &str,
        max_bytes: u64,
        max_unmoved: usize,
    ) -> (std::path::PathBuf, Ingest<u32>) {
        let (dir, unbounded) = ingest(name);
        drop(unbounded);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = JournalFile::create(&dir, 1).unwrap();
        let ingest = Ingest::new(dir.clone(), first, max_bytes, max_unmoved).allocating(0);
        (dir, ingest)
    }

    /// Completes `ticket` with `outcome`; what became visible, and whether the writer is to be woken.
    fn complete(
        ingest: &Ingest<u32>,
        ticket: u64,
        outcome: Option<u32>,
    ) -> (Completed, Vec<u32>, bool) {
        let mut published = Vec::new();
        let (completed, wake) = ingest.complete(ticket, outcome, |ready| {
            published = ready;
            Vec::new()
        });
        (completed, published, wake)
    }

    #[test]
    fn records_become_visible_in_id_order_whatever_order_their_writes_end_in() {
        let (dir, ingest) = ingest("order");
        let mut next = 0u32;
        let mut reserve = || {
            ingest
                .reserve(100, || {
                    next += 1;
                    next
                })
                .unwrap()
        };
        let (r1, one) = reserve();
        let (r2, two) = reserve();
        let (r3, three) = reserve();
        assert_eq!((one, two, three), (1, 2, 3));
        assert!(r1.span.offset < r2.span.offset && r2.span.offset < r3.span.offset);
        assert!(r2.span.offset >= r1.span.offset + 100);
        let (c3, seen, _) = complete(&ingest, r3.ticket, Some(3));
        let Completed::Waiting(mut third) = c3 else {
            panic!("visible before 1 and 2: {c3:?}")
        };
        assert!(seen.is_empty());
        let (c2, seen, _) = complete(&ingest, r2.ticket, Some(2));
        let Completed::Waiting(mut second) = c2 else {
            panic!("{c2:?}")
        };
        assert!(seen.is_empty());
        assert!(third.try_recv().is_err(), "not visible yet");
        let mut seen = Vec::new();
        let (c1, wake) = ingest.complete(r1.ticket, Some(1), |ready| {
            // Their sessions answer 250 when woken: not before they are in the core.
            assert!(second.try_recv().is_err() && third.try_recv().is_err());
            seen = ready;
            Vec::new()
        });
        assert!(matches!(c1, Completed::Visible), "{c1:?}");
        assert_eq!(seen, [1, 2, 3], "all at once, in order");
        assert!(wake);
        assert!(second.try_recv().is_ok() && third.try_recv().is_ok());
        let taken = ingest.take();
        let offsets: Vec<u64> = taken.spans.iter().map(|s| s.offset).collect();
        assert_eq!(offsets, [r1.span.offset, r2.span.offset, r3.span.offset]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_makes_nothing_visible_and_holds_no_one_up() {
        let (dir, ingest) = ingest("failed");
        let (r1, _) = ingest.reserve(8, || ()).unwrap();
        let (r2, _) = ingest.reserve(8, || ()).unwrap();
        let (c2, seen, _) = complete(&ingest, r2.ticket, Some(2));
        let Completed::Waiting(mut second) = c2 else {
            panic!("{c2:?}")
        };
        assert!(seen.is_empty());
        let (c1, seen, wake) = complete(&ingest, r1.ticket, None);
        assert!(matches!(c1, Completed::Failed), "{c1:?}");
        assert_eq!(seen, [2]);
        assert!(wake, "the writer moves 2 even though the caller failed");
        assert!(second.try_recv().is_ok());
        assert_eq!(ingest.take().spans.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_writer_is_woken_once_until_it_takes() {
        let (dir, ingest) = ingest("wake");
        let mut wakes = Vec::new();
        for n in 0..3 {
            let (r, _) = ingest.reserve(8, || ()).unwrap();
            wakes.push(complete(&ingest, r.ticket, Some(n)).2);
        }
        assert_eq!(wakes, [true, false, false]);
        assert_eq!(ingest.take().spans.len(), 3);
        let (r, _) = ingest.reserve(8, || ()).unwrap();
        assert!(complete(&ingest, r.ticket, Some(9)).2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn evictions_follow_the_records_that_caused_them() {
        let (dir, ingest) = ingest("evict");
        let (r, _) = ingest.reserve(8, || ()).unwrap();
        let gone = Removal::One(MessageId::from_u128(1));
        ingest.complete(r.ticket, Some(1), |_| vec![gone]);
        let taken = ingest.take();
        assert_eq!(taken.spans.len(), 1);
        assert_eq!(taken.removals, [gone]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_full_file_gives_way_to_the_spare_and_is_retired_once_no_write_is_left_in_it() {
        let (dir, ingest) = ingest("files");
        // No spare yet: the full file takes more.
        let (big, _) = ingest.reserve(FILE_BYTES, || ()).unwrap();
        let (still_first, _) = ingest.reserve(8, || ()).unwrap();
        assert_eq!(still_first.span.file.generation, 1);
        ingest.prepare_files().unwrap();
        assert!(dir.join(super::super::journal::file_name(2)).exists());
        let (second, _) = ingest.reserve(8, || ()).unwrap();
        assert_eq!(second.span.file.generation, 2);
        assert_eq!(second.span.offset, FILE_HEADER);
        // Records in file 1 are still being written: it is not handed over.
        assert!(ingest.take().retired.is_empty());
        complete(&ingest, big.ticket, Some(1));
        assert!(ingest.take().retired.is_empty(), "one write left in file 1");
        complete(&ingest, still_first.ticket, Some(2));
        // File 2's write goes on; file 1 is done with.
        let taken = ingest.take();
        let retired: Vec<u64> = taken.retired.iter().map(|(f, _)| f.generation).collect();
        assert_eq!(retired, [1]);
        assert_eq!(taken.spans.len(), 1, "the first record was taken before");
        complete(&ingest, second.ticket, Some(3));
        assert!(
            ingest.take().retired.is_empty(),
            "file 2 is still the current one"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn once_closed_nothing_is_reserved_and_every_file_is_handed_over() {
        let (dir, ingest) = ingest("close");
        let (r, _) = ingest.reserve(FILE_BYTES / 2, || ()).unwrap();
        ingest.prepare_files().unwrap();
        ingest.close();
        let refused = ingest.reserve(8, || ()).unwrap_err();
        assert!(refused.0.contains("stopped"), "{refused}");
        assert!(ingest.take().retired.is_empty(), "a write is still on");
        complete(&ingest, r.ticket, Some(1));
        let taken = ingest.take();
        assert_eq!(taken.spans.len(), 1);
        let retired: Vec<u64> = taken.retired.iter().map(|(f, _)| f.generation).collect();
        assert_eq!(retired, [1, 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn past_their_bound_the_files_refuse_records_until_some_are_deleted() {
        let (dir, ingest) = bounded("bound", 1000, usize::MAX);
        ingest.reserve(500, || ()).unwrap();
        assert_eq!(ingest.bytes(), FILE_HEADER + 500);
        let refused = ingest.reserve(600, || ()).unwrap_err();
        assert!(refused.0.contains("journal is full"), "{refused}");
        // The writer moved and deleted a file.
        ingest.deleted(400);
        ingest.reserve(600, || ()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_backlog_is_what_a_take_would_take_and_presses_past_half_a_bound() {
        let (dir, ingest) = bounded("backlog", u64::MAX, 8);
        assert_eq!(ingest.backlog().records, 0);
        assert_eq!(ingest.backlog().since, None);
        for n in 0..2 {
            let (r, _) = ingest.reserve(100, || ()).unwrap();
            complete(&ingest, r.ticket, Some(n));
            assert_eq!(ingest.backlog().pressed, n == 1, "a quarter of 8 is 2");
        }
        let backlog = ingest.backlog();
        assert_eq!((backlog.records, backlog.bytes), (2, 200));
        assert!(backlog.since.is_some());
        assert_eq!(ingest.take().spans.len(), 2);
        assert_eq!(ingest.backlog().records, 0);
        assert!(ingest.backlog().pressed, "taken is not moved");
        ingest.moved(2);
        assert!(!ingest.backlog().pressed);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_spare_is_created_where_the_byte_bound_has_no_room_for_it() {
        let (dir, ingest) = bounded("room", FILE_BYTES / 2 + 20, usize::MAX);
        ingest.reserve(FILE_BYTES / 2, || ()).unwrap();
        ingest.prepare_files().unwrap();
        assert_eq!(journal_count(&dir), 1, "its header would pass the bound");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn journal_count(dir: &std::path::Path) -> usize {
        super::super::journal::list(dir).unwrap().len()
    }

    #[test]
    fn files_count_their_allocation_from_the_start_and_what_outgrows_it() {
        let (dir, ingest) = ingest("allocation");
        let ingest = ingest.allocating(4096);
        assert_eq!(
            ingest.bytes(),
            4096,
            "the first file, allocated by the writer"
        );
        let (r, _) = ingest.reserve(1000, || ()).unwrap();
        assert_eq!(ingest.bytes(), 4096, "within its allocation");
        ingest.prepare_files().unwrap();
        if cfg!(target_os = "linux") {
            let first = std::fs::metadata(&r.span.file.path).unwrap();
            assert_eq!(
                first.len(),
                4096,
                "allocated while a record is reserved in it"
            );
        }
        assert_eq!(
            ingest.bytes(),
            4096,
            "no spare while the file is not half full"
        );
        let (r2, _) = ingest.reserve(FILE_BYTES / 2, || ()).unwrap();
        let outgrown = next_offset(r.span.offset + 1000) + FILE_BYTES / 2;
        assert_eq!(ingest.bytes(), outgrown);
        ingest.prepare_files().unwrap();
        assert_eq!(ingest.bytes(), outgrown + 4096, "and the spare");
        complete(&ingest, r.ticket, Some(1));
        complete(&ingest, r2.ticket, Some(2));
        ingest.close();
        let retired: Vec<u64> = ingest.take().retired.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            retired,
            [outgrown, 4096],
            "what the writer subtracts as it deletes them"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn past_their_count_bound_records_are_refused_until_some_are_moved() {
        let (dir, ingest) = bounded("count", u64::MAX, 2);
        let (a, _) = ingest.reserve(8, || ()).unwrap();
        let (b, _) = ingest.reserve(8, || ()).unwrap();
        let refused = ingest.reserve(8, || ()).unwrap_err();
        assert!(refused.0.contains("2 messages not yet moved"), "{refused}");
        // A failed write frees its place; a moved record frees its own.
        complete(&ingest, a.ticket, None);
        let (c, _) = ingest.reserve(8, || ()).unwrap();
        complete(&ingest, b.ticket, Some(2));
        complete(&ingest, c.ticket, Some(3));
        assert!(ingest.reserve(8, || ()).is_err());
        assert_eq!(ingest.take().spans.len(), 2);
        ingest.moved(2);
        ingest.reserve(8, || ()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
