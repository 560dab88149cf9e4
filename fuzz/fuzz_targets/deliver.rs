//! Delivery of arbitrary message bytes (the mail-parser path): never panics,
//! and the stored message serialises to JSON with its raw bytes intact.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mailjar_core::api::{Answered, Api, ApiConfig, Request};
use mailjar_core::budget::StoppedClock;
use mailjar_core::smtp::{Envelope, Incoming};
use mailjar_core::store::Prepared;

fuzz_target!(|data: &[u8]| {
    let mut api: Api = Api::new(ApiConfig::default());
    let delivered = api.deliver(
        Prepared::new(Incoming {
            envelope: Envelope { from: "a@b".into(), to: vec!["c@d".into()] },
            raw: data.to_vec(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        }),
        1_000,
        [7; 10],
    );
    let Answered::Ready(response) = api.answer((), &Request::new("GET", &format!("/api/emails/{delivered}")), 2_000, &StoppedClock) else {
        panic!("get by id parked");
    };
    assert_eq!(response.status, 200);
    let body: serde_json::Value = serde_json::from_str(&response.into_text()).expect("JSON");
    assert_eq!(body["email"]["size"].as_u64(), Some(data.len() as u64));
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(body["email"]["raw"].as_str(), Some(text));
    }
});
