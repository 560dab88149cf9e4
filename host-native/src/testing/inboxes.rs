//! Inboxes from a Rust test: the admin's [`TestServer`] helpers around
//! `/api/inboxes` (README, "Inboxes and access control"), typed.

use serde::{Deserialize, Serialize};

use super::{TestError, TestServer};

pub use mailjar_core::api::InboxLimits;

/// An inbox to create: its name (1 to 64 of `a-z 0-9 - _`), its recipient
/// patterns and its own quotas.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewInbox {
    name: String,
    addresses: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_messages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_age_ms: Option<u64>,
}

impl NewInbox {
    /// An inbox with this name, no patterns (mail reaches it by its SMTP login) and no quotas.
    pub fn new(name: &str) -> NewInbox {
        NewInbox {
            name: name.to_owned(),
            addresses: Vec::new(),
            max_messages: None,
            max_bytes: None,
            max_age_ms: None,
        }
    }

    /// Also mail to this pattern: `bob@example.test`, `*@team-a.test`, `qa+*@example.test`.
    pub fn address(mut self, pattern: &str) -> NewInbox {
        self.addresses.push(pattern.to_owned());
        self
    }

    /// Keeps at most this many messages (its oldest go first).
    pub fn max_messages(mut self, count: u64) -> NewInbox {
        self.max_messages = Some(count);
        self
    }

    /// Keeps at most this many bytes of mail.
    pub fn max_bytes(mut self, bytes: u64) -> NewInbox {
        self.max_bytes = Some(bytes);
        self
    }

    /// Expires its mail at this age.
    pub fn max_age(mut self, age: std::time::Duration) -> NewInbox {
        self.max_age_ms = Some(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        self
    }
}

/// An inbox as creation and rotation answer: the token and password are shown only then.
#[derive(Debug, Clone, Deserialize)]
pub struct CreatedInbox {
    /// Its name.
    pub name: String,
    /// Its recipient patterns.
    pub addresses: Vec<String>,
    /// Its own quotas.
    pub limits: InboxLimits,
    /// Its API token: [`TestServer::client`] makes a client of it.
    pub token: String,
    /// Its SMTP login: mail sent with it belongs to the inbox whatever its recipients.
    pub smtp: SmtpLogin,
}

/// An inbox's SMTP user name and password.
#[derive(Debug, Clone, Deserialize)]
pub struct SmtpLogin {
    /// The user name (the inbox's name).
    pub username: String,
    /// The password.
    pub password: String,
}

/// An inbox as `GET /api/inboxes` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedInbox {
    /// Its name.
    pub name: String,
    /// Its recipient patterns.
    pub addresses: Vec<String>,
    /// Its own quotas.
    pub limits: InboxLimits,
    /// How many messages it holds.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// How many its own quotas evicted.
    pub evicted: u64,
}

/// The `inbox` of an `{"inbox": ...}` answer.
fn inbox_of<T: serde::de::DeserializeOwned>(answer: serde_json::Value) -> Result<T, TestError> {
    #[derive(Deserialize)]
    struct One<T> {
        inbox: T,
    }
    serde_json::from_value::<One<T>>(answer)
        .map(|one| one.inbox)
        .map_err(|e| TestError::Refused(200, e.to_string()))
}

/// A name as a path segment.
fn segment(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes()).collect()
}

impl TestServer {
    /// Creates an inbox (needs [`super::TestServerBuilder::admin_token`]):
    /// its token and SMTP login. A taken name is `Refused(409, ..)`, a bad one 400.
    pub async fn create_inbox(&self, inbox: &NewInbox) -> Result<CreatedInbox, TestError> {
        let body =
            serde_json::to_value(inbox).map_err(|e| TestError::Refused(400, e.to_string()))?;
        inbox_of(self.request("POST", "/api/inboxes", Some(&body)).await?)
    }

    /// Every inbox with its counts, by name.
    pub async fn inboxes(&self) -> Result<Vec<ListedInbox>, TestError> {
        #[derive(Deserialize)]
        struct All {
            inboxes: Vec<ListedInbox>,
        }
        let answer = self.request("GET", "/api/inboxes", None).await?;
        serde_json::from_value::<All>(answer)
            .map(|all| all.inboxes)
            .map_err(|e| TestError::Refused(200, e.to_string()))
    }

    /// A new token and SMTP password for an inbox; the old ones stop working at once.
    pub async fn rotate_inbox(&self, name: &str) -> Result<CreatedInbox, TestError> {
        let target = format!("/api/inboxes/{}/token", segment(name));
        inbox_of(self.request("POST", &target, None).await?)
    }

    /// Deletes an inbox; returns how many messages left the store with it.
    pub async fn delete_inbox(&self, name: &str) -> Result<u64, TestError> {
        let target = format!("/api/inboxes/{}", segment(name));
        let answer = self.request("DELETE", &target, None).await?;
        Ok(answer["deleted"].as_u64().unwrap_or(0))
    }
}
