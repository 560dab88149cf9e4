//! What a POP3 or IMAP session has read from its client and not yet
//! handled: bytes in, whole lines (POP3) or bounded chunks for a framer
//! (IMAP) out, each refused once it passes its bound, and the idle timer
//! that every byte read restarts. A session reads nothing further while a
//! request is unanswered, so what waits here stays in order.

use std::collections::VecDeque;

/// What is read and not yet handled, and when the client last sent anything.
#[derive(Debug)]
pub(crate) struct Input {
    bytes: VecDeque<u8>,
    /// Bytes taken since the last complete line or command.
    unframed: usize,
    /// A line passed its bound before its end: what is left of it is dropped.
    discarding: bool,
    last_activity_ms: u64,
    idle_timeout_ms: u64,
}

/// What was read passed its bound (a line, or a command being framed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLong;

impl Input {
    /// Nothing read yet; the idle timer starts at `now_ms`.
    pub(crate) fn new(idle_timeout_ms: u64, now_ms: u64) -> Input {
        Input {
            bytes: VecDeque::new(),
            unframed: 0,
            discarding: false,
            last_activity_ms: now_ms,
            idle_timeout_ms,
        }
    }

    /// Bytes the client sent at `now_ms` (which restarts the idle timer).
    pub(crate) fn push(&mut self, bytes: &[u8], now_ms: u64) {
        self.last_activity_ms = now_ms;
        self.bytes.extend(bytes);
    }

    /// When the client has been idle too long, in the host's milliseconds.
    pub(crate) fn idle_until(&self) -> u64 {
        self.last_activity_ms.saturating_add(self.idle_timeout_ms)
    }

    /// Drops what waits (commands pipelined after STARTTLS, or the end).
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
    }

    /// The next whole line, its `\n` included; None until one is in. A line
    /// of more than `max` bytes besides its CRLF is [`TooLong`]: once it
    /// passes `max` without an end what is buffered is dropped, and the rest
    /// of it with it when its end comes.
    pub(crate) fn line(&mut self, max: usize) -> Option<Result<Vec<u8>, TooLong>> {
        let Some(end) = self.bytes.iter().position(|&b| b == b'\n') else {
            if self.bytes.len() > max {
                self.bytes.clear();
                self.discarding = true;
            }
            return None;
        };
        let line: Vec<u8> = self.bytes.drain(..=end).collect();
        if std::mem::take(&mut self.discarding) || line.len() > max + 2 {
            return Some(Err(TooLong));
        }
        Some(Ok(line))
    }

    /// The next bytes for a framer, at most `max`; None when nothing waits
    /// (a buffer grown past `max` is then let go). [`TooLong`] once more
    /// than `bound` bytes were taken since [`Input::framed`].
    pub(crate) fn chunk(&mut self, max: usize, bound: usize) -> Option<Result<Vec<u8>, TooLong>> {
        if self.bytes.is_empty() {
            if self.bytes.capacity() > max {
                self.bytes = VecDeque::new();
            }
            return None;
        }
        let take = self.bytes.len().min(max);
        let chunk: Vec<u8> = self.bytes.drain(..take).collect();
        self.unframed += chunk.len();
        match self.unframed > bound {
            true => Some(Err(TooLong)),
            false => Some(Ok(chunk)),
        }
    }

    /// The framer found a whole line or command in what [`Input::chunk`] gave.
    pub(crate) fn framed(&mut self) {
        self.unframed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(bytes: &[u8]) -> Input {
        let mut input = Input::new(1000, 0);
        input.push(bytes, 0);
        input
    }

    #[test]
    fn lines_come_whole_and_in_order() {
        let mut input = input(b"USER a\r\nPASS");
        assert_eq!(input.line(100), Some(Ok(b"USER a\r\n".to_vec())));
        assert_eq!(input.line(100), None);
        input.push(b" b\r\n", 5);
        assert_eq!(input.line(100), Some(Ok(b"PASS b\r\n".to_vec())));
        assert_eq!(input.line(100), None);
    }

    #[test]
    fn a_line_past_its_bound_is_refused_once_at_its_end() {
        let mut input = input(b"0123456789");
        assert_eq!(input.line(8), None);
        input.push(b"abc\r\nNOOP\r\n", 1);
        assert_eq!(input.line(8), Some(Err(TooLong)));
        assert_eq!(input.line(8), Some(Ok(b"NOOP\r\n".to_vec())));
    }

    #[test]
    fn a_whole_line_longer_than_the_bound_is_refused() {
        let mut input = input(b"0123456789\r\nNOOP\r\n");
        assert_eq!(input.line(8), Some(Err(TooLong)));
        assert_eq!(input.line(8), Some(Ok(b"NOOP\r\n".to_vec())));
        let mut exact = self::input(b"01234567\r\n");
        assert_eq!(exact.line(8), Some(Ok(b"01234567\r\n".to_vec())));
    }

    #[test]
    fn chunks_are_bounded_and_framing_resets_the_count() {
        let mut input = input(b"abcdefgh");
        assert_eq!(input.chunk(3, 6), Some(Ok(b"abc".to_vec())));
        assert_eq!(input.chunk(3, 6), Some(Ok(b"def".to_vec())));
        input.framed();
        assert_eq!(input.chunk(3, 6), Some(Ok(b"gh".to_vec())));
        assert_eq!(input.chunk(3, 6), None);
        input.push(b"ijklmno", 1);
        assert_eq!(input.chunk(3, 6), Some(Ok(b"ijk".to_vec())));
        assert_eq!(input.chunk(3, 6), Some(Err(TooLong)));
    }

    #[test]
    fn an_empty_buffer_lets_a_large_one_go() {
        let mut input = input(&[b'x'; 10_000]);
        while let Some(Ok(_)) = input.chunk(4096, usize::MAX) {}
        assert!(input.bytes.capacity() <= 4096);
    }

    #[test]
    fn the_idle_timer_restarts_with_each_read_and_clear_drops_what_waits() {
        let mut input = Input::new(1000, 50);
        assert_eq!(input.idle_until(), 1050);
        input.push(b"NOOP\r\n", 700);
        assert_eq!(input.idle_until(), 1700);
        input.clear();
        assert_eq!(input.line(100), None);
        assert_eq!(Input::new(u64::MAX, 1).idle_until(), u64::MAX);
    }
}
