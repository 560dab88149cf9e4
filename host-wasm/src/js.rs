//! Small conversions between JavaScript values and Rust ones: errors,
//! numbers, times, bytes, and objects built property by property.

use js_sys::{Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

/// The largest integer a JavaScript number holds exactly.
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The last millisecond of the year 9999, the last one RFC 3339 can write.
const MAX_TIME_MS: f64 = 253_402_300_799_999.0;

/// A `TypeError` to throw.
pub fn type_error(message: impl AsRef<str>) -> JsValue {
    js_sys::TypeError::new(message.as_ref()).into()
}

/// A `RangeError` to throw.
pub fn range_error(message: impl AsRef<str>) -> JsValue {
    js_sys::RangeError::new(message.as_ref()).into()
}

/// Sets `object[key]`.
pub fn set(object: &Object, key: &str, value: impl Into<JsValue>) {
    // Setting a plain data property on a fresh plain object cannot fail.
    let _ = Reflect::set(object, &JsValue::from_str(key), &value.into());
}

/// A number as JavaScript writes it (`String(n)`): `1.5`, `NaN`, `Infinity`.
/// Rust's float formatting would cost the wasm about 14 KB for error texts alone.
pub fn number_text(n: f64) -> String {
    js_sys::Number::from(n)
        .to_string_with_radix(10)
        .map_or_else(|_| String::new(), String::from)
}

/// A whole number in `min..=max` from a JavaScript value.
pub fn integer(value: &JsValue, name: &str, min: u64, max: u64) -> Result<u64, JsValue> {
    let Some(n) = value.as_f64() else {
        return Err(type_error(format!("{name} must be a number")));
    };
    whole_number(n, name, min, max)
}

/// `n` as a whole number in `min..=max`.
pub fn whole_number(n: f64, name: &str, min: u64, max: u64) -> Result<u64, JsValue> {
    if !n.is_finite() || n.fract() != 0.0 || n < min as f64 || n > max as f64 {
        return Err(range_error(format!(
            "{name} must be an integer from {min} to {max}, not {}",
            number_text(n)
        )));
    }
    Ok(n as u64)
}

/// `n` as a count of at least `min` that fits in `usize` and a JavaScript number.
pub fn count(n: f64, name: &str, min: u64) -> Result<usize, JsValue> {
    let max = (usize::MAX as u64).min(MAX_SAFE_INTEGER as u64);
    let n = whole_number(n, name, min, max)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Milliseconds since the Unix epoch from JavaScript (`Date.now()`, or a fake clock).
pub fn time_ms(now_ms: f64, name: &str) -> Result<u64, JsValue> {
    if !now_ms.is_finite() || !(0.0..=MAX_TIME_MS).contains(&now_ms) {
        return Err(range_error(format!(
            "{name} must be a time in milliseconds since the Unix epoch, from 0 to {} (the end of the year 9999), not {}",
            MAX_TIME_MS as u64,
            number_text(now_ms)
        )));
    }
    Ok(now_ms.floor() as u64)
}

/// Bytes from a Uint8Array (a Node Buffer is one), any other ArrayBuffer view, or an ArrayBuffer.
pub fn bytes_of(value: &JsValue, name: &str) -> Result<Vec<u8>, JsValue> {
    if let Some(array) = value.dyn_ref::<Uint8Array>() {
        return Ok(array.to_vec());
    }
    if let Some(buffer) = value.dyn_ref::<js_sys::ArrayBuffer>() {
        return Ok(Uint8Array::new(buffer).to_vec());
    }
    if js_sys::ArrayBuffer::is_view(value) {
        let buffer = Reflect::get(value, &JsValue::from_str("buffer"))?;
        let offset = Reflect::get(value, &JsValue::from_str("byteOffset"))?;
        let length = Reflect::get(value, &JsValue::from_str("byteLength"))?;
        if let (Some(offset), Some(length)) = (offset.as_f64(), length.as_f64()) {
            let view =
                Uint8Array::new_with_byte_offset_and_length(&buffer, offset as u32, length as u32);
            return Ok(view.to_vec());
        }
    }
    Err(type_error(format!("{name} must be a Uint8Array")))
}

/// Bytes from JavaScript: a string as UTF-8, or a Uint8Array (`name` says which argument, in the error).
pub fn input_bytes(value: &JsValue, name: &str) -> Result<Vec<u8>, JsValue> {
    match value.as_string() {
        Some(text) => Ok(text.into_bytes()),
        None => bytes_of(value, name),
    }
}

/// A serialisable value as a JavaScript value (through JSON).
pub fn json_value(value: &impl serde::Serialize) -> JsValue {
    serde_json::to_string(value)
        .ok()
        .and_then(|text| js_sys::JSON::parse(&text).ok())
        .unwrap_or(JsValue::NULL)
}

/// Items as a JavaScript array, through their JSON text.
pub fn json_array(items: &[impl serde::Serialize]) -> js_sys::Array {
    serde_json::to_string(items)
        .ok()
        .and_then(|text| js_sys::JSON::parse(&text).ok())
        .and_then(|value| value.dyn_into::<js_sys::Array>().ok())
        .unwrap_or_default()
}
