//! What a session learns of the store: a host hands it a snapshot taken
//! when the store moved, and the session walks what it knows beside it.

use super::{Entry, Session};
use crate::id::MessageId;
use crate::store::{Email, Snapshot};

impl Entry {
    /// A stored message as a session lists it: its UID, size and date, with
    /// the seen flag the host read.
    pub fn of(email: &Email, seen: bool) -> Entry {
        Entry {
            id: email.id,
            uid: email.uid(),
            size: email.raw().len() as u64,
            received_ms: email.received_at_ms,
            seen,
        }
    }
}

impl Session {
    /// The store moved: what the session knows is walked beside `snapshot`
    /// (both in receive order, so O(known + snapshot)); ids it knows that
    /// the snapshot lacks have gone, and what follows its last known id is
    /// new. The client hears of both as IMAP allows. Nothing before a login.
    pub fn refresh(&mut self, snapshot: &Snapshot) {
        if !self.logged_in() {
            return;
        }
        let mut store = snapshot.iter().peekable();
        let mut gone: Vec<MessageId> = Vec::new();
        let mut last_known = None;
        for id in self.known_ids() {
            last_known = Some(id);
            while store.next_if(|e| e.id < id).is_some() {}
            if store.next_if(|e| e.id == id).is_none() {
                gone.push(id);
            }
        }
        let new: Vec<Entry> = snapshot
            .iter()
            .filter(|e| last_known.is_none_or(|last| e.id > last))
            .map(|e| Entry::of(e, snapshot.is_seen(e.id)))
            .collect();
        if !gone.is_empty() {
            self.handle_removed(gone);
        }
        if !new.is_empty() {
            self.handle_new_mail(new);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::test_email;
    use crate::id::IdGenerator;
    use crate::imap::{Config, Output};
    use crate::store::{Store, StoreLimits};

    const RAW: &[u8] = b"From: a@example.com\r\nSubject: hi\r\n\r\nbody\r\n";

    /// Feeds `input` and returns everything the session writes.
    fn said(session: &mut Session, input: &[u8]) -> String {
        session.handle_input(input, 0);
        let mut out = Vec::new();
        while session.poll_transmit(&mut out) {}
        String::from_utf8_lossy(&out).into_owned()
    }

    fn listing(snapshot: &Snapshot) -> Vec<Entry> {
        let entry = |e: &std::sync::Arc<Email>| Entry::of(e, snapshot.is_seen(e.id));
        snapshot.iter().map(entry).collect()
    }

    #[test]
    fn an_entry_is_the_stored_message_with_the_flag_given() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits::default());
        let (email, _) = store.push(Email::clone(&test_email(&mut ids, RAW)));
        let entry = Entry::of(&email, true);
        assert_eq!(
            (entry.id, entry.uid, entry.seen),
            (email.id, email.uid(), true)
        );
        assert_eq!(entry.size, RAW.len() as u64);
        assert_eq!(entry.received_ms, email.received_at_ms);
    }

    #[test]
    fn what_left_and_what_came_reach_a_selected_client() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits::default());
        let mut stored = Vec::new();
        for _ in 0..3 {
            stored.push(store.push(Email::clone(&test_email(&mut ids, RAW))).0.id);
        }
        let mut session = Session::new(Config::default(), 0);
        session.refresh(&store.snapshot());
        assert_eq!(session.known_ids().count(), 0, "nothing before a login");

        said(&mut session, b"a LOGIN u p\r\n");
        assert!(matches!(session.poll_output(), Some(Output::Login { .. })));
        session.handle_login(Some(listing(&store.snapshot())));
        assert!(said(&mut session, b"b SELECT INBOX\r\n").contains("* 3 EXISTS\r\n"));

        store.remove_ids(&stored[..2]);
        stored.push(store.push(Email::clone(&test_email(&mut ids, RAW))).0.id);
        session.refresh(&store.snapshot());
        let told = said(&mut session, b"c NOOP\r\n");
        assert!(told.contains("* 1 EXPUNGE\r\n* 1 EXPUNGE\r\n"), "{told}");
        assert!(told.contains("* 2 EXISTS\r\n"), "{told}");
        let known: Vec<MessageId> = session.known_ids().collect();
        assert_eq!(known, stored[2..]);

        session.refresh(&store.snapshot());
        assert_eq!(said(&mut session, b"d NOOP\r\n"), "d OK done\r\n");
    }
}
