//! The canonical form of an agent card: the bytes its signatures cover (RFC 8785 JCS).
//!
//! A card is canonicalized as the A2A specification says and as the Python SDK does it, so
//! that a signature made by one verifies with the other:
//!
//! 1. the card's ProtoJSON form (unset and default fields omitted, unknown fields gone, since
//!    the card went through [`AgentCard`]), without `signatures`;
//! 2. empty strings, empty lists, empty objects and `null`s removed, recursively, so that an
//!    object or list left empty by the removal goes too (the Python SDK's `_clean_empty`;
//!    `false` and `0` stay);
//! 3. serialized by RFC 8785: object keys sorted by their UTF-16 code units, no whitespace,
//!    strings as UTF-8 with only `"`, `\` and the C0 controls escaped (`\b \f \n \r \t`,
//!    others as `\u00xx`), numbers in the ECMAScript `Number::toString` form.
//!
//! Numbers only occur in free-form values (`AgentExtension.params`), which the proto model
//! holds as `google.protobuf.Struct`, that is as IEEE 754 doubles. So every number, integer or
//! not, is taken as the nearest `f64` and written the ECMAScript way: `1` and `1.0` are both
//! `1`, `1e21` is `1e+21`, `0.000001` stays `0.000001`, `1e-7` is `1e-7`, `-0` is `0`, and an
//! integer beyond 2^53 becomes the double nearest to it, as it does on the Python side.
//! Nesting deeper than [`MAX_DEPTH`] containers is refused, as it is there.
//!
//! The writer is written here, the number form is `ryu-js`'s: the RFC 8785 crates
//! (`serde_jcs`, `serde_json_canonicalizer`) write integers exactly, as they are in the JSON,
//! where the A2A form needs every number as the double the Python SDK makes of it, and they
//! have no depth limit; the rest (sorting keys by UTF-16, escaping) is a few lines.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::card::AgentCard;

/// The deepest nesting of objects and arrays a canonical form may have, the outermost
/// container counting as 1 (the Python SDK's limit).
pub const MAX_DEPTH: usize = 128;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// Objects and arrays nest deeper than [`MAX_DEPTH`].
    #[error("nesting exceeds the maximum depth of {MAX_DEPTH}")]
    TooDeep,
    /// A number that is not finite (JSON has no NaN or infinity).
    #[error("{0} is not a JSON number")]
    NotFinite(String),
    /// The card cannot be turned into JSON.
    #[error("the card cannot be serialized: {0}")]
    Serialize(String),
}

/// The bytes a signature over `card` covers: its canonical form, without `signatures`.
pub fn canonical_card(card: &AgentCard) -> Result<Vec<u8>, CanonicalError> {
    let mut value =
        serde_json::to_value(card).map_err(|e| CanonicalError::Serialize(e.to_string()))?;
    if let Value::Object(map) = &mut value {
        map.remove("signatures");
    }
    let cleaned = clean_empty(value, 1)?.unwrap_or(Value::Null);
    Ok(canonicalize(&cleaned)?.into_bytes())
}

/// Removes empty strings, lists and objects, and `null`s, recursively; `None` when `value`
/// itself is (or became) empty. `depth` counts the open containers down to `value`.
fn clean_empty(value: Value, depth: usize) -> Result<Option<Value>, CanonicalError> {
    match value {
        Value::Object(map) => {
            if depth > MAX_DEPTH {
                return Err(CanonicalError::TooDeep);
            }
            let mut cleaned = Map::new();
            for (key, value) in map {
                if let Some(value) = clean_empty(value, depth + 1)? {
                    cleaned.insert(key, value);
                }
            }
            Ok((!cleaned.is_empty()).then_some(Value::Object(cleaned)))
        }
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(CanonicalError::TooDeep);
            }
            let mut cleaned = Vec::with_capacity(items.len());
            for item in items {
                if let Some(item) = clean_empty(item, depth + 1)? {
                    cleaned.push(item);
                }
            }
            Ok((!cleaned.is_empty()).then_some(Value::Array(cleaned)))
        }
        Value::String(text) if text.is_empty() => Ok(None),
        Value::Null => Ok(None),
        other => Ok(Some(other)),
    }
}

/// The RFC 8785 canonical serialization of `value`.
pub fn canonicalize(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_value(value, &mut out, 1)?;
    Ok(out)
}

fn write_value(value: &Value, out: &mut String, depth: usize) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => {
            let double = number
                .as_f64()
                .ok_or_else(|| CanonicalError::NotFinite(number.to_string()))?;
            out.push_str(&format_number(double)?);
        }
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(CanonicalError::TooDeep);
            }
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(item, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            if depth > MAX_DEPTH {
                return Err(CanonicalError::TooDeep);
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| utf16_order(a.0, b.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// Orders strings by their UTF-16 code units (RFC 8785 section 3.2.3), which differs from
/// the UTF-8 byte order for characters above U+FFFF against those in U+E000..U+FFFF.
fn utf16_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// A JSON string: `"` and `\` escaped, C0 controls as their short escape or `\u00xx`,
/// everything else as it is.
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `value` as ECMAScript's `Number::toString` writes it (ECMA-262 7.1.12.1, RFC 8785
/// section 3.2.2.3): the shortest digits that read back as the same double, in full between
/// 1e-7 and 1e21, in exponential form outside. `ryu-js` does exactly this.
fn format_number(value: f64) -> Result<String, CanonicalError> {
    if !value.is_finite() {
        return Err(CanonicalError::NotFinite(value.to_string()));
    }
    Ok(ryu_js::Buffer::new().format_finite(value).to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn number(value: f64) -> String {
        format_number(value).unwrap()
    }

    #[test]
    fn numbers_are_written_as_ecmascript_does() {
        // Samples from RFC 8785 appendix B and ECMA-262.
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (100.0, "100"),
            (123456789.0, "123456789"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.25e-7, "1.25e-7"),
            (9007199254740992.0, "9007199254740992"),
            (9007199254740993.0, "9007199254740992"),
            (295147905179352830000.0, "295147905179352830000"),
            (4.50, "4.5"),
            (2e-3, "0.002"),
            (0.000001234, "0.000001234"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (333333333.3333333, "333333333.3333333"),
            (1e23, "1e+23"),
        ];
        for (value, expected) in cases {
            assert_eq!(number(value), expected, "{value:e}");
        }
        assert!(format_number(f64::NAN).is_err());
        assert!(format_number(f64::INFINITY).is_err());
        // Integers are doubles too, as in the proto `Struct` they come from.
        assert_eq!(canonicalize(&json!(1)).unwrap(), "1");
        assert_eq!(canonicalize(&json!(-42)).unwrap(), "-42");
        assert_eq!(
            canonicalize(&json!(18446744073709551615u64)).unwrap(),
            "18446744073709552000"
        );
    }

    #[test]
    fn keys_are_sorted_by_utf16_code_units() {
        // U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FB01 (ligature fi), although
        // its UTF-8 bytes (and code point) come after.
        let value =
            json!({ "\u{fb01}": 1, "\u{1f600}": 2, "b": 3, "a": 4, "B": 5, "aa": 6, "": 7 });
        assert_eq!(
            canonicalize(&value).unwrap(),
            "{\"\":7,\"B\":5,\"a\":4,\"aa\":6,\"b\":3,\"\u{1f600}\":2,\"\u{fb01}\":1}"
        );
    }

    #[test]
    fn strings_escape_only_what_rfc_8785_says() {
        let value = json!("q\"b\\s/\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}é€😀");
        assert_eq!(
            canonicalize(&value).unwrap(),
            "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}é€😀\""
        );
    }

    #[test]
    fn nested_empties_and_signatures_are_dropped() {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "n",
            "description": "",
            "version": "1",
            "capabilities": {
                "streaming": false,
                "extensions": [{
                    "uri": "urn:x",
                    "params": { "a": { "b": [null, "", {}, []] }, "z": 0, "n": null, "t": false }
                }]
            },
            "securityRequirements": [{ "schemes": { "bearer": { "list": [] } } }],
            "skills": [{ "id": "s", "name": "S", "description": "d", "tags": [] }],
            "signatures": [{ "protected": "eyJ9", "signature": "c2ln" }]
        }))
        .unwrap();
        let canonical = String::from_utf8(canonical_card(&card).unwrap()).unwrap();
        assert_eq!(
            canonical,
            "{\"capabilities\":{\"extensions\":[{\"params\":{\"t\":false,\"z\":0},\
             \"uri\":\"urn:x\"}],\"streaming\":false},\"name\":\"n\",\
             \"skills\":[{\"description\":\"d\",\"id\":\"s\",\"name\":\"S\"}],\"version\":\"1\"}"
        );
    }

    #[test]
    fn an_empty_card_is_null_and_deep_nesting_is_refused() {
        assert_eq!(canonical_card(&AgentCard::default()).unwrap(), b"null");
        let mut deep = json!(1);
        for _ in 0..MAX_DEPTH {
            deep = json!([deep]);
        }
        assert!(canonicalize(&deep).is_ok());
        assert_eq!(canonicalize(&json!([deep])), Err(CanonicalError::TooDeep));
        assert_eq!(
            clean_empty(json!([deep]), 1).err(),
            Some(CanonicalError::TooDeep)
        );
    }
}
