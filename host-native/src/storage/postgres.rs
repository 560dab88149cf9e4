//! `--database URL`: the PostgreSQL engine shared by several nodes.
//!
//! The client is rust-postgres's blocking `postgres` crate; this module is
//! only the engine's policy (order, catch-up, change log) on top of it. A
//! replication or queue crate was not needed: `LISTEN`/`NOTIFY` and an
//! advisory lock are PostgreSQL's own.
//!
//! Every node given the same database is one service. A write transaction
//! is one call of the server-side function `mailjar_write` (`write.rs`): it
//! takes one advisory lock first (`schema::ORDER_LOCK`), reads the
//! service's head (the greatest id ever committed), numbers the messages
//! after it (as [`order::assign`] does), inserts them, deletes what this node
//! removed (logging in `mailjar_changes` only what it did delete), moves the
//! head, sends `NOTIFY mailjar` with this node's id, and commits. So id order
//! is commit order, and a reader that sees an id sees every id below it.
//!
//! Everything that enters this node's core from the database goes through
//! the writer thread in id order: before its own batch, the messages other
//! nodes committed between the last one it applied and the head its batch
//! read ([`CatchUp::Gap`]); on a notification (heard by `listen`), what
//! they committed and removed since ([`CatchUp::All`]). Change-log entries
//! older than `KEEP_CHANGES` are pruned; a node whose cursor fell behind
//! the pruned floor compares the ids it holds with the database's.

mod config;
mod listen;
pub mod order;
mod rows;
mod schema;
mod seen;
mod write;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mailjar_core::api::{Api, Change, FaultRecord, InboxRecord, Removal};
use mailjar_core::id::MessageId;
use mailjar_core::store::Email;
use postgres::{Client, IsolationLevel, NoTls, Statement};

use super::{CatchUp, LoadReport, Loaded, Opened, Record, Remote, Storage, StorageError, writer};
use rows::{COLUMNS, decode, id_bytes, id_of};

/// Rows fetched per catch-up or load step, at most.
const BATCH_ROWS: i64 = 1000;

/// Raw bytes (as stored) fetched per catch-up or load step, at most (one larger message goes alone).
const BATCH_BYTES: i64 = 8 * 1024 * 1024;

/// Change-log entries kept: older ones are pruned (a node that fell further
/// behind compares the ids it holds with the database's).
const KEEP_CHANGES: i64 = 100_000;

/// How often, in write transactions, the change log is pruned.
const PRUNE_EVERY: u32 = 1000;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The least pause between two connection attempts of the writer.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// The engine: its connection (None while the database is unreachable)
/// and how far this node's core has applied the service's history.
pub struct Postgres {
    config: postgres::Config,
    /// The URL without its password, as logs and `/health` show it.
    url: String,
    /// This node's id: its commits' `NOTIFY` payload and change-log entries.
    node: String,
    /// The connection and its prepared statements.
    connection: Option<Connection>,
    tried_at: Option<Instant>,
    /// The greatest id this node's core has applied.
    applied: Option<MessageId>,
    /// The last change-log entry applied.
    applied_seq: i64,
    /// After a write: the head it read, while the gap below it is not applied yet.
    gap: Option<MessageId>,
    /// The last id of the batch written last, applied once the gap is.
    own: Option<MessageId>,
    /// The greatest id ever committed, as of the last write or load.
    head: Option<MessageId>,
    /// The greatest UID ever given, as of the load.
    head_uid: u32,
    /// The service's UIDVALIDITY (`mailjar_head.uid_validity`), read at load.
    uid_validity: u32,
    writes: u32,
    /// The shared inboxes and fault rules as this node last knew them.
    known: config::Known,
    /// The greatest `config_seq` a write transaction read (beyond `known.seq`: read them again).
    config_seen: i64,
}

fn failed(e: impl std::fmt::Display) -> StorageError {
    StorageError(format!("the database: {e}"))
}

/// A client error with the server's own message when it has one ("db error" alone says nothing).
fn pg(e: postgres::Error) -> StorageError {
    match e.as_db_error() {
        Some(db) => failed(format!("{} ({})", db.message(), db.code().code())),
        None => failed(&e),
    }
}

/// `url` without its password.
fn shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(None);
            }
            parsed.to_string()
        }
        Err(_) => "(an unreadable URL)".to_owned(),
    }
}

/// A random id for this node.
fn node_id() -> String {
    let mut bytes = [0u8; 6];
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Postgres {
    /// Connects to `url` and migrates its schema.
    pub fn open(url: &str) -> Result<Postgres, StorageError> {
        let shown = shown(url);
        let mut config = postgres::Config::from_str(url)
            .map_err(|e| StorageError(format!("--database {shown}: {e}")))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("mailjar");
        let mut client = config
            .connect(NoTls)
            .map_err(|e| StorageError(format!("cannot connect to the database {shown}: {e}")))?;
        schema::migrate(&mut client, &shown)?;
        let connection = Connection::prepare(client).map_err(pg)?;
        Ok(Postgres {
            config,
            url: shown,
            node: node_id(),
            connection: Some(connection),
            tried_at: None,
            applied: None,
            applied_seq: 0,
            gap: None,
            own: None,
            head: None,
            head_uid: 0,
            uid_validity: 1,
            writes: 0,
            known: config::Known::default(),
            config_seen: 0,
        })
    }

    /// The connection, reconnecting (at most every [`RECONNECT_PAUSE`]) after a failure.
    fn connection(&mut self) -> Result<&mut Connection, StorageError> {
        if self
            .connection
            .as_ref()
            .is_some_and(|c| c.client.is_closed())
        {
            self.connection = None;
        }
        if self.connection.is_none() {
            if self
                .tried_at
                .is_some_and(|at| at.elapsed() < RECONNECT_PAUSE)
            {
                return Err(failed("unreachable; reconnecting"));
            }
            self.tried_at = Some(Instant::now());
            let client = self.config.connect(NoTls).map_err(pg)?;
            let connection = Connection::prepare(client).map_err(pg)?;
            tracing::info!("{}: connected again", self.url);
            self.connection = Some(connection);
        }
        self.connection
            .as_mut()
            .ok_or_else(|| failed("no connection"))
    }

    /// Runs `f` on the connection; a failure that closed it drops it (the next call reconnects).
    fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Client, &Statements, &str) -> Result<T, postgres::Error>,
    ) -> Result<T, StorageError> {
        let node = self.node.clone();
        let connection = self.connection()?;
        let result = f(&mut connection.client, &connection.statements, &node);
        if result.is_err() && connection.client.is_closed() {
            self.connection = None;
        }
        result.map_err(pg)
    }
}

/// A connection to the database and the statements prepared on it.
struct Connection {
    client: Client,
    statements: Statements,
}

/// The statements a node runs most, prepared once per connection (so the
/// server parses and plans them once).
struct Statements {
    /// A write transaction ([`write::batch`]).
    write: Statement,
    /// The next rows of a catch-up ([`next_rows`]).
    next_rows: Statement,
}

impl Connection {
    /// Prepares the statements on a new connection.
    fn prepare(mut client: Client) -> Result<Connection, postgres::Error> {
        let statements = Statements {
            write: write::prepare(&mut client)?,
            next_rows: client.prepare(&NEXT_ROWS)?,
        };
        Ok(Connection { client, statements })
    }
}

/// An id from its 32 hex digits.
fn hex_id(hex: &str) -> Option<MessageId> {
    (hex.len() == 32)
        .then(|| u128::from_str_radix(hex, 16).ok())
        .flatten()
        .map(MessageId::from_u128)
}

/// The rows after `$1` (up to `$2` if not NULL), in id order: at most
/// `$3` (the statement's [`BATCH_ROWS`]), and at most `$4` ([`BATCH_BYTES`])
/// of raw bytes unless the first alone is more; each with how many rows
/// the first bound allowed (`n`). The byte bound is counted on the stored
/// sizes (TOAST headers only), so the raw bytes of the rows past it are never read.
static NEXT_ROWS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {COLUMNS}, n FROM ( \
           SELECT m.*, count(*) OVER () AS n, row_number() OVER w AS rn, \
             sum(pg_column_size(m.raw)) OVER w AS running \
           FROM (SELECT * FROM mailjar_messages WHERE id > $1 \
                 AND ($2::bytea IS NULL OR id <= $2) ORDER BY id LIMIT $3) m \
           WINDOW w AS (ORDER BY m.id)) t \
         WHERE rn = 1 OR running <= $4 ORDER BY id"
    )
});

/// The rows after `applied` (up to `upto`), in id order (see [`NEXT_ROWS`]);
/// and whether more rows may follow. One statement, prepared.
fn next_rows(
    client: &mut impl postgres::GenericClient,
    statements: &Statements,
    applied: &[u8],
    upto: Option<&[u8]>,
) -> Result<(Vec<postgres::Row>, bool), postgres::Error> {
    let rows = client.query(
        &statements.next_rows,
        &[&applied, &upto, &BATCH_ROWS, &BATCH_BYTES],
    )?;
    let seen: i64 = rows.first().map_or(0, |r| r.get("n"));
    let more = seen == BATCH_ROWS || (rows.len() as i64) < seen;
    Ok((rows, more))
}

/// Drops change-log entries beyond the last `KEEP_CHANGES`, remembering how far.
fn prune(client: &mut Client) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::ORDER_LOCK])?;
    let floor: Option<i64> = tx
        .query_one(
            "SELECT max(seq) - $1 FROM mailjar_changes",
            &[&KEEP_CHANGES],
        )?
        .get(0);
    if let Some(floor) = floor.filter(|f| *f > 0) {
        tx.execute("DELETE FROM mailjar_changes WHERE seq <= $1", &[&floor])?;
        tx.execute(
            "UPDATE mailjar_head SET pruned_seq = greatest(pruned_seq, $1)",
            &[&floor],
        )?;
    }
    tx.commit()
}

impl Postgres {
    /// One write transaction ([`write::batch`]): `records` keep their ids,
    /// or else `emails` are numbered after the head. Returns the head it read.
    fn transact(
        &mut self,
        emails: &mut [&mut Email],
        records: &[Record<'_>],
        removals: &[Removal],
    ) -> Result<Option<MessageId>, StorageError> {
        let node = self.node.clone();
        let exact = emails.is_empty();
        let Connection { client, statements } = self.connection()?;
        let call = &statements.write;
        let result = if exact {
            write::batch(client, call, &node, records, removals, true)
        } else {
            let proposed: Vec<Record<'_>> = emails.iter().map(|e| Record::of(e)).collect();
            write::batch(client, call, &node, &proposed, removals, false)
        };
        if result.is_err() && client.is_closed() {
            self.connection = None;
        }
        let written = result.map_err(|e| match e {
            write::WriteError::Database(e) => pg(e),
            write::WriteError::Returned(e) => failed(e),
        })?;
        if !exact {
            written.number(emails).map_err(failed)?;
        }
        self.config_seen = self.config_seen.max(written.config_seq);
        self.writes = self.writes.wrapping_add(1);
        if self.writes.is_multiple_of(PRUNE_EVERY)
            && let Err(e) = self.with(|client, _, _| prune(client))
        {
            tracing::warn!("{}: pruning the change log: {e}", self.url);
        }
        Ok(written.head)
    }

    /// After a committed batch whose last id is `own` and whose transaction
    /// read `head`: either it follows what the core applied (it goes in at
    /// once), or the gap below `head` is fetched first.
    fn committed(&mut self, head: Option<MessageId>, own: Option<MessageId>) {
        let Some(own) = own else { return };
        self.head = Some(own);
        match order::gap(self.applied, head) {
            None => self.applied = Some(own),
            Some((_, upto)) => {
                self.gap = Some(upto);
                self.own = Some(own);
            }
        }
    }

    /// The next rows after the applied id (up to `upto`), and with `changes`
    /// the change log since the last entry applied, in one snapshot.
    fn fetch(&mut self, upto: Option<MessageId>, changes: bool) -> Result<Remote, StorageError> {
        let applied = self.applied.map(id_bytes).unwrap_or_default();
        let upto = upto.map(id_bytes);
        let applied_seq = self.applied_seq;
        let known_seq = self.known.seq;
        let ((rows, more), log, pruned, shared) = self.with(|client, statements, node| {
            if !changes {
                // Rows alone: one statement is one snapshot.
                let rows = next_rows(client, statements, &applied, upto.as_deref())?;
                return Ok((rows, Vec::new(), 0, None));
            }
            // The rows and the change log in one snapshot.
            let mut tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let rows = next_rows(&mut tx, statements, &applied, upto.as_deref())?;
            // Entries are pruned only beyond the last 100,000: while some
            // were, there are rows here to carry the floor.
            let log = tx.query(
                "SELECT seq, first_id, last_id, node = $2, \
                 (SELECT pruned_seq FROM mailjar_head) FROM mailjar_changes \
                 WHERE seq > $1 ORDER BY seq LIMIT $3",
                &[&applied_seq, &node, &(BATCH_ROWS * 10)],
            )?;
            let pruned: i64 = log.first().map_or(0, |r| r.get(4));
            // The inboxes and rules, when another change was made since this node last read them.
            let seq: i64 = tx
                .query_one("SELECT config_seq FROM mailjar_head", &[])?
                .get(0);
            let shared = if seq > known_seq {
                Some((config::load(&mut tx)?, seen::since(&mut tx, known_seq)?))
            } else {
                None
            };
            tx.commit()?;
            Ok((rows, log, pruned, shared))
        })?;
        let mut remote = Remote {
            more: more || log.len() as i64 == BATCH_ROWS * 10,
            ..Remote::default()
        };
        if let Some((shared, seen)) = shared {
            self.learn(shared.map_err(failed)?, seen, &mut remote);
        }
        if changes && pruned > self.applied_seq {
            tracing::warn!(
                "{}: this node fell behind the pruned change log; removals it missed are found by comparing ids",
                self.url
            );
            remote.removed = self.missing()?;
            self.applied_seq = pruned;
        }
        for row in &log {
            self.applied_seq = row.get(0);
            let own: bool = row.get(3);
            let ids = (id_of(row.get(1)), id_of(row.get(2)));
            if let (false, (Some(first), Some(last))) = (own, ids) {
                remote.removed.push(if first == last {
                    Removal::One(first)
                } else {
                    Removal::Range { first, last }
                });
            }
        }
        for row in &rows {
            let loaded = decode(row).map_err(failed)?;
            self.applied = Some(loaded.id);
            remote.rows.push(loaded);
        }
        Ok(remote)
    }

    /// Takes what the database holds of the inboxes and rules now, and hands
    /// the core (through `remote`) what changed since this node last knew.
    fn learn(&mut self, now: config::Known, seen: Vec<(MessageId, bool)>, remote: &mut Remote) {
        remote.seen = seen;
        remote.inboxes = config::inbox_changes(&self.known.inboxes, &now.inboxes);
        remote.faults = config::fault_changes(&self.known.faults, &now.faults);
        self.config_seen = self.config_seen.max(now.seq);
        self.known = now;
    }

    /// Reads the inboxes and rules again when a write saw another change to them.
    fn learn_seen(&mut self, remote: &mut Remote) -> Result<(), StorageError> {
        if self.config_seen <= self.known.seq {
            return Ok(());
        }
        let known_seq = self.known.seq;
        let now = self.with(|client, _, _| {
            let mut tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let now = config::load(&mut tx)?;
            let seen = seen::since(&mut tx, known_seq)?;
            tx.commit()?;
            Ok((now, seen))
        })?;
        self.learn(now.0.map_err(failed)?, now.1, remote);
        Ok(())
    }

    /// Every id up to the applied one the database no longer holds, as
    /// ranges between the ones it does: what a node that fell behind the
    /// pruned change log removes (ranges of ids it does not hold remove nothing).
    fn missing(&mut self) -> Result<Vec<Removal>, StorageError> {
        let applied = self.applied.map(id_bytes).unwrap_or_default();
        let held = self.with(|client, _, _| {
            client.query(
                "SELECT id FROM mailjar_messages WHERE id <= $1 ORDER BY id",
                &[&applied],
            )
        })?;
        let held: Vec<MessageId> = held.iter().filter_map(|r| id_of(r.get(0))).collect();
        let mut removed = Vec::new();
        let mut from = MessageId::from_u128(0);
        for id in held.iter().copied().chain(self.applied.map(order::after)) {
            if from < id {
                // Everything strictly between two held ids.
                let last = MessageId::from_u128(id.as_u128() - 1);
                removed.push(Removal::Range { first: from, last });
            }
            from = order::after(id);
        }
        Ok(removed)
    }
}

impl Storage for Postgres {
    fn write(&mut self, records: &[Record<'_>], removals: &[Removal]) -> Result<(), StorageError> {
        let head = self.transact(&mut [], records, removals)?;
        self.committed(head, records.last().map(|r| r.id));
        Ok(())
    }

    fn write_emails(
        &mut self,
        emails: &mut [&mut Email],
        removals: &[Removal],
    ) -> Result<(), StorageError> {
        let head = self.transact(emails, &[], removals)?;
        self.committed(head, emails.last().map(|e| e.id));
        Ok(())
    }

    fn catch_up(&mut self, mode: CatchUp) -> Result<Remote, StorageError> {
        match mode {
            CatchUp::Gap => {
                let mut config = Remote::default();
                if let Err(e) = self.learn_seen(&mut config) {
                    if self.gap.is_none() {
                        // The batch is applied already: it goes in, and the next catch-up reads them.
                        return Ok(Remote::default());
                    }
                    self.gap = None;
                    self.own = None;
                    return Err(e);
                }
                let Some(upto) = self.gap else {
                    return Ok(config);
                };
                let fetched = self.fetch(Some(upto), false);
                let mut remote = match fetched {
                    Ok(remote) => remote,
                    Err(e) => {
                        // The batch stays out of the core until a catch-up brings it.
                        self.gap = None;
                        self.own = None;
                        return Err(e);
                    }
                };
                if !remote.more {
                    self.gap = None;
                    self.applied = self.applied.max(self.own.take());
                }
                remote.more = self.gap.is_some();
                remote.inboxes = config.inboxes;
                remote.faults = config.faults;
                remote.seen = config.seen;
                Ok(remote)
            }
            CatchUp::Past(id) => {
                if self.applied >= Some(id) && self.config_seen <= self.known.seq {
                    return Ok(Remote::default());
                }
                self.fetch(None, true)
            }
            CatchUp::All => self.fetch(None, true),
        }
    }

    fn load(&mut self, each: &mut dyn FnMut(Vec<Loaded>)) -> Result<LoadReport, StorageError> {
        let (seq, head, uid, uid_validity) = self.with(|client, _, _| {
            let row = client.query_one(
                "SELECT (SELECT coalesce(max(seq), 0) FROM mailjar_changes), id, uid, uid_validity \
                 FROM mailjar_head",
                &[],
            )?;
            Ok((
                row.get::<_, i64>(0),
                row.get::<_, Option<Vec<u8>>>(1),
                row.get::<_, i64>(2),
                row.get::<_, i64>(3),
            ))
        })?;
        // Changes logged before the rows are read are in them already.
        self.applied_seq = seq;
        self.head = head.as_deref().and_then(id_of);
        self.head_uid = u32::try_from(uid).unwrap_or(u32::MAX);
        self.uid_validity = u32::try_from(uid_validity).unwrap_or(1);
        loop {
            let remote = self.fetch(None, false)?;
            let more = remote.more;
            if !remote.rows.is_empty() {
                each(remote.rows);
            }
            if !more {
                return Ok(LoadReport::default());
            }
        }
    }

    fn size(&self) -> u64 {
        0
    }

    fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::from_iter([
            ("kind".to_owned(), "postgres".into()),
            ("url".to_owned(), self.url.clone().into()),
            ("node".to_owned(), self.node.clone().into()),
        ])
    }

    fn id_floor(&self) -> Option<MessageId> {
        self.head
    }

    fn uid_floor(&self) -> u32 {
        self.head_uid
    }

    fn uid_validity(&self) -> Option<u32> {
        Some(self.uid_validity)
    }

    fn save_inboxes(&mut self, records: &[InboxRecord]) -> Result<(), StorageError> {
        let changes = config::inbox_changes(&self.known.inboxes, records);
        if changes.is_empty() {
            return Ok(());
        }
        self.with(|client, _, node| config::save_inboxes(client, node, &changes))?;
        self.known.inboxes = records.to_vec();
        Ok(())
    }

    fn set_seen(&mut self, changes: &[(MessageId, bool)]) -> Result<(), StorageError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.with(|client, _, node| seen::save(client, node, changes))
    }

    fn save_faults(&mut self, records: &[FaultRecord]) -> Result<(), StorageError> {
        let changes = config::fault_changes(&self.known.faults, records);
        if changes.is_empty() {
            return Ok(());
        }
        self.with(|client, _, node| config::save_faults(client, node, &changes))?;
        self.known.faults = records.to_vec();
        Ok(())
    }

    fn load_inboxes(&mut self) -> Result<Vec<InboxRecord>, StorageError> {
        let known = self
            .with(|client, _, _| config::load(client))?
            .map_err(failed)?;
        self.config_seen = known.seq;
        self.known = known;
        Ok(self.known.inboxes.clone())
    }
}

/// Connects to `url`, migrates it, loads every message into `api` in id
/// order (applying this node's limits), has `/health` report it, and logs
/// what it did; the listener starts with the writer.
pub fn open<W: Send>(url: &str, api: &mut Api<W>, now_ms: u64) -> Result<Opened, StorageError> {
    // The blocking client drives its connection on a runtime of its own,
    // which cannot be entered from a thread of the server's: a plain thread.
    std::thread::scope(|scope| {
        scope
            .spawn(|| open_here(url, api, now_ms))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn open_here<W>(url: &str, api: &mut Api<W>, now_ms: u64) -> Result<Opened, StorageError> {
    let started = Instant::now();
    let mut storage = Postgres::open(url)?;
    super::restore_inboxes(&mut storage, api)?;
    // The rules every node shares; this node names its new ones apart.
    api.set_fault_id_prefix(&format!("{}-", storage.node));
    let rules = storage
        .known
        .faults
        .iter()
        .cloned()
        .map(Change::Put)
        .collect();
    for e in api.handle_fault_changes(rules) {
        tracing::warn!("a stored fault rule: {e}");
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = super::load_into(&mut storage, api, now_ms, threads)?;
    if !load.removals.is_empty() {
        storage.write(&[], &load.removals)?;
    }
    tracing::info!(
        "loaded {} messages from {} in {} ms (node {})",
        api.store().len(),
        storage.url,
        started.elapsed().as_millis(),
        storage.node
    );
    let status = Arc::new(writer::Status::default());
    super::report(api, &storage, status.clone(), 0);
    let (config, node, shown) = (
        storage.config.clone(),
        storage.node.clone(),
        storage.url.clone(),
    );
    Ok(Opened {
        storage: Box::new(storage),
        status,
        listen: Some(Box::new(move |jobs| {
            listen::spawn(config, node, shown, jobs)
        })),
    })
}
