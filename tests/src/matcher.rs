//! A small JSON-path-ish matcher for response bodies.
//!
//! An expectation is an object from paths to expected values:
//!
//! - a path is `field.field[0].field`; the empty path `""` is the whole body;
//! - a plain JSON value must equal the value found (strings after `${name}`
//!   substitution);
//! - `"$any"`: the path exists; `"$absent"`: it does not;
//! - `{"$len": n}`: an array (or string, in characters) of length n;
//! - `{"$contains": s}`: a string containing s, or an array with an element equal to s;
//! - `{"$prefix": s}`: a string starting with s;
//! - `{"$type": t}`: t is one of string, number, boolean, array, object, null;
//! - `{"$not": v}`: the value is present and does not equal v.
//!
//! `tests/js/matcher.mjs` is the same matcher in JavaScript.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Names bound while a vector runs (message ids), for `${name}` substitution.
pub type Vars = HashMap<String, String>;

/// Replaces every `${name}` in `text` with its bound value; an unbound name is an error.
pub fn substitute(text: &str, vars: &Vars) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {text:?}"))?;
        let name = &after[..end];
        let value = vars
            .get(name)
            .ok_or_else(|| format!("{text:?} names ${{{name}}}, which no earlier step bound"))?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Substitutes `${name}` in every string inside `value`.
fn substitute_value(value: &Value, vars: &Vars) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) => Value::String(substitute(s, vars)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute_value(v, vars))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), substitute_value(v, vars)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

/// One step of a path.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn parse_path(path: &str) -> Result<Vec<Segment<'_>>, String> {
    let mut segments = Vec::new();
    if path.is_empty() {
        return Ok(segments);
    }
    for part in path.split('.') {
        let (key, mut indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            segments.push(Segment::Key(key));
        }
        while let Some(rest) = indexes.strip_prefix('[') {
            let end = rest.find(']').ok_or_else(|| format!("bad path {path:?}"))?;
            let index = rest[..end]
                .parse()
                .map_err(|_| format!("bad index in path {path:?}"))?;
            segments.push(Segment::Index(index));
            indexes = &rest[end + 1..];
        }
        if !indexes.is_empty() {
            return Err(format!("bad path {path:?}"));
        }
    }
    Ok(segments)
}

/// The value at `path`, or None when the path does not exist.
pub fn lookup<'v>(value: &'v Value, path: &str) -> Result<Option<&'v Value>, String> {
    let mut current = value;
    for segment in parse_path(path)? {
        let next = match segment {
            Segment::Key(key) => current.as_object().and_then(|o| o.get(key)),
            Segment::Index(i) => current.as_array().and_then(|a| a.get(i)),
        };
        match next {
            Some(v) => current = v,
            None => return Ok(None),
        }
    }
    Ok(Some(current))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether JSON numbers are equal as numbers (1 and 1.0 alike).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Checks one expectation against the value found at its path.
fn check_one(found: Option<&Value>, expected: &Value) -> Result<(), String> {
    let shown = |v: Option<&Value>| v.map_or("nothing".to_owned(), short);
    match expected {
        Value::String(s) if s == "$any" => found
            .map(|_| ())
            .ok_or_else(|| "expected a value, found nothing".to_owned()),
        Value::String(s) if s == "$absent" => match found {
            None => Ok(()),
            Some(v) => Err(format!("expected nothing, found {}", short(v))),
        },
        Value::Object(op) if op.len() == 1 && op.keys().all(|k| k.starts_with('$')) => {
            let (name, arg) = op.iter().next().ok_or("empty operator")?;
            let Some(found) = found else {
                return Err(format!("expected {name} {}, found nothing", short(arg)));
            };
            let ok = match name.as_str() {
                "$len" => {
                    let len = match found {
                        Value::Array(a) => Some(a.len()),
                        Value::String(s) => Some(s.chars().count()),
                        _ => None,
                    };
                    len.is_some_and(|l| Some(l as u64) == arg.as_u64())
                }
                "$contains" => match (found, arg) {
                    (Value::String(s), Value::String(part)) => s.contains(part.as_str()),
                    (Value::Array(items), item) => items.iter().any(|i| json_equal(i, item)),
                    _ => false,
                },
                "$prefix" => match (found, arg) {
                    (Value::String(s), Value::String(p)) => s.starts_with(p.as_str()),
                    _ => false,
                },
                "$type" => arg.as_str() == Some(type_name(found)),
                "$not" => !json_equal(found, arg),
                other => return Err(format!("unknown matcher {other}")),
            };
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "expected {name} {}, found {}",
                    short(arg),
                    short(found)
                ))
            }
        }
        _ => {
            if found.is_some_and(|f| json_equal(f, expected)) {
                Ok(())
            } else {
                Err(format!(
                    "expected {}, found {}",
                    short(expected),
                    shown(found)
                ))
            }
        }
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 200 {
        let cut: String = text.chars().take(200).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Checks every `path: expected` pair of `expect` against `body`; all failures, one per line.
pub fn check(body: &Value, expect: &Map<String, Value>, vars: &Vars) -> Result<(), String> {
    let mut failures = Vec::new();
    for (path, expected) in expect {
        let expected = substitute_value(expected, vars)?;
        let found = lookup(body, path)?;
        if let Err(why) = check_one(found, &expected) {
            failures.push(format!("at {path:?}: {why}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(body: Value, expect: Value) -> Result<(), String> {
        let vars = Vars::from([("m1".to_owned(), "abc".to_owned())]);
        check(&body, expect.as_object().expect("object"), &vars)
    }

    #[test]
    fn matches_and_mismatches() {
        let body = json!({"emails": [{"id": "abc", "subject": "Hello"}], "n": 2});
        assert!(
            run(
                body.clone(),
                json!({"emails": {"$len": 1}, "emails[0].id": "${m1}", "n": 2.0})
            )
            .is_ok()
        );
        assert!(
            run(
                body.clone(),
                json!({"emails[0].subject": {"$prefix": "Hel"}, "x": "$absent", "n": "$any"})
            )
            .is_ok()
        );
        assert!(
            run(
                body.clone(),
                json!({"emails[0].subject": {"$contains": "ell"}, "emails": {"$type": "array"}})
            )
            .is_ok()
        );
        assert!(run(body.clone(), json!({"emails": {"$len": 2}})).is_err());
        assert!(run(body.clone(), json!({"emails[1]": "$any"})).is_err());
        assert!(run(body.clone(), json!({"n": "$absent"})).is_err());
        assert!(run(body.clone(), json!({"n": 3})).is_err());
        assert!(run(body.clone(), json!({"n": {"$not": 2}})).is_err());
        assert!(
            run(
                body.clone(),
                json!({"emails[0].subject": {"$contains": "x"}})
            )
            .is_err()
        );
        assert!(run(body.clone(), json!({"emails[0].id": "${nope}"})).is_err());
        assert!(run(body, json!({"": {"$type": "object"}})).is_ok());
    }

    #[test]
    fn substitution() {
        let vars = Vars::from([("a".to_owned(), "1".to_owned())]);
        assert_eq!(substitute("x${a}y${a}", &vars).as_deref(), Ok("x1y1"));
        assert!(substitute("${b}", &vars).is_err());
        assert!(substitute("${a", &vars).is_err());
    }
}
