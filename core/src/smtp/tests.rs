use super::*;
use proptest::prelude::*;

fn small_config() -> Config {
    Config {
        hostname: "mx.test".to_owned(),
        max_message_bytes: 100,
        max_recipients: 3,
        max_line_bytes: 64,
        max_errors: 5,
        ..Config::default()
    }
}

/// Drives a session as a host does: feeds bytes, drains the outputs and
/// reports every message handed out as stored. Shared with the tests in
/// `auth.rs`, `security.rs` and `tests/faults.rs`.
pub(super) trait Drive {
    /// Feeds `input` at time 0 with no bound and no faults; the outputs.
    fn receive(&mut self, input: &[u8]) -> Vec<Output>;
    /// Feeds `input` at time 0 under `budget`; the outputs.
    fn receive_within(&mut self, input: &[u8], budget: &mut dyn Budget) -> Vec<Output>;
    /// Feeds `input` at time 0 asking `faults`; the outputs.
    fn receive_asking(&mut self, input: &[u8], faults: &mut dyn FaultCheck) -> Vec<Output>;
    /// Every output queued, each message answered `handle_stored(Ok)`.
    fn drain(&mut self) -> Vec<Output>;
}

impl Drive for Session {
    fn receive(&mut self, input: &[u8]) -> Vec<Output> {
        self.handle_input(input, 0, &mut Unlimited, &mut NoFaults);
        self.drain()
    }

    fn receive_within(&mut self, input: &[u8], budget: &mut dyn Budget) -> Vec<Output> {
        self.handle_input(input, 0, budget, &mut NoFaults);
        self.drain()
    }

    fn receive_asking(&mut self, input: &[u8], faults: &mut dyn FaultCheck) -> Vec<Output> {
        self.handle_input(input, 0, &mut Unlimited, faults);
        self.drain()
    }

    fn drain(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        while let Some(output) = self.poll_output() {
            if matches!(output, Output::Message(_)) {
                self.handle_stored(Ok(()));
            }
            out.push(output);
        }
        out
    }
}

fn run_with(config: Config, input: &[u8]) -> Vec<Output> {
    Session::new(config).receive(input)
}

fn run(input: &[u8]) -> Vec<Output> {
    run_with(Config::default(), input)
}

/// The outputs as text: replies as on the wire, messages and close as markers.
fn render(outputs: &[Output]) -> String {
    let mut s = String::new();
    for o in outputs {
        match o {
            Output::Reply(r) => s.push_str(&String::from_utf8_lossy(&r.to_bytes())),
            Output::Message(m) => s.push_str(&format!(
                "MESSAGE from={:?} to={:?} raw={:?}\n",
                m.envelope.from,
                m.envelope.to,
                String::from_utf8_lossy(&m.raw)
            )),
            Output::Close => s.push_str("CLOSE\n"),
            Output::Fault(f) => s.push_str(&format!("FAULT {}\n", f.id)),
            Output::StartTls => s.push_str("STARTTLS\n"),
        }
    }
    s
}

// The helpers below are shared with the tests in `auth.rs`, `security.rs`
// and `tests/faults.rs`.

/// The reply codes among the outputs, in order.
pub(super) fn codes(outputs: &[Output]) -> Vec<u16> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Reply(r) => Some(r.code),
            _ => None,
        })
        .collect()
}

/// The messages among the outputs, in order.
pub(super) fn messages(outputs: &[Output]) -> Vec<&Incoming> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

/// The first message among the outputs.
pub(super) fn message(outputs: &[Output]) -> Option<&Incoming> {
    messages(outputs).into_iter().next()
}

/// The last reply among the outputs.
pub(super) fn last_reply(outputs: &[Output]) -> &Reply {
    outputs
        .iter()
        .rev()
        .find_map(|o| match o {
            Output::Reply(r) => Some(r),
            _ => None,
        })
        .expect("a reply")
}

/// One mail transaction after the greeting (no EHLO), ending at the final dot.
pub(super) const MAIL: &[u8] =
    b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nDATA\r\nSubject: s\r\n\r\nhi\r\n.\r\n";

const ENVELOPE: &str = "EHLO c\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\n";

/// Transcripts that every chunking test replays: (name, config, client bytes).
fn transcripts() -> Vec<(&'static str, Config, Vec<u8>)> {
    let d = Config::default;
    let s = small_config;
    let with_env = |rest: &str| format!("{ENVELOPE}{rest}").into_bytes();
    vec![
        ("plain", d(), with_env("DATA\r\nSubject: x\r\n\r\nbody\r\n.\r\nQUIT\r\n")),
        ("empty message", d(), with_env("DATA\r\n.\r\nQUIT\r\n")),
        ("dot stuffing", d(), with_env("DATA\r\n..a\r\n...\r\n.\r\n")),
        ("bare lf dot lf", d(), with_env("DATA\r\na\n.\nb\r\n.\r\n")),
        ("crlf dot lf", d(), with_env("DATA\r\na\r\n.\nb\r\n.\r\n")),
        ("lf dot crlf", d(), with_env("DATA\r\na\n.\r\nb\r\n.\r\n")),
        ("bare cr", d(), with_env("DATA\r\na\r.\r\nb\r\n.\r\n")),
        ("dot cr cr", d(), with_env("DATA\r\na\r\n.\r\r\nb\r\n.\r\n")),
        ("nul bytes", d(), with_env("DATA\r\na\0\r\n.\0\r\nb\r\n.\r\n")),
        (
            "smuggled second message",
            d(),
            with_env("DATA\r\nSubject: one\r\n\n.\nMAIL FROM:<evil@x>\r\nRCPT TO:<v@y>\r\nDATA\r\nSubject: two\r\n\r\n.\r\n"),
        ),
        (
            "pipelined two messages",
            d(),
            with_env("DATA\r\none\r\n.\r\nMAIL FROM:<c@x>\r\nRCPT TO:<d@y>\r\nRCPT TO:<e@y>\r\nDATA\r\ntwo\r\n.\r\nQUIT\r\n"),
        ),
        ("bdat", d(), with_env("BDAT 5\r\nhel\r\nBDAT 3 LAST\r\nlo.QUIT\r\n")),
        ("bdat zero last", d(), with_env("BDAT 4\r\nab\r\nBDAT 0 LAST\r\n")),
        ("bdat without rcpt", d(), b"EHLO c\r\nBDAT 4\r\nQUITNOOP\r\n".to_vec()),
        ("data after bdat", d(), with_env("BDAT 2\r\nabDATA\r\n")),
        ("too big data", s(), with_env(&format!("DATA\r\n{}\r\n.\r\nNOOP\r\n", "x".repeat(200)))),
        ("too big bdat", s(), with_env(&format!("BDAT 150\r\n{}NOOP\r\n", "y".repeat(150)))),
        ("size param", s(), b"MAIL FROM:<a@x> SIZE=101\r\nMAIL FROM:<a@x> SIZE=100\r\n".to_vec()),
        ("too many recipients", s(), b"MAIL FROM:<a@x>\r\nRCPT TO:<1@y>\r\nRCPT TO:<2@y>\r\nRCPT TO:<3@y>\r\nRCPT TO:<4@y>\r\nDATA\r\nx\r\n.\r\n".to_vec()),
        ("long line", s(), format!("NOOP {}\r\nNOOP\r\n", "z".repeat(100)).into_bytes()),
        ("too many errors", s(), b"X\r\nX\r\nX\r\nX\r\nX\r\nNOOP\r\n".to_vec()),
        ("errors reset by success", s(), b"X\r\nX\r\nX\r\nX\r\nNOOP\r\nX\r\nNOOP\r\n".to_vec()),
        ("sequence errors", d(), b"RCPT TO:<a@b>\r\nDATA\r\nMAIL FROM:<a@b>\r\nDATA\r\nMAIL FROM:<c@d>\r\nRSET\r\nRCPT TO:<a@b>\r\n".to_vec()),
        ("auth plain initial", d(), b"EHLO c\r\nAUTH PLAIN AHVzZXIAcGFzcw==\r\nAUTH PLAIN\r\n".to_vec()),
        ("auth plain challenge", d(), b"EHLO c\r\nAUTH PLAIN\r\nAHVzZXIAcGFzcw==\r\n".to_vec()),
        ("auth login", d(), b"EHLO c\r\nAUTH LOGIN\r\ndXNlcg==\r\ncGFzcw==\r\n".to_vec()),
        ("auth login initial", d(), b"AUTH LOGIN dXNlcg==\r\ncGFzcw==\r\n".to_vec()),
        ("auth cancel and bad", d(), b"AUTH LOGIN\r\n*\r\nAUTH PLAIN !!!\r\nAUTH CRAM-MD5\r\nAUTH\r\n".to_vec()),
        ("misc", d(), b"helo c\r\nnoop\r\nVRFY x\r\nHELP\r\nSTARTTLS\r\nFOO bar\r\n\r\nHELO\r\nEHLO\r\nquit\r\n".to_vec()),
        ("null sender and quoted", d(), b"MAIL FROM:<>\r\nRCPT TO:<\"john doe\"@y.test>\r\nRCPT TO:<postmaster>\r\nRCPT TO:<>\r\nRCPT TO:<@r1,@r2:z@y.test>\r\nDATA\r\nx\r\n.\r\n".to_vec()),
        ("smtputf8", d(), "MAIL FROM:<ä@x.test> SMTPUTF8\r\nRCPT TO:<ü@ÿ.test>\r\nDATA\r\nx\r\n.\r\nMAIL FROM:<ä@x.test>\r\n".as_bytes().to_vec()),
        ("params", d(), b"MAIL FROM:<a@b> BODY=8BITMIME SIZE=10 AUTH=<>\r\nRCPT TO:<c@d> NOTIFY=NEVER\r\nRSET\r\nMAIL FROM:<a@b> BODY=BINARYMIME\r\nMAIL FROM:<a@b> SIZE=x\r\nMAIL FROM:<a@b> FOO\r\n".to_vec()),
        ("bad addresses", d(), b"MAIL FROM:<a@b\r\nMAIL FROM:<nodomain>\r\nMAIL FROM:<a b@c>\r\nMAIL FROM:a@b\r\nRCPT TO:c@d\r\nMAIL TO:<x@y>\r\n".to_vec()),
        ("invalid utf8", d(), b"NOOP \xff\xfe\r\nNOOP\r\n".to_vec()),
        ("lf only commands", d(), b"EHLO c\nMAIL FROM:<a@b>\nRCPT TO:<c@d>\nDATA\nx\r\n.\r\nQUIT\n".to_vec()),
        ("after quit", d(), b"QUIT\r\nNOOP\r\n".to_vec()),
        ("long paths", d(), long_paths()),
        ("ehlo with escape", d(), b"EHLO a\x1b[31mb\x07\r\nHELO \xe2\x80\xaeb\xc3\xbcch.test\r\n".to_vec()),
    ]
}

/// MAIL and RCPT with paths of exactly 256 octets (brackets included) and one more.
fn long_paths() -> Vec<u8> {
    let path = |len: usize| format!("{}@x.test", "a".repeat(len - 2 - "@x.test".len()));
    format!(
        "MAIL FROM:<{}>\r\nMAIL FROM:<{}>\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<{}>\r\nRCPT TO:<{}>\r\nRCPT TO:{}\r\nRCPT TO:<@route:{}>\r\n",
        path(257),
        path(256),
        path(257),
        path(256),
        path(257),
        path(250),
    )
    .into_bytes()
}

/// A budget that grants any total up to a cap, whatever came before.
struct Cap(usize);

impl Budget for Cap {
    fn hold(&mut self, total: usize) -> bool {
        total <= self.0
    }
}

/// Transcripts replayed under a budget cap: (name, cap, client bytes).
fn budget_transcripts() -> Vec<(&'static str, usize, Vec<u8>)> {
    let with_env = |rest: &str| format!("{ENVELOPE}{rest}").into_bytes();
    let big = "y".repeat(2000);
    vec![
        (
            "data over budget then a small message",
            1000,
            with_env(&format!("DATA\r\n{big}\r\n.\r\nRSET\r\nMAIL FROM:<c@x>\r\nRCPT TO:<d@y>\r\nDATA\r\nsmall\r\n.\r\n")),
        ),
        (
            "bdat over budget then a small message",
            1000,
            with_env(&format!("BDAT 2000\r\n{big}BDAT 5 LAST\r\nhelloMAIL FROM:<c@x>\r\nRCPT TO:<d@y>\r\nBDAT 5 LAST\r\nhello")),
        ),
        (
            "bdat last chunk over budget",
            1000,
            with_env(&format!("BDAT 500\r\n{}BDAT 1500 LAST\r\n{}NOOP\r\n", &big[..500], &big[..1500])),
        ),
        ("mail without room", 0, b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nNOOP\r\n".to_vec()),
        (
            "recipients without room",
            100,
            b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nRCPT TO:<c@y.test>\r\nRCPT TO:<d@y.test>\r\nDATA\r\nx\r\n.\r\n".to_vec(),
        ),
        ("message that fits", 4096, with_env(&format!("DATA\r\n{}\r\n.\r\nQUIT\r\n", &big[..1500]))),
    ]
}

/// Feeds `chunks` one by one under `budget`, settling after each as a host does.
fn run_budget(cap: usize, chunks: &[&[u8]]) -> Vec<Output> {
    let mut session = Session::new(Config::default());
    let mut budget = Cap(cap);
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(session.receive_within(chunk, &mut budget));
        session.settle(&mut budget);
    }
    out
}

#[test]
fn ehlo_advertises_every_extension() {
    let out = run(b"EHLO client.test\r\n");
    assert_eq!(
        render(&out),
        "250-mailjar greets client.test\r\n250-PIPELINING\r\n250-SIZE 26214400\r\n\
         250-8BITMIME\r\n250-SMTPUTF8\r\n250-ENHANCEDSTATUSCODES\r\n250-CHUNKING\r\n\
         250 AUTH PLAIN LOGIN\r\n"
    );
}

#[test]
fn greeting_names_the_host() {
    let session = Session::new(small_config());
    assert_eq!(
        session.greeting().to_bytes(),
        b"220 mx.test ESMTP mailjar ready\r\n"
    );
}

#[test]
fn plain_message_comes_out_before_its_250() {
    let out = run(format!("{ENVELOPE}DATA\r\nSubject: x\r\n\r\nbody\r\n.\r\nQUIT\r\n").as_bytes());
    assert_eq!(
        render(&out),
        "250-mailjar greets c\r\n250-PIPELINING\r\n250-SIZE 26214400\r\n250-8BITMIME\r\n\
         250-SMTPUTF8\r\n250-ENHANCEDSTATUSCODES\r\n250-CHUNKING\r\n250 AUTH PLAIN LOGIN\r\n\
         250 2.1.0 Sender OK\r\n250 2.1.5 Recipient OK\r\n\
         354 End data with <CR><LF>.<CR><LF>\r\n\
         MESSAGE from=\"a@x.test\" to=[\"b@y.test\"] raw=\"Subject: x\\r\\n\\r\\nbody\\r\\n\"\n\
         250 2.0.0 Message accepted (20 bytes)\r\n221 2.0.0 Bye\r\nCLOSE\n"
    );
    assert_eq!(messages(&out)[0].helo.as_deref(), Some("c"));
}

#[test]
fn empty_message_is_accepted() {
    let out = run(format!("{ENVELOPE}DATA\r\n.\r\n").as_bytes());
    assert_eq!(messages(&out)[0].raw, b"");
    assert_eq!(codes(&out).last(), Some(&250));
}

#[test]
fn dot_stuffing_is_undone() {
    let out = run(format!("{ENVELOPE}DATA\r\n..a\r\n...\r\n.b\r\n.\r\n").as_bytes());
    assert_eq!(messages(&out)[0].raw, b".a\r\n..\r\nb\r\n");
}

#[test]
fn smuggling_variants_never_end_data() {
    for (text, expected) in [
        ("a\n.\nb", "a\n.\nb"),
        ("a\r\n.\nb", "a\r\n\nb"),
        ("a\n.\r\nb", "a\n.\r\nb"),
        ("a\r.\r\nb", "a\r.\r\nb"),
        ("a\r\n.\r\rb", "a\r\n\r\rb"),
        ("a\r\n.\0\r\nb", "a\r\n\0\r\nb"),
    ] {
        let out = run(format!("{ENVELOPE}DATA\r\n{text}\r\n.\r\n").as_bytes());
        let got = messages(&out);
        assert_eq!(got.len(), 1, "{text:?} split the message: {}", render(&out));
        assert_eq!(got[0].raw, format!("{expected}\r\n").as_bytes(), "{text:?}");
    }
}

#[test]
fn smuggled_commands_stay_inside_the_message() {
    let out = run(format!(
        "{ENVELOPE}DATA\r\nSubject: one\r\n\n.\nMAIL FROM:<evil@x>\r\nRCPT TO:<v@y>\r\nDATA\r\nSubject: two\r\n\r\n.\r\n"
    ).as_bytes());
    let got = messages(&out);
    assert_eq!(got.len(), 1);
    assert!(got[0].raw.ends_with(b"Subject: two\r\n\r\n"));
    assert_eq!(got[0].envelope.to, ["b@y.test"]);
}

#[test]
fn pipelined_commands_get_replies_in_order() {
    let out = run(format!(
        "{ENVELOPE}DATA\r\none\r\n.\r\nMAIL FROM:<c@x>\r\nRCPT TO:<d@y>\r\nRCPT TO:<e@y>\r\nDATA\r\ntwo\r\n.\r\nQUIT\r\n"
    ).as_bytes());
    assert_eq!(
        codes(&out),
        [250, 250, 250, 354, 250, 250, 250, 250, 354, 250, 221]
    );
    let got = messages(&out);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].envelope.to, ["d@y", "e@y"]);
    assert_eq!(got[1].raw, b"two\r\n");
}

#[test]
fn bdat_chunks_make_one_message() {
    let out = run(format!("{ENVELOPE}BDAT 5\r\nhel\r\nBDAT 3 LAST\r\nlo.QUIT\r\n").as_bytes());
    assert_eq!(codes(&out), [250, 250, 250, 250, 250, 221]);
    assert_eq!(messages(&out)[0].raw, b"hel\r\nlo.");
}

#[test]
fn bdat_zero_last_ends_the_message() {
    let out = run(format!("{ENVELOPE}BDAT 4\r\nab\r\nBDAT 0 LAST\r\n").as_bytes());
    assert_eq!(messages(&out)[0].raw, b"ab\r\n");
}

#[test]
fn refused_bdat_chunk_is_skipped() {
    let out = run(b"EHLO c\r\nBDAT 4\r\nQUITNOOP\r\n");
    assert_eq!(codes(&out), [250, 503, 250]);
    assert!(messages(&out).is_empty());
}

#[test]
fn data_after_bdat_is_a_sequence_error() {
    let out = run(format!("{ENVELOPE}BDAT 2\r\nabDATA\r\n").as_bytes());
    assert_eq!(codes(&out).last(), Some(&503));
}

#[test]
fn too_big_messages_are_refused_and_not_stored() {
    let out = run_with(
        small_config(),
        format!("{ENVELOPE}DATA\r\n{}\r\n.\r\nNOOP\r\n", "x".repeat(200)).as_bytes(),
    );
    assert!(messages(&out).is_empty());
    assert_eq!(codes(&out)[4..], [552, 250]);
    assert!(render(&out).contains("552 5.3.4 Message too big: the limit is 100 bytes"));

    let out = run_with(
        small_config(),
        format!("{ENVELOPE}BDAT 150\r\n{}NOOP\r\n", "y".repeat(150)).as_bytes(),
    );
    assert!(messages(&out).is_empty());
    assert_eq!(codes(&out)[3..], [552, 250]);
}

#[test]
fn message_of_exactly_the_limit_is_accepted() {
    let body = format!("{}\r\n", "x".repeat(98));
    let out = run_with(
        small_config(),
        format!("{ENVELOPE}DATA\r\n{body}.\r\n").as_bytes(),
    );
    assert_eq!(messages(&out)[0].raw.len(), 100);
}

#[test]
fn size_parameter_is_checked_at_mail_from() {
    let out = run_with(
        small_config(),
        b"MAIL FROM:<a@x> SIZE=101\r\nMAIL FROM:<a@x> SIZE=100\r\n",
    );
    assert_eq!(codes(&out), [552, 250]);
}

#[test]
fn recipients_over_the_limit_get_452() {
    let out = run_with(
        small_config(),
        b"MAIL FROM:<a@x>\r\nRCPT TO:<1@y>\r\nRCPT TO:<2@y>\r\nRCPT TO:<3@y>\r\nRCPT TO:<4@y>\r\nDATA\r\nx\r\n.\r\n",
    );
    assert_eq!(codes(&out), [250, 250, 250, 250, 452, 354, 250]);
    assert!(render(&out).contains("452 4.5.3 Too many recipients"));
    assert_eq!(messages(&out)[0].envelope.to, ["1@y", "2@y", "3@y"]);
}

#[test]
fn long_lines_get_500_and_resynchronise() {
    let out = run_with(
        small_config(),
        format!("NOOP {}\r\nNOOP\r\n", "z".repeat(100)).as_bytes(),
    );
    assert_eq!(render(&out), "500 5.5.6 Line too long\r\n250 2.0.0 OK\r\n");
    // A line of exactly the limit is fine.
    let out = run_with(
        small_config(),
        format!("NOOP {}\r\n", "z".repeat(59)).as_bytes(),
    );
    assert_eq!(codes(&out), [250]);
    let out = run_with(
        small_config(),
        format!("NOOP {}\r\n", "z".repeat(60)).as_bytes(),
    );
    assert_eq!(codes(&out), [500]);
}

#[test]
fn too_many_bad_commands_close_the_connection() {
    let out = run_with(small_config(), b"X\r\nX\r\nX\r\nX\r\nX\r\nNOOP\r\n");
    assert_eq!(codes(&out), [502, 502, 502, 502, 502, 421]);
    assert_eq!(out.last(), Some(&Output::Close));
    let out = run_with(small_config(), b"X\r\nX\r\nX\r\nX\r\nNOOP\r\nX\r\nNOOP\r\n");
    assert_eq!(codes(&out), [502, 502, 502, 502, 250, 502, 250]);
}

#[test]
fn sequence_errors_are_503_and_keep_the_connection() {
    let out = run(b"RCPT TO:<a@b>\r\nDATA\r\nMAIL FROM:<a@b>\r\nDATA\r\nMAIL FROM:<c@d>\r\nRSET\r\nRCPT TO:<a@b>\r\n");
    assert_eq!(codes(&out), [503, 503, 250, 503, 503, 250, 503]);
    assert!(!out.contains(&Output::Close));
}

#[test]
fn auth_accepts_any_credentials() {
    let out = run(b"EHLO c\r\nAUTH PLAIN AHVzZXIAcGFzcw==\r\nAUTH PLAIN\r\n");
    assert_eq!(codes(&out), [250, 235, 503]);
    let out = run(b"EHLO c\r\nAUTH PLAIN\r\nAHVzZXIAcGFzcw==\r\n");
    assert_eq!(
        render(&out)[render(&out).find("334").unwrap()..],
        *"334 \r\n235 2.7.0 Authentication successful\r\n"
    );
    let out = run(b"EHLO c\r\nAUTH LOGIN\r\ndXNlcg==\r\ncGFzcw==\r\n");
    assert_eq!(codes(&out), [250, 334, 334, 235]);
    assert!(render(&out).contains("334 VXNlcm5hbWU6\r\n334 UGFzc3dvcmQ6\r\n"));
    let out = run(b"AUTH LOGIN dXNlcg==\r\ncGFzcw==\r\n");
    assert_eq!(codes(&out), [334, 235]);
}

#[test]
fn auth_errors() {
    let out = run(b"AUTH LOGIN\r\n*\r\nAUTH PLAIN !!!\r\nAUTH CRAM-MD5\r\nAUTH\r\nMAIL FROM:<a@b>\r\nAUTH PLAIN =\r\n");
    assert_eq!(codes(&out), [334, 501, 501, 504, 501, 250, 503]);
}

#[test]
fn other_commands() {
    let out = run(
        b"helo c\r\nnoop\r\nVRFY x\r\nHELP\r\nSTARTTLS\r\nFOO bar\r\n\r\nHELO\r\nEHLO\r\nquit\r\n",
    );
    assert_eq!(
        codes(&out),
        [250, 250, 252, 214, 454, 502, 500, 501, 501, 221]
    );
    assert!(render(&out).contains("454 4.7.0 TLS not available"));
    assert!(render(&out).contains("502 5.5.1 Command not recognised: FOO"));
}

#[test]
fn addresses() {
    let out = run(b"MAIL FROM:<>\r\nRCPT TO:<\"john doe\"@y.test>\r\nRCPT TO:<postmaster>\r\nRCPT TO:<>\r\nRCPT TO:<@r1,@r2:z@y.test>\r\nDATA\r\nx\r\n.\r\n");
    assert_eq!(codes(&out), [250, 250, 250, 501, 250, 354, 250]);
    let m = messages(&out)[0];
    assert_eq!(m.envelope.from, "");
    assert_eq!(
        m.envelope.to,
        ["\"john doe\"@y.test", "postmaster", "z@y.test"]
    );

    let out = run(b"MAIL FROM:<a@b\r\nMAIL FROM:<nodomain>\r\nMAIL FROM:<a b@c>\r\nMAIL FROM:a@b\r\nRCPT TO:c@d\r\nRSET\r\nMAIL TO:<x@y>\r\nMAIL FROM: <a@b>\r\n");
    assert_eq!(codes(&out), [501, 501, 501, 250, 250, 250, 501, 250]);
}

#[test]
fn utf8_addresses_need_smtputf8() {
    let out = run("MAIL FROM:<ä@x.test> SMTPUTF8\r\nRCPT TO:<ü@ÿ.test>\r\nDATA\r\nx\r\n.\r\nMAIL FROM:<ä@x.test>\r\n".as_bytes());
    assert_eq!(codes(&out), [250, 250, 354, 250, 553]);
    assert_eq!(messages(&out)[0].envelope.to, ["ü@ÿ.test"]);
    assert!(render(&out).contains("553 5.6.7"));
}

#[test]
fn mail_parameters() {
    let out = run(b"MAIL FROM:<a@b> BODY=8BITMIME SIZE=10 AUTH=<>\r\nRCPT TO:<c@d> NOTIFY=NEVER\r\nRSET\r\nMAIL FROM:<a@b> BODY=BINARYMIME\r\nMAIL FROM:<a@b> SIZE=x\r\nMAIL FROM:<a@b> FOO\r\nMAIL FROM:<a@b> body=7bit\r\n");
    assert_eq!(codes(&out), [250, 555, 250, 501, 501, 555, 250]);
}

#[test]
fn control_characters_are_not_echoed_in_replies() {
    let out = run(b"\raEHLO c\r\nMAIL FROM:<a@b> X\x1b=1\r\n");
    assert_eq!(
        render(&out),
        "502 5.5.1 Command not recognised: ?aEHLO\r\n\
         555 5.5.4 Unsupported MAIL FROM parameter: X?\r\n"
    );
}

#[test]
fn invalid_utf8_command_is_a_syntax_error() {
    let out = run(b"NOOP \xff\xfe\r\nNOOP\r\n");
    assert_eq!(codes(&out), [500, 250]);
}

#[test]
fn closed_session_ignores_input() {
    let mut session = Session::new(Config::default());
    let out = session.receive(b"QUIT\r\nNOOP\r\n");
    assert_eq!(codes(&out), [221]);
    assert!(session.is_closed());
    assert!(session.receive(b"NOOP\r\n").is_empty());
}

#[test]
fn timeout_and_shutdown_close_the_session() {
    let mut session = Session::new(Config::default());
    session.open(1_000, &mut NoFaults);
    assert_eq!(codes(&session.drain()), [220]);
    let idle = Config::default().idle_timeout_ms;
    assert_eq!(session.poll_timeout(), Some(1_000 + idle));
    // Before the deadline nothing happens.
    session.handle_timeout(1_000 + idle - 1);
    assert!(session.drain().is_empty());
    session.handle_timeout(1_000 + idle);
    assert_eq!(
        render(&session.drain()),
        "421 4.4.2 Idle timeout, closing connection\r\nCLOSE\n"
    );
    assert!(session.is_closed());
    assert_eq!(session.poll_timeout(), None);
    let mut session = Session::new(Config::default());
    session.handle_shutdown();
    assert_eq!(
        render(&session.drain()),
        "421 4.3.2 Service shutting down, try again later\r\nCLOSE\n"
    );
    assert!(session.receive(b"NOOP\r\n").is_empty());
}

#[test]
fn a_message_is_answered_only_once_the_host_reports_it_stored() {
    let mut session = Session::new(Config::default());
    let input = format!("{ENVELOPE}DATA\r\nx\r\n.\r\nNOOP\r\n{ENVELOPE}DATA\r\ny\r\n.\r\nQUIT\r\n");
    session.handle_input(input.as_bytes(), 0, &mut Unlimited, &mut NoFaults);
    let mut out = Vec::new();
    while let Some(output) = session.poll_output() {
        out.push(output);
    }
    // Up to the first message, and nothing after it until it is stored.
    assert!(matches!(out.last(), Some(Output::Message(_))));
    assert!(session.poll_output().is_none());
    assert!(session.held_bytes() > 0, "counted until stored");
    session.handle_stored(Err("disk full".to_owned()));
    let rest = session.drain();
    assert_eq!(
        render(&rest[..1]),
        "452 4.3.1 Insufficient system storage: the message could not be written to disk\r\n"
    );
    // The pipelined commands after it, in order; the second message is acknowledged.
    assert_eq!(codes(&rest), [452, 250, 250, 250, 250, 354, 250, 221]);
    assert!(matches!(rest.last(), Some(Output::Close)));
    assert_eq!(session.held_bytes(), 0);
}

#[test]
fn receiving_message_is_reported() {
    let mut session = Session::new(Config::default());
    session.receive(ENVELOPE.as_bytes());
    assert!(!session.is_receiving_message());
    session.receive(b"DATA\r\nabc");
    assert!(session.is_receiving_message());
    session.receive(b"\r\n.\r\n");
    assert!(!session.is_receiving_message());
    session.receive(b"MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT 1\r\nx");
    assert!(session.is_receiving_message());
    session.receive(b"BDAT 0 LAST\r\n");
    assert!(!session.is_receiving_message());
}

#[test]
fn every_split_point_gives_the_same_outputs() {
    for (name, config, input) in transcripts() {
        let whole = run_with(config.clone(), &input);
        for split in 0..=input.len() {
            let mut session = Session::new(config.clone());
            let mut got = session.receive(&input[..split]);
            got.extend(session.receive(&input[split..]));
            assert_eq!(got, whole, "{name}: split at {split}");
        }
        let mut session = Session::new(config.clone());
        let mut got = Vec::new();
        for byte in &input {
            got.extend(session.receive(std::slice::from_ref(byte)));
        }
        assert_eq!(got, whole, "{name}: byte by byte");
    }
}

/// Every reply line is `NNN-text` or `NNN text` with a code from 200 to 599 and no CR or LF inside.
fn assert_well_formed(outputs: &[Output]) {
    for o in outputs {
        if let Output::Reply(r) = o {
            assert!((200..600).contains(&r.code), "{r}");
            let wire = r.to_bytes();
            let text = std::str::from_utf8(&wire).expect("replies are UTF-8");
            let lines: Vec<&str> = text.split_terminator("\r\n").collect();
            assert_eq!(lines.len(), r.lines.len().max(1));
            for (i, line) in lines.iter().enumerate() {
                let sep = if i + 1 == lines.len() { ' ' } else { '-' };
                assert!(line.starts_with(&format!("{}{}", r.code, sep)), "{line:?}");
                assert!(!line.contains(['\r', '\n']));
            }
        }
    }
}

fn command_strategy() -> impl Strategy<Value = Vec<u8>> {
    let pieces = prop_oneof![
        Just(b"EHLO c\r\n".to_vec()),
        Just(b"MAIL FROM:<a@b>\r\n".to_vec()),
        Just(b"RCPT TO:<c@d>\r\n".to_vec()),
        Just(b"DATA\r\n".to_vec()),
        Just(b"\r\n.\r\n".to_vec()),
        Just(b"BDAT 3\r\n".to_vec()),
        Just(b"BDAT 0 LAST\r\n".to_vec()),
        Just(b"AUTH LOGIN\r\n".to_vec()),
        Just(b"RSET\r\n".to_vec()),
        Just(b"QUIT\r\n".to_vec()),
        Just(b".\r\n".to_vec()),
        Just(b"\n.\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec(pieces, 0..30).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn random_input_never_panics_and_replies_are_well_formed(
        input in command_strategy(),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let config = small_config();
        let whole = run_with(config.clone(), &input);
        assert_well_formed(&whole);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut session = Session::new(config);
        let mut got = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([input.len()]) {
            got.extend(session.receive(&input[start..cut]));
            start = cut;
        }
        prop_assert_eq!(got, whole);
    }

    #[test]
    fn accepted_messages_are_stored_exactly(body in proptest::collection::vec(any::<u8>(), 0..300)) {
        // Stuff the body as a client would, after making every line end in CRLF.
        let mut text = Vec::new();
        let mut at_line_start = true;
        for (i, &b) in body.iter().enumerate() {
            if at_line_start && b == b'.' {
                text.push(b'.');
            }
            text.push(b);
            at_line_start = b == b'\n' && i > 0 && body[i - 1] == b'\r';
        }
        if !text.ends_with(b"\r\n") {
            text.extend_from_slice(b"\r\n");
        }
        let mut expected = body.clone();
        if !expected.ends_with(b"\r\n") {
            expected.extend_from_slice(b"\r\n");
        }
        let mut input = format!("{ENVELOPE}DATA\r\n").into_bytes();
        input.extend_from_slice(&text);
        input.extend_from_slice(b".\r\n");
        let out = run(&input);
        let got = messages(&out);
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(&got[0].raw, &expected);
    }
}

#[test]
fn paths_over_256_octets_are_refused() {
    let out = run(&long_paths());
    assert_eq!(
        render(&out),
        "501 5.1.7 Bad sender address: longer than 256 octets\r\n\
         250 2.1.0 Sender OK\r\n\
         503 5.5.1 Nested MAIL command: send RSET first\r\n\
         501 5.1.3 Bad recipient address: longer than 256 octets\r\n\
         250 2.1.5 Recipient OK\r\n\
         501 5.1.3 Bad recipient address: longer than 256 octets\r\n\
         501 5.1.3 Bad recipient address: longer than 256 octets\r\n"
    );
}

#[test]
fn ehlo_argument_is_echoed_printable_only() {
    let out = run(b"EHLO a\x1b[31mb\x07\r\nHELO \xe2\x80\xaeb\xc3\xbcch.test\r\n");
    let text = render(&out);
    assert!(!text.contains('\x1b') && !text.contains('\x07') && !text.contains('\u{202e}'));
    assert!(
        text.starts_with("250-mailjar greets a?[31mb?\r\n"),
        "{text}"
    );
    assert!(
        text.ends_with("250 mailjar greets ?büch.test\r\n"),
        "{text}"
    );
    // The argument as sent is what the message records.
    let mut session = Session::new(Config::default());
    let out =
        session.receive(format!("EHLO a\x1bb\r\n{}DATA\r\nx\r\n.\r\n", &ENVELOPE[8..]).as_bytes());
    assert_eq!(messages(&out)[0].helo.as_deref(), Some("a\x1bb"));
    // Long arguments are cut, not refused.
    let out = run(format!("EHLO {}\r\n", "h".repeat(1000)).as_bytes());
    let Output::Reply(reply) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(
        reply.lines[0],
        format!("mailjar greets {}", "h".repeat(255))
    );
}

#[test]
fn every_reply_is_printable_ascii_or_letters() {
    for (name, config, input) in transcripts() {
        for o in run_with(config, &input) {
            if let Output::Reply(r) = o {
                for line in &r.lines {
                    assert!(
                        line.chars().all(|c| c == ' '
                            || c.is_ascii_graphic()
                            || (!c.is_ascii() && c.is_alphanumeric())),
                        "{name}: {line:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn data_over_budget_is_read_to_its_end_and_refused_with_452() {
    let (_, cap, input) = budget_transcripts().swap_remove(0);
    let out = run_budget(cap, &[&input]);
    assert_eq!(
        codes(&out),
        [250, 250, 250, 354, 452, 250, 250, 250, 354, 250]
    );
    assert!(render(&out).contains("452 4.3.1 Insufficient system storage\r\n"));
    let stored = messages(&out);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].raw, b"small\r\n");
}

#[test]
fn bdat_over_budget_is_refused_and_the_session_goes_on() {
    let out = run_budget(1000, &[&budget_transcripts()[1].2]);
    // The big chunk: 452 and the transaction is over; BDAT LAST then has none.
    assert_eq!(codes(&out), [250, 250, 250, 452, 503, 250, 250, 250]);
    let stored = messages(&out);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].raw, b"hello");
    let out = run_budget(1000, &[&budget_transcripts()[2].2]);
    assert_eq!(codes(&out), [250, 250, 250, 250, 452, 250]);
    assert!(messages(&out).is_empty());
}

#[test]
fn envelopes_count_against_the_budget() {
    let out = run_budget(0, &[&budget_transcripts()[3].2]);
    assert_eq!(codes(&out), [452, 503, 250]);
    // 8 bytes of sender, then 8 + a String per recipient: the third does not fit in 100.
    // With 72 held, the 256 bytes a body starts with do not fit either.
    let out = run_budget(100, &[&budget_transcripts()[4].2]);
    assert_eq!(codes(&out), [250, 250, 250, 452, 354, 452]);
    assert!(messages(&out).is_empty());
    // The same with room for the text: the message keeps the recipients that fit.
    let out = run_budget(400, &[b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nRCPT TO:<c@y.test>\r\nDATA\r\nx\r\n.\r\n"]);
    assert_eq!(codes(&out), [250, 250, 250, 354, 250]);
    assert_eq!(messages(&out)[0].envelope.to, ["b@y.test", "c@y.test"]);
}

#[test]
fn budget_transcripts_give_the_same_outputs_at_every_split_point() {
    for (name, cap, input) in budget_transcripts() {
        let whole = run_budget(cap, &[&input]);
        assert!(!whole.is_empty(), "{name}");
        for split in 0..=input.len() {
            let got = run_budget(cap, &[&input[..split], &input[split..]]);
            assert_eq!(got, whole, "{name}: split at {split}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run_budget(cap, &bytes), whole, "{name}: byte by byte");
    }
}

/// A budget that records the last total it granted.
#[derive(Default)]
struct Recorder {
    granted: usize,
    peak: usize,
}

impl Budget for Recorder {
    fn hold(&mut self, total: usize) -> bool {
        self.granted = total;
        self.peak = self.peak.max(total);
        true
    }
}

#[test]
fn held_bytes_are_granted_before_growth_and_released_at_settle() {
    let mut session = Session::new(Config::default());
    let mut budget = Recorder::default();
    let body = "z".repeat(10_000);
    session.handle_input(
        format!("{ENVELOPE}DATA\r\n{body}\r\n.\r\n").as_bytes(),
        0,
        &mut budget,
        &mut NoFaults,
    );
    let mut out = Vec::new();
    while let Some(output) = session.poll_output() {
        out.push(output);
    }
    assert_eq!(messages(&out)[0].raw.len(), 10_002);
    // The handed-out message stays counted until the host has stored it.
    assert!(session.held_bytes() >= 10_002);
    assert!(budget.granted >= session.held_bytes());
    // The capacity grows by half at a time: at most 1.5 times the text.
    assert!(budget.peak <= 10_002 * 3 / 2 + 64, "{}", budget.peak);
    session.handle_stored(Ok(()));
    assert_eq!(codes(&session.drain()), [250]);
    session.settle(&mut budget);
    assert_eq!((session.held_bytes(), budget.granted), (0, 0));
    // A transaction under way is held; RSET drops it and the next settle releases it.
    session.receive_within(
        b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nDATA\r\nabc",
        &mut budget,
    );
    let held = session.held_bytes();
    assert!(held >= 3 + 16, "{held}");
    assert_eq!(budget.granted, held);
    session.receive_within(b"\r\n.\r\nRSET\r\n", &mut budget);
    session.settle(&mut budget);
    assert_eq!(budget.granted, 0);
}

/// Feeds `input` at `now_ms` and drains; the deadline after it.
fn at(session: &mut Session, now_ms: u64, input: &[u8]) -> Option<u64> {
    session.handle_input(input, now_ms, &mut Unlimited, &mut NoFaults);
    session.drain();
    session.poll_timeout()
}

/// Short timeouts: idle 1000, a command line 100, a message's text 300.
fn timed_config() -> Config {
    Config {
        idle_timeout_ms: 1_000,
        command_timeout_ms: 100,
        data_timeout_ms: 300,
        ..Config::default()
    }
}

#[test]
fn feeding_no_bytes_restarts_the_idle_timer_only() {
    let mut session = Session::new(timed_config());
    session.open(0, &mut NoFaults);
    assert_eq!(at(&mut session, 10, b"NO"), Some(110));
    // A host that waited (a fault's delay) feeds nothing: the idle timer
    // restarts, the line keeps the deadline of its first byte.
    assert_eq!(at(&mut session, 900, b""), Some(110));
    assert_eq!(at(&mut session, 50, b"OP\r\n"), Some(1_050));
    assert_eq!(at(&mut session, 900, b""), Some(1_900));
}

#[test]
fn a_command_line_has_its_deadline_from_its_first_byte() {
    let mut session = Session::new(timed_config());
    session.open(0, &mut NoFaults);
    assert_eq!(session.poll_timeout(), Some(1_000), "idle only");
    assert_eq!(at(&mut session, 10, b"NO"), Some(110));
    // The same line later keeps its first deadline; the idle one moved on.
    assert_eq!(at(&mut session, 50, b"O"), Some(110));
    // The next line starts a deadline of its own.
    assert_eq!(at(&mut session, 60, b"P\r\nNO"), Some(160));
    assert_eq!(at(&mut session, 70, b"OP\r\n"), Some(1_070));
    // An over-long line is still a line until its end.
    assert_eq!(at(&mut session, 80, "x".repeat(5000).as_bytes()), Some(180));
    assert_eq!(at(&mut session, 90, b"\r\nAUTH LOGIN\r\nab"), Some(190));
    assert_eq!(at(&mut session, 95, b"c=\r\n"), Some(1_095));
    // Message text is not a command line.
    let input = format!("RSET\r\n{ENVELOPE}DATA\r\nhalf a li");
    assert_eq!(at(&mut session, 100, input.as_bytes()), Some(400));
}

#[test]
fn a_message_has_its_deadline_from_354_or_its_first_bdat() {
    let mut session = Session::new(timed_config());
    session.open(0, &mut NoFaults);
    assert_eq!(at(&mut session, 0, ENVELOPE.as_bytes()), Some(1_000));
    assert_eq!(at(&mut session, 10, b"DATA\r\n"), Some(310));
    assert_eq!(at(&mut session, 20, b"text\r\n"), Some(310));
    let next = b".\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT 2\r\nab";
    assert_eq!(at(&mut session, 30, next), Some(330));
    // Between chunks the same message is still in progress.
    assert_eq!(at(&mut session, 40, b"BDAT 1\r\nc"), Some(330));
    assert_eq!(at(&mut session, 50, b"BDAT 0 LAST\r\n"), Some(1_050));
    // A refused chunk is read under a deadline of its own.
    assert_eq!(at(&mut session, 60, b"BDAT 10\r\nabc"), Some(360));
}

#[test]
fn each_deadline_has_its_421() {
    for (now, text) in [
        (1_020, "421 4.4.2 Idle timeout, closing connection\r\n"),
        (
            130,
            "421 4.4.2 Command line took too long, closing connection\r\n",
        ),
        (
            330,
            "421 4.4.2 Message data took too long, closing connection\r\n",
        ),
    ] {
        let mut session = Session::new(timed_config());
        session.open(0, &mut NoFaults);
        session.drain();
        match now {
            1_020 => at(&mut session, 20, b"NOOP\r\n"),
            130 => at(&mut session, 30, b"NOO"),
            _ => at(
                &mut session,
                30,
                format!("{ENVELOPE}DATA\r\nhalf").as_bytes(),
            ),
        };
        assert_eq!(session.poll_timeout(), Some(now));
        session.handle_timeout(now);
        assert_eq!(render(&session.drain()), format!("{text}CLOSE\n"));
        assert!(session.is_closed());
        assert_eq!(session.held_bytes(), 0, "a closed session holds nothing");
        assert!(session.receive(b"\r\n.\r\n").is_empty());
    }
}

proptest! {
    #[test]
    fn under_any_budget_a_250_means_the_whole_message(
        body in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'\r'), Just(b'\n'), Just(b'.')], 0..3000),
        cap in 100usize..6000,
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut text = Vec::new();
        let mut at_line_start = true;
        for (i, &b) in body.iter().enumerate() {
            if at_line_start && b == b'.' {
                text.push(b'.');
            }
            text.push(b);
            at_line_start = b == b'\n' && i > 0 && body[i - 1] == b'\r';
        }
        let mut expected = body.clone();
        if !expected.ends_with(b"\r\n") {
            expected.extend_from_slice(b"\r\n");
            text.extend_from_slice(b"\r\n");
        }
        let mut input = format!("{ENVELOPE}DATA\r\n").into_bytes();
        input.extend_from_slice(&text);
        input.extend_from_slice(b".\r\nNOOP\r\n");
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([input.len()]) {
            chunks.push(&input[start..cut]);
            start = cut;
        }
        let out = run_budget(cap, &chunks);
        let stored = messages(&out);
        let after_data = codes(&out)[4];
        if after_data == 250 {
            prop_assert_eq!(stored.len(), 1);
            prop_assert_eq!(&stored[0].raw, &expected);
        } else {
            prop_assert_eq!(after_data, 452);
            prop_assert!(stored.is_empty());
        }
        prop_assert_eq!(codes(&out).last().copied(), Some(250));
    }
}

mod fault_tests;
mod transcript_tests;
