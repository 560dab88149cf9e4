//! The parked waits of an `Api` (`GET /api/emails/wait`): their deadlines,
//! their answers and their cancelling.

use js_sys::{Array, Object, Reflect};
use mailjar_core::api::{self, WaitId};
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::js::{MAX_SAFE_INTEGER, integer, set, time_ms};

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
        Ok(self
            .core()
            .expire(wait)
            .map_or(JsValue::UNDEFINED, |(handle, r)| woken_object(handle, r)))
    }

    /// Ends with a 408 every parked wait whose deadline is at or before `nowMs`.
    #[wasm_bindgen(js_name = expireDue, unchecked_return_type = "WaitResponse[]")]
    pub fn expire_due(
        &mut self,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Array, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        Ok(self
            .core()
            .expire_due(now)
            .into_iter()
            .map(|(wait, response)| woken_object(wait, response))
            .collect())
    }

    /// The earliest deadline among the parked waits, or undefined when none is parked.
    #[wasm_bindgen(js_name = nextDeadline)]
    pub fn next_deadline(&self) -> Option<f64> {
        self.core().next_deadline().map(|d| d as f64)
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
            .cancel(wait)
            .map_or(JsValue::UNDEFINED, |handle| waiter(&handle)))
    }

    /// Ends every parked wait (the server stops): the `waiter` of each, in wait order.
    #[wasm_bindgen(js_name = drainWaits, unchecked_return_type = "unknown[]")]
    pub fn drain_waits(&mut self) -> Array {
        self.core()
            .drain_waits()
            .into_iter()
            .map(|handle| waiter(&handle))
            .collect()
    }

    /// How many waits are parked.
    #[wasm_bindgen(getter, js_name = pendingWaits)]
    pub fn pending_waits(&self) -> usize {
        self.core().pending_waits()
    }
}

fn wait_id(value: &JsValue) -> Result<WaitId, JsValue> {
    integer(value, "waitId", 0, MAX_SAFE_INTEGER as u64).map(WaitId)
}

/// The `waiter` a wait was parked with.
fn waiter(handle: &Object) -> JsValue {
    Reflect::get(handle, &JsValue::from_str("waiter")).unwrap_or(JsValue::UNDEFINED)
}

/// The answer to a parked wait (`WaitResponse`): its handle (`{waitId,
/// waiter}`, made at park time) with the response's status and body added.
pub fn woken_object(handle: Object, response: api::Response) -> JsValue {
    set(&handle, "status", response.status);
    set(&handle, "body", response.into_text());
    handle.into()
}
