//! Randomness for message ids and session seeds, from `crypto.getRandomValues`.

use js_sys::Uint8Array;
use mailjar_core::id::Entropy;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues, catch)]
    fn get_random_values(buffer: &Uint8Array) -> Result<JsValue, JsValue>;
}

/// Random bytes drawn from `crypto.getRandomValues` a block at a time (one
/// call per 409 ids rather than one each: the call costs more than the id).
struct EntropyPool {
    bytes: [u8; ENTROPY_BLOCK],
    used: usize,
}

/// The bytes fetched per `crypto.getRandomValues` call (its limit is 65536).
const ENTROPY_BLOCK: usize = 4096;

thread_local! {
    static ENTROPY: std::cell::RefCell<EntropyPool> = const {
        std::cell::RefCell::new(EntropyPool { bytes: [0; ENTROPY_BLOCK], used: ENTROPY_BLOCK })
    };
}

/// Fresh random bytes for one id (or one session's seed).
pub fn entropy() -> Entropy {
    let mut out = Entropy::default();
    ENTROPY.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.used + Entropy::default().len() > ENTROPY_BLOCK {
            let buffer = Uint8Array::new_with_length(ENTROPY_BLOCK as u32);
            // Without crypto the ids stay unique: the generator counts up within a millisecond.
            if get_random_values(&buffer).is_ok() {
                buffer.copy_to(&mut pool.bytes);
            } else {
                pool.bytes = [0; ENTROPY_BLOCK];
            }
            pool.used = 0;
        }
        let (start, n) = (pool.used, out.len());
        out.copy_from_slice(&pool.bytes[start..start + n]);
        pool.used += n;
    });
    out
}

/// The seed of the fault rules' probability rolls: `faultSeed` from the
/// config when given (repeatable runs), else `Math.random()`.
pub(crate) fn seed(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64)
}
