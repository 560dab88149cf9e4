//! mailjar's parse of every message of the third-party corpus
//! (`shared/corpus/mime`) compared with Python's `email` package
//! (`email.policy.default`, run by `tests/data/email_reference.py`): the
//! subject, the text, the links and the attachments (file name, content
//! type, size).
//!
//! A difference passes only when it is accepted, with its reason: by a rule
//! that checks what it says (LF line endings, the text derived from the
//! HTML, text parts joined, a trimmed subject, a nested message's size), or
//! by name in [`ACCEPTED`]. Anything else fails the test, and so does an
//! entry of [`ACCEPTED`] that no longer matches a difference, so the list
//! stays exact. Without the corpus (or without python3) the test is skipped
//! with a notice, unless `CI=true`, where it fails.
//!
//! The reference is Python's own `email` package (`core/tests/data/email_reference.py`),
//! not a re-implementation.

use std::collections::BTreeMap;
use std::fmt;
use std::process::Command;

use mailjar_core::message::{AttachmentInfo, ParsedMessage, crlf_to_lf, parse};
use serde::Deserialize;

#[path = "common/corpus.rs"]
mod corpus;
use corpus::{CORPUS, corpus_files};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/email_reference.py");

/// What Python read in one message (see the script's docstring).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    subject: String,
    text: Option<String>,
    text_cte: Option<String>,
    html: Option<String>,
    links: Vec<String>,
    joined_links: Vec<String>,
    attachments: Vec<RefAttachment>,
    unknown_charsets: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct RefAttachment {
    filename: String,
    content_type: String,
    size: usize,
    inline: bool,
    text: Option<String>,
    cte: Option<String>,
}

/// The fields compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Subject,
    Text,
    Links,
    Attachments,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a difference named in [`ACCEPTED`] is accepted.
mod why {
    pub const UTF8: &str = "8-bit text without a charset or under US-ASCII: mailjar reads it as UTF-8, as Node's mailparser does; Python reads ASCII and puts U+FFFD for each such byte";
    pub const WHATWG: &str = "charset labels as the WHATWG Encoding Standard maps them (ISO-8859-1 is windows-1252, GB2312 is GBK); Python's codecs are the narrower charsets";
    pub const NO_CODEC: &str = "a charset of the WHATWG Encoding Standard Python has no codec for (iso-8859-8-i, x-mac-cyrillic) or whose codec refuses the text (iso-2022-jp with row 7 Cyrillic)";
    pub const HEADER_8BIT: &str = "raw 8-bit bytes in a header: mailjar reads UTF-8, else windows-1252 (README); Python puts U+FFFD";
    pub const FOLD: &str = "a folded header's line break and the whitespace around it become one space (mailjar's unfolding); Python keeps the whitespace";
    pub const OBS_FIELD: &str = "a field with whitespace before its colon (RFC 5322 4.5.3 obsolete syntax, e.g. `Subject :`): mailjar reads it; Python ends the header block there and takes the rest as body";
    pub const BOM: &str = "a UTF-8 byte order mark before the first header: mailjar skips it; Python takes the whole message as body";
    pub const PYTHON_EMPTY_PART: &str = "an open delimiter right before the close delimiter: no part (RFC 2046); Python reads the close delimiter as a second open one and the epilogue as a part";
    pub const PARAM: &str = "a parameter value Python's strict parser cuts or drops (unquoted with spaces, RFC 2047 words in quotes, a `name=` with `=?` unquoted): mailjar reads it whole, as mail-parser parses it";
    pub const CT_SPACE: &str = "a Content-Type whose parameters follow a space or tab instead of `;`: mailjar reads type and parameters; Python takes the whole value for the type";
    pub const BOUNDARY_EQ: &str = "an unquoted boundary containing `=` (not a token, RFC 2045): mailjar takes it whole as the delimiters in the body do; Python cuts it at the `=`, finds no delimiter and shows no body";
    pub const B64_MESSAGE: &str = "a message/rfc822 part sent base64 (RFC 2046 5.2.1 allows only 7bit, 8bit, binary): mailjar measures the decoded message; Python parses the base64 text as a message";
    pub const NOT_BASE64: &str = "a base64 body that cannot be base64 (one letter over a group of four): both keep it as written; Python also joins its lines";
    pub const CTE_CR: &str = "a Content-Transfer-Encoding value with trailing whitespace and a CR (LF-only file): mailjar trims it and decodes the part; Python does not decode it";
}

/// Differences accepted by name: (file, field, reason).
const ACCEPTED: &[(&str, Field, &str)] = &[
    (
        "apache-james-mime4j/testmsgs/bad-newlines-multiple-parts-base64.msg",
        Field::Attachments,
        why::B64_MESSAGE,
    ),
    (
        "apache-james-mime4j/testmsgs/base64encoded-rfc822message-nested.msg",
        Field::Attachments,
        why::B64_MESSAGE,
    ),
    (
        "apache-james-mime4j/testmsgs/multipartemptypart.msg",
        Field::Text,
        why::PYTHON_EMPTY_PART,
    ),
    (
        "apache-james-mime4j/testmsgs/obsolete.msg",
        Field::Subject,
        why::OBS_FIELD,
    ),
    (
        "apache-james-mime4j/testmsgs/obsolete.msg",
        Field::Text,
        why::OBS_FIELD,
    ),
    (
        "apache-james-mime4j/testmsgs/russian-headers.msg",
        Field::Attachments,
        why::PARAM,
    ),
    (
        "apache-james-project/mailet-standard/space.eml",
        Field::Attachments,
        why::PARAM,
    ),
    (
        "apache-james-project/server-container-core/invalid.eml",
        Field::Attachments,
        why::NOT_BASE64,
    ),
    (
        "jhillyerd-enmime/low-quality/incorrect-charset.raw",
        Field::Text,
        why::UTF8,
    ),
    (
        "jhillyerd-enmime/mail/mime-bad-content-transfer-encoding.raw",
        Field::Text,
        why::NOT_BASE64,
    ),
    (
        "jhillyerd-enmime/mail/mime-bad-content-type.raw",
        Field::Attachments,
        why::CT_SPACE,
    ),
    (
        "jhillyerd-enmime/mail/non-mime-missing-charset.raw",
        Field::Text,
        why::UTF8,
    ),
    (
        "jhillyerd-enmime/parts/chardet-success-big-5.raw",
        Field::Text,
        why::UTF8,
    ),
    (
        "jhillyerd-enmime/parts/extra-base64-character.raw",
        Field::Text,
        why::NOT_BASE64,
    ),
    (
        "jstedfast-mimekit/messages/feedback-report.txt",
        Field::Subject,
        why::BOM,
    ),
    (
        "jstedfast-mimekit/messages/feedback-report.txt",
        Field::Text,
        why::BOM,
    ),
    (
        "jstedfast-mimekit/messages/feedback-report.txt",
        Field::Links,
        why::BOM,
    ),
    (
        "jstedfast-mimekit/messages/feedback-report.txt",
        Field::Attachments,
        why::BOM,
    ),
    (
        "mailgun-flanker/mailformed-headers.eml",
        Field::Subject,
        why::HEADER_8BIT,
    ),
    (
        "mailgun-flanker/spam/broken-ctype.eml",
        Field::Attachments,
        why::UTF8,
    ),
    (
        "mailgun-flanker/spam/broken-headers.eml",
        Field::Subject,
        why::HEADER_8BIT,
    ),
    (
        "mikel-mail/attachment_emails/attachment_pdf_non_ascii.eml",
        Field::Text,
        why::WHATWG,
    ),
    (
        "mikel-mail/attachment_emails/attachment_with_base64_encoded_name.eml",
        Field::Attachments,
        why::PARAM,
    ),
    (
        "mikel-mail/attachment_emails/attachment_with_unquoted_name.eml",
        Field::Attachments,
        why::PARAM,
    ),
    (
        "mikel-mail/error_emails/content_transfer_encoding_plain.eml",
        Field::Text,
        why::UTF8,
    ),
    (
        "mikel-mail/mime_emails/raw_email_with_binary_encoded.eml",
        Field::Attachments,
        why::BOUNDARY_EQ,
    ),
    (
        "mikel-mail/mime_emails/raw_email_with_illegal_boundary.eml",
        Field::Text,
        why::BOUNDARY_EQ,
    ),
    (
        "mikel-mail/mime_emails/raw_email_with_illegal_boundary.eml",
        Field::Attachments,
        why::BOUNDARY_EQ,
    ),
    (
        "mikel-mail/plain_emails/raw_email_bad_time.eml",
        Field::Text,
        why::BOUNDARY_EQ,
    ),
    (
        "mikel-mail/plain_emails/raw_email_bad_time.eml",
        Field::Links,
        why::BOUNDARY_EQ,
    ),
    (
        "mikel-mail/plain_emails/raw_email_bad_time.eml",
        Field::Attachments,
        why::BOUNDARY_EQ,
    ),
    (
        "mikel-mail/rfc2822/example13.eml",
        Field::Text,
        why::OBS_FIELD,
    ),
    (
        "mikel-mail/rfc2822/example14.eml",
        Field::Subject,
        why::FOLD,
    ),
    ("php-mime-mail-parser/failure.eml", Field::Text, why::WHATWG),
    (
        "php-mime-mail-parser/issue116",
        Field::Subject,
        why::NO_CODEC,
    ),
    (
        "php-mime-mail-parser/issue149",
        Field::Subject,
        why::NO_CODEC,
    ),
    ("php-mime-mail-parser/issue230", Field::Text, why::NO_CODEC),
    (
        "php-mime-mail-parser/m0018",
        Field::Attachments,
        why::NOT_BASE64,
    ),
    ("php-mime-mail-parser/m0028", Field::Attachments, why::UTF8),
    (
        "stalwartlabs-mail-parser/malformed/017.eml",
        Field::Attachments,
        why::CT_SPACE,
    ),
    (
        "stalwartlabs-mail-parser/malformed/019.eml",
        Field::Subject,
        why::OBS_FIELD,
    ),
    (
        "stalwartlabs-mail-parser/malformed/019.eml",
        Field::Text,
        why::OBS_FIELD,
    ),
    (
        "stalwartlabs-mail-parser/malformed/019.eml",
        Field::Attachments,
        why::OBS_FIELD,
    ),
    (
        "stalwartlabs-mail-parser/rfc/008.eml",
        Field::Attachments,
        why::B64_MESSAGE,
    ),
    (
        "stalwartlabs-mail-parser/thirdparty/003.eml",
        Field::Text,
        why::CTE_CR,
    ),
    (
        "stalwartlabs-mail-parser/thirdparty/003.eml",
        Field::Attachments,
        why::CTE_CR,
    ),
    (
        "stalwartlabs-mail-parser/thirdparty/010.eml",
        Field::Text,
        why::UTF8,
    ),
];

/// Rules that accept a difference when what they say holds; each returns
/// its reason when it applies.
mod rules {
    pub const LF: &str = "text has LF line endings (README, CapturedEmail: `text` and `html` are LF; raw stays exact)";
    pub const DERIVED: &str = "no text/plain body: mailjar's text is the HTML body as plain text (README, CapturedEmail), Python has none";
    pub const JOINED: &str = "inline text/plain parts after the first are joined to the text with a line break, as Node's mailparser does; Python lists them as attachments";
    pub const TRIMMED: &str =
        "the subject is trimmed (README); Python keeps the whitespace around it";
    pub const QP_BLANKS: &str = "quoted-printable: whitespace at the end of a line is deleted (RFC 2045 6.7 rule 3, as Node's mailparser does); Python keeps it";
    pub const NESTED_SIZE: &str = "the size of a message/* part: mailjar counts its bytes as sent, Python re-serialises what it parsed (within 10% or 64 bytes)";
    pub const MULTIPART_EOL: &str = "a multipart without parts is a single part; the line end before the next delimiter is the delimiter's (RFC 2046 5.1.1), Python keeps it in such a part";
}

/// A field's outcome: equal or accepted by rules (their reasons), or a
/// difference to show.
type Outcome = Result<Vec<&'static str>, String>;

fn show(theirs: &dyn fmt::Debug, ours: &dyn fmt::Debug) -> String {
    format!("python: {theirs:.600?}\n    mailjar: {ours:.600?}")
}

fn subject(r: &Reference, p: &ParsedMessage) -> Outcome {
    if r.subject == p.subject {
        Ok(vec![])
    } else if r.subject.trim() == p.subject {
        Ok(vec![rules::TRIMMED])
    } else {
        Err(show(&r.subject, &p.subject))
    }
}

/// Python's inline text/plain attachments without a file name: the parts
/// mailjar joins to the text.
fn joinable(r: &Reference) -> impl Iterator<Item = &RefAttachment> {
    r.attachments
        .iter()
        .filter(|a| a.inline && a.content_type == "text/plain" && a.filename.is_empty())
}

/// The text Python gives, LF line endings; with the joinable parts when
/// `joined`.
fn ref_text(r: &Reference, joined: bool) -> String {
    let mut text = crlf_to_lf(r.text.as_deref().unwrap_or("")).into_owned();
    if joined {
        for a in joinable(r) {
            let more = crlf_to_lf(a.text.as_deref().unwrap_or(""));
            if more.is_empty() {
                continue;
            }
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&more);
        }
    }
    text
}

/// Whether Python's text, or a part joined to it, was quoted-printable.
fn qp_text(r: &Reference) -> bool {
    let qp = |cte: &Option<String>| cte.as_deref() == Some("quoted-printable");
    qp(&r.text_cte) || joinable(r).any(|a| qp(&a.cte))
}

/// `text` without the spaces and tabs that end its lines.
fn no_end_blanks(text: &str) -> String {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.trim_end_matches([' ', '\t']))
        .collect();
    lines.join("\n")
}

/// The text, and whether it matched with the joinable parts joined.
fn text(r: &Reference, p: &ParsedMessage) -> (Outcome, bool) {
    let crlf = r.text.as_deref().is_some_and(|t| t.contains("\r\n"))
        || joinable(r).any(|a| a.text.as_deref().is_some_and(|t| t.contains("\r\n")));
    let lf = if crlf { vec![rules::LF] } else { vec![] };
    // Joined first: when the joinable parts are empty, both match, and the
    // attachments then tell the difference.
    let tries: &[bool] = if joinable(r).next().is_some() {
        &[true, false]
    } else {
        &[false]
    };
    for &joined in tries {
        let theirs = ref_text(r, joined);
        let mut reasons = lf.clone();
        if joined {
            reasons.push(rules::JOINED);
        }
        if theirs == p.text {
            return (Ok(reasons), joined);
        }
        if qp_text(r) && no_end_blanks(&theirs) == no_end_blanks(&p.text) {
            reasons.push(rules::QP_BLANKS);
            return (Ok(reasons), joined);
        }
    }
    let html = crlf_to_lf(r.html.as_deref().unwrap_or(""));
    if r.text.as_deref().unwrap_or("").is_empty() && r.html.is_some() && html == p.html {
        return (Ok(vec![rules::DERIVED]), false);
    }
    (Err(show(&ref_text(r, false), &p.text)), false)
}

type Info = (String, String, usize);

fn info(a: &AttachmentInfo) -> Info {
    (a.filename.clone(), a.content_type.clone(), a.size)
}

fn ref_info(a: &RefAttachment) -> Info {
    (a.filename.clone(), a.content_type.clone(), a.size)
}

/// Whether two attachments are the same but for a size Python measures
/// differently, and the reason.
fn close_size(ours: &Info, theirs: &Info) -> Option<&'static str> {
    if ours.0 != theirs.0 || ours.1 != theirs.1 {
        return None;
    }
    let diff = ours.2.abs_diff(theirs.2);
    if ours.1.starts_with("message/") && diff <= 64.max(ours.2 / 10) {
        Some(rules::NESTED_SIZE)
    } else if ours.1.starts_with("multipart/") && diff <= 2 {
        Some(rules::MULTIPART_EOL)
    } else {
        None
    }
}

fn attachments(r: &Reference, p: &ParsedMessage, joined: bool) -> Outcome {
    let ours: Vec<Info> = p.attachments.iter().map(info).collect();
    let all: Vec<Info> = r.attachments.iter().map(ref_info).collect();
    let mut tries = vec![(all.clone(), vec![])];
    if joined {
        let kept = r
            .attachments
            .iter()
            .filter(|a| !joinable(r).any(|j| std::ptr::eq(j, *a)))
            .map(ref_info)
            .collect();
        tries.push((kept, vec![rules::JOINED]));
    }
    for (theirs, mut reasons) in tries {
        if theirs.len() != ours.len() {
            continue;
        }
        let mut ok = true;
        for (o, t) in ours.iter().zip(&theirs) {
            match (o == t, close_size(o, t)) {
                (true, _) => {}
                (false, Some(reason)) => reasons.push(reason),
                (false, None) => ok = false,
            }
        }
        if ok {
            reasons.dedup();
            return Ok(reasons);
        }
    }
    Err(show(&all, &ours))
}

/// The outcome of each field of one message.
fn compare(r: &Reference, p: &ParsedMessage) -> Vec<(Field, Outcome)> {
    let (text, joined) = text(r, p);
    let links = if r.links == p.links {
        Ok(vec![])
    } else if joined && r.joined_links == p.links {
        Ok(vec![rules::JOINED])
    } else {
        Err(show(&r.links, &p.links))
    };
    vec![
        (Field::Subject, subject(r, p)),
        (Field::Text, text),
        (Field::Links, links),
        (Field::Attachments, attachments(r, p, joined)),
    ]
}

/// Python's reading of every corpus message, by path relative to the corpus.
fn python_reference() -> Option<BTreeMap<String, Reference>> {
    let output = match Command::new("python3")
        .arg(SCRIPT)
        .arg(CORPUS.as_str())
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            skip(&format!("python3 did not run: {e}"));
            return None;
        }
    };
    assert!(
        output.status.success(),
        "{SCRIPT} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("the script's JSON"))
}

/// Skips with a notice, or fails under CI, where the corpus and python3
/// are part of the job.
fn skip(why: &str) {
    corpus::skip("the comparison with Python's email", why);
}

#[test]
fn corpus_parses_as_python_email_does() {
    let Some(files) = corpus_files("the comparison with Python's email") else {
        return;
    };
    let Some(reference) = python_reference() else {
        return;
    };
    let mut unexplained = Vec::new();
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut used = vec![false; ACCEPTED.len()];
    let mut compared = 0;
    for path in &files {
        let rel = path
            .strip_prefix(CORPUS.as_str())
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "README.md" {
            continue;
        }
        let r = reference
            .get(&rel)
            .unwrap_or_else(|| panic!("no Python reading of {rel}"));
        let raw = std::fs::read(path).expect("a corpus file");
        let p = parse(&raw);
        compared += 1;
        for (field, outcome) in compare(r, &p) {
            match outcome {
                Ok(accepted) => {
                    for reason in accepted {
                        *reasons.entry(reason).or_default() += 1;
                    }
                }
                Err(shown) => {
                    let accepted = ACCEPTED
                        .iter()
                        .position(|(file, f, _)| *file == rel && *f == field);
                    match accepted {
                        Some(i) => {
                            used[i] = true;
                            *reasons.entry(ACCEPTED[i].2).or_default() += 1;
                        }
                        None => unexplained.push(format!(
                            "{rel} {field} (unknown charsets {:?}):\n    {shown}",
                            r.unknown_charsets
                        )),
                    }
                }
            }
        }
    }
    println!("{compared} messages compared with Python's email; accepted differences:");
    for (reason, count) in &reasons {
        println!("{count:4}  {reason}");
    }
    let stale: Vec<_> = ACCEPTED
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((file, field, _), _)| format!("{file} {field}"))
        .collect();
    assert!(
        unexplained.is_empty(),
        "{} differences from Python's email that are not accepted:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
    assert!(
        stale.is_empty(),
        "accepted differences that no longer occur (remove them): {stale:?}"
    );
}
