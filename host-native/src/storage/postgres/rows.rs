//! A message as a row of `mailjar_messages`, and back. Text a client sent
//! (envelope, HELO) is kept as JSON text, whose escapes carry any character
//! (PostgreSQL's `text` refuses NUL); the message and its transcript are `bytea`.

use mailjar_core::id::MessageId;
use mailjar_core::smtp::{AuthInfo, Envelope, Incoming, SessionFacts, TlsInfo, Transcript};

use serde_json::{Value, json};

use crate::storage::{Loaded, Record};

/// The columns [`decode`] reads, in its order.
pub(super) const COLUMNS: &str =
    "id, received_ms, sender, recipients, smtp, raw, transcript, uid, seen";

/// An id as the database holds it: 16 bytes, big-endian, so bytes sort as ids do.
pub(super) fn id_bytes(id: MessageId) -> Vec<u8> {
    id.as_u128().to_be_bytes().to_vec()
}

/// The id [`id_bytes`] wrote; None for another length.
pub(super) fn id_of(bytes: &[u8]) -> Option<MessageId> {
    let bytes = <[u8; 16]>::try_from(bytes).ok()?;
    Some(MessageId::from_u128(u128::from_be_bytes(bytes)))
}

/// A batch's columns, as `mailjar_write` takes them.
#[derive(Default)]
pub(super) struct Columns<'a> {
    pub(super) ids: Vec<Vec<u8>>,
    pub(super) received: Vec<i64>,
    pub(super) senders: Vec<String>,
    pub(super) recipients: Vec<String>,
    pub(super) smtp: Vec<String>,
    pub(super) raw: Vec<&'a [u8]>,
    pub(super) transcripts: Vec<&'a [u8]>,
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
