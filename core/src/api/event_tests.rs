//! The event stream as the API produces it: subscribe, live events, resume, deletions, limits.

use super::*;
use crate::budget::StoppedClock;
use crate::smtp::{Envelope, Incoming};
use serde_json::Value;

const NOW: u64 = 1_763_779_327_000;

fn message(to: &str, subject: &str) -> Prepared {
    Prepared::new(Incoming {
        envelope: Envelope {
            from: "sender@app.test".into(),
            to: vec![to.to_owned()],
        },
        raw: format!(
            "From: App <sender@app.test>\r\nSubject: {subject}\r\n\r\nHello {subject}\r\n"
        )
        .into_bytes(),
        helo: None,
        session: Default::default(),
        transcript: Default::default(),
    })
}

fn deliver(api: &mut Api, to: &str, subject: &str) -> MessageId {
    api.deliver_and_wake(message(to, subject), NOW, [7; 10], &StoppedClock)
        .id
}

fn subscribe(api: &mut Api, target: &str, last_event_id: Option<&str>) -> Subscription {
    let mut request = Request::new("GET", target);
    request.last_event_id = last_event_id.map(str::to_owned);
    match api.answer((), &request, NOW, &StoppedClock) {
        Answered::Subscribed(subscription) => subscription,
        Answered::Ready(r) => {
            let status = r.status;
            panic!("{target}: {status} {}", r.into_text())
        }
        Answered::Waiting { .. } => panic!("{target} parked"),
    }
}

fn refused(api: &mut Api, target: &str, last_event_id: Option<&str>) -> (u16, String) {
    let mut request = Request::new("GET", target);
    request.last_event_id = last_event_id.map(str::to_owned);
    match api.answer((), &request, NOW, &StoppedClock) {
        Answered::Ready(r) => (r.status, r.into_text()),
        _ => panic!("{target} was accepted"),
    }
}

/// Everything `id` has to send now (its replay, then live events), step by
/// step until it has caught up or its stream ends; the end of the stream as Err.
fn drain(api: &mut Api, id: SubscriberId) -> Result<Vec<Event>, &'static str> {
    let mut events = Vec::new();
    loop {
        match api.poll_events(id) {
            NextEvents::Batch(batch) => {
                let ran = batch.run(&StoppedClock);
                api.handle_progress(ran.progress.expect("a step that ran made progress"));
                events.extend(ran.events);
                if events.last().is_some_and(Event::ends_stream) {
                    return Ok(events);
                }
            }
            NextEvents::Idle => return Ok(events),
            NextEvents::Overflow => return Err("overflow"),
            NextEvents::Ended => return Err("ended"),
        }
    }
}

fn data(event: &Event) -> Value {
    serde_json::from_slice(event.data()).expect("event data is JSON")
}

fn stored_ids(events: &[Event]) -> Vec<MessageId> {
    events.iter().filter_map(Event::id).collect()
}

#[test]
fn a_subscriber_gets_the_messages_its_filter_matches_as_they_are_stored() {
    let mut api = Api::new(ApiConfig::default());
    deliver(&mut api, "b@x", "before");
    let sub = subscribe(&mut api, "/api/events?to=b@x", None);
    assert_eq!(
        drain(&mut api, sub.id),
        Ok(vec![]),
        "no resume id: live only"
    );
    let head = api.event_head();
    let b = deliver(&mut api, "b@x", "for b");
    deliver(&mut api, "a@x", "for a");
    assert!(
        api.event_head() > head,
        "idle subscribers can see the log moved"
    );
    let events = drain(&mut api, sub.id).unwrap();
    assert_eq!(stored_ids(&events), [b]);
    let summary = data(&events[0]);
    assert_eq!(summary["id"], b.to_string());
    assert_eq!(summary["subject"], "for b");
    assert_eq!(summary["to"][0], "b@x");
    assert_eq!(events[0].name(), "stored");
    assert_eq!(drain(&mut api, sub.id), Ok(vec![]), "nothing twice");
    let (_, health) = health(&mut api);
    assert_eq!(health["subscribers"], 1);
    assert!(api.handle_unsubscribe(sub.id));
    assert_eq!(drain(&mut api, sub.id), Err("ended"));
}

fn health(api: &mut Api) -> (u16, Value) {
    match api.answer((), &Request::new("GET", "/health"), NOW, &StoppedClock) {
        Answered::Ready(r) => (r.status, serde_json::from_str(&r.into_text()).unwrap()),
        _ => unreachable!(),
    }
}

#[test]
fn resuming_replays_what_was_stored_after_the_id_then_goes_live_without_gap_or_duplicate() {
    let mut api = Api::new(ApiConfig::default());
    let ids: Vec<MessageId> = (0..5)
        .map(|i| deliver(&mut api, "r@x", &format!("m{i}")))
        .collect();
    // Last-Event-ID wins over the afterId of the URL the EventSource reconnects to.
    let sub = subscribe(
        &mut api,
        &format!("/api/events?afterId={}", ids[0]),
        Some(&ids[1].to_string()),
    );
    let later = deliver(&mut api, "r@x", "m5");
    let mut want = ids[2..].to_vec();
    want.push(later);
    assert_eq!(stored_ids(&drain(&mut api, sub.id).unwrap()), want);

    let by_after = subscribe(&mut api, &format!("/api/events?afterId={}", ids[3]), None);
    assert_eq!(
        stored_ids(&drain(&mut api, by_after.id).unwrap()),
        [ids[4], later],
        "afterId alone resumes too"
    );
}

#[test]
fn deletions_and_evictions_are_events_for_every_subscriber() {
    let mut api = Api::new(ApiConfig {
        store: crate::store::StoreLimits {
            max_messages: 3,
            max_bytes: usize::MAX,
        },
        ..ApiConfig::default()
    });
    let first = deliver(&mut api, "a@x", "1");
    let sub = subscribe(&mut api, "/api/events?to=nobody@x", None).id;
    let second = deliver(&mut api, "a@x", "2");
    deliver(&mut api, "a@x", "3");
    deliver(&mut api, "a@x", "4"); // evicts the first
    let answer = api.answer(
        (),
        &Request::new("DELETE", &format!("/api/emails/{second}")),
        NOW,
        &StoppedClock,
    );
    assert!(matches!(answer, Answered::Ready(r) if r.status == 200));
    let answer = api.answer(
        (),
        &Request::new("DELETE", "/api/emails"),
        NOW,
        &StoppedClock,
    );
    assert!(matches!(answer, Answered::Ready(r) if r.status == 200));
    let events = drain(&mut api, sub).unwrap();
    let shown: Vec<(String, Value)> = events
        .iter()
        .map(|e| (e.name().to_owned(), data(e)))
        .collect();
    assert_eq!(
        shown,
        [
            (
                "deleted".to_owned(),
                serde_json::json!({"ids": [first.to_string()], "reason": "evicted"})
            ),
            (
                "deleted".to_owned(),
                serde_json::json!({"ids": [second.to_string()], "reason": "deleted"})
            ),
            (
                "deleted".to_owned(),
                serde_json::json!({"all": true, "reason": "deleted"})
            ),
        ]
    );
}

#[test]
fn a_large_deletion_is_split_into_events_of_at_most_1000_ids() {
    let mut api = Api::new(ApiConfig::default());
    let sub = subscribe(&mut api, "/api/events", None).id;
    let mut ids = Vec::new();
    for i in 0..2500 {
        ids.push(deliver(&mut api, "many@x", &format!("{i}")));
    }
    assert_eq!(drain(&mut api, sub).unwrap().len(), 2500);
    let Answered::Ready(r) = api.answer(
        (),
        &Request::new("DELETE", "/api/emails?to=many@x"),
        NOW,
        &StoppedClock,
    ) else {
        unreachable!()
    };
    assert_eq!(r.status, 200);
    let events = drain(&mut api, sub).unwrap();
    let sizes: Vec<usize> = events
        .iter()
        .map(|e| data(e)["ids"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, [1000, 1000, 500]);
    let listed: Vec<String> = events
        .iter()
        .flat_map(|e| data(e)["ids"].as_array().cloned().unwrap_or_default())
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    let expected: Vec<String> = ids.iter().map(MessageId::to_string).collect();
    assert_eq!(listed, expected);
}

#[test]
fn a_message_deleted_before_its_event_is_sent_only_shows_as_deleted() {
    let mut api = Api::new(ApiConfig::default());
    let sub = subscribe(&mut api, "/api/events", None).id;
    let id = deliver(&mut api, "a@x", "short-lived");
    api.answer(
        (),
        &Request::new("DELETE", &format!("/api/emails/{id}")),
        NOW,
        &StoppedClock,
    );
    let events = drain(&mut api, sub).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name(), "deleted");
}

#[test]
fn a_subscriber_that_falls_behind_its_buffer_gets_overflow_and_is_ended() {
    let mut api = Api::new(ApiConfig {
        event_buffer: crate::events::MIN_EVENT_BUFFER,
        ..ApiConfig::default()
    });
    let slow = subscribe(&mut api, "/api/events", None).id;
    let fast = subscribe(&mut api, "/api/events", None).id;
    for i in 0..=crate::events::MIN_EVENT_BUFFER {
        deliver(&mut api, "a@x", &format!("{i}"));
        if i % 100 == 0 {
            drain(&mut api, fast).unwrap();
        }
    }
    assert!(drain(&mut api, fast).is_ok(), "a subscriber that keeps up");
    assert_eq!(drain(&mut api, slow), Err("overflow"));
    assert_eq!(drain(&mut api, slow), Err("ended"));
    assert_eq!(api.subscriber_count(), 1);
}

#[test]
fn a_pattern_that_runs_out_of_budget_ends_the_stream_with_an_error() {
    let mut api = Api::new(ApiConfig::default());
    // The backtracking pattern gives up on this subject: the error a list gives.
    let sub = subscribe(
        &mut api,
        "/api/events?subjectPattern=%5E(a%2B)%2B%5C1b%24",
        None,
    )
    .id;
    deliver(&mut api, "a@x", "hello");
    assert_eq!(drain(&mut api, sub), Ok(vec![]));
    deliver(&mut api, "a@x", &"a".repeat(40));
    let events = drain(&mut api, sub).unwrap();
    let last = events.last().expect("an error event");
    assert_eq!(last.name(), "error");
    assert!(last.ends_stream());
    assert!(data(last)["error"].as_str().is_some());
}

#[test]
fn subscriptions_are_bounded_and_their_input_checked() {
    let mut api = Api::new(ApiConfig {
        max_subscribers: 1,
        ..ApiConfig::default()
    });
    let (status, text) = refused(&mut api, "/api/events?limit=3", None);
    assert_eq!(status, 400, "{text}");
    let (status, text) = refused(&mut api, "/api/events", Some("not-an-id"));
    assert_eq!(status, 400);
    assert!(text.contains("Last-Event-ID"), "{text}");
    let (status, _) = refused(&mut api, "/api/events?subjectPattern=(", None);
    assert_eq!(status, 400);
    let first = subscribe(&mut api, "/api/events", Some("")).id;
    let (status, text) = refused(&mut api, "/api/events", None);
    assert_eq!(
        (status, text.as_str()),
        (503, r#"{"error":"too many subscribers"}"#)
    );
    api.handle_unsubscribe(first);
    subscribe(&mut api, "/api/events", None);
    let (_, health) = health(&mut api);
    assert_eq!(health["limits"]["maxSubscribers"], 1);
    assert_eq!(
        health["limits"]["eventBuffer"],
        crate::events::DEFAULT_EVENT_BUFFER
    );
}

/// One step of `id`, run; None when it has nothing (idle) or has ended.
fn step(api: &mut Api, id: SubscriberId) -> Option<(Ran, bool)> {
    match api.poll_events(id) {
        NextEvents::Batch(batch) => {
            let heavy = batch.is_heavy();
            let ran = batch.run(&StoppedClock);
            api.handle_progress(ran.progress.expect("a step that ran made progress"));
            Some((ran, heavy))
        }
        _ => None,
    }
}

fn message_of(to: &str, subject: &str, body_bytes: usize) -> Prepared {
    Prepared::new(Incoming {
        envelope: Envelope {
            from: "sender@app.test".into(),
            to: vec![to.to_owned()],
        },
        raw: format!("Subject: {subject}\r\n\r\n{}\r\n", "b".repeat(body_bytes)).into_bytes(),
        helo: None,
        session: Default::default(),
        transcript: Default::default(),
    })
}

#[test]
fn a_subscriber_far_behind_catches_up_in_steps_bounded_by_entries_and_bytes() {
    let mut api = Api::new(ApiConfig::default());
    let sub = subscribe(&mut api, "/api/events", None).id;
    // Summaries of about 1 KiB (a summary keeps 1000 characters of the
    // subject): the byte bound ends a step before the entry bound.
    let subject = "s".repeat(2000);
    let ids: Vec<MessageId> = (0..1000)
        .map(|i| deliver(&mut api, "far@x", &format!("{subject}{i}")))
        .collect();
    let mut got = Vec::new();
    let mut steps = 0;
    let mut total = 0;
    loop {
        let (ran, heavy) = step(&mut api, sub).expect("a step");
        assert!(!heavy, "small messages, no pattern");
        steps += 1;
        let bytes: usize = ran.events.iter().map(|e| e.data().len()).sum();
        total += bytes;
        let largest = ran.events.iter().map(|e| e.data().len()).max().unwrap_or(0);
        assert!(ran.events.len() <= crate::events::STEP_ENTRIES);
        assert!(
            bytes < crate::events::STEP_BYTES + largest,
            "a step holds at most STEP_BYTES and one event: {bytes}"
        );
        got.extend(stored_ids(&ran.events));
        if ran.caught_up {
            break;
        }
    }
    assert_eq!(got, ids, "every message once, in order");
    assert!(
        steps >= total / crate::events::STEP_BYTES && steps > 1,
        "{steps} steps for {total} bytes"
    );
    assert!(step(&mut api, sub).is_none(), "then idle");
}

#[test]
fn a_step_is_heavy_by_the_bytes_it_reads_and_reads_at_most_one_large_message() {
    let mut api = Api::new(ApiConfig::default());
    let sub = subscribe(&mut api, "/api/events", None).id;
    let big = crate::events::LIGHT_MESSAGE_BYTES + 1;
    let deliver_of = |api: &mut Api, subject: &str, size: usize| {
        let m = message_of("h@x", subject, size);
        api.deliver_and_wake(m, NOW, [1; 10], &StoppedClock).id
    };
    let small = deliver_of(&mut api, "small", 100);
    let large = [
        deliver_of(&mut api, "large 0", big),
        deliver_of(&mut api, "large 1", big),
    ];
    let after = deliver_of(&mut api, "small after", 100);
    // A light step sends the small message and stops before the large one.
    let (ran, heavy) = step(&mut api, sub).unwrap();
    assert!(!heavy);
    assert_eq!(stored_ids(&ran.events), [small]);
    assert!(!ran.caught_up);
    // Each large message starts a heavy step, which goes on with small ones only.
    let (ran, heavy) = step(&mut api, sub).unwrap();
    assert!(heavy, "a first message larger than LIGHT_MESSAGE_BYTES");
    assert_eq!(stored_ids(&ran.events), [large[0]]);
    let (ran, heavy) = step(&mut api, sub).unwrap();
    assert!(heavy);
    assert_eq!(stored_ids(&ran.events), [large[1], after]);
    assert!(ran.caught_up);
    // The same holds for a replay.
    let replaying = subscribe(&mut api, &format!("/api/events?afterId={small}"), None).id;
    let (ran, heavy) = step(&mut api, replaying).unwrap();
    assert!(heavy);
    assert_eq!(stored_ids(&ran.events), [large[0]]);
}

#[test]
fn a_step_ends_once_it_has_taken_its_time() {
    /// A clock that moves a millisecond every time it is read.
    struct Racing(std::cell::Cell<u64>);
    impl crate::budget::Clock for Racing {
        fn nanos(&self) -> u64 {
            self.0.set(self.0.get() + 1_000_000);
            self.0.get()
        }
    }
    let mut api = Api::new(ApiConfig::default());
    let sub = subscribe(&mut api, "/api/events", None).id;
    let ids: Vec<MessageId> = (0..20)
        .map(|i| deliver(&mut api, "t@x", &format!("{i}")))
        .collect();
    let mut got = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let NextEvents::Batch(batch) = api.poll_events(sub) else {
            panic!("a step")
        };
        let ran = batch.run(&Racing(std::cell::Cell::new(0)));
        api.handle_progress(ran.progress.expect("progress"));
        sizes.push(ran.events.len());
        got.extend(stored_ids(&ran.events));
        if ran.caught_up {
            break;
        }
    }
    // The clock is read every 8 entries, and a millisecond has gone by at each look.
    assert_eq!(sizes, [8, 8, 4], "cut short by time");
    assert_eq!(got, ids);
}

#[test]
fn a_replay_reads_the_live_store_step_by_step_without_gap_or_duplicate() {
    let mut api = Api::new(ApiConfig::default());
    let subject = "r".repeat(2000);
    let ids: Vec<MessageId> = (0..600)
        .map(|i| deliver(&mut api, "rep@x", &format!("{subject}{i}")))
        .collect();
    let sub = subscribe(&mut api, &format!("/api/events?afterId={}", ids[99]), None).id;
    // The first step sends the start of the replay.
    let (first, _) = step(&mut api, sub).unwrap();
    let mut got = stored_ids(&first.events);
    assert!(
        !got.is_empty() && got.len() < 500,
        "a bounded step: {}",
        got.len()
    );
    // Meanwhile one it has not reached is deleted, and more mail arrives.
    let gone = ids[550];
    let answer = api.answer(
        (),
        &Request::new("DELETE", &format!("/api/emails/{gone}")),
        NOW,
        &StoppedClock,
    );
    assert!(matches!(answer, Answered::Ready(r) if r.status == 200));
    let late: Vec<MessageId> = (0..3)
        .map(|i| deliver(&mut api, "rep@x", &format!("late {i}")))
        .collect();
    let rest = drain(&mut api, sub).unwrap();
    got.extend(stored_ids(&rest));
    let mut want: Vec<MessageId> = ids[100..]
        .iter()
        .copied()
        .filter(|id| *id != gone)
        .collect();
    want.extend(&late);
    assert_eq!(
        got, want,
        "each stored message once, in order, replay then live"
    );
    let deleted: Vec<&Event> = rest.iter().filter(|e| e.name() == "deleted").collect();
    assert_eq!(deleted.len(), 1, "the deleted one shows only as deleted");
    assert_eq!(data(deleted[0])["ids"][0], gone.to_string());
}

#[test]
fn a_replay_whose_messages_were_all_deleted_goes_live() {
    let mut api = Api::new(ApiConfig::default());
    let first = deliver(&mut api, "x@x", "1");
    deliver(&mut api, "x@x", "2");
    let sub = subscribe(&mut api, &format!("/api/events?afterId={first}"), None).id;
    let answer = api.answer(
        (),
        &Request::new("DELETE", "/api/emails"),
        NOW,
        &StoppedClock,
    );
    assert!(matches!(answer, Answered::Ready(r) if r.status == 200));
    let live = deliver(&mut api, "x@x", "3");
    let events = drain(&mut api, sub).unwrap();
    let names: Vec<&str> = events.iter().map(Event::name).collect();
    assert_eq!(names, ["deleted", "stored"]);
    assert_eq!(stored_ids(&events), [live]);
}

#[test]
fn every_subscriber_sends_the_same_deletion_json_and_summary() {
    let mut api = Api::new(ApiConfig::default());
    let a = subscribe(&mut api, "/api/events", None).id;
    let b = subscribe(&mut api, "/api/events", None).id;
    let id = deliver(&mut api, "s@x", "shared");
    let mut from_a = drain(&mut api, a).unwrap();
    let mut from_b = drain(&mut api, b).unwrap();
    let answer = api.answer(
        (),
        &Request::new("DELETE", "/api/emails?to=s@x"),
        NOW,
        &StoppedClock,
    );
    assert!(matches!(answer, Answered::Ready(r) if r.status == 200));
    from_a.extend(drain(&mut api, a).unwrap());
    from_b.extend(drain(&mut api, b).unwrap());
    assert_eq!(from_a.len(), 2);
    for (x, y) in from_a.iter().zip(&from_b) {
        assert_eq!(x, y);
        assert_eq!(
            x.data().as_ptr(),
            y.data().as_ptr(),
            "one buffer, not copies"
        );
    }
    assert_eq!(stored_ids(&from_a), [id]);
}

#[test]
fn a_step_whose_progress_is_not_handed_back_is_taken_again() {
    let mut api = Api::new(ApiConfig::default());
    let sub = subscribe(&mut api, "/api/events", None).id;
    let ids: Vec<MessageId> = (0..3)
        .map(|i| deliver(&mut api, "p@x", &format!("{i}")))
        .collect();
    let NextEvents::Batch(batch) = api.poll_events(sub) else {
        panic!("a step")
    };
    let lost = batch.run(&StoppedClock);
    assert_eq!(stored_ids(&lost.events), ids);
    // The host never handed its progress back (its client went away mid-write, say).
    let NextEvents::Batch(again) = api.poll_events(sub) else {
        panic!("the same step again")
    };
    let ran = again.run(&StoppedClock);
    assert_eq!(ran.events, lost.events, "the same events, none skipped");
    assert_eq!(ran.progress, lost.progress);
    api.handle_progress(ran.progress.unwrap());
    assert!(matches!(api.poll_events(sub), NextEvents::Idle));
    // Handing the same progress back twice moves it no further.
    api.handle_progress(lost.progress.unwrap());
    let later = deliver(&mut api, "p@x", "later");
    assert_eq!(stored_ids(&drain(&mut api, sub).unwrap()), [later]);
    // A progress for an ended subscription is ignored.
    assert!(api.handle_unsubscribe(sub));
    api.handle_progress(lost.progress.unwrap());
    assert_eq!(drain(&mut api, sub), Err("ended"));
}
