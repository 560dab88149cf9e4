//! Inboxes: who may read which mail on a shared mailjar.
//!
//! An inbox has a name, the recipient patterns that route mail to it, its own
//! quotas, and two credentials: an API token and an SMTP user name and
//! password. A message belongs to every inbox one of its envelope recipients
//! matches, and to the inbox whose SMTP credentials authenticated its session
//! ([`Inboxes::route`]); it is stored once. Mail that no inbox takes is the
//! admin's.
//!
//! Routing is O(recipients) hash lookups whatever the number of inboxes: each
//! pattern kind has its own map ([`Pattern`]). Credentials are kept only as
//! SHA-256 digests; a token is found by its digest (a lookup by digest
//! leaks nothing an attacker can use: they would need a preimage) and the
//! admin token is compared in constant time ([`same_secret`]).
//!
//! Kept by hand, small on purpose: the three pattern kinds are fixed by the
//! README, so three hash maps route a recipient in O(1) each. A glob crate
//! (`globset`, `wildmatch`) would test every pattern of every inbox per
//! recipient and accept patterns the README does not define. Hashing and
//! constant-time comparison are RustCrypto's `sha2` and `subtle`.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The longest inbox name.
pub const MAX_NAME_CHARS: usize = 64;
/// The most recipient patterns one inbox may have.
pub const MAX_PATTERNS: usize = 100;
/// The shortest admin token (`--admin-token`).
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// The number of an inbox in its table; never reused while the table lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InboxId(pub u32);

/// An inbox's token, as it stood when it admitted a request: the inbox and
/// the generation of its credentials. A request, a parked wait or an event
/// stream admitted under one generation is refused (401) or ended once the
/// token is rotated or the inbox deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxGrant {
    pub(crate) inbox: InboxId,
    pub(crate) generation: u64,
}

/// A SHA-256 digest of a secret (a token or a password).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest32(pub [u8; 32]);

impl std::fmt::Debug for Digest32 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the digest itself: logs need not carry it.
        f.write_str("Digest32(..)")
    }
}

impl Digest32 {
    /// The digest of `secret`.
    pub fn of(secret: &str) -> Digest32 {
        Digest32(Sha256::digest(secret.as_bytes()).into())
    }
}

/// Whether two secrets are equal, in time that depends only on their lengths.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A recipient pattern of an inbox (matched case-insensitively).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `bob@example.test`: this address.
    Exact(String),
    /// `*@team-a.local.test`: any local part at exactly this domain (no subdomains).
    Domain(String),
    /// `qa+*@local.test`: `qa+` and anything after it at this domain (not `qa@` itself).
    Tagged {
        /// The local part before the `+`.
        local: String,
        /// The domain.
        domain: String,
    },
}

impl Pattern {
    /// Reads a pattern; a clear 400 when it is none of the three kinds.
    pub fn parse(text: &str) -> Result<Pattern, ApiError> {
        let bad = |why: &str| ApiError::BadRequest(format!("address pattern {text:?} {why}"));
        let lower = text.trim().to_lowercase();
        let (local, domain) = lower
            .rsplit_once('@')
            .ok_or_else(|| bad("has no @domain"))?;
        if domain.is_empty() || domain.contains(['*', '@']) || domain.contains(char::is_whitespace)
        {
            return Err(bad("needs a plain domain after @"));
        }
        if local.is_empty() || local.contains(char::is_whitespace) {
            return Err(bad("needs a local part before @"));
        }
        match local.find('*') {
            None => Ok(Pattern::Exact(lower.clone())),
            Some(_) if local == "*" => Ok(Pattern::Domain(domain.to_owned())),
            Some(star) => match local.strip_suffix("+*") {
                Some(tag) if star == local.len() - 1 && !tag.is_empty() && !tag.contains('*') => {
                    Ok(Pattern::Tagged {
                        local: tag.to_owned(),
                        domain: domain.to_owned(),
                    })
                }
                _ => Err(bad(
                    "may use * only as the whole local part (*@domain) or after a + (local+*@domain)",
                )),
            },
        }
    }
}

/// Checks an inbox name: 1-64 of `a-z 0-9 - _`.
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let valid = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "an inbox name is 1 to {MAX_NAME_CHARS} of a-z, 0-9, - and _"
        )))
    }
}

/// The routing side of every inbox: which inboxes an address belongs to,
/// whose token or SMTP user name a credential is.
#[derive(Debug, Default)]
pub struct Inboxes {
    names: HashMap<String, InboxId>,
    exact: HashMap<String, Vec<InboxId>>,
    domains: HashMap<String, Vec<InboxId>>,
    tagged: HashMap<(String, String), Vec<InboxId>>,
    tokens: HashMap<Digest32, InboxId>,
    smtp_users: HashMap<String, (InboxId, Digest32)>,
    patterns: HashMap<InboxId, Vec<Pattern>>,
    /// What each inbox's credentials are now, to replace them in O(1).
    held: HashMap<InboxId, Held>,
    next: u32,
    next_generation: u64,
}

/// An inbox's current credentials as the table holds them.
#[derive(Debug)]
struct Held {
    /// A new number at every change of credentials, never reused: a grant
    /// made under old credentials stays old.
    generation: u64,
    token: Digest32,
    /// Lowercase.
    smtp_user: String,
}

/// Takes `id` out of the inboxes a pattern routes to, and the pattern out when none is left.
fn drop_from<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Vec<InboxId>>, key: K, id: InboxId) {
    if let Some(list) = map.get_mut(&key) {
        list.retain(|i| *i != id);
        if list.is_empty() {
            map.remove(&key);
        }
    }
}

/// What the table knows of one inbox's credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The digest of its API token.
    pub token: Digest32,
    /// Its SMTP user name.
    pub smtp_user: String,
    /// The digest of its SMTP password.
    pub smtp_password: Digest32,
}

impl Inboxes {
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The inbox with this name.
    pub fn id(&self, name: &str) -> Option<InboxId> {
        self.names.get(name).copied()
    }

    /// Adds an inbox; 409 when the name is taken. Its patterns were parsed first.
    pub fn add(
        &mut self,
        name: &str,
        patterns: Vec<Pattern>,
        credentials: &Credentials,
    ) -> Result<InboxId, ApiError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ApiError::Conflict(format!("an inbox named {name} exists")));
        }
        let id = InboxId(self.next);
        self.next += 1;
        self.names.insert(name.to_owned(), id);
        for pattern in &patterns {
            let list = match pattern {
                Pattern::Exact(address) => self.exact.entry(address.clone()).or_default(),
                Pattern::Domain(domain) => self.domains.entry(domain.clone()).or_default(),
                Pattern::Tagged { local, domain } => self
                    .tagged
                    .entry((local.clone(), domain.clone()))
                    .or_default(),
            };
            if !list.contains(&id) {
                list.push(id);
            }
        }
        self.patterns.insert(id, patterns);
        self.set_credentials(id, credentials);
        Ok(id)
    }

    /// Replaces an inbox's credentials: the old ones stop working at once.
    pub fn set_credentials(&mut self, id: InboxId, credentials: &Credentials) {
        self.forget_credentials(id);
        self.next_generation += 1;
        let user = credentials.smtp_user.to_lowercase();
        self.held.insert(
            id,
            Held {
                generation: self.next_generation,
                token: credentials.token,
                smtp_user: user.clone(),
            },
        );
        self.tokens.insert(credentials.token, id);
        self.smtp_users
            .insert(user, (id, credentials.smtp_password));
    }

    /// Drops an inbox's credentials, in O(1): its entries are found by what it holds.
    fn forget_credentials(&mut self, id: InboxId) {
        if let Some(old) = self.held.remove(&id) {
            self.tokens.remove(&old.token);
            self.smtp_users.remove(&old.smtp_user);
        }
    }

    /// Removes an inbox from routing and from the credentials, in time that
    /// grows with its own patterns only.
    pub fn remove(&mut self, name: &str) -> Option<InboxId> {
        let id = self.names.remove(name)?;
        for pattern in self.patterns.remove(&id).unwrap_or_default() {
            match pattern {
                Pattern::Exact(address) => drop_from(&mut self.exact, address, id),
                Pattern::Domain(domain) => drop_from(&mut self.domains, domain, id),
                Pattern::Tagged { local, domain } => {
                    drop_from(&mut self.tagged, (local, domain), id)
                }
            }
        }
        self.forget_credentials(id);
        Some(id)
    }

    /// The generation of an inbox's current credentials; None when it is gone.
    pub fn generation(&self, id: InboxId) -> Option<u64> {
        self.held.get(&id).map(|held| held.generation)
    }

    /// Every inbox's credentials (digests only), for keeping them on disk.
    pub fn all_credentials(&self) -> HashMap<InboxId, Credentials> {
        let mut all = HashMap::with_capacity(self.names.len());
        for (user, (id, password)) in &self.smtp_users {
            all.insert(
                *id,
                Credentials {
                    token: Digest32([0; 32]),
                    smtp_user: user.clone(),
                    smtp_password: *password,
                },
            );
        }
        for (token, id) in &self.tokens {
            if let Some(credentials) = all.get_mut(id) {
                credentials.token = *token;
            }
        }
        all
    }

    /// The inbox whose SMTP user name this is (its session authenticated as it).
    pub fn by_smtp_user(&self, user: &str) -> Option<InboxId> {
        self.smtp_users.get(&user.to_lowercase()).map(|(id, _)| *id)
    }

    /// The inbox whose API token this is.
    #[cfg(test)]
    pub fn by_token(&self, token: &str) -> Option<InboxId> {
        self.by_token_digest(&Digest32::of(token))
    }

    /// The inbox whose API token has this digest.
    pub fn by_token_digest(&self, digest: &Digest32) -> Option<InboxId> {
        self.tokens.get(digest).copied()
    }

    /// The inbox whose SMTP user name this is: `Ok(Some)` when the password
    /// is right, `Ok(None)` when no inbox has this user name, `Err` for a wrong password.
    pub fn smtp_login(&self, user: &str, password: &str) -> Result<Option<InboxId>, WrongPassword> {
        match self.smtp_users.get(&user.to_lowercase()) {
            None => Ok(None),
            Some((id, digest)) => {
                let given = Digest32::of(password);
                if bool::from(given.0.ct_eq(&digest.0)) {
                    Ok(Some(*id))
                } else {
                    Err(WrongPassword)
                }
            }
        }
    }

    /// The inboxes a message belongs to: every inbox one of its recipients
    /// matches, and the one its session authenticated as; each once, in id order.
    pub fn route<'a>(
        &self,
        recipients: impl IntoIterator<Item = &'a str>,
        authenticated: Option<InboxId>,
    ) -> Vec<InboxId> {
        let mut routed: Vec<InboxId> = authenticated.into_iter().collect();
        if self.names.is_empty() {
            return routed;
        }
        for recipient in recipients {
            let lower = recipient.trim().to_lowercase();
            let Some((local, domain)) = lower.rsplit_once('@') else {
                continue;
            };
            let mut add = |ids: Option<&Vec<InboxId>>| routed.extend(ids.into_iter().flatten());
            add(self.exact.get(&lower));
            add(self.domains.get(domain));
            if let Some((tag, _)) = local.split_once('+') {
                add(self.tagged.get(&(tag.to_owned(), domain.to_owned())));
            }
        }
        routed.sort_unstable();
        routed.dedup();
        routed
    }
}

/// An SMTP user name of an inbox with a wrong password (535 5.7.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongPassword;

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(n: u8) -> Credentials {
        Credentials {
            token: Digest32::of(&format!("token-{n}")),
            smtp_user: format!("user-{n}"),
            smtp_password: Digest32::of(&format!("password-{n}")),
        }
    }

    fn table() -> (Inboxes, InboxId, InboxId) {
        let mut inboxes = Inboxes::default();
        let parse = |p: &[&str]| p.iter().map(|p| Pattern::parse(p).unwrap()).collect();
        let a = inboxes
            .add(
                "team-a",
                parse(&["*@team-a.local.test", "bob@example.test"]),
                &credentials(1),
            )
            .unwrap();
        let b = inboxes
            .add(
                "qa",
                parse(&["qa+*@local.test", "Bob@Example.TEST"]),
                &credentials(2),
            )
            .unwrap();
        (inboxes, a, b)
    }

    #[test]
    fn patterns_are_one_of_three_kinds_and_anything_else_is_a_clear_400() {
        assert_eq!(
            Pattern::parse("Bob@Example.test").unwrap(),
            Pattern::Exact("bob@example.test".into())
        );
        assert_eq!(
            Pattern::parse("*@x.test").unwrap(),
            Pattern::Domain("x.test".into())
        );
        assert_eq!(
            Pattern::parse("qa+*@x.test").unwrap(),
            Pattern::Tagged {
                local: "qa".into(),
                domain: "x.test".into()
            }
        );
        for bad in [
            "",
            "bob",
            "@x.test",
            "bob@",
            "*@*.test",
            "a*b@x.test",
            "+*@x.test",
            "qa+*x@x.test",
            "b b@x.test",
        ] {
            let err = Pattern::parse(bad).unwrap_err();
            assert_eq!(err.status(), 400, "{bad:?}");
        }
    }

    #[test]
    fn each_pattern_kind_routes_and_nothing_else_does() {
        let (inboxes, a, b) = table();
        let route = |to: &[&str]| inboxes.route(to.iter().copied(), None);
        assert_eq!(route(&["anyone@team-a.local.test"]), vec![a]);
        // Exactly that domain: no subdomain, no parent.
        assert!(route(&["x@sub.team-a.local.test", "x@local.test"]).is_empty());
        assert_eq!(route(&["qa+signup-42@local.test"]), vec![b]);
        // `qa+*` is not `qa` itself.
        assert!(route(&["qa@local.test"]).is_empty());
        // One message, two inboxes, each once; case does not matter.
        assert_eq!(
            route(&["BOB@example.test", "x@TEAM-A.local.test"]),
            vec![a, b]
        );
        assert!(route(&["nobody@example.test", "not an address"]).is_empty());
    }

    #[test]
    fn the_authenticated_inbox_is_routed_whatever_the_recipients() {
        let (inboxes, a, b) = table();
        assert_eq!(inboxes.route(["x@nowhere.test"], Some(b)), vec![b]);
        assert_eq!(inboxes.route(["bob@example.test"], Some(b)), vec![a, b]);
    }

    #[test]
    fn names_are_checked_and_unique() {
        let (mut inboxes, _, _) = table();
        for bad in ["", "Team", "a b", "é", &"x".repeat(65)] {
            assert_eq!(
                inboxes
                    .add(bad, vec![], &credentials(9))
                    .unwrap_err()
                    .status(),
                400
            );
        }
        assert_eq!(
            inboxes
                .add("qa", vec![], &credentials(9))
                .unwrap_err()
                .status(),
            409
        );
        assert!(
            inboxes
                .add(&"x".repeat(64), vec![], &credentials(9))
                .is_ok()
        );
    }

    #[test]
    fn credentials_are_found_by_digest_and_rotation_ends_the_old_ones() {
        let (mut inboxes, a, _) = table();
        assert_eq!(inboxes.by_token("token-1"), Some(a));
        assert_eq!(inboxes.by_token("token-x"), None);
        assert_eq!(inboxes.smtp_login("USER-1", "password-1"), Ok(Some(a)));
        assert_eq!(inboxes.smtp_login("user-1", "wrong"), Err(WrongPassword));
        assert_eq!(inboxes.smtp_login("someone", "anything"), Ok(None));
        inboxes.set_credentials(a, &credentials(7));
        assert_eq!(inboxes.by_token("token-1"), None);
        assert_eq!(inboxes.by_token("token-7"), Some(a));
        assert_eq!(inboxes.smtp_login("user-1", "password-1"), Ok(None));
        assert_eq!(inboxes.smtp_login("user-7", "password-7"), Ok(Some(a)));
    }

    #[test]
    fn a_removed_inbox_routes_nothing_and_its_credentials_stop() {
        let (mut inboxes, a, b) = table();
        assert_eq!(inboxes.remove("team-a"), Some(a));
        assert_eq!(
            inboxes.route(["bob@example.test", "x@team-a.local.test"], None),
            vec![b]
        );
        assert_eq!(inboxes.by_token("token-1"), None);
        assert_eq!(inboxes.remove("team-a"), None);
        // Ids are not reused.
        let c = inboxes.add("team-a", vec![], &credentials(3)).unwrap();
        assert!(c > b);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abcdefghijklmnop", "abcdefghijklmnop"));
        assert!(!same_secret("abcdefghijklmnop", "abcdefghijklmnoq"));
        assert!(!same_secret("abc", "abcd"));
    }
}
