//! Without the `u`/`v` flag JS matches UTF-16 code units: every surrogate code unit stands as a
//! private-use "pseudo" character (plane 15), in the pattern and in the subject alike.

use std::borrow::Cow;

/// First pseudo character: surrogate code unit `0xD800 + k` becomes `PSEUDO_BASE + k`.
pub(super) const PSEUDO_BASE: u32 = 0xF0000;

/// Maps astral characters to two pseudo characters (one per UTF-16 surrogate).
pub(super) fn to_code_units(s: &str) -> Cow<'_, str> {
    if s.chars().all(|c| (c as u32) < 0x10000) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut buf = [0u16; 2];
    for c in s.chars() {
        for &u in c.encode_utf16(&mut buf).iter() {
            out.push(unit_char(u32::from(u)));
        }
    }
    Cow::Owned(out)
}

/// The character standing for a UTF-16 code unit (pseudo character for surrogates).
pub(super) fn unit_char(u: u32) -> char {
    let v = if (0xD800..=0xDFFF).contains(&u) {
        PSEUDO_BASE + (u - 0xD800)
    } else {
        u
    };
    char::from_u32(v).unwrap_or('\u{FFFD}')
}

#[cfg(test)]
mod tests {
    use super::super::test_util::m;

    #[test]
    fn utf16_code_units() {
        assert!(!m("^.$", "", "😀"));
        assert!(m("^..$", "", "😀"));
        assert!(m("^.$", "u", "😀"));
        assert!(m(r"^\uD83D\uDE00$", "", "😀"));
        assert!(m(r"^\uD83D\uDE00$", "u", "😀"));
        assert!(m(r"^\uD83D", "", "😀"));
        assert!(!m(r"^\uD83D", "u", "😀"));
        assert!(m("^😀+$", "", "😀"));
    }
}
