//! Fault rules as a session carries them out.

use super::*;
use crate::faults::{Action, Faults};

fn rules(bodies: &[&str]) -> Faults {
    let mut rules = Faults::new(100, 0);
    for body in bodies {
        let r = rules
            .handle("POST", None, Some("application/json"), body.as_bytes())
            .expect("a valid rule");
        assert_eq!(r.status, 200, "{body}");
    }
    rules
}

/// What a new session queues when it opens, asking `rules`.
fn opened(rules: &mut Faults) -> Vec<Output> {
    let mut s = Session::new(Config::default());
    s.open(0, rules);
    s.drain()
}

/// The greeting (or what replaces it) and the outputs of `input`.
fn run_faulty(rules: &mut Faults, input: &[u8]) -> Vec<Output> {
    let mut s = Session::new(Config::default());
    s.open(0, rules);
    let mut out = s.drain();
    if !s.is_closed() {
        out.extend(s.receive_asking(input, rules));
    }
    out
}

fn fired(outputs: &[Output]) -> Vec<Action> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Fault(f) => Some(f.action.clone()),
            _ => None,
        })
        .collect()
}

const SEND_TO_BOB_AND_CAROL: &[u8] =
    b"EHLO c\r\nMAIL FROM:<app@x.test>\r\nRCPT TO:<bob@x.test>\r\n\
RCPT TO:<carol@x.test>\r\nDATA\r\nSubject: hi\r\n\r\nhello\r\n.\r\nQUIT\r\n";

const SEND: &[u8] =
    b"EHLO c\r\nMAIL FROM:<app@x.test>\r\nRCPT TO:<bob@x.test>\r\nDATA\r\nhello\r\n.\r\n";

#[test]
fn without_rules_the_greeting_is_the_usual_one() {
    let greeting = Session::new(Config::default()).greeting();
    assert_eq!(
        opened(&mut Faults::new(10, 0)),
        vec![Output::Reply(greeting)]
    );
}

#[test]
fn a_connect_reply_replaces_the_greeting_and_closes() {
    let mut r = rules(&[
        r#"{"stage": "connect", "action": {"reply": {"code": 554, "text": "5.3.2 Go away"}}}"#,
    ]);
    let out = opened(&mut r);
    assert_eq!(codes(&out), vec![554]);
    assert!(matches!(out.last(), Some(Output::Close)));
    // times: 1 is used up: the next connection is greeted.
    assert_eq!(codes(&opened(&mut r)), vec![220]);
    assert!(r.is_empty());
}

#[test]
fn a_connect_delay_comes_before_the_greeting_and_a_disconnect_closes_silently() {
    let mut r = rules(&[
        r#"{"stage": "connect", "action": {"delayMs": 1500}}"#,
        r#"{"stage": "connect", "action": {"disconnect": true}}"#,
    ]);
    let out = opened(&mut r);
    assert!(matches!(&out[0], Output::Fault(f) if f.action == Action::Delay { ms: 1500 }));
    assert_eq!(codes(&out), vec![220]);
    let out = opened(&mut r);
    assert_eq!(codes(&out), Vec::<u16>::new());
    assert!(matches!(out.last(), Some(Output::Close)));
}

#[test]
fn a_rejected_recipient_leaves_the_others() {
    let mut r = rules(&[
        r#"{"match": {"to": "BOB@x.test"}, "stage": "rcpt", "action": {"reply": {"code": 550, "text": "5.1.1 No such user"}}, "times": null}"#,
    ]);
    let out = run_faulty(&mut r, SEND_TO_BOB_AND_CAROL);
    assert_eq!(codes(&out), vec![220, 250, 250, 550, 250, 354, 250, 221]);
    let stored = messages(&out);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].envelope.to, vec!["carol@x.test".to_owned()]);
}

#[test]
fn greylisting_fails_once_then_stores_the_retry() {
    let mut r = rules(&[
        r#"{"match": {"to": "bob@x.test"}, "stage": "message", "action": {"reply": {"code": 451, "text": "4.7.1 Greylisted, try again"}}}"#,
    ]);
    let first = run_faulty(&mut r, SEND);
    assert_eq!(codes(&first), vec![220, 250, 250, 250, 354, 451]);
    assert!(messages(&first).is_empty());
    let retry = run_faulty(&mut r, SEND);
    assert_eq!(codes(&retry), vec![220, 250, 250, 250, 354, 250]);
    assert_eq!(messages(&retry).len(), 1);
}

#[test]
fn the_session_goes_on_after_a_refused_message() {
    let mut r = rules(&[r#"{"stage": "message", "action": {"reply": {"code": 552}}}"#]);
    let mut input = SEND.to_vec();
    input.extend_from_slice(
        b"MAIL FROM:<app@x.test>\r\nRCPT TO:<bob@x.test>\r\nDATA\r\nagain\r\n.\r\n",
    );
    let out = run_faulty(&mut r, &input);
    assert_eq!(
        codes(&out),
        vec![220, 250, 250, 250, 354, 552, 250, 250, 354, 250]
    );
    assert_eq!(messages(&out).len(), 1);
    assert_eq!(messages(&out)[0].raw, b"again\r\n");
}

#[test]
fn a_disconnect_at_data_or_at_the_end_of_data_stores_nothing() {
    for stage in ["data", "message"] {
        let mut r = rules(&[&format!(
            r#"{{"stage": "{stage}", "action": {{"disconnect": true}}}}"#
        )]);
        let out = run_faulty(&mut r, SEND);
        assert!(messages(&out).is_empty(), "{stage}");
        assert!(matches!(out.last(), Some(Output::Close)), "{stage}");
        assert_eq!(fired(&out), vec![Action::Disconnect]);
        let replies = if stage == "data" {
            vec![220, 250, 250, 250]
        } else {
            vec![220, 250, 250, 250, 354]
        };
        assert_eq!(codes(&out), replies, "{stage}");
    }
}

#[test]
fn a_421_closes_the_connection() {
    let mut r = rules(&[
        r#"{"match": {"from": "app@x.test"}, "stage": "mail", "action": {"reply": {"code": 421, "text": "4.7.0 Slow down"}}}"#,
    ]);
    let out = run_faulty(&mut r, SEND);
    assert_eq!(codes(&out), vec![220, 250, 421]);
    assert!(matches!(out.last(), Some(Output::Close)));
}

#[test]
fn a_delay_comes_before_the_normal_reply_and_after_the_message_is_handed_out() {
    let mut r = rules(&[r#"{"stage": "message", "action": {"delayMs": 700}}"#]);
    let out = run_faulty(&mut r, SEND);
    let at = out
        .iter()
        .position(|o| matches!(o, Output::Fault(_)))
        .expect("fired");
    assert!(matches!(out[at + 1], Output::Message(_)));
    assert!(matches!(&out[at + 2], Output::Reply(reply) if reply.code == 250));
    let mut r = rules(&[r#"{"stage": "helo", "action": {"delayMs": 5}}"#]);
    let out = run_faulty(&mut r, SEND);
    assert!(matches!(out[1], Output::Fault(_)));
    assert_eq!(codes(&out), vec![220, 250, 250, 250, 354, 250]);
}

#[test]
fn a_data_fault_at_the_first_bdat_drops_the_chunk_then_replies() {
    let mut r = rules(&[
        r#"{"stage": "data", "action": {"reply": {"code": 452, "text": "4.2.2 Mailbox full"}}}"#,
    ]);
    let input =
        b"EHLO c\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nBDAT 5 LAST\r\nhelloNOOP\r\n";
    let out = run_faulty(&mut r, input);
    assert_eq!(codes(&out), vec![220, 250, 250, 250, 452, 250]);
    assert!(messages(&out).is_empty());
    // A delay lets the chunk through.
    let mut r = rules(&[r#"{"stage": "data", "action": {"delayMs": 3}}"#]);
    let out = run_faulty(&mut r, input);
    assert_eq!(messages(&out).len(), 1);
    // A disconnect ends it at once.
    let mut r = rules(&[r#"{"stage": "data", "action": {"disconnect": true}}"#]);
    let out = run_faulty(&mut r, input);
    assert!(messages(&out).is_empty());
    assert!(matches!(out.last(), Some(Output::Close)));
}

/// Rules at every stage that can never match what `command_strategy` sends.
fn unmatched_rules() -> Faults {
    rules(&[
        r#"{"match": {"from": "nobody@nowhere.test"}, "stage": "mail", "action": {"disconnect": true}, "times": null}"#,
        r#"{"match": {"to": "nobody@nowhere.test"}, "stage": "rcpt", "action": {"disconnect": true}, "times": null}"#,
        r#"{"match": {"to": "nobody@nowhere.test"}, "stage": "data", "action": {"disconnect": true}, "times": null}"#,
        r#"{"match": {"from": "nobody@nowhere.test"}, "stage": "message", "action": {"disconnect": true}, "times": null}"#,
    ])
}

proptest! {
    /// With no rules, or rules that match nothing, a session behaves exactly as without them.
    #[test]
    fn no_rules_change_nothing(
        input in command_strategy(),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let config = small_config();
        // Opened too: the greeting is the first line of each message's transcript.
        let mut plain = Session::new(config.clone());
        plain.open(0, &mut crate::smtp::NoFaults);
        plain.drain();
        let expected = plain.receive(&input);
        for mut rules in [Faults::new(10, 0), unmatched_rules()] {
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
            cuts.sort_unstable();
            let mut session = Session::new(config.clone());
            session.open(0, &mut rules);
            prop_assert_eq!(session.drain(), vec![Output::Reply(session.greeting())]);
            let mut got = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([input.len()]) {
                got.extend(session.receive_asking(&input[start..cut], &mut rules));
                start = cut;
            }
            prop_assert_eq!(&got, &expected);
        }
    }
}
