//! The transcript a session hands out with each message.

use super::*;

fn lines(t: &Transcript) -> Vec<(u32, &'static str, String)> {
    t.lines()
        .map(|l| {
            let dir = match l.dir {
                Direction::Client => "c",
                Direction::Server => "s",
            };
            (l.ms, dir, String::from_utf8_lossy(l.text).into_owned())
        })
        .collect()
}

fn transcripts(outputs: &[Output]) -> Vec<Transcript> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Message(m) => Some(m.transcript.clone()),
            _ => None,
        })
        .collect()
}

/// Opens a session at `100` and feeds `input` in `parts` at 100, 110, 120, ...
fn run_timed(config: Config, parts: &[&[u8]]) -> Vec<Output> {
    let mut s = Session::new(config);
    s.open(100, &mut NoFaults);
    let mut out = s.drain();
    for (i, part) in parts.iter().enumerate() {
        s.handle_input(part, 100 + 10 * i as u64, &mut Unlimited, &mut NoFaults);
        out.extend(s.drain());
    }
    out
}

#[test]
fn the_dialogue_is_kept_with_times_and_the_text_elided() {
    let out = run_timed(
        Config::default(),
        &[
            b"EHLO c\r\n",
            b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\n",
            b"Subject: secret words\r\n\r\n..dot\r\n",
            b".\r\nQUIT\r\n",
        ],
    );
    let t = &transcripts(&out)[0];
    let got = lines(t);
    assert_eq!(got[0], (0, "s", "220 mailjar ESMTP mailjar ready".into()));
    assert_eq!(got[1], (0, "c", "EHLO c".into()));
    assert!(got.iter().any(|l| l == &(10, "c", "DATA".into())));
    assert!(
        got.iter()
            .any(|l| l.0 == 10 && l.1 == "s" && l.2.starts_with("354 ")),
        "{got:?}"
    );
    // The text's wire bytes: 32 before the end, and ".\r\n".
    assert!(
        got.contains(&(30, "c", "<message text elided: 35 bytes>".into())),
        "{got:?}"
    );
    assert_eq!(
        got.last(),
        Some(&(30, "s", "250 2.0.0 Message accepted (31 bytes)".into()))
    );
    assert!(!got.iter().any(|l| l.2.contains("secret")));
}

#[test]
fn auth_payloads_never_reach_the_transcript() {
    let mut config = Config::default();
    config.security.credentials = Credentials::parse(&["user:hunter2"]).expect("valid");
    let plain = BASE64.encode(b"\0user\0hunter2");
    let user = BASE64.encode(b"user");
    let password = BASE64.encode(b"hunter2");
    let send = b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\nhi\r\n.\r\n";
    for auth in [
        format!("AUTH PLAIN {plain}\r\n"),
        format!("AUTH PLAIN\r\n{plain}\r\n"),
        format!("AUTH LOGIN\r\n{user}\r\n{password}\r\n"),
        format!("AUTH LOGIN {user}\r\n{password}\r\n"),
    ] {
        let out = run_timed(config.clone(), &[b"EHLO c\r\n", auth.as_bytes(), send]);
        let t = &transcripts(&out)[0];
        let text = String::from_utf8_lossy(t.as_bytes()).into_owned();
        for secret in [&plain, &user, &password, "hunter2"] {
            assert!(!text.contains(secret), "{auth:?}: {secret} in {text:?}");
        }
        let got = lines(t);
        assert!(
            got.iter().any(|l| l.2.contains("<credentials elided>")),
            "{got:?}"
        );
        assert!(got.iter().any(|l| l.2.starts_with("235 ")), "{got:?}");
    }
}

#[test]
fn any_chunking_gives_the_same_transcript() {
    let input: &[u8] = b"EHLO c\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nBDAT 5\r\nhelloBDAT 3 LAST\r\nabcRSET\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\nx\r\n.\r\n";
    let whole = transcripts(&run_timed(Config::default(), &[input]));
    assert_eq!(whole.len(), 2);
    for cut in 1..input.len() {
        let (a, b) = input.split_at(cut);
        let mut s = Session::new(Config::default());
        s.open(100, &mut NoFaults);
        s.drain();
        s.handle_input(a, 100, &mut Unlimited, &mut NoFaults);
        let mut out = s.drain();
        s.handle_input(b, 100, &mut Unlimited, &mut NoFaults);
        out.extend(s.drain());
        assert_eq!(transcripts(&out), whole, "cut at {cut}");
    }
    let first = lines(&whole[0]);
    assert!(
        first
            .iter()
            .any(|l| l.2 == "<message text elided: 5 bytes>"),
        "{first:?}"
    );
    assert!(
        first
            .iter()
            .any(|l| l.2 == "<message text elided: 3 bytes>"),
        "{first:?}"
    );
    // The second message: the session's start, then its own transaction only.
    let second: Vec<String> = lines(&whole[1]).into_iter().map(|l| l.2).collect();
    assert_eq!(second[..2], ["220 mailjar ESMTP mailjar ready", "EHLO c"]);
    assert!(!second.iter().any(|l| l.starts_with("BDAT")), "{second:?}");
    assert!(second.iter().any(|l| l == "RSET"), "{second:?}");
}

#[test]
fn a_long_session_is_cut_at_the_limit_with_a_marker() {
    let mut input = b"EHLO c\r\n".to_vec();
    for _ in 0..2000 {
        input.extend_from_slice(b"NOOP with some words to make the line longer\r\n");
    }
    input.extend_from_slice(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\nx\r\n.\r\n");
    let t = &transcripts(&run_timed(Config::default(), &[&input]))[0];
    assert!(t.footprint() <= MAX_TRANSCRIPT_BYTES, "{}", t.footprint());
    let got = lines(t);
    assert!(
        got.last()
            .is_some_and(|l| l.2.starts_with("<transcript truncated")),
        "{:?}",
        got.last()
    );
}
