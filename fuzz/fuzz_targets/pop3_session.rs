//! The POP3 session with arbitrary bytes in arbitrary chunks: never panics,
//! writes the same bytes however the input is split, ends every line with
//! CRLF, and asks nothing after it closes.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use mailjar_core::pop3::{Config, Session};

/// Two stored messages, one with lines that need dot-stuffing.
const MAILDROP: [&[u8]; 2] = [
    b"Subject: a\r\n\r\n.dot\r\nbody\r\n",
    b"Subject: b\n\nno final line end",
];

fuzz_target!(|data: &[u8]| {
    let config = Config {
        stls: true,
        max_line_bytes: 256,
        ..Config::default()
    };
    common::writes_the_same_however_split::<Session>(
        data,
        &MAILDROP,
        config,
        b"+OK begin TLS negotiation",
    );
});
