//! Each inbox's `maxAgeMs`: an index of the inboxes by when their oldest
//! message reaches it, kept up to date whenever an inbox's mail changes, so
//! that every input (each message, each request) expires what is due and
//! finds the next deadline in O(log inboxes), not by looking at every inbox.

use super::super::{Api, Reason};
use crate::inbox::InboxId;

impl<W> Api<W> {
    /// Files an inbox again under the time its oldest message expires (or
    /// takes it out: no `maxAgeMs`, or no mail), after its mail changed. O(log inboxes).
    pub(in crate::api) fn rearm(&mut self, id: InboxId) {
        let Some(inbox) = self.inbox_boxes.get_mut(&id) else {
            return;
        };
        let due = inbox.limits.max_age_ms.and_then(|max_age| {
            let oldest = inbox.store.oldest_received_ms()?;
            Some(oldest.saturating_add(max_age))
        });
        if due == inbox.due {
            return;
        }
        if let Some(old) = inbox.due {
            self.inbox_expiries.remove(&(old, id));
        }
        if let Some(new) = due {
            self.inbox_expiries.insert((new, id));
        }
        inbox.due = due;
    }

    /// Evicts the messages of every inbox that are older than its
    /// `maxAgeMs` at `now_ms`: only the inboxes that have some are looked at.
    pub(in crate::api) fn expire_inboxes(&mut self, now_ms: u64) {
        while let Some(&(due, id)) = self.inbox_expiries.first() {
            if due > now_ms {
                return;
            }
            let Some(inbox) = self.inbox_boxes.get_mut(&id) else {
                self.inbox_expiries.remove(&(due, id));
                continue;
            };
            let max_age = inbox.limits.max_age_ms.unwrap_or(0);
            let cutoff = now_ms.saturating_sub(max_age);
            let expired = inbox.store.expire_before(cutoff.saturating_add(1));
            self.log_left(id, &expired, Reason::Evicted);
            self.left_inbox(id, expired, Reason::Evicted);
            self.rearm(id);
            if self.inbox_expiries.first() == Some(&(due, id)) {
                // Nothing left to expire there (it cannot happen): never loop.
                self.inbox_expiries.remove(&(due, id));
                if let Some(inbox) = self.inbox_boxes.get_mut(&id) {
                    inbox.due = None;
                }
            }
        }
    }

    /// When an inbox's oldest message reaches its `maxAgeMs`: the earliest of them. O(log inboxes).
    pub(in crate::api) fn next_inbox_expiry(&self) -> Option<u64> {
        self.inbox_expiries.first().map(|(due, _)| *due)
    }
}

#[cfg(test)]
mod tests {
    use crate::api::{Answered, Api, ApiConfig, Request};
    use crate::budget::StoppedClock;
    use crate::smtp::{Envelope, Incoming};
    use crate::store::Prepared;

    const NOW: u64 = 1_763_779_327_000;

    fn deliver(api: &mut Api<u64>, to: &str, at: u64) {
        let message = Prepared::new(Incoming {
            envelope: Envelope {
                from: "app@app.test".into(),
                to: vec![to.into()],
            },
            raw: b"Subject: s\r\n\r\nhello\r\n".to_vec(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        });
        api.deliver(message, at, [1; 10]);
    }

    #[test]
    fn the_next_deadline_is_the_earliest_inbox_expiry_and_moves_as_mail_goes() {
        let mut api: Api<u64> = Api::new(ApiConfig {
            access_control: true,
            ..ApiConfig::default()
        });
        // Many inboxes without maxAgeMs are never looked at; two with one.
        for (n, body) in [
            r#"{"name":"slow","addresses":["*@slow.test"],"maxAgeMs":5000}"#,
            r#"{"name":"fast","addresses":["*@fast.test"],"maxAgeMs":1000}"#,
        ]
        .into_iter()
        .chain((0..50).map(|_| "")) // placeholders for the plain inboxes below
        .enumerate()
        {
            let body = if body.is_empty() {
                format!(r#"{{"name":"plain-{n}","addresses":["*@plain-{n}.test"]}}"#)
            } else {
                body.to_owned()
            };
            let mut request = Request::new("POST", "/api/inboxes");
            request.body = body.into();
            request.entropy = [n as u8 + 1; 32];
            let Answered::Ready(r) = api.answer(0, &request, NOW, &StoppedClock) else {
                panic!("not made");
            };
            assert_eq!(r.status, 200);
        }
        assert_eq!(api.poll_timeout(), None);
        deliver(&mut api, "x@plain-9.test", NOW);
        assert_eq!(api.poll_timeout(), None, "no maxAgeMs, no deadline");
        deliver(&mut api, "x@slow.test", NOW);
        deliver(&mut api, "x@fast.test", NOW + 10);
        deliver(&mut api, "y@fast.test", NOW + 500);
        assert_eq!(api.poll_timeout(), Some(NOW + 1010));
        api.handle_timeout(NOW + 1010);
        assert_eq!(api.store().len(), 3, "fast's first message expired");
        assert_eq!(api.poll_timeout(), Some(NOW + 1500));
        api.handle_timeout(NOW + 1500);
        assert_eq!(api.poll_timeout(), Some(NOW + 5000));
        api.handle_timeout(NOW + 5000);
        assert_eq!(api.store().len(), 1, "the plain inbox's message stays");
        assert_eq!(api.poll_timeout(), None);
    }
}
