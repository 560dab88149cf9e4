//! The ingest journal's recovery scan over arbitrary file contents (after a
//! valid file header): never panics, reads no more than the file holds, and
//! every message it returns is one a record could hold: written again as a
//! record, it reads back the same. The journal is written by mailjar itself,
//! but a crash, a power cut or a damaged disk can leave any bytes in it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mailjar::storage::journal::{Encoded, FILE_HEADER, FILE_MAGIC, decode, scan_bytes};

fuzz_target!(|data: &[u8]| {
    let mut file = Vec::with_capacity(FILE_HEADER as usize + data.len());
    file.extend_from_slice(FILE_MAGIC);
    file.extend_from_slice(&1u64.to_le_bytes());
    file.extend_from_slice(data);
    let mut found = Vec::new();
    let _ = scan_bytes(&file, &mut |loaded| found.push(loaded));
    for loaded in found {
        let smtp = loaded.smtp_facts();
        let mut record = Encoded::new(&loaded.record(&smtp)).expect("it was read from a record");
        record.seal(loaded.id, loaded.received_at_ms, &loaded.incoming.raw);
        assert_eq!(decode(&record.bytes(&loaded.incoming.raw)), Some(loaded));
    }
    // Any bytes as one record: no panic.
    let _ = decode(data);
});
