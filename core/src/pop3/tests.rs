use base64::Engine as _;

use super::*;
use crate::id::IdGenerator;
use crate::reader_host::{Host, assert_any_split_writes_the_same, email};

const ONE: &[u8] = b"Subject: one\r\n\r\nfirst line\r\n.starts with a dot\r\nlast\r\n";
const TWO: &[u8] = b"Subject: two\r\nX: y\r\n\r\nbody a\r\nbody b\r\nbody c";

/// The messages of every test's host: ONE and TWO.
fn host() -> Host {
    Host::new(&[ONE, TWO])
}

/// Runs `input` split at `splits`, answering as [`Host`] does; everything written.
fn run(input: &[u8], splits: &[usize], config: Config) -> (Vec<u8>, Host) {
    let mut host = host();
    let wire = host.run::<Session>(input, splits, config);
    (wire, host)
}

fn text(wire: &[u8]) -> String {
    String::from_utf8_lossy(wire).into_owned()
}

const DIALOGUE: &[u8] = b"CAPA\r\nUSER u\r\nPASS p w\r\nSTAT\r\nLIST\r\nUIDL 2\r\nRETR 1\r\nTOP 2 1\r\nDELE 1\r\nLIST 1\r\nSTAT\r\nRSET\r\nDELE 2\r\nQUIT\r\n";

#[test]
fn a_whole_dialogue_reads_as_rfc_1939_says() {
    let (wire, host) = run(DIALOGUE, &[], Config::default());
    let wire = text(&wire);
    let sizes = (ONE.len(), TWO.len());
    let expected = [
        "+OK mailjar POP3 ready".to_owned(),
        "+OK capability list follows\r\nUSER\r\nUIDL\r\nTOP\r\nPIPELINING\r\nRESP-CODES\r\nAUTH-RESP-CODE\r\nSASL PLAIN\r\nIMPLEMENTATION mailjar\r\n.".to_owned(),
        "+OK send PASS".to_owned(),
        format!("+OK maildrop has 2 messages ({} octets)", sizes.0 + sizes.1),
        format!("+OK 2 {}", sizes.0 + sizes.1),
        format!("+OK 2 messages\r\n1 {}\r\n2 {}\r\n.", sizes.0, sizes.1),
        format!("+OK 2 {}", host.emails[1].id),
        format!(
            "+OK {} octets\r\nSubject: one\r\n\r\nfirst line\r\n..starts with a dot\r\nlast\r\n.",
            sizes.0
        ),
        format!("+OK {} octets\r\nSubject: two\r\nX: y\r\n\r\nbody a\r\n.", sizes.1),
        "+OK message 1 deleted".to_owned(),
        "-ERR no such message".to_owned(),
        format!("+OK 1 {}", sizes.1),
        "+OK maildrop has 2 messages".to_owned(),
        "+OK message 2 deleted".to_owned(),
        "+OK mailjar POP3 signing off (1 messages deleted)".to_owned(),
    ]
    .join("\r\n")
        + "\r\n";
    assert_eq!(wire, expected);
    assert_eq!(host.deleted, vec![host.emails[1].id]);
    assert_eq!(
        host.seen,
        [(host.emails[0].id, true)],
        "RETR 1 marks seen, TOP 2 does not"
    );
    assert!(host.closed);
}

#[test]
fn any_split_of_the_input_gives_the_same_bytes() {
    assert_any_split_writes_the_same::<Session>(&[ONE, TWO], DIALOGUE, Config::default());
}

#[test]
fn wrong_credentials_retry_and_auth_plain_logs_in() {
    let plain = base64::engine::general_purpose::STANDARD.encode(b"\0u\0p w");
    let input = format!(
        "PASS x\r\nUSER u\r\nPASS nope\r\nSTAT\r\nAUTH PLAIN\r\n{plain}\r\nSTAT\r\nQUIT\r\n"
    );
    let (wire, host) = run(input.as_bytes(), &[], Config::default());
    let wire = text(&wire);
    assert!(wire.contains("-ERR USER first\r\n"), "{wire}");
    assert!(
        wire.contains("-ERR [AUTH] invalid user name or password\r\n"),
        "{wire}"
    );
    assert!(
        wire.contains("-ERR unknown command, or not before a login\r\n+ \r\n+OK maildrop has 2"),
        "{wire}"
    );
    assert!(wire.ends_with("+OK mailjar POP3 signing off\r\n"), "{wire}");
    assert!(host.deleted.is_empty() && host.closed);
}

#[test]
fn stls_is_offered_only_with_tls_and_drops_pipelined_commands() {
    let config = Config {
        stls: true,
        ..Config::default()
    };
    let input = b"CAPA\r\nSTLS\r\nUSER smuggled\r\nCAPA\r\nSTLS\r\n";
    let after_smuggled = input.len() - b"CAPA\r\nSTLS\r\n".len();
    let (wire, host) = run(input, &[after_smuggled], config);
    let wire = text(&wire);
    assert!(host.tls);
    assert!(
        wire.contains("SASL PLAIN\r\nSTLS\r\nIMPLEMENTATION"),
        "{wire}"
    );
    assert!(
        wire.contains("+OK begin TLS negotiation\r\n+OK capability"),
        "{wire}"
    );
    assert!(!wire.contains("send PASS"), "{wire}");
    assert!(wire.ends_with("-ERR STLS is not available\r\n"), "{wire}");
    let (wire, _) = run(b"CAPA\r\nSTLS\r\n", &[], Config::default());
    assert!(!text(&wire).contains("STLS\r\nIMPL"));
}

#[test]
fn a_message_deleted_meanwhile_and_long_lines_get_errors() {
    let mut host = host();
    let mut session = Session::new(
        Config {
            max_line_bytes: 64,
            ..Config::default()
        },
        0,
    );
    host.drive(&mut session);
    session.handle_input(b"USER u\r\nPASS p w\r\n", 1);
    host.drive(&mut session);
    host.gone.insert(host.emails[0].id);
    session.handle_input(b"RETR 1\r\nRETR 9\r\nRETR x\r\n", 2);
    let long = [b'A'; 200];
    session.handle_input(&long, 3);
    session.handle_input(b"\r\nNOOP\r\n", 4);
    let wire = text(&host.drive(&mut session));
    assert_eq!(
        wire,
        "-ERR message was deleted from the store\r\n-ERR no such message\r\n-ERR no such message\r\n-ERR line too long\r\n+OK\r\n"
    );
}

#[test]
fn an_idle_session_ends_without_deleting() {
    let mut host = host();
    let mut session = Session::new(Config::default(), 0);
    host.drive(&mut session);
    session.handle_input(b"USER u\r\nPASS p w\r\nDELE 1\r\n", 5);
    host.drive(&mut session);
    let due = session.poll_timeout().unwrap();
    assert_eq!(due, 5 + Config::default().idle_timeout_ms);
    session.handle_timeout(due - 1);
    assert!(!host.closed);
    session.handle_timeout(due);
    let wire = text(&host.drive(&mut session));
    assert!(wire.starts_with("-ERR [IN-USE] autologout"), "{wire}");
    assert!(host.closed && host.deleted.is_empty());
    assert_eq!(session.poll_timeout(), None);
}

#[test]
fn a_large_message_goes_out_in_bounded_chunks() {
    let mut ids = IdGenerator::new();
    let mut raw = b"Subject: big\r\n\r\n".to_vec();
    for i in 0..20_000 {
        raw.extend_from_slice(format!(".line {i} of the body, long enough\r\n").as_bytes());
    }
    let big = email(&mut ids, &raw);
    let mut session = Session::new(Config::default(), 0);
    let mut wire = Vec::new();
    session.poll_transmit(&mut wire);
    session.handle_input(b"USER u\r\nPASS p w\r\n", 1);
    let _ = session.poll_output();
    session.handle_login(Some(vec![Entry {
        id: big.id,
        size: raw.len() as u64,
    }]));
    session.handle_input(b"RETR 1\r\nNOOP\r\n", 2);
    session.poll_transmit(&mut wire);
    assert_eq!(session.poll_output(), Some(Output::Seen(big.id)));
    assert_eq!(session.poll_output(), Some(Output::Fetch(big.id)));
    session.handle_message(Some(big));
    let mut chunks = 0;
    loop {
        let mut chunk = Vec::new();
        if !session.poll_transmit(&mut chunk) {
            break;
        }
        // Dot-stuffing adds at most a byte a line: at most twice the chunk.
        assert!(chunk.len() <= 2 * CHUNK + 64, "{}", chunk.len());
        wire.extend(chunk);
        chunks += 1;
    }
    assert!(chunks > raw.len() / CHUNK, "{chunks}");
    let wire = text(&wire);
    assert_eq!(wire.matches("\r\n..line ").count(), 20_000);
    assert!(
        wire.ends_with("\r\n.\r\n+OK\r\n"),
        "{}",
        &wire[wire.len() - 40..]
    );
}

#[test]
fn too_many_errors_close_the_connection() {
    let input = "BOGUS\r\n".repeat(MAX_ERRORS + 5);
    let (wire, host) = run(input.as_bytes(), &[], Config::default());
    let wire = text(&wire);
    assert_eq!(wire.matches("-ERR unknown command").count(), MAX_ERRORS);
    assert!(wire.ends_with("-ERR too many errors\r\n"));
    assert!(host.closed);
}
