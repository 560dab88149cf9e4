//! What a host that keeps messages on disk needs from the API: ids before
//! insertion, loading stored messages back, what left the store, and
//! `--max-age`.
//!
//! The core stays sans-IO: it decides (id, store, delete, evict, expire) and
//! says so; the host writes it down. A delivery is two steps,
//! [`Api::assign`] (the id and the receive time) then [`Api::handle_message`] (after
//! the host has written and committed the message). What left the store,
//! whatever the reason (deleted, evicted by the limits, expired by
//! `--max-age`), comes out as [`super::Output::Removed`] holding a [`Trash`]; its
//! [`Trash::removals`] names it for the host to delete from disk. At start
//! the host feeds stored messages back in id order with [`Api::restore`],
//! which applies today's limits (what they evict is in the trash too) and
//! makes every later id sort after the stored ones.

use std::sync::Arc;

use super::{Api, Reason, Trash};
use crate::email::Email;
use crate::id::{Entropy, MessageId};

/// An id and a receive time handed out for a message before it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assigned {
    /// The id it will be stored under.
    pub id: MessageId,
    /// When it was received, in milliseconds since the Unix epoch (never before an earlier message's).
    pub received_at_ms: u64,
}

/// Messages that left the store, as a host deletes them from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// This message.
    One(MessageId),
    /// Every message with an id from `first` to `last`, both included (all
    /// of them were deleted at once, and no other message has an id between).
    Range {
        /// The smallest id.
        first: MessageId,
        /// The greatest id.
        last: MessageId,
    },
}

/// What `/health` reports as `storage`, read when it is asked.
pub type StorageReport = Box<dyn Fn() -> serde_json::Value + Send + Sync>;

/// A stored message fed back to [`Api::restore`] out of id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stored message {id} does not sort after the one loaded before it")]
pub struct OutOfOrder {
    /// The id that came too late.
    pub id: MessageId,
}

impl Trash {
    /// What left the store, oldest first within each kind: single messages
    /// and whole ranges (a `DELETE /api/emails` of everything). O(k) for k
    /// messages: call it outside the lock.
    pub fn removals(&self) -> Vec<Removal> {
        let mut out: Vec<Removal> = self.emails.iter().map(|e| Removal::One(e.id)).collect();
        for snapshot in &self.snapshots {
            let mut iter = snapshot.iter();
            if let (Some(first), last) = (iter.next(), iter.next_back()) {
                out.push(Removal::Range {
                    first: first.id,
                    last: last.map_or(first.id, |e| e.id),
                });
            }
        }
        out
    }
}

impl<W> Api<W> {
    /// The id and receive time of the next message, received at `now_ms`:
    /// the first half of [`Api::deliver`]. Pass them to [`Api::handle_message`]
    /// once the message is written, in the order they were assigned; a
    /// message never inserted leaves only a gap in the ids.
    pub fn assign(&mut self, now_ms: u64, entropy: Entropy) -> Assigned {
        let now_ms = now_ms.max(self.last_received_ms);
        self.last_received_ms = now_ms;
        Assigned {
            id: self.ids.next(now_ms, entropy),
            received_at_ms: now_ms,
        }
    }

    /// Makes every id assigned from now on sort after `id`, and every receive
    /// time at least its own, whatever the clock says: at start, for the
    /// greatest id a store ever held when that message was deleted before the
    /// restart ([`Api::restore`] does the same for a stored one), so a test
    /// waiting with `afterId` of it is still answered by new mail.
    pub fn resume_after(&mut self, id: MessageId) {
        self.ids.resume_after(id);
        self.last_received_ms = self.last_received_ms.max(id.time_ms());
    }

    /// Makes every UID given from now on greater than `uid`: at start, for
    /// the greatest UID the host's storage ever gave, when that message was
    /// deleted before the restart ([`Api::restore`] keeps a stored one's UID).
    pub fn resume_uid_after(&mut self, uid: u32) {
        self.store.resume_uid_after(uid);
    }

    /// Stores a message loaded from disk at start, under its stored id and
    /// receive time; call it in id order. Today's limits apply, to this
    /// message too when its raw bytes alone are over the byte limit
    /// ([`crate::store::Store::refuse_restored`]): what they evict comes out as
    /// [`super::Output::Removed`] ([`Trash::removals`]). Every id assigned
    /// afterwards sorts after this one, even when the clock is behind it.
    ///
    /// The host builds the message with [`Email::new`] (parsing it), which
    /// it may do on several threads.
    pub fn restore(&mut self, email: Email) -> Result<(), OutOfOrder> {
        let id = email.id;
        let last = self.last_restored.max(self.store.newest());
        if last.is_some_and(|last| last >= id) {
            return Err(OutOfOrder { id });
        }
        self.last_restored = Some(id);
        self.ids.resume_after(id);
        self.last_received_ms = self.last_received_ms.max(email.received_at_ms);
        // Raw bytes over today's byte limit: not kept, and it does not push
        // out the older messages that fit.
        if self.store.refuse_restored(&email) {
            // Its UID is not given again either.
            self.store.resume_uid_after(email.uid());
            self.forget(vec![Arc::new(email)], Reason::Evicted);
            // Out as Output::Removed now, like what handle_message evicts.
            self.flush_trash();
            return Ok(());
        }
        self.handle_message(email);
        Ok(())
    }

    /// Sets `--max-age` in milliseconds (None: messages never expire).
    pub fn set_max_age(&mut self, max_age_ms: Option<u64>) {
        self.max_age_ms = max_age_ms.filter(|ms| *ms > 0);
    }

    /// Evicts the messages `--max-age` or older at `now_ms`; returns how many.
    /// Every request calls it first, so an expired message is never
    /// returned; a host also calls it on a timer so they leave memory (and
    /// disk) within a second. They count in `evicted`.
    pub fn expire_old(&mut self, now_ms: u64) -> usize {
        let before = self.store.len();
        self.expire_inboxes(now_ms);
        if let Some(cutoff) = self
            .max_age_ms
            .and_then(|max_age| now_ms.checked_sub(max_age))
        {
            // Expired: received at or before now - max_age.
            if self
                .store
                .oldest_received_ms()
                .is_some_and(|oldest| oldest <= cutoff)
            {
                let expired: Vec<Arc<Email>> = self.store.expire_before(cutoff.saturating_add(1));
                self.left_store(&expired, Reason::Evicted);
                self.forget(expired, Reason::Evicted);
            }
        }
        // Out as Output::Removed now: a host's timer may call this alone.
        self.flush_trash();
        before - self.store.len()
    }

    /// Lets `/health` report the host's storage as `storage`.
    pub fn set_storage_report(&mut self, report: StorageReport) {
        self.storage = Some(report);
    }

    /// `storage` in `/health`: the host's report, else `{"kind": "memory"}`.
    pub(super) fn storage_json(&self) -> serde_json::Value {
        match &self.storage {
            Some(report) => report(),
            None => serde_json::json!({ "kind": "memory" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApiConfig, Output, Request, Response};
    use crate::smtp::{Envelope, Incoming};
    use crate::store::{Prepared, StoreLimits};

    type TestApi = Api<()>;

    fn prepared(subject: &str) -> Prepared {
        Prepared::new(Incoming {
            envelope: Envelope {
                from: "s@x.test".into(),
                to: vec!["a@x.test".into()],
            },
            raw: format!("Subject: {subject}\r\n\r\nbody\r\n").into_bytes(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        })
    }

    fn api(max_messages: usize) -> TestApi {
        Api::new(ApiConfig {
            store: StoreLimits {
                max_messages,
                max_bytes: usize::MAX,
            },
            ..ApiConfig::default()
        })
    }

    /// The response to a request that is answered without a job.
    fn respond(api: &mut TestApi, method: &str, target: &str, now_ms: u64) -> Response {
        api.handle_request((), &Request::new(method, target), now_ms);
        let mut answer = None;
        let mut others = Vec::new();
        while let Some(output) = api.poll_output() {
            match output {
                Output::Respond((), response) if answer.is_none() => answer = Some(response),
                other => others.push(other),
            }
        }
        // What is not the answer stays queued, in order, for take_trash.
        api.outputs.extend(others);
        answer.expect("a response")
    }

    fn body(api: &mut TestApi, method: &str, target: &str, now_ms: u64) -> serde_json::Value {
        serde_json::from_str(&respond(api, method, target, now_ms).into_text()).unwrap()
    }

    /// What left the store since the last call, as the host deletes it from disk.
    fn take_trash(api: &mut TestApi) -> Vec<Removal> {
        let mut removals = Vec::new();
        while let Some(output) = api.poll_output() {
            match output {
                Output::Removed(removed) => removals.extend(removed.trash.removals()),
                other => panic!("only removals expected: {other:?}"),
            }
        }
        removals
    }

    #[test]
    fn assign_then_insert_is_deliver_and_ids_follow_assignment() {
        let mut api = api(10);
        let a = api.assign(1000, [1; 10]);
        let b = api.assign(900, [0; 10]);
        assert!(b.id > a.id);
        assert_eq!(b.received_at_ms, 1000, "receive time never goes back");
        api.handle_message(Email::new(a.id, a.received_at_ms, prepared("a")));
        api.handle_message(Email::new(b.id, b.received_at_ms, prepared("b")));
        let ids: Vec<_> = api.store().snapshot().iter().map(|e| e.id).collect();
        assert_eq!(ids, [a.id, b.id]);
        assert!(take_trash(&mut api).is_empty());
    }

    #[test]
    fn restored_messages_keep_their_uids_and_new_ones_follow_the_greatest_ever_given() {
        let mut api = api(10);
        let uids = [3u32, 7, 8];
        for (i, uid) in uids.iter().enumerate() {
            let mut email = Email::new(
                MessageId::from_u128(1 + i as u128),
                1000,
                prepared(&i.to_string()),
            );
            email.set_uid(*uid);
            api.restore(email).unwrap();
        }
        let kept: Vec<u32> = api.store().snapshot().iter().map(|e| e.uid()).collect();
        assert_eq!(kept, uids);
        // The message with UID 9 was deleted before the restart: its UID is not given again.
        api.resume_uid_after(9);
        assert_eq!(api.inboxes().uid_next(), 10);
        let id = api.deliver(prepared("new"), 2000, [0; 10]);
        assert_eq!(api.store().get(id).unwrap().uid(), 10);
        // A lower floor changes nothing.
        api.resume_uid_after(2);
        assert_eq!(api.inboxes().uid_next(), 11);
        api.set_uid_validity(0);
        assert_eq!(api.uid_validity(), 1, "0 is no UIDVALIDITY");
        api.set_uid_validity(1_764_000_000);
        assert_eq!(api.inboxes().uid_validity(), 1_764_000_000);
    }

    #[test]
    fn ids_resume_after_a_deleted_message_whatever_the_clock_says() {
        let mut before = api(10);
        let gone = before.deliver(prepared("gone"), 9_000_000, [7; 10]);
        assert_eq!(gone.time_ms(), 9_000_000);
        let mut api = api(10);
        api.resume_after(gone);
        // The clock is far behind the deleted message.
        let next = api.deliver(prepared("new"), 1_000, [0; 10]);
        assert!(next > gone);
        assert_eq!(api.store().get(next).unwrap().received_at_ms, 9_000_000);
    }

    #[test]
    fn restore_applies_todays_limits_and_ids_resume_after_the_stored_ones() {
        let mut old = api(10);
        let stored: Vec<_> = (0..5)
            .map(|i| old.deliver(prepared(&i.to_string()), 5_000_000 + i, [9; 10]))
            .collect();
        let mut api = api(3);
        for (i, id) in stored.iter().enumerate() {
            api.restore(Email::new(
                *id,
                5_000_000 + i as u64,
                prepared(&i.to_string()),
            ))
            .unwrap();
        }
        let removals = take_trash(&mut api);
        assert_eq!(
            removals,
            [Removal::One(stored[0]), Removal::One(stored[1])],
            "the oldest beyond --max-messages are evicted at load, to delete from disk"
        );
        assert_eq!(api.store().len(), 3);
        assert_eq!(api.store().evicted(), 2);
        assert_eq!(
            api.restore(Email::new(stored[3], 1, prepared("again"))),
            Err(OutOfOrder { id: stored[3] })
        );
        // The clock is behind the stored messages: new ids still sort after them.
        let next = api.deliver(prepared("new"), 1_000, [0; 10]);
        assert!(next > stored[4]);
        assert!(api.store().get(next).unwrap().received_at_ms >= 5_000_004);
    }

    #[test]
    fn a_restored_message_alone_over_todays_byte_limit_is_evicted() {
        let mut old = api(10);
        let small = old.deliver(prepared("small"), 5_000_000, [9; 10]);
        let big = old.deliver(prepared(&"x".repeat(4000)), 5_000_001, [9; 10]);
        // Started again with a byte limit the big message alone is over.
        let mut api: TestApi = Api::new(ApiConfig {
            store: StoreLimits {
                max_messages: 10,
                max_bytes: 2000,
            },
            ..ApiConfig::default()
        });
        api.restore(Email::new(small, 5_000_000, prepared("small")))
            .unwrap();
        api.restore(Email::new(big, 5_000_001, prepared(&"x".repeat(4000))))
            .unwrap();
        assert_eq!(
            take_trash(&mut api),
            [Removal::One(big)],
            "at load even the newest message goes when it alone is over the limit, and alone"
        );
        let kept: Vec<_> = api.store().snapshot().iter().map(|e| e.id).collect();
        assert_eq!(kept, [small], "what fits stays");
        assert!(api.store().bytes() <= 2000);
        assert_eq!(api.store().evicted(), 1);
        // Ids still resume after it, and a delivery now is kept as always.
        let next = api.deliver(prepared(&"y".repeat(4000)), 1_000, [0; 10]);
        assert!(next > big);
        assert_eq!(
            api.store().len(),
            1,
            "a message just received is never evicted"
        );
    }

    #[test]
    fn restored_under_the_same_limits_a_message_is_kept_as_it_was_at_delivery() {
        // Its raw bytes fit the byte limit, what the store keeps beside them
        // does not: a delivery keeps it (alone), and so must a restart.
        let limits = StoreLimits {
            max_messages: 10,
            max_bytes: 2000,
        };
        let config = || ApiConfig {
            store: limits,
            ..ApiConfig::default()
        };
        let mut running: TestApi = Api::new(config());
        let body = "x".repeat(1800);
        let id = running.deliver(prepared(&body), 5_000_000, [9; 10]);
        let email = running.store().get(id).unwrap();
        assert!(email.raw().len() <= 2000 && email.footprint() > 2000);
        assert_eq!(running.store().len(), 1);
        let mut restarted: TestApi = Api::new(config());
        restarted
            .restore(Email::new(id, 5_000_000, prepared(&body)))
            .unwrap();
        assert_eq!(
            restarted.store().len(),
            1,
            "an acknowledged message is not lost"
        );
        assert!(take_trash(&mut restarted).is_empty());
    }

    #[test]
    fn restores_out_of_order_are_refused_even_after_a_dropped_message() {
        let mut old = api(10);
        let ids: Vec<_> = (0..3)
            .map(|i| {
                old.deliver(
                    prepared(&"x".repeat(100 + 4000 * i)),
                    5_000_000 + i as u64,
                    [9; 10],
                )
            })
            .collect();
        let mut api: TestApi = Api::new(ApiConfig {
            store: StoreLimits {
                max_messages: 10,
                max_bytes: 2000,
            },
            ..ApiConfig::default()
        });
        api.restore(Email::new(ids[0], 5_000_000, prepared("a")))
            .unwrap();
        // Over the limit alone: dropped at load.
        api.restore(Email::new(ids[2], 5_000_002, prepared(&"x".repeat(8100))))
            .unwrap();
        assert_eq!(api.store().len(), 1);
        assert_eq!(
            api.restore(Email::new(ids[1], 5_000_001, prepared("b"))),
            Err(OutOfOrder { id: ids[1] })
        );
    }

    #[test]
    fn deletes_are_removals_one_by_one_or_as_a_range() {
        let mut api = api(10);
        let ids: Vec<_> = (0..4)
            .map(|i| api.deliver(prepared("m"), 1000 + i, [0; 10]))
            .collect();
        let one = format!("/api/emails/{}", ids[1]);
        body(&mut api, "DELETE", &one, 2000);
        assert_eq!(take_trash(&mut api), [Removal::One(ids[1])]);
        let all = body(&mut api, "DELETE", "/api/emails", 2000);
        assert_eq!(all["deleted"], 3);
        assert_eq!(
            take_trash(&mut api),
            [Removal::Range {
                first: ids[0],
                last: ids[3]
            }]
        );
        body(&mut api, "DELETE", "/api/emails", 2000);
        assert!(take_trash(&mut api).is_empty());
    }

    #[test]
    fn max_age_hides_and_evicts_old_messages_on_every_request() {
        let mut api = api(10);
        api.set_max_age(Some(2_000));
        let old = api.deliver(prepared("old"), 10_000, [0; 10]);
        let new = api.deliver(prepared("new"), 11_000, [0; 10]);
        let get = |api: &mut TestApi, id: MessageId, now| {
            respond(api, "GET", &format!("/api/emails/{id}/raw"), now).status
        };
        assert_eq!(get(&mut api, old, 11_999), 200);
        // At exactly max-age the message is gone, before any timer runs.
        assert_eq!(get(&mut api, old, 12_000), 404);
        assert_eq!(get(&mut api, new, 12_000), 200);
        assert_eq!(take_trash(&mut api), [Removal::One(old)]);
        let health = body(&mut api, "GET", "/health", 12_000);
        assert_eq!(health["evicted"], 1);
        assert_eq!(health["messages"], 1);
        assert_eq!(health["limits"]["maxAgeMs"], 2_000);
        assert_eq!(health["storage"]["kind"], "memory");
        assert_eq!(api.expire_old(13_000), 1);
        assert_eq!(api.store().len(), 0);
        // Called on its own (a host's timer), what it evicts comes out too.
        assert_eq!(take_trash(&mut api), [Removal::One(new)]);
        assert_eq!(api.expire_old(20_000), 0);
    }

    #[test]
    fn without_max_age_nothing_expires_and_storage_is_the_hosts_report() {
        let mut api = api(10);
        api.deliver(prepared("m"), 1, [0; 10]);
        assert_eq!(api.expire_old(u64::MAX), 0);
        api.set_storage_report(Box::new(
            || serde_json::json!({"kind": "sqlite", "ok": true}),
        ));
        let health = body(&mut api, "GET", "/health", 2);
        assert_eq!(health["storage"]["kind"], "sqlite");
        assert!(health["limits"].get("maxAgeMs").is_none());
    }
}
