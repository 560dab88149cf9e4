//! AUTH: PLAIN and LOGIN (any credentials, or those of `--auth`), CRAM-MD5
//! (only with `--auth`: it needs the password), and the user name each
//! success records in the session's facts.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};

use super::security::AuthInfo;
use super::{AuthStep, FaultCheck, InboxLogin, Mode, Outputs, Reply, Session};

/// Login failed: a wrong user name or password, or malformed credentials.
fn invalid() -> Reply {
    Reply::new(535, "5.7.8 Authentication credentials invalid")
}

/// Whether a login is accepted: an inbox's user name must come with its
/// password; other names follow the session's rules (`ours`: `--auth`, or anything).
fn accepted(host: &mut dyn FaultCheck, user: &[u8], password: &[u8], ours: bool) -> bool {
    match Session::inbox_login(host.inboxes(), user, password) {
        InboxLogin::Inbox => true,
        InboxLogin::WrongPassword => false,
        InboxLogin::NotAnInbox => ours,
    }
}

/// The AUTH PLAIN message `authzid NUL authcid NUL passwd` as (authcid, passwd).
pub(crate) fn split_plain(decoded: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = decoded.splitn(3, |&b| b == 0);
    let (_authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    Some((user, password))
}

/// HMAC-MD5 of `challenge` keyed with `password`, as lower-case hex (RFC 2195).
fn cram_md5_digest(password: &str, challenge: &str) -> String {
    // HMAC accepts keys of any length: new_from_slice cannot fail for it.
    let Ok(mut mac) = Hmac::<md5::Md5>::new_from_slice(password.as_bytes()) else {
        return String::new();
    };
    mac.update(challenge.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Session {
    /// The AUTH line of the EHLO reply: CRAM-MD5 only when credentials are configured.
    pub(super) fn auth_advert(&self) -> String {
        if self.config.security.credentials.is_empty() {
            "AUTH PLAIN LOGIN".to_owned()
        } else {
            "AUTH PLAIN LOGIN CRAM-MD5".to_owned()
        }
    }

    /// Whether AUTH CRAM-MD5 can be checked: only with configured credentials.
    pub(super) fn offers_cram_md5(&self) -> bool {
        !self.config.security.credentials.is_empty()
    }

    /// AUTH CRAM-MD5: sends the challenge.
    pub(super) fn start_cram_md5(&mut self, out: &mut Outputs) {
        let s = &mut self.security;
        s.challenges += 1;
        let challenge = format!(
            "<{:016x}.{}@{}>",
            s.seed, s.challenges, self.config.hostname
        );
        let encoded = BASE64.encode(challenge.as_bytes());
        s.challenge = Some(challenge);
        self.mode = Mode::Auth(AuthStep::CramMd5);
        self.challenge(Reply::new(334, encoded), out);
    }

    /// A decoded AUTH answer (or initial response) for `step`.
    pub(super) fn auth_decoded(
        &mut self,
        step: AuthStep,
        decoded: Vec<u8>,
        out: &mut Outputs,
        host: &mut dyn FaultCheck,
    ) {
        let credentials = self.config.security.credentials.clone();
        let (mechanism, user, accepted) = match step {
            AuthStep::LoginUser => {
                self.security.login_user = Some(decoded);
                self.mode = Mode::Auth(AuthStep::LoginPassword);
                self.challenge(Reply::new(334, "UGFzc3dvcmQ6"), out);
                return;
            }
            AuthStep::LoginPassword => {
                let user = self.security.login_user.take().unwrap_or_default();
                let ok = credentials.is_empty() || credentials.check(&user, &decoded);
                let ok = accepted(host, &user, &decoded, ok);
                ("LOGIN", user, ok)
            }
            AuthStep::Plain => match split_plain(&decoded) {
                Some((user, password)) => {
                    let ok = credentials.is_empty() || credentials.check(user, password);
                    ("PLAIN", user.to_vec(), accepted(host, user, password, ok))
                }
                // Without configured credentials anything is accepted, as before.
                None => ("PLAIN", Vec::new(), credentials.is_empty()),
            },
            AuthStep::CramMd5 => {
                let challenge = self.security.challenge.take().unwrap_or_default();
                // "user SP digest": the user name may hold spaces, the digest not.
                let (user, digest) = match decoded.iter().rposition(|&b| b == b' ') {
                    Some(space) => (&decoded[..space], &decoded[space + 1..]),
                    None => (&decoded[..], &b""[..]),
                };
                // An inbox's password is kept only as a digest: CRAM-MD5 cannot check it.
                let ok = credentials.password_of(user).is_some_and(|password| {
                    cram_md5_digest(password, &challenge)
                        .as_bytes()
                        .eq_ignore_ascii_case(digest)
                }) && Session::inbox_login(host.inboxes(), user, b"")
                    == InboxLogin::NotAnInbox;
                ("CRAM-MD5", user.to_vec(), ok)
            }
        };
        if !accepted {
            self.error(invalid(), out);
            return;
        }
        self.authenticated = true;
        self.security.facts.auth = Some(AuthInfo {
            mechanism: mechanism.to_owned(),
            username: String::from_utf8_lossy(&user).into_owned(),
        });
        self.ok(Reply::new(235, "2.7.0 Authentication successful"), out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::super::Output;
    use super::super::security::{Credentials, Security};
    use super::super::tests::{Drive, MAIL, codes, last_reply, message};
    use super::*;

    fn config(pairs: &[&str]) -> Config {
        Config {
            security: Security {
                credentials: Credentials::parse(pairs).expect("valid"),
                ..Security::default()
            },
            ..Config::default()
        }
    }

    fn b64(bytes: &[u8]) -> String {
        BASE64.encode(bytes)
    }

    /// The mechanism and user name the session recorded on its message.
    fn auth_of(outputs: &[Output]) -> (String, String) {
        let auth = message(outputs)
            .and_then(|m| m.session.auth.clone())
            .expect("auth");
        (auth.mechanism, auth.username)
    }

    #[test]
    fn plain_checks_configured_credentials() {
        let mut session = Session::new(config(&["alice:s3:cret"]));
        let wrong = format!("AUTH PLAIN {}\r\n", b64(b"\0alice\0s3"));
        let out = session.receive(wrong.as_bytes());
        assert_eq!(last_reply(&out).code, 535);
        assert!(last_reply(&out).text().starts_with("5.7.8"));
        let right = format!("AUTH PLAIN {}\r\n", b64(b"\0alice\0s3:cret"));
        let out = session.receive(right.as_bytes());
        assert_eq!(codes(&out), [235]);
        assert_eq!(
            auth_of(&session.receive(MAIL)),
            ("PLAIN".to_owned(), "alice".to_owned())
        );
    }

    #[test]
    fn failed_logins_count_as_errors_and_close_the_session() {
        let config = config(&["bob:pw"]);
        let max_errors = config.max_errors;
        let mut session = Session::new(config);
        let attempt = format!("AUTH LOGIN\r\n{}\r\n{}\r\n", b64(b"bob"), b64(b"guess"));
        let mut closed_after = None;
        for n in 1..=max_errors + 1 {
            let out = session.receive(attempt.as_bytes());
            if out.iter().any(|o| matches!(o, Output::Close)) {
                assert_eq!(last_reply(&out).code, 421);
                closed_after = Some(n);
                break;
            }
        }
        // The challenges in between do not forgive the failures: guessing is bounded.
        assert_eq!(closed_after, Some(max_errors));
    }

    #[test]
    fn login_checks_configured_credentials_over_two_answers() {
        let mut session = Session::new(config(&["bob:pw"]));
        let input = format!("AUTH LOGIN\r\n{}\r\n{}\r\n", b64(b"bob"), b64(b"nope"));
        let out = session.receive(input.as_bytes());
        assert_eq!(codes(&out), [334, 334, 535]);
        let input = format!("AUTH LOGIN {}\r\n{}\r\n", b64(b"bob"), b64(b"pw"));
        let out = session.receive(input.as_bytes());
        assert_eq!(codes(&out), [334, 235]);
        assert_eq!(
            auth_of(&session.receive(MAIL)),
            ("LOGIN".to_owned(), "bob".to_owned())
        );
    }

    #[test]
    fn without_credentials_any_are_accepted_and_the_user_is_recorded() {
        let mut session = Session::new(Config::default());
        let input = format!("EHLO c\r\nAUTH PLAIN {}\r\n", b64(b"\0who\0ever"));
        let out = session.receive(input.as_bytes());
        assert_eq!(codes(&out), [250, 235]);
        match &out[0] {
            Output::Reply(r) => assert!(r.lines.iter().any(|l| l == "AUTH PLAIN LOGIN")),
            other => panic!("{other:?}"),
        }
        assert_eq!(auth_of(&session.receive(MAIL)).1, "who");
        // CRAM-MD5 needs a password to check against: not offered without credentials.
        let mut session = Session::new(Config::default());
        assert_eq!(codes(&session.receive(b"AUTH CRAM-MD5\r\n")), [504]);
    }

    #[test]
    fn cram_md5_checks_the_digest_of_the_challenge() {
        // RFC 2195's example: the digest of its challenge with its password.
        assert_eq!(
            cram_md5_digest(
                "tanstaaftanstaaf",
                "<1896.697170952@postoffice.reston.mci.net>"
            ),
            "b913a602c7eda7a495b4e6e7334d3890"
        );
        let mut session = Session::new(config(&["tim:tanstaaftanstaaf"]));
        session.set_entropy(7);
        let ehlo = session.receive(b"EHLO c\r\n");
        match &ehlo[0] {
            Output::Reply(r) => assert!(r.lines.iter().any(|l| l == "AUTH PLAIN LOGIN CRAM-MD5")),
            other => panic!("{other:?}"),
        }
        let out = session.receive(b"AUTH CRAM-MD5\r\n");
        let challenge = BASE64
            .decode(last_reply(&out).text())
            .expect("a base64 challenge");
        let challenge = String::from_utf8(challenge).expect("ASCII");
        let wrong = format!("{}\r\n", b64(b"tim 00000000000000000000000000000000"));
        let out = session.receive(wrong.as_bytes());
        assert_eq!(codes(&out), [535]);
        // A second challenge differs from the first.
        let out = session.receive(b"AUTH CRAM-MD5\r\n");
        let second =
            String::from_utf8(BASE64.decode(last_reply(&out).text()).expect("b64")).expect("ASCII");
        assert_ne!(second, challenge);
        let answer = format!("tim {}", cram_md5_digest("tanstaaftanstaaf", &second));
        let out = session.receive(format!("{}\r\n", b64(answer.as_bytes())).as_bytes());
        assert_eq!(codes(&out), [235]);
        assert_eq!(
            auth_of(&session.receive(MAIL)),
            ("CRAM-MD5".to_owned(), "tim".to_owned())
        );
    }

    #[test]
    fn require_auth_refuses_mail_until_auth_succeeds() {
        let mut c = config(&["u:p"]);
        c.security.require_auth = true;
        let mut session = Session::new(c);
        let out = session.receive(b"EHLO c\r\nMAIL FROM:<a@x.test>\r\n");
        assert_eq!(codes(&out), [250, 530]);
        assert!(last_reply(&out).text().starts_with("5.7.0"));
        let out = session.receive(format!("AUTH PLAIN {}\r\n", b64(b"\0u\0p")).as_bytes());
        assert_eq!(codes(&out), [235]);
        assert_eq!(codes(&session.receive(MAIL)), [250, 250, 354, 250]);
    }

    #[test]
    fn malformed_plain_is_refused_when_credentials_are_checked() {
        let mut session = Session::new(config(&["u:p"]));
        let out = session.receive(format!("AUTH PLAIN {}\r\n", b64(b"u p")).as_bytes());
        assert_eq!(codes(&out), [535]);
    }
}
