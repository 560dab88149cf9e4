//! Fault injection in the wasm host: sessions ask the rules of an [`Api`],
//! and a rule that fires comes out as a `fault` output.

use js_sys::{Array, Object};
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::outputs::outputs_of;
use crate::session::Session;

#[wasm_bindgen]
impl Session {
    /// Makes this session ask the fault rules of `api` (`POST /api/faults`) at every stage.
    #[wasm_bindgen(js_name = useFaultsOf)]
    pub fn use_faults_of(&mut self, api: &Api) {
        self.inner.set_faults(api.inner.faults());
    }

    /// What to write when the client connects: the greeting, or what a
    /// `connect` rule says instead (a `fault` output first, maybe a `close`).
    #[wasm_bindgen(unchecked_return_type = "SessionOutput[]")]
    pub fn open(&mut self) -> Array {
        outputs_of(&self.inner.open())
    }
}

#[wasm_bindgen]
impl Api {
    /// How many fault rules are held.
    #[wasm_bindgen(getter, js_name = faultCount)]
    pub fn fault_count(&self) -> usize {
        self.inner.faults().len()
    }
}

/// Seeds the probability rolls of `api`'s fault rules: `faultSeed` from the
/// config when given (repeatable runs), else `Math.random()`.
pub(crate) fn seed(api: &mailjar_core::api::Api<Object>, seed: Option<u64>) {
    let seed = seed.unwrap_or_else(|| (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64);
    api.faults().seed(seed);
}
