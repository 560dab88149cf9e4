//! Upgrading a data directory from the versions that kept an ingest journal.
//!
//! Those versions wrote each message to `DIR/journal-<generation>.log` before
//! its 250 and moved it into the database later, so a crash could leave
//! acknowledged mail in those files alone. At start, before the store is
//! loaded, [`move_into`] moves every message of those files that the database
//! lacks into it, then deletes the files: once, since nothing writes them any
//! more. This module only reads them.
//!
//! The format. A file starts with [`FILE_MAGIC`] and its generation (u64 LE).
//! Records follow at 8-byte aligned offsets, each header within one 4 KiB
//! page ([`next_offset`]): magic, payload length, CRC-32 of the payload,
//! CRC-32 of the first 12 header bytes (u32 LE each), then the payload: the
//! id (16 bytes, big-endian), the receive time (u64 LE, ms), then as strings
//! (u32 LE length and UTF-8 bytes, `u32::MAX` for none) the sender, the count
//! of recipients (u32 LE) and each recipient, HELO, the remote address, the
//! TLS version and cipher, the AUTH mechanism and user; last the message's
//! length (u32 LE) and its bytes. Files and records lie in id order.
//!
//! A crash left two kinds of gap, neither acknowledged: zeros where a
//! record's write never began (skipped a word at a time; zeros to the end are
//! space allocated ahead), and a record cut short (a whole header, a payload
//! that fails its checksum and ends in zeros). Anything else is damage: the
//! start is refused naming the file, which is left as it is.
//!
//! Kept by hand because the format is mailjar's own former journal: no crate
//! reads it. It only reads, once, at the start after an upgrade.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mailjar_core::id::MessageId;
use mailjar_core::smtp::{AuthInfo, Envelope, Incoming, SessionFacts, SmtpFacts, TlsInfo};

use super::{Loaded, Record, Storage, StorageError};

/// The first 8 bytes of a journal file.
const FILE_MAGIC: &[u8; 8] = b"mjjrnl01";

/// Bytes before the first record: the magic and the generation.
const FILE_HEADER: u64 = 16;

/// The first 4 bytes of a record's header.
const RECORD_MAGIC: u32 = 0x6a72_6e6c;

/// A record's header: magic, payload length, payload CRC, header CRC.
const RECORD_HEADER: u64 = 16;

/// A string field that is absent.
const NONE: u32 = u32::MAX;

/// Bytes read at a time while skipping zeros.
const SKIP_CHUNK: u64 = 64 * 1024;

/// Raw bytes moved per transaction, at most (a larger message goes alone).
const BATCH_BYTES: usize = 8 * 1024 * 1024;

/// Messages moved per transaction, at most.
const BATCH_MESSAGES: usize = 4096;

/// The journal files in `dir`, oldest first.
fn list(dir: &Path) -> Result<Vec<PathBuf>, StorageError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError(format!("{}: cannot list the journal: {e}", dir.display())))?;
    let generation = |name: &str| {
        let hex = name.strip_prefix("journal-")?.strip_suffix(".log")?;
        (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
    };
    let mut files: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((generation(e.file_name().to_str()?)?, e.path())))
        .collect();
    files.sort();
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

/// Where the next record starts after one ending at `end`: 8-byte aligned,
/// its header within one 4 KiB page.
fn next_offset(end: u64) -> u64 {
    let aligned = end.next_multiple_of(8);
    if aligned % 4096 > 4096 - RECORD_HEADER {
        aligned.next_multiple_of(4096)
    } else {
        aligned
    }
}

fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A record's payload length, if `bytes` starts with a whole, valid header.
fn header_len(bytes: &[u8]) -> Option<u64> {
    (bytes.len() >= RECORD_HEADER as usize
        && word(bytes, 0) == RECORD_MAGIC
        && word(bytes, 12) == crc32fast::hash(&bytes[0..12]))
    .then(|| u64::from(word(bytes, 4)))
}

/// Reads a payload's fields in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    /// A string field: `Some(None)` when it is absent, None when it does not parse.
    fn optional(&mut self) -> Option<Option<String>> {
        match self.u32()? {
            NONE => Some(None),
            len => Some(Some(
                std::str::from_utf8(self.take(len as usize)?)
                    .ok()?
                    .to_owned(),
            )),
        }
    }

    fn string(&mut self) -> Option<String> {
        self.optional()?
    }
}

/// The message of a payload (the bytes after the header); None if it does not parse.
fn decode_payload(payload: &[u8]) -> Option<Loaded> {
    let mut cursor = Cursor {
        bytes: payload,
        at: 0,
    };
    let id = MessageId::from_u128(u128::from_be_bytes(cursor.take(16)?.try_into().ok()?));
    let received_at_ms = u64::from_le_bytes(cursor.take(8)?.try_into().ok()?);
    let from = cursor.string()?;
    let count = cursor.u32()?;
    let to = (0..count)
        .map(|_| cursor.string())
        .collect::<Option<Vec<_>>>()?;
    let mut fields: [Option<String>; 6] = Default::default();
    for field in &mut fields {
        *field = cursor.optional()?;
    }
    let [
        helo,
        remote_addr,
        tls_version,
        tls_cipher,
        auth_mechanism,
        auth_username,
    ] = fields;
    let raw_len = cursor.u32()? as usize;
    let raw = cursor.take(raw_len)?.to_vec();
    (cursor.at == payload.len()).then(|| Loaded {
        id,
        received_at_ms,
        incoming: Incoming {
            envelope: Envelope { from, to },
            helo,
            session: SessionFacts {
                remote_addr,
                tls: tls_version
                    .zip(tls_cipher)
                    .map(|(version, cipher)| TlsInfo { version, cipher }),
                auth: auth_mechanism
                    .zip(auth_username)
                    .map(|(mechanism, username)| AuthInfo {
                        mechanism,
                        username,
                    }),
            },
            raw,
            transcript: Default::default(),
        },
        // The journal kept none: the database numbers it.
        uid: 0,
        seen: false,
    })
}

/// A whole record (header and payload): its message, or None if its write
/// was cut short or it is not a record.
fn decode(record: &[u8]) -> Option<Loaded> {
    let payload = usize::try_from(header_len(record)?).ok()?;
    let bytes = record.get(RECORD_HEADER as usize..)?.get(..payload)?;
    (crc32fast::hash(bytes) == word(record, 8))
        .then(|| decode_payload(bytes))
        .flatten()
}

/// What [`scan`] found besides the messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// Records whose write was cut short (never acknowledged).
    pub cut: usize,
    /// Bytes of zeros before a later record: writes that never began (never acknowledged).
    pub unwritten: u64,
}

/// A journal file open for reading: its path, for errors, and its length.
struct Journal<'a> {
    path: &'a Path,
    file: File,
    size: u64,
}

impl Journal<'_> {
    fn error(&self, what: impl std::fmt::Display) -> StorageError {
        StorageError(format!("{}: {what}", self.path.display()))
    }

    fn read(&self, at: u64, len: u64) -> Result<Vec<u8>, StorageError> {
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        self.file
            .read_exact_at(&mut bytes, at)
            .map_err(|e| self.error(format!("cannot read the journal: {e}")))?;
        Ok(bytes)
    }

    /// The first 8-byte word from `at` on that is not zeros; None if only zeros follow.
    fn after_zeros(&self, mut at: u64) -> Result<Option<u64>, StorageError> {
        while at + 8 <= self.size {
            let chunk = self.read(at, SKIP_CHUNK.min(self.size - at))?;
            if let Some(w) = chunk.chunks_exact(8).position(|w| w != [0; 8]) {
                return Ok(Some(at + w as u64 * 8));
            }
            at += (chunk.len() / 8 * 8) as u64;
        }
        Ok(None)
    }

    fn damaged(&self, at: u64, what: &str) -> StorageError {
        self.error(format!(
            "damaged at byte {at}: {what}; mailjar left it as it is (move it away to start without the messages it holds)"
        ))
    }
}

/// Reads every whole record of the journal file at `path`, in file order
/// (id order), handing each to `each`. A file that is not a journal, or
/// bytes that are neither a record nor zeros, are damage: an error naming the file.
fn scan(path: &Path, each: &mut dyn FnMut(Loaded)) -> Result<Scanned, StorageError> {
    let opened = File::open(path).and_then(|file| Ok((file.metadata()?.len(), file)));
    let (size, file) = opened
        .map_err(|e| StorageError(format!("{}: cannot read the journal: {e}", path.display())))?;
    let journal = Journal { path, file, size };
    // A crash between creating a file and writing its header leaves it empty.
    if size == 0 {
        return Ok(Scanned::default());
    }
    if size < FILE_HEADER || journal.read(0, 8)?.as_slice() != FILE_MAGIC {
        return Err(journal.error("is not a mailjar journal file"));
    }
    let mut scanned = Scanned::default();
    let mut at = FILE_HEADER;
    while at + 8 <= size {
        let head = journal.read(at, RECORD_HEADER.min(size - at))?;
        if head[..8] == [0; 8] {
            let Some(next) = journal.after_zeros(at)? else {
                break;
            };
            scanned.unwritten += next - at;
            at = next;
            continue;
        }
        let Some(payload) = header_len(&head) else {
            return Err(journal.damaged(at, "neither a message nor unwritten space"));
        };
        let end = at + RECORD_HEADER + payload;
        if end > size {
            scanned.cut += 1;
            break;
        }
        let record = journal.read(at, end - at)?;
        match decode(&record) {
            Some(loaded) => each(loaded),
            // A write cut short ends in the zeros it did not reach.
            None if record.ends_with(&[0; 8]) => scanned.cut += 1,
            None => return Err(journal.damaged(at, "a whole message that fails its checksum")),
        }
        at = next_offset(end);
    }
    Ok(scanned)
}

/// What [`move_into`] found and did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Journal files read, then deleted.
    pub files: usize,
    /// Messages moved into the database.
    pub messages: usize,
    /// Gaps a crash left (never acknowledged).
    pub scanned: Scanned,
}

/// Writes `batch` (if any) in one transaction and empties it.
fn write(
    storage: &mut dyn Storage,
    batch: &mut Vec<(Loaded, SmtpFacts)>,
) -> Result<usize, StorageError> {
    if batch.is_empty() {
        return Ok(0);
    }
    let records: Vec<Record<'_>> = batch.iter().map(|(l, smtp)| l.record(smtp)).collect();
    storage.write(&records, &[])?;
    let moved = batch.len();
    batch.clear();
    Ok(moved)
}

/// Moves into `storage` every message in `dir`'s journal files with an id
/// after `after` (those up to it were moved before), in id order, then
/// deletes the files.
pub fn move_into(
    dir: &Path,
    storage: &mut dyn Storage,
    after: Option<MessageId>,
) -> Result<Moved, StorageError> {
    let files = list(dir)?;
    let mut moved = Moved::default();
    let mut last = after;
    let mut batch: Vec<(Loaded, SmtpFacts)> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut failed = None;
    for path in &files {
        let scanned = scan(path, &mut |loaded| {
            if failed.is_some() || last.is_some_and(|last| loaded.id <= last) {
                return;
            }
            last = Some(loaded.id);
            batch_bytes += loaded.incoming.raw.len();
            let smtp = loaded.smtp_facts();
            batch.push((loaded, smtp));
            if batch_bytes >= BATCH_BYTES || batch.len() >= BATCH_MESSAGES {
                batch_bytes = 0;
                match write(storage, &mut batch) {
                    Ok(n) => moved.messages += n,
                    Err(e) => failed = Some(e),
                }
            }
        })?;
        moved.files += 1;
        moved.scanned.cut += scanned.cut;
        moved.scanned.unwritten += scanned.unwritten;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    moved.messages += write(storage, &mut batch)?;
    for path in &files {
        std::fs::remove_file(path).map_err(|e| {
            StorageError(format!(
                "{}: cannot delete a journal file after moving it into the database: {e}",
                path.display()
            ))
        })?;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tests::Fake;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mailjar-upgrade-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A message with every field set, and bytes that are not UTF-8.
    fn loaded(n: u128, raw: &[u8]) -> Loaded {
        Loaded {
            id: MessageId::from_u128(n),
            received_at_ms: 1_700_000_000_000 + (n % 1000) as u64,
            incoming: Incoming {
                envelope: Envelope {
                    from: "sender@app.test".into(),
                    to: vec!["a@local.test".into(), "ünï@local.test".into()],
                },
                helo: n.is_multiple_of(2).then(|| "client.test".to_owned()),
                session: SessionFacts {
                    remote_addr: Some("127.0.0.1:4000".into()),
                    tls: Some(TlsInfo {
                        version: "TLSv1.3".into(),
                        cipher: "TLS13_AES_128_GCM_SHA256".into(),
                    }),
                    auth: n.is_multiple_of(3).then(|| AuthInfo {
                        mechanism: "PLAIN".into(),
                        username: "user".into(),
                    }),
                },
                raw: raw.to_vec(),
                transcript: Default::default(),
            },
            uid: 0,
            seen: false,
        }
    }

    /// The record the versions with a journal wrote for `message`, padding included.
    fn record(message: &Loaded) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, s: Option<&str>| match s {
            Some(s) => {
                out.extend((s.len() as u32).to_le_bytes());
                out.extend(s.as_bytes());
            }
            None => out.extend(NONE.to_le_bytes()),
        };
        let (incoming, session) = (&message.incoming, &message.incoming.session);
        let mut payload = message.id.as_u128().to_be_bytes().to_vec();
        payload.extend(message.received_at_ms.to_le_bytes());
        put(&mut payload, Some(&incoming.envelope.from));
        payload.extend((incoming.envelope.to.len() as u32).to_le_bytes());
        for to in &incoming.envelope.to {
            put(&mut payload, Some(to));
        }
        let tls = session.tls.as_ref();
        let auth = session.auth.as_ref();
        for field in [
            incoming.helo.as_deref(),
            session.remote_addr.as_deref(),
            tls.map(|t| t.version.as_str()),
            tls.map(|t| t.cipher.as_str()),
            auth.map(|a| a.mechanism.as_str()),
            auth.map(|a| a.username.as_str()),
        ] {
            put(&mut payload, field);
        }
        payload.extend((incoming.raw.len() as u32).to_le_bytes());
        payload.extend(&incoming.raw);
        let mut out = RECORD_MAGIC.to_le_bytes().to_vec();
        out.extend((payload.len() as u32).to_le_bytes());
        out.extend(crc32fast::hash(&payload).to_le_bytes());
        out.extend(crc32fast::hash(&out).to_le_bytes());
        out.extend(payload);
        out.resize(out.len().next_multiple_of(8), 0);
        out
    }

    /// Writes journal file `generation` in `dir` as those versions placed its
    /// records: `None` leaves a record's place unwritten, `Some(keep)` writes its first `keep` bytes.
    fn journal(dir: &Path, generation: u64, records: &[(Vec<u8>, Option<usize>)]) -> PathBuf {
        let path = dir.join(format!("journal-{generation:016x}.log"));
        let mut file = FILE_MAGIC.to_vec();
        file.extend(generation.to_le_bytes());
        let mut end = FILE_HEADER;
        for (bytes, keep) in records {
            let at = next_offset(end) as usize;
            if let Some(keep) = *keep {
                // The file ends where the last write did.
                file.resize(file.len().max(at + keep), 0);
                file[at..at + keep].copy_from_slice(&bytes[..keep]);
            }
            end = (at + bytes.len()) as u64;
        }
        std::fs::write(&path, &file).unwrap();
        path
    }

    fn scanned(path: &Path) -> (Vec<Loaded>, Scanned) {
        let mut found = Vec::new();
        let scanned = scan(path, &mut |l| found.push(l)).unwrap();
        (found, scanned)
    }

    fn whole(bytes: Vec<u8>) -> (Vec<u8>, Option<usize>) {
        let len = bytes.len();
        (bytes, Some(len))
    }

    #[test]
    fn a_record_reads_back_exactly_and_any_changed_byte_fails_it() {
        for n in [1u128, 2, 3, u128::MAX >> 1] {
            let message = loaded(n, b"Subject: x\r\n\r\n\xff\xfe body\r\n");
            assert_eq!(decode(&record(&message)), Some(message));
        }
        let bytes = record(&loaded(7, b"hello"));
        let payload = header_len(&bytes).unwrap() as usize;
        for i in 0..RECORD_HEADER as usize + payload {
            let mut changed = bytes.clone();
            changed[i] ^= 0x20;
            assert_eq!(decode(&changed), None, "byte {i}");
        }
    }

    #[test]
    fn gaps_left_by_a_crash_are_skipped_and_the_rest_is_read() {
        let dir = temp("gaps");
        let messages: Vec<Loaded> = (1..=6)
            .map(|n| loaded(n, &vec![b'a' + n as u8; 5000 * n as usize]))
            .collect();
        let records: Vec<Vec<u8>> = messages.iter().map(record).collect();
        let path = journal(
            &dir,
            1,
            &[
                whole(records[0].clone()),
                // Never began.
                (records[1].clone(), None),
                whole(records[2].clone()),
                // Cut short after its first page.
                (records[3].clone(), Some(4096)),
                whole(records[4].clone()),
                // The last one, cut short at the end of the file.
                (records[5].clone(), Some(100)),
            ],
        );
        // Space allocated ahead: zeros to the end.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(1 << 20).unwrap();
        let (found, gaps) = scanned(&path);
        let ids: Vec<u128> = found.iter().map(|l| l.id.as_u128()).collect();
        assert_eq!(ids, [1, 3, 5]);
        assert_eq!(found[1], messages[2]);
        assert_eq!(gaps.cut, 2);
        assert!(gaps.unwritten >= records[1].len() as u64, "{gaps:?}");
        assert!(
            gaps.unwritten < 1 << 19,
            "free space is not a gap: {gaps:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_message_that_holds_a_record_is_only_a_message() {
        let dir = temp("nested");
        let mut raw = b"Subject: looks like a record\r\n\r\n".to_vec();
        raw.extend_from_slice(&record(&loaded(99, b"planted")));
        let outer = record(&loaded(5, &raw));
        let path = journal(&dir, 1, &[(record(&loaded(4, b"x")), None), whole(outer)]);
        let (found, _) = scanned(&path);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id.as_u128(), 5);
        assert_eq!(found[0].incoming.raw, raw);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damage_is_an_error_naming_the_file() {
        let dir = temp("damage");
        let path = journal(&dir, 1, &[whole(vec![0x5a; 64])]);
        let e = scan(&path, &mut |_| {}).unwrap_err();
        assert!(e.0.contains(&path.display().to_string()), "{e}");
        assert!(e.0.contains("damaged at byte 16"), "{e}");
        let mut rotten = record(&loaded(1, b"a message long enough to rot in its middle"));
        rotten[RECORD_HEADER as usize + 40] ^= 0x01;
        let path = journal(&dir, 2, &[whole(rotten)]);
        let e = scan(&path, &mut |_| {}).unwrap_err();
        assert!(e.0.contains("fails its checksum"), "{e}");
        std::fs::write(&path, b"not a journal at all").unwrap();
        let e = scan(&path, &mut |_| {}).unwrap_err();
        assert!(e.0.contains("not a mailjar journal"), "{e}");
        // Created but never given its header: nothing in it.
        std::fs::write(&path, b"").unwrap();
        assert_eq!(scanned(&path).0, []);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_header_never_crosses_a_page() {
        for end in FILE_HEADER..3 * 4096 {
            let at = next_offset(end);
            assert!(at >= end && at.is_multiple_of(8) && at - end < 4096);
            assert_eq!(at / 4096, (at + RECORD_HEADER - 1) / 4096, "{end}");
        }
    }

    #[test]
    fn what_the_database_lacks_is_moved_in_id_order_and_the_files_are_deleted() {
        let dir = temp("move");
        let place = |n: u128| whole(record(&loaded(n, format!("message {n}").as_bytes())));
        journal(&dir, 1, &[place(1), place(2), place(3)]);
        journal(&dir, 2, &[place(4), place(5)]);
        std::fs::write(dir.join("journal-x.log"), b"not one of them").unwrap();
        let mut storage = Fake::default();
        // 1 and 2 were moved before the crash.
        let moved = move_into(&dir, &mut storage, Some(MessageId::from_u128(2))).unwrap();
        assert_eq!((moved.files, moved.messages), (2, 3));
        let ids: Vec<u128> = storage.rows.iter().map(|l| l.id.as_u128()).collect();
        assert_eq!(ids, [3, 4, 5]);
        assert_eq!(storage.rows[0], loaded(3, b"message 3"));
        assert!(list(&dir).unwrap().is_empty());
        assert!(dir.join("journal-x.log").exists(), "not a journal's name");
        // Nothing left: a second start moves nothing and writes nothing.
        let writes = storage.writes;
        assert_eq!(
            move_into(&dir, &mut storage, None).unwrap(),
            Moved::default()
        );
        assert_eq!(storage.writes, writes);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_move_keeps_the_files() {
        let dir = temp("failed");
        let path = journal(&dir, 1, &[whole(record(&loaded(1, b"x")))]);
        let mut storage = Fake {
            fail: true,
            ..Fake::default()
        };
        assert!(move_into(&dir, &mut storage, None).is_err());
        assert!(path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
