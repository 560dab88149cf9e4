//! What a session asks its host about inboxes: whether a login is an
//! inbox's (and its password right), and whether a recipient is taken
//! (`--unrouted reject`). The host answers through an [`InboxCheck`] it
//! hands over with its fault rules ([`FaultCheck::inboxes`]), so that every
//! caller of [`Session::handle_input`] stays as it was; without one, no
//! login is an inbox's and every recipient is taken.

#[cfg(doc)]
use super::FaultCheck;
use super::Session;

/// What the inboxes make of SMTP credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxLogin {
    /// No inbox has this user name: the session's own rules decide.
    NotAnInbox,
    /// An inbox's user name and password.
    Inbox,
    /// An inbox's user name with a wrong password: 535 5.7.8.
    WrongPassword,
}

/// The host's answers about inboxes.
pub trait InboxCheck {
    /// Checks a user name and password against the inboxes' SMTP credentials.
    fn login(&mut self, user: &str, password: &str) -> InboxLogin;
    /// Whether `RCPT TO:<recipient>` is taken; `login` is the user name the
    /// session authenticated with (mail of an inbox's session is that inbox's).
    fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool;
}

impl Session {
    /// What the inboxes make of a login (no host check: not an inbox's).
    pub(super) fn inbox_login(
        inboxes: Option<&mut dyn InboxCheck>,
        user: &[u8],
        password: &[u8],
    ) -> InboxLogin {
        let (Ok(user), Ok(password)) = (std::str::from_utf8(user), std::str::from_utf8(password))
        else {
            return InboxLogin::NotAnInbox;
        };
        inboxes.map_or(InboxLogin::NotAnInbox, |inboxes| {
            inboxes.login(user, password)
        })
    }

    /// Whether the host takes mail for `recipient` in this session.
    pub(super) fn takes_recipient(
        &self,
        inboxes: Option<&mut dyn InboxCheck>,
        recipient: &str,
    ) -> bool {
        let login = self
            .security
            .facts
            .auth
            .as_ref()
            .map(|a| a.username.as_str());
        inboxes.is_none_or(|inboxes| inboxes.takes(recipient, login))
    }
}

/// The 550 of a recipient no inbox takes (`--unrouted reject`).
pub(super) fn unrouted() -> super::Reply {
    super::Reply::new(550, "5.1.1 No inbox takes mail for this address")
}

#[cfg(test)]
mod tests {
    use super::super::tests::Drive;
    use super::super::{Config, FaultCheck, FaultEvent, Fired, Output, Session};
    use super::*;

    /// One inbox, `team` with password `secret`, taking `*@team.test`.
    struct OneInbox {
        reject_unrouted: bool,
    }

    impl FaultCheck for OneInbox {
        fn fire(&mut self, _event: &FaultEvent<'_>) -> Option<Fired> {
            None
        }

        fn inboxes(&mut self) -> Option<&mut dyn InboxCheck> {
            Some(self)
        }
    }

    impl InboxCheck for OneInbox {
        fn login(&mut self, user: &str, password: &str) -> InboxLogin {
            match (user.eq_ignore_ascii_case("team"), password == "secret") {
                (false, _) => InboxLogin::NotAnInbox,
                (true, true) => InboxLogin::Inbox,
                (true, false) => InboxLogin::WrongPassword,
            }
        }

        fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool {
            !self.reject_unrouted || login == Some("team") || recipient.ends_with("@team.test")
        }
    }

    fn codes(session: &mut Session, check: &mut OneInbox, lines: &[&str]) -> Vec<u16> {
        let mut codes = Vec::new();
        for line in lines {
            let input = format!("{line}\r\n");
            for output in session.receive_asking(input.as_bytes(), check) {
                if let Output::Reply(reply) = output {
                    codes.push(reply.code);
                }
            }
        }
        codes
    }

    fn plain(user: &str, password: &str) -> String {
        use base64::Engine as _;
        let raw = format!("\0{user}\0{password}");
        format!(
            "AUTH PLAIN {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    #[test]
    fn an_inbox_user_name_needs_its_password_and_others_log_in_as_before() {
        let mut check = OneInbox {
            reject_unrouted: false,
        };
        for (user, password, code) in [
            ("team", "wrong", 535),
            ("TEAM", "secret", 235),
            ("anyone", "anything", 235),
        ] {
            let mut session = Session::new(Config::default());
            let got = codes(
                &mut session,
                &mut check,
                &["EHLO c", &plain(user, password)],
            );
            assert_eq!(got.last(), Some(&code), "{user}:{password}");
        }
        // LOGIN too.
        let mut session = Session::new(Config::default());
        let got = codes(
            &mut session,
            &mut check,
            &["EHLO c", "AUTH LOGIN dGVhbQ==", "d3Jvbmc="],
        );
        assert_eq!(got.last(), Some(&535));
    }

    #[test]
    fn unrouted_recipients_are_refused_unless_the_session_is_an_inbox() {
        let mut check = OneInbox {
            reject_unrouted: true,
        };
        let mut session = Session::new(Config::default());
        let got = codes(
            &mut session,
            &mut check,
            &[
                "EHLO c",
                "MAIL FROM:<a@b.test>",
                "RCPT TO:<x@else.test>",
                "RCPT TO:<x@team.test>",
            ],
        );
        assert_eq!(got[2..], [550, 250]);
        let mut session = Session::new(Config::default());
        let got = codes(
            &mut session,
            &mut check,
            &[
                "EHLO c",
                &plain("team", "secret"),
                "MAIL FROM:<a@b.test>",
                "RCPT TO:<x@else.test>",
            ],
        );
        assert_eq!(got[1..], [235, 250, 250]);
    }
}
