//! How long one `is_match` can take: an upper estimate from the pattern's shape and the
//! subject's length, so that a caller can refuse a match it cannot afford before running it
//! (fancy-regex can be neither interrupted nor made to count the work it hands to `regex`).
//!
//! The model, in the engines' own terms:
//! - `regex` (no lookaround, no backreference) is linear: each subject byte costs at most a
//!   lazy-DFA step plus, when the DFA builds a new state or has given up, one step per NFA
//!   state that can be active at once, which is at most the pattern's *positions*: characters
//!   and classes, and the NFA states that match nothing but are followed all the same
//!   (assertions, empty alternatives, capture groups, the split of an alternation or an
//!   optional repetition), with counted repetitions unrolled. A large alternation of
//!   zero-width parts has no characters, yet every DFA state carries its NFA states (the
//!   `jsregex` fuzz target, under AddressSanitizer, measured such a pattern before a
//!   many-state tail at 200 times an estimate that counted characters only). A pattern
//!   that starts with `^` reads at most as many bytes as it can match (4 a character).
//! - fancy-regex runs a backtracking VM from every start position (one, when the pattern
//!   starts with `^`). It hands every part without lookaround or backreference to `regex`
//!   (a *delegate*, which scans at most the rest of the subject and yields one result), and
//!   runs the rest itself. We mirror its choice of delegates, then bound the VM work two ways
//!   and keep the smaller: every path the VM could explore (concatenation multiplies the
//!   number of ways a part can end, a repetition sums their powers), and the backtrack
//!   limit (every forward run between two backtracks executes each instruction at most once,
//!   repetitions below their minimum unrolled).
//!
//! The constants are nanoseconds measured on the development machine (2-core x86_64) in the
//! dev profile (regex-automata and fancy-regex at opt-level 3, `regex` and `memchr` not; a
//! release build is faster, so the estimate is looser there), with a margin of 2 to 4 on the
//! worst cases found; `core/tests/jsregex_cost.rs` checks measured time against the estimate
//! on adversarial cases, and the `jsregex` fuzz target looks for gross misses. The model
//! follows fancy-regex 0.16's compiler (`compile_concat`, `compile_repeat`); revisit it when
//! that dependency moves. Its weak spot is the bound on lazy-DFA states (2 to the number of
//! classes and repeated positions), which overestimates some ordinary patterns.

use super::ast::Node;
use super::charset::Set;
use super::flags::Flags;
use super::strings::{Alternative, Alternatives};

/// Fixed cost of one call (conversion, engine setup, a cache from the pool).
const CALL_NS: f64 = 5_000.0;
/// Per subject byte, before matching: looking for astral characters.
const CHECK_NS: f64 = 10.0;
/// Per subject byte, when astral characters are mapped to pseudo characters (UTF-16 mode).
const CONVERT_NS: f64 = 100.0;
/// Per subject byte scanned by `regex` (one lazy-DFA step, or one prefilter step).
const BYTE_NS: f64 = 250.0;
/// Building one lazy-DFA state, per NFA position in it.
const BUILD_NS: f64 = 150.0;
/// Per subject byte and per pattern position that may be active, once the lazy DFA has given
/// up (NFA simulation).
const STATE_NS: f64 = 300.0;
/// Fewer new lazy-DFA states than this cannot make it give up: it gives up only after its
/// cache (`MAX_COMPILED_BYTES`, at most about 1.6 KiB a state) was cleared three times.
const GIVE_UP_STATES: f64 = 1_024.0;
/// One fancy-regex VM instruction.
const STEP_NS: f64 = 5.0;
/// Fixed cost of one call from fancy-regex to a `regex` delegate.
const DELEGATE_NS: f64 = 250.0;
/// Per byte a delegate scans while its lazy DFA works (its states are built once per
/// match, counted apart).
const DELEGATE_BYTE_NS: f64 = 40.0;
/// Per byte compared by a backreference.
const COMPARE_NS: f64 = 2.0;
/// NFA states an alternation adds (its split and its join), and an optional repetition per
/// optional copy.
const SPLIT_STATES: f64 = 2.0;
/// NFA states a capture group adds.
const CAPTURE_STATES: f64 = 2.0;
/// Most UTF-8 bytes one character takes as the engine sees it (a pseudo character too).
const CHAR_BYTES: f64 = 4.0;
/// Saturation for the path counts (which grow exponentially).
const CAP: f64 = 1e30;

/// A pattern's shape as far as matching time goes (no character sets: it stays small).
#[derive(Debug, Clone)]
pub(super) struct Shape {
    kind: Kind,
    /// Contains lookaround or a backreference: fancy-regex runs it in its VM.
    hard: bool,
    /// Fewest and most characters it matches (`INFINITY`: unbounded).
    min_len: f64,
    max_len: f64,
    /// NFA states a lazy-DFA state can hold: characters and classes, plus zero-width states
    /// (assertions, empty alternatives, captures, splits), counted repetitions unrolled.
    positions: f64,
    /// Those of them that can make the lazy DFA need many states: classes (other than the
    /// case variants of one character) and everything repeated.
    varied: f64,
}

#[derive(Debug, Clone)]
enum Kind {
    /// One character out of a set; `literal`: one character or its case variants; `single`:
    /// one character (fancy-regex matches it itself).
    Char {
        literal: bool,
        single: bool,
    },
    /// Matches empty: `^`, `$`, `\b` as `regex` runs them, an empty alternative (one NFA
    /// state all the same).
    Empty,
    /// An assertion fancy-regex runs as lookarounds in exclusive alternatives, in units of
    /// one lookaround: `^`/`$` with `m` (an assertion or a lookbehind: 3, measured), `\b` in
    /// a fancy pattern (four lookarounds).
    Assert {
        looks: f64,
    },
    Look {
        negate: bool,
        body: Box<Shape>,
    },
    Backref,
    Seq(Vec<Shape>),
    Alt(Vec<Shape>),
    Repeat {
        body: Box<Shape>,
        min: u64,
        max: Option<u64>,
    },
}

/// What one part costs, entered once at one position.
#[derive(Debug, Clone, Copy)]
struct Cost {
    /// Ways it can end (paths the VM may continue from).
    ends: f64,
    /// Nanoseconds to explore every path.
    all: f64,
    /// Nanoseconds of the longest single path.
    one: f64,
    /// Nanoseconds to execute each of its instructions once (minimum repetitions unrolled).
    line: f64,
    /// Nanoseconds to build its delegates' lazy-DFA states (once per match: a delegate keeps
    /// its cache from one call to the next).
    build: f64,
}

fn mul(a: f64, b: f64) -> f64 {
    if a == 0.0 || b == 0.0 {
        0.0
    } else {
        (a * b).min(CAP)
    }
}

fn add(a: f64, b: f64) -> f64 {
    (a + b).min(CAP)
}

/// `1 + e + e^2 + ... + e^k`.
fn geometric(e: f64, k: f64) -> f64 {
    if k < 0.0 {
        0.0
    } else if e <= 1.0 {
        k + 1.0
    } else {
        ((e.powf(k + 1.0) - 1.0) / (e - 1.0)).min(CAP)
    }
}

impl Shape {
    fn new(kind: Kind) -> Shape {
        let sum = |v: &[Shape], f: fn(&Shape) -> f64| v.iter().map(f).fold(0.0, add);
        let (hard, min_len, max_len, positions, varied) = match &kind {
            Kind::Char { literal, .. } => (false, 1.0, 1.0, 1.0, if *literal { 0.0 } else { 1.0 }),
            Kind::Empty => (false, 0.0, 0.0, 1.0, 0.0),
            Kind::Assert { .. } => (true, 0.0, 0.0, 1.0, 1.0),
            Kind::Look { body, .. } => (true, 0.0, 0.0, body.positions, body.varied),
            Kind::Backref => (true, 0.0, f64::INFINITY, 0.0, 0.0),
            Kind::Seq(v) => (
                v.iter().any(|s| s.hard),
                sum(v, |s| s.min_len),
                sum(v, |s| s.max_len),
                sum(v, |s| s.positions),
                sum(v, |s| s.varied),
            ),
            Kind::Alt(v) => (
                v.iter().any(|s| s.hard),
                v.iter().map(|s| s.min_len).fold(f64::INFINITY, f64::min),
                v.iter().map(|s| s.max_len).fold(0.0, f64::max),
                // The split and the join.
                add(sum(v, |s| s.positions), SPLIT_STATES),
                sum(v, |s| s.varied),
            ),
            Kind::Repeat { body, min, max } => {
                let copies = max.unwrap_or(min + 1).max(1) as f64;
                // A split for every optional copy (one for the loop).
                let splits = mul(
                    copies - (*min).min(max.unwrap_or(*min)) as f64,
                    SPLIT_STATES,
                );
                (
                    body.hard,
                    body.min_len * *min as f64,
                    match max {
                        Some(m) if body.max_len.is_finite() => body.max_len * *m as f64,
                        _ if body.max_len == 0.0 => 0.0,
                        _ => f64::INFINITY,
                    },
                    add(mul(body.positions, copies), splits),
                    mul(body.positions, copies),
                )
            }
        };
        Shape {
            kind,
            hard,
            min_len: min_len.min(CAP),
            max_len,
            positions,
            varied,
        }
    }

    /// A class with strings: an alternation of sequences. When they are all literals `regex`
    /// compiles them as a trie: one thread per start position, at one node and the states
    /// its end may add (so twice the longest string, plus its start), and no more lazy-DFA
    /// states than the trie has nodes (counted as `varied`: `2^varied` is at least that).
    fn strings(alternatives: &Alternatives) -> Shape {
        let char = |literal: bool, single: bool| Shape::new(Kind::Char { literal, single });
        let mut nodes = 0;
        let alts = alternatives
            .alternatives
            .iter()
            .map(|alternative| match alternative {
                Alternative::Literal(chars) => {
                    nodes += chars.len();
                    Shape::new(Kind::Seq(chars.iter().map(|_| char(true, true)).collect()))
                }
                // Case variants or a class: counted as classes (less code in the wasm than
                // telling the case variants of one character apart, and rare).
                Alternative::Sets(sets) => {
                    Shape::new(Kind::Seq(sets.iter().map(|_| char(false, false)).collect()))
                }
            })
            .collect();
        let mut shape = Shape::new(Kind::Alt(alts));
        if alternatives.literal {
            // The trie has at most one node a character, and its root; `varied` is the bits
            // of that count, at least log2 of it.
            shape.varied = f64::from(usize::BITS - nodes.leading_zeros());
            shape.positions = 2.0 * shape.max_len + 1.0 + shape.varied;
        }
        if alternatives.empty {
            shape = Shape::new(Kind::Repeat {
                body: Box::new(shape),
                min: 0,
                max: Some(1),
            });
        }
        shape
    }

    /// The shape of `node` as the translator emits it for these flags and engine.
    pub(super) fn of(node: &Node, fl: &Flags, fancy: bool) -> Shape {
        let kind = match node {
            Node::Empty => Kind::Empty,
            Node::Set(set) => Kind::Char {
                literal: is_literal(set),
                single: is_single(set),
            },
            Node::Strings(strings, set) => {
                return Shape::strings(&Alternatives::of(strings, set, fl));
            }
            Node::Start | Node::End if fancy && fl.multiline => Kind::Assert { looks: 3.0 },
            Node::WordBoundary(_) if fancy => Kind::Assert { looks: 4.0 },
            Node::Start | Node::End | Node::WordBoundary(_) => Kind::Empty,
            Node::Group(None, n) => return Shape::of(n, fl, fancy),
            // Two capture states around the group.
            Node::Group(Some(_), n) => {
                let mut shape = Shape::of(n, fl, fancy);
                shape.positions = add(shape.positions, CAPTURE_STATES);
                return shape;
            }
            Node::Look { negate, node, .. } => Kind::Look {
                negate: *negate,
                body: Box::new(Shape::of(node, fl, fancy)),
            },
            Node::Backref(_) => Kind::Backref,
            Node::Repeat { node, min, max, .. } => Kind::Repeat {
                body: Box::new(Shape::of(node, fl, fancy)),
                min: *min,
                max: *max,
            },
            Node::Concat(v) => Kind::Seq(v.iter().map(|n| Shape::of(n, fl, fancy)).collect()),
            Node::Alt(v) => Kind::Alt(v.iter().map(|n| Shape::of(n, fl, fancy)).collect()),
        };
        Shape::new(kind)
    }

    /// `regex` scanning `bytes` bytes of a subject of `n` for this part. The lazy DFA builds
    /// at most one state a byte, and no more states than the subsets of positions it can
    /// reach (`2^varied` times the literal positions); while it has built fewer than
    /// [`GIVE_UP_STATES`] it cannot give up, and after that the NFA simulation costs each
    /// byte one step per position.
    fn scan(&self, bytes: f64) -> f64 {
        let states = (bytes + 1.0).min(self.dfa_states());
        if states < GIVE_UP_STATES {
            add(
                mul(bytes, BYTE_NS),
                mul(states, mul(self.positions, BUILD_NS)),
            )
        } else {
            mul(bytes, add(BYTE_NS, mul(self.positions, STATE_NS)))
        }
    }

    /// Most lazy-DFA states this part can need.
    fn dfa_states(&self) -> f64 {
        mul(
            2f64.powf(self.varied.min(100.0)),
            self.positions - self.varied + 1.0,
        )
    }

    /// A part fancy-regex hands to `regex`: one call, one result, scanning at most the rest
    /// of the subject.
    fn delegate(&self, n: f64) -> Cost {
        let bytes = self.max_len.min(n);
        let per_byte = if self.dfa_states() < GIVE_UP_STATES {
            DELEGATE_BYTE_NS
        } else {
            add(BYTE_NS, mul(self.positions, STATE_NS.max(BUILD_NS)))
        };
        let ns = STEP_NS + DELEGATE_NS + mul(bytes, per_byte);
        Cost {
            ends: 1.0,
            all: ns,
            one: ns,
            line: ns,
            build: mul(
                self.dfa_states().min(GIVE_UP_STATES),
                mul(self.positions, BUILD_NS),
            ),
        }
    }

    /// Cost in fancy-regex's VM, entered once; `hard` as fancy-regex's compiler passes it.
    fn fancy(&self, hard: bool, n: f64) -> Cost {
        if !hard && !self.hard {
            return self.delegate(n);
        }
        let flat = |ns: f64, ends: f64, build: f64| Cost {
            ends,
            all: ns,
            one: ns,
            line: ns,
            build,
        };
        match &self.kind {
            Kind::Char { single: true, .. } => flat(STEP_NS, 1.0, 0.0),
            Kind::Char { .. } => self.delegate(n),
            Kind::Empty => flat(STEP_NS, 1.0, 0.0),
            // Two alternatives of two one-character lookarounds each.
            Kind::Assert { looks } => flat(
                looks * (3.0 * STEP_NS + DELEGATE_NS + DELEGATE_BYTE_NS),
                1.0,
                looks * 2.0 * BUILD_NS,
            ),
            Kind::Backref => flat(6.0 * STEP_NS + COMPARE_NS * n, 1.0, 0.0),
            Kind::Look { negate, body } => {
                let c = body.fancy(false, n);
                Cost {
                    // A positive lookaround is not atomic in fancy-regex.
                    ends: if *negate { 1.0 } else { c.ends },
                    all: add(3.0 * STEP_NS, c.all),
                    one: add(3.0 * STEP_NS, c.one),
                    line: add(3.0 * STEP_NS, c.line),
                    build: c.build,
                }
            }
            Kind::Seq(v) => {
                // fancy-regex's compile_concat: a constant-size easy prefix and an easy suffix
                // (constant-size only when `hard`) become one delegate each.
                let prefix = v
                    .iter()
                    .take_while(|s| !s.hard && s.min_len == s.max_len)
                    .count();
                let rest = &v[prefix..];
                let suffix = rest
                    .iter()
                    .rev()
                    .take_while(|s| !s.hard && (!hard || s.min_len == s.max_len))
                    .count();
                let middle = &rest[..rest.len() - suffix];
                let mut parts: Vec<Cost> = Vec::new();
                if prefix > 0 {
                    parts.push(Shape::new(Kind::Seq(v[..prefix].to_vec())).delegate(n));
                }
                parts.extend(middle.iter().map(|s| s.fancy(true, n)));
                if suffix > 0 {
                    parts.push(
                        Shape::new(Kind::Seq(rest[rest.len() - suffix..].to_vec())).delegate(n),
                    );
                }
                let mut acc = flat(0.0, 1.0, 0.0);
                for c in parts {
                    acc = Cost {
                        all: add(acc.all, mul(acc.ends, c.all)),
                        ends: mul(acc.ends, c.ends),
                        one: add(acc.one, c.one),
                        line: add(acc.line, c.line),
                        build: add(acc.build, c.build),
                    };
                }
                acc
            }
            Kind::Alt(v) => {
                let mut acc = flat(0.0, 0.0, 0.0);
                for s in v {
                    let c = s.fancy(hard, n);
                    acc = Cost {
                        ends: add(acc.ends, c.ends),
                        all: add(acc.all, add(c.all, 2.0 * STEP_NS)),
                        one: acc.one.max(add(c.one, 2.0 * STEP_NS)),
                        line: add(acc.line, add(c.line, 2.0 * STEP_NS)),
                        build: add(acc.build, c.build),
                    };
                }
                acc
            }
            Kind::Repeat { body, min, max } => {
                let optional = *min == 0 && *max == Some(1);
                let c = body.fancy(hard || !optional, n);
                // Iterations: each one consumes at least `min_len` characters, or (when it
                // can match empty) only the counted ones and at most `n` consuming ones.
                let iters = if body.min_len >= 1.0 {
                    let fit = (n / body.min_len).floor() + 1.0;
                    max.map_or(fit, |m| (m as f64).min(fit))
                } else {
                    max.map_or(*min as f64 + n + 1.0, |m| m as f64)
                };
                let unrolled = (*min).max(1) as f64;
                Cost {
                    ends: geometric(c.ends, iters),
                    all: add(
                        mul(geometric(c.ends, iters - 1.0), c.all),
                        mul(iters + 1.0, 2.0 * STEP_NS),
                    ),
                    one: add(mul(iters, add(c.one, 2.0 * STEP_NS)), STEP_NS),
                    line: mul(unrolled, add(c.line, 2.0 * STEP_NS)),
                    build: c.build,
                }
            }
        }
    }
}

/// Everything [`Profile::worst_case_nanos`] needs of a compiled pattern.
#[derive(Debug, Clone)]
pub(super) struct Profile {
    shape: Shape,
    fancy: bool,
    anchored: bool,
    backtrack_limit: f64,
}

impl Profile {
    /// The profile of `node`, compiled for `regex` or (with `fancy`) for fancy-regex with
    /// `backtrack_limit`.
    pub(super) fn new(node: &Node, fl: &Flags, fancy: bool, backtrack_limit: usize) -> Profile {
        let shape = Shape::of(node, fl, fancy);
        let anchored = fl.sticky || (!fl.multiline && starts_with_caret(node));
        Profile {
            shape,
            fancy,
            anchored,
            backtrack_limit: backtrack_limit as f64,
        }
    }

    /// Upper estimate, in nanoseconds, of one match on a subject of `n` bytes (as the engine
    /// sees it).
    /// `converted`: the subject is mapped to pseudo characters first.
    pub(super) fn worst_case_nanos(&self, n: usize, converted: bool) -> u64 {
        let n = n as f64;
        let fixed = CALL_NS + if converted { CONVERT_NS } else { CHECK_NS } * n;
        let ns = if self.fancy {
            let starts = if self.anchored { 1.0 } else { n + 1.0 };
            // Every start position after the first costs one backtrack.
            let starts = starts.min(self.backtrack_limit + 1.0);
            let c = self.shape.fancy(false, n);
            let explored = mul(starts, c.all);
            let backtracks = self.backtrack_limit.min(explored / STEP_NS);
            let bounded = add(mul(add(2.0 * backtracks, starts), c.line), c.one);
            add(explored.min(bounded), c.build)
        } else {
            // Anchored at the start, the DFA stops where no match can go on (and one byte on,
            // to see it).
            let bytes = if self.anchored {
                n.min(add(mul(self.shape.max_len, CHAR_BYTES), 1.0))
            } else {
                n
            };
            self.shape.scan(bytes)
        };
        let total = add(fixed, ns);
        if total >= u64::MAX as f64 {
            u64::MAX
        } else {
            total.ceil() as u64
        }
    }
}

/// Whether the emitted pattern starts with `^` (so fancy-regex compiles it anchored).
fn starts_with_caret(node: &Node) -> bool {
    match node {
        Node::Start => true,
        Node::Concat(v) => matches!(v.first(), Some(Node::Start)),
        _ => false,
    }
}

/// Exactly one character.
fn is_single(set: &Set) -> bool {
    let r = set.ranges();
    r.len() == 1 && r[0].start() == r[0].end()
}

/// One character, or the case variants of one character.
fn is_literal(set: &Set) -> bool {
    let mut chars = set.iter().flat_map(|r| r.start()..=r.end());
    let Some(first) = chars.next() else {
        return false;
    };
    let fold = |c: char| c.to_lowercase().collect::<String>();
    let first = fold(first);
    let mut count = 1;
    for c in chars {
        count += 1;
        if count > 4 || fold(c) != first {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::jsregex::JsRegex;

    fn estimate(p: &str, f: &str, subject: &str) -> u64 {
        JsRegex::new(p, f)
            .expect("compiles")
            .worst_case_nanos(subject)
    }

    #[test]
    fn plain_is_linear_in_the_subject() {
        let short = estimate("reset|verify", "", &"x".repeat(10_000));
        let long = estimate("reset|verify", "", &"x".repeat(100_000));
        assert!(long > 9 * short && long < 11 * short, "{short} {long}");
    }

    #[test]
    fn fancy_unanchored_is_quadratic_and_anchored_is_not() {
        let a = "a".repeat(10_000);
        let unanchored = estimate(r"(?<=a)(?=[\s\S]*b)", "", &a);
        let anchored = estimate(r"^(?<=a)(?=[\s\S]*b)", "", &a);
        assert!(unanchored > 1_000 * anchored, "{unanchored} {anchored}");
        let double = estimate(r"(?<=a)(?=[\s\S]*b)", "", &"a".repeat(20_000));
        assert!(double > 3 * unanchored, "{unanchored} {double}");
    }

    #[test]
    fn nested_quantifiers_are_bounded_by_the_backtrack_limit() {
        let e = estimate(r"(a*)*\1x", "", &"a".repeat(5_000));
        assert!(e > 10_000_000 && e < u64::MAX / 2, "{e}");
    }

    #[test]
    fn zero_width_parts_count_as_nfa_states() {
        // The fuzz finding's shape: no characters in the alternation, but each of its parts
        // is an NFA state in every lazy-DFA state the tail builds.
        let subject = "ab".repeat(500);
        let tail = estimate("[ab]*a[ab]{8}c", "", &subject);
        for part in [r"\b", "$", "^", "()", "(?:)"] {
            let wide = estimate(
                &format!("(?:{})[ab]*a[ab]{{8}}c", vec![part; 200].join("|")),
                "",
                &subject,
            );
            assert!(wide > 10 * tail, "{part}: {tail} {wide}");
        }
        let groups = estimate(&format!("{}(a)", "()".repeat(300)), "", &subject);
        assert!(groups > 10 * estimate("a", "", &subject), "{groups}");
    }

    #[test]
    fn anchored_reads_up_to_four_bytes_a_character() {
        // `^` then at most 41 characters: up to 164 bytes of a subject in a 4-byte script,
        // as much as an unanchored scan of 40 such characters.
        let anchored = estimate("^[^]{40}x", "u", &"\u{10400}".repeat(1_000));
        let scan = estimate("[^]{40}x", "u", &"\u{10400}".repeat(40));
        assert!(anchored >= scan, "{anchored} {scan}");
    }

    #[test]
    fn astral_subjects_count_their_code_units() {
        let plain = estimate("^.+$", "u", &"😀".repeat(1_000));
        let units = estimate("^.+$", "", &"😀".repeat(1_000));
        assert!(units > plain, "{plain} {units}");
    }
}
