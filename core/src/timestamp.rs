//! Times as the API shows them: RFC 3339 in UTC, with milliseconds.

use std::time::{Duration, UNIX_EPOCH};

/// The last millisecond of the year 9999: later times are shown as it.
const MAX_MS: u64 = 253_402_300_799_999;

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds; years
/// past 9999 are shown as the last millisecond of 9999. Always 24 characters.
pub fn format_rfc3339_ms(ms: u64) -> String {
    rfc3339_ms(ms).to_string()
}

/// [`format_rfc3339_ms`] as a value to format, without a string of its own.
pub fn rfc3339_ms(ms: u64) -> impl std::fmt::Display {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms.min(MAX_MS)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_past_9999_are_clamped() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_ms(1_700_000_000_123).len(), 24);
    }
}
