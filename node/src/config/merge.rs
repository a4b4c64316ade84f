//! The one merge of configuration layers, remembering for every leaf key which layer set it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_yaml_ng::{Mapping, Value};

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A configuration file (user, project, or `--config`).
    File(PathBuf),
    /// An environment variable, by name (`MEW_PORT`).
    Env(String),
    /// A command-line flag, by name (`--port`).
    Flag(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Env(name) => write!(f, "env {name}"),
            Origin::Flag(name) => write!(f, "flag {name}"),
        }
    }
}

/// Serialized as `{"kind": "default"}`, `{"kind": "file", "path": ...}`,
/// `{"kind": "env", "name": ...}` or `{"kind": "flag", "name": ...}`.
impl Serialize for Origin {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (kind, field) = match self {
            Origin::Default => ("default", None),
            Origin::File(path) => ("file", Some(("path", path.to_string_lossy().into_owned()))),
            Origin::Env(name) => ("env", Some(("name", name.clone()))),
            Origin::Flag(name) => ("flag", Some(("name", name.clone()))),
        };
        let mut map = serializer.serialize_map(Some(1 + usize::from(field.is_some())))?;
        map.serialize_entry("kind", kind)?;
        if let Some((key, value)) = field {
            map.serialize_entry(key, &value)?;
        }
        map.end()
    }
}

/// Lists that accumulate across layers instead of being replaced: the permission rules of the
/// user and the project both apply.
pub(crate) const UNION_LISTS: &[&str] =
    &["permissions.allow", "permissions.deny", "permissions.ask"];

/// Maps whose entries a higher layer replaces whole instead of merging them key by key: a
/// project's MCP server with the name of a user's one is that server, with nothing of the
/// user's (an `env` the user gave does not leak into the project's command).
pub(crate) const REPLACED_WHOLE: &[&str] = &["mcp_servers"];

/// Merges `layer` over `tree`: mappings merge key by key, anything else (scalars, sequences,
/// null) replaces what was there, except the lists in [`UNION_LISTS`], to which the layer's
/// items are appended (skipping items already there), and the entries of the maps in
/// [`REPLACED_WHOLE`], which replace the same-named entry whole. Every leaf the layer sets is
/// recorded in `origins` under its dotted key (for a union list, the last layer that added to
/// it), and the origins of anything it replaces at or below that key are dropped.
pub(crate) fn merge(
    tree: &mut Value,
    origins: &mut BTreeMap<String, Origin>,
    layer: Value,
    origin: &Origin,
) {
    merge_at(tree, origins, layer, origin, "");
}

fn merge_at(
    tree: &mut Value,
    origins: &mut BTreeMap<String, Origin>,
    layer: Value,
    origin: &Origin,
    prefix: &str,
) {
    match (tree, layer) {
        (Value::Mapping(base), Value::Mapping(layer)) => {
            // An empty mapping was a leaf (`providers: {}`); filled, it no longer is.
            if base.is_empty() && !layer.is_empty() {
                origins.remove(prefix);
            }
            let whole = REPLACED_WHOLE.contains(&prefix);
            for (key, value) in layer {
                let path = join(prefix, &key_name(&key));
                match base.get_mut(&key) {
                    Some(slot) if whole => replace(slot, origins, value, origin, &path),
                    Some(slot) => merge_at(slot, origins, value, origin, &path),
                    None => {
                        record(origins, &path, &value, origin);
                        base.insert(key, value);
                    }
                }
            }
        }
        (Value::Sequence(items), Value::Sequence(added)) if UNION_LISTS.contains(&prefix) => {
            if !added.is_empty() {
                origins.insert(prefix.to_owned(), origin.clone());
            }
            for item in added {
                if !items.contains(&item) {
                    items.push(item);
                }
            }
        }
        (slot, layer) => replace(slot, origins, layer, origin, prefix),
    }
}

/// Puts `layer` in place of `slot`, which sits at `path`: the origins at and below `path` are
/// dropped and the layer's leaves recorded.
fn replace(
    slot: &mut Value,
    origins: &mut BTreeMap<String, Origin>,
    layer: Value,
    origin: &Origin,
    path: &str,
) {
    let below = format!("{path}.");
    origins.retain(|key, _| key != path && !key.starts_with(&below));
    record(origins, path, &layer, origin);
    *slot = layer;
}

/// Records `origin` for every leaf of `value`, which sits at `path`.
fn record(origins: &mut BTreeMap<String, Origin>, path: &str, value: &Value, origin: &Origin) {
    match value {
        Value::Mapping(mapping) if !mapping.is_empty() => {
            for (key, value) in mapping {
                record(origins, &join(path, &key_name(key)), value, origin);
            }
        }
        _ => {
            origins.insert(path.to_owned(), origin.clone());
        }
    }
}

/// Every leaf of `value` (a value that is not a non-empty mapping) with its dotted key, in order.
/// An empty tree has no leaves.
pub(crate) fn leaves(value: &Value) -> Vec<(String, &Value)> {
    fn walk<'v>(value: &'v Value, path: String, out: &mut Vec<(String, &'v Value)>) {
        match value {
            // The root is never a leaf, even when empty.
            Value::Mapping(mapping) if !mapping.is_empty() || path.is_empty() => {
                for (key, value) in mapping {
                    walk(value, join(&path, &key_name(key)), out);
                }
            }
            _ => out.push((path, value)),
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

/// A tree that holds `value` at `path` and nothing else.
pub(crate) fn singleton(path: &[String], value: Value) -> Value {
    path.iter().rev().fold(value, |inner, key| {
        let mut mapping = Mapping::new();
        mapping.insert(Value::String(key.clone()), inner);
        Value::Mapping(mapping)
    })
}

/// A mapping key as the user wrote it: strings as they are, other scalars in YAML form.
pub(crate) fn key_name(key: &Value) -> String {
    match key {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Null => "null".to_owned(),
        _ => "<complex key>".to_owned(),
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn merges_mappings_key_by_key_and_records_each_leaf() {
        let mut tree = yaml("a: {x: 1, y: 2}\nb: [1]\n");
        let mut origins = BTreeMap::new();
        merge(&mut tree, &mut origins, yaml("{}"), &Origin::Default);
        assert!(origins.is_empty());
        let base = tree.clone();
        let mut tree = Value::Mapping(Mapping::new());
        merge(&mut tree, &mut origins, base, &Origin::Default);
        let env = Origin::Env("E".into());
        merge(
            &mut tree,
            &mut origins,
            yaml("a: {y: 3}\nb: [2, 3]\n"),
            &env,
        );
        assert_eq!(tree, yaml("a: {x: 1, y: 3}\nb: [2, 3]\n"));
        assert_eq!(origins.get("a.x"), Some(&Origin::Default));
        assert_eq!(origins.get("a.y"), Some(&env));
        assert_eq!(origins.get("b"), Some(&env));
        assert_eq!(origins.len(), 3);
    }

    #[test]
    fn a_scalar_replacing_a_mapping_drops_the_origins_below_it() {
        let mut tree = Value::Mapping(Mapping::new());
        let mut origins = BTreeMap::new();
        merge(&mut tree, &mut origins, yaml("a: {x: 1}"), &Origin::Default);
        merge(
            &mut tree,
            &mut origins,
            yaml("a: 5"),
            &Origin::Flag("--a".into()),
        );
        assert_eq!(origins.len(), 1);
        assert_eq!(origins.get("a"), Some(&Origin::Flag("--a".into())));
    }

    #[test]
    fn a_mapping_replacing_a_scalar_drops_the_scalars_origin() {
        let mut tree = Value::Mapping(Mapping::new());
        let mut origins = BTreeMap::new();
        merge(&mut tree, &mut origins, yaml("a: 5"), &Origin::Default);
        let flag = Origin::Flag("--a".into());
        merge(&mut tree, &mut origins, yaml("a: {x: 1}"), &flag);
        assert_eq!(origins.len(), 1);
        assert_eq!(origins.get("a.x"), Some(&flag));
    }

    #[test]
    fn mcp_servers_entries_are_replaced_whole() {
        let mut tree = Value::Mapping(Mapping::new());
        let mut origins = BTreeMap::new();
        let user = Origin::File("/u.yaml".into());
        let project = Origin::File("/p.yaml".into());
        merge(
            &mut tree,
            &mut origins,
            yaml("mcp_servers: {a: {command: x, env: {K: v}}, b: {url: u}}"),
            &user,
        );
        merge(
            &mut tree,
            &mut origins,
            yaml("mcp_servers: {a: {command: y}}"),
            &project,
        );
        assert_eq!(tree, yaml("mcp_servers: {a: {command: y}, b: {url: u}}"));
        assert_eq!(origins.get("mcp_servers.a.command"), Some(&project));
        assert_eq!(origins.get("mcp_servers.a.env.K"), None);
        assert_eq!(origins.get("mcp_servers.b.url"), Some(&user));
        assert_eq!(origins.len(), 2);
        // Other sections still merge key by key.
        merge(&mut tree, &mut origins, yaml("x: {p: 1, q: 2}"), &user);
        merge(&mut tree, &mut origins, yaml("x: {q: 3}"), &project);
        assert_eq!(tree["x"], yaml("{p: 1, q: 3}"));
    }

    #[test]
    fn leaves_and_singletons_are_inverse() {
        let tree = yaml("a: {x: 1, y: {}}\nb: null\n");
        let keys: Vec<String> = leaves(&tree).into_iter().map(|(key, _)| key).collect();
        assert_eq!(keys, ["a.x", "a.y", "b"]);
        assert!(leaves(&yaml("{}")).is_empty());
        let path = vec!["a".to_owned(), "x".to_owned()];
        assert_eq!(singleton(&path, yaml("1")), yaml("a: {x: 1}"));
    }

    #[test]
    fn origins_serialize_with_their_kind() {
        let json = serde_json::to_value([
            Origin::Default,
            Origin::File("/p/c.yaml".into()),
            Origin::Env("MEW_PORT".into()),
            Origin::Flag("--port".into()),
        ])
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"kind": "default"},
                {"kind": "file", "path": "/p/c.yaml"},
                {"kind": "env", "name": "MEW_PORT"},
                {"kind": "flag", "name": "--port"},
            ])
        );
    }
}
