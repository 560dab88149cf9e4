use proptest::prelude::*;

use super::*;
use crate::email::Email;
use crate::reader_host::{Host, Reader, assert_any_split_writes_the_same};

const ONE: &[u8] = b"From: Ann <ann@example.com>\r\nTo: bob@example.com\r\nSubject: =?utf-8?q?caf=C3=A9?= one\r\nDate: Mon, 2 Jan 2023 10:00:00 +0000\r\nMessage-ID: <one@x>\r\n\r\nfirst line\r\nsecond\r\n";
const TWO: &[u8] = b"From: carl@example.org\r\nTo: Dee <dee@example.org>\r\nSubject: two\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n--b\r\nContent-Type: application/octet-stream; name=\"a.bin\"\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAEC\r\n--b--\r\n";

/// The messages of every test's host: ONE and TWO.
fn host() -> Host {
    Host::new(&[ONE, TWO])
}

fn entry(email: &Email, uid: u32) -> Entry {
    <Session as Reader>::entry(email, uid)
}

/// Runs `input` split at `splits`, answering as [`Host`] does; everything written.
fn run(input: &[u8], splits: &[usize], config: Config) -> (String, Host) {
    let mut host = host();
    let wire = host.run::<Session>(input, splits, config);
    (String::from_utf8_lossy(&wire).into_owned(), host)
}

const DIALOGUE: &[u8] = b"a CAPABILITY\r\nb LOGIN u {3}\r\np w\r\nc LIST \"\" *\r\nd SELECT INBOX\r\ne FETCH 1:* (UID FLAGS RFC822.SIZE)\r\nf UID FETCH 2 (BODY.PEEK[1] BODY.PEEK[2.MIME] BODY.PEEK[HEADER.FIELDS (subject)])\r\ng SEARCH CHARSET UTF-8 SUBJECT {5}\r\nCAF\xc3\xa9\r\nh UID SEARCH FROM carl\r\ni STORE 1 +FLAGS (\\Deleted \\Seen)\r\nj FETCH 2 BODY[]<0.9>\r\nk EXPUNGE\r\nl FETCH 1 (FLAGS)\r\nm LOGOUT\r\n";

#[test]
fn a_whole_dialogue_reads_as_rfc_3501_says() {
    let (wire, host) = run(DIALOGUE, &[], Config::default());
    let lines = [
        "* OK [CAPABILITY IMAP4REV1 AUTH=PLAIN SASL-IR IDLE UIDPLUS UNSELECT] mailjar IMAP4rev1 ready",
        "* CAPABILITY IMAP4REV1 AUTH=PLAIN SASL-IR IDLE UIDPLUS UNSELECT\r\na OK CAPABILITY completed",
        "+ \r\nb OK [CAPABILITY IMAP4REV1 AUTH=PLAIN SASL-IR IDLE UIDPLUS UNSELECT] logged in",
        "* LIST () \"/\" INBOX\r\nc OK LIST completed",
        "* 2 EXISTS\r\n* 0 RECENT\r\n* OK [UNSEEN 1] first unseen\r\n* OK [UIDVALIDITY 1] UIDs valid\r\n* OK [UIDNEXT 3] predicted next UID\r\nd OK [READ-WRITE] SELECT completed",
        &format!(
            "* 1 FETCH (UID 1 FLAGS () RFC822.SIZE {})\r\n* 2 FETCH (UID 2 FLAGS () RFC822.SIZE {})\r\ne OK FETCH completed",
            ONE.len(),
            TWO.len()
        ),
        "* 2 FETCH (UID 2 BODY[1] \"hello\" BODY[2.MIME] {142}\r\nContent-Type: application/octet-stream; name=\"a.bin\"\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n BODY[HEADER.FIELDS (subject)] {16}\r\nSubject: two\r\n\r\n)\r\nf OK FETCH completed",
        "+ \r\n* SEARCH 1\r\ng OK SEARCH completed",
        "* SEARCH 2\r\nh OK UID SEARCH completed",
        "* 1 FETCH (FLAGS (\\Seen \\Deleted))\r\ni OK STORE completed",
        "* 2 FETCH (BODY[]<0> \"From: car\" FLAGS (\\Seen))\r\nj OK FETCH completed",
        "* 1 EXPUNGE\r\nk OK EXPUNGE completed",
        "* 1 FETCH (FLAGS (\\Seen))\r\nl OK FETCH completed",
        "* BYE mailjar IMAP signing off\r\nm OK LOGOUT completed",
    ];
    for line in lines {
        assert!(wire.contains(line), "{line}\n---\n{wire}");
    }
    assert_eq!(host.deleted, vec![host.emails[0].id]);
    let (one, two) = (host.emails[0].id, host.emails[1].id);
    assert_eq!(host.seen, vec![(one, true), (two, true)]);
    assert!(host.closed);
}

#[test]
fn any_split_of_the_input_gives_the_same_bytes() {
    assert_any_split_writes_the_same::<Session>(&[ONE, TWO], DIALOGUE, Config::default());
}

#[test]
fn the_whole_message_and_its_structure() {
    let input = b"a LOGIN u \"p w\"\r\nb EXAMINE INBOX\r\nc FETCH 1:2 (BODY.PEEK[] ENVELOPE)\r\nd FETCH 2 BODYSTRUCTURE\r\ne STORE 1 +FLAGS (\\Seen)\r\n";
    let (wire, host) = run(input, &[], Config::default());
    let one = String::from_utf8_lossy(ONE);
    assert!(wire.contains(&format!("BODY[] {{{}}}\r\n{one} ENVELOPE (\"Mon, 2 Jan 2023 10:00:00 +0000\" \"=?utf-8?q?caf=C3=A9?= one\" ((\"Ann\" NIL \"ann\" \"example.com\")) ((\"Ann\" NIL \"ann\" \"example.com\")) ((\"Ann\" NIL \"ann\" \"example.com\")) ((NIL NIL \"bob\" \"example.com\")) NIL NIL NIL \"<one@x>\"))", ONE.len())), "{wire}");
    assert!(wire.contains(r#"* 2 FETCH (BODYSTRUCTURE (("TEXT" "plain" ("charset" "utf-8") NIL NIL "7bit" 5 0 NIL NIL NIL NIL)("application" "octet-stream" ("name" "a.bin") NIL NIL "base64" 4 NIL ("attachment" ("filename" "a.bin")) NIL NIL) "mixed" ("boundary" "b") NIL NIL NIL))"#), "{wire}");
    assert!(wire.contains("[READ-ONLY] EXAMINE completed"), "{wire}");
    assert!(
        wire.ends_with("e NO the mailbox is read-only (EXAMINE)\r\n"),
        "{wire}"
    );
    assert!(host.seen.is_empty());
}

#[test]
fn a_literal_past_the_limit_is_refused_before_it_is_sent() {
    let config = Config {
        max_command_bytes: 100,
        ..Config::default()
    };
    let input = b"a LOGIN u {500}\r\nb NOOP\r\nc LOGIN {2+}\r\nu {300+}\r\n";
    let mut long = input.to_vec();
    long.extend(std::iter::repeat_n(b'x', 300));
    long.extend_from_slice(b"\r\nd NOOP\r\n");
    let (wire, host) = run(&long, &[], config);
    assert!(wire.contains("a BAD [TOOBIG] literal too big"), "{wire}");
    assert!(wire.contains("b OK done"), "{wire}");
    assert!(wire.contains("BAD command too big\r\nd OK done"), "{wire}");
    assert!(!host.closed);
}

#[test]
fn idle_hears_new_mail_and_expunges_at_once() {
    let mut host = host();
    let mut session = Session::new(Config::default(), 0);
    let mut first = host.entries::<Session>();
    let second = first.pop().expect("two entries");
    host.drive(&mut session);
    session.handle_input(b"a LOGIN u \"p w\"\r\n", 1);
    assert!(matches!(session.poll_output(), Some(Output::Login { .. })));
    session.handle_login(Some(first.clone()));
    session.handle_input(b"b SELECT INBOX\r\nc IDLE\r\n", 2);
    let wire = String::from_utf8_lossy(&host.drive(&mut session)).into_owned();
    assert!(wire.ends_with("+ idling\r\n"), "{wire}");
    session.handle_new_mail(vec![second]);
    assert_eq!(host.drive(&mut session), b"* 2 EXISTS\r\n");
    session.handle_removed(vec![first[0].id]);
    assert_eq!(host.drive(&mut session), b"* 1 EXPUNGE\r\n");
    session.handle_input(b"DONE\r\nd FETCH 1 UID\r\n", 3);
    let wire = String::from_utf8_lossy(&host.drive(&mut session)).into_owned();
    assert_eq!(
        wire,
        "c OK IDLE terminated\r\n* 1 FETCH (UID 2)\r\nd OK FETCH completed\r\n"
    );
}

#[test]
fn starttls_is_offered_only_with_tls_and_drops_pipelined_commands() {
    let config = Config {
        starttls: true,
        ..Config::default()
    };
    let input = b"a STARTTLS\r\nb LOGIN u \"p w\"\r\n";
    let (wire, host) = run(input, &[], config.clone());
    assert!(host.tls);
    assert!(wire.contains("IMAP4REV1 STARTTLS AUTH=PLAIN"), "{wire}");
    assert!(
        wire.ends_with("a OK begin TLS negotiation now\r\n"),
        "{wire}"
    );
    let (wire, _) = run(b"a STARTTLS\r\n", &[], Config::default());
    assert!(
        wire.ends_with("a BAD STARTTLS is not available\r\n"),
        "{wire}"
    );
}

#[test]
fn authenticate_plain_and_unsupported_commands() {
    use base64::Engine as _;
    let plain = base64::engine::general_purpose::STANDARD.encode(b"\0u\0p w");
    let input = format!(
        "a AUTHENTICATE PLAIN\r\n{plain}\r\nb COPY 1 Trash\r\nc APPEND INBOX {{1}}\r\nx\r\nd RENAME a b\r\ne GARBAGE\r\n"
    );
    let (wire, _) = run(input.as_bytes(), &[], Config::default());
    assert!(wire.contains("+ \r\na OK [CAPABILITY"), "{wire}");
    assert!(wire.contains("b NO not supported"), "{wire}");
    assert!(wire.contains("c NO not supported"), "{wire}");
    assert!(wire.contains("d NO not supported"), "{wire}");
    assert!(wire.contains("e BAD unknown command"), "{wire}");
}

#[test]
fn a_fetch_of_many_messages_renders_one_at_a_time() {
    let mut host = host();
    let mut session = Session::new(Config::default(), 0);
    host.drive(&mut session);
    session.handle_input(b"a LOGIN u \"p w\"\r\n", 1);
    let _ = session.poll_output();
    let template = entry(&host.emails[0], 1);
    let entries: Vec<Entry> = (1..=10_000).map(|uid| Entry { uid, ..template }).collect();
    session.handle_login(Some(entries));
    session.handle_input(b"b SELECT INBOX\r\nc FETCH 1:* (BODY.PEEK[])\r\n", 2);
    let mut wire = Vec::new();
    while session.poll_transmit(&mut wire) {}
    let mut fetched = 0;
    while let Some(Output::Message(id)) = session.poll_output() {
        // One message asked for at a time, none rendered ahead.
        assert_eq!(session.poll_output(), None);
        session.handle_message(host.emails.iter().find(|e| e.id == id).cloned());
        let mut chunk = Vec::new();
        while session.poll_transmit(&mut chunk) {}
        assert!(chunk.len() < ONE.len() + 200, "{}", chunk.len());
        fetched += 1;
    }
    assert_eq!(fetched, 10_000);
}

#[derive(Debug, Clone)]
enum Step {
    Store {
        seq: u32,
        seen: bool,
        deleted: bool,
        uid: bool,
    },
    Expunge,
    Arrive,
    RemoveElsewhere(u32),
    Noop,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u32..8, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(seq, seen, deleted, uid)| Step::Store {
                seq,
                seen,
                deleted,
                uid
            }
        ),
        Just(Step::Expunge),
        Just(Step::Arrive),
        (1u32..8).prop_map(Step::RemoveElsewhere),
        Just(Step::Noop),
    ]
}

/// The model: (uid, seen, deleted) in sequence order, what the client knows.
type Model = Vec<(u32, bool, bool)>;

fn fetch_all(host: &mut Host, session: &mut Session) -> Model {
    session.handle_input(b"f FETCH 1:* (UID FLAGS)\r\n", 9);
    let wire = String::from_utf8_lossy(&host.drive(session)).into_owned();
    wire.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("* ")?;
            let (_, rest) = rest.split_once(" FETCH (UID ")?;
            let (uid, flags) = rest.split_once(' ')?;
            Some((
                uid.parse().ok()?,
                flags.contains("\\Seen"),
                flags.contains("\\Deleted"),
            ))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_session_agrees_with_a_model_mailbox(steps in proptest::collection::vec(step(), 1..30)) {
        let mut host = host();
        let mut session = Session::new(Config::default(), 0);
        host.drive(&mut session);
        session.handle_input(b"a LOGIN u \"p w\"\r\nb SELECT INBOX\r\n", 1);
        host.drive(&mut session);
        let mut model: Model = vec![(1, false, false), (2, false, false)];
        let mut next_uid = 3;
        let mut pending_new: Model = Vec::new();
        let mut pending_gone: Vec<u32> = Vec::new();
        for step in steps {
            match step {
                Step::Store { seq, seen, deleted, uid } => {
                    let flags = match (seen, deleted) {
                        (true, true) => "\\Seen \\Deleted",
                        (true, false) => "\\Seen",
                        (false, true) => "\\Deleted",
                        (false, false) => "",
                    };
                    let target = match uid {
                        true => model.get(seq as usize - 1).map_or(seq + 100, |m| m.0),
                        false => seq,
                    };
                    let verb = if uid { "UID STORE" } else { "STORE" };
                    session.handle_input(format!("s {verb} {target} FLAGS.SILENT ({flags})\r\n").as_bytes(), 2);
                    host.drive(&mut session);
                    if let Some(m) = model.get_mut(seq as usize - 1) {
                        *m = (m.0, seen, deleted);
                    }
                }
                Step::Expunge | Step::Noop => {
                    let verb = if matches!(step, Step::Expunge) { "EXPUNGE" } else { "NOOP" };
                    session.handle_input(format!("x {verb}\r\n").as_bytes(), 3);
                    host.drive(&mut session);
                    if verb == "EXPUNGE" {
                        model.retain(|m| !m.2);
                    }
                    model.retain(|m| !pending_gone.contains(&m.0));
                    model.append(&mut pending_new);
                    pending_gone.clear();
                }
                Step::Arrive => {
                    let email = crate::email::test_email(&mut host.ids, ONE);
                    let new = Entry { uid: next_uid, ..entry(&email, next_uid) };
                    host.emails.push(email);
                    session.handle_new_mail(vec![new]);
                    pending_new.push((next_uid, false, false));
                    next_uid += 1;
                }
                Step::RemoveElsewhere(seq) => {
                    if let Some(&(uid, _, _)) = model.get(seq as usize - 1) {
                        let id = host.emails.iter().find(|e| Some(e.id) == host_id(&host, uid)).map(|e| e.id);
                        if let Some(id) = id {
                            host.gone.insert(id);
                            session.handle_removed(vec![id]);
                            pending_gone.push(uid);
                        }
                    }
                }
            }
        }
        // FETCH tells neither new mail nor expunges before its answers: what
        // the client was last told, with its own flag changes.
        prop_assert_eq!(fetch_all(&mut host, &mut session), model.clone());
        session.handle_input(b"n NOOP\r\n", 10);
        host.drive(&mut session);
        model.retain(|m| !pending_gone.contains(&m.0));
        model.append(&mut pending_new);
        prop_assert_eq!(fetch_all(&mut host, &mut session), model);
    }
}

/// The store id of the message with this UID (UIDs are 1-based positions in `emails`).
fn host_id(host: &Host, uid: u32) -> Option<MessageId> {
    host.emails.get(uid as usize - 1).map(|e| e.id)
}

#[test]
fn messages_mail_parser_cannot_read_still_fetch_and_search() {
    for raw in [
        &b""[..],
        b"no header at all",
        b"\r\n",
        b"X: y",
        b"Subject: nul\r\n\r\na\0b",
    ] {
        let mut host = host();
        let email = crate::email::test_email(&mut host.ids, raw);
        host.emails = vec![email];
        let input = b"a LOGIN u \"p w\"\r\nb SELECT INBOX\r\nc FETCH 1 (ENVELOPE BODYSTRUCTURE BODY BODY[] BODY[1] BODY[1.2.MIME] BODY[HEADER] BODY[TEXT] RFC822.HEADER)\r\nd SEARCH OR FROM x TEXT y\r\n";
        let mut session = Session::new(Config::default(), 0);
        host.drive(&mut session);
        session.handle_input(input, 1);
        let wire = String::from_utf8_lossy(&host.drive(&mut session)).into_owned();
        assert!(
            wire.contains("c OK FETCH completed") && wire.contains("d OK SEARCH"),
            "{wire}"
        );
        // A literal cannot carry a NUL: it goes out as 0x80, as Dovecot sends it.
        assert!(!wire.contains('\0'), "{wire}");
    }
}

#[test]
fn status_counts_new_mail_without_renumbering_a_selected_client() {
    let mut host = host();
    let mut session = Session::new(Config::default(), 0);
    let mut entries = host.entries::<Session>();
    let second = entries.pop().expect("two entries");
    host.drive(&mut session);
    session.handle_input(b"a LOGIN u \"p w\"\r\n", 1);
    assert!(matches!(session.poll_output(), Some(Output::Login { .. })));
    session.handle_login(Some(entries));
    session.handle_input(b"b SELECT INBOX\r\n", 2);
    host.drive(&mut session);
    session.handle_new_mail(vec![second]);
    // Until told, the client knows one message: 2 is past its end.
    let input =
        b"c STATUS INBOX (MESSAGES UIDNEXT)\r\nd FETCH 2 UID\r\ne NOOP\r\nf FETCH 2 UID\r\n";
    session.handle_input(input, 3);
    let wire = String::from_utf8_lossy(&host.drive(&mut session)).into_owned();
    assert_eq!(
        wire,
        "* STATUS INBOX (MESSAGES 2 UIDNEXT 3)\r\nc OK STATUS completed\r\nd BAD Error in IMAP command FETCH: Invalid messageset\r\n* 2 EXISTS\r\ne OK done\r\n* 2 FETCH (UID 2)\r\nf OK FETCH completed\r\n"
    );
}

#[test]
fn a_seen_change_elsewhere_is_told_once_at_the_next_point_allowed() {
    let mut host = host();
    let mut session = Session::new(Config::default(), 0);
    let (one, two) = (host.emails[0].id, host.emails[1].id);
    host.drive(&mut session);
    session.handle_input(b"a LOGIN u \"p w\"\r\nb SELECT INBOX\r\n", 1);
    host.drive(&mut session);
    // Not told in the middle of nothing; the same value again is no change.
    session.handle_seen(two, true);
    session.handle_seen(one, false);
    assert!(host.drive(&mut session).is_empty());
    session.handle_input(b"c NOOP\r\nd NOOP\r\n", 2);
    let wire = String::from_utf8_lossy(&host.drive(&mut session)).into_owned();
    assert_eq!(
        wire,
        "* 2 FETCH (FLAGS (\\Seen))\r\nc OK done\r\nd OK done\r\n"
    );
    // While IDLE: at once.
    session.handle_input(b"e IDLE\r\n", 3);
    host.drive(&mut session);
    session.handle_seen(two, false);
    let wire = String::from_utf8_lossy(&host.drive(&mut session)).into_owned();
    assert_eq!(wire, "* 2 FETCH (FLAGS ())\r\n");
}
