//! Hook conditions: payload fields by dotted path, tested with the shared
//! [`Matcher`](crate::matcher::Matcher); and Claude Code's `matcher` strings.
//!
//! # Conditions (`if:` in `hooks.yaml`)
//!
//! An atom names a field by a dotted path into the payload (`tool_input.command`; a numeric
//! segment indexes an array: `tool_input.edits.0.old_string`) and a matcher. The field's text
//! is: a string as it is; a number or a boolean in its JSON form; an object or an array as
//! compact JSON (keys sorted), so nested values can be matched too.
//!
//! **A missing field matches no atom**, whatever the matcher, `not` included. (The seed read a
//! missing field as the empty string, so `not` was silently true for every event that lacks
//! the field.) `not: X` therefore means "the field is there and does not match X". A field
//! whose value is `null` counts as missing.
//!
//! `all_of` is true when every atom is; `any_of` when at least one is. A rule without `if:` is
//! unconditional.
//!
//! The matcher of an atom is written either in the seed's form, `{type: exact|regex|glob|not,
//! value: .., inner: {..}}`, or in the shared form (`"re:^git "`, `{glob: "src/**"}`,
//! `{not: ..}`): see [`crate::matcher`] for the semantics (exact is whole and
//! case-sensitive, regex searches, glob has path semantics, so `*` does not cross `/`; use a
//! regex for command lines).
//!
//! # Claude Code matchers (settings files)
//!
//! [`NameMatcher`] reads Claude Code's `matcher` string: empty or `*` matches everything; a
//! string of letters, digits, `_` and `|` is a list of exact names (`Bash|Write`); anything
//! else is a regex that searches the name (`mcp__github__.*`, `Notebook.*`). On tool events a
//! name matches a Mew tool when it names the tool either way: `Bash` matches Mew's `bash`,
//! `Write` matches `write_file` ([`crate::tools::registry::ALIASES`]), and Mew's own names work
//! too.

use serde_json::Value;
use serde_yaml_ng::Value as Yaml;

use crate::matcher::{Matcher, MatcherError};
use crate::tools::registry::{ALIASES, canonical_name};

/// How the atoms of a condition combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    /// Every atom must match.
    AllOf,
    /// At least one atom must match.
    AnyOf,
}

/// A compiled `if:`.
#[derive(Debug, Clone)]
pub(crate) struct Condition {
    /// How the atoms combine.
    pub(crate) combine: Combine,
    /// Never empty.
    pub(crate) atoms: Vec<Atom>,
}

/// One field test.
#[derive(Debug, Clone)]
pub(crate) struct Atom {
    /// The dotted path as written.
    #[cfg_attr(not(test), allow(dead_code))] // read by tests
    pub(crate) field: String,
    /// Its segments.
    path: Vec<String>,
    /// The test on the field's text.
    pub(crate) matcher: Matcher,
}

impl Atom {
    /// An atom on the dotted path `field`, which must not be empty nor have empty segments.
    pub(crate) fn new(field: &str, matcher: Matcher) -> Result<Self, String> {
        let path: Vec<String> = field.split('.').map(str::to_owned).collect();
        if field.trim().is_empty() {
            return Err("`field` is empty".to_owned());
        }
        if path.iter().any(String::is_empty) {
            return Err(format!(
                "`field: {field}` has an empty segment (write a dotted path such as tool_input.command)"
            ));
        }
        Ok(Self {
            field: field.to_owned(),
            path,
            matcher,
        })
    }

    /// Whether the payload has the field and its text satisfies the matcher.
    pub(crate) fn is_match(&self, payload: &Value) -> bool {
        lookup(payload, &self.path)
            .and_then(field_text)
            .is_some_and(|text| self.matcher.is_match(&text))
    }
}

impl Condition {
    /// Whether the payload satisfies the condition.
    pub(crate) fn is_match(&self, payload: &Value) -> bool {
        match self.combine {
            Combine::AllOf => self.atoms.iter().all(|atom| atom.is_match(payload)),
            Combine::AnyOf => self.atoms.iter().any(|atom| atom.is_match(payload)),
        }
    }
}

/// The value at `path` in `payload`: object keys, or array indexes for numeric segments.
pub(crate) fn lookup<'a>(payload: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut value = payload;
    for segment in path {
        value = match value {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// The value at the dotted path `field`, split on `.`.
pub(crate) fn lookup_dotted<'a>(payload: &'a Value, field: &str) -> Option<&'a Value> {
    let path: Vec<String> = field.split('.').map(str::to_owned).collect();
    lookup(payload, &path)
}

/// The text a matcher sees for `value`; `None` for `null`.
pub(crate) fn field_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => {
            Some(value.to_string())
        }
    }
}

/// Compiles the `match:` of an atom: the seed's `{type, value, inner}` object, or the shared
/// matcher forms.
pub(crate) fn compile_match(spec: &Yaml) -> Result<Matcher, String> {
    let Yaml::Mapping(map) = spec else {
        return match spec {
            Yaml::String(text) if text.is_empty() => Err(
                "`match` is empty: write a matcher such as `re:^git ` or {type: exact, value: ..}"
                    .to_owned(),
            ),
            Yaml::String(text) => Matcher::parse(text).map_err(|err| err.to_string()),
            _ => Err(
                "`match` must be a string or a mapping such as {type: regex, value: '^rm '}"
                    .to_owned(),
            ),
        };
    };
    if map.get("type").is_none() {
        return serde_yaml_ng::from_value::<Matcher>(spec.clone()).map_err(|err| err.to_string());
    }
    for key in map.keys() {
        let name = key.as_str().unwrap_or_default();
        if !matches!(name, "type" | "value" | "inner") {
            return Err(format!(
                "unknown key `{}` in `match` (expected type, value, inner)",
                yaml_key(key)
            ));
        }
    }
    let kind = map
        .get("type")
        .and_then(Yaml::as_str)
        .ok_or("`match.type` must be a string: exact, regex, glob or not")?;
    let value = || -> Result<&str, String> {
        match map.get("value") {
            Some(Yaml::String(text)) if !text.is_empty() => Ok(text),
            Some(Yaml::String(_)) | None | Some(Yaml::Null) => {
                Err(format!("`match.value` is required for type {kind}"))
            }
            Some(_) => Err("`match.value` must be a string".to_owned()),
        }
    };
    let matcher = match kind {
        "exact" => Matcher::Exact(value()?.to_owned()),
        "regex" => Matcher::regex(value()?).map_err(|err| err.to_string())?,
        "glob" => Matcher::glob(value()?).map_err(|err| err.to_string())?,
        "not" => {
            let inner = map
                .get("inner")
                .ok_or("`match.type: not` needs `inner`, the matcher it negates")?;
            Matcher::Not(Box::new(
                compile_match(inner).map_err(|err| format!("in `inner`: {err}"))?,
            ))
        }
        other => {
            return Err(format!(
                "unknown `match.type: {other}` (expected exact, regex, glob or not)"
            ));
        }
    };
    if kind != "not" && map.get("inner").is_some() {
        return Err(format!(
            "`match.inner` is only for type not, not for {kind}"
        ));
    }
    Ok(matcher)
}

/// A mapping key for a message.
fn yaml_key(key: &Yaml) -> String {
    match key {
        Yaml::String(text) => text.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|text| text.trim().to_owned())
            .unwrap_or_default(),
    }
}

/// A Claude Code `matcher` string, compiled.
#[derive(Debug, Clone)]
pub(crate) enum NameMatcher {
    /// Empty or `*`: everything.
    Any,
    /// `Bash` or `Bash|Write`: exact names.
    Names(Vec<String>),
    /// Anything else: a regex that searches the name.
    Pattern(Matcher),
}

impl NameMatcher {
    /// Compiles Claude Code's matcher syntax.
    pub(crate) fn parse(text: &str) -> Result<Self, MatcherError> {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            return Ok(Self::Any);
        }
        let plain = text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|');
        if plain {
            let names = text
                .split('|')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect();
            return Ok(Self::Names(names));
        }
        Matcher::regex(text).map(Self::Pattern)
    }

    /// Whether `value` matches, as a plain string.
    pub(crate) fn is_match(&self, value: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Names(names) => names.iter().any(|name| name == value),
            Self::Pattern(matcher) => matcher.is_match(value),
        }
    }

    /// Whether the Mew tool `mew_name` matches under either of its names.
    pub(crate) fn is_match_tool(&self, mew_name: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Names(names) => names
                .iter()
                .any(|name| name == mew_name || canonical_name(name) == mew_name),
            Self::Pattern(matcher) => {
                matcher.is_match(mew_name) || matcher.is_match(claude_code_tool_name(mew_name))
            }
        }
    }
}

/// The name Claude Code gives Mew's tool `mew_name`: `Bash` for `bash`, `Write` for
/// `write_file`, and so on for the built-in file and shell tools; every other tool keeps its
/// name (Mew's `Agent`, MCP tools `mcp__server__tool` are named alike in both).
pub(crate) fn claude_code_tool_name(mew_name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, canonical)| {
            *canonical == mew_name
                && alias.starts_with(|c: char| c.is_ascii_uppercase())
                && canonical.starts_with(|c: char| c.is_ascii_lowercase())
        })
        .map_or(mew_name, |(alias, _)| alias)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn atom(field: &str, matcher: &str) -> Atom {
        Atom::new(field, Matcher::parse(matcher).unwrap()).unwrap()
    }

    fn yaml(text: &str) -> Yaml {
        serde_yaml_ng::from_str(text).unwrap()
    }

    fn payload() -> Value {
        json!({
            "tool_name": "bash",
            "tool_input": {"command": "rm -rf /tmp/x", "timeout_ms": 5000, "edits": [{"old": "a"}]},
            "is_error": false,
            "nothing": null,
        })
    }

    #[test]
    fn dotted_paths_reach_nested_fields_and_array_items() {
        let p = payload();
        assert!(atom("tool_input.command", "re:^rm ").is_match(&p));
        assert!(atom("tool_input.timeout_ms", "5000").is_match(&p));
        assert!(atom("is_error", "false").is_match(&p));
        assert!(atom("tool_input.edits.0.old", "a").is_match(&p));
        assert!(!atom("tool_input.edits.1.old", "re:.*").is_match(&p));
        assert!(!atom("tool_input.edits.x", "re:.*").is_match(&p));
        assert!(atom("tool_input.edits", r#"[{"old":"a"}]"#).is_match(&p));
        // Objects are matched as their compact JSON with sorted keys.
        assert!(atom("tool_input", r#"re:"command":"rm -rf"#).is_match(&p));
        assert!(!atom("tool_name.inner", "re:.*").is_match(&p));
        assert!(Atom::new("", Matcher::parse("x").unwrap()).is_err());
        assert!(Atom::new("a..b", Matcher::parse("x").unwrap()).is_err());
    }

    #[test]
    fn missing_or_null_fields_match_no_atom_not_even_not() {
        let p = payload();
        assert!(!atom("tool_input.file_path", "!glob:**/.env").is_match(&p));
        assert!(!atom("missing", "!x").is_match(&p));
        assert!(!atom("nothing", "!x").is_match(&p));
        assert!(!atom("nothing", "re:.*").is_match(&p));
        // Present and not matching: `not` is true.
        assert!(atom("tool_name", "!write_file").is_match(&p));
        assert!(!atom("tool_name", "!bash").is_match(&p));
    }

    #[test]
    fn all_of_and_any_of() {
        let p = payload();
        let both = |combine, atoms| Condition { combine, atoms };
        let yes = atom("tool_name", "bash");
        let no = atom("tool_name", "grep");
        assert!(
            both(
                Combine::AllOf,
                vec![yes.clone(), atom("tool_input.command", "re:rm")]
            )
            .is_match(&p)
        );
        assert!(!both(Combine::AllOf, vec![yes.clone(), no.clone()]).is_match(&p));
        assert!(both(Combine::AnyOf, vec![no.clone(), yes.clone()]).is_match(&p));
        assert!(!both(Combine::AnyOf, vec![no.clone(), atom("missing", "!x")]).is_match(&p));
    }

    #[test]
    fn seed_match_objects_compile_to_every_kind() {
        let exact = compile_match(&yaml("{type: exact, value: bash}")).unwrap();
        assert!(exact.is_match("bash") && !exact.is_match("bash2"));
        let regex = compile_match(&yaml("{type: regex, value: '^git (push|reset)'}")).unwrap();
        assert!(regex.is_match("git push origin") && !regex.is_match("git pull"));
        let glob = compile_match(&yaml("{type: glob, value: 'src/**/*.rs'}")).unwrap();
        assert!(glob.is_match("src/a/b.rs") && !glob.is_match("docs/a.rs"));
        let not = compile_match(&yaml(
            "{type: not, inner: {type: not, inner: {type: glob, value: '*.md'}}}",
        ))
        .unwrap();
        assert!(not.is_match("a.md") && !not.is_match("a.rs"));
        // The shared forms work too.
        assert!(
            compile_match(&yaml("'re:^rm '"))
                .unwrap()
                .is_match("rm -rf")
        );
        assert!(
            compile_match(&yaml("{not: {glob: '*.md'}}"))
                .unwrap()
                .is_match("a.rs")
        );
    }

    #[test]
    fn bad_match_objects_say_why() {
        let err = |text: &str| compile_match(&yaml(text)).unwrap_err();
        assert_eq!(
            err("{type: exact}"),
            "`match.value` is required for type exact"
        );
        assert_eq!(
            err("{type: regex, value: ''}"),
            "`match.value` is required for type regex"
        );
        assert!(err("{type: regex, value: '(a'}").starts_with("bad regex `(a`"));
        assert!(err("{type: glob, value: 'a[b'}").starts_with("bad glob `a[b`"));
        assert_eq!(
            err("{type: not}"),
            "`match.type: not` needs `inner`, the matcher it negates"
        );
        assert!(
            err("{type: not, inner: {type: regex, value: '('}}")
                .starts_with("in `inner`: bad regex")
        );
        assert_eq!(
            err("{type: fuzzy, value: a}"),
            "unknown `match.type: fuzzy` (expected exact, regex, glob or not)"
        );
        assert_eq!(
            err("{type: exact, value: a, flags: i}"),
            "unknown key `flags` in `match` (expected type, value, inner)"
        );
        assert_eq!(
            err("{type: exact, value: a, inner: {type: exact, value: b}}"),
            "`match.inner` is only for type not, not for exact"
        );
        assert!(err("''").starts_with("`match` is empty"));
        assert!(err("[1]").starts_with("`match` must be a string or a mapping"));
    }

    #[test]
    fn claude_code_matchers() {
        let any = NameMatcher::parse("").unwrap();
        assert!(any.is_match_tool("bash") && any.is_match("startup"));
        assert!(NameMatcher::parse("*").unwrap().is_match_tool("grep"));

        let bash = NameMatcher::parse("Bash").unwrap();
        assert!(bash.is_match_tool("bash"));
        assert!(!bash.is_match_tool("write_file"));
        let alternatives = NameMatcher::parse("Bash|Write").unwrap();
        assert!(alternatives.is_match_tool("bash") && alternatives.is_match_tool("write_file"));
        assert!(!alternatives.is_match_tool("edit_file"));
        // Mew's own names work too.
        assert!(
            NameMatcher::parse("edit_file")
                .unwrap()
                .is_match_tool("edit_file")
        );
        assert!(NameMatcher::parse("Task").unwrap().is_match_tool("Agent"));
        // Exact names are whole and case-sensitive.
        assert!(!NameMatcher::parse("Bas").unwrap().is_match_tool("bash"));
        assert!(!NameMatcher::parse("BASH").unwrap().is_match_tool("bash"));

        let regex = NameMatcher::parse("Edit|Write.*").unwrap();
        assert!(matches!(regex, NameMatcher::Pattern(_)));
        assert!(regex.is_match_tool("edit_file") && regex.is_match_tool("write_file"));
        assert!(!regex.is_match_tool("bash"));
        let mcp = NameMatcher::parse("mcp__github__.*").unwrap();
        assert!(mcp.is_match_tool("mcp__github__create_issue"));
        assert!(!mcp.is_match_tool("mcp__gitlab__x"));
        assert!(NameMatcher::parse("(unclosed").is_err());

        let source = NameMatcher::parse("startup|clear").unwrap();
        assert!(source.is_match("clear") && !source.is_match("resume"));
    }

    #[test]
    fn claude_code_names_for_mew_tools() {
        assert_eq!(claude_code_tool_name("bash"), "Bash");
        assert_eq!(claude_code_tool_name("write_file"), "Write");
        assert_eq!(claude_code_tool_name("read_file"), "Read");
        assert_eq!(claude_code_tool_name("Agent"), "Agent");
        assert_eq!(claude_code_tool_name("LoadSkill"), "LoadSkill");
        assert_eq!(claude_code_tool_name("mcp__a__b"), "mcp__a__b");
    }
}
