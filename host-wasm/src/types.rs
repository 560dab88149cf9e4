//! Writes and checks `src/types.d.ts`: the TypeScript declarations of the
//! types JavaScript passes in, generated from their Rust types with ts-rs
//! (a test-time generator: nothing of it is in the wasm). The bindings
//! include that file in `pkg-web/mailjar_wasm.d.ts`, and the npm package's
//! own declarations (`js/mailjar.d.mts`) import their option types from it.

use ts_rs::{Config, TS};

use crate::config::{ApiConfig, SessionConfig};
use crate::inputs::{ApiRequest, AuthFacts, DeliverMessage, Envelope, SmtpFacts, TlsFacts};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/types.d.ts");

/// One type as an exported interface in the style of `src/outputs.d.ts`.
fn declaration<T: TS>(cfg: &Config) -> String {
    let decl = T::decl(cfg);
    let (open, close) = (decl.find('{'), decl.rfind('}'));
    let (Some(open), Some(close)) = (open, close) else {
        panic!("{} is not an object type: {decl}", T::name(cfg));
    };
    let mut out = T::docs().map(|d| doc_lines(&d, "")).unwrap_or_default();
    out.push_str(&format!("export interface {} {{\n", T::name(cfg)));
    for member in members(&decl[open + 1..close]) {
        let (doc, field) = match member.rfind("*/") {
            Some(end) => (&member[..end + 2], member[end + 2..].trim()),
            None => ("", member.as_str()),
        };
        out.push_str(&doc_lines(doc, "  "));
        out.push_str(&format!("  {field};\n"));
    }
    out.push_str("}\n");
    out
}

/// The members of an object type's body: split at the commas outside
/// brackets, strings and comments.
fn members(body: &str) -> Vec<String> {
    let (mut out, mut current) = (Vec::new(), String::new());
    let (mut depth, mut quoted, mut comment) = (0i32, false, false);
    let chars: Vec<char> = body.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '/' if !quoted && chars.get(i + 1) == Some(&'*') => comment = true,
            '/' if comment && i > 0 && chars[i - 1] == '*' => comment = false,
            '"' if !comment => quoted = !quoted,
            '{' | '[' | '(' | '<' if !quoted && !comment => depth += 1,
            '}' | ']' | ')' | '>' if !quoted && !comment => depth -= 1,
            ',' if depth == 0 && !quoted && !comment => {
                out.push(std::mem::take(&mut current).trim().to_owned());
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current.trim().to_owned());
    out.retain(|m| !m.is_empty());
    out
}

/// A `/** ... */` comment, one line when its text is one line, indented by `indent`.
fn doc_lines(doc: &str, indent: &str) -> String {
    let text: Vec<&str> = doc
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("/**")
                .trim_end_matches("*/")
                .trim()
        })
        .map(|l| l.strip_prefix('*').unwrap_or(l).trim())
        .filter(|l| !l.is_empty())
        .collect();
    match text.as_slice() {
        [] => String::new(),
        [one] => format!("{indent}/** {one} */\n"),
        lines => {
            let body: String = lines.iter().map(|l| format!("{indent} * {l}\n")).collect();
            format!("{indent}/**\n{body}{indent} */\n")
        }
    }
}

/// The whole file.
fn render() -> String {
    let cfg = Config::default();
    let declarations = [
        declaration::<SessionConfig>(&cfg),
        declaration::<ApiConfig>(&cfg),
        declaration::<ApiRequest>(&cfg),
        declaration::<Envelope>(&cfg),
        declaration::<DeliverMessage>(&cfg),
        declaration::<TlsFacts>(&cfg),
        declaration::<AuthFacts>(&cfg),
        declaration::<SmtpFacts>(&cfg),
    ];
    format!(
        "// Generated from the Rust types of host-wasm/src (config.rs, inputs.rs) by\n\
         // `cargo test -p mailjar-wasm types`, which fails while this file differs\n\
         // from what they give (and rewrites it). Do not edit.\n\n{}",
        declarations.join("\n")
    )
}

#[test]
fn typescript_declarations_match_the_rust_types() {
    let wanted = render();
    let found = std::fs::read_to_string(FILE).unwrap_or_default();
    if found != wanted {
        std::fs::write(FILE, &wanted).expect("write src/types.d.ts");
        panic!("{FILE} did not match the Rust types: rewritten, review and commit it");
    }
}

#[test]
fn members_split_at_top_level_commas_only() {
    let body = " /**\n * a, b\n */\nx?: Array<string>, y: { a: 1, b: \"c,d\" }, ";
    assert_eq!(
        members(body),
        [
            "/**\n * a, b\n */\nx?: Array<string>",
            "y: { a: 1, b: \"c,d\" }"
        ]
    );
}
