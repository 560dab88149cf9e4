//! A JSON reader that refuses a key given twice in one object.
//!
//! serde_json's `Value` keeps the last of two equal keys, so a rule written
//! `{"times": 1, "times": null}` would be read as one the client may not have
//! meant. This reads the same tree through serde's own deserializer and stops
//! at the first key that repeats, naming it with its path (`action.reply.code`).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Reads `body` as one JSON value, refusing duplicate keys at any depth; the error says what
/// is wrong (for a duplicate, its path: `action.reply.code`).
pub(super) fn parse_unique(body: &[u8]) -> Result<Value, String> {
    let mut duplicate = None;
    let mut reader = serde_json::Deserializer::from_slice(body);
    let seed = Unique {
        path: String::new(),
        duplicate: &mut duplicate,
    };
    let value = seed.deserialize(&mut reader).and_then(|value| {
        reader.end()?;
        Ok(value)
    });
    match (value, duplicate) {
        (_, Some(path)) => Err(format!("duplicate field {path:?}: a field may appear once")),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(format!("the body is not valid JSON: {e}")),
    }
}

/// Reads one value at `path`; a duplicate key is put in `duplicate` (so its
/// path reaches the caller without serde's "at line, column" suffix).
struct Unique<'a> {
    path: String,
    duplicate: &'a mut Option<String>,
}

impl Unique<'_> {
    fn child(&mut self, key: &str) -> Unique<'_> {
        let key = crate::query::truncate(key, 40);
        let path = if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        };
        Unique {
            path,
            duplicate: &mut *self.duplicate,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child(&items.len().to_string()))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(&key);
            if object.contains_key(&key) {
                *child.duplicate = Some(child.path);
                return Err(de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(child)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}
