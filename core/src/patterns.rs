//! Compiled patterns shared by every request that asks for the same one.
//!
//! A thousand tests waiting for `^Your code` hold one compiled program, not a
//! thousand. The cache holds weak references: a pattern lives as long as a
//! request uses it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::jsregex::{JsRegex, JsRegexError};

/// Compiled patterns by (source, flags).
#[derive(Debug, Default)]
pub struct PatternCache {
    patterns: Mutex<HashMap<(String, String), Weak<JsRegex>>>,
}

/// Dead entries are swept when the map grows past this many.
const SWEEP_AT: usize = 256;

impl PatternCache {
    /// The compiled pattern, shared; compiles it (outside the cache's lock) when no request holds it.
    pub fn get_or_compile(&self, source: &str, flags: &str) -> Result<Arc<JsRegex>, JsRegexError> {
        let key = (source.to_owned(), flags.to_owned());
        if let Some(live) = self.lock().get(&key).and_then(Weak::upgrade) {
            return Ok(live);
        }
        let compiled = Arc::new(JsRegex::new(source, flags)?);
        let mut patterns = self.lock();
        if let Some(live) = patterns.get(&key).and_then(Weak::upgrade) {
            // Another request compiled it meanwhile: share theirs.
            return Ok(live);
        }
        if patterns.len() >= SWEEP_AT {
            patterns.retain(|_, weak| weak.strong_count() > 0);
        }
        patterns.insert(key, Arc::downgrade(&compiled));
        Ok(compiled)
    }

    /// How many distinct patterns are compiled and in use.
    pub fn live(&self) -> usize {
        self.lock()
            .values()
            .filter(|weak| weak.strong_count() > 0)
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Weak<JsRegex>>> {
        // The map is consistent after any panic: every change is one insert or retain.
        self.patterns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_pattern_is_compiled_once_while_in_use() {
        let cache = PatternCache::default();
        let a = cache.get_or_compile("^x+$", "i").unwrap();
        let b = cache.get_or_compile("^x+$", "i").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let other_flags = cache.get_or_compile("^x+$", "").unwrap();
        assert!(!Arc::ptr_eq(&a, &other_flags));
        assert_eq!(cache.live(), 2);
        drop((a, b, other_flags));
        assert_eq!(cache.live(), 0);
        assert!(cache.get_or_compile("(", "").is_err());
    }
}
