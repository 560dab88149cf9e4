//! The `inboxes` table: each inbox's name, patterns, quotas and the
//! SHA-256 digests of its token and SMTP password (never the secrets).
//! Written whole after each change (a few rows: inboxes are made by hand),
//! read back at start.

use mailjar_core::api::Digest32;
use mailjar_core::api::{InboxLimits, InboxRecord};
use rusqlite::{Connection, params};

/// Replaces the stored inboxes with `records`, in one transaction.
pub(super) fn save(connection: &Connection, records: &[InboxRecord]) -> rusqlite::Result<()> {
    let tx = connection.unchecked_transaction()?;
    tx.execute("DELETE FROM inboxes", [])?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO inboxes (position, name, addresses, limits, token, smtp_password)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (position, record) in records.iter().enumerate() {
            let addresses = serde_json::to_string(&record.addresses).unwrap_or_default();
            let limits = serde_json::to_string(&record.limits).unwrap_or_default();
            insert.execute(params![
                position as i64,
                record.name,
                addresses,
                limits,
                &record.token.0[..],
                &record.smtp_password.0[..],
            ])?;
        }
    }
    tx.commit()
}

/// The stored inboxes, in creation order; a row that does not decode is an error naming it.
pub(super) fn load(connection: &Connection) -> Result<Vec<InboxRecord>, String> {
    let mut select = connection
        .prepare(
            "SELECT name, addresses, limits, token, smtp_password FROM inboxes ORDER BY position",
        )
        .map_err(|e| e.to_string())?;
    let rows = select
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Vec<u8>>(3)?,
                r.get::<_, Vec<u8>>(4)?,
            ))
        })
        .map_err(|e| e.to_string())?;
    let mut records = Vec::new();
    for row in rows {
        let (name, addresses, limits, token, password) = row.map_err(|e| e.to_string())?;
        let bad = |what: &str| format!("the stored inbox {name:?} has {what}");
        let addresses: Vec<String> =
            serde_json::from_str(&addresses).map_err(|_| bad("unreadable addresses"))?;
        let limits: InboxLimits =
            serde_json::from_str(&limits).map_err(|_| bad("unreadable limits"))?;
        let digest = |bytes: Vec<u8>| <[u8; 32]>::try_from(bytes).map(Digest32);
        let token = digest(token).map_err(|_| bad("a token digest that is not 32 bytes"))?;
        let smtp_password =
            digest(password).map_err(|_| bad("a password digest that is not 32 bytes"))?;
        records.push(InboxRecord {
            name,
            addresses,
            limits,
            token,
            smtp_password,
        });
    }
    Ok(records)
}
