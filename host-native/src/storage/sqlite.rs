//! The SQLite engine behind `--data-dir`: `DIR/mailjar.db`, WAL (through the
//! `unix-excl` VFS: the file is this process's alone), 16 KiB pages,
//! incremental auto-vacuum, guarded by an advisory lock on `DIR/mailjar.lock`.
//!
//! At open it refuses, naming the file and leaving it untouched, a file that
//! is not a database, one written by a newer schema, and one that fails
//! SQLite's `quick_check`. Those checks run on a read-only connection
//! before anything is written.
//!
//! Rows are found by their `seq` (the rowid), never by `id`: the engine keeps
//! each stored id's `seq` in memory, so the table has no index on `id`, and a
//! commit of a few messages writes about half the pages it would with one
//! (measured: a third less CPU and half the wall time a message).
//!
//! Each row holds a CRC-32 of its fields (raw bytes, envelope, SMTP facts, id
//! and time; [`Fields::checksum`]), checked at load: a row whose bytes changed
//! on disk (a flipped bit, a torn or misdirected write) is not served. It is
//! logged by its id and moved, as it is, to the table `damaged`, which
//! `/health` counts (`storage.damaged`) until someone empties it. A CRC, not
//! a cryptographic hash: it guards against damage, not against someone who
//! can write the file (and could rewrite the checksum); it catches every
//! change of up to 32 adjacent bits and all but one in 2^32 others, and with
//! the CPU's carry-less multiply it costs far less than the parse every
//! message gets at load.

mod checkpointer;
mod inboxes;
mod row;
mod schema;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use mailjar_core::api::{InboxRecord, Removal};
use mailjar_core::id::MessageId;
use mailjar_core::store::Email;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::{LoadReport, Loaded, Options, Record, Storage, StorageError};
use checkpointer::Checkpointer;
use row::{COLUMNS, Damage, Fields, INSERT, id_bytes, id_of};
use schema::{PAGE_SIZE, beside, check_leaving_no_trace, configure, migrate};

/// How many free pages one upkeep step gives back to the file system.
const VACUUM_STEP_PAGES: i64 = 64;

/// Rows read back per batch at load, at most.
const LOAD_BATCH: usize = 4096;

/// Raw bytes read back per batch at load, at most (a larger message goes alone):
/// with the batch being parsed and two queued, loading holds at most about 4 of these beyond the store.
const LOAD_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// A checkpoint waits for the disk twice: on the writer's connection every
/// sender would wait behind it (measured: a quarter of the ingest rate), so
/// the [`Checkpointer`] copies the log into the database on its own
/// connection, started after about this many bytes were logged.
const CHECKPOINT_EVERY_BYTES: usize = 16 * 1024 * 1024;

/// What one commit logs beside its messages, about (the pages of the tree it touched).
const COMMIT_OVERHEAD_BYTES: usize = 3 * PAGE_SIZE as usize;

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> StorageError {
        StorageError(e.to_string())
    }
}

/// `DIR/mailjar.db`, open for writing, and the lock that keeps it ours.
pub struct Sqlite {
    connection: Connection,
    /// Copies the log into the database off the writer's thread. Closed
    /// after `connection` and before the lock is let go (fields drop in order).
    checkpointer: Checkpointer,
    path: PathBuf,
    /// Held for the life of the process: a second mailjar on the directory is refused.
    _lock: File,
    /// Debug builds only: while this file exists, writes fail (tests of the failure path).
    fail_while: Option<PathBuf>,
    /// The row (`seq`) of each stored message, by id; filled at load.
    rows: BTreeMap<MessageId, i64>,
    /// The `seq` the next message gets.
    next_seq: i64,
    /// Bytes logged, about, since the checkpointer was last woken.
    logged: usize,
    /// The greatest id ever stored, once no row holds it (`meta.id_floor`).
    id_floor: Option<MessageId>,
    /// The greatest UID ever given: its row's, or `meta.uid_floor` once no row holds it.
    last_uid: u32,
    /// The store's UIDVALIDITY (`meta.uid_validity`), set when the file was created.
    uid_validity: u32,
    /// Rows in the table `damaged` at open.
    damaged: u64,
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqlite").field("path", &self.path).finish()
    }
}

/// The environment variable naming a file whose existence makes writes fail; honoured only in debug builds.
const FAULT_ENV: &str = "MAILJAR_DEBUG_FAIL_WRITES_WHILE";

fn error(path: &Path, what: impl std::fmt::Display) -> StorageError {
    StorageError(format!("{}: {what}", path.display()))
}

/// Takes the advisory lock on `DIR/mailjar.lock` (creating `DIR`), or says who holds the directory.
fn lock(dir: &Path) -> Result<File, StorageError> {
    if dir.exists() && !dir.is_dir() {
        return Err(error(
            dir,
            "is not a directory (--data-dir names a directory)",
        ));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| error(dir, format!("cannot create the data directory: {e}")))?;
    let path = dir.join("mailjar.lock");
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| error(&path, format!("cannot open the lock file: {e}")))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError(format!(
            "another mailjar is using the data directory {} (it holds {}); stop it or choose another --data-dir",
            dir.display(),
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(error(&path, format!("cannot lock the data directory: {e}")))
        }
    }
}

/// What a write changes: the rows it adds (id, seq) and their UIDs, the
/// ranges of `seq` it deletes, and the id that becomes the floor if it
/// removes the newest row (with the greatest UID given, which becomes the UIDs' floor).
struct Plan {
    added: Vec<(MessageId, i64)>,
    uids: Vec<u32>,
    gone: Vec<(i64, i64)>,
    floor: Option<MessageId>,
    last_uid: u32,
}

impl Sqlite {
    /// Locks `DIR` (creating it), checks and opens `DIR/mailjar.db`, and migrates it to this schema.
    pub fn open(options: &Options) -> Result<Sqlite, StorageError> {
        let lock = lock(&options.dir)?;
        let path = options.dir.join("mailjar.db");
        let version = check_leaving_no_trace(&path)?;
        let mut connection = open_exclusive(&path)?;
        let synchronous = configure(&connection, &path, version == 0, options.fsync)?;
        connection.set_prepared_statement_cache_capacity(16);
        migrate(&mut connection, &path, version)?;
        let id_floor = connection
            .query_row("SELECT value FROM meta WHERE key = 'id_floor'", [], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .optional()
            .map_err(|e| error(&path, e))?
            .map(|bytes| {
                id_of(&bytes).ok_or_else(|| error(&path, "meta.id_floor is not a 16-byte id"))
            })
            .transpose()?;
        let (next_seq, damaged) = connection
            .query_row(
                "SELECT (SELECT coalesce(max(seq), 0) + 1 FROM messages), (SELECT count(*) FROM damaged)",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .map_err(|e| error(&path, e))?;
        let (last_uid, uid_validity) = read_uids(&connection).map_err(|e| error(&path, e))?;
        let fail_while = cfg!(debug_assertions)
            .then(|| std::env::var_os(FAULT_ENV).map(PathBuf::from))
            .flatten();
        Ok(Sqlite {
            checkpointer: Checkpointer::start(&path, synchronous)?,
            connection,
            path,
            _lock: lock,
            fail_while,
            rows: BTreeMap::new(),
            next_seq,
            logged: 0,
            id_floor,
            last_uid,
            uid_validity,
            damaged: u64::try_from(damaged).unwrap_or(0),
        })
    }

    /// The greatest id the database ever held: its newest row's, or the
    /// floor a removed newer one left.
    pub fn greatest_id(&self) -> Result<Option<MessageId>, StorageError> {
        let newest = self
            .connection
            .query_row(
                "SELECT id FROM messages ORDER BY seq DESC LIMIT 1",
                [],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .optional()
            .map_err(|e| error(&self.path, e))?
            .map(|bytes| {
                id_of(&bytes).ok_or_else(|| error(&self.path, "a stored id is not 16 bytes"))
            })
            .transpose()?;
        Ok(newest.max(self.id_floor))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Debug builds: while the fault file exists the connection is read-only,
    /// so writes fail inside SQLite as they would on a read-only file.
    fn apply_fault(&self) -> Result<(), StorageError> {
        if let Some(flag) = &self.fail_while {
            let on = flag.exists();
            self.connection
                .pragma_update(None, "query_only", on)
                .map_err(StorageError::from)?;
        }
        Ok(())
    }

    /// The rows `records` add and the ranges `removals` delete, stored rows
    /// and the batch's own alike (`seq` follows id order).
    fn plan(&self, records: &[Record<'_>], removals: &[Removal]) -> Plan {
        let added: Vec<(MessageId, i64)> = records
            .iter()
            .zip(self.next_seq..)
            .map(|(r, seq)| (r.id, seq))
            .collect();
        // A record's own UID when it is above every earlier one, else the next.
        let mut last_uid = self.last_uid;
        let uids: Vec<u32> = records
            .iter()
            .map(|r| {
                last_uid = if r.uid > last_uid {
                    r.uid
                } else {
                    last_uid.saturating_add(1)
                };
                last_uid
            })
            .collect();
        let find = |id: &MessageId| {
            self.rows
                .get(id)
                .or_else(|| added.iter().find(|(a, _)| a == id).map(|(_, seq)| seq))
                .copied()
        };
        let mut gone: Vec<(i64, i64)> = Vec::with_capacity(removals.len());
        for removal in removals {
            match *removal {
                Removal::One(id) => gone.extend(find(&id).map(|seq| (seq, seq))),
                Removal::Range { first, last } => {
                    let in_batch = added.iter().filter(|(id, _)| (first..=last).contains(id));
                    let (low, high) = self
                        .rows
                        .range(first..=last)
                        .chain(in_batch.map(|(id, seq)| (id, seq)))
                        .fold((i64::MAX, i64::MIN), |(low, high), (_, &seq)| {
                            (low.min(seq), high.max(seq))
                        });
                    if low <= high {
                        gone.push((low, high));
                    }
                }
            }
        }
        // The newest row after the inserts; if this write removes it too, its
        // id becomes the floor new ids must sort after, across a restart.
        let newest = added
            .last()
            .copied()
            .or_else(|| self.rows.last_key_value().map(|(id, seq)| (*id, *seq)));
        let floor = newest
            .filter(|(_, seq)| gone.iter().any(|(low, high)| (low..=high).contains(&seq)))
            .map(|(id, _)| id);
        Plan {
            added,
            uids,
            gone,
            floor,
            last_uid,
        }
    }

    /// Runs `plan` in one transaction. BEGIN and COMMIT are cached
    /// statements: a transaction a batch, each parsed anew by `Transaction`
    /// was a twentieth of the writer's time.
    fn execute(&self, records: &[Record<'_>], plan: &Plan) -> rusqlite::Result<()> {
        let tx = &self.connection;
        tx.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let mut insert = tx.prepare_cached(INSERT)?;
        for ((r, (_, seq)), uid) in records.iter().zip(&plan.added).zip(&plan.uids) {
            let recipients = serde_json::to_string(&r.envelope.to)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
            let id = id_bytes(r.id);
            let received_ms = i64::try_from(r.received_at_ms).unwrap_or(i64::MAX);
            let (tls, auth) = (r.smtp.tls.as_ref(), r.smtp.auth.as_ref());
            let facts = [
                r.smtp.helo.as_deref(),
                r.smtp.remote_addr.as_deref(),
                tls.map(|t| t.version.as_str()),
                tls.map(|t| t.cipher.as_str()),
                auth.map(|a| a.mechanism.as_str()),
                auth.map(|a| a.username.as_str()),
            ];
            let checksum = Fields {
                id: &id,
                received_ms,
                sender: r.envelope.from.as_bytes(),
                recipients: recipients.as_bytes(),
                facts: facts.map(|fact| fact.map(str::as_bytes)),
                raw: r.raw,
                transcript: Some(r.transcript),
            }
            .checksum();
            let [
                helo,
                remote_addr,
                tls_version,
                tls_cipher,
                auth_mechanism,
                auth_username,
            ] = facts;
            insert.execute(params![
                seq,
                &id[..],
                received_ms,
                r.envelope.from,
                recipients,
                helo,
                remote_addr,
                tls_version,
                tls_cipher,
                auth_mechanism,
                auth_username,
                r.raw,
                checksum,
                r.transcript,
                uid
            ])?;
        }
        let mut delete = tx.prepare_cached("DELETE FROM messages WHERE seq BETWEEN ?1 AND ?2")?;
        for (low, high) in &plan.gone {
            delete.execute([low, high])?;
        }
        if let Some(floor) = plan.floor {
            tx.prepare_cached(
                "INSERT INTO meta (key, value) VALUES ('id_floor', ?1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute([&id_bytes(floor)[..]])?;
            // The newest row goes: its UID, the greatest given, must not come back either.
            tx.prepare_cached(
                "INSERT INTO meta (key, value) VALUES ('uid_floor', ?1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute([plan.last_uid])?;
        }
        tx.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }

    /// What a committed write changes in memory.
    fn committed(&mut self, records: &[Record<'_>], removals: &[Removal], plan: Plan) {
        self.logged += COMMIT_OVERHEAD_BYTES + records.iter().map(|r| r.raw.len()).sum::<usize>();
        if self.logged >= CHECKPOINT_EVERY_BYTES {
            self.logged = 0;
            self.checkpointer.wake();
        }
        self.id_floor = self.id_floor.max(plan.floor);
        self.last_uid = self.last_uid.max(plan.last_uid);
        self.next_seq += plan.added.len() as i64;
        self.rows.extend(plan.added);
        for removal in removals {
            match *removal {
                Removal::One(id) => {
                    self.rows.remove(&id);
                }
                Removal::Range { first, last } => {
                    let ids: Vec<MessageId> =
                        self.rows.range(first..=last).map(|(id, _)| *id).collect();
                    for id in ids {
                        self.rows.remove(&id);
                    }
                }
            }
        }
    }

    /// Logs each damaged row and moves it, as it is, to the table `damaged`.
    /// If that cannot be written, the rows stay where they are (skipped at
    /// every start until it can).
    fn set_aside(&self, damaged: &[Damage]) {
        for d in damaged {
            tracing::error!(
                "{}: stored message {} (row {}) is damaged: {}; it is not served, and is kept aside in the table `damaged`",
                self.path.display(),
                d.id,
                d.seq,
                d.why
            );
        }
        if damaged.is_empty() {
            return;
        }
        let moved = (|| {
            let tx = self.connection.unchecked_transaction()?;
            for d in damaged {
                tx.execute(
                    &format!(
                        "INSERT INTO damaged ({COLUMNS}, reason) SELECT {COLUMNS}, ?2 FROM messages WHERE seq = ?1"
                    ),
                    params![d.seq, d.why],
                )?;
                tx.execute("DELETE FROM messages WHERE seq = ?1", [d.seq])?;
            }
            tx.commit()
        })();
        if let Err(e) = moved {
            tracing::error!(
                "{}: cannot move damaged messages aside ({e}); they stay in place, skipped",
                self.path.display()
            );
        }
    }
}

/// Opens `path` through SQLite's `unix-excl` VFS: the database file is
/// locked against other processes once, and the connections of this process
/// share the log's index in memory and lock it among themselves without a
/// system call (the default VFS made six `fcntl` calls on `-shm` per commit,
/// an eighth of the writer's time). Only this process uses the file anyway
/// (`DIR/mailjar.lock`).
fn open_exclusive(path: &Path) -> Result<Connection, StorageError> {
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), c"unix-excl")
        .map_err(|e| error(path, e))
}

/// Bytes of the database file and its write-ahead log.
fn bytes_on_disk(path: &Path) -> u64 {
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    len(path) + len(&beside(path, "-wal"))
}

/// The greatest UID the database ever gave (its rows', the damaged rows',
/// and the floor a removed newest row left) and its UIDVALIDITY.
fn read_uids(connection: &Connection) -> rusqlite::Result<(u32, u32)> {
    let (last, validity): (i64, i64) = connection.query_row(
        "SELECT max((SELECT coalesce(max(uid), 0) FROM messages), \
                    (SELECT coalesce(max(uid), 0) FROM damaged), \
                    coalesce((SELECT value FROM meta WHERE key = 'uid_floor'), 0)), \
                (SELECT value FROM meta WHERE key = 'uid_validity')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let last = u32::try_from(last).unwrap_or(u32::MAX);
    let validity = u32::try_from(validity).unwrap_or(1);
    Ok((last, validity))
}

impl Sqlite {
    /// [`Storage::write`], giving back the UIDs the rows were written with.
    fn write_numbered(
        &mut self,
        records: &[Record<'_>],
        removals: &[Removal],
    ) -> Result<Vec<u32>, StorageError> {
        self.apply_fault()?;
        let plan = self.plan(records, removals);
        if let Err(e) = self.execute(records, &plan) {
            // SQLite may have rolled back already (a full disk does): then this fails, harmlessly.
            let _ = self.connection.execute_batch("ROLLBACK");
            if !self.connection.is_autocommit() {
                // Every later BEGIN would fail: say why, the next write tries again.
                tracing::error!(
                    "{}: a failed write could not be rolled back",
                    self.path.display()
                );
            }
            return Err(e.into());
        }
        let uids = plan.uids.clone();
        self.committed(records, removals, plan);
        Ok(uids)
    }
}

impl Storage for Sqlite {
    fn write(&mut self, records: &[Record<'_>], removals: &[Removal]) -> Result<(), StorageError> {
        self.write_numbered(records, removals).map(drop)
    }

    fn write_emails(
        &mut self,
        emails: &mut [&mut Email],
        removals: &[Removal],
    ) -> Result<(), StorageError> {
        let records: Vec<Record<'_>> = emails.iter().map(|e| Record::of(e)).collect();
        let uids = self.write_numbered(&records, removals)?;
        drop(records);
        for (email, uid) in emails.iter_mut().zip(uids) {
            email.set_uid(uid);
        }
        Ok(())
    }

    fn save_inboxes(&mut self, records: &[InboxRecord]) -> Result<(), StorageError> {
        inboxes::save(&self.connection, records).map_err(|e| error(&self.path, e))
    }

    fn load_inboxes(&mut self) -> Result<Vec<InboxRecord>, StorageError> {
        inboxes::load(&self.connection).map_err(|e| error(&self.path, e))
    }

    fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<LoadReport, StorageError> {
        if self.damaged > 0 {
            tracing::warn!(
                "{}: {} damaged messages are kept aside in the table `damaged` (not served)",
                self.path.display(),
                self.damaged
            );
        }
        let mut damaged = Vec::new();
        let mut statement = self
            .connection
            .prepare(&format!("SELECT {COLUMNS} FROM messages ORDER BY seq"))?;
        let mut rows = statement.query([])?;
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        let mut batch_bytes = 0usize;
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            self.next_seq = self.next_seq.max(seq + 1);
            let uid: Option<i64> = row.get(14)?;
            let seen: Option<i64> = row.get(15)?;
            let read = Fields::read(row);
            let loaded = match &read {
                Ok((_, fields, stored)) => fields.decode(*stored).map_err(str::to_owned),
                Err(e) => Err(format!("a field is not as written ({e})")),
            };
            let loaded = match loaded {
                Ok(loaded) => Loaded {
                    uid: uid.and_then(|uid| u32::try_from(uid).ok()).unwrap_or(0),
                    seen: seen.is_some_and(|seen| seen != 0),
                    ..loaded
                },
                Err(why) => {
                    let id = read.ok().and_then(|(_, f, _)| id_of(f.id));
                    let id = id
                        .map_or_else(|| "(its id cannot be read)".to_owned(), |id| id.to_string());
                    damaged.push(Damage { seq, id, why });
                    continue;
                }
            };
            self.rows.insert(loaded.id, seq);
            batch_bytes += loaded.incoming.raw.len();
            batch.push(loaded);
            if batch.len() == LOAD_BATCH || batch_bytes >= LOAD_BATCH_BYTES {
                batch_bytes = 0;
                each(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(LOAD_BATCH),
                ));
            }
        }
        drop(rows);
        drop(statement);
        if !batch.is_empty() {
            each(batch);
        }
        self.set_aside(&damaged);
        Ok(LoadReport {
            damaged: self.damaged + damaged.len() as u64,
        })
    }

    fn size(&self) -> u64 {
        bytes_on_disk(&self.path)
    }

    fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::from_iter([
            ("kind".to_owned(), "sqlite".into()),
            ("path".to_owned(), self.path.display().to_string().into()),
        ])
    }

    fn id_floor(&self) -> Option<MessageId> {
        self.id_floor
    }

    fn uid_floor(&self) -> u32 {
        self.last_uid
    }

    fn set_seen(&mut self, changes: &[(MessageId, bool)]) -> Result<(), StorageError> {
        self.apply_fault()?;
        let rows = &self.rows;
        let written = (|| {
            let tx = self.connection.unchecked_transaction()?;
            {
                let mut update =
                    tx.prepare_cached("UPDATE messages SET seen = ?2 WHERE seq = ?1")?;
                for (id, seen) in changes {
                    if let Some(seq) = rows.get(id) {
                        update.execute(params![seq, seen])?;
                    }
                }
            }
            tx.commit()
        })();
        written.map_err(|e| error(&self.path, e))
    }

    fn uid_validity(&self) -> Option<u32> {
        Some(self.uid_validity)
    }

    fn tidy(&mut self) -> bool {
        let free = |c: &Connection| -> i64 {
            c.query_row("PRAGMA freelist_count", [], |r| r.get(0))
                .optional()
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        if free(&self.connection) == 0 {
            return false;
        }
        // A few pages at a time, between batches: never a full VACUUM.
        let step = format!("PRAGMA incremental_vacuum({VACUUM_STEP_PAGES})");
        let done = self.connection.prepare(&step).and_then(|mut s| {
            let mut rows = s.query([])?;
            while rows.next()?.is_some() {}
            Ok(())
        });
        if let Err(e) = done {
            tracing::debug!("incremental vacuum: {e}");
            return false;
        }
        let more = free(&self.connection) > 0;
        if !more {
            // The file shrinks when its log is copied in: now, not 16 MiB of mail later.
            self.checkpointer.wake();
        }
        more
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::postgres::order::after;
    use crate::storage::tests::session_facts;
    use mailjar_core::api::{Api, ApiConfig};
    use mailjar_core::smtp::{AuthInfo, Envelope, SmtpFacts, TlsInfo};
    use schema::{MIGRATIONS, SCHEMA_VERSION};

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mailjar-sqlite-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// A small message to store, and `n` ids for it in receive order.
    fn small_sample(n: usize) -> (Sample, Vec<MessageId>) {
        let mut api = Api::<()>::new(ApiConfig::default());
        let ids = (0..n).map(|_| api.assign(1000, [1; 10]).id).collect();
        (Sample::new(b"Subject: x\r\n\r\nbody\r\n"), ids)
    }

    /// A fresh data directory and its options.
    fn fresh(name: &str) -> (PathBuf, Options) {
        let dir = temp(name);
        let options = Options {
            dir: dir.clone(),
            fsync: false,
        };
        (dir, options)
    }

    /// This thread without `CAP_DAC_OVERRIDE` until dropped: root writes any
    /// file through it, so without it a 0444 file is read-only to root too.
    /// Capabilities are per thread: the rest of the process keeps its own.
    #[cfg(target_os = "linux")]
    struct WithoutDacOverride(rustix::thread::CapabilitySets);

    #[cfg(target_os = "linux")]
    impl WithoutDacOverride {
        fn new() -> WithoutDacOverride {
            let sets = rustix::thread::capabilities(None).expect("capget");
            let mut fewer = sets;
            fewer.effective -= rustix::thread::CapabilitySet::DAC_OVERRIDE;
            rustix::thread::set_capabilities(None, fewer).expect("capset");
            WithoutDacOverride(sets)
        }
    }

    #[cfg(target_os = "linux")]
    impl Drop for WithoutDacOverride {
        fn drop(&mut self) {
            let _ = rustix::thread::set_capabilities(None, self.0);
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_database_that_can_only_be_read_is_refused_at_open() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, options) = fresh("readonly");
        drop(Sqlite::open(&options).unwrap());
        let db = dir.join("mailjar.db");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
        let refused = {
            let _guard = WithoutDacOverride::new();
            let writable = std::fs::OpenOptions::new().write(true).open(&db);
            assert!(writable.is_err(), "a 0444 file opened for writing");
            Sqlite::open(&options)
        };
        let Err(refused) = refused else {
            panic!("a database that can only be read was opened");
        };
        assert!(refused.0.contains("can only be read"), "{refused}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn envelope(to: &[&str]) -> Envelope {
        Envelope {
            from: "s@x.test".into(),
            to: to.iter().map(|&t| t.into()).collect(),
        }
    }

    /// One message's envelope, SMTP facts and raw bytes, written under many ids.
    struct Sample {
        envelope: Envelope,
        facts: SmtpFacts,
        raw: Vec<u8>,
    }

    impl Sample {
        fn new(raw: &[u8]) -> Sample {
            Sample {
                envelope: envelope(&["a@x.test"]),
                facts: SmtpFacts::default(),
                raw: raw.to_vec(),
            }
        }

        /// The sample under each of `ids`, received at 1000.
        fn records(&self, ids: &[MessageId]) -> Vec<Record<'_>> {
            ids.iter()
                .map(|&id| Record {
                    id,
                    received_at_ms: 1000,
                    envelope: &self.envelope,
                    smtp: &self.facts,
                    raw: &self.raw,
                    transcript: &[],
                    uid: 0,
                })
                .collect()
        }
    }

    fn pages(s: &Sqlite) -> i64 {
        s.connection
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn removing_the_newest_row_keeps_its_id_as_the_floor_across_a_reopen() {
        let (dir, options) = fresh("floor");
        let (sample, ids) = small_sample(4);
        {
            let mut db = Sqlite::open(&options).unwrap();
            db.write(&sample.records(&ids[..3]), &[]).unwrap();
            // The oldest goes (an eviction): no floor, the newest is still stored.
            db.write(&[], &[Removal::One(ids[0])]).unwrap();
            assert_eq!(db.id_floor(), None);
        }
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(db.id_floor(), None);
        db.load(&mut |_| {}).unwrap();
        // Everything goes, then one more is added and deleted in one write.
        db.write(
            &[],
            &[Removal::Range {
                first: ids[0],
                last: ids[2],
            }],
        )
        .unwrap();
        assert_eq!(db.id_floor(), Some(ids[2]));
        db.write(&sample.records(&ids[3..]), &[Removal::One(ids[3])])
            .unwrap();
        drop(db);
        let db = Sqlite::open(&options).unwrap();
        assert_eq!(db.id_floor(), Some(ids[3]));
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn removals_find_their_rows_after_a_reopen_and_within_the_batch_that_adds_them() {
        let (dir, options) = fresh("rows");
        let (sample, ids) = small_sample(11);
        let write = |db: &mut Sqlite, add: &[MessageId], removals: &[Removal]| {
            let records = sample.records(add);
            db.write(&records, removals).unwrap();
        };
        let stored = |db: &mut Sqlite| {
            let mut loaded = Vec::new();
            db.load(&mut |batch| loaded.extend(batch.into_iter().map(|l| l.id)))
                .unwrap();
            loaded
        };
        {
            let mut db = Sqlite::open(&options).unwrap();
            write(&mut db, &ids[..6], &[]);
        }
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(stored(&mut db), ids[..6]);
        // Rows added and removed in one transaction, a range over old and new
        // rows, one old row.
        write(
            &mut db,
            &ids[6..10],
            &[
                Removal::One(ids[0]),
                Removal::Range {
                    first: ids[4],
                    last: ids[7],
                },
                Removal::One(ids[9]),
            ],
        );
        drop(db);
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(stored(&mut db), [ids[1], ids[2], ids[3], ids[8]]);
        // After a reopen new rows follow the loaded ones, and old ones are still found.
        write(&mut db, &ids[10..], &[Removal::One(ids[8])]);
        assert_eq!(stored(&mut db), [ids[1], ids[2], ids[3], ids[10]]);
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_that_fails_midway_is_rolled_back_and_the_next_one_commits() {
        let (dir, options) = fresh("rollback");
        let mut db = Sqlite::open(&options).unwrap();
        let (sample, ids) = small_sample(5);
        let records = |ids: &[MessageId]| sample.records(ids);
        let first = db.next_seq;
        db.write(&records(&ids[..2]), &[]).unwrap();
        // The second row of this batch takes a `seq` already stored: its insert fails
        // after the first one went in.
        db.next_seq = first - 1;
        assert!(db.write(&records(&ids[2..4]), &[]).is_err());
        db.next_seq = first + 2;
        db.write(&records(&ids[4..]), &[]).unwrap();
        let mut loaded = Vec::new();
        db.load(&mut |batch| loaded.extend(batch.into_iter().map(|l| l.id)))
            .unwrap();
        assert_eq!(
            loaded,
            [ids[0], ids[1], ids[4]],
            "nothing of the failed batch"
        );
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_log_is_copied_into_the_database_by_the_checkpoint_thread() {
        let (dir, options) = fresh("checkpoint");
        let mut db = Sqlite::open(&options).unwrap();
        let mut api = Api::<()>::new(ApiConfig::default());
        let sample = Sample::new(&vec![b'x'; 512 * 1024]);
        let logged = CHECKPOINT_EVERY_BYTES + 4 * sample.raw.len();
        for _ in 0..logged / sample.raw.len() {
            let id = api.assign(1000, [2; 10]).id;
            db.write(&sample.records(&[id]), &[]).unwrap();
        }
        // Far below the writer's own checkpoint (WAL_CAP_BYTES): only the thread copies pages in.
        let file = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while file(&db.path) < CHECKPOINT_EVERY_BYTES as u64 / 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file is still {} bytes",
                file(&db.path)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rows_round_trip_and_space_comes_back_in_small_steps() {
        let (dir, options) = fresh("tidy");
        let mut db = Sqlite::open(&options).unwrap();
        let mut api = Api::<()>::new(ApiConfig::default());
        let envelope = envelope(&["a@x.test", "b@x.test"]);
        let raws: Vec<Vec<u8>> = (0..300u32)
            .map(|i| {
                let mut raw = format!("Subject: {i}\r\n\r\n").into_bytes();
                raw.extend((0..20_000).map(|j| (i + j) as u8));
                raw
            })
            .collect();
        let facts = SmtpFacts {
            helo: Some("client.test".into()),
            remote_addr: Some("[::1]:50123".into()),
            tls: Some(TlsInfo {
                version: "TLSv1.3".into(),
                cipher: "TLS_AES_128_GCM_SHA256".into(),
            }),
            auth: Some(AuthInfo {
                mechanism: "PLAIN".into(),
                username: "app".into(),
            }),
        };
        let ids: Vec<_> = raws.iter().map(|_| api.assign(1000, [3; 10])).collect();
        let records: Vec<Record<'_>> = ids
            .iter()
            .zip(&raws)
            .map(|(a, raw)| Record {
                id: a.id,
                received_at_ms: a.received_at_ms,
                envelope: &envelope,
                smtp: &facts,
                raw,
                transcript: &[],
                uid: 0,
            })
            .collect();
        db.write(&records, &[]).unwrap();
        let mut loaded = Vec::new();
        db.load(&mut |batch| loaded.extend(batch)).unwrap();
        assert_eq!(loaded.len(), 300);
        for ((row, a), raw) in loaded.iter().zip(&ids).zip(&raws) {
            assert_eq!(row.id, a.id);
            assert_eq!(row.received_at_ms, a.received_at_ms);
            assert_eq!(&row.incoming.raw, raw);
            assert_eq!(row.incoming.envelope, envelope);
            assert_eq!(row.incoming.helo.as_deref(), Some("client.test"));
            assert_eq!(row.incoming.session, session_facts(&facts));
        }
        let full = pages(&db);
        db.write(
            &[],
            &[
                Removal::One(ids[0].id),
                Removal::Range {
                    first: ids[1].id,
                    last: ids[298].id,
                },
            ],
        )
        .unwrap();
        let mut steps = 0;
        while db.tidy() {
            steps += 1;
            assert!(steps < 10_000);
        }
        assert!(steps > 1, "reclaimed over several small steps, not at once");
        assert!(
            pages(&db) < full / 10,
            "{} of {full} pages left",
            pages(&db)
        );
        let mut left = Vec::new();
        db.load(&mut |batch| left.extend(batch)).unwrap();
        assert_eq!(left.iter().map(|l| l.id).collect::<Vec<_>>(), [ids[299].id]);
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The ids `db` loads, and what its load reports.
    fn loaded(db: &mut Sqlite) -> (Vec<MessageId>, LoadReport) {
        let mut ids = Vec::new();
        let report = db
            .load(&mut |batch| ids.extend(batch.into_iter().map(|l| l.id)))
            .unwrap();
        (ids, report)
    }

    #[test]
    fn a_row_whose_bytes_changed_is_not_loaded_and_is_kept_aside() {
        let (dir, options) = fresh("damaged");
        let (sample, ids) = small_sample(4);
        let mut db = Sqlite::open(&options).unwrap();
        db.write(&sample.records(&ids[..3]), &[]).unwrap();
        // One byte of the second message's raw bytes, and one of the third's recipients.
        db.connection
            .execute_batch(
                "UPDATE messages SET raw = CAST(replace(CAST(raw AS TEXT), 'body', 'bodY') AS BLOB) WHERE seq = 2;
                 UPDATE messages SET recipients = replace(recipients, 'a@', 'b@') WHERE seq = 3;",
            )
            .unwrap();
        drop(db);
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(loaded(&mut db), (vec![ids[0]], LoadReport { damaged: 2 }));
        let kept: Vec<(Vec<u8>, String)> = db
            .connection
            .prepare("SELECT id, reason FROM damaged ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!(id_of(&kept[0].0), Some(ids[1]));
        assert!(kept[0].1.contains("checksum"), "{}", kept[0].1);
        // New rows still go in, and the damaged ones stay aside and counted.
        db.write(&sample.records(&ids[3..]), &[]).unwrap();
        drop(db);
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(
            loaded(&mut db),
            (vec![ids[0], ids[3]], LoadReport { damaged: 2 })
        );
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The UIDs `db` loads, in id order.
    fn loaded_uids(db: &mut Sqlite) -> Vec<(MessageId, u32)> {
        let mut uids = Vec::new();
        db.load(&mut |batch| uids.extend(batch.into_iter().map(|l| (l.id, l.uid))))
            .unwrap();
        uids
    }

    /// Writes `ids` as the writer does (the engine numbers them); their UIDs.
    fn write_emails(db: &mut Sqlite, ids: &[MessageId], removals: &[Removal]) -> Vec<u32> {
        let mut emails: Vec<Email> = ids
            .iter()
            .map(|&id| {
                let prepared = mailjar_core::store::Prepared::new(mailjar_core::smtp::Incoming {
                    envelope: envelope(&["a@x.test"]),
                    raw: b"Subject: x\r\n\r\nbody\r\n".to_vec(),
                    helo: None,
                    session: Default::default(),
                    transcript: Default::default(),
                });
                Email::new(id, 1000, prepared)
            })
            .collect();
        let mut refs: Vec<&mut Email> = emails.iter_mut().collect();
        db.write_emails(&mut refs, removals).unwrap();
        emails.iter().map(Email::uid).collect()
    }

    #[test]
    fn uids_survive_a_reopen_and_the_newest_deleted_one_is_not_given_again() {
        let (dir, options) = fresh("uids");
        let (_, ids) = small_sample(6);
        let validity;
        {
            let mut db = Sqlite::open(&options).unwrap();
            validity = db.uid_validity().unwrap();
            assert_eq!(write_emails(&mut db, &ids[..3], &[]), [1, 2, 3]);
            // The newest goes: UID 3 is the floor now.
            assert!(write_emails(&mut db, &[], &[Removal::One(ids[2])]).is_empty());
        }
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(db.uid_validity(), Some(validity), "kept with the file");
        assert_eq!(loaded_uids(&mut db), [(ids[0], 1), (ids[1], 2)]);
        assert_eq!(db.uid_floor(), 3);
        assert_eq!(write_emails(&mut db, &ids[3..5], &[]), [4, 5]);
        // Added and removed in one write: its UID is not given again either.
        assert_eq!(
            write_emails(&mut db, &ids[5..], &[Removal::One(ids[5])]),
            [6]
        );
        drop(db);
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(
            loaded_uids(&mut db),
            [(ids[0], 1), (ids[1], 2), (ids[3], 4), (ids[4], 5)]
        );
        assert_eq!(db.uid_floor(), 6);
        drop(db);
        // Another file is another store: another UIDVALIDITY.
        let (other_dir, other) = fresh("uids-other");
        let other_db = Sqlite::open(&other).unwrap();
        assert_ne!(other_db.uid_validity(), Some(validity));
        drop(other_db);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&other_dir);
    }

    #[test]
    fn a_schema_5_database_numbers_its_rows_in_id_order() {
        let (dir, options) = fresh("migrate-uids");
        let (sample, ids) = small_sample(4);
        {
            let mut db = Sqlite::open(&options).unwrap();
            db.write(&sample.records(&ids), &[Removal::One(ids[1])])
                .unwrap();
            // Back to schema 5, as the versions before UIDs left it.
            db.connection
                .execute_batch(
                    "ALTER TABLE messages DROP COLUMN uid; ALTER TABLE damaged DROP COLUMN uid; \
                     ALTER TABLE messages DROP COLUMN seen; ALTER TABLE damaged DROP COLUMN seen; \
                     DELETE FROM meta WHERE key LIKE 'uid_%'; PRAGMA user_version = 5;",
                )
                .unwrap();
        }
        let mut db = Sqlite::open(&options).unwrap();
        assert_eq!(
            loaded_uids(&mut db),
            [(ids[0], 1), (ids[2], 2), (ids[3], 3)]
        );
        assert!(db.uid_validity().is_some_and(|v| v > 0));
        assert_eq!(write_emails(&mut db, &[after(ids[3])], &[]), [4]);
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_schema_2_database_gets_a_checksum_for_every_row() {
        let (dir, options) = fresh("migrate");
        std::fs::create_dir_all(&dir).unwrap();
        let (sample, ids) = small_sample(3);
        {
            // As the versions before checksums wrote it.
            let old = Connection::open(dir.join("mailjar.db")).unwrap();
            old.execute_batch(&format!(
                "PRAGMA page_size = {PAGE_SIZE}; {} {} PRAGMA user_version = 2;",
                MIGRATIONS[0], MIGRATIONS[1]
            ))
            .unwrap();
            for (seq, id) in ids.iter().enumerate() {
                old.execute(
                    "INSERT INTO messages (seq, id, received_ms, sender, recipients, helo, raw) \
                     VALUES (?1, ?2, 1000, 's@x.test', '[\"a@x.test\"]', 'client.test', ?3)",
                    params![seq as i64 + 1, &id_bytes(*id)[..], sample.raw],
                )
                .unwrap();
            }
        }
        let mut db = Sqlite::open(&options).unwrap();
        let version: i64 = db
            .connection
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let mut rows = Vec::new();
        db.load(&mut |batch| rows.extend(batch)).unwrap();
        assert_eq!(rows.iter().map(|l| l.id).collect::<Vec<_>>(), ids);
        assert_eq!(rows[2].incoming.raw, sample.raw);
        assert_eq!(rows[2].incoming.helo.as_deref(), Some("client.test"));
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
