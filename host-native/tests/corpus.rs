//! Real-world messages from the shared corpus, delivered over SMTP and read back byte for byte.
//!
//! What is sent: each file with every bare LF turned into CRLF (SMTP lines end
//! in CRLF; files that already use CRLF are untouched) and a final CRLF added
//! when the file lacks one (a DATA text always ends with CRLF). That text is
//! dot-stuffed on the wire; the server must store it exactly, unstuffed.

mod common;

use std::path::PathBuf;

use common::corpus::{corpus_files, smtp_text};
use common::{Server, assert_stored};

const SAMPLE: usize = 40;

#[test]
fn corpus_messages_come_back_byte_for_byte() {
    let Some(all) = corpus_files("corpus test") else {
        return;
    };
    // An even spread over the sorted list, the same every run.
    let sample: Vec<&PathBuf> = (0..SAMPLE.min(all.len()))
        .map(|i| &all[i * all.len() / SAMPLE.min(all.len())])
        .collect();
    let server = Server::start();
    let mut smtp = server.smtp();
    smtp.expect("EHLO corpus.e2e.test", 250);
    let mut sent = Vec::new();
    let (mut normalised, mut not_utf8) = (0, 0);
    for (i, path) in sample.iter().enumerate() {
        let file = std::fs::read(path).unwrap();
        let (text, changed) = smtp_text(&file);
        normalised += usize::from(changed);
        not_utf8 += usize::from(std::str::from_utf8(&text).is_err());
        let to = format!("corpus{i}@example.test");
        let reply = smtp.transaction("corpus@example.test", &[&to], &text);
        assert_eq!(reply.code, 250, "{}: {}", path.display(), reply.wire);
        assert_eq!(
            reply.lines[0],
            format!("2.0.0 Message accepted ({} bytes)", text.len()),
            "{}",
            path.display()
        );
        sent.push((path, to, text));
    }
    smtp.expect("QUIT", 221);
    let emails = server.emails("");
    assert_eq!(emails.len(), sent.len());
    for (email, (path, to, text)) in emails.iter().zip(&sent) {
        // `raw` is a JSON string: exact for UTF-8 messages; for others the size is exact
        // and the text is compared after the same lossy decoding.
        println!("checking {}", path.display()); // shown when the comparison fails
        assert_stored(email, "corpus@example.test", &[to], text);
    }
    println!(
        "{} corpus messages delivered; {normalised} needed CRLF normalisation or a final CRLF; {not_utf8} are not UTF-8",
        sent.len()
    );
}
