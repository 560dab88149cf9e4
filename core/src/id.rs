//! Message identifiers: UUIDv7, time-ordered and strictly increasing.

use std::fmt;
use std::str::FromStr;

/// The identifier of a stored message: a UUIDv7.
///
/// Identifiers compare in the order messages were received: a later message
/// always has a greater identifier, even within one millisecond or when the
/// host clock steps back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(u128);

/// A string that is not a UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a message id (expected a UUID such as 019a8f4e-7c2b-7d3e-9a4b-1c2d3e4f5a6b)")]
pub struct BadMessageId;

impl MessageId {
    /// The id as a 128-bit number.
    pub fn as_u128(self) -> u128 {
        self.0
    }

    /// The id with this 128-bit value (as [`MessageId::as_u128`] gave it).
    pub fn from_u128(value: u128) -> MessageId {
        MessageId(value)
    }

    /// When the id was made, in milliseconds since the Unix epoch (its first 48 bits).
    pub fn time_ms(self) -> u64 {
        (self.0 >> 80) as u64
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        uuid::Uuid::from_u128(self.0).hyphenated().fmt(f)
    }
}

impl FromStr for MessageId {
    type Err = BadMessageId;

    /// Accepts any UUID in its hyphenated, simple or braced form, in either case.
    fn from_str(s: &str) -> Result<MessageId, BadMessageId> {
        uuid::Uuid::try_parse(s)
            .map(|u| MessageId(u.as_u128()))
            .map_err(|_| BadMessageId)
    }
}

/// The random bytes a host supplies for each new id.
pub type Entropy = [u8; 10];

const RAND_BITS: u32 = 74;

/// Makes strictly increasing UUIDv7 ids from host time and host entropy.
#[derive(Debug, Clone, Default)]
pub struct IdGenerator {
    /// The last id handed out, as 48 bits of milliseconds then 74 random bits.
    last: u128,
}

impl IdGenerator {
    /// A generator that has handed out nothing yet.
    pub fn new() -> IdGenerator {
        IdGenerator::default()
    }

    /// The next id for a message received at `now_ms` (milliseconds since the Unix epoch).
    pub fn next(&mut self, now_ms: u64, entropy: Entropy) -> MessageId {
        let mut random = 0u128;
        for b in entropy {
            random = (random << 8) | u128::from(b);
        }
        random &= (1 << RAND_BITS) - 1;
        let ms = u128::from(now_ms) & ((1 << 48) - 1);
        let mut sequence = (ms << RAND_BITS) | random;
        if sequence <= self.last {
            // Same millisecond (or the clock stepped back): count up from the last id.
            sequence = self.last + 1;
        }
        self.last = sequence;
        MessageId(pack_v7(sequence))
    }

    /// Makes every later id sort after `id`, whatever the clock says: a host
    /// that loads stored messages at start calls it with the greatest one.
    pub fn resume_after(&mut self, id: MessageId) {
        self.last = self.last.max(unpack_v7(id.0));
    }
}

/// The 48 bits of time and 74 random bits of an id, the inverse of [`pack_v7`].
fn unpack_v7(id: u128) -> u128 {
    let ms = id >> 80;
    let rand_a = (id >> 64) & 0xfff;
    let rand_b = id & ((1 << 62) - 1);
    (ms << RAND_BITS) | (rand_a << 62) | rand_b
}

/// Places 48 bits of time and 74 random bits around the UUID version and variant bits.
fn pack_v7(sequence: u128) -> u128 {
    let ms = sequence >> RAND_BITS;
    let rand_a = (sequence >> 62) & 0xfff;
    let rand_b = sequence & ((1 << 62) - 1);
    (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_7_and_carry_the_time() {
        let mut ids = IdGenerator::new();
        let id = ids.next(1_763_779_327_000, [0xab; 10]);
        let uuid = uuid::Uuid::from_u128(id.as_u128());
        assert_eq!(uuid.get_version_num(), 7);
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        let (secs, nanos) = uuid.get_timestamp().unwrap().to_unix();
        assert_eq!(
            secs * 1000 + u64::from(nanos / 1_000_000),
            1_763_779_327_000
        );
    }

    #[test]
    fn ids_increase_within_a_millisecond_and_when_time_steps_back() {
        let mut ids = IdGenerator::new();
        let mut last = ids.next(1000, [0xff; 10]);
        for (now, fill) in [(1000, 0), (1000, 0xff), (999, 0x10), (5, 0), (1001, 0)] {
            let id = ids.next(now, [fill; 10]);
            assert!(id > last, "{id} should follow {last}");
            assert_eq!(uuid::Uuid::from_u128(id.as_u128()).get_version_num(), 7);
            last = id;
        }
    }

    #[test]
    fn resumed_ids_sort_after_the_stored_ones_even_when_the_clock_is_behind() {
        let mut before = IdGenerator::new();
        let stored = before.next(5_000_000, [0xff; 10]);
        let mut after = IdGenerator::new();
        after.resume_after(stored);
        let next = after.next(1_000, [0; 10]);
        assert!(next > stored, "{next} should follow {stored}");
        assert_eq!(uuid::Uuid::from_u128(next.as_u128()).get_version_num(), 7);
        // Resuming after an older id changes nothing.
        let later = after.next(6_000_000, [0; 10]);
        after.resume_after(stored);
        assert!(after.next(6_000_000, [0; 10]) > later);
        assert_eq!(
            unpack_v7(pack_v7(0x3ff_ffff_ffff_ffff_ffff)),
            0x3ff_ffff_ffff_ffff_ffff
        );
    }

    #[test]
    fn ids_round_trip_through_text() {
        let mut ids = IdGenerator::new();
        let id = ids.next(42, [7; 10]);
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(text.parse::<MessageId>(), Ok(id));
        assert_eq!(text.to_uppercase().parse::<MessageId>(), Ok(id));
        assert_eq!("nope".parse::<MessageId>(), Err(BadMessageId));
        assert_eq!("".parse::<MessageId>(), Err(BadMessageId));
    }
}
