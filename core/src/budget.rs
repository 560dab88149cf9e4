//! The matching budget of a `subjectPattern`: how much time one request may
//! spend running its pattern, over its whole life.
//!
//! A list or a latest request spends it on the messages it looks at; a parked
//! wait spends it on its first look and on every message it is tried against
//! later. Once it is gone, the request ends with 400 `subjectPattern too
//! expensive`, so no pattern costs more than its budget however much mail
//! arrives. Time comes from the host through [`Clock`].
//!
//! fancy-regex can neither be interrupted nor counted while it runs the parts
//! it delegates (lookaround over a long subject), so a call is refused up
//! front when the pattern's worst case on that subject exceeds what is left.

use crate::error::ApiError;
use crate::jsregex::JsRegex;

/// A monotonic clock of the host, in nanoseconds from any origin.
pub trait Clock {
    /// Now, in nanoseconds; never goes back.
    fn nanos(&self) -> u64;
}

/// A clock that never moves: only the up-front estimates are charged.
///
/// For tests and hosts that cannot read time while they compute.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoppedClock;

impl Clock for StoppedClock {
    fn nanos(&self) -> u64 {
        0
    }
}

/// What is left of one request's matching budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    remaining_ns: u64,
}

impl Budget {
    /// A budget of `nanos` nanoseconds.
    pub fn new(nanos: u64) -> Budget {
        Budget {
            remaining_ns: nanos,
        }
    }

    /// What is left, in nanoseconds.
    pub fn remaining_ns(&self) -> u64 {
        self.remaining_ns
    }

    /// Runs `regex` on `subject` and charges the time it took; refuses to run
    /// it when its worst case on this subject is more than what is left.
    pub fn run(
        &mut self,
        regex: &JsRegex,
        subject: &str,
        clock: &dyn Clock,
    ) -> Result<bool, ApiError> {
        let estimate = regex.worst_case_nanos(subject);
        if self.remaining_ns == 0 || estimate > self.remaining_ns {
            self.remaining_ns = 0;
            return Err(ApiError::TooExpensive);
        }
        let start = clock.nanos();
        let result = regex.is_match(subject);
        let spent = clock.nanos().saturating_sub(start);
        self.remaining_ns = self.remaining_ns.saturating_sub(spent);
        result.map_err(|e| ApiError::BadRequest(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct Ticking(Cell<u64>);

    impl Clock for Ticking {
        fn nanos(&self) -> u64 {
            let now = self.0.get();
            self.0.set(now + 40_000_000);
            now
        }
    }

    #[test]
    fn each_run_charges_the_time_it_took_until_nothing_is_left() {
        let regex = JsRegex::new("^a", "").unwrap();
        let clock = Ticking(Cell::new(0));
        let mut budget = Budget::new(100_000_000);
        assert_eq!(budget.run(&regex, "abc", &clock), Ok(true));
        assert_eq!(budget.remaining_ns(), 60_000_000);
        assert_eq!(budget.run(&regex, "xbc", &clock), Ok(false));
        assert_eq!(budget.run(&regex, "abc", &clock), Ok(true));
        assert_eq!(budget.remaining_ns(), 0);
        assert_eq!(
            budget.run(&regex, "abc", &clock),
            Err(ApiError::TooExpensive)
        );
    }
}
