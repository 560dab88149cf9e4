//! What a message uses, as the needles of the caniemail table.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use super::caniemail_data::FEATURES;

/// Every needle of the table: only these are noted, so what a scan keeps is
/// bounded by the table whatever the message holds.
static NEEDLES: LazyLock<BTreeSet<&'static str>> = LazyLock::new(|| {
    FEATURES
        .iter()
        .flat_map(|f| f.needles.iter().copied())
        .collect()
});

/// What a message uses, as needles such as `el:video`, `prop:position`,
/// `decl:display:flex`, `fn:var`, `unit:rem`, `pseudo:hover`, `img:webp`.
#[derive(Debug, Default)]
pub struct Facts {
    found: BTreeSet<&'static str>,
    scratch: String,
}

impl Facts {
    /// Notes a needle if the table knows it.
    pub(super) fn note(&mut self, needle: &str) {
        if let Some(known) = NEEDLES.get(needle) {
            self.found.insert(known);
        }
    }

    /// Notes `prefix` + `name`.
    pub(super) fn note2(&mut self, prefix: &str, name: &str) {
        self.note3(prefix, name, "")
    }

    /// Notes `prefix` + `a` (+ `:` + `b` when `b` is not empty).
    pub(super) fn note3(&mut self, prefix: &str, a: &str, b: &str) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.push_str(prefix);
        scratch.push_str(a);
        if !b.is_empty() {
            scratch.push(':');
            scratch.push_str(b);
        }
        self.note(&scratch);
        self.scratch = scratch;
    }

    /// Whether a needle was noted.
    pub fn has(&self, needle: &str) -> bool {
        self.found.contains(needle)
    }
}
