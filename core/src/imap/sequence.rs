//! Sequence sets (`1:3,7,10:*`) as sorted, merged ranges, so that testing a
//! number costs a binary search whatever the set's shape (`1:*` over UIDs in
//! the billions is never expanded).

use imap_codec::imap_types::sequence::{SeqOrUid, Sequence, SequenceSet};

/// A sequence set with `*` resolved against the largest number in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ranges(Vec<(u32, u32)>);

impl Ranges {
    /// The ranges of `set`, `*` standing for `largest` (0 in an empty mailbox).
    pub(crate) fn new(set: &SequenceSet, largest: u32) -> Ranges {
        let value = |at: &SeqOrUid| match at {
            SeqOrUid::Value(n) => n.get(),
            SeqOrUid::Asterisk => largest,
        };
        let mut ranges: Vec<(u32, u32)> = set
            .0
            .as_ref()
            .iter()
            .map(|sequence| match sequence {
                Sequence::Single(at) => (value(at), value(at)),
                Sequence::Range(a, b) => {
                    let (a, b) = (value(a), value(b));
                    (a.min(b), a.max(b))
                }
            })
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Ranges(merged)
    }

    /// Whether every number in the set is between 1 and `largest`: a
    /// sequence set naming a message that does not exist is an error
    /// (Dovecot's `Invalid messageset`; `*` in an empty mailbox included).
    pub(crate) fn within(&self, largest: u32) -> bool {
        self.0.first().is_some_and(|&(start, _)| start >= 1)
            && self.0.last().is_some_and(|&(_, end)| end <= largest)
    }

    /// Whether `n` is in the set.
    pub(crate) fn contains(&self, n: u32) -> bool {
        let at = self.0.partition_point(|&(start, _)| start <= n);
        at > 0 && self.0[at - 1].1 >= n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(text: &str, largest: u32) -> Ranges {
        Ranges::new(&SequenceSet::try_from(text).expect("a valid set"), largest)
    }

    #[test]
    fn stars_ranges_and_singles() {
        let set = ranges("10:*,3,1:2,5:4", 12);
        let inside: Vec<u32> = (0..15).filter(|&n| set.contains(n)).collect();
        assert_eq!(inside, [1, 2, 3, 4, 5, 10, 11, 12]);
        // `n:*` with n past the largest is the largest alone (RFC 3501 6.4.8).
        let set = ranges("20:*", 12);
        assert!(set.contains(12) && !set.contains(11));
        assert!(!ranges("*", 0).contains(1));
    }

    #[test]
    fn within_the_mailbox() {
        assert!(ranges("1:*", 3).within(3));
        assert!(ranges("2,3", 3).within(3));
        assert!(!ranges("1:4", 3).within(3));
        assert!(!ranges("5:*", 3).within(3));
        assert!(!ranges("*", 0).within(0));
    }
}
