//! The seen flag every reader shares: `mailjar_messages.seen`, and its
//! `seen_seq`, the `config_seq` of the change that last set it.
//!
//! A change takes the order lock, moves `config_seq` (so the other nodes'
//! next write or catch-up notices it, as for inboxes and rules), stamps the
//! rows with it and notifies. A node that reads the inboxes and rules again
//! reads with them, in the same snapshot, the flags of the rows stamped
//! since it last did; the core applies those without writing them back.

use mailjar_core::id::MessageId;
use postgres::GenericClient;

use super::rows::{id_bytes, id_of};
use super::schema::ORDER_LOCK;

/// Writes these flags in one transaction that moves `config_seq` and notifies the others.
pub(super) fn save(
    client: &mut postgres::Client,
    node: &str,
    changes: &[(MessageId, bool)],
) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ORDER_LOCK])?;
    let seq: i64 = tx
        .query_one(
            "UPDATE mailjar_head SET config_seq = config_seq + 1 RETURNING config_seq",
            &[],
        )?
        .get(0);
    for flag in [true, false] {
        let ids: Vec<Vec<u8>> = changes
            .iter()
            .filter(|(_, seen)| *seen == flag)
            .map(|(id, _)| id_bytes(*id))
            .collect();
        if !ids.is_empty() {
            tx.execute(
                "UPDATE mailjar_messages SET seen = $1, seen_seq = $2 WHERE id = ANY($3)",
                &[&flag, &seq, &ids],
            )?;
        }
    }
    tx.execute("SELECT pg_notify('mailjar', $1)", &[&node])?;
    tx.commit()
}

/// The flags of the rows a change stamped after `config_seq` `since`.
pub(super) fn since(
    client: &mut impl GenericClient,
    since: i64,
) -> Result<Vec<(MessageId, bool)>, postgres::Error> {
    let rows = client.query(
        "SELECT id, seen FROM mailjar_messages WHERE seen_seq > $1",
        &[&since],
    )?;
    Ok(rows
        .iter()
        .filter_map(|r| Some((id_of(r.get(0))?, r.get(1))))
        .collect())
}
