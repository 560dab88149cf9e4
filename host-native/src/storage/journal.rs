//! The ingest journal's files and record format.
//!
//! With `--data-dir` (and without `--fsync`) a message is safe from a crash
//! of mailjar once its record is in a journal file: a `pwrite` that returned
//! has handed the bytes to the kernel, and `kill -9` cannot take them back.
//! Each SMTP session writes its own record (see [`super::ingest`]), so an
//! acknowledgement waits for no other thread; the storage writer then moves
//! journaled messages into SQLite in large transactions and deletes a file
//! once everything in it is there. At start, what is still only in the
//! journal is moved in before the store is loaded.
//!
//! A file starts with [`FILE_MAGIC`] and its generation. Records follow,
//! 8-byte aligned: a 16-byte header (magic, payload length, CRC-32 of the
//! payload, CRC-32 of the first 12 header bytes), then the payload. Offsets
//! are reserved before the bytes are written, so a crash can leave gaps, and
//! neither kind was ever acknowledged:
//! - a record whose write never began reads as zeros (a file is never
//!   reused, so unwritten bytes are zero), skipped a word at a time;
//!   zeros after the last record are space allocated ahead
//!   ([`JournalFile::allocate`]), not a gap;
//! - a record whose write was cut short has a whole header (the kernel copies
//!   a write page by page, in order, and a header never crosses a 4 KiB
//!   boundary) and a payload that fails its checksum: skipped by its length.
//!
//! Recovery never looks for a record inside another record's bytes, so a
//! message that contains something shaped like a record is only ever a message.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mailjar_core::id::MessageId;
use mailjar_core::smtp::{AuthInfo, Envelope, Incoming, SessionFacts, SmtpFacts, TlsInfo};

use super::{Loaded, Record, StorageError};

/// The first 8 bytes of a journal file.
pub const FILE_MAGIC: &[u8; 8] = b"mjjrnl01";

/// Bytes before the first record: the magic and the generation.
pub const FILE_HEADER: u64 = 16;

/// The first 4 bytes of a record's header.
const RECORD_MAGIC: u32 = 0x6a72_6e6c;

/// A record's header: magic, payload length, payload CRC, header CRC.
pub const RECORD_HEADER: usize = 16;

/// Where in the payload the id and the receive time go (sealed after the id is assigned).
const ID_AT: usize = RECORD_HEADER;
const RECEIVED_AT: usize = ID_AT + 16;

/// A string field that is absent.
const NONE: u32 = u32::MAX;

/// Bytes read at a time while skipping zeros at recovery.
const SKIP_CHUNK: usize = 64 * 1024;

/// A journal file's name in the data directory.
pub fn file_name(generation: u64) -> String {
    format!("journal-{generation:016x}.log")
}

/// The generation a journal file's name holds, if it is one.
fn generation_of(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("journal-")?.strip_suffix(".log")?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The journal files in `dir`, oldest first.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StorageError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError(format!("{}: cannot list the journal: {e}", dir.display())))?;
    let mut files = Vec::new();
    for entry in entries.flatten() {
        if let Some(generation) = entry.file_name().to_str().and_then(generation_of) {
            files.push((generation, entry.path()));
        }
    }
    files.sort();
    Ok(files)
}

/// One journal file, open for writing at reserved offsets.
#[derive(Debug)]
pub struct JournalFile {
    /// Its generation: later files hold later ids.
    pub generation: u64,
    /// Its path, for errors and for deleting it.
    pub path: PathBuf,
    file: File,
}

impl JournalFile {
    /// Creates generation `generation` in `dir` (it must not exist) with its header.
    pub fn create(dir: &Path, generation: u64) -> Result<JournalFile, StorageError> {
        let path = dir.join(file_name(generation));
        let fail = |e: std::io::Error| {
            StorageError(format!(
                "{}: cannot create a journal file: {e}",
                path.display()
            ))
        };
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(fail)?;
        let mut header = [0u8; FILE_HEADER as usize];
        header[..8].copy_from_slice(FILE_MAGIC);
        header[8..].copy_from_slice(&generation.to_le_bytes());
        if let Err(e) = file.write_all_at(&header, 0) {
            // Not left behind: the next try creates it anew.
            let _ = std::fs::remove_file(&path);
            return Err(fail(e));
        }
        Ok(JournalFile {
            generation,
            path,
            file,
        })
    }

    /// Gives the file its first `len` bytes on disk and in the page cache,
    /// as zeros, so that a session's `pwrite` overwrites cached pages of
    /// allocated blocks instead of growing the file: in place that was about
    /// half the write's kernel time (page and block allocation, the inode's
    /// size). Best effort: where the file system or the kernel cannot, the
    /// writes grow the file as before. Safe while records are being written:
    /// neither step changes a byte already there. Slow (milliseconds for
    /// 32 MiB): the storage writer's thread calls it, never a session.
    pub fn allocate(&self, len: u64) {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{Advice, FallocateFlags, fadvise, fallocate};
            if fallocate(&self.file, FallocateFlags::empty(), 0, len).is_err() {
                return;
            }
            // One call is cut to the readahead window: ask for it a piece at a time.
            const STEP: u64 = 2 * 1024 * 1024;
            let mut at = 0;
            while at < len {
                let step = std::num::NonZeroU64::new(STEP.min(len - at));
                if fadvise(&self.file, at, step, Advice::WillNeed).is_err() {
                    return;
                }
                at += STEP;
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = len;
    }

    /// Writes a sealed record at the offset reserved for it.
    pub fn write_at(&self, record: &[u8], offset: u64) -> Result<(), StorageError> {
        self.file.write_all_at(record, offset).map_err(|e| {
            StorageError(format!(
                "{}: a journal write failed: {e}",
                self.path.display()
            ))
        })
    }

    /// Reads back the record written at `offset`, `len` bytes long with its
    /// padding (which the file may end before: padding is not written).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, StorageError> {
        let mut bytes = vec![0u8; len];
        let mut read = 0;
        while read < len {
            match self.file.read_at(&mut bytes[read..], offset + read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(StorageError(format!(
                        "{}: a journal read failed: {e}",
                        self.path.display()
                    )));
                }
            }
        }
        Ok(bytes)
    }
}

/// Where the next record goes after one ending at `end`: 8-byte aligned, with
/// its header within one 4 KiB page.
pub fn next_offset(end: u64) -> u64 {
    let aligned = end.next_multiple_of(8);
    if aligned % 4096 > 4096 - RECORD_HEADER as u64 {
        aligned.next_multiple_of(4096)
    } else {
        aligned
    }
}

/// A record's header and fields, all but the message's bytes, built before
/// its id is known; [`Encoded::seal`] sets the id, the receive time and the
/// checksums, and [`Encoded::write`] writes it with the message's bytes, which
/// are never copied for a large message.
#[derive(Debug)]
pub struct Encoded {
    head: Vec<u8>,
    raw_len: usize,
}

/// Messages up to this size are written with their header in one `pwrite`
/// (copied into one buffer); larger ones in two, header first, uncopied.
const ONE_WRITE_RAW: usize = 64 * 1024;

fn put_len(out: &mut Vec<u8>, len: usize) -> Result<(), StorageError> {
    let len = u32::try_from(len)
        .ok()
        .filter(|&l| l != NONE)
        .ok_or_else(|| StorageError("a field is too large for the journal".into()))?;
    out.extend_from_slice(&len.to_le_bytes());
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), StorageError> {
    put_len(out, s.len())?;
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) -> Result<(), StorageError> {
    match s {
        Some(s) => put_str(out, s),
        None => {
            out.extend_from_slice(&NONE.to_le_bytes());
            Ok(())
        }
    }
}

impl Encoded {
    /// The record of `record` (whose id and time are not read: they are sealed in later).
    pub fn new(record: &Record<'_>) -> Result<Encoded, StorageError> {
        let envelope = record.envelope;
        let smtp = record.smtp;
        let text: usize = envelope.from.len()
            + envelope.to.iter().map(|t| t.len() + 4).sum::<usize>()
            + [&smtp.helo, &smtp.remote_addr]
                .iter()
                .map(|s| s.as_ref().map_or(0, String::len))
                .sum::<usize>()
            + smtp
                .tls
                .as_ref()
                .map_or(0, |t| t.version.len() + t.cipher.len())
            + smtp
                .auth
                .as_ref()
                .map_or(0, |a| a.mechanism.len() + a.username.len());
        let mut head = Vec::with_capacity(RECEIVED_AT + 8 + 10 * 4 + text);
        head.resize(RECEIVED_AT + 8, 0);
        put_str(&mut head, &envelope.from)?;
        put_len(&mut head, envelope.to.len())?;
        for to in &envelope.to {
            put_str(&mut head, to)?;
        }
        put_opt(&mut head, smtp.helo.as_deref())?;
        put_opt(&mut head, smtp.remote_addr.as_deref())?;
        put_opt(&mut head, smtp.tls.as_ref().map(|t| t.version.as_str()))?;
        put_opt(&mut head, smtp.tls.as_ref().map(|t| t.cipher.as_str()))?;
        put_opt(&mut head, smtp.auth.as_ref().map(|a| a.mechanism.as_str()))?;
        put_opt(&mut head, smtp.auth.as_ref().map(|a| a.username.as_str()))?;
        put_len(&mut head, record.raw.len())?;
        let payload = u32::try_from(head.len() - RECORD_HEADER + record.raw.len())
            .map_err(|_| StorageError("the message is too large for the journal".into()))?;
        head[4..8].copy_from_slice(&payload.to_le_bytes());
        Ok(Encoded {
            head,
            raw_len: record.raw.len(),
        })
    }

    /// Bytes the record takes in the file (padding included).
    pub fn len(&self) -> u64 {
        (self.head.len() + self.raw_len).next_multiple_of(8) as u64
    }

    /// Always false: a record has at least its header.
    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    /// Sets the id, the receive time and the checksums over the fields and
    /// `raw` (the message's bytes, as given to [`Encoded::new`]).
    pub fn seal(&mut self, id: MessageId, received_at_ms: u64, raw: &[u8]) {
        let head = &mut self.head;
        head[ID_AT..ID_AT + 16].copy_from_slice(&id.as_u128().to_be_bytes());
        head[RECEIVED_AT..RECEIVED_AT + 8].copy_from_slice(&received_at_ms.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head[RECORD_HEADER..]);
        crc.update(raw);
        head[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        head[8..12].copy_from_slice(&crc.finalize().to_le_bytes());
        let header_crc = crc32fast::hash(&head[0..12]);
        head[12..16].copy_from_slice(&header_crc.to_le_bytes());
    }

    /// The whole sealed record with `raw`, padding included.
    pub fn bytes(&self, raw: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len() as usize);
        bytes.extend_from_slice(&self.head);
        bytes.extend_from_slice(raw);
        bytes.resize(bytes.capacity(), 0);
        bytes
    }

    /// Writes the sealed record, with `raw`, at `offset` in `file`. A large
    /// message goes in a second write after its header; a crash between the
    /// two leaves a record cut short, which was never acknowledged. Padding is
    /// not written: a journal file's unwritten bytes are zeros.
    pub fn write(&self, file: &JournalFile, raw: &[u8], offset: u64) -> Result<(), StorageError> {
        if raw.len() <= ONE_WRITE_RAW {
            let mut bytes = Vec::with_capacity(self.head.len() + raw.len());
            bytes.extend_from_slice(&self.head);
            bytes.extend_from_slice(raw);
            return file.write_at(&bytes, offset);
        }
        file.write_at(&self.head, offset)?;
        file.write_at(raw, offset + self.head.len() as u64)
    }
}

/// A record's header, if `bytes` starts with a whole, valid one: its payload length.
fn header_len(bytes: &[u8]) -> Option<usize> {
    let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    (bytes.len() >= RECORD_HEADER
        && word(0) == RECORD_MAGIC
        && word(12) == crc32fast::hash(&bytes[0..12]))
    .then(|| word(4) as usize)
}

/// Reads a payload's fields in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<String> {
        let len = self.u32().filter(|&l| l != NONE)? as usize;
        String::from_utf8(self.bytes(len)?.to_vec()).ok()
    }

    fn optional(&mut self) -> Option<Option<String>> {
        let len = self.u32()?;
        if len == NONE {
            return Some(None);
        }
        let text = std::str::from_utf8(self.bytes(len as usize)?).ok()?;
        Some(Some(text.to_owned()))
    }
}

/// Reads the fields of a payload (the bytes after the header); None if they do not parse.
fn decode_payload(payload: &[u8]) -> Option<Loaded> {
    let mut cursor = Cursor {
        bytes: payload,
        at: 0,
    };
    let id = MessageId::from_u128(u128::from_be_bytes(cursor.bytes(16)?.try_into().ok()?));
    let received_at_ms = u64::from_le_bytes(cursor.bytes(8)?.try_into().ok()?);
    let from = cursor.string()?;
    let count = cursor.u32()?;
    let mut to = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        to.push(cursor.string()?);
    }
    let helo = cursor.optional()?;
    let remote_addr = cursor.optional()?;
    let tls_version = cursor.optional()?;
    let tls_cipher = cursor.optional()?;
    let auth_mechanism = cursor.optional()?;
    let auth_username = cursor.optional()?;
    let raw_len = cursor.u32()? as usize;
    let raw = cursor.bytes(raw_len)?.to_vec();
    if cursor.at != payload.len() {
        return None;
    }
    Some(Loaded {
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
        },
    })
}

/// A whole record (header, payload, padding) as written: its message, or
/// None if it is not whole (its write was cut short) or not a record.
pub fn decode(record: &[u8]) -> Option<Loaded> {
    let payload = header_len(record)?;
    let bytes = record.get(RECORD_HEADER..RECORD_HEADER.checked_add(payload)?)?;
    let crc = u32::from_le_bytes(record[8..12].try_into().ok()?);
    (crc32fast::hash(bytes) == crc)
        .then(|| decode_payload(bytes))
        .flatten()
}

/// What [`scan`] found besides the messages it returned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// Records whose write was cut short (never acknowledged).
    pub cut: usize,
    /// Bytes of zeros skipped before a later record: records whose write
    /// never began (never acknowledged).
    pub unwritten: u64,
}

/// Reads every whole record of the journal file at `path`, in file order
/// (which is id order), handing each to `each`. A file that is not a journal,
/// or bytes that are neither a record nor zeros, are damage: an error naming the file.
pub fn scan(path: &Path, each: &mut dyn FnMut(Loaded)) -> Result<Scanned, StorageError> {
    let named = |what: String| StorageError(format!("{}: {what}", path.display()));
    let file = File::open(path).map_err(|e| named(format!("cannot read the journal: {e}")))?;
    let size = file
        .metadata()
        .map_err(|e| named(format!("cannot read the journal: {e}")))?
        .len();
    let read = |at: u64, len: usize| -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, at)?;
        Ok(bytes)
    };
    scan_source(size, &read, each).map_err(|what| named(what.0))
}

/// [`scan`] over the bytes of a journal file in memory (the fuzz target's way in).
pub fn scan_bytes(bytes: &[u8], each: &mut dyn FnMut(Loaded)) -> Result<Scanned, StorageError> {
    let read = |at: u64, len: usize| -> std::io::Result<Vec<u8>> {
        usize::try_from(at)
            .ok()
            .and_then(|at| bytes.get(at..at.checked_add(len)?))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
    };
    scan_source(bytes.len() as u64, &read, each)
}

/// [`scan`] over a file of `size` bytes that `read_at` reads; errors say
/// what is wrong without the file's name.
fn scan_source(
    size: u64,
    read_at: &dyn Fn(u64, usize) -> std::io::Result<Vec<u8>>,
    each: &mut dyn FnMut(Loaded),
) -> Result<Scanned, StorageError> {
    let damage = StorageError;
    let read = |at: u64, len: usize| -> Result<Vec<u8>, StorageError> {
        read_at(at, len).map_err(|e| StorageError(format!("cannot read the journal: {e}")))
    };
    if size < FILE_HEADER || read(0, 8)?.as_slice() != FILE_MAGIC {
        // A crash between creating the file and writing its header leaves it empty.
        if size == 0 {
            return Ok(Scanned::default());
        }
        return Err(damage("is not a mailjar journal file".into()));
    }
    let mut scanned = Scanned::default();
    let mut at = FILE_HEADER;
    while at + 8 <= size {
        let head = read(at, (RECORD_HEADER as u64).min(size - at) as usize)?;
        if head[..8].iter().all(|&b| b == 0) {
            // A record whose write never began: skip the zeros to the next record.
            let start = at;
            loop {
                let chunk = read(at, (SKIP_CHUNK as u64).min(size - at) as usize)?;
                let words = chunk.len() / 8;
                match (0..words).find(|w| chunk[w * 8..w * 8 + 8].iter().any(|&b| b != 0)) {
                    Some(w) => {
                        at += w as u64 * 8;
                        break;
                    }
                    None => {
                        at += words as u64 * 8;
                        if words == 0 || at + 8 > size {
                            break;
                        }
                    }
                }
            }
            if at + 8 <= size {
                // A gap before a later record; zeros to the end are free space.
                scanned.unwritten += at - start;
            }
            continue;
        }
        let Some(payload) = header_len(&head) else {
            return Err(damage(format!(
                "damaged at byte {at}: neither a message nor unwritten space; mailjar left it as it is (move it away to start without the messages it holds)"
            )));
        };
        let len = (RECORD_HEADER + payload).next_multiple_of(8) as u64;
        if at + (RECORD_HEADER + payload) as u64 > size {
            // Cut short at the end of the file.
            scanned.cut += 1;
            break;
        }
        let record = read(at, RECORD_HEADER + payload)?;
        match decode(&record) {
            Some(loaded) => each(loaded),
            // A write cut short ends in the zeros it did not reach.
            None if record.ends_with(&[0; 8]) => scanned.cut += 1,
            None => {
                return Err(damage(format!(
                    "damaged at byte {at}: a whole message that fails its checksum; mailjar left it as it is (move it away to start without the messages it holds)"
                )));
            }
        }
        at = next_offset(at + len);
    }
    Ok(scanned)
}

/// What [`recover`] found and did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Journal files read (and deleted).
    pub files: usize,
    /// Messages moved into the database.
    pub moved: usize,
    /// Gaps left by a crash (never acknowledged).
    pub scanned: Scanned,
}

/// Raw bytes moved per transaction at recovery, at most (a larger message goes alone).
const RECOVER_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// Moves into `storage` every message in `dir`'s journal files with an id
/// after `after` (everything up to it is in the database already), in id
/// order, then deletes the files. Runs at start, before the store is loaded.
pub fn recover(
    dir: &Path,
    storage: &mut dyn super::Storage,
    after: Option<MessageId>,
) -> Result<Recovered, StorageError> {
    let files = list(dir)?;
    let mut recovered = Recovered::default();
    let mut last = after;
    let mut batch: Vec<(Loaded, SmtpFacts)> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut failed: Option<StorageError> = None;
    let flush = |batch: &mut Vec<(Loaded, SmtpFacts)>, storage: &mut dyn super::Storage| {
        let records: Vec<Record<'_>> = batch.iter().map(|(l, smtp)| l.record(smtp)).collect();
        let written = storage.write(&records, &[]);
        let moved = batch.len();
        batch.clear();
        written.map(|()| moved)
    };
    for (_, path) in &files {
        let scanned = scan(path, &mut |loaded| {
            if failed.is_some() || last.is_some_and(|last| loaded.id <= last) {
                return;
            }
            last = Some(loaded.id);
            batch_bytes += loaded.incoming.raw.len();
            let smtp = loaded.smtp_facts();
            batch.push((loaded, smtp));
            if batch_bytes >= RECOVER_BATCH_BYTES || batch.len() >= 4096 {
                batch_bytes = 0;
                match flush(&mut batch, storage) {
                    Ok(moved) => recovered.moved += moved,
                    Err(e) => failed = Some(e),
                }
            }
        })?;
        recovered.files += 1;
        recovered.scanned.cut += scanned.cut;
        recovered.scanned.unwritten += scanned.unwritten;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if !batch.is_empty() {
        recovered.moved += flush(&mut batch, storage)?;
    }
    for (_, path) in &files {
        std::fs::remove_file(path).map_err(|e| {
            StorageError(format!(
                "{}: cannot delete a journal file after moving it: {e}",
                path.display()
            ))
        })?;
    }
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tests::Fake;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mailjar-journal-{}-{name}", std::process::id()));
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
            },
        }
    }

    fn sealed(message: &Loaded) -> Vec<u8> {
        let smtp = message.smtp_facts();
        let record = Record {
            id: MessageId::from_u128(0),
            received_at_ms: 0,
            ..message.record(&smtp)
        };
        let mut encoded = Encoded::new(&record).unwrap();
        encoded.seal(message.id, message.received_at_ms, &message.incoming.raw);
        encoded.bytes(&message.incoming.raw)
    }

    /// Writes `records` one after another as reservations would place them;
    /// `None` leaves a record's place unwritten, `Some((bytes, keep))` writes its first `keep` bytes.
    fn write_file(dir: &Path, records: &[(Vec<u8>, Option<usize>)]) -> PathBuf {
        let file = JournalFile::create(dir, 1).unwrap();
        let mut end = FILE_HEADER;
        for (bytes, keep) in records {
            let at = next_offset(end);
            if let Some(keep) = keep {
                file.write_at(&bytes[..*keep], at).unwrap();
            }
            end = at + bytes.len() as u64;
        }
        file.path.clone()
    }

    fn scanned(path: &Path) -> (Vec<Loaded>, Scanned) {
        let mut found = Vec::new();
        let scanned = scan(path, &mut |l| found.push(l)).unwrap();
        (found, scanned)
    }

    #[test]
    fn a_sealed_record_reads_back_exactly() {
        for n in [1u128, 2, 3, u128::MAX >> 1] {
            let message = loaded(n, b"Subject: x\r\n\r\n\xff\xfe body\r\n");
            let bytes = sealed(&message);
            assert_eq!(bytes.len() % 8, 0);
            assert_eq!(decode(&bytes), Some(message));
        }
    }

    #[test]
    fn a_large_message_is_written_after_its_header_and_reads_back() {
        let dir = temp("large");
        let message = loaded(3, &vec![b'L'; 3 * ONE_WRITE_RAW + 5]);
        let smtp = message.smtp_facts();
        let mut encoded = Encoded::new(&message.record(&smtp)).unwrap();
        encoded.seal(message.id, message.received_at_ms, &message.incoming.raw);
        let file = JournalFile::create(&dir, 1).unwrap();
        let after = loaded(4, b"after");
        let at = next_offset(FILE_HEADER);
        encoded.write(&file, &message.incoming.raw, at).unwrap();
        let next = next_offset(at + encoded.len());
        file.write_at(&sealed(&after), next).unwrap();
        assert_eq!(scanned(&file.path).0, [message.clone(), after.clone()]);
        let read = file.read_at(at, encoded.len() as usize).unwrap();
        assert_eq!(decode(&read), Some(message.clone()));
        // A crash between its two writes: the header alone, a record cut short.
        let dir2 = temp("large-cut");
        let cut = JournalFile::create(&dir2, 1).unwrap();
        cut.write_at(
            &encoded.bytes(&message.incoming.raw)[..encoded.head.len()],
            at,
        )
        .unwrap();
        cut.write_at(&sealed(&after), next).unwrap();
        let (found, gaps) = scanned(&cut.path);
        assert_eq!(found, [after]);
        assert_eq!(gaps.cut, 1);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&dir2);
    }

    #[test]
    fn a_record_with_any_byte_changed_does_not_decode() {
        let bytes = sealed(&loaded(7, b"hello"));
        for i in 0..bytes.len() - 7 {
            let mut changed = bytes.clone();
            changed[i] ^= 0x20;
            // Padding is not covered; everything else is.
            if i >= RECORD_HEADER + header_len(&bytes).unwrap() {
                continue;
            }
            assert_eq!(decode(&changed), None, "byte {i}");
        }
    }

    #[test]
    fn recovery_skips_records_never_written_or_cut_short_and_reads_the_rest() {
        let dir = temp("gaps");
        let messages: Vec<Loaded> = (1..=6)
            .map(|n| loaded(n, &vec![b'a' + n as u8; 5000 * n as usize]))
            .collect();
        let records: Vec<Vec<u8>> = messages.iter().map(sealed).collect();
        let path = write_file(
            &dir,
            &[
                (records[0].clone(), Some(records[0].len())),
                // Never began.
                (records[1].clone(), None),
                (records[2].clone(), Some(records[2].len())),
                // Cut short after its first page.
                (records[3].clone(), Some(4096)),
                (records[4].clone(), Some(records[4].len())),
                // The last one, cut short at the end of the file.
                (records[5].clone(), Some(100)),
            ],
        );
        let (found, gaps) = scanned(&path);
        let ids: Vec<u128> = found.iter().map(|l| l.id.as_u128()).collect();
        assert_eq!(ids, [1, 3, 5]);
        assert_eq!(found[1], messages[2]);
        assert_eq!(gaps.cut, 2);
        assert!(gaps.unwritten >= records[1].len() as u64, "{gaps:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn space_allocated_ahead_reads_as_free_not_as_a_gap() {
        let dir = temp("allocated");
        let (one, two) = (loaded(1, b"one"), loaded(2, b"two"));
        let (a, b) = (sealed(&one), sealed(&two));
        let file = JournalFile::create(&dir, 1).unwrap();
        file.write_at(&a, FILE_HEADER).unwrap();
        // Allocated while records are being written: nothing already there changes.
        file.allocate(1 << 20);
        if cfg!(target_os = "linux") {
            assert!(std::fs::metadata(&file.path).unwrap().len() >= 1 << 20);
        }
        file.write_at(&b, next_offset(FILE_HEADER + a.len() as u64))
            .unwrap();
        let (found, gaps) = scanned(&file.path);
        assert_eq!(found, [one, two]);
        assert_eq!(
            gaps,
            Scanned::default(),
            "the zeros after the last record are free space"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_message_that_holds_a_record_is_only_a_message() {
        let dir = temp("nested");
        let inner = sealed(&loaded(99, b"planted"));
        let mut raw = b"Subject: looks like a record\r\n\r\n".to_vec();
        raw.extend_from_slice(&inner);
        let outer = sealed(&loaded(5, &raw));
        let path = write_file(
            &dir,
            &[
                (sealed(&loaded(4, b"x")), None),
                (outer.clone(), Some(outer.len())),
            ],
        );
        let (found, _) = scanned(&path);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id.as_u128(), 5);
        assert_eq!(found[0].incoming.raw, raw);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bytes_that_are_neither_a_record_nor_zeros_are_damage_named_by_file() {
        let dir = temp("damage");
        let path = write_file(&dir, &[(vec![0x5a; 64], Some(64))]);
        let e = scan(&path, &mut |_| {}).unwrap_err();
        assert!(e.0.contains(&path.display().to_string()), "{e}");
        assert!(e.0.contains("damaged"), "{e}");
        std::fs::write(&path, b"not a journal at all").unwrap();
        let e = scan(&path, &mut |_| {}).unwrap_err();
        assert!(e.0.contains("not a mailjar journal"), "{e}");
        // Created but never given its header: nothing in it.
        std::fs::write(&path, b"").unwrap();
        assert_eq!(scanned(&path).0, []);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_whole_record_that_fails_its_checksum_is_damage_not_a_cut_write() {
        let dir = temp("rot");
        let mut rotten = sealed(&loaded(1, b"a message long enough to rot in its middle"));
        rotten[RECORD_HEADER + 40] ^= 0x01;
        let path = write_file(&dir, &[(rotten.clone(), Some(rotten.len()))]);
        let e = scan(&path, &mut |_| {}).unwrap_err();
        assert!(e.0.contains("fails its checksum"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_fuzz_seeds_are_journals_as_mailjar_writes_them() {
        // fuzz/seed-journal.py writes them with its own copy of the format.
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/journal_scan");
        for (name, ids, cut) in [
            ("one", vec![1u128], 0),
            ("gap", vec![1, 3], 0),
            ("cut", vec![2], 1),
            ("fields", vec![7], 0),
            ("page", (1..=6).collect(), 0),
        ] {
            let mut file = FILE_MAGIC.to_vec();
            file.extend_from_slice(&1u64.to_le_bytes());
            file.extend_from_slice(&std::fs::read(seeds.join(name)).unwrap());
            let mut found = Vec::new();
            let gaps = scan_bytes(&file, &mut |l| found.push(l.id.as_u128())).unwrap();
            assert_eq!((found, gaps.cut), (ids, cut), "{name}");
        }
    }

    #[test]
    fn a_header_never_crosses_a_page() {
        for end in FILE_HEADER..3 * 4096 {
            let at = next_offset(end);
            assert!(at >= end && at.is_multiple_of(8) && at - end < 4096);
            assert_eq!(at / 4096, (at + RECORD_HEADER as u64 - 1) / 4096, "{end}");
        }
    }

    #[test]
    fn recovery_moves_what_the_database_lacks_in_id_order_and_deletes_the_files() {
        let dir = temp("recover");
        let first = JournalFile::create(&dir, 1).unwrap();
        let second = JournalFile::create(&dir, 2).unwrap();
        let place = |file: &JournalFile, end: &mut u64, n: u128| {
            let bytes = sealed(&loaded(n, format!("message {n}").as_bytes()));
            let at = next_offset(*end);
            file.write_at(&bytes, at).unwrap();
            *end = at + bytes.len() as u64;
        };
        let (mut a, mut b) = (FILE_HEADER, FILE_HEADER);
        for n in 1..=3 {
            place(&first, &mut a, n);
        }
        for n in 4..=5 {
            place(&second, &mut b, n);
        }
        let mut storage = Fake::default();
        // 1 and 2 were moved before the crash.
        let recovered = recover(&dir, &mut storage, Some(MessageId::from_u128(2))).unwrap();
        assert_eq!(recovered.files, 2);
        assert_eq!(recovered.moved, 3);
        let ids: Vec<u128> = storage.rows.iter().map(|l| l.id.as_u128()).collect();
        assert_eq!(ids, [3, 4, 5]);
        assert_eq!(storage.rows[0], loaded(3, b"message 3"));
        assert!(list(&dir).unwrap().is_empty());
        // Nothing left: a second start moves nothing.
        assert_eq!(
            recover(&dir, &mut storage, None).unwrap(),
            Recovered::default()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
