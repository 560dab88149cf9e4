//! `JsRegex` with an arbitrary pattern, flags and subject (`pattern \0 flags \0 subject`):
//! compiling answers `Ok` or an error with a message, `worst_case_nanos` and `is_match` never
//! panic, and no match takes grossly longer than its estimate.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use mailjar_core::jsregex::JsRegex;

/// The API refuses longer patterns.
const MAX_PATTERN_CHARS: usize = 1000;
/// Matches estimated above this are not run (the fuzzer stays fast; the API refuses them).
const MAX_RUN_NANOS: u64 = 50_000_000;

/// Nanoseconds this thread has spent on a CPU; the kernel updates it at each tick.
fn cpu_now() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How long `f` ran: wall time, or CPU time plus one tick (4 ms) when that is less, so that
/// being preempted on a loaded machine does not count.
fn ran(f: impl FnOnce()) -> u64 {
    let (cpu, wall) = (cpu_now(), Instant::now());
    f();
    let wall = wall.elapsed();
    let took = match (cpu, cpu_now()) {
        (Some(a), Some(b)) => wall.min(Duration::from_nanos(b.saturating_sub(a) + 4_000_000)),
        _ => wall,
    };
    took.as_nanos() as u64
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\0');
    let pattern = parts.next().unwrap_or("");
    let flags = parts.next().unwrap_or("");
    let subject = parts.next().unwrap_or("");
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return;
    }
    let re = match JsRegex::new(pattern, flags) {
        Ok(re) => re,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let estimate = re.worst_case_nanos(subject);
    if estimate > MAX_RUN_NANOS {
        return;
    }
    let took = ran(|| {
        let _ = re.is_match(subject);
    });
    // A gross miss of the cost model (generous: sanitizers and a loaded machine slow it).
    assert!(
        took <= 10 * estimate + 20_000_000,
        "{pattern:?} /{flags} on {} bytes: {took} ns, estimated {estimate} ns",
        subject.len()
    );
});
