//! A stored row: its fields as SQLite holds them, their checksum, and the
//! message they decode to.

use mailjar_core::id::MessageId;
use mailjar_core::smtp::{AuthInfo, Envelope, Incoming, SessionFacts, TlsInfo, Transcript};
use rusqlite::Row;
use rusqlite::types::ValueRef;

use crate::storage::Loaded;

/// The columns of a row, in the order [`Fields::read`] reads them.
pub(super) const COLUMNS: &str = "seq, id, received_ms, sender, recipients, helo, remote_addr, tls_version, \
                       tls_cipher, auth_mechanism, auth_username, raw, checksum, transcript, uid, seen";

pub(super) fn id_bytes(id: MessageId) -> [u8; 16] {
    id.as_u128().to_be_bytes()
}

/// The id [`id_bytes`] wrote; None for a blob of another length.
pub(super) fn id_of(bytes: &[u8]) -> Option<MessageId> {
    let bytes = <[u8; 16]>::try_from(bytes).ok()?;
    Some(MessageId::from_u128(u128::from_be_bytes(bytes)))
}

/// A row's fields as SQLite holds them (text as its bytes): what its checksum covers.
pub(super) struct Fields<'a> {
    pub(super) id: &'a [u8],
    pub(super) received_ms: i64,
    pub(super) sender: &'a [u8],
    /// The recipients as a JSON list.
    pub(super) recipients: &'a [u8],
    /// HELO, the remote address, the TLS version and cipher, the AUTH mechanism and user.
    pub(super) facts: [Option<&'a [u8]>; 6],
    pub(super) raw: &'a [u8],
    /// The SMTP transcript; rows of schemas before 5 have none (NULL).
    pub(super) transcript: Option<&'a [u8]>,
}

/// The bytes of a text or blob column, None for NULL; an error for a number.
fn bytes<'r>(row: &'r Row<'_>, column: usize) -> rusqlite::Result<Option<&'r [u8]>> {
    match row.get_ref(column)? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Ok(Some(bytes)),
        other => Err(rusqlite::Error::InvalidColumnType(
            column,
            "text or blob".into(),
            other.data_type(),
        )),
    }
}

/// Why a stored row is not served.
pub(super) struct Damage {
    pub(super) seq: i64,
    /// Its id, as far as it can be read.
    pub(super) id: String,
    pub(super) why: String,
}

impl<'r> Fields<'r> {
    /// Reads a row of [`COLUMNS`]: its `seq`, fields and stored checksum.
    pub(super) fn read(row: &'r Row<'_>) -> rusqlite::Result<(i64, Fields<'r>, Option<i64>)> {
        let required = |column| {
            bytes(row, column)?.ok_or(rusqlite::Error::InvalidColumnType(
                column,
                "not null".into(),
                rusqlite::types::Type::Null,
            ))
        };
        let fields = Fields {
            id: required(1)?,
            received_ms: row.get(2)?,
            sender: required(3)?,
            recipients: required(4)?,
            facts: [
                bytes(row, 5)?,
                bytes(row, 6)?,
                bytes(row, 7)?,
                bytes(row, 8)?,
                bytes(row, 9)?,
                bytes(row, 10)?,
            ],
            raw: required(11)?,
            // Schemas before 5 have no transcript (read when migrating to 3).
            transcript: if row.as_ref().column_count() > 13 {
                bytes(row, 13)?
            } else {
                None
            },
        };
        Ok((row.get(0)?, fields, row.get(12)?))
    }

    /// The CRC-32 of every field, each after its length (or a mark for none),
    /// so that no change moves bytes from one field to the next unseen.
    pub(super) fn checksum(&self) -> u32 {
        let mut crc = crc32fast::Hasher::new();
        let mut field = |bytes: Option<&[u8]>| match bytes {
            Some(bytes) => {
                crc.update(&(bytes.len() as u64).to_le_bytes());
                crc.update(bytes);
            }
            None => crc.update(&u64::MAX.to_le_bytes()),
        };
        field(Some(self.id));
        field(Some(&self.received_ms.to_le_bytes()));
        field(Some(self.sender));
        field(Some(self.recipients));
        for fact in self.facts {
            field(fact);
        }
        field(Some(self.raw));
        // Only when there is one: rows written before transcripts were kept keep their sums.
        if let Some(transcript) = self.transcript {
            field(Some(transcript));
        }
        crc.finalize()
    }

    /// The message, if its checksum is `stored` and every field decodes.
    pub(super) fn decode(&self, stored: Option<i64>) -> Result<Loaded, &'static str> {
        match stored {
            None => return Err("it has no checksum"),
            Some(sum) if sum != i64::from(self.checksum()) => {
                return Err("its checksum does not match its bytes");
            }
            Some(_) => {}
        }
        let id = id_of(self.id).ok_or("its id is not 16 bytes")?;
        let text = |bytes: &[u8]| {
            String::from_utf8(bytes.to_vec()).map_err(|_| "a text field is not UTF-8")
        };
        let to: Vec<String> = serde_json::from_slice(self.recipients)
            .map_err(|_| "its recipients are not a JSON list of strings")?;
        let [
            helo,
            remote_addr,
            tls_version,
            tls_cipher,
            auth_mechanism,
            auth_username,
        ] = self.facts.map(|fact| fact.map(text).transpose());
        Ok(Loaded {
            id,
            received_at_ms: u64::try_from(self.received_ms).unwrap_or(0),
            incoming: Incoming {
                envelope: Envelope {
                    from: text(self.sender)?,
                    to,
                },
                helo: helo?,
                session: SessionFacts {
                    remote_addr: remote_addr?,
                    tls: tls_version?
                        .zip(tls_cipher?)
                        .map(|(version, cipher)| TlsInfo { version, cipher }),
                    auth: auth_mechanism?
                        .zip(auth_username?)
                        .map(|(mechanism, username)| AuthInfo {
                            mechanism,
                            username,
                        }),
                },
                raw: self.raw.to_vec(),
                transcript: match self.transcript {
                    None => Transcript::default(),
                    Some(bytes) => {
                        Transcript::from_bytes(bytes).ok_or("its transcript does not decode")?
                    }
                },
            },
            // Not covered by the checksum: the engine reads them beside the fields.
            uid: 0,
            seen: false,
        })
    }
}

/// Inserts a row with every column of [`COLUMNS`].
pub(super) const INSERT: &str = "INSERT INTO messages (seq, id, received_ms, sender, recipients, helo, \
                      remote_addr, tls_version, tls_cipher, auth_mechanism, auth_username, raw, \
                      checksum, transcript, uid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(id: &'a [u8], raw: &'a [u8]) -> Fields<'a> {
        Fields {
            id,
            received_ms: 1000,
            sender: b"s@x.test",
            recipients: br#"["a@x.test"]"#,
            facts: [Some(b"client.test"), None, None, None, None, None],
            raw,
            transcript: None,
        }
    }

    #[test]
    fn the_checksum_is_the_crc_32_of_each_field_after_its_length() {
        let id: Vec<u8> = (0..16).collect();
        // zlib.crc32 over the same encoding in Python: rows already written
        // must keep matching whatever this code becomes.
        assert_eq!(
            sample(&id, b"Subject: x\r\n\r\nbody\r\n").checksum(),
            0x2b9d_7969
        );
    }

    #[test]
    fn a_change_to_any_field_changes_the_checksum() {
        let id = [7u8; 16];
        let raw = b"Subject: x\r\n\r\nbody\r\n";
        let base = sample(&id, raw).checksum();
        let flipped: Vec<u8> = raw.iter().map(|&b| b ^ 0x01).collect();
        let changes = [
            Fields {
                raw: &flipped,
                ..sample(&id, raw)
            },
            Fields {
                received_ms: 1001,
                ..sample(&id, raw)
            },
            Fields {
                sender: b"t@x.test",
                ..sample(&id, raw)
            },
            Fields {
                recipients: br#"["b@x.test"]"#,
                ..sample(&id, raw)
            },
            Fields {
                facts: [None; 6],
                ..sample(&id, raw)
            },
            Fields {
                facts: [Some(b""), None, None, None, None, None],
                ..sample(&id, raw)
            },
            // A byte moved from one field to the next.
            Fields {
                sender: b"s@x.tes",
                recipients: br#"t["a@x.test"]"#,
                ..sample(&id, raw)
            },
            Fields {
                id: &[7u8; 15],
                ..sample(&id, raw)
            },
        ];
        for (i, changed) in changes.iter().enumerate() {
            assert_ne!(changed.checksum(), base, "change {i}");
        }
        let stored = Some(i64::from(base));
        assert!(sample(&id, raw).decode(stored).is_ok());
        assert_eq!(
            changes[0].decode(stored).err(),
            Some("its checksum does not match its bytes")
        );
        assert_eq!(
            sample(&id, raw).decode(None).err(),
            Some("it has no checksum")
        );
    }
}
