//! Transcripts kept with `--data-dir`: a session's SMTP dialogue, sent by
//! Python's smtplib to the real binary, reads back the same after a restart.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Server, run_smtplib};
use serde_json::Value;

fn data_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mailjar-transcript-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn start(dir: &std::path::Path) -> Server {
    Server::start_with(&["--data-dir", dir.to_str().expect("utf-8 temp dir")])
}

fn transcript(server: &Server, id: &str) -> Value {
    server.get_ok(&format!("/api/emails/{id}/transcript"))["transcript"].clone()
}

#[test]
fn a_transcript_reads_back_the_same_after_a_restart() {
    let dir = data_dir("restart");
    let server = start(&dir);
    let script = r#"
import smtplib
s = smtplib.SMTP(HOST, PORT)
s.ehlo("client.example")
s.sendmail("app@example.com", ["user@example.com"], "Subject: kept\r\n\r\nbody\r\n")
s.sendmail("app@example.com", ["other@example.com"], "Subject: second\r\n\r\nmore\r\n")
s.quit()
"#;
    run_smtplib(&server, script, &[], b"");
    let emails = server.emails("");
    assert_eq!(emails.len(), 2);
    let before: Vec<(String, Value)> = emails
        .iter()
        .map(|e| {
            let id = e["id"].as_str().expect("id").to_owned();
            let lines = transcript(&server, &id);
            (id, lines)
        })
        .collect();
    for (_, lines) in &before {
        let text = lines.to_string();
        assert!(text.contains("ehlo client.example"), "{text}");
        assert!(text.contains("rcpt TO:<"), "{text}");
    }
    assert_ne!(before[0].1, before[1].1, "each message has its own");
    server.sigterm();
    let mut server = server;
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());

    let server = start(&dir);
    for (id, lines) in &before {
        assert_eq!(&transcript(&server, id), lines, "transcript of {id}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
