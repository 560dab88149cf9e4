//! The inboxes and fault rules every node shares: `mailjar_inboxes` and
//! `mailjar_faults`, and `mailjar_head.config_seq`, which every change moves.
//!
//! A node writes only what it changed: the difference between what its core
//! holds now and what it last knew of the database ([`Known`]), each inbox
//! or rule a row of its own, so that changes two nodes make at once to
//! different inboxes or rules both stay. A change takes the order lock,
//! moves `config_seq` and notifies the other nodes in its transaction. A
//! node that sees `config_seq` move (under the lock of its own write, or in
//! the snapshot of a catch-up) reads both tables and hands its core what
//! changed since it last knew: before the rows of that catch-up, so that
//! the messages committed after a change are routed with it on every node.

use mailjar_core::api::{Change, Digest32, FaultRecord, InboxLimits, InboxRecord};
use postgres::GenericClient;

use super::schema::ORDER_LOCK;

/// What this node last knew of the shared inboxes and rules, and the change it knew of.
#[derive(Debug, Default)]
pub(super) struct Known {
    pub(super) inboxes: Vec<InboxRecord>,
    pub(super) faults: Vec<FaultRecord>,
    /// The `config_seq` they are as of.
    pub(super) seq: i64,
}

/// What changed from `before` to `after`, by `key`: puts of what is new or
/// different, removals of what is gone. O(n) with a hash of the keys.
fn diff<T: Clone + PartialEq>(
    before: &[T],
    after: &[T],
    key: impl Fn(&T) -> &str,
) -> Vec<Change<T>> {
    let old: std::collections::HashMap<&str, &T> = before.iter().map(|t| (key(t), t)).collect();
    let new: std::collections::HashSet<&str> = after.iter().map(&key).collect();
    let mut changes: Vec<Change<T>> = before
        .iter()
        .filter(|t| !new.contains(key(t)))
        .map(|t| Change::Remove(key(t).to_owned()))
        .collect();
    changes.extend(
        after
            .iter()
            .filter(|t| old.get(key(t)).is_none_or(|o| *o != *t))
            .cloned()
            .map(Change::Put),
    );
    changes
}

/// What changed of the inboxes from `before` to `after`.
pub(super) fn inbox_changes(
    before: &[InboxRecord],
    after: &[InboxRecord],
) -> Vec<Change<InboxRecord>> {
    diff(before, after, |r| r.name.as_str())
}

/// What changed of the fault rules from `before` to `after`.
pub(super) fn fault_changes(
    before: &[FaultRecord],
    after: &[FaultRecord],
) -> Vec<Change<FaultRecord>> {
    diff(before, after, |r| r.id.as_str())
}

/// Writes these inbox changes in one transaction that moves `config_seq` and notifies the others.
pub(super) fn save_inboxes(
    client: &mut postgres::Client,
    node: &str,
    changes: &[Change<InboxRecord>],
) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ORDER_LOCK])?;
    for change in changes {
        match change {
            Change::Remove(name) => {
                tx.execute("DELETE FROM mailjar_inboxes WHERE name = $1", &[name])?;
            }
            Change::Put(r) => {
                let addresses = serde_json::to_string(&r.addresses).unwrap_or_default();
                let limits = serde_json::to_string(&r.limits).unwrap_or_default();
                tx.execute(
                    "INSERT INTO mailjar_inboxes (position, name, addresses, limits, token, smtp_password) \
                     VALUES ((SELECT coalesce(max(position), 0) + 1 FROM mailjar_inboxes), $1, $2, $3, $4, $5) \
                     ON CONFLICT (name) DO UPDATE SET addresses = excluded.addresses, \
                     limits = excluded.limits, token = excluded.token, smtp_password = excluded.smtp_password",
                    &[&r.name, &addresses, &limits, &&r.token.0[..], &&r.smtp_password.0[..]],
                )?;
            }
        }
    }
    moved(&mut tx, node)?;
    tx.commit()
}

/// Writes these fault rule changes in one transaction that moves `config_seq` and notifies the others.
pub(super) fn save_faults(
    client: &mut postgres::Client,
    node: &str,
    changes: &[Change<FaultRecord>],
) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ORDER_LOCK])?;
    for change in changes {
        match change {
            Change::Remove(id) => {
                tx.execute("DELETE FROM mailjar_faults WHERE id = $1", &[id])?;
            }
            Change::Put(r) => {
                tx.execute(
                    "INSERT INTO mailjar_faults (id, rule) VALUES ($1, $2) \
                     ON CONFLICT (id) DO UPDATE SET rule = excluded.rule",
                    &[&r.id, &r.json],
                )?;
            }
        }
    }
    moved(&mut tx, node)?;
    tx.commit()
}

/// Moves `config_seq` and notifies the other nodes.
fn moved(tx: &mut postgres::Transaction<'_>, node: &str) -> Result<(), postgres::Error> {
    tx.execute("UPDATE mailjar_head SET config_seq = config_seq + 1", &[])?;
    tx.execute("SELECT pg_notify('mailjar', $1)", &[&node])?;
    Ok(())
}

/// Reads `config_seq`, the inboxes (in creation order) and the fault rules,
/// best inside one snapshot (a repeatable-read transaction).
pub(super) fn load(
    client: &mut impl GenericClient,
) -> Result<Result<Known, String>, postgres::Error> {
    let seq: i64 = client
        .query_one("SELECT config_seq FROM mailjar_head", &[])?
        .get(0);
    let inbox_rows = client.query(
        "SELECT name, addresses, limits, token, smtp_password FROM mailjar_inboxes ORDER BY position",
        &[],
    )?;
    let fault_rows = client.query("SELECT id, rule FROM mailjar_faults ORDER BY position", &[])?;
    let inboxes = match inbox_rows
        .iter()
        .map(inbox)
        .collect::<Result<Vec<_>, String>>()
    {
        Ok(inboxes) => inboxes,
        Err(e) => return Ok(Err(e)),
    };
    let faults = fault_rows
        .iter()
        .map(|row| FaultRecord {
            id: row.get(0),
            json: row.get(1),
        })
        .collect();
    Ok(Ok(Known {
        inboxes,
        faults,
        seq,
    }))
}

/// An inbox row, or why it is not one.
fn inbox(row: &postgres::Row) -> Result<InboxRecord, String> {
    let name: String = row.get(0);
    let bad = |what: &str| format!("the stored inbox {name:?} has {what}");
    let addresses: Vec<String> =
        serde_json::from_str(row.get(1)).map_err(|_| bad("unreadable addresses"))?;
    let limits: InboxLimits =
        serde_json::from_str(row.get(2)).map_err(|_| bad("unreadable limits"))?;
    let digest = |bytes: Vec<u8>| <[u8; 32]>::try_from(bytes).map(Digest32);
    let token = digest(row.get(3)).map_err(|_| bad("a bad token digest"))?;
    let smtp_password = digest(row.get(4)).map_err(|_| bad("a bad password digest"))?;
    Ok(InboxRecord {
        name,
        addresses,
        limits,
        token,
        smtp_password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, json: &str) -> FaultRecord {
        FaultRecord {
            id: id.into(),
            json: json.into(),
        }
    }

    #[test]
    fn the_difference_is_what_is_new_changed_or_gone() {
        let before = [rule("1", "a"), rule("2", "b"), rule("3", "c")];
        let after = [rule("1", "a"), rule("3", "c2"), rule("4", "d")];
        assert_eq!(
            fault_changes(&before, &after),
            [
                Change::Remove("2".into()),
                Change::Put(rule("3", "c2")),
                Change::Put(rule("4", "d"))
            ]
        );
        assert!(fault_changes(&after, &after).is_empty());
    }
}
