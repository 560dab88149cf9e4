//! What a [`Session`] asks at each stage, and how it carries out a fault that fires.
//!
//! The session asks a [`FaultCheck`] the host passes in (the API's fault
//! rules, see `crate::faults`) at the point where a command was understood
//! and would otherwise succeed (a malformed command keeps its normal error
//! reply). What fires is first handed to the host as [`Output::Fault`] (to
//! log it, and to wait when it is a delay), then carried out: a reply
//! replaces the normal one (a 421, and any reply at `connect`, closes the
//! connection after it), a disconnect closes without a reply, a delay lets
//! the normal reply follow.
//!
//! The types live here, with the session that acts on them, so that the
//! session depends on nothing of the API.

use super::{Mode, Output, Outputs, Reply, Session, Transaction};

/// Where in an SMTP session a fault rule acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The connection opens (instead of, or before, the greeting).
    Connect,
    /// HELO or EHLO.
    Helo,
    /// MAIL FROM.
    Mail,
    /// Each RCPT TO.
    Rcpt,
    /// The DATA command (or the first BDAT).
    Data,
    /// The end of the message text: a fault here means the message is not stored.
    Message,
}

impl Stage {
    /// Every stage, in the order a session meets them.
    pub const ALL: [Stage; 6] = [
        Stage::Connect,
        Stage::Helo,
        Stage::Mail,
        Stage::Rcpt,
        Stage::Data,
        Stage::Message,
    ];

    /// The name the API uses.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Connect => "connect",
            Stage::Helo => "helo",
            Stage::Mail => "mail",
            Stage::Rcpt => "rcpt",
            Stage::Data => "data",
            Stage::Message => "message",
        }
    }
}

/// What a fault rule does when it fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer with this code (400 to 599) and text instead of the normal reply;
    /// a 421, and any reply at `connect`, closes the connection after it.
    Reply {
        /// The SMTP reply code.
        code: u16,
        /// The reply text (one line, printable ASCII).
        text: String,
    },
    /// Close the connection without a reply.
    Disconnect,
    /// Wait this many milliseconds, then give the normal reply.
    Delay {
        /// How long.
        ms: u64,
    },
}

/// What a session is doing when it asks for faults.
#[derive(Debug, Clone, Copy)]
pub struct FaultEvent<'a> {
    /// The stage it is at.
    pub stage: Stage,
    /// The envelope sender, once MAIL FROM gave it (at `mail` the one being given).
    pub from: Option<&'a str>,
    /// The recipients: the one being given at `rcpt`, all of them at `data` and `message`.
    pub to: &'a [String],
    /// The user name the session authenticated with (AUTH), if it did.
    pub login: Option<&'a str>,
}

/// A rule that fired: what the session does and what the host logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The rule's id.
    pub id: String,
    /// The stage it fired at.
    pub stage: Stage,
    /// What it does.
    pub action: Action,
}

/// Where a session asks whether a fault fires; the host passes one to
/// [`Session::open`] and [`Session::handle_input`].
pub trait FaultCheck {
    /// The fault that fires for `event`, if one does (a rule that fires may be used up).
    fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired>;

    /// The host's answers about inboxes (SMTP logins, `--unrouted reject`),
    /// handed over with its rules; None (the default): no inboxes.
    fn inboxes(&mut self) -> Option<&mut dyn super::InboxCheck> {
        None
    }
}

/// A [`FaultCheck`] where nothing ever fires.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFaults;

impl FaultCheck for NoFaults {
    fn fire(&mut self, _event: &FaultEvent<'_>) -> Option<Fired> {
        None
    }
}

impl Session {
    /// The connection opened at `now_ms`: queues the greeting, or what a
    /// `connect` fault says instead (see [`Session::greeting`]), and starts
    /// the idle timer.
    pub fn open(&mut self, now_ms: u64, faults: &mut dyn FaultCheck) {
        self.idle_since = now_ms;
        let mut out = std::mem::take(&mut self.queue);
        out.transcript.open(now_ms);
        let fired = faults.fire(&FaultEvent {
            stage: Stage::Connect,
            from: None,
            to: &[],
            login: None,
        });
        if self.go_on(fired, &mut out) {
            out.push(Output::Reply(self.greeting()));
        }
        self.queue = out;
    }

    /// The host wrote the greeting itself, without [`Session::open`]: it
    /// goes into the transcript as the first line.
    pub fn greeted(&mut self, greeting: &Reply) {
        self.queue.transcript.reply(greeting);
    }

    /// The fault that fires for this event in this session, if any.
    pub(super) fn fault_for(
        &self,
        faults: &mut dyn FaultCheck,
        stage: Stage,
        from: Option<&str>,
        to: &[String],
    ) -> Option<Fired> {
        let login = self.security.facts.auth.as_ref();
        faults.fire(&FaultEvent {
            stage,
            from,
            to,
            login: login.map(|auth| auth.username.as_str()),
        })
    }

    /// Carries out what fired; true when the stage goes on with its normal reply.
    pub(super) fn go_on(&mut self, fired: Option<Fired>, out: &mut Outputs) -> bool {
        let Some(fired) = fired else {
            return true;
        };
        let (stage, action) = (fired.stage, fired.action.clone());
        out.push(Output::Fault(fired));
        match action {
            Action::Delay { .. } => true,
            Action::Disconnect => {
                self.close_now(out);
                false
            }
            Action::Reply { code, text } => {
                out.push(Output::Reply(Reply::new(code, text)));
                if code == 421 || stage == Stage::Connect {
                    self.close_now(out);
                }
                false
            }
        }
    }

    pub(super) fn close_now(&mut self, out: &mut Outputs) {
        self.transaction = Transaction::default();
        self.mode = Mode::Closed;
        out.push(Output::Close);
    }

    /// The first BDAT of a transaction asks the `data` rules. A reply that does
    /// not close is given once the chunk has been read and dropped, and ends the
    /// transaction; returns it then. A disconnect or a closing reply is given at once.
    pub(super) fn bdat_fault(
        &mut self,
        out: &mut Outputs,
        faults: &mut dyn FaultCheck,
    ) -> Option<Reply> {
        let fired = self.data_fault(faults)?;
        match &fired.action {
            Action::Reply { code, text } if *code != 421 => {
                let reply = Reply::new(*code, text.clone());
                out.push(Output::Fault(fired));
                self.transaction = Transaction::default();
                Some(reply)
            }
            _ => {
                self.go_on(Some(fired), out);
                None
            }
        }
    }

    /// The fault that fires at DATA (or the first BDAT), if any.
    pub(super) fn data_fault(&self, faults: &mut dyn FaultCheck) -> Option<Fired> {
        let t = &self.transaction;
        self.fault_for(faults, Stage::Data, t.from.as_deref(), &t.to)
    }
}
