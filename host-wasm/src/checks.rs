//! The HTML compatibility check in the wasm build: the core's
//! [`mailjar_core::checks::html`], on an HTML text JavaScript passes in.

use wasm_bindgen::prelude::*;

use crate::js;

/// The HTML and CSS features `html` uses, weighed by their support in the
/// common mail clients: `{score, clients, warnings: [{feature, title,
/// supported, partial, unsupported}]}`, as `GET /api/emails/:id/checks/html`.
#[wasm_bindgen(js_name = checkHtml)]
pub fn check_html(html: JsValue) -> Result<JsValue, JsValue> {
    let Some(html) = html.as_string() else {
        return Err(js_sys::TypeError::new("checkHtml(html): html must be a string").into());
    };
    Ok(js::json_value(&mailjar_core::checks::html::check(&html)))
}

/// The names of the mail clients [`check_html`] weighs.
#[wasm_bindgen(js_name = htmlCheckClients)]
pub fn html_check_clients() -> js_sys::Array {
    js::json_array(mailjar_core::checks::html::clients())
}
