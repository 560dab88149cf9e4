//! Compiled patterns shared by every request that asks for the same one.
//!
//! A thousand tests waiting for `^Your code` hold one compiled program, not a
//! thousand. The cache belongs to the [`crate::api::Api`] and changes only
//! under its `&mut`: a request's job takes the compiled pattern from it when
//! one is in use ([`PatternCache::get`]), compiles it outside the lock
//! otherwise, and a wait or subscription that keeps its compiled pattern
//! hands it back ([`PatternCache::keep`]). The cache holds weak references:
//! a pattern lives as long as a request uses it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crate::jsregex::JsRegex;

/// Compiled patterns by (source, flags).
#[derive(Debug, Default)]
pub struct PatternCache {
    patterns: HashMap<(String, String), Weak<JsRegex>>,
}

/// Dead entries are swept when the map grows past this many.
const SWEEP_AT: usize = 256;

impl PatternCache {
    /// The compiled pattern for `source` and `flags` while a request holds it.
    pub fn get(&self, source: &str, flags: &str) -> Option<Arc<JsRegex>> {
        // Keyed by owned strings: a lookup builds the key once, O(pattern length).
        let key = (source.to_owned(), flags.to_owned());
        self.patterns.get(&key).and_then(Weak::upgrade)
    }

    /// Remembers a pattern a request compiled, so later requests share it;
    /// returns the one to use (an earlier live one wins).
    pub fn keep(&mut self, source: &str, flags: &str, compiled: Arc<JsRegex>) -> Arc<JsRegex> {
        let key = (source.to_owned(), flags.to_owned());
        if let Some(live) = self.patterns.get(&key).and_then(Weak::upgrade) {
            return live;
        }
        if self.patterns.len() >= SWEEP_AT {
            self.patterns.retain(|_, weak| weak.strong_count() > 0);
        }
        self.patterns.insert(key, Arc::downgrade(&compiled));
        compiled
    }

    /// How many distinct patterns are compiled and in use.
    pub fn live(&self) -> usize {
        self.patterns
            .values()
            .filter(|weak| weak.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_pattern_is_kept_once_while_in_use() {
        let mut cache = PatternCache::default();
        assert!(cache.get("^x+$", "i").is_none());
        let a = cache.keep("^x+$", "i", Arc::new(JsRegex::new("^x+$", "i").unwrap()));
        let b = cache.get("^x+$", "i").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        // A second compile of a live pattern gives way to the first.
        let again = cache.keep("^x+$", "i", Arc::new(JsRegex::new("^x+$", "i").unwrap()));
        assert!(Arc::ptr_eq(&a, &again));
        assert!(cache.get("^x+$", "").is_none());
        let other = cache.keep("^x+$", "", Arc::new(JsRegex::new("^x+$", "").unwrap()));
        assert_eq!(cache.live(), 2);
        drop((a, b, again, other));
        assert_eq!(cache.live(), 0);
        assert!(cache.get("^x+$", "i").is_none());
    }
}
