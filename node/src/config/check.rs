//! Checks one layer on its own, before merging, so that an unknown key or a bad value is blamed on the file, variable or flag that holds it.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_yaml_ng::{Mapping, Value};

use super::merge::{key_name, leaves, singleton};
use super::schema::{FREE_FORM_MAPS, FreeFormEntry, Settings};
use super::{ConfigError, Origin};

/// Checks `layer` against `schema` (the tree of built-in defaults, which has every key) and
/// returns it with empty sections (`node:` with nothing under it) removed.
///
/// Keys are checked first, then every leaf value is parsed on its own into the typed settings,
/// so the error names the exact key. `text` is the file's source, to find the line of the key.
pub(crate) fn check_layer(
    layer: Value,
    schema: &Value,
    origin: &Origin,
    text: Option<&str>,
) -> Result<Value, ConfigError> {
    let mut path = Vec::new();
    let layer = check_keys(layer, schema, schema, &mut path, origin, text)?;
    for (key, value) in leaves(&layer) {
        let path: Vec<String> = key.split('.').map(str::to_owned).collect();
        let tree = singleton(&path, value.clone());
        if let Err(error) = serde_yaml_ng::from_value::<Settings>(tree) {
            return Err(ConfigError::BadValue {
                origin: origin.clone(),
                line: text.and_then(|text| line_of(text, &path)),
                key,
                message: error.to_string(),
            });
        }
    }
    Ok(layer)
}

fn check_keys(
    layer: Value,
    schema: &Value,
    root: &Value,
    path: &mut Vec<String>,
    origin: &Origin,
    text: Option<&str>,
) -> Result<Value, ConfigError> {
    let (Value::Mapping(layer), Value::Mapping(known)) = (layer, schema) else {
        return Err(ConfigError::BadValue {
            origin: origin.clone(),
            line: text.and_then(|text| line_of(text, path)),
            key: path.join("."),
            message: "expected a mapping of settings".to_owned(),
        });
    };
    if let Some(entry) = free_form_entry(path) {
        return check_free_form(layer, entry, root, path, origin, text);
    }
    let mut checked = Mapping::new();
    for (key, value) in layer {
        path.push(key_name(&key));
        let Some(expected) = known.get(&key) else {
            return Err(ConfigError::UnknownKey {
                origin: origin.clone(),
                line: text.and_then(|text| line_of(text, path)),
                suggestion: suggest(path, known, root),
                key: path.join("."),
            });
        };
        match (expected, value) {
            // A section written with nothing under it (`node:`) is an empty section.
            (Value::Mapping(_), Value::Null) => {}
            (Value::Mapping(_), value) => {
                let value = check_keys(value, expected, root, path, origin, text)?;
                checked.insert(key, value);
            }
            (_, value) => {
                checked.insert(key, value);
            }
        }
        path.pop();
    }
    Ok(Value::Mapping(checked))
}

/// What the entries of the map at `path` are, if its keys are the user's to choose
/// ([`FREE_FORM_MAPS`]).
fn free_form_entry(path: &[String]) -> Option<FreeFormEntry> {
    FREE_FORM_MAPS
        .iter()
        .find(|map| {
            let pattern: Vec<&str> = map.path.split('.').collect();
            pattern.len() == path.len()
                && pattern
                    .iter()
                    .zip(path)
                    .all(|(part, key)| *part == "*" || part == key)
        })
        .map(|map| map.entry)
}

/// Checks a map whose keys the user chooses: any name is accepted (a string without `.`),
/// and each entry is checked against the entry schema. An entry written with nothing under it
/// (`local:`) is a section of defaults. The entries of an [`FreeFormEntry::Unchecked`] map
/// are kept as written.
fn check_free_form(
    layer: Mapping,
    entry: FreeFormEntry,
    root: &Value,
    path: &mut Vec<String>,
    origin: &Origin,
    text: Option<&str>,
) -> Result<Value, ConfigError> {
    let schema = match entry {
        FreeFormEntry::Section(schema) => Some(schema().map_err(|error| ConfigError::Merged {
            message: format!("the built-in defaults do not serialize: {error}"),
        })?),
        FreeFormEntry::Value => None,
        FreeFormEntry::Unchecked => {
            return Ok(Value::Mapping(
                layer
                    .into_iter()
                    .map(|(key, value)| (Value::String(key_name(&key)), value))
                    .collect(),
            ));
        }
    };
    let mut checked = Mapping::new();
    for (key, value) in layer {
        let name = key_name(&key);
        path.push(name.clone());
        let usable = matches!(&key, Value::String(name) if !name.is_empty() && !name.contains('.'));
        if !usable {
            return Err(ConfigError::BadValue {
                origin: origin.clone(),
                line: text.and_then(|text| line_of(text, path)),
                key: path.join("."),
                message: format!("`{name}` cannot be a name here: use text without `.`"),
            });
        }
        let value = match (&schema, value) {
            (Some(_), Value::Null) => Value::Mapping(Mapping::new()),
            (Some(schema), value) => check_keys(value, schema, root, path, origin, text)?,
            (None, value) => value,
        };
        checked.insert(key, value);
        path.pop();
    }
    Ok(Value::Mapping(checked))
}

/// A known key that `path` (whose last element is unknown) probably meant: the same name in
/// another section, or a sibling whose name is a small edit away.
fn suggest(path: &[String], siblings: &Mapping, root: &Value) -> Option<String> {
    let name = path.last()?;
    let elsewhere = leaves(root)
        .into_iter()
        .map(|(key, _)| key)
        .find(|key| key.rsplit('.').next() == Some(name.as_str()));
    if elsewhere.is_some() {
        return elsewhere;
    }
    let limit = 2.max(name.chars().count() / 3);
    siblings
        .keys()
        .filter_map(|key| key.as_str())
        .map(|key| (edit_distance(name, key), key))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, key)| key.to_owned())
}

/// Levenshtein distance, in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The 1-based line of the key at `path` in the YAML `text`, if it is there.
///
/// `serde_yaml_ng` trees carry no positions, so this walks the text again with a visitor that
/// fails on the key: the parser stamps that error with the key's position.
pub(crate) fn line_of(text: &str, path: &[String]) -> Option<usize> {
    if path.is_empty() {
        return None;
    }
    let found = Cell::new(false);
    let result = Seek {
        path,
        found: &found,
    }
    .deserialize(serde_yaml_ng::Deserializer::from_str(text));
    match result {
        Err(error) if found.get() => error.location().map(|location| location.line()),
        _ => None,
    }
}

/// Descends into the mapping entry named `path[0]`, and so on; fails at the last key.
struct Seek<'a> {
    path: &'a [String],
    found: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Ok(());
        };
        let key = KeySeed {
            wanted: first,
            last: rest.is_empty(),
            found: self.found,
        };
        while let Some(matched) = map.next_key_seed(key.clone())? {
            if matched {
                return map.next_value_seed(Seek {
                    path: rest,
                    found: self.found,
                });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// Reads a mapping key: `true` if it is the wanted one; an error (at the key) if it is the
/// wanted one and the last of the path.
#[derive(Clone)]
struct KeySeed<'a> {
    wanted: &'a str,
    last: bool,
    found: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl KeySeed<'_> {
    fn matches<E: de::Error>(&self, key: &str) -> Result<bool, E> {
        if key != self.wanted {
            return Ok(false);
        }
        if self.last {
            self.found.set(true);
            return Err(E::custom("found the key"));
        }
        Ok(true)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        self.matches(key)
    }

    fn visit_i64<E: de::Error>(self, key: i64) -> Result<bool, E> {
        self.matches(&key.to_string())
    }

    fn visit_u64<E: de::Error>(self, key: u64) -> Result<bool, E> {
        self.matches(&key.to_string())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E: de::Error>(self, key: bool) -> Result<bool, E> {
        self.matches(&key.to_string())
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        self.matches("null")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_line_of_a_nested_key() {
        let text = "# comment\nnode:\n  port: 1\nlimits:\n  a: {b: 1}\n  max_runing_tasks: 3\n";
        let path = |keys: &[&str]| keys.iter().map(|key| key.to_string()).collect::<Vec<_>>();
        assert_eq!(line_of(text, &path(&["node"])), Some(2));
        assert_eq!(line_of(text, &path(&["node", "port"])), Some(3));
        assert_eq!(
            line_of(text, &path(&["limits", "max_runing_tasks"])),
            Some(6)
        );
        assert_eq!(line_of(text, &path(&["limits", "missing"])), None);
        assert_eq!(line_of(text, &path(&["node", "port", "deeper"])), None);
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("max_runing_tasks", "max_running_tasks"), 1);
        assert_eq!(edit_distance("prot", "port"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
