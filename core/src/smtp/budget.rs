//! The room a session asks for before it holds more bytes.

/// Where a [`Session`](super::Session) gets room for the bytes it holds: message text and envelope paths.
///
/// The session calls [`Budget::hold`] with the total it is about to hold
/// before it grows; when it has shrunk, it tells the new total at the next
/// growth or at [`Session::settle`](super::Session::settle). The total includes the messages it has
/// handed out since the last settle.
pub trait Budget {
    /// The session will hold `total` bytes in all. False refuses a growth; a
    /// smaller total than before is never refused (it releases room).
    fn hold(&mut self, total: usize) -> bool;
}

/// A [`Budget`] that never refuses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unlimited;

impl Budget for Unlimited {
    fn hold(&mut self, _total: usize) -> bool {
        true
    }
}
