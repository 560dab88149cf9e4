//! The commands (DESIGN's list: RFC 3501 as clients use it, IDLE, UIDPLUS,
//! STARTTLS, UNSELECT) in each state; anything else is a tagged BAD or NO
//! that says why. They arrive parsed by imap-codec and their answers are
//! imap-codec's types: what is kept here is what each command does to the
//! session and the mailbox, which no crate has.

use std::num::NonZeroU32;

use imap_codec::imap_types::auth::AuthMechanism;
use imap_codec::imap_types::command::{Command, CommandBody};
use imap_codec::imap_types::core::{QuotedChar, Tag, Vec1};
use imap_codec::imap_types::flag::{Flag, FlagPerm, StoreResponse, StoreType};
use imap_codec::imap_types::mailbox::{ListMailbox, Mailbox as MailboxName};
use imap_codec::imap_types::response::{Capability, Code, Data, StatusKind};
use imap_codec::imap_types::status::{StatusDataItem, StatusDataItemName};

use super::Output;
use super::fetch;
use super::search::{self, Largest};
use super::sequence::Ranges;
use super::session::Job;
use super::session::{Awaiting, Reading, Session, State};
use crate::id::MessageId;

impl Session {
    /// What CAPABILITY lists now.
    pub(crate) fn capabilities(&self) -> Vec1<Capability<'static>> {
        let mut caps = vec![Capability::Imap4Rev1];
        if self.config.starttls && !self.tls && self.state == State::NotAuthenticated {
            caps.push(Capability::StartTls);
        }
        caps.extend([
            Capability::Auth(AuthMechanism::Plain),
            Capability::SaslIr,
            Capability::Idle,
            Capability::UidPlus,
            Capability::Unselect,
        ]);
        Vec1::try_from(caps).unwrap_or_else(|_| Vec1::from(Capability::Imap4Rev1))
    }

    /// One parsed command, in the current state.
    pub(crate) fn command(&mut self, command: Command<'static>) {
        let Command { tag, body } = command;
        match body {
            CommandBody::Capability => {
                self.data(Data::Capability(self.capabilities()));
                self.ok(tag, "CAPABILITY completed");
            }
            CommandBody::Noop | CommandBody::Check => {
                self.tell_changes(true);
                self.ok(tag, "done");
            }
            CommandBody::Logout => {
                self.bye("mailjar IMAP signing off");
                self.ok(tag, "LOGOUT completed");
                self.close();
            }
            body if self.state == State::NotAuthenticated => self.not_authenticated(tag, body),
            CommandBody::StartTLS
            | CommandBody::Login { .. }
            | CommandBody::Authenticate { .. } => self.bad(Some(tag), "already logged in"),
            body => self.authenticated(tag, body),
        }
    }

    fn not_authenticated(&mut self, tag: Tag<'static>, body: CommandBody<'static>) {
        match body {
            CommandBody::StartTLS if self.config.starttls && !self.tls => {
                self.ok(tag, "begin TLS negotiation now");
                self.start_tls();
            }
            CommandBody::StartTLS => self.bad(Some(tag), "STARTTLS is not available"),
            CommandBody::Login { username, password } => {
                let user = String::from_utf8_lossy(username.as_ref()).into_owned();
                let password = String::from_utf8_lossy(password.declassify().as_ref()).into_owned();
                self.login(tag, user, password);
            }
            CommandBody::Authenticate {
                mechanism: AuthMechanism::Plain,
                initial_response,
            } => match initial_response {
                Some(response) => self.auth_plain(tag, response.declassify()),
                None => {
                    self.continuation();
                    self.reading = Reading::AuthenticateData(tag);
                }
            },
            CommandBody::Authenticate { .. } => {
                self.no(tag, "only AUTHENTICATE PLAIN is supported")
            }
            _ => self.bad(Some(tag), "log in first (LOGIN or AUTHENTICATE PLAIN)"),
        }
    }

    /// AUTHENTICATE PLAIN's response: `authzid NUL authcid NUL passwd`.
    pub(crate) fn auth_plain(&mut self, tag: Tag<'static>, response: &[u8]) {
        match crate::smtp::split_plain(response) {
            Some((user, password)) => {
                let user = String::from_utf8_lossy(user).into_owned();
                let password = String::from_utf8_lossy(password).into_owned();
                self.login(tag, user, password);
            }
            None => self.bad(Some(tag), "malformed PLAIN response"),
        }
    }

    fn login(&mut self, tag: Tag<'static>, user: String, password: String) {
        self.awaiting = Awaiting::Login(tag);
        self.outputs.push_back(Output::Login { user, password });
    }

    fn authenticated(&mut self, tag: Tag<'static>, body: CommandBody<'static>) {
        match body {
            CommandBody::Select { mailbox, .. } => self.select(tag, &mailbox, false),
            CommandBody::Examine { mailbox, .. } => self.select(tag, &mailbox, true),
            CommandBody::List {
                mailbox_wildcard, ..
            } => self.list(tag, &mailbox_wildcard, false),
            CommandBody::Lsub {
                mailbox_wildcard, ..
            } => self.list(tag, &mailbox_wildcard, true),
            CommandBody::Status {
                mailbox,
                item_names,
            } => self.status(tag, &mailbox, &item_names),
            CommandBody::Subscribe { mailbox } | CommandBody::Unsubscribe { mailbox }
                if mailbox == MailboxName::Inbox =>
            {
                self.ok(tag, "INBOX is always subscribed")
            }
            CommandBody::Idle => {
                self.continuation_text("idling");
                self.reading = Reading::IdleDone(tag);
                self.tell_changes(true);
            }
            body if matches!(self.state, State::Selected { .. }) => self.selected(tag, body),
            CommandBody::Fetch { .. }
            | CommandBody::Store { .. }
            | CommandBody::Search { .. }
            | CommandBody::Expunge
            | CommandBody::ExpungeUid { .. }
            | CommandBody::Close
            | CommandBody::Unselect => self.bad(Some(tag), "SELECT INBOX first"),
            _ => self.unsupported(tag),
        }
    }

    fn unsupported(&mut self, tag: Tag<'static>) {
        self.no(
            tag,
            "not supported: mailjar serves one mailbox, INBOX, filled by SMTP (no APPEND, COPY, MOVE, CREATE, RENAME or DELETE)",
        );
    }

    fn continuation_text(&mut self, text: &str) {
        use imap_codec::imap_types::response::{CommandContinuationRequest, Response};
        match CommandContinuationRequest::basic(None, text) {
            Ok(request) => self.respond(&Response::CommandContinuationRequest(request)),
            Err(_) => self.continuation(),
        }
    }

    fn select(&mut self, tag: Tag<'static>, mailbox: &MailboxName<'_>, read_only: bool) {
        if *mailbox != MailboxName::Inbox {
            self.state = State::Authenticated;
            return self.no(tag, "no such mailbox: mailjar has INBOX only");
        }
        // A new selection: the client's old numbering is gone, changes apply silently.
        self.mailbox.apply(true);
        self.state = State::Selected { read_only };
        let flags = vec![Flag::Seen, Flag::Deleted, Flag::Flagged];
        self.data(Data::Flags(flags.clone()));
        let permanent = flags.into_iter().map(FlagPerm::Flag).collect();
        self.untagged_ok(Code::PermanentFlags(permanent), "flags kept");
        self.data(Data::Exists(self.mailbox.len()));
        self.data(Data::Recent(0));
        if let Some(seq) = self.mailbox.first_unseen().and_then(NonZeroU32::new) {
            self.untagged_ok(Code::Unseen(seq), "first unseen");
        }
        if let Some(validity) = NonZeroU32::new(self.config.uid_validity) {
            self.untagged_ok(Code::UidValidity(validity), "UIDs valid");
        }
        if let Some(next) = NonZeroU32::new(self.mailbox.uid_next()) {
            self.untagged_ok(Code::UidNext(next), "predicted next UID");
        }
        let (code, text) = match read_only {
            true => (Code::ReadOnly, "EXAMINE completed"),
            false => (Code::ReadWrite, "SELECT completed"),
        };
        self.tagged(StatusKind::Ok, tag, Some(code), text);
    }

    fn untagged_ok(&mut self, code: Code<'_>, text: &str) {
        use imap_codec::imap_types::response::{Response, Status};
        if let Ok(status) = Status::ok(None, Some(code), text) {
            self.respond(&Response::Status(status));
        }
    }

    fn list(&mut self, tag: Tag<'static>, wildcard: &ListMailbox<'_>, lsub: bool) {
        let pattern = match wildcard {
            ListMailbox::Token(token) => token.as_ref().to_vec(),
            ListMailbox::String(string) => string.as_ref().to_vec(),
        };
        let delimiter = QuotedChar::try_from('/').ok();
        if pattern.is_empty() && !lsub {
            // The hierarchy delimiter and root (RFC 3501 6.3.8).
            if let Ok(root) = MailboxName::try_from("") {
                use imap_codec::imap_types::flag::FlagNameAttribute;
                let items = vec![FlagNameAttribute::Noselect];
                self.data(Data::List {
                    items,
                    delimiter,
                    mailbox: root,
                });
            }
        } else if glob(&pattern.to_ascii_uppercase(), b"INBOX") {
            let (items, mailbox) = (Vec::new(), MailboxName::Inbox);
            self.data(match lsub {
                true => Data::Lsub {
                    items,
                    delimiter,
                    mailbox,
                },
                false => Data::List {
                    items,
                    delimiter,
                    mailbox,
                },
            });
        }
        self.ok(
            tag,
            if lsub {
                "LSUB completed"
            } else {
                "LIST completed"
            },
        );
    }

    fn status(
        &mut self,
        tag: Tag<'static>,
        mailbox: &MailboxName<'_>,
        names: &[StatusDataItemName],
    ) {
        if *mailbox != MailboxName::Inbox {
            return self.no(tag, "no such mailbox: mailjar has INBOX only");
        }
        // Counted, not applied: a selected client's numbering changes only
        // with the EXISTS and EXPUNGE it is told.
        let unseen = self
            .mailbox
            .messages()
            .iter()
            .filter(|m| !m.entry.seen)
            .count();
        let items: Vec<StatusDataItem> = names
            .iter()
            .filter_map(|name| match name {
                StatusDataItemName::Messages => {
                    Some(StatusDataItem::Messages(self.mailbox.store_len()))
                }
                StatusDataItemName::Recent => Some(StatusDataItem::Recent(0)),
                StatusDataItemName::UidNext => {
                    NonZeroU32::new(self.mailbox.uid_next()).map(StatusDataItem::UidNext)
                }
                StatusDataItemName::UidValidity => {
                    NonZeroU32::new(self.config.uid_validity).map(StatusDataItem::UidValidity)
                }
                StatusDataItemName::Unseen => Some(StatusDataItem::Unseen(
                    u32::try_from(unseen).unwrap_or(u32::MAX),
                )),
                _ => None,
            })
            .collect();
        let mailbox = MailboxName::Inbox;
        self.data(Data::Status {
            mailbox,
            items: items.into(),
        });
        self.ok(tag, "STATUS completed");
    }

    fn selected(&mut self, tag: Tag<'static>, body: CommandBody<'static>) {
        let read_only = self.state == (State::Selected { read_only: true });
        match body {
            CommandBody::Fetch {
                sequence_set,
                macro_or_item_names,
                uid,
                ..
            } => {
                let items = fetch::item_names(&macro_or_item_names, uid);
                let ranges = Ranges::new(&sequence_set, self.largest(uid));
                if !uid && !ranges.within(self.mailbox.len()) {
                    return self.bad(Some(tag), "Error in IMAP command FETCH: Invalid messageset");
                }
                let seen = !read_only && fetch::marks_seen(&items);
                self.job = Some(Job::fetch(tag, ranges, uid, items, seen, "FETCH completed"));
            }
            CommandBody::Search { criteria, uid, .. } => {
                let key = imap_codec::imap_types::search::SearchKey::And(criteria);
                let largest = Largest {
                    seq: self.mailbox.len(),
                    uid: self.mailbox.largest_uid(),
                };
                match search::resolve(&key, largest) {
                    Ok(criterion) => self.job = Some(Job::search(tag, criterion, uid)),
                    Err(why) => self.no(tag, why),
                }
            }
            CommandBody::Store { .. } | CommandBody::Expunge | CommandBody::ExpungeUid { .. }
                if read_only =>
            {
                self.no(tag, "the mailbox is read-only (EXAMINE)")
            }
            CommandBody::Store {
                sequence_set,
                kind,
                response,
                flags,
                uid,
                ..
            } => {
                let ranges = Ranges::new(&sequence_set, self.largest(uid));
                if !uid && !ranges.within(self.mailbox.len()) {
                    return self.bad(Some(tag), "Error in IMAP command STORE: Invalid messageset");
                }
                self.store(tag, &ranges, uid, &kind, &flags, response);
            }
            CommandBody::Expunge => self.expunge(tag, None, false),
            CommandBody::ExpungeUid { sequence_set } => {
                let ranges = Ranges::new(&sequence_set, self.mailbox.largest_uid());
                self.expunge(tag, Some(ranges), false);
            }
            CommandBody::Close if read_only => {
                self.state = State::Authenticated;
                self.ok(tag, "CLOSE completed");
            }
            CommandBody::Close => self.expunge(tag, None, true),
            CommandBody::Unselect => {
                self.state = State::Authenticated;
                self.ok(tag, "UNSELECT completed");
            }
            _ => self.unsupported(tag),
        }
    }

    /// The largest sequence number, or UID, `*` stands for.
    fn largest(&self, uid: bool) -> u32 {
        match uid {
            true => self.mailbox.largest_uid(),
            false => self.mailbox.len(),
        }
    }

    fn store(
        &mut self,
        tag: Tag<'static>,
        ranges: &Ranges,
        uid: bool,
        kind: &StoreType,
        flags: &[Flag<'_>],
        response: StoreResponse,
    ) {
        let has = |flag: Flag<'static>| flags.contains(&flag);
        let (seen, deleted, flagged) = (has(Flag::Seen), has(Flag::Deleted), has(Flag::Flagged));
        let apply = |current: bool, named: bool| match kind {
            StoreType::Replace => named,
            StoreType::Add => current || named,
            StoreType::Remove => current && !named,
        };
        let (mut now_seen, mut now_unseen) = (Vec::new(), Vec::new());
        for seq in 1..=self.mailbox.len() {
            let Some(message) = self.mailbox.get_mut(seq) else {
                continue;
            };
            if !ranges.contains(if uid { message.entry.uid } else { seq }) {
                continue;
            }
            let was_seen = message.entry.seen;
            message.entry.seen = apply(was_seen, seen);
            message.deleted = apply(message.deleted, deleted);
            message.flagged = apply(message.flagged, flagged);
            match (was_seen, message.entry.seen) {
                (false, true) => now_seen.push(message.entry.id),
                (true, false) => now_unseen.push(message.entry.id),
                _ => {}
            }
        }
        for (ids, seen) in [(now_seen, true), (now_unseen, false)] {
            if !ids.is_empty() {
                self.outputs.push_back(Output::Seen { ids, seen });
            }
        }
        if response == StoreResponse::Silent {
            return self.ok(tag, "STORE completed");
        }
        let mut items = vec![imap_codec::imap_types::fetch::MessageDataItemName::Flags];
        if uid {
            items.insert(0, imap_codec::imap_types::fetch::MessageDataItemName::Uid);
        }
        self.job = Some(Job::fetch(
            tag,
            ranges.clone(),
            uid,
            items,
            false,
            "STORE completed",
        ));
    }

    /// EXPUNGE, UID EXPUNGE (only the UIDs in `uids`) or CLOSE: the messages
    /// marked `\Deleted` are deleted from the store through the host.
    fn expunge(&mut self, tag: Tag<'static>, uids: Option<Ranges>, close: bool) {
        let ids: Vec<MessageId> = self
            .mailbox
            .messages()
            .iter()
            .filter(|m| m.deleted && uids.as_ref().is_none_or(|r| r.contains(m.entry.uid)))
            .map(|m| m.entry.id)
            .collect();
        if ids.is_empty() {
            return self.deleted(tag, &[], close, uids.is_some(), true);
        }
        self.outputs.push_back(Output::Delete(ids.clone()));
        self.awaiting = Awaiting::Deleted {
            tag,
            ids,
            close,
            uid: uids.is_some(),
        };
    }

    /// The store removed `ids` (or failed to): the client hears the
    /// `EXPUNGE`s (not after CLOSE) and the tagged result.
    pub(crate) fn deleted(
        &mut self,
        tag: Tag<'static>,
        ids: &[MessageId],
        close: bool,
        uid: bool,
        ok: bool,
    ) {
        let gone: std::collections::HashSet<MessageId> = ids.iter().copied().collect();
        let numbers = self.mailbox.expunge_where(|m| gone.contains(&m.entry.id));
        if close {
            self.state = State::Authenticated;
            return match ok {
                true => self.ok(tag, "CLOSE completed"),
                false => self.no(tag, "some messages could not be deleted"),
            };
        }
        for seq in numbers {
            if let Some(seq) = NonZeroU32::new(seq) {
                self.data(Data::Expunge(seq));
            }
        }
        self.tell_changes(true);
        let name = if uid { "UID EXPUNGE" } else { "EXPUNGE" };
        match ok {
            true => self.ok(tag, &format!("{name} completed")),
            false => self.no(tag, "some messages could not be deleted"),
        }
    }
}

/// Whether an IMAP LIST pattern (`*` anything, `%` anything but the
/// delimiter, which INBOX does not hold) matches `name`: row by row of the
/// usual table, so a pattern of many wildcards costs its length times the name's.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let mut row = vec![false; name.len() + 1];
    row[0] = true;
    for &p in pattern {
        let mut next = vec![false; name.len() + 1];
        for j in 0..=name.len() {
            next[j] = match p {
                b'*' | b'%' => row[j] || (j > 0 && next[j - 1]),
                _ => j > 0 && row[j - 1] && name[j - 1] == p,
            };
        }
        row = next;
    }
    row[name.len()]
}
