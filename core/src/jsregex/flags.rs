//! The flags string of a JS regex (`i`, `m`, `s`, `u`, `v`, `y`; `d` and `g` change nothing here).

use super::error::JsRegexError;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Flags {
    pub(super) ignore_case: bool,
    pub(super) multiline: bool,
    pub(super) dot_all: bool,
    /// `u` or `v`.
    pub(super) unicode: bool,
    pub(super) sets: bool,
    pub(super) sticky: bool,
}

impl Flags {
    /// Parses a JS flags string (`"gimsuy"`, ...); `d` and `g` are accepted and ignored.
    pub(super) fn parse(flags: &str) -> Result<Flags, JsRegexError> {
        let mut f = Flags::default();
        let mut seen = String::new();
        for c in flags.chars() {
            if seen.contains(c) {
                return Err(JsRegexError::Flags(format!("flag '{c}' is repeated")));
            }
            seen.push(c);
            match c {
                'd' | 'g' => {}
                'i' => f.ignore_case = true,
                'm' => f.multiline = true,
                's' => f.dot_all = true,
                'u' => f.unicode = true,
                'v' => {
                    f.unicode = true;
                    f.sets = true;
                }
                'y' => f.sticky = true,
                _ => {
                    return Err(JsRegexError::Flags(format!(
                        "unknown flag '{}' (allowed: d g i m s u v y)",
                        c.escape_debug()
                    )));
                }
            }
        }
        if seen.contains('u') && seen.contains('v') {
            return Err(JsRegexError::Flags(
                "flags 'u' and 'v' cannot be combined".into(),
            ));
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert!(Flags::parse("dgimsuy").is_ok());
        assert!(Flags::parse("v").is_ok_and(|f| f.unicode && f.sets));
        assert_eq!(
            Flags::parse("x").map(|_| ()).unwrap_err().to_string(),
            "invalid subjectFlags: unknown flag 'x' (allowed: d g i m s u v y)"
        );
        assert!(matches!(Flags::parse("gg"), Err(JsRegexError::Flags(_))));
        assert!(matches!(Flags::parse("uv"), Err(JsRegexError::Flags(_))));
    }
}
