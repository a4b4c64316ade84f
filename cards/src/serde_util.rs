//! Serde helpers for the ProtoJSON conventions: omitted defaults, empty-as-absent, enums by name or number.

use serde::de::Visitor;
use serde::{Deserialize, Deserializer};

/// True for a type's default value, which ProtoJSON leaves out of the output.
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Reads an optional string-like field where `""` means absent, as in proto3.
pub(crate) fn empty_as_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: From<String>,
{
    let value = Option::<String>::deserialize(deserializer)?;
    Ok(value.filter(|v| !v.is_empty()).map(T::from))
}

/// Reads a `google.protobuf.Value` field: JSON `null` is a present null value, not an absent field.
pub(crate) fn present_value<'de, D>(deserializer: D) -> Result<Option<serde_json::Value>, D::Error>
where
    D: Deserializer<'de>,
{
    serde_json::Value::deserialize(deserializer).map(Some)
}

/// Reads a field that is `null` as its default, as ProtoJSON parsers do.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Declares a proto enum that serializes as its name and accepts the name or the number.
macro_rules! proto_enum {
    (
        $(#[$doc:meta])*
        pub enum $name:ident : $what:literal {
            $( $(#[$vdoc:meta])* $variant:ident = $num:literal => $wire:literal, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            #[default]
            $( $(#[$vdoc])* $variant, )+
        }

        impl $name {
            /// Every value, in proto number order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The proto enum name, as it travels in JSON.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire,)+ }
            }

            /// The proto enum number.
            pub fn number(self) -> i32 {
                match self { $($name::$variant => $num,)+ }
            }

            /// Looks a value up by its proto name.
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $($wire => Some($name::$variant),)+ _ => None }
            }

            /// Looks a value up by its proto number.
            pub fn from_number(number: i64) -> Option<Self> {
                match number { $($num => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(f, "a {} name or number", $what)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        $name::from_name(v).ok_or_else(|| E::custom(format!("unknown {} {:?}", $what, v)))
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$name, E> {
                        $name::from_number(v).ok_or_else(|| E::custom(format!("unknown {} number {}", $what, v)))
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$name, E> {
                        let n = i64::try_from(v).map_err(|_| E::custom(format!("unknown {} number {}", $what, v)))?;
                        self.visit_i64(n)
                    }
                    fn visit_unit<E: serde::de::Error>(self) -> Result<$name, E> {
                        Ok($name::default())
                    }
                }
                deserializer.deserialize_any(Visitor)
            }
        }
    };
}

pub(crate) use proto_enum;

/// Reads an int32 given as a JSON number or a decimal string, as ProtoJSON allows; `null` reads
/// as the default (`None` or `0`).
pub(crate) fn lenient_i32<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: From<i32> + Default,
{
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        Number(i64),
        Text(String),
    }
    let value = match Option::<Int>::deserialize(deserializer)? {
        None => return Ok(T::default()),
        Some(Int::Number(n)) => n,
        Some(Int::Text(text)) => text
            .trim()
            .parse::<i64>()
            .map_err(|_| D::Error::custom(format!("expected an integer, found {text:?}")))?,
    };
    i32::try_from(value)
        .map(T::from)
        .map_err(|_| D::Error::custom(format!("{value} is out of range for int32")))
}

/// Reads a struct from an object only. Serde's derive also reads a struct from an array of its
/// fields in order (`[]` as a message with every field absent); ProtoJSON writes a message as
/// an object, and its parsers refuse anything else.
pub(crate) struct ObjectOnly<D>(pub(crate) D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

/// Whether a field declares the alias ProtoJSON parsers accept: its proto (snake_case) name,
/// exactly when the name has an underscore (otherwise it equals the JSON name).
pub(crate) const fn proto_alias_ok(field: &str, aliases: &[&str]) -> bool {
    let field = field.as_bytes();
    let mut snake = false;
    let mut i = 0;
    while i < field.len() {
        snake |= field[i] == b'_';
        i += 1;
    }
    match aliases {
        [] => !snake,
        [alias] => {
            let alias = alias.as_bytes();
            let mut same = snake && alias.len() == field.len();
            let mut i = 0;
            while same && i < field.len() {
                same = alias[i] == field[i];
                i += 1;
            }
            same
        }
        _ => false,
    }
}

/// Declares a ProtoJSON message struct and applies the field conventions, so that no field can
/// miss one: JSON names in camelCase, an absent or `null` field reads as its default, and a field
/// that holds its default is left out of the output. An `i32` or `Option<i32>` field also reads a
/// decimal string.
///
/// A field's only attributes are its doc comment and, when its name has an underscore,
/// `#[serde(alias = "its_name")]` (ProtoJSON parsers accept the proto name); the build fails if
/// that alias is missing or wrong. After the type, a field may say how it differs:
/// - `as always`: written even when it holds its default (a set message field, or one the spec
///   makes required in answers);
/// - `as required`: neither defaulted nor omitted, so an absent or `null` value is an error;
/// - `as read("f")`: read with `f` instead (still omitted when default).
macro_rules! proto_message {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($fields:tt)* }
    ) => {
        $crate::serde_util::proto_message!(@field [$name $(#[$meta])*] [] [] $($fields)*);
    };
    // Each field passes three steps: its docs, alias and name; its reader, by type; its kind.
    (@field $head:tt $done:tt $checks:tt
        $(#[doc = $doc:literal])* $(#[serde(alias = $alias:literal)])?
        pub $field:ident : $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@type $head $done $checks
            [$(#[doc = $doc])* $(#[serde(alias = $alias)])? pub $field] [$field $($alias)?]
            $($rest)*);
    };
    (@type $head:tt $done:tt $checks:tt [$($decl:tt)*] $check:tt
        i32 $(as $kind:ident)?, $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@kind $head $done $checks [$($decl)*: i32] $check
            "crate::serde_util::lenient_i32" $($kind)?; $($rest)*);
    };
    (@type $head:tt $done:tt $checks:tt [$($decl:tt)*] $check:tt
        Option<i32> $(as $kind:ident)?, $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@kind $head $done $checks [$($decl)*: Option<i32>]
            $check "crate::serde_util::lenient_i32" $($kind)?; $($rest)*);
    };
    (@type $head:tt $done:tt $checks:tt [$($decl:tt)*] $check:tt
        $ty:ty as read($read:literal), $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@kind $head $done $checks [$($decl)*: $ty] $check
            $read; $($rest)*);
    };
    (@type $head:tt $done:tt $checks:tt [$($decl:tt)*] $check:tt
        $ty:ty $(as $kind:ident)?, $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@kind $head $done $checks [$($decl)*: $ty] $check
            "crate::serde_util::null_as_default" $($kind)?; $($rest)*);
    };
    (@kind $head:tt [$($done:tt)*] [$($checks:tt)*] [$($decl:tt)*] $check:tt
        $read:literal; $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@field $head [$($done)*
            #[serde(
                default,
                deserialize_with = $read,
                skip_serializing_if = "crate::serde_util::is_default"
            )]
            $($decl)*,
        ] [$($checks)* $check] $($rest)*);
    };
    (@kind $head:tt [$($done:tt)*] [$($checks:tt)*] [$($decl:tt)*] $check:tt
        $read:literal always; $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@field $head [$($done)*
            #[serde(default, deserialize_with = $read)]
            $($decl)*,
        ] [$($checks)* $check] $($rest)*);
    };
    (@kind $head:tt [$($done:tt)*] [$($checks:tt)*] [$($decl:tt)*] $check:tt
        $read:literal required; $($rest:tt)*
    ) => {
        $crate::serde_util::proto_message!(@field $head [$($done)* $($decl)*,]
            [$($checks)* $check] $($rest)*);
    };
    // No field left: the struct, and the alias check at compile time.
    (@field [$name:ident $($meta:tt)*] [$($done:tt)*] [$([$field:ident $($alias:literal)?])*]) => {
        $($meta)*
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "camelCase", remote = "Self")]
        pub struct $name { $($done)* }

        // The derive (as `remote = "Self"`) gives inherent functions; the traits call them,
        // reading through `ObjectOnly`.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $name::deserialize($crate::serde_util::ObjectOnly(deserializer))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $name::serialize(self, serializer)
            }
        }

        const _: () = {
            $(assert!(
                $crate::serde_util::proto_alias_ok(stringify!($field), &[$($alias)?]),
                concat!(
                    stringify!($name), ".", stringify!($field),
                    ": needs #[serde(alias = \"", stringify!($field),
                    "\")] if and only if its name has an underscore"
                ),
            );)*
        };
    };
}

pub(crate) use proto_message;

#[cfg(test)]
mod tests {
    use crate::{Message, SendMessageRequest};

    #[test]
    fn a_message_is_read_from_an_object_only() {
        let message: Message = serde_json::from_str(r#"{"messageId": "m"}"#).unwrap();
        assert_eq!(message.message_id.as_str(), "m");
        let from_value: Message = serde_json::from_value(serde_json::json!({"messageId": "m"}))
            .expect("a Value's object reads as well");
        assert_eq!(from_value, message);
        let refusals = [
            serde_json::from_str::<Message>("[]").map(drop),
            serde_json::from_str::<Message>(r#"["m"]"#).map(drop),
            serde_json::from_str::<SendMessageRequest>("[]").map(drop),
            serde_json::from_str::<SendMessageRequest>(r#"{"message": []}"#).map(drop),
            serde_json::from_str::<SendMessageRequest>(
                r#"{"message": {"messageId": "m"}, "configuration": [true]}"#,
            )
            .map(drop),
        ];
        for (i, refused) in refusals.into_iter().enumerate() {
            let error = refused.unwrap_err().to_string();
            assert!(error.starts_with("invalid type: sequence"), "{i}: {error}");
        }
    }
}
