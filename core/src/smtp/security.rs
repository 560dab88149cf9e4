//! STARTTLS as a session transition, `require TLS` and `require AUTH`, and
//! the facts a session records about its connection (remote address, TLS,
//! AUTH) for every message it hands out.
//!
//! The session never touches TLS itself. When a client asks for STARTTLS and
//! the host can upgrade ([`Security::starttls`]), the session answers 220 and
//! hands out [`Output::StartTls`]: the host writes the replies before it,
//! runs the handshake on the raw connection, and then calls
//! [`Session::tls_started`] with what was negotiated. Until then the session
//! reads nothing: bytes the client pipelined after `STARTTLS\r\n` in the same
//! read are dropped, never run as commands (RFC 3207 section 4.2; the
//! command-injection class of CVE-2011-0411). After the handshake the session
//! forgets EHLO, AUTH and any transaction, as RFC 3207 section 4.2 requires.

use std::sync::Arc;

use super::{Mode, Output, Outputs, Reply, Session, Transaction};

/// What a host offers and demands of its sessions about TLS and AUTH.
/// The default offers no STARTTLS, demands nothing and accepts any credentials.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Security {
    /// The host can upgrade a connection: EHLO advertises STARTTLS and STARTTLS
    /// answers 220 (without it, STARTTLS is `454 4.7.0 TLS not available`).
    pub starttls: bool,
    /// MAIL before TLS is `530 5.7.0`.
    pub require_tls: bool,
    /// MAIL before a successful AUTH is `530 5.7.0`.
    pub require_auth: bool,
    /// The accepted user names and passwords; empty accepts any credentials.
    pub credentials: Credentials,
}

/// User names and passwords AUTH accepts (`--auth USER:PASS`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Credentials(Arc<[(String, String)]>);

impl std::fmt::Debug for Credentials {
    /// The user names only: passwords stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(user, _)| user))
            .finish()
    }
}

impl Credentials {
    /// These (user, password) pairs.
    pub fn new(pairs: Vec<(String, String)>) -> Credentials {
        Credentials(pairs.into())
    }

    /// Parses `USER:PASS` pairs, each split at its first colon (a password may hold colons).
    pub fn parse<S: AsRef<str>>(pairs: &[S]) -> Result<Credentials, String> {
        let pairs = pairs
            .iter()
            .map(|pair| {
                let pair = pair.as_ref();
                match pair.split_once(':') {
                    Some((user, pass)) if !user.is_empty() => {
                        Ok((user.to_owned(), pass.to_owned()))
                    }
                    _ => Err(format!(
                        "--auth {pair:?} must be USER:PASS with a non-empty user name"
                    )),
                }
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Credentials::new(pairs))
    }

    /// Whether no credentials are configured (any are accepted).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `user` with `password` is one of the pairs.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        self.0
            .iter()
            .any(|(u, p)| u.as_bytes() == user && p.as_bytes() == password)
    }

    /// The password of `user`, if it is one of the pairs.
    pub fn password_of(&self, user: &[u8]) -> Option<&str> {
        self.0
            .iter()
            .find(|(u, _)| u.as_bytes() == user)
            .map(|(_, p)| p.as_str())
    }
}

/// What TLS a connection negotiated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TlsInfo {
    /// `"TLSv1.3"` or `"TLSv1.2"`.
    pub version: String,
    /// The IANA name of the cipher suite, e.g. `"TLS_AES_128_GCM_SHA256"`.
    pub cipher: String,
}

/// How a client authenticated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuthInfo {
    /// `"PLAIN"`, `"LOGIN"` or `"CRAM-MD5"`.
    pub mechanism: String,
    /// The user name it gave (the authentication identity), as lossy UTF-8.
    pub username: String,
}

/// What the session knew about its connection when it accepted a message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionFacts {
    /// The client's address, `"127.0.0.1:50123"` or `"[::1]:50123"`, when the host told it.
    pub remote_addr: Option<String>,
    /// The TLS in force, if any.
    pub tls: Option<TlsInfo>,
    /// The AUTH that succeeded, if any.
    pub auth: Option<AuthInfo>,
}

/// A message's `smtp` object: what the session saw (`helo`, `remoteAddr`, `tls`, `auth`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SmtpFacts {
    /// What the client said in HELO or EHLO (the last one in force), if it did.
    pub helo: Option<String>,
    /// The client's address, if known.
    pub remote_addr: Option<String>,
    /// The TLS in force, if any.
    pub tls: Option<TlsInfo>,
    /// The AUTH that succeeded, if any.
    pub auth: Option<AuthInfo>,
}

impl SmtpFacts {
    /// The facts of a message: its HELO beside what the session knew of its connection.
    pub fn new(helo: Option<String>, session: SessionFacts) -> SmtpFacts {
        SmtpFacts {
            helo,
            remote_addr: session.remote_addr,
            tls: session.tls,
            auth: session.auth,
        }
    }

    /// The bytes these facts hold, for the store's accounting.
    pub fn footprint(&self) -> usize {
        let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        len(&self.helo)
            + len(&self.remote_addr)
            + self
                .tls
                .as_ref()
                .map_or(0, |t| t.version.len() + t.cipher.len() + 48)
            + self
                .auth
                .as_ref()
                .map_or(0, |a| a.mechanism.len() + a.username.len() + 48)
    }
}

/// The per-connection state behind TLS and AUTH.
#[derive(Debug, Clone, Default)]
pub(super) struct SecurityState {
    pub(super) facts: SessionFacts,
    /// AUTH LOGIN: the user name, between the two answers.
    pub(super) login_user: Option<Vec<u8>>,
    /// AUTH CRAM-MD5: the challenge sent, until the answer.
    pub(super) challenge: Option<String>,
    /// Host entropy that makes CRAM-MD5 challenges unpredictable.
    pub(super) seed: u64,
    /// How many challenges this session sent: no two are equal.
    pub(super) challenges: u64,
}

/// TLS and connection facts.
impl Session {
    /// Tells the session the client's address (`"127.0.0.1:50123"`, `"[::1]:50123"`),
    /// reported in each message's `smtp.remoteAddr`.
    pub fn set_remote_addr(&mut self, addr: impl Into<String>) {
        self.security.facts.remote_addr = Some(addr.into());
    }

    /// Gives the session host entropy for its AUTH CRAM-MD5 challenges.
    pub fn set_entropy(&mut self, seed: u64) {
        self.security.seed = seed;
    }

    /// The connection is under TLS now: after the host finished the handshake
    /// that [`Output::StartTls`] asked for, or before the greeting on an
    /// implicit-TLS listener (or to mark a session as TLS in tests). The
    /// session forgets EHLO, AUTH and any transaction, and reads commands again.
    pub fn tls_started(&mut self, info: TlsInfo) {
        self.security.facts.tls = Some(info);
        self.security.facts.auth = None;
        self.security.login_user = None;
        self.security.challenge = None;
        self.authenticated = false;
        self.helo = None;
        self.transaction = Transaction::default();
        self.line.clear();
        (self.line_timer, self.data_timer) = (None, None);
        if self.mode != Mode::Closed {
            self.mode = Mode::Command;
        }
    }

    /// Whether the session waits for the host to run the TLS handshake
    /// (after [`Output::StartTls`]); it reads nothing until [`Session::tls_started`].
    pub fn is_starting_tls(&self) -> bool {
        self.mode == Mode::StartingTls
    }

    /// The TLS in force, if any.
    pub fn tls(&self) -> Option<&TlsInfo> {
        self.security.facts.tls.as_ref()
    }

    /// What the session knows of its connection now (address, TLS, AUTH).
    pub fn facts(&self) -> &SessionFacts {
        &self.security.facts
    }

    /// Whether EHLO advertises STARTTLS: the host can upgrade and has not yet.
    pub(super) fn offers_starttls(&self) -> bool {
        self.config.security.starttls && self.security.facts.tls.is_none()
    }

    /// The STARTTLS command.
    pub(super) fn starttls(&mut self, args: &str, out: &mut Outputs) {
        if !self.config.security.starttls {
            self.ok(Reply::new(454, "4.7.0 TLS not available"), out);
        } else if self.security.facts.tls.is_some() {
            self.error(Reply::new(503, "5.5.1 TLS already active"), out);
        } else if self.transaction.from.is_some() {
            self.error(
                Reply::new(
                    503,
                    "5.5.1 STARTTLS is not allowed during a mail transaction",
                ),
                out,
            );
        } else if !args.is_empty() {
            self.error(Reply::new(501, "5.5.4 Syntax: STARTTLS"), out);
        } else {
            self.ok(Reply::new(220, "2.0.0 Ready to start TLS"), out);
            out.push(Output::StartTls);
            // Whatever else this read held is dropped (RFC 3207 4.2).
            self.mode = Mode::StartingTls;
        }
    }

    /// Why MAIL is refused before it is parsed: TLS or AUTH required and missing.
    pub(super) fn mail_refused(&self) -> Option<Reply> {
        let policy = &self.config.security;
        if policy.require_tls && self.security.facts.tls.is_none() {
            Some(Reply::new(530, "5.7.0 Must issue a STARTTLS command first"))
        } else if policy.require_auth && !self.authenticated {
            Some(Reply::new(530, "5.7.0 Authentication required"))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::super::tests::{Drive, MAIL, codes, message};
    use super::*;

    fn tls_config() -> Config {
        Config {
            security: Security {
                starttls: true,
                ..Security::default()
            },
            ..Config::default()
        }
    }

    fn tls13() -> TlsInfo {
        TlsInfo {
            version: "TLSv1.3".into(),
            cipher: "TLS_AES_128_GCM_SHA256".into(),
        }
    }

    #[test]
    fn starttls_is_advertised_only_when_the_host_can_upgrade_and_has_not() {
        let ehlo = |session: &mut Session| match &session.receive(b"EHLO c\r\n")[0] {
            Output::Reply(r) => r.lines.iter().any(|l| l == "STARTTLS"),
            other => panic!("{other:?}"),
        };
        assert!(!ehlo(&mut Session::new(Config::default())));
        let mut session = Session::new(tls_config());
        assert!(ehlo(&mut session));
        session.tls_started(tls13());
        assert!(!ehlo(&mut session));
    }

    #[test]
    fn without_tls_configured_starttls_stays_454() {
        let mut session = Session::new(Config::default());
        let out = session.receive(b"EHLO c\r\nSTARTTLS\r\nNOOP\r\n");
        assert_eq!(codes(&out), [250, 454, 250]);
        assert!(!out.contains(&Output::StartTls));
    }

    #[test]
    fn starttls_answers_220_then_asks_the_host_to_upgrade() {
        let mut session = Session::new(tls_config());
        let out = session.receive(b"EHLO c\r\nSTARTTLS\r\n");
        assert_eq!(codes(&out), [250, 220]);
        assert_eq!(out.last(), Some(&Output::StartTls));
        assert!(session.is_starting_tls());
    }

    #[test]
    fn commands_pipelined_after_starttls_in_the_same_read_never_run() {
        // One write: RSET must not run, and no reply may come for it.
        let mut session = Session::new(tls_config());
        let out = session.receive(b"STARTTLS\r\nRSET\r\n");
        assert_eq!(codes(&out), [220]);
        assert_eq!(
            out,
            [
                Output::Reply(Reply::new(220, "2.0.0 Ready to start TLS")),
                Output::StartTls
            ]
        );
        // A whole injected transaction after STARTTLS is dropped too, even
        // when it arrives in a later read before the handshake.
        let mut session = Session::new(tls_config());
        let mut input = b"EHLO c\r\nSTARTTLS\r\n".to_vec();
        input.extend_from_slice(MAIL);
        let out = session.receive(&input);
        assert_eq!(codes(&out), [250, 220]);
        assert!(session.receive(MAIL).is_empty());
        // After the handshake the session reads commands again, from scratch.
        session.tls_started(tls13());
        let out = session.receive(b"RSET\r\n");
        assert_eq!(codes(&out), [250]);
    }

    #[test]
    fn tls_forgets_ehlo_auth_and_the_transaction() {
        let mut session = Session::new(tls_config());
        session.receive(b"EHLO before\r\nAUTH PLAIN AHUAcA==\r\nSTARTTLS\r\n");
        session.tls_started(tls13());
        assert!(session.facts().auth.is_none());
        // AUTH is possible again (it was forgotten), and the new EHLO is the one reported.
        let out = session.receive(b"EHLO after\r\nAUTH PLAIN AHUAcA==\r\n");
        assert_eq!(codes(&out), [250, 235]);
        let out = session.receive(MAIL);
        let m = message(&out).expect("a message");
        assert_eq!(m.helo.as_deref(), Some("after"));
        assert_eq!(m.session.tls, Some(tls13()));
    }

    #[test]
    fn starttls_twice_or_inside_a_transaction_is_503() {
        let mut session = Session::new(tls_config());
        session.receive(b"STARTTLS\r\n");
        session.tls_started(tls13());
        let out = session.receive(b"EHLO c\r\nSTARTTLS\r\n");
        assert_eq!(codes(&out), [250, 503]);
        assert!(!out.contains(&Output::StartTls));

        let mut session = Session::new(tls_config());
        let out = session.receive(b"EHLO c\r\nMAIL FROM:<a@x.test>\r\nSTARTTLS\r\nRSET\r\n");
        assert_eq!(codes(&out), [250, 250, 503, 250]);
        assert!(!out.contains(&Output::StartTls));
        let out = session.receive(b"STARTTLS extra\r\n");
        assert_eq!(codes(&out), [501]);
    }

    #[test]
    fn require_tls_refuses_mail_before_starttls() {
        let mut config = tls_config();
        config.security.require_tls = true;
        let mut session = Session::new(config);
        let out = session.receive(b"EHLO c\r\nMAIL FROM:<a@x.test>\r\n");
        assert_eq!(codes(&out), [250, 530]);
        session.receive(b"STARTTLS\r\n");
        session.tls_started(tls13());
        let out = session.receive(b"EHLO c\r\n");
        assert_eq!(codes(&out), [250]);
        let out = session.receive(MAIL);
        assert_eq!(codes(&out), [250, 250, 354, 250]);
        assert_eq!(
            message(&out).and_then(|m| m.session.tls.clone()),
            Some(tls13())
        );
    }

    #[test]
    fn messages_carry_the_facts_of_their_session() {
        let mut session = Session::new(Config::default());
        session.set_remote_addr("[::1]:50123");
        let mut input = b"EHLO c\r\n".to_vec();
        input.extend_from_slice(MAIL);
        let out = session.receive(&input);
        let m = message(&out).expect("a message");
        assert_eq!(
            m.session,
            SessionFacts {
                remote_addr: Some("[::1]:50123".into()),
                tls: None,
                auth: None,
            }
        );
        let facts = SmtpFacts::new(m.helo.clone(), m.session.clone());
        let json = serde_json::to_value(&facts).expect("serialisable");
        assert_eq!(
            json,
            serde_json::json!({"helo": "c", "remoteAddr": "[::1]:50123", "tls": null, "auth": null})
        );
    }

    #[test]
    fn credentials_split_at_the_first_colon() {
        let c = Credentials::parse(&["u:p:q", "v:"]).expect("valid");
        assert!(c.check(b"u", b"p:q"));
        assert!(c.check(b"v", b""));
        assert!(!c.check(b"u", b"p"));
        assert!(Credentials::parse(&["nocolon"]).is_err());
        assert!(Credentials::parse(&[":p"]).is_err());
        assert!(!format!("{c:?}").contains("p:q"));
    }
}
