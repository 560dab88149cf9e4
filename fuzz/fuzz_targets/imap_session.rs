//! The IMAP session with arbitrary bytes in arbitrary chunks: never panics,
//! writes the same bytes however the input is split, ends every response
//! with CRLF, and asks nothing after it closes.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use mailjar_core::imap::{Config, Session};

/// Two stored messages, one multipart with an attachment.
const MAILDROP: [&[u8]; 2] = [
    b"Subject: a\r\nFrom: A <a@x.test>\r\n\r\nbody with a \0 NUL\r\n",
    b"Subject: b\nContent-Type: multipart/mixed; boundary=q\n\n--q\n\ntext\n--q\nContent-Type: message/rfc822\n\nSubject: in\n\ninner\n--q--\n",
];

fuzz_target!(|data: &[u8]| {
    let config = Config {
        starttls: true,
        max_command_bytes: 256,
        ..Config::default()
    };
    common::writes_the_same_however_split::<Session>(
        data,
        &MAILDROP,
        config,
        b"OK begin TLS negotiation",
    );
});
