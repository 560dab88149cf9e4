//! Work that spans several writes: a FETCH (or STORE's FLAGS answers) goes
//! message by message, each rendered only when the host asks for more bytes
//! and, when its items need the stored message, after the host handed it
//! over; a SEARCH asks for the messages its criteria need one at a time.

use std::num::NonZeroU32;

use imap_codec::imap_types::core::Tag;
use imap_codec::imap_types::fetch::MessageDataItemName;
use imap_codec::imap_types::response::Data;

use super::{Awaiting, Session};
use crate::email::Email;
use crate::id::MessageId;
use crate::imap::Output;
use crate::imap::fetch;
use crate::imap::search::Criterion;
use crate::imap::sequence::Ranges;

/// Messages a SEARCH step tests before it lets the host write.
const SEARCH_STEP: usize = 4096;

/// A FETCH in progress.
#[derive(Debug)]
pub(crate) struct FetchJob {
    tag: Tag<'static>,
    ranges: Ranges,
    uid: bool,
    items: Vec<MessageDataItemName<'static>>,
    needs_message: bool,
    marks_seen: bool,
    done: &'static str,
    /// The index of the next message to look at.
    next: usize,
    /// Some messages had left the store.
    missing: bool,
    newly_seen: Vec<MessageId>,
}

/// A SEARCH in progress.
#[derive(Debug)]
pub(crate) struct SearchJob {
    tag: Tag<'static>,
    criterion: Criterion,
    uid: bool,
    next: usize,
    hits: Vec<NonZeroU32>,
}

/// A command whose answer is being produced.
#[derive(Debug)]
pub(crate) enum Job {
    Fetch(FetchJob),
    Search(SearchJob),
}

impl Job {
    /// A FETCH of `items` for the messages in `ranges` (UIDs when `uid`).
    pub(crate) fn fetch(
        tag: Tag<'static>,
        ranges: Ranges,
        uid: bool,
        items: Vec<MessageDataItemName<'static>>,
        marks_seen: bool,
        done: &'static str,
    ) -> Job {
        Job::Fetch(FetchJob {
            tag,
            ranges,
            uid,
            needs_message: fetch::needs_message(&items),
            items,
            marks_seen,
            done,
            next: 0,
            missing: false,
            newly_seen: Vec::new(),
        })
    }

    /// A SEARCH answering UIDs when `uid`.
    pub(crate) fn search(tag: Tag<'static>, criterion: Criterion, uid: bool) -> Job {
        Job::Search(SearchJob {
            tag,
            criterion,
            uid,
            next: 0,
            hits: Vec::new(),
        })
    }

    /// Does the next piece of work; false once the job has ended.
    pub(crate) fn step(&mut self, session: &mut Session) -> bool {
        match self {
            Job::Fetch(job) => job.step(session),
            Job::Search(job) => job.step(session),
        }
    }

    /// The message the job asked for (None: gone from the store).
    pub(crate) fn message(&mut self, session: &mut Session, email: Option<&Email>) {
        match self {
            Job::Fetch(job) => job.message(session, email),
            Job::Search(job) => job.message(session, email),
        }
    }
}

impl FetchJob {
    fn step(&mut self, session: &mut Session) -> bool {
        let messages = session.mailbox.messages();
        let Some(at) = (self.next..messages.len()).find(|&i| {
            let n = match self.uid {
                true => messages[i].entry.uid,
                false => u32::try_from(i + 1).unwrap_or(u32::MAX),
            };
            self.ranges.contains(n)
        }) else {
            return self.finish(session);
        };
        self.next = at;
        if self.needs_message {
            let id = messages[at].entry.id;
            session.awaiting = Awaiting::Message;
            session.outputs.push_back(Output::Message(id));
        } else {
            self.render(session, None);
        }
        true
    }

    fn message(&mut self, session: &mut Session, email: Option<&Email>) {
        match email {
            Some(email) => self.render(session, Some(email)),
            None => {
                self.missing = true;
                self.next += 1;
            }
        }
    }

    /// Renders the message at `next` and moves past it.
    fn render(&mut self, session: &mut Session, email: Option<&Email>) {
        let at = self.next;
        self.next += 1;
        let seq = u32::try_from(at + 1).ok().and_then(NonZeroU32::new);
        let Some(seq) = seq else {
            return;
        };
        let Some(message) = session.mailbox.get_mut(seq.get()) else {
            return;
        };
        let mut items = std::borrow::Cow::Borrowed(&self.items[..]);
        if self.marks_seen && !message.entry.seen && email.is_some() {
            message.entry.seen = true;
            self.newly_seen.push(message.entry.id);
            // The flags changed: they go with the answer (RFC 3501 6.4.5).
            if !items.contains(&MessageDataItemName::Flags) {
                items.to_mut().push(MessageDataItemName::Flags);
            }
        }
        let message = *message;
        let bytes = fetch::render(seq, &message, email, &items);
        session.transmit.extend_from_slice(&bytes);
    }

    fn finish(&mut self, session: &mut Session) -> bool {
        if !self.newly_seen.is_empty() {
            let ids = std::mem::take(&mut self.newly_seen);
            session.outputs.push_back(Output::Seen { ids, seen: true });
        }
        session.tell_changes(false);
        let tag = self.tag.clone();
        match self.missing {
            false => session.ok(tag, self.done),
            true => session.no(
                tag,
                "some of the messages were deleted from the store meanwhile",
            ),
        }
        false
    }
}

impl SearchJob {
    fn step(&mut self, session: &mut Session) -> bool {
        let needs = self.criterion.needs_message();
        let messages = session.mailbox.messages();
        let end = messages.len().min(self.next + SEARCH_STEP);
        while self.next < end {
            let message = messages[self.next];
            if needs {
                session.awaiting = Awaiting::Message;
                session.outputs.push_back(Output::Message(message.entry.id));
                return true;
            }
            let seq = (self.next + 1) as u32;
            if self.criterion.matches(seq, &message, None) {
                self.hit(seq, message.entry.uid);
            }
            self.next += 1;
        }
        if self.next < messages.len() {
            return true;
        }
        let hits = std::mem::take(&mut self.hits);
        session.data(Data::Search(hits));
        session.tell_changes(false);
        let text = if self.uid {
            "UID SEARCH completed"
        } else {
            "SEARCH completed"
        };
        session.ok(self.tag.clone(), text);
        false
    }

    fn message(&mut self, session: &mut Session, email: Option<&Email>) {
        let Some(message) = session.mailbox.messages().get(self.next).copied() else {
            return;
        };
        let seq = (self.next + 1) as u32;
        self.next += 1;
        let parsed = email.and_then(|e| crate::imap::structure::parse(e.raw()));
        if email.is_some() && self.criterion.matches(seq, &message, parsed.as_ref()) {
            self.hit(seq, message.entry.uid);
        }
    }

    fn hit(&mut self, seq: u32, uid: u32) {
        if let Some(n) = NonZeroU32::new(if self.uid { uid } else { seq }) {
            self.hits.push(n);
        }
    }
}
