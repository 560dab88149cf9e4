//! The shared MIME corpus (`shared/corpus/mime`, beside the repository) as the
//! tests read it. Included by path from `core/tests/message_corpus.rs` and,
//! through `host-native/tests/common/mod.rs`, from the host's corpus tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The corpus folder, from the including crate's folder (one below the repository root).
pub const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/mime");

/// Every file below the corpus folder, sorted (the same order every run);
/// `None`, after a notice naming `what` is skipped, when there is none.
pub fn corpus_files(what: &str) -> Option<Vec<PathBuf>> {
    let mut all = Vec::new();
    files(Path::new(CORPUS), &mut all);
    if all.is_empty() {
        println!("NOTICE: no corpus at {CORPUS}: {what} skipped");
        return None;
    }
    all.sort();
    Some(all)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else if path.is_file() {
            out.push(path);
        }
    }
}

/// What an SMTP client sends of a file: every bare LF turned into CRLF and a
/// final CRLF added when missing; with whether either changed anything.
pub fn smtp_text(file: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(file.len() + 64);
    let mut changed = false;
    for (i, &b) in file.iter().enumerate() {
        if b == b'\n' && (i == 0 || file[i - 1] != b'\r') {
            out.push(b'\r');
            changed = true;
        }
        out.push(b);
    }
    if !out.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
        changed = true;
    }
    (out, changed)
}
