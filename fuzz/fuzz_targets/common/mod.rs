//! What the mail reader targets (`imap_session`, `pop3_session`) share: the
//! core's test host, and the check that splitting the input changes nothing.

use mailjar_core as mj;

/// The host of the core's IMAP and POP3 unit tests.
#[path = "../../../core/tests/common/reader_host.rs"]
pub mod reader_host;

pub use reader_host::{Host, Reader};

/// Feeds `data` but its first byte to a session over these messages, whole
/// and in chunks whose sizes the first byte seeds, answering as a host does
/// (any user, any password but `wrong`): never a panic, the same bytes
/// written either way unless `tls_reply` was (the handshake drops what was
/// pipelined after it), every response ended with CRLF, and no request
/// after the session asked to close.
pub fn writes_the_same_however_split<S: Reader>(
    data: &[u8],
    raws: &[&[u8]],
    config: S::Config,
    tls_reply: &[u8],
) {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let mut splits = Vec::new();
    let (mut at, mut step) = (0, usize::from(seed % 17) + 1);
    loop {
        at += step;
        if at >= input.len() {
            break;
        }
        splits.push(at);
        step = step * 7 % 23 + 1;
    }
    let run = |splits: &[usize]| {
        let mut host = Host::new(raws);
        host.accepts = |_, password| password != "wrong";
        let wire = host.run::<S>(input, splits, config.clone());
        assert!(
            host.after_close.is_none(),
            "a request after Close: {:?}",
            host.after_close
        );
        wire
    };
    let whole = run(&[]);
    let chunked = run(&splits);
    if !whole.windows(tls_reply.len()).any(|w| w == tls_reply) {
        assert_eq!(whole, chunked, "chunking changed what was written");
    }
    assert!(whole.is_empty() || whole.ends_with(b"\r\n"));
}
