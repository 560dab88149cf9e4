//! Fault injection in the wasm host: a session asks the rules of the [`Api`]
//! it was linked to, and a rule that fires comes out as a `fault` output.

use js_sys::Array;
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::outputs::outputs_of;
use crate::session::{Linked, Session};

#[wasm_bindgen]
impl Session {
    /// Makes this session ask the fault rules of `api` (`POST /api/faults`) at every stage.
    #[wasm_bindgen(js_name = useFaultsOf)]
    pub fn use_faults_of(&mut self, api: &Api) {
        self.faults = Some(api.inner.clone());
    }

    /// What to write when the client connects at `nowMs` (the time the
    /// transcript counts from; 0 when not given): the greeting, or what a
    /// `connect` rule says instead (a `fault` output first, maybe a `close`).
    #[wasm_bindgen(unchecked_return_type = "SessionOutput[]")]
    pub fn open(
        &mut self,
        #[wasm_bindgen(js_name = nowMs)] now_ms: Option<f64>,
    ) -> Result<Array, JsValue> {
        let now = match now_ms {
            Some(now_ms) => crate::js::time_ms(now_ms, "nowMs")?,
            None => 0,
        };
        self.inner.open(now, &mut Linked(self.faults.as_ref()));
        Ok(outputs_of(&self.drain()))
    }
}

#[wasm_bindgen]
impl Api {
    /// How many fault rules are held.
    #[wasm_bindgen(getter, js_name = faultCount)]
    pub fn fault_count(&self) -> usize {
        self.core().fault_count()
    }
}
