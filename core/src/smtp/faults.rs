//! Where a [`Session`] asks its [`FaultRules`] and how it carries out what fires.
//!
//! Every stage asks at the point where its command was understood and would
//! otherwise succeed (a malformed command keeps its normal error reply). What
//! fires is first handed to the host as [`Output::Fault`] (to log it, and to
//! wait when it is a delay), then carried out: a reply replaces the normal
//! one (a 421, and any reply at `connect`, closes the connection after it), a
//! disconnect closes without a reply, a delay lets the normal reply follow.

use super::{Mode, Output, Reply, Session, Transaction};
use crate::faults::{Action, FaultEvent, FaultRules, Fired, Stage};

impl Session {
    /// Shares `rules` with this session: it asks them at every stage.
    pub fn set_faults(&mut self, rules: FaultRules) {
        self.faults = Some(rules);
    }

    /// What the host writes when the connection opens: the greeting, or what a
    /// `connect` rule says instead (see [`Session::greeting`]).
    pub fn open(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        let fired = self.fault_for(Stage::Connect, None, &[]);
        if self.go_on(fired, &mut out) {
            out.push(Output::Reply(self.greeting()));
        }
        out
    }

    /// The rule that fires for this event, if any.
    pub(super) fn fault_for(
        &self,
        stage: Stage,
        from: Option<&str>,
        to: &[String],
    ) -> Option<Fired> {
        let rules = self.faults.as_ref()?;
        rules.check(&FaultEvent { stage, from, to })
    }

    /// Carries out what fired; true when the stage goes on with its normal reply.
    pub(super) fn go_on(&mut self, fired: Option<Fired>, out: &mut Vec<Output>) -> bool {
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

    fn close_now(&mut self, out: &mut Vec<Output>) {
        self.transaction = Transaction::default();
        self.mode = Mode::Closed;
        out.push(Output::Close);
    }

    /// The first BDAT of a transaction asks the `data` rules. A reply that does
    /// not close is given once the chunk has been read and dropped, and ends the
    /// transaction; returns it then. A disconnect or a closing reply is given at once.
    pub(super) fn bdat_fault(&mut self, out: &mut Vec<Output>) -> Option<Reply> {
        let fired = self.fault_for(
            Stage::Data,
            self.transaction.from.as_deref(),
            &self.transaction.to,
        )?;
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
}

impl Session {
    /// The rule that fires at DATA, if any.
    pub(super) fn data_fault(&self) -> Option<Fired> {
        self.fault_for(
            Stage::Data,
            self.transaction.from.as_deref(),
            &self.transaction.to,
        )
    }
}
