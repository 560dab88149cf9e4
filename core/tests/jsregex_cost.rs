//! `JsRegex::worst_case_nanos` against the time matches really take (findings 5 and 6 of
//! issue 9). Its own binary, one case after another, so cases do not slow each other; each
//! time is the best of a few runs, so a loaded machine does not make the test fail: the
//! estimate is an upper bound with a margin, not a prediction.
//!
//! `cargo test -p mailjar-core --test jsregex_cost -- --nocapture` prints the table.

use std::time::{Duration, Instant};

use mailjar_core::jsregex::JsRegex;

/// A deterministic pseudo-random string over `alphabet`.
fn random(alphabet: &[char], len: usize, mut seed: u64) -> String {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            alphabet[(seed % alphabet.len() as u64) as usize]
        })
        .collect()
}

/// Nanoseconds this thread has spent on a CPU (`/proc/thread-self/schedstat`). The kernel
/// brings it up to date at each tick, so it lags by up to one tick.
fn cpu_now() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Longest a scheduler tick can be (HZ=250), the error of [`cpu_now`].
const TICK: Duration = Duration::from_millis(4);

/// The shortest of `runs` timings of one `is_match`, each on a freshly compiled regex (a cold
/// lazy-DFA cache: what a new wait pays). A timing is the wall time, or the thread's CPU time
/// plus one tick when that is less: a match preempted on a loaded machine counts only what it
/// ran (a short one usually runs within one time slice, where wall time is exact).
fn measure(pattern: &str, flags: &str, subject: &str, runs: usize) -> Duration {
    (0..runs)
        .map(|_| {
            let re = JsRegex::new(pattern, flags).expect("compiles");
            let (cpu, wall) = (cpu_now(), Instant::now());
            let _ = re.is_match(subject);
            let wall = wall.elapsed();
            match (cpu, cpu_now()) {
                (Some(a), Some(b)) => wall.min(Duration::from_nanos(b.saturating_sub(a)) + TICK),
                _ => wall,
            }
        })
        .min()
        .unwrap_or_default()
}

/// `pattern`, shortened for the table.
fn short(pattern: &str) -> String {
    let chars = pattern.chars().count();
    if chars <= 60 {
        pattern.to_owned()
    } else {
        let head: String = pattern.chars().take(40).collect();
        let tail: String = pattern.chars().skip(chars - 16).collect();
        format!("{head}...{tail} ({chars} chars)")
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Large alternations of zero-width parts before a tail that makes the lazy DFA build one
/// state a byte, with the subject length to run them on.
fn zero_width_alternations() -> Vec<(String, usize)> {
    let alternation = |part: &str, count: usize| vec![part; count].join("|");
    let mut out = Vec::new();
    for (tail, len) in [(r"[ab]*a[ab]{8}c", 186), (r"[ab]*a[ab]{12}c", 1_000)] {
        for (part, count) in [(r"\b", 300), ("$|^", 150), (r"(\b)", 200), ("()", 300)] {
            out.push((format!("(?:{}){tail}", alternation(part, count)), len));
        }
    }
    out
}

/// Properties of strings (`v`), alternations of thousands of literals, on pieces of emoji
/// sequences in any order (many partial matches at once).
fn string_property_cases() -> Vec<(&'static str, &'static str, String)> {
    let pieces = [
        '👨', '👩', '👧', '🧑', '\u{200D}', '\u{FE0F}', '🏻', '🏽', '❤', '💋', '🤝', '🇫', '🇷', 'a',
    ];
    let long = random(&pieces, 20_000, 5);
    let short = random(&pieces, 2_000, 5);
    vec![
        (r"\p{RGI_Emoji}x", "v", long.clone()),
        (r"\p{RGI_Emoji}+x", "v", long.clone()),
        (r"[\p{RGI_Emoji}a]*x", "iv", long.clone()),
        (
            r"\p{RGI_Emoji_ZWJ_Sequence}\p{RGI_Emoji_Flag_Sequence}x",
            "v",
            long,
        ),
        (r"(?<=a)\p{RGI_Emoji}x", "v", short.clone()),
        (r"^(\p{RGI_Emoji})+\1x", "v", short),
    ]
}

#[test]
fn jsregex_estimate_bounds_adversarial_matches() {
    let words = random(&['a', 'b', ' ', 'x', 'é'], 20_000, 7);
    let ab = random(&['a', 'b'], 100_000, 3);
    let mut cases: Vec<(&str, &str, String)> = vec![
        // Finding 5, at lengths a test can afford (it is quadratic).
        (r"(?<=a)(?=[\s\S]*b)", "", "a".repeat(10_000)),
        (r"(?<=a)(?=[\s\S]*b)", "", "a".repeat(30_000)),
        // Finding 6.
        (r"(a*)*\1x", "", "a".repeat(234)),
        (r"^(a+)+\1b$", "", "a".repeat(40)),
        (r"(a|a)*\1c", "", "a".repeat(1_000)),
        (r"(?:a|ab|abc|abcd)*(?!x)y", "", "abcd".repeat(2_500)),
        (r"(?=x)|(\w+\s?)*\1!", "", words.clone()),
        (r"(\w+)\s+\1", "", words.clone()),
        (r"(?=.*reset)", "", words[..10_000].to_owned()),
        (r"^(?=.*reset).*$", "", words.clone()),
        (r"\bverify\b", "iu", words.clone()),
        (r"^b", "m", "a\n".repeat(50_000)),
        (r"(?<!\$)\b\d+x", "", "1".repeat(10_000)),
        (r".{0,200}(?=z)", "s", ab[..20_000].to_owned()),
        // The plain engine: linear, whatever the pattern.
        (r"(a+)+b", "", "a".repeat(100_000)),
        (r"[ab]*a[ab]{20}c", "", ab.clone()),
        (r"(?:\p{L}|\p{N}|\p{P}){18}!", "iu", words.repeat(5)),
        (r".*x.*y.*z", "", words.repeat(5)),
        (r"^.+$", "", "😀".repeat(50_000)),
        (r"^(?:[ab]{0,30}b){10}c", "", ab.clone()),
        (r"^[ab]{1,200}a[ab]{20}c", "", ab.clone()),
        (r"(?:[ab]{0,30}b){10}c", "", ab.clone()),
    ];
    cases.extend(string_property_cases());
    // Zero-width parts (assertions, empty captures, empty alternatives) in a large
    // alternation: no characters, but every lazy-DFA state the tail builds carries their NFA
    // states (the fuzz finding: 50.8 ms measured, 0.24 ms estimated on 186 bytes).
    let zero_width = zero_width_alternations();
    for (pattern, subject_len) in &zero_width {
        for flags in ["", "i"] {
            cases.push((pattern, flags, ab[..*subject_len].to_owned()));
        }
    }
    println!("| pattern | flags | subject bytes | estimate (ms) | measured (ms) |");
    println!("|---|---|---|---|---|");
    let mut failures = Vec::new();
    for (pattern, flags, subject) in &cases {
        let re = JsRegex::new(pattern, flags).expect("compiles");
        let estimate = re.worst_case_nanos(subject);
        // One run first: the long ones are not worth repeating.
        let first = measure(pattern, flags, subject, 1);
        let measured = if first < Duration::from_millis(200) {
            first.min(measure(pattern, flags, subject, 4))
        } else {
            first
        };
        let measured_ns = measured.as_nanos() as u64;
        println!(
            "| `{}` | {flags} | {} | {:.3} | {:.3} |",
            short(pattern),
            subject.len(),
            ms(estimate),
            ms(measured_ns)
        );
        if measured_ns > estimate {
            failures.push(format!(
                "{} /{flags} on {} bytes",
                short(pattern),
                subject.len()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "measured above the estimate: {failures:?}"
    );
}

#[test]
fn jsregex_common_patterns_fit_the_default_budget_many_times() {
    // The API's default budget is 250 ms (`--pattern-budget`): a common pattern on a
    // 1000-character subject must be estimated far below it, so that one request can try it
    // against many messages.
    let budget = mailjar_core::api::DEFAULT_PATTERN_BUDGET_MS * 1_000_000;
    let subject: String = "Welcome! Reset your password with code 123456, or verify it. "
        .chars()
        .cycle()
        .take(1_000)
        .collect();
    let words = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
    ];
    let three = words[..3].join("|");
    let ten = [&words[..], &["iota", "kappa"]].concat().join("|");
    for (pattern, flags) in [
        ("^Reset", ""),
        (r"code \d{6}", ""),
        ("welcome.*", "i"),
        ("welcome.*", "iu"),
        (three.as_str(), ""),
        (three.as_str(), "i"),
        (ten.as_str(), ""),
        (ten.as_str(), "i"),
        (ten.as_str(), "iu"),
        (r"\b(?:reset|verify|confirm|welcome)\b", "i"),
        (r"^(?:Reset|Verify) your (password|account)", ""),
    ] {
        let re = JsRegex::new(pattern, flags).expect("compiles");
        let estimate = re.worst_case_nanos(&subject);
        println!("`{pattern}` /{flags}: {:.3} ms", ms(estimate));
        assert!(
            estimate < budget / 50,
            "{pattern} /{flags}: {} ms",
            ms(estimate)
        );
    }
}

#[test]
fn jsregex_string_properties_fit_the_default_budget_many_times() {
    // `\p{RGI_Emoji}` is an alternation of 3,953 literals, which `regex` runs as a trie: the
    // estimate follows the trie's depth (about 17 ms on 1000 characters with emoji), not its
    // 13,000 characters (seconds: always "too expensive").
    let budget = mailjar_core::api::DEFAULT_PATTERN_BUDGET_MS * 1_000_000;
    let subject: String = "Your order 📦 has shipped 🚚 🇫🇷 👍🏽 "
        .chars()
        .cycle()
        .take(1_000)
        .collect();
    for (pattern, flags) in [
        (r"\p{RGI_Emoji}", "v"),
        (r"\p{RGI_Emoji}", "iv"),
        (r"^\p{RGI_Emoji} ", "v"),
        (r"shipped \p{RGI_Emoji_Flag_Sequence}+", "v"),
        (r"[\p{RGI_Emoji}--\p{RGI_Emoji_Flag_Sequence}]", "v"),
    ] {
        let re = JsRegex::new(pattern, flags).expect("compiles");
        let estimate = re.worst_case_nanos(&subject);
        println!("`{pattern}` /{flags}: {:.3} ms", ms(estimate));
        assert!(
            estimate < budget / 10,
            "{pattern} /{flags}: {} ms",
            ms(estimate)
        );
    }
}

#[test]
fn jsregex_finding_5_estimates_far_above_the_budget() {
    let re = JsRegex::new(r"(?<=a)(?=[\s\S]*b)", "").expect("compiles");
    let estimate = re.worst_case_nanos(&"a".repeat(150_000));
    assert!(estimate > 10 * 250_000_000, "{} ms", ms(estimate));
}

#[test]
fn jsregex_ordinary_patterns_estimate_under_a_millisecond() {
    let subject = "Your order #123456 is confirmed: reset your password or verify it ".repeat(14);
    assert!(subject.len() < 1_000);
    for (pattern, flags) in [
        (r"^order #\d+$", ""),
        ("reset|verify", ""),
        ("reset|verify", "i"),
        (r"^(?=.*reset).*$", ""),
        (r"^(?=.*reset)(?=.*verify)", "is"),
        (r"\bverify\b", "i"),
        (r"^Your code is (\d{6})$", ""),
        (r"\p{Lu}\p{Ll}+", "u"),
    ] {
        let re = JsRegex::new(pattern, flags).expect("compiles");
        let estimate = re.worst_case_nanos(&subject);
        println!("`{pattern}` /{flags}: {:.3} ms", ms(estimate));
        assert!(
            estimate < 1_000_000,
            "{pattern} /{flags}: {} ms",
            ms(estimate)
        );
    }
    // Unanchored lookaround or backreferences (and `\b` with `iu`, `^`/`$` with `m`, which
    // fancy-regex runs as lookaround) may run a scan at every start position:
    // quadratic in the worst case, and estimated so (printed; only bounded by the budget).
    for (pattern, flags) in [
        (r"(?<!\$)\b\d+", ""),
        (r"(?<y>\d{4})-\k<y>", ""),
        (r"(?=.*reset)", ""),
        (r"\bverify\b", "iu"),
        (r"^Your code is (\d{6})$", "m"),
        // Plain, but the bound on lazy-DFA states (2^4 subsets of the `.+` and `\d+`
        // positions, times the literal ones) is loose here.
        (r"^\[(?:staging|prod)\] .+ #\d+$", "u"),
    ] {
        let re = JsRegex::new(pattern, flags).expect("compiles");
        let estimate = re.worst_case_nanos(&subject);
        println!("`{pattern}` /{flags}: {:.3} ms (not bounded)", ms(estimate));
        assert!(
            estimate < 250_000_000,
            "{pattern} /{flags}: {} ms",
            ms(estimate)
        );
    }
}
