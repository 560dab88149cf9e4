//! The event streams of an `Api` (`GET /api/events`), read a batch at a time.

use js_sys::{Array, Object};
use mailjar_core::api::{self, NextEvents, SubscriberId};
use wasm_bindgen::prelude::*;

use crate::api::{Api, DateClock};
use crate::js::{MAX_SAFE_INTEGER, integer, set};

#[wasm_bindgen]
impl Api {
    /// What is new for an event stream: its replay first, then live events;
    /// `idle` when there is nothing yet (ask again once `eventHead` moved),
    /// `ended` when the stream is over.
    #[wasm_bindgen(js_name = nextEvents, unchecked_return_type = "NextEventsResult")]
    pub fn next_events(
        &mut self,
        #[wasm_bindgen(js_name = subscriberId, unchecked_param_type = "number")] id: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let id = subscriber_id(id)?;
        let (events, idle, mut ended) = self.take_events(id);
        let list = Array::new();
        for event in &events {
            list.push(&event_object(event));
            if event.ends_stream() {
                ended = true;
                break;
            }
        }
        if ended {
            self.unsubscribe_id(id);
        }
        let object = Object::new();
        set(&object, "events", list);
        set(&object, "idle", idle);
        set(&object, "ended", ended);
        Ok(object.into())
    }

    /// Ends an event stream; false when it was not open.
    pub fn unsubscribe(
        &mut self,
        #[wasm_bindgen(js_name = subscriberId, unchecked_param_type = "number")] id: &JsValue,
    ) -> Result<bool, JsValue> {
        let id = subscriber_id(id)?;
        Ok(self.unsubscribe_id(id))
    }

    /// How many changes have been logged for event streams; idle streams have news when it moves.
    #[wasm_bindgen(getter, js_name = eventHead)]
    pub fn event_head(&self) -> f64 {
        self.core().event_head() as f64
    }
}

impl Api {
    /// The next events of a stream, whether it is idle, and whether it ended.
    fn take_events(&mut self, id: SubscriberId) -> (Vec<api::Event>, bool, bool) {
        let next = self.core().poll_events(id);
        match next {
            NextEvents::Batch(batch) => {
                let mut ran = batch.run(&DateClock);
                if let Some(progress) = ran.progress.take() {
                    self.core().handle_progress(progress);
                }
                (ran.events, false, false)
            }
            NextEvents::Idle => (Vec::new(), true, false),
            NextEvents::Overflow => (vec![api::Event::Overflow], false, true),
            NextEvents::Ended => (Vec::new(), false, true),
        }
    }

    fn unsubscribe_id(&mut self, id: SubscriberId) -> bool {
        self.core().handle_unsubscribe(id)
    }
}

fn subscriber_id(value: &JsValue) -> Result<SubscriberId, JsValue> {
    integer(value, "subscriberId", 0, MAX_SAFE_INTEGER as u64).map(SubscriberId)
}

/// One event as a `StreamEvent`.
fn event_object(event: &api::Event) -> JsValue {
    let object = Object::new();
    set(&object, "event", event.name());
    if let Some(id) = event.id() {
        set(&object, "id", id.to_string());
    }
    set(
        &object,
        "data",
        String::from_utf8_lossy(event.data()).into_owned(),
    );
    object.into()
}
