//! What `mailjar.db` is checked for and set to at open: the checks that
//! refuse a file without writing to it, the writer connection's settings, and
//! the schema with its migrations.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags, TransactionBehavior, params};

use super::error;
use super::row::{COLUMNS, Fields};
use crate::storage::StorageError;

/// The schema this build writes (`PRAGMA user_version`).
pub(super) const SCHEMA_VERSION: i64 = 7;

/// Pages of 16 KiB: a 2 KiB message and its metadata share a page instead of
/// spilling into overflow pages (measured: twice the rows per second, 40% less disk).
pub(super) const PAGE_SIZE: i64 = 16384;

/// The most bytes a write-ahead log keeps on disk after a checkpoint: the
/// cap plus one batch's bound, so that in normal use the log is never cut
/// (a batch may pass its bound by one message, and the writer's passive
/// checkpoint may find the checkpointer busy: both only make it longer). Under
/// sustained load the checkpointer's passes never catch up with the writer,
/// so the log starts over only at the cap; cut back each time (to 64 MiB,
/// before), it had to grow into newly allocated blocks again (block
/// allocation and truncation were about a third of a write's kernel time in
/// a probe of the writer alone); kept, it is overwritten in place.
const WAL_LIMIT_BYTES: i64 = WAL_CAP_BYTES + crate::storage::writer::Limits::DEFAULT_BYTES as i64;

/// The log's length (in bytes) at which the writer checkpoints itself, which
/// bounds it and, under sustained load, is when it starts over (a passive
/// checkpoint leaves the frames committed while it ran); by then the
/// checkpointer has copied nearly all of it, so little is left to wait for.
const WAL_CAP_BYTES: i64 = 128 * 1024 * 1024;

/// The migrations, from schema `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 2 to 3: each row's checksum (filled for the rows there by
    // `fill_checksums`), and where damaged rows are kept aside, as they were,
    // with why.
    "ALTER TABLE messages ADD COLUMN checksum INTEGER;
     CREATE TABLE damaged (
        seq INTEGER, id BLOB, received_ms INTEGER, sender TEXT, recipients TEXT,
        helo TEXT, remote_addr TEXT, tls_version TEXT, tls_cipher TEXT,
        auth_mechanism TEXT, auth_username TEXT, raw BLOB, checksum INTEGER,
        reason TEXT NOT NULL
    );",
    // 3 to 4: inboxes (`--admin-token`), with the digests of their credentials.
    "CREATE TABLE inboxes (
        position INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        addresses TEXT NOT NULL,
        limits TEXT NOT NULL,
        token BLOB NOT NULL,
        smtp_password BLOB NOT NULL
    );",
    // 4 to 5: each message's SMTP transcript (NULL for the rows written before).
    "ALTER TABLE messages ADD COLUMN transcript BLOB;
     ALTER TABLE damaged ADD COLUMN transcript BLOB;",
    // 5 to 6: each message's mailbox UID (the rows there numbered from 1 in
    // id order, which is `seq` order), and the UIDVALIDITY of the store, set
    // once here (at the database's creation for a new file). Random rather
    // than the time: a directory removed and made again within a second
    // still gets another. `meta.uid_floor` comes when the newest row goes.
    "ALTER TABLE messages ADD COLUMN uid INTEGER;
     ALTER TABLE damaged ADD COLUMN uid INTEGER;
     UPDATE messages SET uid = numbered.n FROM
        (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM messages) AS numbered
        WHERE messages.seq = numbered.seq;
     INSERT INTO meta (key, value) VALUES ('uid_validity', 1 + abs(random() % 4294967295));",
    // 6 to 7: whether a reader (IMAP, POP3, the UI) has seen each message;
    // not covered by the row's checksum, since it changes.
    "ALTER TABLE messages ADD COLUMN seen INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE damaged ADD COLUMN seen INTEGER;",
];

/// Whether SQLite's error is a verdict on the file's content (not a
/// database, corrupt), rather than on what is around it (disk, permissions, locks).
pub(super) fn is_damage(e: &rusqlite::Error) -> bool {
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
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        return Ok(0);
    }
    let mut header = [0u8; 16];
    let mut file = File::open(path).map_err(|e| error(path, e))?;
    let read = std::io::Read::read(&mut file, &mut header).map_err(|e| error(path, e))?;
    if read < 16 || &header != b"SQLite format 3\0" {
        return Err(refuse("is not an SQLite database".into()));
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
pub(super) fn check_leaving_no_trace(path: &Path) -> Result<i64, StorageError> {
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
pub(super) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Sets the pragmas of the writer's connection, and refuses a file SQLite
/// would only read; `fresh`: no table exists yet. Returns the `synchronous` level.
pub(super) fn configure(
    connection: &Connection,
    path: &Path,
    fresh: bool,
    fsync: bool,
) -> Result<&'static str, StorageError> {
    // SQLite falls back to read-only on a file it may not write, and
    // would then refuse every write until a restart.
    if connection
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| error(path, e))?
    {
        return Err(StorageError(format!(
            "refusing to start: {} can only be read (check its permissions and its directory's); mailjar writes every message to it",
            path.display()
        )));
    }
    if fresh {
        // Only take effect before the first table exists.
        connection
            .execute_batch(&format!(
                "PRAGMA page_size = {PAGE_SIZE}; PRAGMA auto_vacuum = INCREMENTAL;"
            ))
            .map_err(|e| error(path, e))?;
    }
    let mode: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(|e| error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!("{}: journal mode is {mode}, not WAL", path.display());
    }
    let synchronous = if fsync { "FULL" } else { "NORMAL" };
    connection
        .execute_batch(&format!(
            "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = OFF; PRAGMA journal_size_limit = {}; PRAGMA wal_autocheckpoint = {};",
            WAL_LIMIT_BYTES,
            WAL_CAP_BYTES / PAGE_SIZE
        ))
        .map_err(|e| error(path, e))?;
    Ok(synchronous)
}

/// Migrates the database from schema `version` to [`SCHEMA_VERSION`], a
/// transaction a step, logging each.
pub(super) fn migrate(
    connection: &mut Connection,
    path: &Path,
    version: i64,
) -> Result<(), StorageError> {
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let to = from as i64 + 1;
        tracing::info!("{}: migrating schema {from} to {to}", path.display());
        let started = Instant::now();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| error(path, e))?;
        let migrated = (|| {
            tx.execute_batch(migration)?;
            if to == 3 {
                let filled = fill_checksums(&tx)?;
                tracing::info!(
                    "{}: computed the checksums of {filled} stored messages",
                    path.display()
                );
            }
            tx.pragma_update(None, "user_version", to)?;
            tx.commit()
        })();
        migrated.map_err(|e| error(path, format!("migration to schema {to} failed: {e}")))?;
        tracing::info!(
            "{}: now at schema {to} ({} ms)",
            path.display(),
            started.elapsed().as_millis()
        );
    }
    Ok(())
}

/// Gives every row without a checksum its checksum (the rows a schema
/// before 3 wrote); returns how many. One row's bytes are held at a time.
fn fill_checksums(connection: &Connection) -> rusqlite::Result<usize> {
    let mut sums = Vec::new();
    {
        // The columns of schema 3: a later one's are not there yet.
        let columns = &COLUMNS[..COLUMNS.find(", transcript").unwrap_or(COLUMNS.len())];
        let mut select = connection.prepare(&format!(
            "SELECT {columns} FROM messages WHERE checksum IS NULL ORDER BY seq"
        ))?;
        let mut rows = select.query([])?;
        while let Some(row) = rows.next()? {
            // A row that does not read as written keeps no checksum: it is damaged at load.
            if let Ok((seq, fields, _)) = Fields::read(row) {
                sums.push((seq, fields.checksum()));
            }
        }
    }
    let mut update = connection.prepare("UPDATE messages SET checksum = ?2 WHERE seq = ?1")?;
    for (seq, sum) in &sums {
        update.execute(params![seq, sum])?;
    }
    Ok(sums.len())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
