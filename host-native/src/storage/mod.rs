//! `--data-dir`: messages kept on disk, behind one narrow interface.
//!
//! The core decides (ids, what is stored, deleted, evicted, expired); this
//! module writes it down and loads it back at start. [`Storage`] is all a
//! storage engine has to do: write a batch in one transaction, load every
//! message in id order, report its size. [`sqlite::Sqlite`] is today's
//! engine; a networked one with SQLite's dialect (rqlite) could stand behind
//! the same trait. [`writer`] runs the one thread that owns the engine: it
//! moves what SMTP sessions wrote to the [`journal`] (see [`ingest`]) into
//! the database, or with `--fsync` groups everything queued during a commit
//! into the next one.

pub mod ingest;
pub mod journal;
pub mod sqlite;
pub mod writer;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mailjar_core::api::{Api, Removal};
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

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> StorageError {
        StorageError(e.to_string())
    }
}

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
        }
    }
}

/// The session facts of stored SMTP facts (all but HELO), as a loaded message carries them.
pub fn session_facts(smtp: &SmtpFacts) -> mailjar_core::smtp::SessionFacts {
    mailjar_core::smtp::SessionFacts {
        remote_addr: smtp.remote_addr.clone(),
        tls: smtp.tls.clone(),
        auth: smtp.auth.clone(),
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
        }
    }
}

/// What a storage engine does; one thread owns it.
pub trait Storage: Send {
    /// Writes these messages and removes these, in one transaction: all or nothing.
    fn write(&mut self, records: &[Record<'_>], removals: &[Removal]) -> Result<(), StorageError>;
    /// Calls `each` for every stored message in id order, in batches.
    fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<(), StorageError>;
    /// Bytes on disk.
    fn size(&self) -> u64;
    /// The greatest id ever stored, when no stored row holds it any more
    /// (deleted or evicted): ids made after a restart must sort after it.
    fn id_floor(&self) -> Option<MessageId> {
        None
    }
    /// One small step of upkeep between batches (handing free pages back to
    /// the file system); true while there is more to do.
    fn tidy(&mut self) -> bool {
        false
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

/// Debug builds only: the file named by the first of `names` that is set,
/// whose existence makes writes fail (tests of the failure path).
pub fn debug_flag(names: &[&str]) -> Option<PathBuf> {
    if !cfg!(debug_assertions) {
        return None;
    }
    names.iter().find_map(std::env::var_os).map(PathBuf::from)
}

/// Loads every stored message into the core in id order, parsing them on
/// `threads` threads while the next rows are read; applies today's limits
/// and `--max-age` at `now_ms`. Returns how many were loaded and what the
/// limits removed (to delete from disk too).
pub fn load_into<W>(
    storage: &mut dyn Storage,
    api: &mut Api<W>,
    now_ms: u64,
    threads: usize,
) -> Result<(usize, Vec<Removal>), StorageError> {
    let mut loaded = 0usize;
    let mut removals = Vec::new();
    if let Some(floor) = storage.id_floor() {
        api.resume_after(floor);
    }
    let (mut parsing, mut restoring) = (Duration::ZERO, Duration::ZERO);
    let started = Instant::now();
    // Rows are read on this thread's helper while the previous batch is parsed and stored.
    let (batches, rows) = std::sync::mpsc::sync_channel::<Vec<Loaded>>(2);
    let read = std::thread::scope(|scope| {
        let reader = scope.spawn(move || storage.load(&mut |batch| drop(batches.send(batch))));
        for batch in rows {
            let t = Instant::now();
            let emails = parse_all(batch, threads);
            parsing += t.elapsed();
            let t = Instant::now();
            for email in emails {
                api.restore(email)
                    .map_err(|e| StorageError(e.to_string()))?;
                loaded += 1;
            }
            // Evicted by today's limits: free them as they go, keep their ids.
            removals.extend(api.take_trash().removals());
            restoring += t.elapsed();
        }
        reader
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    read?;
    tracing::debug!(
        "load: {} ms in all, {} ms parsing, {} ms storing",
        started.elapsed().as_millis(),
        parsing.as_millis(),
        restoring.as_millis()
    );
    api.expire_old(now_ms);
    removals.extend(api.take_trash().removals());
    Ok((loaded, removals))
}

/// Parses loaded messages into stored ones on up to `threads` threads, keeping their order.
fn parse_all(rows: Vec<Loaded>, threads: usize) -> Vec<Email> {
    let parse = |row: Loaded| Email::new(row.id, row.received_at_ms, Prepared::new(row.incoming));
    let threads = threads.clamp(1, 16);
    if threads == 1 || rows.len() < 64 {
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

/// Opens `DIR/mailjar.db`, loads it into the core and logs what it did.
pub fn open_and_load<W>(
    options: &Options,
    api: &mut Api<W>,
    now_ms: u64,
) -> Result<sqlite::Sqlite, StorageError> {
    let started = Instant::now();
    let mut storage = sqlite::Sqlite::open(options)?;
    // What a crash left only in the journal goes into the database first.
    let after = storage.greatest_id()?;
    let recovered = journal::recover(&options.dir, &mut storage, after)?;
    if recovered.files > 0 {
        tracing::info!(
            "moved {} messages from {} journal files into {}",
            recovered.moved,
            recovered.files,
            storage.path().display()
        );
    }
    let gaps = recovered.scanned;
    if gaps.cut > 0 || gaps.unwritten > 0 {
        tracing::info!(
            "the journal held {} records cut short and {} bytes never written by a crash (never acknowledged): skipped",
            gaps.cut,
            gaps.unwritten
        );
    }
    tracing::debug!(
        "opened and checked {} in {} ms",
        storage.path().display(),
        started.elapsed().as_millis()
    );
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (read, removals) = load_into(&mut storage, api, now_ms, threads)?;
    // What today's limits keep of what was read.
    let loaded = api.store().len();
    if !removals.is_empty() {
        storage.write(&[], &removals)?;
        tracing::info!(
            "removed {} stored messages beyond today's limits (--max-messages, --max-store-bytes, --max-age)",
            read.saturating_sub(loaded)
        );
    }
    tracing::info!(
        "loaded {loaded} messages from {} in {} ms",
        options.dir.display(),
        started.elapsed().as_millis()
    );
    Ok(storage)
}

/// The most bytes the journal's files hold: what the store may hold, beyond
/// the three files of normal use (the one being written, its spare, and the
/// one being moved, each up to a message past its size). Only a database
/// that cannot be written for long fills it.
pub fn journal_max_bytes(max_store_bytes: usize, max_message_bytes: usize) -> u64 {
    let normal_use = 3 * (ingest::FILE_BYTES + max_message_bytes as u64);
    (max_store_bytes as u64).saturating_add(normal_use)
}

/// A database opened and loaded, waiting for its writer thread.
pub struct Started {
    storage: sqlite::Sqlite,
    status: std::sync::Arc<writer::Status>,
    /// The data directory.
    dir: PathBuf,
    /// Without `--fsync`: the journal file deliveries start writing to.
    journal: Option<journal::JournalFile>,
    /// Debug builds: journal writes fail while this file exists.
    fail_while: Option<PathBuf>,
    /// The most the journal's files hold (see [`ingest::Ingest::reserve`]).
    journal_max_bytes: u64,
    /// The most journaled records waiting to be moved into the database.
    journal_max_unmoved: usize,
}

/// With `--data-dir`: opens and loads the database into `api` and makes
/// `/health` report it. None without `--data-dir`.
pub fn start<W>(
    settings: &crate::Settings,
    api: &mut Api<W>,
) -> Result<Option<Started>, std::io::Error> {
    let Some(dir) = &settings.data_dir else {
        return Ok(None);
    };
    let options = Options {
        dir: dir.clone(),
        fsync: settings.fsync,
    };
    let storage =
        open_and_load(&options, api, crate::state::now_ms()).map_err(std::io::Error::other)?;
    let status = std::sync::Arc::new(writer::Status::default());
    status.set_bytes(storage.size());
    let path = storage.path().to_owned();
    let report = status.clone();
    let journal_max = (!settings.fsync)
        .then(|| journal_max_bytes(settings.max_store_bytes, settings.max_message_bytes));
    api.set_storage_report(Box::new(move || {
        let mut storage = serde_json::json!({
            "kind": "sqlite",
            "path": path.display().to_string(),
            "bytes": report.bytes(),
            "ok": true,
        });
        if let Some(max) = journal_max {
            storage["journalBytes"] = report.journal_bytes().into();
            storage["maxJournalBytes"] = max.into();
        }
        if let Some(error) = report.error() {
            storage["ok"] = false.into();
            storage["error"] = error.into();
        }
        storage
    }));
    // Without --fsync, deliveries are journaled (see `ingest`); with it, the
    // writer commits each batch with a sync before the 250s.
    let journal = if settings.fsync {
        None
    } else {
        let generation = journal::list(dir)
            .map_err(std::io::Error::other)?
            .last()
            .map_or(1, |(g, _)| g + 1);
        Some(journal::JournalFile::create(dir, generation).map_err(std::io::Error::other)?)
    };
    let fail_while = debug_flag(&[sqlite::FAULT_ENV]);
    Ok(Some(Started {
        storage,
        status,
        dir: dir.clone(),
        journal,
        fail_while,
        journal_max_bytes: journal_max.unwrap_or(u64::MAX),
        journal_max_unmoved: settings.max_messages.max(1000),
    }))
}

impl Started {
    /// Starts the writer thread and hands its queue to `shared`.
    pub fn spawn(self, shared: &std::sync::Arc<crate::state::Shared>) -> std::io::Result<()> {
        // Weak: `shared` holds the writer's queue, so a strong reference here
        // would keep both alive after the server stops, and the lock with them.
        let inserting = std::sync::Arc::downgrade(shared);
        let journal = match self.journal {
            Some(first) => {
                let ingest = std::sync::Arc::new(
                    ingest::Ingest::new(
                        self.dir.clone(),
                        first,
                        self.journal_max_bytes,
                        self.journal_max_unmoved,
                    )
                    .fail_while(self.fail_while)
                    .report_bytes_to(self.status.journal_gauge()),
                );
                shared.set_journal(ingest.clone(), self.status.clone());
                Some(ingest as std::sync::Arc<dyn ingest::JournalSource>)
            }
            None => None,
        };
        let sender = writer::spawn(
            Box::new(self.storage),
            writer::Limits::default(),
            self.status,
            Box::new(move |batch| match inserting.upgrade() {
                Some(shared) => shared.insert_committed(batch),
                None => Vec::new(),
            }),
            journal,
        )?;
        shared.set_writer(sender);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mailjar_core::api::ApiConfig;
    use mailjar_core::store::StoreLimits;

    /// A storage in memory: what was written, and whether writes fail.
    #[derive(Default)]
    pub(crate) struct Fake {
        pub rows: Vec<Loaded>,
        pub fail: bool,
        pub writes: usize,
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
                        session: super::session_facts(r.smtp),
                    },
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

        fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<(), StorageError> {
            for chunk in self.rows.chunks(100) {
                each(chunk.to_vec());
            }
            Ok(())
        }

        fn size(&self) -> u64 {
            self.rows.iter().map(|r| r.incoming.raw.len() as u64).sum()
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
            },
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
        let (loaded, removals) = load_into(&mut fake, &mut api, 2_000, 2).unwrap();
        assert_eq!(loaded, 250);
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
