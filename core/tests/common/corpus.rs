//! The shared MIME corpus (`shared/corpus/mime`, beside the repository) as the
//! tests read it. Included by path from `core/tests/message_corpus.rs` and,
//! through `host-native/tests/common/mod.rs`, from the host's corpus tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The corpus folder, from the including crate's folder (one below the
/// repository root); `MAILJAR_CORPUS` names another one.
pub static CORPUS: LazyLock<String> = LazyLock::new(|| {
    std::env::var("MAILJAR_CORPUS").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/mime").to_owned()
    })
});

/// Whether this is a CI run (`CI` set, and not to `false` or `0`), where the
/// corpus and python3 are part of the job and their absence is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Skips `what` with a notice saying `why`, or fails under CI: a test that
/// passes there without having run hides a broken job.
pub fn skip(what: &str, why: &str) {
    assert!(!in_ci(), "CI is set and {why}: {what} cannot run");
    println!("NOTICE: {why}: {what} skipped");
}

/// Every file below the corpus folder, sorted (the same order every run);
/// `None`, after [`skip`] (a failure under CI), when there is none.
pub fn corpus_files(what: &str) -> Option<Vec<PathBuf>> {
    let mut all = Vec::new();
    files(Path::new(CORPUS.as_str()), &mut all);
    if all.is_empty() {
        skip(what, &format!("no corpus at {}", *CORPUS));
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
