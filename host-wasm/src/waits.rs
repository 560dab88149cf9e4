//! The parked waits of an `Api` (`GET /api/emails/wait`): their deadlines,
//! their answers and their cancelling.

use js_sys::{Array, Object, Reflect};
use mailjar_core::api::{Output, RequestId};
use wasm_bindgen::prelude::*;

use crate::answers::woken_object;
use crate::api::Api;
use crate::js::{MAX_SAFE_INTEGER, integer, time_ms};

#[wasm_bindgen]
impl Api {
    /// Ends a parked wait at its deadline: its 408 with its `waiter`;
    /// undefined when it was already answered or cancelled.
    #[wasm_bindgen(unchecked_return_type = "WaitResponse | undefined")]
    pub fn expire(
        &mut self,
        #[wasm_bindgen(js_name = waitId, unchecked_param_type = "number")] wait: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let wait = wait_id(wait)?;
        self.core().handle_expire(wait);
        Ok(self.answers().pop().unwrap_or(JsValue::UNDEFINED))
    }

    /// Ends with a 408 every parked wait whose deadline is at or before
    /// `nowMs` (and evicts the messages `maxAgeMs` or older).
    #[wasm_bindgen(js_name = expireDue, unchecked_return_type = "WaitResponse[]")]
    pub fn expire_due(
        &mut self,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Array, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.core().handle_timeout(now);
        Ok(self.answers().into_iter().collect())
    }

    /// When to call `expireDue` next: the earliest deadline among the parked
    /// waits (or of `maxAgeMs`); undefined when there is none.
    #[wasm_bindgen(js_name = nextDeadline)]
    pub fn next_deadline(&self) -> Option<f64> {
        self.core().poll_timeout().map(|d| d as f64)
    }

    /// Forgets a parked wait whose client went away: the `waiter` it was
    /// parked with, or undefined when it was not parked.
    #[wasm_bindgen(unchecked_return_type = "unknown")]
    pub fn cancel(
        &mut self,
        #[wasm_bindgen(js_name = waitId, unchecked_param_type = "number")] wait: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let wait = wait_id(wait)?;
        Ok(self
            .core()
            .handle_cancel(wait)
            .map_or(JsValue::UNDEFINED, |handle| waiter(&handle)))
    }

    /// Ends every parked wait (the server stops): the `waiter` of each, in wait order.
    #[wasm_bindgen(js_name = drainWaits, unchecked_return_type = "unknown[]")]
    pub fn drain_waits(&mut self) -> Array {
        self.core().handle_shutdown();
        let mut waiters = Vec::new();
        loop {
            let output = self.core().poll_output();
            match output {
                Some(Output::Respond(handle, _)) => waiters.push(waiter(&handle)),
                Some(_) => {}
                None => break,
            }
        }
        waiters.into_iter().collect()
    }

    /// How many waits are parked.
    #[wasm_bindgen(getter, js_name = pendingWaits)]
    pub fn pending_waits(&self) -> usize {
        self.core().pending_waits()
    }
}

impl Api {
    /// The answers the core has for parked waits, as `WaitResponse`s in
    /// order; what left the store is freed (this host has no lock to keep short).
    fn answers(&mut self) -> Vec<JsValue> {
        let mut answers = Vec::new();
        loop {
            let output = self.core().poll_output();
            match output {
                Some(Output::Respond(handle, response)) => {
                    answers.push(woken_object(handle, response))
                }
                Some(Output::Match(batch)) => {
                    let matches = batch.run(&crate::api::DateClock);
                    self.core().handle_matches(matches);
                }
                Some(_) => {}
                None => break,
            }
        }
        answers
    }
}

fn wait_id(value: &JsValue) -> Result<RequestId, JsValue> {
    integer(value, "waitId", 0, MAX_SAFE_INTEGER as u64).map(RequestId)
}

/// The `waiter` a wait was parked with.
fn waiter(handle: &Object) -> JsValue {
    Reflect::get(handle, &JsValue::from_str("waiter")).unwrap_or(JsValue::UNDEFINED)
}
