//! Fault injection in the wasm host: a session asks the rules of the [`Api`]
//! it was linked to, and a rule that fires comes out as a `fault` output.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Object};
use mailjar_core::api;
use mailjar_core::smtp::{FaultCheck, FaultEvent, Fired};
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::outputs::outputs_of;
use crate::session::Session;

/// The core API a session asks for faults, shared with its `Api`.
pub(crate) type Rules = Rc<RefCell<api::Api<Object>>>;

/// Asks the linked API's rules, if the session has one; borrowed only for the question.
pub(crate) struct Linked<'a>(pub Option<&'a Rules>);

impl FaultCheck for Linked<'_> {
    fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        self.0?.borrow_mut().fire_fault(event)
    }
}

#[wasm_bindgen]
impl Session {
    /// Makes this session ask the fault rules of `api` (`POST /api/faults`) at every stage.
    #[wasm_bindgen(js_name = useFaultsOf)]
    pub fn use_faults_of(&mut self, api: &Api) {
        self.faults = Some(api.inner.clone());
    }

    /// What to write when the client connects: the greeting, or what a
    /// `connect` rule says instead (a `fault` output first, maybe a `close`).
    #[wasm_bindgen(unchecked_return_type = "SessionOutput[]")]
    pub fn open(&mut self) -> Array {
        self.inner.open(0, &mut Linked(self.faults.as_ref()));
        outputs_of(&self.drain())
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

/// The seed of the fault rules' probability rolls: `faultSeed` from the
/// config when given (repeatable runs), else `Math.random()`.
pub(crate) fn seed(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64)
}
