//! A message as a row of `mailjar_messages`, and back. Text a client sent
//! (envelope, HELO) is kept as JSON text, whose escapes carry any character
//! (PostgreSQL's `text` refuses NUL); the message and its transcript are `bytea`.

use mailjar_core::id::MessageId;
use mailjar_core::smtp::{AuthInfo, Envelope, Incoming, SessionFacts, TlsInfo, Transcript};
use std::fmt::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::storage::{Loaded, Record};

/// The columns [`decode`] reads, in its order.
pub(super) const COLUMNS: &str =
    "id, received_ms, sender, recipients, smtp, raw, transcript, uid, seen";

/// Inserts a batch as arrays, one statement: `$1` ids, `$2` receive times,
/// `$3` senders, `$4` recipients, `$5` SMTP facts, `$6` raw, `$7` transcripts,
/// `$8` the node, `$9` UIDs.
pub(super) const INSERT: &str = "INSERT INTO mailjar_messages \
     (id, received_ms, sender, recipients, smtp, raw, transcript, uid, node) \
     SELECT u.*, $8::text FROM unnest($1::bytea[], $2::int8[], $3::text[], $4::text[], \
     $5::text[], $6::bytea[], $7::bytea[], $9::int8[]) AS u";

/// `INSERT` of a batch with its values written into the statement, the
/// head moved to its last message and `NOTIFY mailjar, payload`, for a
/// simple query (which can carry the `COMMIT` in the same round trip).
/// Every value that is not a number is base64 inside quotes and decoded by
/// the server (`decode(..., 'base64')`), so no text a client sent is ever
/// quoted by hand: base64 has no quote or backslash.
pub(super) fn insert_literal(records: &[Record<'_>], node: &str, payload: &str) -> String {
    let bytes = |b: &[u8]| format!("decode('{}', 'base64')", BASE64.encode(b));
    let text = |t: &str| format!("convert_from({}, 'UTF8')", bytes(t.as_bytes()));
    let raw: usize = records
        .iter()
        .map(|r| r.raw.len() + r.transcript.len())
        .sum();
    let mut sql = String::with_capacity(raw / 3 * 4 + records.len() * 400 + 400);
    sql.push_str(
        "WITH inserted AS (INSERT INTO mailjar_messages \
         (id, received_ms, sender, recipients, smtp, raw, transcript, uid, node) VALUES ",
    );
    let node_text = text(node);
    let c = Columns::of(records);
    for i in 0..records.len() {
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(
            sql,
            "({}, {}, {}, {}, {}, {}, {}, {}, {node_text})",
            bytes(&c.ids[i]),
            c.received[i],
            text(&c.senders[i]),
            text(&c.recipients[i]),
            text(&c.smtp[i]),
            bytes(c.raw[i]),
            bytes(c.transcripts[i]),
            c.uids[i],
        );
    }
    if let (Some(id), Some(received), Some(uid)) = (c.ids.last(), c.received.last(), c.uids.last())
    {
        let _ = write!(
            sql,
            "), head AS (UPDATE mailjar_head SET id = {}, received_ms = {received}, uid = {uid}) \
             SELECT pg_notify('mailjar', {})",
            bytes(id),
            text(payload)
        );
    }
    sql
}

/// An id as the database holds it: 16 bytes, big-endian, so bytes sort as ids do.
pub(super) fn id_bytes(id: MessageId) -> Vec<u8> {
    id.as_u128().to_be_bytes().to_vec()
}

/// The id [`id_bytes`] wrote; None for another length.
pub(super) fn id_of(bytes: &[u8]) -> Option<MessageId> {
    let bytes = <[u8; 16]>::try_from(bytes).ok()?;
    Some(MessageId::from_u128(u128::from_be_bytes(bytes)))
}

/// A batch's columns, as [`INSERT`] takes them and [`insert_literal`] writes them.
#[derive(Default)]
pub(super) struct Columns<'a> {
    pub(super) ids: Vec<Vec<u8>>,
    pub(super) received: Vec<i64>,
    pub(super) senders: Vec<String>,
    pub(super) recipients: Vec<String>,
    pub(super) smtp: Vec<String>,
    pub(super) raw: Vec<&'a [u8]>,
    pub(super) transcripts: Vec<&'a [u8]>,
    pub(super) uids: Vec<i64>,
}

impl<'a> Columns<'a> {
    /// The columns of `records`.
    pub(super) fn of(records: &[Record<'a>]) -> Columns<'a> {
        let mut c = Columns::default();
        for r in records {
            c.ids.push(id_bytes(r.id));
            c.received
                .push(i64::try_from(r.received_at_ms).unwrap_or(i64::MAX));
            c.senders
                .push(Value::from(r.envelope.from.as_str()).to_string());
            c.recipients.push(json!(r.envelope.to).to_string());
            let (tls, auth) = (r.smtp.tls.as_ref(), r.smtp.auth.as_ref());
            c.smtp.push(
                json!({
                    "helo": r.smtp.helo,
                    "remoteAddr": r.smtp.remote_addr,
                    "tls": tls.map(|t| json!({"version": t.version, "cipher": t.cipher})),
                    "auth": auth.map(|a| json!({"mechanism": a.mechanism, "username": a.username})),
                })
                .to_string(),
            );
            c.raw.push(r.raw);
            c.transcripts.push(r.transcript);
            c.uids.push(i64::from(r.uid));
        }
        c
    }
}

/// The message of a row of [`COLUMNS`], or why it does not decode.
pub(super) fn decode(row: &postgres::Row) -> Result<Loaded, String> {
    let bad = |what: &str| format!("a stored message has {what}");
    let id: &[u8] = row.try_get(0).map_err(|e| bad(&e.to_string()))?;
    let id = id_of(id).ok_or_else(|| bad("an id that is not 16 bytes"))?;
    let received: i64 = row.try_get(1).map_err(|e| bad(&e.to_string()))?;
    let text = |i: usize| -> Result<Value, String> {
        let s: &str = row.try_get(i).map_err(|e| bad(&e.to_string()))?;
        serde_json::from_str(s).map_err(|_| bad("a field that is not JSON"))
    };
    let from = text(2)?
        .as_str()
        .ok_or_else(|| bad("a sender that is not a string"))?
        .to_owned();
    let to: Vec<String> = serde_json::from_value(text(3)?)
        .map_err(|_| bad("recipients that are not a list of strings"))?;
    let smtp = text(4)?;
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let tls = smtp.get("tls").filter(|v| v.is_object()).map(|t| TlsInfo {
        version: field(t, "version").unwrap_or_default(),
        cipher: field(t, "cipher").unwrap_or_default(),
    });
    let auth = smtp
        .get("auth")
        .filter(|v| v.is_object())
        .map(|a| AuthInfo {
            mechanism: field(a, "mechanism").unwrap_or_default(),
            username: field(a, "username").unwrap_or_default(),
        });
    let raw: Vec<u8> = row.try_get(5).map_err(|e| bad(&e.to_string()))?;
    let transcript: Option<&[u8]> = row.try_get(6).map_err(|e| bad(&e.to_string()))?;
    let transcript = match transcript {
        None => Transcript::default(),
        Some(bytes) => {
            Transcript::from_bytes(bytes).ok_or_else(|| bad("a transcript that does not decode"))?
        }
    };
    let uid: i64 = row.try_get(7).map_err(|e| bad(&e.to_string()))?;
    Ok(Loaded {
        uid: u32::try_from(uid).map_err(|_| bad("a UID out of range"))?,
        seen: row.try_get(8).map_err(|e| bad(&e.to_string()))?,
        id,
        received_at_ms: u64::try_from(received).unwrap_or(0),
        incoming: Incoming {
            envelope: Envelope { from, to },
            raw,
            helo: field(&smtp, "helo"),
            session: SessionFacts {
                remote_addr: field(&smtp, "remoteAddr"),
                tls,
                auth,
            },
            transcript,
        },
    })
}
