//! Values from JavaScript read into serde types: a small serde
//! `Deserializer` over `JsValue` (strings, booleans, numbers, arrays and
//! objects, all these bindings take). Every error is a `TypeError` naming
//! the field: `config.maxMessages must be a number`, `request.path is
//! required`, `config.maxMessage is not an option (the options are ...)`.
//!
//! Why not serde-wasm-bindgen 0.6.5: it builds with rustc 1.95, but it reads
//! a struct by asking for its field names only, so
//! `#[serde(deny_unknown_fields)]` never sees a misspelt key
//! (RReverser/serde-wasm-bindgen#39), and its errors do not say which field
//! was wrong, so objects and arrays had to be walked here anyway; used for
//! the values alone it made the gzipped wasm 13.7 KB larger than this
//! module does (its type errors format the value found, which links Rust's
//! float formatting).

use std::fmt;

use js_sys::{Array, Object};
use serde::de::{self, DeserializeOwned, DeserializeSeed, Expected, IntoDeserializer, Visitor};
use wasm_bindgen::{JsCast, JsValue};

use crate::js::type_error;

/// `value` as a `T`; `what` names it in errors (`config`, `request`).
pub fn read<T: DeserializeOwned>(value: JsValue, what: &str) -> Result<T, JsValue> {
    T::deserialize(Js(value)).map_err(|e| type_error(format!("{what}{}{}", e.path, e.problem)))
}

/// Like [`read`], but undefined or null (or no argument) is `T::default()`.
pub fn read_or_default<T: DeserializeOwned + Default>(
    value: Option<JsValue>,
    what: &str,
) -> Result<T, JsValue> {
    match value {
        Some(value) if !value.is_undefined() && !value.is_null() => read(value, what),
        _ => Ok(T::default()),
    }
}

/// What was wrong (` must be a string`) and where, below the value read (`.envelope.to`).
#[derive(Debug)]
pub struct ReadError {
    path: String,
    problem: String,
}

impl ReadError {
    fn new(problem: String) -> ReadError {
        ReadError {
            path: String::new(),
            problem,
        }
    }

    /// The error of a value `wanted` describes ("a string", "an array of strings").
    #[inline(never)]
    fn wanted(wanted: &dyn Expected) -> ReadError {
        ReadError::new(format!(" must be {wanted}"))
    }

    /// This error of a value found at `segment` (`.key`, `[3]`) of its parent.
    fn under(mut self, segment: fmt::Arguments<'_>) -> ReadError {
        self.path.insert_str(0, &segment.to_string());
        self
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.path, self.problem)
    }
}

impl std::error::Error for ReadError {}

impl de::Error for ReadError {
    fn custom<T: fmt::Display>(message: T) -> ReadError {
        ReadError::new(format!(": {message}"))
    }

    fn invalid_type(_: de::Unexpected<'_>, wanted: &dyn Expected) -> ReadError {
        ReadError::wanted(wanted)
    }

    fn invalid_value(_: de::Unexpected<'_>, wanted: &dyn Expected) -> ReadError {
        ReadError::wanted(wanted)
    }

    fn unknown_field(field: &str, known: &'static [&'static str]) -> ReadError {
        ReadError {
            path: format!(".{field}"),
            problem: format!(" is not an option (the options are {})", known.join(", ")),
        }
    }

    fn missing_field(field: &'static str) -> ReadError {
        ReadError {
            path: format!(".{field}"),
            problem: " is required".to_owned(),
        }
    }
}

/// A JavaScript value as a serde deserializer.
struct Js(JsValue);

impl<'de> de::Deserializer<'de> for Js {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        let value = self.0;
        if let Some(text) = value.as_string() {
            visitor.visit_string(text)
        } else if let Some(flag) = value.as_bool() {
            visitor.visit_bool(flag)
        } else if let Some(n) = value.as_f64() {
            visitor.visit_f64(n)
        } else if value.is_undefined() || value.is_null() {
            visitor.visit_unit()
        } else if Array::is_array(&value) {
            Js(value).deserialize_seq(visitor)
        } else {
            Js(value).deserialize_map(visitor)
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.0.as_string() {
            Some(text) => visitor.visit_string(text),
            None => Err(ReadError::wanted(&visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.0.as_bool() {
            Some(flag) => visitor.visit_bool(flag),
            None => Err(ReadError::wanted(&visitor)),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.0.as_f64() {
            Some(n) => visitor.visit_f64(n),
            None => Err(ReadError::wanted(&visitor)),
        }
    }

    /// A value nobody reads (a key a non-strict type ignores) is not converted.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 char bytes byte_buf unit
        unit_struct tuple tuple_struct enum identifier
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        if self.0.is_undefined() || self.0.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.0.dyn_into::<Array>() {
            Ok(array) => visitor.visit_seq(Elements {
                items: array.into_iter(),
                index: 0,
            }),
            Err(_) => Err(ReadError::wanted(&visitor)),
        }
    }

    /// Every own key of the object, so that an unknown one is seen.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        if !self.0.is_object() {
            return Err(ReadError::new(" must be an object".to_owned()));
        }
        let entries = Object::entries(self.0.unchecked_ref());
        visitor.visit_map(Entries {
            entries: entries.into_iter(),
            key: String::new(),
            value: JsValue::UNDEFINED,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        self.deserialize_map(visitor)
    }
}

/// The `[key, value]` pairs of `Object.entries`, but those whose value is undefined.
struct Entries {
    entries: js_sys::ArrayIntoIter,
    key: String,
    value: JsValue,
}

impl Entries {
    /// Moves to the next key whose value is not undefined (a key set to
    /// undefined is one not set, as in JSON); false at the end. Not generic,
    /// and kept out of line: the readers of every struct share it.
    #[inline(never)]
    fn advance(&mut self) -> bool {
        for pair in self.entries.by_ref() {
            let pair: Array = pair.unchecked_into();
            let value = pair.get(1);
            if !value.is_undefined() {
                self.key = pair.get(0).as_string().unwrap_or_default();
                self.value = value;
                return true;
            }
        }
        false
    }

    /// The value of the current key, to read.
    fn take_value(&mut self) -> Js {
        Js(std::mem::replace(&mut self.value, JsValue::UNDEFINED))
    }

    /// `error`, of the current key's value, as one of this object's.
    #[inline(never)]
    fn at_key(&self, error: ReadError) -> ReadError {
        error.under(format_args!(".{}", self.key))
    }
}

impl<'de> de::MapAccess<'de> for Entries {
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ReadError> {
        if !self.advance() {
            return Ok(None);
        }
        seed.deserialize(self.key.as_str().into_deserializer())
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ReadError> {
        let value = self.take_value();
        seed.deserialize(value).map_err(|e| self.at_key(e))
    }
}

/// The items of an array.
struct Elements {
    items: js_sys::ArrayIntoIter,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for Elements {
    type Error = ReadError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ReadError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(Js(item))
            .map(Some)
            .map_err(|e| e.under(format_args!("[{index}]")))
    }
}

/// A number from JavaScript (any: NaN too), checked where it is used.
#[derive(Debug, Clone, Copy)]
pub struct Number(pub f64);

impl<'de> de::Deserialize<'de> for Number {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Number, D::Error> {
        deserializer.deserialize_f64(NumberVisitor).map(Number)
    }
}

struct NumberVisitor;

impl Visitor<'_> for NumberVisitor {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<f64, E> {
        Ok(n)
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<f64, E> {
        Ok(n as f64)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<f64, E> {
        Ok(n as f64)
    }
}

/// An array of strings; any other value, or an item that is no string, is
/// the one error "must be an array of strings".
#[derive(Debug, Clone, Default)]
pub struct Strings(pub Vec<String>);

impl<'de> de::Deserialize<'de> for Strings {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Strings, D::Error> {
        deserializer.deserialize_seq(StringsVisitor).map(Strings)
    }
}

struct StringsVisitor;

impl<'de> Visitor<'de> for StringsVisitor {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of strings")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut items: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        loop {
            match items.next_element::<String>() {
                Ok(Some(item)) => out.push(item),
                Ok(None) => return Ok(out),
                Err(_) => return Err(de::Error::invalid_type(de::Unexpected::Seq, &self)),
            }
        }
    }
}

/// What the TypeScript declarations call these types (`src/types.rs`).
#[cfg(test)]
mod typescript {
    use ts_rs::{Config, TS};

    impl TS for super::Number {
        type WithoutGenerics = Self;
        type OptionInnerType = Self;
        fn name(_: &Config) -> String {
            "number".to_owned()
        }
        fn inline(_: &Config) -> String {
            "number".to_owned()
        }
    }

    impl TS for super::Strings {
        type WithoutGenerics = Self;
        type OptionInnerType = Self;
        fn name(_: &Config) -> String {
            "string[]".to_owned()
        }
        fn inline(_: &Config) -> String {
            "string[]".to_owned()
        }
    }
}
