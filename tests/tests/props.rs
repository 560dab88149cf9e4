//! Property tests without sockets: SMTP sessions fed to the core in random
//! chunkings, with every accepted message delivered to the API, as a host does.
//!
//! - Well-formed sessions (noise commands, several transactions, DATA with
//!   dot-stuffing or BDAT chunks): every transaction is accepted with 250 and
//!   stored exactly as the client meant it, in order, and the API lists it.
//! - Random input: never a panic, every reply well-formed, every message
//!   followed by its 250, and the API stores exactly what the session handed out.

use mailjar_core::api::{Answered, Api, ApiConfig, Request};
use mailjar_core::budget::StoppedClock;
use mailjar_core::smtp::{Config, NoFaults, Output, Session, Unlimited};
use mailjar_core::store::Prepared;
use mailjar_tests::vectors::{ExpectedMessage, check_listed};
use proptest::prelude::*;

const NOW: u64 = 1_763_779_327_000;

/// How the client sends the message text.
#[derive(Debug, Clone)]
enum Body {
    /// DATA with this text (dot-stuffed and terminated by the client).
    Data(Vec<u8>),
    /// BDAT chunks, the last with LAST.
    Bdat(Vec<Vec<u8>>),
}

#[derive(Debug, Clone)]
struct Transaction {
    noise: Vec<&'static str>,
    from: String,
    to: Vec<String>,
    body: Body,
}

/// Bytes that hit the edge cases of DATA: dots, CR, LF, NUL, 8-bit.
fn tricky_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        3 => Just(b'.'),
        3 => Just(b'\r'),
        3 => Just(b'\n'),
        3 => Just(b'a'),
        1 => Just(0u8),
        1 => Just(0xffu8),
        1 => any::<u8>(),
    ];
    proptest::collection::vec(byte, 0..max)
}

fn transaction() -> impl Strategy<Value = Transaction> {
    let noise = proptest::collection::vec(
        prop_oneof![
            Just("NOOP\r\n"),
            Just("RSET\r\n"),
            Just("VRFY someone\r\n"),
            Just("HELP\r\n"),
            Just("EHLO again.test\r\n"),
            Just("XYZZY\r\n"),
            Just("MAIL\r\n"),
            Just("\r\n"),
        ],
        0..3,
    );
    let address = prop_oneof![
        Just("a@x.test".to_owned()),
        Just("B@Y.test".to_owned()),
        Just("\"q d\"@z.test".to_owned()),
        "[a-z]{1,8}@[a-z]{1,8}\\.test",
    ];
    let from = prop_oneof![Just(String::new()), address.clone()];
    let body = prop_oneof![
        tricky_bytes(300).prop_map(Body::Data),
        proptest::collection::vec(tricky_bytes(60), 1..4).prop_map(Body::Bdat),
    ];
    (noise, from, proptest::collection::vec(address, 1..4), body).prop_map(
        |(noise, from, to, body)| Transaction {
            noise,
            from,
            to,
            body,
        },
    )
}

/// The client's bytes for a transaction, and the message it means to send.
fn encode(t: &Transaction) -> (Vec<u8>, Vec<u8>) {
    let mut out: Vec<u8> = t.noise.concat().into_bytes();
    out.extend_from_slice(format!("MAIL FROM:<{}>\r\n", t.from).as_bytes());
    for rcpt in &t.to {
        out.extend_from_slice(format!("RCPT TO:<{rcpt}>\r\n").as_bytes());
    }
    let meant = match &t.body {
        Body::Data(text) => {
            let mut meant = text.clone();
            if !meant.ends_with(b"\r\n") {
                meant.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"DATA\r\n");
            let mut line_start = true;
            for (i, &b) in meant.iter().enumerate() {
                if line_start && b == b'.' {
                    out.push(b'.');
                }
                out.push(b);
                line_start = b == b'\n' && i > 0 && meant[i - 1] == b'\r';
            }
            out.extend_from_slice(b".\r\n");
            meant
        }
        Body::Bdat(chunks) => {
            for (i, chunk) in chunks.iter().enumerate() {
                let last = if i + 1 == chunks.len() { " LAST" } else { "" };
                out.extend_from_slice(format!("BDAT {}{last}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
            }
            chunks.concat()
        }
    };
    (out, meant)
}

/// Splits `input` at `cuts` (taken modulo its length).
fn chunks(input: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([input.len()]) {
        out.push(input[start..cut].to_vec());
        start = cut;
    }
    out
}

/// What a host does: feeds the chunks, stores each message before the reply after it.
struct Hosted {
    outputs: Vec<Output>,
    api: Api,
    stored: Vec<ExpectedMessage>,
}

fn host(config: Config, chunks: &[Vec<u8>]) -> Hosted {
    let mut session = Session::new(config);
    let mut api: Api = Api::new(ApiConfig::default());
    let mut outputs = vec![Output::Reply(session.greeting())];
    let mut stored = Vec::new();
    for (n, chunk) in chunks.iter().enumerate() {
        session.handle_input(chunk, 0, &mut Unlimited, &mut NoFaults);
        while let Some(output) = session.poll_output() {
            if let Output::Message(m) = &output {
                stored.push(ExpectedMessage {
                    from: m.envelope.from.clone(),
                    to: m.envelope.to.clone(),
                    raw: m.raw.clone(),
                });
                api.deliver(Prepared::new(m.clone()), NOW, [n as u8; 10]);
                session.handle_stored(Ok(()));
            }
            outputs.push(output);
        }
    }
    Hosted {
        outputs,
        api,
        stored,
    }
}

/// Replies are well-formed; each message is followed by a 250; nothing follows Close.
fn check_outputs(outputs: &[Output]) -> Result<(), TestCaseError> {
    for (i, o) in outputs.iter().enumerate() {
        match o {
            Output::Reply(r) => {
                prop_assert!((200..600).contains(&r.code), "code {}", r.code);
                for line in &r.lines {
                    prop_assert!(!line.contains(['\r', '\n']), "{line:?}");
                }
            }
            Output::Message(_) => {
                prop_assert!(
                    matches!(outputs.get(i + 1), Some(Output::Reply(r)) if r.code == 250),
                    "a message without its 250"
                );
            }
            Output::Close => prop_assert_eq!(i + 1, outputs.len()),
            Output::Fault(f) => prop_assert!(false, "a fault fired with no rules: {:?}", f),
            Output::StartTls => prop_assert!(false, "an upgrade without TLS configured"),
        }
    }
    Ok(())
}

/// The API stores exactly what the session handed out, and lists it so.
fn check_stored(hosted: &mut Hosted) -> Result<(), TestCaseError> {
    let snapshot = hosted.api.store().snapshot();
    let raws: Vec<&[u8]> = snapshot.iter().map(|e| e.raw()).collect();
    let want: Vec<&[u8]> = hosted.stored.iter().map(|m| m.raw.as_slice()).collect();
    prop_assert_eq!(raws, want);
    let request = Request::new("GET", "/api/emails");
    let Answered::Ready(list) = hosted.api.answer((), &request, NOW, &StoppedClock) else {
        return Err(TestCaseError::fail("the list parked"));
    };
    let list =
        serde_json::from_str(&list.into_text()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    check_listed(&list, &hosted.stored).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_transaction_is_accepted_and_stored_exactly(
        transactions in proptest::collection::vec(transaction(), 1..5),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ehlo in any::<bool>(),
    ) {
        let mut input = if ehlo { b"EHLO client.test\r\n".to_vec() } else { Vec::new() };
        let mut meant = Vec::new();
        for t in &transactions {
            let (bytes, raw) = encode(t);
            input.extend(bytes);
            meant.push(ExpectedMessage { from: t.from.clone(), to: t.to.clone(), raw });
        }
        input.extend_from_slice(b"QUIT\r\n");
        let mut hosted = host(Config::default(), &chunks(&input, &cuts));
        check_outputs(&hosted.outputs)?;
        prop_assert_eq!(&hosted.stored, &meant);
        let accepted = hosted.outputs.iter().filter(|o| matches!(o, Output::Reply(r) if r.code == 250 && r.text().starts_with("2.0.0 Message accepted"))).count();
        prop_assert_eq!(accepted, meant.len());
        prop_assert!(matches!(hosted.outputs.last(), Some(Output::Close)));
        check_stored(&mut hosted)?;
    }

    #[test]
    fn random_input_is_stored_exactly_when_accepted(
        pieces in proptest::collection::vec(prop_oneof![
            Just(b"EHLO c\r\n".to_vec()),
            Just(b"MAIL FROM:<a@b.test>\r\n".to_vec()),
            Just(b"RCPT TO:<c@d.test>\r\n".to_vec()),
            Just(b"DATA\r\n".to_vec()),
            Just(b"\r\n.\r\n".to_vec()),
            Just(b"BDAT 3\r\n".to_vec()),
            Just(b"BDAT 2 LAST\r\n".to_vec()),
            Just(b"AUTH PLAIN\r\n".to_vec()),
            Just(b"RSET\r\n".to_vec()),
            Just(b".\r\n".to_vec()),
            Just(b"\n.\n".to_vec()),
            tricky_bytes(40),
        ], 0..40),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let input = pieces.concat();
        let config = Config { max_message_bytes: 120, max_recipients: 3, max_line_bytes: 64, max_errors: 8, ..Config::default() };
        let whole = host(config.clone(), std::slice::from_ref(&input));
        let mut chunked = host(config, &chunks(&input, &cuts));
        check_outputs(&chunked.outputs)?;
        prop_assert_eq!(&chunked.outputs, &whole.outputs);
        check_stored(&mut chunked)?;
    }
}
