//! `--data-dir`: messages kept on disk, behind one narrow interface.
//!
//! The core decides (ids, what is stored, deleted, evicted, expired); this
//! module writes it down and loads it back at start. [`Storage`] is all a
//! storage engine does: write a batch of deliveries and removals in one
//! transaction and say whether it committed, load every message in id order,
//! report its size and what `/health` shows of it. `sqlite` is today's engine
//! (`DIR/mailjar.db`); an engine for several nodes (PostgreSQL) implements the
//! same trait. [`writer`] is the one thread that owns the engine and groups
//! what SMTP sessions queue into transactions. `upgrade` moves the ingest
//! journal that older versions kept beside the database into it, at start.

pub mod postgres;
mod sqlite;
mod upgrade;
pub mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mailjar_core::api::{Api, Change, FaultRecord, InboxRecord, Output, Removal, Scope};
use mailjar_core::id::MessageId;
use mailjar_core::smtp::{Envelope, Incoming, SmtpFacts};
use mailjar_core::store::{Email, Prepared};

/// A storage failure, with a message for the log, `/health` and the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageError(pub String);

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StorageError {}

/// One message to write: its id, receive time, envelope and exact bytes.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The id the core assigned.
    pub id: MessageId,
    /// When it was received, in milliseconds since the Unix epoch.
    pub received_at_ms: u64,
    /// MAIL FROM and RCPT TO.
    pub envelope: &'a Envelope,
    /// What the session saw: HELO, the client's address, TLS and AUTH.
    pub smtp: &'a SmtpFacts,
    /// The message exactly as received.
    pub raw: &'a [u8],
    /// The session's SMTP transcript (`Transcript::as_bytes`), empty when none was kept.
    pub transcript: &'a [u8],
    /// Its UID ([`Email::uid`]); 0 lets the engine number it after every earlier one.
    pub uid: u32,
}

impl<'a> Record<'a> {
    /// The record of a stored (or about to be stored) message.
    pub fn of(email: &'a Email) -> Record<'a> {
        Record {
            id: email.id,
            received_at_ms: email.received_at_ms,
            envelope: &email.envelope,
            smtp: email.smtp(),
            raw: email.raw(),
            transcript: email.transcript().as_bytes(),
            uid: email.uid(),
        }
    }
}

/// One message as it was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// Its id.
    pub id: MessageId,
    /// When it was received, in milliseconds since the Unix epoch.
    pub received_at_ms: u64,
    /// The message as the SMTP session handed it over.
    pub incoming: Incoming,
    /// Its UID, as the engine numbered it ([`Email::uid`]).
    pub uid: u32,
    /// Whether a reader had seen it.
    pub seen: bool,
}

impl Loaded {
    /// Its SMTP facts: its HELO beside its session's.
    pub fn smtp_facts(&self) -> SmtpFacts {
        SmtpFacts::new(self.incoming.helo.clone(), self.incoming.session.clone())
    }

    /// The record to write for it; `smtp` is its [`Loaded::smtp_facts`].
    pub fn record<'a>(&'a self, smtp: &'a SmtpFacts) -> Record<'a> {
        Record {
            id: self.id,
            received_at_ms: self.received_at_ms,
            envelope: &self.incoming.envelope,
            smtp,
            raw: &self.incoming.raw,
            transcript: self.incoming.transcript.as_bytes(),
            uid: self.uid,
        }
    }
}

/// What [`Storage::load`] found besides the messages it handed over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadReport {
    /// Stored messages that are damaged (a checksum that does not match, a
    /// field that does not decode): never handed over, each logged by its id
    /// and kept aside by the engine.
    pub damaged: u64,
}

/// What a [`Storage::catch_up`] fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Only what other nodes committed before the batch just written (its
    /// messages go into the core right after).
    Gap,
    /// Everything other nodes committed or removed since the last catch-up.
    All,
    /// What [`CatchUp::All`] fetches, unless this node holds this id
    /// already: other nodes committed messages up to it, and nothing else.
    Past(MessageId),
}

/// What other nodes did that this node has not applied yet.
#[derive(Debug, Default)]
pub struct Remote {
    /// Messages they committed, in id order.
    pub rows: Vec<Loaded>,
    /// What they removed (deleted, evicted, expired).
    pub removed: Vec<Removal>,
    /// What they changed of the inboxes (applied before the rows).
    pub inboxes: Vec<Change<InboxRecord>>,
    /// What they changed of the fault rules.
    pub faults: Vec<Change<FaultRecord>>,
    /// The seen flags readers on other nodes set (applied after the rows, never written back).
    pub seen: Vec<(MessageId, bool)>,
    /// There is more: ask again.
    pub more: bool,
}

/// What a storage engine does; one thread (the [`writer`]) owns it.
pub trait Storage: Send {
    /// Writes these messages, then removes these, in one transaction: all or
    /// nothing, and `Ok` once it has committed.
    fn write(&mut self, records: &[Record<'_>], removals: &[Removal]) -> Result<(), StorageError>;
    /// Calls `each` for every stored message in id order, in batches, at start.
    fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<LoadReport, StorageError>;
    /// Bytes on disk.
    fn size(&self) -> u64;
    /// What `/health` shows of it beside `bytes`, `ok`, `error` and
    /// `damaged`: its `kind` and where it keeps the messages.
    fn describe(&self) -> serde_json::Map<String, serde_json::Value>;
    /// The greatest id ever stored, when no stored row holds it any more
    /// (deleted or evicted): ids made after a restart must sort after it.
    fn id_floor(&self) -> Option<MessageId> {
        None
    }
    /// The greatest UID ever given (its message may be gone): UIDs given
    /// after a restart are greater. 0 for none.
    fn uid_floor(&self) -> u32 {
        0
    }
    /// The UIDVALIDITY kept with the messages since the storage was created;
    /// None for an engine that keeps none (the host picks one at each start).
    fn uid_validity(&self) -> Option<u32> {
        None
    }
    /// Replaces the stored inboxes (names, patterns, quotas, credential digests) with these.
    fn save_inboxes(&mut self, records: &[InboxRecord]) -> Result<(), StorageError> {
        let _ = records;
        Ok(())
    }
    /// Writes readers' seen flags of stored messages (a message no longer
    /// stored is skipped); an engine that keeps none ignores them.
    fn set_seen(&mut self, changes: &[(MessageId, bool)]) -> Result<(), StorageError> {
        let _ = changes;
        Ok(())
    }
    /// Writes the fault rules (an engine that several nodes share; others keep them in memory).
    fn save_faults(&mut self, records: &[FaultRecord]) -> Result<(), StorageError> {
        let _ = records;
        Ok(())
    }
    /// The stored inboxes, in creation order, at start.
    fn load_inboxes(&mut self) -> Result<Vec<InboxRecord>, StorageError> {
        Ok(Vec::new())
    }
    /// One small step of upkeep between batches (handing free pages back to
    /// the file system); true while there is more to do.
    fn tidy(&mut self) -> bool {
        false
    }
    /// [`Storage::write`] of these messages, which the engine may give later
    /// ids and receive times first (a database shared by several nodes
    /// orders them after every message already committed): the senders
    /// hear, and the core stores, the ids they have after it.
    fn write_emails(
        &mut self,
        emails: &mut [&mut Email],
        removals: &[Removal],
    ) -> Result<(), StorageError> {
        let records: Vec<Record<'_>> = emails.iter().map(|e| Record::of(e)).collect();
        self.write(&records, removals)
    }
    /// What other nodes did that this node's core has not applied yet, a
    /// batch at a time; nothing for an engine that only this node writes.
    fn catch_up(&mut self, mode: CatchUp) -> Result<Remote, StorageError> {
        let _ = mode;
        Ok(Remote::default())
    }
}

/// What `--data-dir` and `--fsync` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The data directory.
    pub dir: PathBuf,
    /// `synchronous = FULL`: survive a power cut, not only a crash.
    pub fsync: bool,
}

/// What [`load_into`] did.
#[derive(Debug, Default)]
struct Load {
    /// Messages read from the storage.
    read: usize,
    /// What today's limits removed of them (to delete from disk too).
    removals: Vec<Removal>,
    /// Damaged messages the storage did not hand over.
    damaged: u64,
}

/// Loads every stored message into the core in id order, parsing them on
/// `threads` threads while the next rows are read; applies today's limits
/// and `--max-age` at `now_ms`.
fn load_into<W>(
    storage: &mut dyn Storage,
    api: &mut Api<W>,
    now_ms: u64,
    threads: usize,
) -> Result<Load, StorageError> {
    let mut load = Load::default();
    if let Some(floor) = storage.id_floor() {
        api.resume_after(floor);
    }
    let (mut parsing, mut restoring) = (Duration::ZERO, Duration::ZERO);
    let started = Instant::now();
    // Rows are read on this thread's helper while the previous batch is parsed and stored.
    let (batches, rows) = std::sync::mpsc::sync_channel::<Vec<Loaded>>(2);
    let report = std::thread::scope(|scope| {
        let source = &mut *storage;
        let reader = scope.spawn(move || source.load(&mut |batch| drop(batches.send(batch))));
        for batch in rows {
            let t = Instant::now();
            let emails = parse_all(batch, threads);
            parsing += t.elapsed();
            let t = Instant::now();
            for (email, seen) in emails {
                let id = email.id;
                api.restore(email)
                    .map_err(|e| StorageError(e.to_string()))?;
                if seen {
                    api.set_seen(Scope::All, id, true);
                }
                load.read += 1;
            }
            // Evicted by today's limits: free them as they go, keep their ids.
            load.removals.extend(removals(api));
            restoring += t.elapsed();
        }
        reader
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })?;
    load.damaged = report.damaged;
    tracing::debug!(
        "load: {} ms in all, {} ms parsing, {} ms storing",
        started.elapsed().as_millis(),
        parsing.as_millis(),
        restoring.as_millis()
    );
    // Read by the load (a shared database's head).
    api.resume_uid_after(storage.uid_floor());
    if let Some(uid_validity) = storage.uid_validity() {
        api.set_uid_validity(uid_validity);
    }
    api.handle_timeout(now_ms);
    load.removals.extend(removals(api));
    Ok(load)
}

/// Fewer rows than this are parsed on the calling thread alone.
const PARALLEL_ROWS: usize = 64;

/// Parses loaded messages into stored ones (with whether they were seen)
/// on up to `threads` threads, keeping their order.
fn parse_all(rows: Vec<Loaded>, threads: usize) -> Vec<(Email, bool)> {
    let parse = |row: Loaded| {
        let mut email = Email::new(row.id, row.received_at_ms, Prepared::new(row.incoming));
        email.set_uid(row.uid);
        (email, row.seen)
    };
    let threads = threads.clamp(1, 16);
    if threads == 1 || rows.len() < PARALLEL_ROWS {
        return rows.into_iter().map(parse).collect();
    }
    let per = rows.len().div_ceil(threads);
    let mut chunks: Vec<Vec<Loaded>> = Vec::new();
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        chunks.push(rows.by_ref().take(per).collect());
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(parse).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Starts what tells the writer that other nodes committed (it holds a sender of its queue).
type Listen = Box<dyn FnOnce(std::sync::mpsc::Sender<writer::Job>) -> std::io::Result<()> + Send>;

/// The storage opened and loaded, waiting for its writer thread.
pub struct Opened {
    storage: Box<dyn Storage>,
    status: Arc<writer::Status>,
    /// With a shared database: the listener to start beside the writer.
    listen: Option<Listen>,
}

/// Opens `DIR/mailjar.db`, moves an older version's journal into it, loads
/// it into `api` (applying today's limits and `--max-age` at `now_ms`), has
/// `/health` report it, and logs what it did.
pub fn open<W>(options: &Options, api: &mut Api<W>, now_ms: u64) -> Result<Opened, StorageError> {
    let started = Instant::now();
    let mut storage = sqlite::Sqlite::open(options)?;
    let after = storage.greatest_id()?;
    let moved = upgrade::move_into(&options.dir, &mut storage, after)?;
    if moved.files > 0 {
        tracing::info!(
            "moved {} messages from {} journal files of an older mailjar into {}, and deleted the files",
            moved.messages,
            moved.files,
            storage.path().display()
        );
    }
    let gaps = moved.scanned;
    if gaps.cut > 0 || gaps.unwritten > 0 {
        tracing::info!(
            "the journal held {} records cut short and {} bytes never written by a crash (never acknowledged): skipped",
            gaps.cut,
            gaps.unwritten
        );
    }
    restore_inboxes(&mut storage, api)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = load_into(&mut storage, api, now_ms, threads)?;
    // What today's limits keep of what was read.
    let kept = api.store().len();
    if !load.removals.is_empty() {
        storage.write(&[], &load.removals)?;
        tracing::info!(
            "removed {} stored messages beyond today's limits (--max-messages, --max-store-bytes, --max-age)",
            load.read.saturating_sub(kept)
        );
    }
    tracing::info!(
        "loaded {kept} messages from {} in {} ms",
        options.dir.display(),
        started.elapsed().as_millis()
    );
    let status = Arc::new(writer::Status::default());
    status.set_bytes(storage.size());
    report(api, &storage, status.clone(), load.damaged);
    Ok(Opened {
        storage: Box::new(storage),
        status,
        listen: None,
    })
}

/// Brings back the stored inboxes before the messages (which are routed to
/// them again as they are restored). Without access control they stay on
/// disk, unused.
fn restore_inboxes<W>(storage: &mut dyn Storage, api: &mut Api<W>) -> Result<(), StorageError> {
    let records = storage.load_inboxes()?;
    if records.is_empty() {
        return Ok(());
    }
    if !api.inboxes().access_control() {
        tracing::info!(
            "{} inboxes are kept on disk, unused without --admin-token",
            records.len()
        );
        return Ok(());
    }
    let count = records.len();
    for record in records {
        let name = record.name.clone();
        api.restore_inbox(record)
            .map_err(|e| StorageError(format!("the stored inbox {name:?}: {e}")))?;
    }
    tracing::info!("restored {count} inboxes");
    Ok(())
}

/// Has `/health` report `storage`: what it describes of itself, its size,
/// whether the last write committed, and the damaged messages it kept aside.
fn report<W>(api: &mut Api<W>, storage: &dyn Storage, status: Arc<writer::Status>, damaged: u64) {
    let described = storage.describe();
    api.set_storage_report(Box::new(move || {
        let mut report = described.clone();
        report.insert("bytes".into(), status.bytes().into());
        report.insert("damaged".into(), damaged.into());
        let error = status.error();
        report.insert("ok".into(), error.is_none().into());
        if let Some(error) = error {
            report.insert("error".into(), error.into());
        }
        report.into()
    }));
}

impl Opened {
    /// Whether several nodes share it (a failed write is then an outage of
    /// the database, answered `451 4.3.0`, rather than a full local disk).
    pub fn shared(&self) -> bool {
        self.listen.is_some()
    }

    /// Starts the writer thread, which owns the storage from now on, and,
    /// with a shared database, its listener; `hooks` hand what it commits
    /// and what other nodes did to the core. The sender queues its jobs.
    pub fn spawn(
        self,
        hooks: writer::Hooks,
    ) -> std::io::Result<std::sync::mpsc::Sender<writer::Job>> {
        let sender = writer::spawn(self.storage, writer::Limits::default(), self.status, hooks)?;
        if let Some(listen) = self.listen {
            listen(sender.clone())?;
        }
        Ok(sender)
    }
}

/// What left the store in the core's last inputs, as the disk names it (the
/// other outputs are none at start: no request has come yet).
fn removals<W>(api: &mut Api<W>) -> Vec<Removal> {
    let mut removals = Vec::new();
    while let Some(output) = api.poll_output() {
        if let Output::Removed(removed) = output {
            removals.extend(removed.trash.removals());
        }
    }
    removals
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mailjar_core::api::ApiConfig;
    use mailjar_core::smtp::Transcript;
    use mailjar_core::store::StoreLimits;

    /// A storage in memory: what was written, and whether writes fail.
    #[derive(Default)]
    pub(crate) struct Fake {
        pub rows: Vec<Loaded>,
        pub fail: bool,
        pub writes: usize,
    }

    /// The session facts of stored SMTP facts (all but HELO), as a loaded message carries them.
    pub(crate) fn session_facts(smtp: &SmtpFacts) -> mailjar_core::smtp::SessionFacts {
        mailjar_core::smtp::SessionFacts {
            remote_addr: smtp.remote_addr.clone(),
            tls: smtp.tls.clone(),
            auth: smtp.auth.clone(),
        }
    }

    impl Storage for Fake {
        fn write(
            &mut self,
            records: &[Record<'_>],
            removals: &[Removal],
        ) -> Result<(), StorageError> {
            if self.fail {
                return Err(StorageError("disk full".into()));
            }
            self.writes += 1;
            for r in records {
                self.rows.push(Loaded {
                    id: r.id,
                    received_at_ms: r.received_at_ms,
                    incoming: Incoming {
                        envelope: r.envelope.clone(),
                        raw: r.raw.to_vec(),
                        helo: r.smtp.helo.clone(),
                        session: session_facts(r.smtp),
                        transcript: Transcript::from_bytes(r.transcript).unwrap_or_default(),
                    },
                    uid: r.uid,
                    seen: false,
                });
            }
            for removal in removals {
                self.rows.retain(|row| match *removal {
                    Removal::One(id) => row.id != id,
                    Removal::Range { first, last } => row.id < first || row.id > last,
                });
            }
            Ok(())
        }

        fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<LoadReport, StorageError> {
            for chunk in self.rows.chunks(100) {
                each(chunk.to_vec());
            }
            Ok(LoadReport::default())
        }

        fn size(&self) -> u64 {
            self.rows.iter().map(|r| r.incoming.raw.len() as u64).sum()
        }

        fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
            serde_json::Map::from_iter([("kind".to_owned(), "fake".into())])
        }
    }

    fn row(api: &mut Api<()>, i: u64) -> Loaded {
        let assigned = api.assign(1_000 + i, [0; 10]);
        Loaded {
            id: assigned.id,
            received_at_ms: assigned.received_at_ms,
            incoming: Incoming {
                envelope: Envelope {
                    from: "s@x.test".into(),
                    to: vec!["a@x.test".into()],
                },
                raw: format!("Subject: {i}\r\n\r\n\u{e9}\r\n").into_bytes(),
                helo: None,
                session: Default::default(),
                transcript: Default::default(),
            },
            uid: i as u32 + 1,
            seen: false,
        }
    }

    #[test]
    fn loading_keeps_order_applies_limits_and_reports_what_to_remove() {
        let mut source = Api::<()>::new(ApiConfig::default());
        let mut fake = Fake {
            rows: (0..250).map(|i| row(&mut source, i)).collect(),
            ..Fake::default()
        };
        let mut api = Api::<()>::new(ApiConfig {
            store: StoreLimits {
                max_messages: 200,
                max_bytes: usize::MAX,
            },
            ..ApiConfig::default()
        });
        let Load { read, removals, .. } = load_into(&mut fake, &mut api, 2_000, 2).unwrap();
        assert_eq!(read, 250);
        assert_eq!(api.store().len(), 200);
        let expected: Vec<_> = fake.rows[..50].iter().map(|r| Removal::One(r.id)).collect();
        assert_eq!(removals, expected);
        let ids: Vec<_> = api.store().snapshot().iter().map(|e| e.id).collect();
        let stored: Vec<_> = fake.rows[50..].iter().map(|r| r.id).collect();
        assert_eq!(ids, stored);
        let last = api.store().snapshot().iter().last().unwrap().clone();
        assert_eq!(last.raw(), fake.rows[249].incoming.raw.as_slice());
        assert_eq!(last.subject(), "249");
        // New ids follow the loaded ones even with the clock at 0.
        assert!(api.assign(0, [0; 10]).id > *stored.last().unwrap());
    }

    #[test]
    fn loading_out_of_order_is_an_error() {
        let mut source = Api::<()>::new(ApiConfig::default());
        let mut rows: Vec<_> = (0..3).map(|i| row(&mut source, i)).collect();
        rows.swap(0, 2);
        let mut fake = Fake {
            rows,
            ..Fake::default()
        };
        let mut api = Api::<()>::new(ApiConfig::default());
        assert!(load_into(&mut fake, &mut api, 2_000, 1).is_err());
    }
}
