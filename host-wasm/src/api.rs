//! `Api`: the store, the filters and every endpoint of the JSON HTTP API,
//! for JavaScript. Parked waits are in `src/waits.rs`, event streams in
//! `src/events.rs`.

use std::cell::{RefCell, RefMut};
use std::rc::Rc;

use js_sys::{Array, Object, Uint8Array};
use mailjar_core::api::{self, Answered};
use mailjar_core::budget::Clock;
use mailjar_core::smtp::{Envelope, Incoming};
use mailjar_core::store::Prepared;
use wasm_bindgen::prelude::*;

use crate::answers::woken_object;
use crate::config::ApiConfig;
use crate::entropy::entropy;
use crate::inputs::{ApiRequest, DeliverMessage, SmtpFacts};
use crate::js::{input_bytes, set, time_ms};
use crate::read::{Strings, read, read_or_default};

#[wasm_bindgen]
extern "C" {
    /// The optional configuration object of `new Api(config)`.
    #[wasm_bindgen(typescript_type = "ApiConfig")]
    pub type ApiConfigObject;
}

/// JavaScript's clock, for the pattern budget: `Date.now()` in nanoseconds.
pub struct DateClock;

impl Clock for DateClock {
    fn nanos(&self) -> u64 {
        (js_sys::Date::now() * 1_000_000.0) as u64
    }
}

/// The JSON HTTP API: the message store, the filters, every endpoint and the parked waits.
///
/// Time comes in as `nowMs` (milliseconds since the Unix epoch); the host
/// keeps a timer per parked wait and calls `expire` at its deadline, or
/// `expireDue(now)` from time to time.
#[wasm_bindgen]
pub struct Api {
    /// Each parked wait's handle is `{waitId, waiter}`.
    /// Shared with the sessions that ask its fault rules (`Session.useFaultsOf`).
    pub(crate) inner: Rc<RefCell<api::Api<Object>>>,
    /// Answers to parked waits woken by `deliverRaw` and `Session.receiveInto`, for `takeWoken`.
    woken: Vec<JsValue>,
}

#[wasm_bindgen]
impl Api {
    /// An API over an empty store, with the defaults or what `config` gives.
    #[wasm_bindgen(constructor)]
    pub fn new(config: Option<ApiConfigObject>) -> Result<Api, JsValue> {
        crate::install_panic_hook();
        let config: ApiConfig = read_or_default(config.map(Into::into), "config")?;
        let (mut config, fault_seed) = config.into_core()?;
        config.fault_seed = crate::entropy::seed(fault_seed);
        let mut core = api::Api::new(config);
        // The store lives as long as this object: a new one is a new UIDVALIDITY.
        core.set_uid_validity(crate::entropy::seed(None) as u32);
        Ok(Api {
            inner: Rc::new(RefCell::new(core)),
            woken: Vec::new(),
        })
    }

    /// Answers a request now (`kind: "ready"`), parks it as a wait (`kind:
    /// "wait"`) kept with `waiter` (any value, given back with its answer),
    /// or opens an event stream (`kind: "subscribe"`).
    #[wasm_bindgen(unchecked_return_type = "Outcome")]
    pub fn handle(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "ApiRequest")] request: JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
        #[wasm_bindgen(unchecked_param_type = "unknown")] waiter: Option<JsValue>,
    ) -> Result<JsValue, JsValue> {
        let request = read::<ApiRequest>(request, "request")?.into_core();
        let now = time_ms(now_ms, "nowMs")?;
        // The handle the core keeps with a parked wait: `waitId` is set once it is known.
        let handle = Object::new();
        set(&handle, "waiter", waiter.unwrap_or(JsValue::UNDEFINED));
        let answered = self
            .core()
            .answer(handle.clone(), &request, now, &DateClock);
        let object = match answered {
            Answered::Ready(response) => ready_object(response),
            Answered::Waiting { id, deadline_ms } => {
                set(&handle, "waitId", id.0 as f64);
                let object = Object::new();
                set(&object, "kind", "wait");
                set(&object, "waitId", id.0 as f64);
                set(&object, "deadline", deadline_ms as f64);
                object
            }
            Answered::Subscribed(subscription) => {
                let object = Object::new();
                set(&object, "kind", "subscribe");
                set(&object, "subscriberId", subscription.id.0 as f64);
                object
            }
        };
        Ok(object.into())
    }

    /// The stored message's bytes exactly as received; undefined when no message has this id.
    pub fn raw(&self, id: &str) -> Option<Uint8Array> {
        let email = self.core().store().get(id.parse().ok()?)?.clone();
        Some(Uint8Array::from(email.raw()))
    }

    /// The decoded bytes of attachment `index` (0-based, as in the message's
    /// `attachments`); undefined when there is no such message or attachment.
    pub fn attachment(&self, id: &str, index: f64) -> Option<Uint8Array> {
        let valid = index.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&index);
        let index = valid.then_some(index as usize)?;
        let email = self.core().store().get(id.parse().ok()?)?.clone();
        let (bytes, _) = mailjar_core::api::attachment_bytes(&email, index)?;
        Some(Uint8Array::from(bytes.as_slice()))
    }

    /// Stores a message received at `nowMs`, then answers every parked wait it matches.
    #[wasm_bindgen(unchecked_return_type = "Delivered")]
    pub fn deliver(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "DeliverMessage")] message: JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<JsValue, JsValue> {
        let incoming = DeliverMessage::read(message)?;
        let now = time_ms(now_ms, "nowMs")?;
        let delivered =
            self.core()
                .deliver_and_wake(Prepared::new(incoming), now, entropy(), &DateClock);
        let object = Object::new();
        set(&object, "id", delivered.id.to_string());
        let woken: Array = delivered
            .woken
            .into_iter()
            .map(|(wait, response)| woken_object(wait, response))
            .collect();
        set(&object, "woken", woken);
        Ok(object.into())
    }

    /// Stores `raw` (a string is stored as UTF-8) with the envelope `from`,
    /// `to` and the optional `smtp` facts (`{helo, remoteAddr, tls, auth}`),
    /// received at `nowMs`; returns its id. The answers to the parked waits
    /// it woke are kept for `takeWoken()`. The same as `deliver`, in fewer
    /// crossings into wasm.
    #[wasm_bindgen(js_name = deliverRaw)]
    pub fn deliver_raw(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | string")] raw: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] from: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string[]")] to: JsValue,
        #[wasm_bindgen(unchecked_param_type = "SmtpFacts | undefined")] smtp: JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<String, JsValue> {
        let from: String = read(from, "envelope.from")?;
        let Strings(to) = read(to, "envelope.to")?;
        let raw = input_bytes(raw, "raw")?;
        let (helo, session) = read_or_default::<SmtpFacts>(Some(smtp), "smtp")?.into_core();
        let now = time_ms(now_ms, "nowMs")?;
        let incoming = Incoming {
            envelope: Envelope { from, to },
            raw,
            helo,
            session,
            transcript: Default::default(),
        };
        Ok(self.store(incoming, now))
    }

    /// The answers to the parked waits woken since the last call (by
    /// `deliverRaw` or `Session.receiveInto`); undefined when there are none.
    #[wasm_bindgen(js_name = takeWoken, unchecked_return_type = "WaitResponse[] | undefined")]
    pub fn take_woken(&mut self) -> Option<Array> {
        if self.woken.is_empty() {
            return None;
        }
        Some(self.woken.drain(..).collect())
    }

    /// How many messages are stored.
    #[wasm_bindgen(getter, js_name = messageCount)]
    pub fn message_count(&self) -> usize {
        self.core().store().len()
    }
}

impl Api {
    /// The core's API, borrowed for one call (never held across another).
    pub(crate) fn core(&self) -> RefMut<'_, api::Api<Object>> {
        self.inner.borrow_mut()
    }

    /// Stores a message received at `now`; keeps the answers to the waits it woke.
    pub(crate) fn store(&mut self, incoming: Incoming, now: u64) -> String {
        grow_ahead();
        let delivered =
            self.core()
                .deliver_and_wake(Prepared::new(incoming), now, entropy(), &DateClock);
        self.woken.extend(
            delivered
                .woken
                .into_iter()
                .map(|(wait, response)| woken_object(wait, response)),
        );
        delivered.id.to_string()
    }

    /// Whether answers to woken waits wait for `takeWoken()`.
    pub(crate) fn has_woken(&self) -> bool {
        !self.woken.is_empty()
    }
}

/// Makes the wasm memory grow by a quarter at a time rather than by the
/// 64 KiB the allocator asks for: every `memory.grow` costs the engine a
/// resize and an external-memory GC check, and a store that keeps thousands
/// of messages would otherwise grow it every dozen deliveries. When the
/// memory grew since the last call, a block of a quarter of it is allocated
/// and freed at once: it stays with the allocator as free space.
fn grow_ahead() {
    #[cfg(target_arch = "wasm32")]
    {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static SEEN: AtomicUsize = AtomicUsize::new(0);
        let pages = core::arch::wasm32::memory_size(0);
        if pages != SEEN.load(Ordering::Relaxed) {
            drop(Vec::<u8>::with_capacity(pages * 65536 / 4));
            SEEN.store(core::arch::wasm32::memory_size(0), Ordering::Relaxed);
        }
    }
}

/// A response to send now, as a `ReadyOutcome`: `{kind, status, body,
/// allow?, contentType, headers, bytes?}`.
fn ready_object(response: api::Response) -> Object {
    let object = Object::new();
    set(&object, "kind", "ready");
    set(&object, "status", response.status);
    if let Some(allow) = response.header("allow") {
        set(&object, "allow", allow);
    }
    set(&object, "contentType", response.content_type.as_ref());
    let headers = Object::new();
    for (name, value) in &response.headers {
        set(&headers, &name.to_ascii_lowercase(), value.as_str());
    }
    set(&object, "headers", headers);
    if response.content_type == mailjar_core::api::JSON {
        set(&object, "body", response.into_text());
    } else {
        let bytes = response.body.collect();
        set(&object, "body", String::from_utf8_lossy(&bytes).as_ref());
        set(&object, "bytes", Uint8Array::from(bytes.as_slice()));
    }
    object
}
