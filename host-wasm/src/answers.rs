//! Answers to parked waits as JavaScript gets them.

use js_sys::Object;
use mailjar_core::api;
use wasm_bindgen::JsValue;

use crate::js::set;

/// The answer to a parked wait (`WaitResponse`): its handle (`{waitId,
/// waiter}`, made at park time) with the response's status and body added.
pub fn woken_object(handle: Object, response: api::Response) -> JsValue {
    set(&handle, "status", response.status);
    set(&handle, "body", response.into_text());
    handle.into()
}
