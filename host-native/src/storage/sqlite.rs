//! The SQLite engine behind `--data-dir`: `DIR/mailjar.db`, WAL (through the
//! `unix-excl` VFS: the file is this process's alone), 16 KiB
//! pages, incremental auto-vacuum, guarded by an advisory lock on
//! `DIR/mailjar.lock`.
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

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use mailjar_core::api::Removal;
use mailjar_core::id::MessageId;
use mailjar_core::smtp::{AuthInfo, Envelope, Incoming, SessionFacts, TlsInfo};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::{LoadReport, Loaded, Options, Record, Storage, StorageError};

/// The schema this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 2;

/// Pages of 16 KiB: a 2 KiB message and its metadata share a page instead of
/// spilling into overflow pages (measured: twice the rows per second, 40% less disk).
const PAGE_SIZE: i64 = 16384;

/// How many free pages one upkeep step gives back to the file system.
const VACUUM_STEP_PAGES: i64 = 64;

/// Rows read back per batch at load, at most.
const LOAD_BATCH: usize = 4096;

/// Raw bytes read back per batch at load, at most (a larger message goes alone):
/// with the batch being parsed and two queued, loading holds at most about 4 of these beyond the store.
const LOAD_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The most bytes a write-ahead log keeps on disk after a checkpoint: the
/// cap plus one batch's bound, so that in normal use the log is never cut
/// (a batch may pass its bound by one message, and the writer's passive
/// checkpoint may find the checkpointer busy: both only make it longer). Under
/// sustained load the checkpointer's passes never catch up with the writer,
/// so the log starts over only at the cap; cut back each time (to 64 MiB,
/// before), it had to grow into newly allocated blocks again (block
/// allocation and truncation were about a third of a write's kernel time in
/// a probe of the writer alone); kept, it is overwritten in place.
const WAL_LIMIT_BYTES: i64 = WAL_CAP_BYTES + super::writer::Limits::DEFAULT_BYTES as i64;

/// A checkpoint waits for the disk twice: on the writer's connection every
/// sender would wait behind it (measured: a quarter of the ingest rate), so
/// the [`Checkpointer`] copies the log into the database on its own
/// connection, started after about this many bytes were logged.
const CHECKPOINT_EVERY_BYTES: usize = 16 * 1024 * 1024;

/// The log's length (in bytes) at which the writer checkpoints itself, which
/// bounds it and, under sustained load, is when it starts over (a passive
/// checkpoint leaves the frames committed while it ran); by then the
/// checkpointer has copied nearly all of it, so little is left to wait for.
const WAL_CAP_BYTES: i64 = 128 * 1024 * 1024;

/// What one commit logs beside its messages, about (the pages of the tree it touched).
const COMMIT_OVERHEAD_BYTES: usize = 3 * PAGE_SIZE as usize;

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> StorageError {
        StorageError(e.to_string())
    }
}

/// The migrations, from schema `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE messages (
        seq INTEGER PRIMARY KEY,
        id BLOB NOT NULL,
        received_ms INTEGER NOT NULL,
        sender TEXT NOT NULL,
        recipients TEXT NOT NULL,
        helo TEXT,
        remote_addr TEXT,
        tls_version TEXT,
        tls_cipher TEXT,
        auth_mechanism TEXT,
        auth_username TEXT,
        raw BLOB NOT NULL
    );",
    // 1 to 2: `id_floor`, the greatest id ever stored once it is no longer
    // (deleted or evicted): new ids sort after it across a restart.
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);",
];

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
}

/// A thread with its own connection that copies the write-ahead log into the
/// database (`wal_checkpoint(PASSIVE)`) when woken, so the writer's commits
/// never wait for the disk's syncs. Stopped and joined when dropped.
struct Checkpointer {
    wake: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path, synchronous: &str) -> Result<Checkpointer, StorageError> {
        let connection = open_exclusive(path)?;
        connection
            .execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
            .map_err(|e| error(path, e))?;
        // One wake-up pending at most: a pass copies everything logged until it starts.
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        let shown = path.display().to_string();
        let thread = std::thread::Builder::new()
            .name("mailjar-checkpoint".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    let pass =
                        connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    if let Err(e) = pass {
                        tracing::debug!("{shown}: checkpoint: {e}");
                    }
                }
            })
            .map_err(|e| error(path, format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    fn wake(&self) {
        if let Some(wake) = &self.wake {
            let _ = wake.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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

/// Takes the advisory lock on `DIR/mailjar.lock`, or says who holds the directory.
fn lock(dir: &Path) -> Result<File, StorageError> {
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

/// Whether SQLite's error is a verdict on the file's content (not a
/// database, corrupt), rather than on what is around it (disk, permissions, locks).
fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

/// A database that could not be read for a reason outside it.
fn cannot_read(path: &Path, e: &rusqlite::Error) -> StorageError {
    StorageError(format!(
        "refusing to start: cannot read {} ({e}); the file was not changed and may be fine: check the disk's free space, the permissions of the file and its directory, and that no other process has it open",
        path.display()
    ))
}

/// Refuses a file that is not a database, a newer schema, or a failing
/// check, without writing to it; returns the schema version it holds.
fn check(path: &Path) -> Result<i64, StorageError> {
    let refuse = |what: String| {
        StorageError(format!(
            "refusing to start: {} {what}; it was left untouched (move it away to start afresh)",
            path.display()
        ))
    };
    let mut header = [0u8; 16];
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if len > 0 {
        use std::io::Read;
        let mut file = File::open(path).map_err(|e| error(path, e))?;
        let read = file.read(&mut header).map_err(|e| error(path, e))?;
        if read < 16 || &header != b"SQLite format 3\0" {
            return Err(refuse("is not an SQLite database".into()));
        }
    } else {
        return Ok(0);
    }
    // Only a verdict on the file's content says "move it away": a full disk,
    // a read-only directory or a lock held elsewhere says what to fix instead.
    let blame = |what: &str, e: rusqlite::Error| {
        if is_damage(&e) {
            refuse(format!("{what} ({e})"))
        } else {
            cannot_read(path, &e)
        }
    };
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| blame("cannot be opened", e))?;
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| blame("is not a readable database", e))?;
    if version > SCHEMA_VERSION {
        return Err(refuse(format!(
            "was written by a newer mailjar (schema {version}; this one knows up to {SCHEMA_VERSION})"
        )));
    }
    let verdict: String = connection
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| blame("fails its integrity check", e))?;
    if verdict != "ok" {
        return Err(refuse(format!("fails its integrity check ({verdict})")));
    }
    Ok(version)
}

/// Runs [`check`], then removes the `-wal` (when empty) and `-shm` files that
/// its read-only connection created: a refused start leaves the directory as
/// it found it, and mailjar itself keeps the log's index in memory.
fn check_leaving_no_trace(path: &Path) -> Result<i64, StorageError> {
    let (wal, shm) = (beside(path, "-wal"), beside(path, "-shm"));
    let (had_wal, had_shm) = (wal.exists(), shm.exists());
    let checked = check(path);
    if !had_wal && std::fs::metadata(&wal).is_ok_and(|m| m.len() == 0) {
        let _ = std::fs::remove_file(&wal);
    }
    if !had_shm {
        let _ = std::fs::remove_file(&shm);
    }
    checked
}

/// SQLite's file beside the database: `mailjar.db-wal`, `mailjar.db-shm`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn id_bytes(id: MessageId) -> [u8; 16] {
    id.as_u128().to_be_bytes()
}

/// The id [`id_bytes`] wrote; None for a blob of another length.
fn id_of(bytes: &[u8]) -> Option<MessageId> {
    let bytes = <[u8; 16]>::try_from(bytes).ok()?;
    Some(MessageId::from_u128(u128::from_be_bytes(bytes)))
}

impl Sqlite {
    /// Locks `DIR` (creating it), checks and opens `DIR/mailjar.db`, and migrates it to this schema.
    pub fn open(options: &Options) -> Result<Sqlite, StorageError> {
        let dir = &options.dir;
        if dir.exists() && !dir.is_dir() {
            return Err(error(
                dir,
                "is not a directory (--data-dir names a directory)",
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| error(dir, format!("cannot create the data directory: {e}")))?;
        let lock = lock(dir)?;
        let path = dir.join("mailjar.db");
        let version = check_leaving_no_trace(&path)?;
        let mut connection = open_exclusive(&path)?;
        // SQLite falls back to read-only on a file it may not write, and
        // would then refuse every write until a restart.
        if connection
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(|e| error(&path, e))?
        {
            return Err(StorageError(format!(
                "refusing to start: {} can only be read (check its permissions and its directory's); mailjar writes every message to it",
                path.display()
            )));
        }
        let fresh = version == 0;
        if fresh {
            // Only take effect before the first table exists.
            connection
                .execute_batch(&format!(
                    "PRAGMA page_size = {PAGE_SIZE}; PRAGMA auto_vacuum = INCREMENTAL;"
                ))
                .map_err(|e| error(&path, e))?;
        }
        let mode: String = connection
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| error(&path, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!("{}: journal mode is {mode}, not WAL", path.display());
        }
        let synchronous = if options.fsync { "FULL" } else { "NORMAL" };
        connection
            .execute_batch(&format!(
                "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = OFF; PRAGMA journal_size_limit = {}; PRAGMA wal_autocheckpoint = {};",
                WAL_LIMIT_BYTES,
                WAL_CAP_BYTES / PAGE_SIZE
            ))
            .map_err(|e| error(&path, e))?;
        connection.set_prepared_statement_cache_capacity(16);
        for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let to = from as i64 + 1;
            tracing::info!("{}: migrating schema {from} to {to}", path.display());
            let tx = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| error(&path, e))?;
            tx.execute_batch(migration)
                .and_then(|_| tx.pragma_update(None, "user_version", to))
                .and_then(|_| tx.commit())
                .map_err(|e| error(&path, format!("migration to schema {to} failed: {e}")))?;
            tracing::info!("{}: now at schema {to}", path.display());
        }
        let fail_while = cfg!(debug_assertions)
            .then(|| std::env::var_os(FAULT_ENV).map(PathBuf::from))
            .flatten();
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
        let next_seq = connection
            .query_row("SELECT coalesce(max(seq), 0) + 1 FROM messages", [], |r| {
                r.get::<_, i64>(0)
            })
            .map_err(|e| error(&path, e))?;
        let checkpointer = Checkpointer::start(&path, synchronous)?;
        Ok(Sqlite {
            connection,
            path,
            _lock: lock,
            fail_while,
            rows: BTreeMap::new(),
            next_seq,
            checkpointer,
            logged: 0,
            id_floor,
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

impl Storage for Sqlite {
    fn write(&mut self, records: &[Record<'_>], removals: &[Removal]) -> Result<(), StorageError> {
        self.apply_fault()?;
        // The rows this write adds and removes; the map changes only once it has committed.
        let added: Vec<(MessageId, i64)> = records
            .iter()
            .zip(self.next_seq..)
            .map(|(r, seq)| (r.id, seq))
            .collect();
        let find = |id: &MessageId| {
            self.rows
                .get(id)
                .or_else(|| added.iter().find(|(a, _)| a == id).map(|(_, seq)| seq))
                .copied()
        };
        // The newest row after the inserts; if this write removes it too, its
        // id becomes the floor new ids must sort after, across a restart.
        let newest: Option<(MessageId, i64)> = added
            .last()
            .copied()
            .or_else(|| self.rows.last_key_value().map(|(id, seq)| (*id, *seq)));
        let mut gone: Vec<(i64, i64)> = Vec::with_capacity(removals.len());
        for removal in removals {
            match *removal {
                Removal::One(id) => gone.extend(find(&id).map(|seq| (seq, seq))),
                Removal::Range { first, last } => {
                    // Stored rows and rows of this batch alike: seq follows id order.
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
        let floor = newest
            .filter(|(_, seq)| gone.iter().any(|(low, high)| (low..=high).contains(&seq)))
            .map(|(id, _)| id);
        // BEGIN and COMMIT as cached statements: a transaction a batch, each
        // parsed anew by `Transaction` was a twentieth of the writer's time.
        let tx = &self.connection;
        tx.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let written = (|| -> rusqlite::Result<()> {
            let mut insert = tx.prepare_cached(
                "INSERT INTO messages (seq, id, received_ms, sender, recipients, helo, remote_addr, \
                 tls_version, tls_cipher, auth_mechanism, auth_username, raw) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?;
            for (r, (_, seq)) in records.iter().zip(&added) {
                let recipients = serde_json::to_string(&r.envelope.to)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                insert.execute(params![
                    seq,
                    &id_bytes(r.id)[..],
                    i64::try_from(r.received_at_ms).unwrap_or(i64::MAX),
                    r.envelope.from,
                    recipients,
                    r.smtp.helo,
                    r.smtp.remote_addr,
                    r.smtp.tls.as_ref().map(|t| &t.version),
                    r.smtp.tls.as_ref().map(|t| &t.cipher),
                    r.smtp.auth.as_ref().map(|a| &a.mechanism),
                    r.smtp.auth.as_ref().map(|a| &a.username),
                    r.raw
                ])?;
            }
            let mut delete =
                tx.prepare_cached("DELETE FROM messages WHERE seq BETWEEN ?1 AND ?2")?;
            for (low, high) in &gone {
                delete.execute([low, high])?;
            }
            if let Some(floor) = floor {
                tx.prepare_cached(
                    "INSERT INTO meta (key, value) VALUES ('id_floor', ?1) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                )?
                .execute([&id_bytes(floor)[..]])?;
            }
            tx.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        })();
        if let Err(e) = written {
            // SQLite may have rolled back already (a full disk does): then this fails, harmlessly.
            let _ = tx.execute_batch("ROLLBACK");
            if !tx.is_autocommit() {
                // Every later BEGIN would fail: say why, the next write tries again.
                tracing::error!(
                    "{}: a failed write could not be rolled back",
                    self.path.display()
                );
            }
            return Err(e.into());
        }
        self.logged += COMMIT_OVERHEAD_BYTES + records.iter().map(|r| r.raw.len()).sum::<usize>();
        if self.logged >= CHECKPOINT_EVERY_BYTES {
            self.logged = 0;
            self.checkpointer.wake();
        }
        self.id_floor = self.id_floor.max(floor);
        self.next_seq += added.len() as i64;
        self.rows.extend(added);
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
        Ok(())
    }

    fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<LoadReport, StorageError> {
        let mut statement = self.connection.prepare(
            "SELECT id, received_ms, sender, recipients, helo, remote_addr, tls_version, \
             tls_cipher, auth_mechanism, auth_username, raw, seq FROM messages ORDER BY seq",
        )?;
        let mut rows = statement.query([])?;
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        let mut batch_bytes = 0usize;
        while let Some(row) = rows.next()? {
            let id: Vec<u8> = row.get(0)?;
            let id = id_of(&id).ok_or_else(|| error(&self.path, "a stored id is not 16 bytes"))?;
            let seq: i64 = row.get(11)?;
            self.rows.insert(id, seq);
            self.next_seq = self.next_seq.max(seq + 1);
            let received: i64 = row.get(1)?;
            let recipients: String = row.get(3)?;
            let to: Vec<String> = serde_json::from_str(&recipients)
                .map_err(|e| error(&self.path, format!("stored recipients of {id}: {e}")))?;
            batch.push(Loaded {
                id,
                received_at_ms: u64::try_from(received).unwrap_or(0),
                incoming: Incoming {
                    envelope: Envelope {
                        from: row.get(2)?,
                        to,
                    },
                    helo: row.get(4)?,
                    session: SessionFacts {
                        remote_addr: row.get(5)?,
                        tls: row
                            .get::<_, Option<String>>(6)?
                            .zip(row.get(7)?)
                            .map(|(version, cipher)| TlsInfo { version, cipher }),
                        auth: row.get::<_, Option<String>>(8)?.zip(row.get(9)?).map(
                            |(mechanism, username)| AuthInfo {
                                mechanism,
                                username,
                            },
                        ),
                    },
                    raw: row.get(10)?,
                },
            });
            batch_bytes += batch.last().map_or(0, |l: &Loaded| l.incoming.raw.len());
            if batch.len() == LOAD_BATCH || batch_bytes >= LOAD_BATCH_BYTES {
                batch_bytes = 0;
                each(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(LOAD_BATCH),
                ));
            }
        }
        if !batch.is_empty() {
            each(batch);
        }
        Ok(LoadReport::default())
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
    use crate::storage::tests::session_facts;
    use mailjar_core::api::{Api, ApiConfig};
    use mailjar_core::smtp::SmtpFacts;

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

    #[test]
    fn only_a_verdict_on_the_content_is_called_damage() {
        let failure =
            |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        assert!(is_damage(&failure(rusqlite::ffi::SQLITE_NOTADB)));
        assert!(is_damage(&failure(rusqlite::ffi::SQLITE_CORRUPT)));
        for outside in [
            rusqlite::ffi::SQLITE_IOERR,
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_READONLY,
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_CANTOPEN,
            rusqlite::ffi::SQLITE_PERM,
        ] {
            assert!(!is_damage(&failure(outside)), "code {outside}");
        }
    }

    #[test]
    fn a_database_that_can_only_be_read_is_refused_at_open() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, options) = fresh("readonly");
        drop(Sqlite::open(&options).unwrap());
        let db = dir.join("mailjar.db");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
        if std::fs::OpenOptions::new().write(true).open(&db).is_ok() {
            // Root writes any file: nothing to show here.
            println!("NOTICE: running as root, a 0444 file is still writable; skipped");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        let Err(refused) = Sqlite::open(&options) else {
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
}
