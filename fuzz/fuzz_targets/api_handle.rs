//! `Api::answer` (`handle_request` and its job) with arbitrary methods, paths and queries: never panics,
//! always answers JSON, and every error is `{"error": ...}` with a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mailjar_core::api::{Answered, Api, ApiConfig, Output, Request};
use mailjar_core::budget::StoppedClock;
use mailjar_core::smtp::{Envelope, Incoming};
use mailjar_core::store::Prepared;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let method = match parts.next().unwrap_or("").len() % 4 {
        0 => "GET",
        1 => "DELETE",
        2 => "POST",
        _ => "OPTIONS",
    };
    let path = parts.next().unwrap_or("/");
    let query = parts.next().unwrap_or("");
    let mut api: Api = Api::new(ApiConfig::default());
    for (i, subject) in ["Order #12 confirmed", "Reset your password", "Ünïcödé ✓"].iter().enumerate() {
        let raw = format!("Subject: {subject}\r\nTo: u{i}@local.test\r\n\r\nbody {i}\r\n");
        api.deliver(
            Prepared::new(Incoming {
                envelope: Envelope { from: "a@b".into(), to: vec![format!("u{i}@local.test")] },
                raw: raw.into_bytes(),
                helo: None,
                session: Default::default(),
                transcript: Default::default(),
            }),
            1_000 + i as u64,
            [i as u8; 10],
        );
    }
    let request = Request { path: format!("/{path}"), query: query.into(), ..Request::new(method, "/") };
    match api.answer((), &request, 5_000, &StoppedClock) {
        Answered::Ready(response) => {
            let status = response.status;
            let body: serde_json::Value = serde_json::from_str(&response.into_text()).expect("JSON body");
            if status != 200 {
                assert!((400..500).contains(&status), "status {status}");
                assert!(body["error"].is_string());
            }
        }
        Answered::Waiting { id, deadline_ms } => {
            assert!(deadline_ms > 5_000);
            assert_eq!(api.poll_timeout(), Some(deadline_ms));
            api.handle_expire(id);
            let Some(Output::Respond((), expired)) = api.poll_output() else {
                panic!("parked wait expires");
            };
            assert_eq!(expired.status, 408);
            assert!(api.poll_output().is_none());
        }
        Answered::Subscribed(subscription) => {
            // A stream was accepted: it must be unsubscribable.
            assert!(api.handle_unsubscribe(subscription.id));
        }
    }
});
