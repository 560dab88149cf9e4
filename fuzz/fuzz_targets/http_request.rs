//! The HTTP driver's sans-IO request reader with arbitrary bytes in arbitrary
//! pieces: never panics, gives the same steps however the bytes are split,
//! every head is followed by the end of its body, every request handed on
//! has a path warp can route (authority-form and CONNECT targets panicked
//! inside warp before), and every refusal is a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mailjar::http1::reader::{MAX_BODY_BYTES, MAX_HEAD_BYTES, RequestReader, Step};

/// Every step the reader gives for what it has; true after a fatal one.
fn drain(reader: &mut RequestReader, steps: &mut Vec<Step>) -> bool {
    loop {
        match reader.next_step() {
            Step::NeedMore => return false,
            step @ Step::Fatal(_) => {
                steps.push(step);
                return true;
            }
            step => steps.push(step),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte seeds the split points; the rest is what the client sends.
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    // Past the head cap a partial head is refused (431) where the whole one
    // may be malformed (400): the same verdict class, not the same step.
    if input.len() >= MAX_HEAD_BYTES {
        return;
    }
    let mut whole = Vec::new();
    let mut reader = RequestReader::new();
    reader.feed(input);
    drain(&mut reader, &mut whole);

    let mut split = Vec::new();
    let mut reader = RequestReader::new();
    let mut rest = input;
    let mut step = usize::from(seed % 17) + 1;
    while !rest.is_empty() {
        let (piece, tail) = rest.split_at(step.min(rest.len()));
        reader.feed(piece);
        if drain(&mut reader, &mut split) {
            break;
        }
        assert!(reader.buffered() <= MAX_HEAD_BYTES + piece.len());
        rest = tail;
        step = step * 7 % 23 + 1;
    }
    assert_eq!(whole, split, "splitting changed the steps");

    let mut expect_body_done = false;
    for (i, step) in whole.iter().enumerate() {
        match step {
            Step::Head(head) => {
                assert!(!expect_body_done, "a head before the end of the last body");
                expect_body_done = true;
                assert!(head.body_length <= MAX_BODY_BYTES);
                assert!(head.target.as_str().starts_with('/'));
                let request = head.to_request();
                assert!(request.uri().path_and_query().is_some());
                assert!(request.uri().path().starts_with('/'));
                match &head.refusal {
                    Some(refusal) => assert_eq!(refusal.status, 400),
                    None => {
                        assert_ne!(head.method.as_str(), "CONNECT");
                        // Two Host fields are refused; a served request has one at most.
                        assert!(request.headers().get_all("host").iter().count() <= 1);
                    }
                }
            }
            Step::BodyDone => {
                assert!(expect_body_done, "a body end without a head");
                expect_body_done = false;
            }
            Step::Fatal(refusal) => {
                assert!((400..500).contains(&refusal.status));
                assert_eq!(i + 1, whole.len(), "steps after a fatal one");
            }
            Step::NeedMore => unreachable!("drain stops at NeedMore"),
        }
    }
});
