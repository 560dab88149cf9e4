//! The IMAP session with arbitrary bytes in arbitrary chunks: never panics,
//! writes the same bytes however the input is split, ends every response
//! with CRLF, and asks nothing after it closes.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use mailjar_core::id::IdGenerator;
use mailjar_core::imap::{Config, Entry, Output, Session};
use mailjar_core::smtp::{Envelope, Incoming};
use mailjar_core::store::{Email, Prepared};

/// Two stored messages, one multipart with an attachment.
fn maildrop() -> Vec<Arc<Email>> {
    let mut ids = IdGenerator::new();
    [
        &b"Subject: a\r\nFrom: A <a@x.test>\r\n\r\nbody with a \0 NUL\r\n"[..],
        b"Subject: b\nContent-Type: multipart/mixed; boundary=q\n\n--q\n\ntext\n--q\nContent-Type: message/rfc822\n\nSubject: in\n\ninner\n--q--\n",
    ]
        .iter()
        .map(|raw| {
            let prepared = Prepared::new(Incoming {
                envelope: Envelope {
                    from: "s@x.test".into(),
                    to: vec!["a@x.test".into()],
                },
                raw: raw.to_vec(),
                helo: None,
                session: Default::default(),
                transcript: Default::default(),
            });
            Arc::new(Email::new(ids.next(1, [0; 10]), 1, prepared))
        })
        .collect()
}

/// Feeds `input` and answers every request as a host would; what was written.
fn receive(session: &mut Session, emails: &[Arc<Email>], input: &[u8], closed: &mut bool) -> Vec<u8> {
    session.handle_input(input, 0);
    let mut wire = Vec::new();
    loop {
        while session.poll_transmit(&mut wire) {}
        let Some(output) = session.poll_output() else {
            return wire;
        };
        assert!(!*closed, "a request after Close: {output:?}");
        match output {
            Output::Login { password, .. } => session.handle_login((password != "wrong").then(|| {
                emails
                    .iter()
                    .zip(1..)
                    .map(|(e, uid)| Entry {
                        id: e.id,
                        uid,
                        size: e.raw().len() as u64,
                        received_ms: 1_700_000_000_000,
                        seen: false,
                    })
                    .collect()
            })),
            Output::Message(id) => session.handle_message(emails.iter().find(|e| e.id == id).cloned()),
            Output::Seen { .. } => {}
            Output::Delete(_) => session.handle_deleted(true),
            Output::StartTls => session.tls_started(),
            Output::Close => *closed = true,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte seeds the chunk sizes; the rest is what the client sends.
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let emails = maildrop();
    let config = Config {
        starttls: true,
        max_command_bytes: 256,
        ..Config::default()
    };
    let mut closed = false;
    let whole = receive(&mut Session::new(config.clone(), 0), &emails, input, &mut closed);
    let mut session = Session::new(config, 0);
    let mut closed = false;
    let mut chunked = Vec::new();
    let mut rest = input;
    let mut step = usize::from(seed % 17) + 1;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(step.min(rest.len()));
        chunked.extend(receive(&mut session, &emails, chunk, &mut closed));
        rest = tail;
        step = step * 7 % 23 + 1;
    }
    // STARTTLS drops what was pipelined after it, so chunking may differ only then.
    if !whole.windows(24).any(|w| w == b"OK begin TLS negotiation") {
        assert_eq!(whole, chunked, "chunking changed what was written");
    }
    assert!(whole.is_empty() || whole.ends_with(b"\r\n"));
});
