//! `Session::handle_input` with arbitrary bytes in arbitrary chunks: never panics,
//! gives the same outputs however the bytes are split, every reply is one
//! well-formed SMTP reply, and every message is followed by its 250.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mailjar_core::smtp::{Config, Credentials, NoFaults, Output, Security, Session, Unlimited};

fn config() -> Config {
    Config {
        hostname: "fuzz.test".into(),
        max_message_bytes: 2048,
        max_recipients: 5,
        max_line_bytes: 512,
        max_errors: 50,
        // STARTTLS and checked AUTH are explored too.
        security: Security {
            starttls: true,
            credentials: Credentials::new(vec![("u".into(), "p".into())]),
            ..Security::default()
        },
        ..Config::default()
    }
}

/// Feeds `input` as a host does and drains the outputs, each message reported stored.
fn receive(session: &mut Session, input: &[u8]) -> Vec<Output> {
    session.handle_input(input, 0, &mut Unlimited, &mut NoFaults);
    let mut out = Vec::new();
    while let Some(output) = session.poll_output() {
        if matches!(output, Output::Message(_)) {
            session.handle_stored(Ok(()));
        }
        out.push(output);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // The first byte seeds the chunk sizes; the rest is what the client sends.
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let whole = receive(&mut Session::new(config()), input);
    let mut session = Session::new(config());
    let mut chunked = Vec::new();
    let mut rest = input;
    let mut step = usize::from(seed % 17) + 1;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(step.min(rest.len()));
        chunked.extend(receive(&mut session, chunk));
        rest = tail;
        step = step * 7 % 23 + 1;
    }
    assert_eq!(whole, chunked, "chunking changed the outputs");
    for (i, output) in whole.iter().enumerate() {
        match output {
            Output::Reply(reply) => {
                assert!((200..600).contains(&reply.code));
                let wire = reply.to_bytes();
                let text = std::str::from_utf8(&wire).expect("UTF-8 reply");
                assert!(text.ends_with("\r\n"));
                for line in text.split_terminator("\r\n") {
                    assert!(line.len() >= 4 && line.starts_with(&reply.code.to_string()));
                }
            }
            Output::Message(message) => {
                assert!(message.raw.len() <= 2048);
                assert!(!message.envelope.to.is_empty());
                assert!(matches!(whole.get(i + 1), Some(Output::Reply(r)) if r.code == 250));
            }
            Output::Close => assert_eq!(i + 1, whole.len(), "outputs after Close"),
            Output::Fault(fired) => panic!("a fault fired with no rules: {fired:?}"),
            // The host would run the handshake: nothing is read before it.
            Output::StartTls => assert_eq!(i + 1, whole.len(), "outputs after StartTls"),
        }
    }
});
