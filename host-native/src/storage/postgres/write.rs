//! A node's write transaction as one call of `mailjar_write` (schema 5),
//! the server-side function that takes the order lock, reads the head,
//! numbers the batch after it (as [`super::order::assign`] does), inserts
//! it, deletes the removals (logging what it deleted), moves the head and
//! notifies.
//!
//! Why a function: commits are serialised by the order lock, so the
//! service's ingest is one over the time a batch holds it. Taken by the
//! node (lock and head in one round trip, the rows in a second), the lock is
//! held across a round trip, and on a busy machine the node's thread and the
//! server's backend each wait for a time slice in it. Taken inside the
//! statement, it is held for the server's work and the commit alone.
//!
//! The call is a statement prepared once per connection, its values bound
//! in binary, and runs alone in its own transaction: one round trip, no
//! text for the server to parse, and nothing a client sent ever in SQL text.

use mailjar_core::api::Removal;
use mailjar_core::id::MessageId;
use mailjar_core::store::Email;
use postgres::{Client, Statement};

use super::rows::{Columns, id_bytes, id_of};
use crate::storage::Record;

/// The call, its values bound: the batch's columns, the node, whether its
/// ids are kept (else proposals), and the removals' first and last ids.
/// It returns the head it read, `config_seq`, the ids it gave, and the
/// receive time and UID its messages were numbered after.
const CALL: &str = "SELECT o_head, o_config_seq, o_ids, o_received_floor, o_uid_floor \
     FROM mailjar_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// Prepares [`CALL`] on a new connection.
pub(super) fn prepare(client: &mut Client) -> Result<Statement, postgres::Error> {
    client.prepare(CALL)
}

/// What `mailjar_write` did with a batch: the head it read under the lock
/// and what it gave the messages.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Written {
    /// The greatest id committed before this batch.
    pub(super) head: Option<MessageId>,
    /// The head's `config_seq`, as read under the lock.
    pub(super) config_seq: i64,
    /// The ids given, in the batch's order.
    pub(super) ids: Vec<MessageId>,
    /// No message is received before this (the head's receive time).
    pub(super) received_floor: u64,
    /// The UIDs given follow this one.
    pub(super) uid_floor: u32,
}

impl Written {
    /// Reads the call's row.
    fn read(row: &postgres::Row) -> Result<Written, String> {
        let bad = |e: postgres::Error| format!("mailjar_write returned {e}");
        let id =
            |bytes: &[u8]| id_of(bytes).ok_or("mailjar_write returned an id that is not 16 bytes");
        let head: Option<&[u8]> = row.try_get(0).map_err(bad)?;
        let ids: Vec<&[u8]> = row.try_get(2).map_err(bad)?;
        let received: i64 = row.try_get(3).map_err(bad)?;
        let uid: i64 = row.try_get(4).map_err(bad)?;
        Ok(Written {
            head: head.map(id).transpose()?,
            config_seq: row.try_get(1).map_err(bad)?,
            ids: ids.into_iter().map(id).collect::<Result<_, _>>()?,
            received_floor: u64::try_from(received).unwrap_or(0),
            uid_floor: u32::try_from(uid).unwrap_or(u32::MAX),
        })
    }

    /// Gives `emails` what the call gave their rows: ids, receive times no
    /// earlier than the head's, UIDs after the head's.
    pub(super) fn number(&self, emails: &mut [&mut Email]) -> Result<(), String> {
        if self.ids.len() != emails.len() {
            return Err(format!(
                "mailjar_write numbered {} messages of {}",
                self.ids.len(),
                emails.len()
            ));
        }
        for (n, (email, id)) in (1u32..).zip(emails.iter_mut().zip(&self.ids)) {
            email.id = *id;
            email.received_at_ms = email.received_at_ms.max(self.received_floor);
            email.set_uid(self.uid_floor.saturating_add(n));
        }
        Ok(())
    }
}

/// Why [`batch`] failed.
#[derive(Debug)]
pub(super) enum WriteError {
    /// The database refused or the connection failed.
    Database(postgres::Error),
    /// It answered with something this node cannot read.
    Returned(String),
}

/// Writes `records` and deletes `removals` in one transaction (`call` is
/// [`CALL`] prepared on `client`); what it returned. With `exact` the
/// records keep their ids and receive times (the call fails if an id would
/// not sort after the head), else their ids are proposals.
pub(super) fn batch(
    client: &mut Client,
    call: &Statement,
    node: &str,
    records: &[Record<'_>],
    removals: &[Removal],
    exact: bool,
) -> Result<Written, WriteError> {
    let c = Columns::of(records);
    let (firsts, lasts): (Vec<Vec<u8>>, Vec<Vec<u8>>) = removals
        .iter()
        .map(|removal| match *removal {
            Removal::One(id) => (id_bytes(id), id_bytes(id)),
            Removal::Range { first, last } => (id_bytes(first), id_bytes(last)),
        })
        .unzip();
    let row = client
        .query_one(
            call,
            &[
                &c.ids,
                &c.received,
                &c.senders,
                &c.recipients,
                &c.smtp,
                &c.raw,
                &c.transcripts,
                &node,
                &exact,
                &firsts,
                &lasts,
            ],
        )
        .map_err(WriteError::Database)?;
    Written::read(&row).map_err(WriteError::Returned)
}
