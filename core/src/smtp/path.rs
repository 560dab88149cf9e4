//! Reverse and forward paths: their syntax and their length.

use super::Reply;

/// The longest reverse or forward path, brackets included (RFC 5321 4.5.3.1.3).
pub const MAX_PATH_OCTETS: usize = 256;

/// `s` without `prefix` (matched ignoring ASCII case) and the spaces after it.
pub(super) fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s[prefix.len()..].trim_start())
}

/// Splits `<path> params` (or a bare `path params`) into the path without
/// brackets or source route, and the rest.
///
/// A path longer than [`MAX_PATH_OCTETS`] with its brackets (counted as if
/// there for a bare path), source route included, is refused.
pub(super) fn parse_path(s: &str) -> Result<(String, &str), &'static str> {
    const TOO_LONG: &str = "longer than 256 octets";
    let Some(inner) = s.strip_prefix('<') else {
        let end = s.find(char::is_whitespace).unwrap_or(s.len());
        if s[..end].contains(['<', '>']) {
            return Err("unbalanced angle brackets");
        }
        if end + 2 > MAX_PATH_OCTETS {
            return Err(TOO_LONG);
        }
        return Ok((s[..end].to_owned(), &s[end..]));
    };
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in inner.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' && in_quotes {
            escaped = true;
        } else if c == '"' {
            in_quotes = !in_quotes;
        } else if c == '>' && !in_quotes {
            if i + 2 > MAX_PATH_OCTETS {
                return Err(TOO_LONG);
            }
            let mut path = &inner[..i];
            // A source route (@a,@b:user@host) is ignored, as RFC 5321 allows.
            if path.starts_with('@') {
                path = path.split_once(':').map_or("", |(_, p)| p);
            }
            return Ok((path.to_owned(), &inner[i + 1..]));
        }
    }
    Err("missing closing '>'")
}

/// Checks `local@domain` loosely, enough to refuse garbage; the reply when it is refused.
///
/// `what` is the enhanced code and the start of the text of a syntax refusal.
pub(super) fn refuse_mailbox(path: &str, smtputf8: bool, what: &str) -> Option<Reply> {
    if !smtputf8 && !path.is_ascii() {
        return Some(Reply::new(
            553,
            "5.6.7 Non-ASCII address without SMTPUTF8 in MAIL FROM",
        ));
    }
    let bad = |why: &str| Some(Reply::new(501, format!("{what}: {why}")));
    let Some((local, domain)) = path.rsplit_once('@') else {
        return bad("expected local-part@domain");
    };
    if local.is_empty() {
        return bad("empty local part");
    }
    if domain.is_empty() {
        return bad("empty domain");
    }
    if domain.contains(|c: char| {
        c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | '"' | '\\' | ',' | ';')
    }) {
        return bad("invalid character in domain");
    }
    let quoted = local.len() >= 2 && local.starts_with('"') && local.ends_with('"');
    if !quoted
        && local.contains(|c: char| {
            c.is_whitespace()
                || c.is_control()
                || matches!(c, '<' | '>' | '"' | '\\' | ',' | ';' | ':')
        })
    {
        return bad("invalid character in local part");
    }
    if path.contains(char::is_control) {
        return bad("control character in address");
    }
    None
}
