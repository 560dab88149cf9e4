//! What a compiled pattern holds in memory (finding 4 of issue 9), as the process sees it.
//!
//! One test in its own binary, so nothing else allocates while it measures: it compiles 100 (or 1,000) distinct patterns of a kind, matches each once on 2
//! threads (each thread gets its own
//! lazy-DFA cache), and reads the growth of VmRSS. The API bounds the memory of parked waits
//! with these figures; `--nocapture` prints them.

use std::sync::Arc;

use mailjar_core::jsregex::{JsRegex, JsRegexError, MAX_COMPILED_BYTES, MAX_HEAP_BYTES};

/// Resident set size of this process, in bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

/// RSS growth per pattern of compiling `count` patterns `make(i)` and matching each on 2
/// threads; the patterns are kept (in `keep`), so that the next measure does not reuse their
/// memory.
fn per_pattern(
    keep: &mut Vec<Arc<Vec<JsRegex>>>,
    count: usize,
    make: &dyn Fn(usize) -> String,
    flags: &str,
    subject: &str,
) -> usize {
    let before = rss();
    let res: Vec<JsRegex> = (0..count)
        .map(|i| JsRegex::new(&make(i), flags).expect("compiles"))
        .collect();
    let res = Arc::new(res);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let res = Arc::clone(&res);
            let subject = subject.to_owned();
            std::thread::spawn(move || {
                for re in res.iter() {
                    // A backtrack-limit error is an answer too: the memory is what counts.
                    let _ = re.is_match(&subject);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let after = rss();
    keep.push(res);
    after.saturating_sub(before) / count
}

/// The largest count `k` for which `pattern(k)` still compiles (binary search).
fn largest_count(pattern: &dyn Fn(usize) -> String, flags: &str) -> usize {
    let (mut ok, mut too_big) = (1, 4096);
    assert!(JsRegex::new(&pattern(ok), flags).is_ok());
    assert!(matches!(
        JsRegex::new(&pattern(too_big), flags),
        Err(JsRegexError::TooLarge(_))
    ));
    while too_big - ok > 1 {
        let mid = (ok + too_big) / 2;
        match JsRegex::new(&pattern(mid), flags) {
            Ok(_) => ok = mid,
            Err(JsRegexError::TooLarge(_)) => too_big = mid,
            Err(e) => panic!("{e}"),
        }
    }
    ok
}

/// A property of strings, an alternation of 3,953 literals (a trie), near the limit too: its
/// growth per pattern.
fn string_property(keep: &mut Vec<Arc<Vec<JsRegex>>>) -> usize {
    let subject = "Order 📦 shipped 🚚 👍🏽 🇫🇷 👨\u{200D}👩\u{200D}👧 ".repeat(40);
    per_pattern(keep, 50, &|i| format!(r"{i}\p{{RGI_Emoji}}"), "v", &subject)
}

#[test]
fn jsregex_compiled_patterns_hold_bounded_memory() {
    let mut keep = Vec::new();
    // Typical patterns first (1,000 of each, for resolution), while the heap is still small.
    let order = per_pattern(
        &mut keep,
        1000,
        &|i| format!(r"^order{i} #\d+$"),
        "",
        "order7 #1234",
    );
    let reset = per_pattern(
        &mut keep,
        1000,
        &|i| format!("reset{i}|verify"),
        "",
        "please verify it",
    );
    // Letters, digits and punctuation: what makes the lazy DFA of these patterns grow.
    let subject: String = "Order #1234, ÀÉÎ! déjà-vu; 日本語 ".repeat(40);
    let lookahead = per_pattern(
        &mut keep,
        1000,
        &|i| format!("^(?=.*reset{i}).*$"),
        "i",
        &subject,
    );
    let heavy = |k: usize| format!(r"(?:\p{{L}}|\p{{N}}|\p{{P}}){{{k}}}");
    let k = largest_count(&heavy, "iu");
    let near_limit = per_pattern(
        &mut keep,
        100,
        &|i| format!(r"{i}(?:\p{{L}}|\p{{N}}|\p{{P}}){{{k}}}"),
        "iu",
        &subject,
    );
    let fancy_k = largest_count(&|k| format!(r"(?<=a){}", heavy(k)), "iu");
    let fancy_near_limit = per_pattern(
        &mut keep,
        100,
        &|i| format!(r"(?<=a){i}(?:\p{{L}}|\p{{N}}|\p{{P}}){{{fancy_k}}}"),
        "iu",
        &subject,
    );
    let emoji = string_property(&mut keep);
    println!("limit MAX_COMPILED_BYTES = {MAX_COMPILED_BYTES}");
    println!("\\p{{RGI_Emoji}} (v): {emoji} bytes per pattern");
    println!("near the limit, regex ({{{k}}} iu): {near_limit} bytes per pattern");
    println!(
        "near the limit, fancy-regex ({{{fancy_k}}} iu): {fancy_near_limit} bytes per pattern"
    );
    println!("^order #\\d+$: {order} bytes per pattern");
    println!("reset|verify: {reset} bytes per pattern");
    println!("^(?=.*reset).*$ (i): {lookahead} bytes per pattern");
    // The bound the API can rely on: a few times the program limit (forward and reverse
    // programs, and one lazy-DFA cache per matching thread, each under the limit).
    for (name, bytes) in [
        ("near limit", near_limit),
        ("fancy near limit", fancy_near_limit),
        ("order", order),
        ("reset", reset),
        ("lookahead", lookahead),
        ("emoji", emoji),
    ] {
        assert!(
            bytes <= MAX_HEAP_BYTES,
            "{name}: {bytes} bytes per compiled pattern"
        );
    }
    assert!(
        order < 256 * 1024 && reset < 256 * 1024 && lookahead < 256 * 1024,
        "{order} {reset} {lookahead}"
    );
}
