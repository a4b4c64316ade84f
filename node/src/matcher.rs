//! `Matcher`: one string condition (exact, regex, path glob, or the negation of one), shared by permission rules and hook conditions.
//!
//! Two written forms, both compiled up front so that a bad pattern is an error when the
//! configuration is loaded, never when a tool is called:
//!
//! - a string: `re:<regex>`, `glob:<pattern>`, `exact:<text>`, `!<matcher>` (the negation of
//!   the matcher written after the `!`); any other text is matched exactly;
//! - an object with exactly one key: `{exact: <text>}`, `{regex: <regex>}`, `{glob: <pattern>}`
//!   or `{not: <matcher>}`, where the matcher under `not` is again a string or an object.
//!
//! Semantics, chosen to be the same everywhere the matcher is used:
//!
//! - **exact** compares the whole value, case-sensitively;
//! - **regex** *searches* the value (Rust `regex` syntax): `re:push` matches `git push origin`.
//!   Anchor the pattern (`re:^git push$`) to match the whole value;
//! - **glob** matches the whole value with *path* semantics: `*`, `?` and `[...]` never match
//!   `/`, `**` matches any number of whole path components (`src/**/*.rs`, `**/.env`), `{a,b}`
//!   is an alternation and `\` escapes. To match command lines, where `*` should cross `/`,
//!   use a regex (or a permission rule, which has command semantics for `bash`);
//! - **not** inverts its inner matcher. A missing value is matched as the empty string, so
//!   `not` is true for a missing value unless its inner matcher matches `""`.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use regex::Regex;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

/// A compiled string condition. See the [module docs](self) for the forms and semantics.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    /// The whole value equals this text.
    Exact(String),
    /// The regex matches somewhere in the value (search, not anchored).
    Regex(Regex),
    /// The glob matches the whole value, with path semantics.
    Glob(GlobMatcher),
    /// The inner matcher does not match.
    Not(Box<Matcher>),
}

/// A pattern that does not compile, or a matcher written in a shape that is not one of the
/// forms above. The message names the pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MatcherError {
    /// The regex does not compile.
    #[error("bad regex `{pattern}`: {message}")]
    Regex {
        /// The regex as written.
        pattern: String,
        /// What the regex compiler said.
        message: String,
    },
    /// The glob does not compile.
    #[error("bad glob `{pattern}`: {message}")]
    Glob {
        /// The glob as written.
        pattern: String,
        /// What the glob compiler said.
        message: String,
    },
    /// `!` with nothing after it.
    #[error("`!` must be followed by a matcher")]
    EmptyNot,
}

impl Matcher {
    /// Parses and compiles the string form: `re:<regex>`, `glob:<pattern>`, `exact:<text>`,
    /// `!<matcher>`, or plain text (exact).
    pub(crate) fn parse(text: &str) -> Result<Self, MatcherError> {
        if let Some(inner) = text.strip_prefix('!') {
            if inner.is_empty() {
                return Err(MatcherError::EmptyNot);
            }
            return Ok(Self::Not(Box::new(Self::parse(inner)?)));
        }
        if let Some(pattern) = text.strip_prefix("re:") {
            return Self::regex(pattern);
        }
        if let Some(pattern) = text.strip_prefix("glob:") {
            return Self::glob(pattern);
        }
        let exact = text.strip_prefix("exact:").unwrap_or(text);
        Ok(Self::Exact(exact.to_owned()))
    }

    /// Compiles a regex matcher (search semantics).
    pub(crate) fn regex(pattern: &str) -> Result<Self, MatcherError> {
        Regex::new(pattern)
            .map(Self::Regex)
            .map_err(|error| MatcherError::Regex {
                pattern: pattern.to_owned(),
                message: error.to_string(),
            })
    }

    /// Compiles a glob matcher with path semantics (`*` stays within one path component,
    /// `**` crosses them).
    pub(crate) fn glob(pattern: &str) -> Result<Self, MatcherError> {
        compile_path_glob(pattern).map(Self::Glob)
    }

    /// Whether `value` satisfies the condition.
    pub(crate) fn is_match(&self, value: &str) -> bool {
        match self {
            Self::Exact(text) => text == value,
            Self::Regex(regex) => regex.is_match(value),
            Self::Glob(glob) => glob.is_match(value),
            Self::Not(inner) => !inner.is_match(value),
        }
    }
}

/// Compiles `pattern` as a glob with path semantics.
pub(crate) fn compile_path_glob(pattern: &str) -> Result<GlobMatcher, MatcherError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|error| MatcherError::Glob {
            pattern: pattern.to_owned(),
            message: error.kind().to_string(),
        })
}

/// The string form, which [`Matcher::parse`] reads back into an equivalent matcher.
impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(text) => {
                let plain = !["!", "re:", "glob:", "exact:"]
                    .iter()
                    .any(|prefix| text.starts_with(prefix));
                if plain {
                    f.write_str(text)
                } else {
                    write!(f, "exact:{text}")
                }
            }
            Self::Regex(regex) => write!(f, "re:{}", regex.as_str()),
            Self::Glob(glob) => write!(f, "glob:{}", glob.glob().glob()),
            Self::Not(inner) => write!(f, "!{inner}"),
        }
    }
}

/// Reads the string form or the one-key object form; compile errors become deserialization
/// errors that name the pattern.
impl<'de> Deserialize<'de> for Matcher {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MatcherVisitor)
    }
}

struct MatcherVisitor;

impl<'de> Visitor<'de> for MatcherVisitor {
    type Value = Matcher;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a matcher: a string, or one of {exact: ..}, {regex: ..}, {glob: ..}, {not: ..}",
        )
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Matcher, E> {
        Matcher::parse(text).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Matcher, A::Error> {
        let Some(kind) = map.next_key::<String>()? else {
            return Err(de::Error::custom(
                "a matcher object needs one key: exact, regex, glob or not",
            ));
        };
        let matcher = match kind.as_str() {
            "exact" => Matcher::Exact(map.next_value()?),
            "regex" => Matcher::regex(&map.next_value::<String>()?).map_err(de::Error::custom)?,
            "glob" => Matcher::glob(&map.next_value::<String>()?).map_err(de::Error::custom)?,
            "not" => Matcher::Not(Box::new(map.next_value()?)),
            other => {
                return Err(de::Error::custom(format!(
                    "unknown matcher kind `{other}` (expected exact, regex, glob or not)"
                )));
            }
        };
        if let Some(extra) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "a matcher object has exactly one key, found `{kind}` and `{extra}`"
            )));
        }
        Ok(matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Matcher {
        Matcher::parse(text).unwrap()
    }

    #[test]
    fn plain_text_is_exact_and_whole() {
        let matcher = parse("write_file");
        assert!(matches!(&matcher, Matcher::Exact(text) if text == "write_file"));
        assert!(matcher.is_match("write_file"));
        assert!(!matcher.is_match("write_files"));
        assert!(!matcher.is_match("Write_file"));
        let literal = parse("exact:!re:x");
        assert!(literal.is_match("!re:x"));
        assert_eq!(literal.to_string(), "exact:!re:x");
    }

    #[test]
    fn regex_searches_unless_anchored() {
        let search = parse("re:push");
        assert!(search.is_match("git push origin main"));
        assert!(!search.is_match("git pull"));
        let anchored = parse("re:^git push$");
        assert!(anchored.is_match("git push"));
        assert!(!anchored.is_match("git push origin"));
        assert_eq!(anchored.to_string(), "re:^git push$");
    }

    #[test]
    fn glob_star_stays_in_one_component_and_double_star_crosses() {
        let star = parse("glob:src/*.rs");
        assert!(star.is_match("src/lib.rs"));
        assert!(!star.is_match("src/permission/mod.rs"));
        let double = parse("glob:src/**/*.rs");
        assert!(double.is_match("src/lib.rs"));
        assert!(double.is_match("src/permission/mod.rs"));
        assert!(!double.is_match("tests/all.rs"));
        let anywhere = parse("glob:**/.env");
        assert!(anywhere.is_match(".env"));
        assert!(anywhere.is_match("/p/config/.env"));
        assert!(!anywhere.is_match("/p/.envrc"));
        let question = parse("glob:a?c");
        assert!(question.is_match("abc"));
        assert!(!question.is_match("a/c"));
        assert_eq!(double.to_string(), "glob:src/**/*.rs");
    }

    #[test]
    fn not_inverts_and_nests() {
        let not = parse("!re:^git ");
        assert!(not.is_match("rm -rf /"));
        assert!(!not.is_match("git status"));
        let twice = parse("!!bash");
        assert!(twice.is_match("bash"));
        assert!(!twice.is_match("sh"));
        assert_eq!(parse("!glob:*.md").to_string(), "!glob:*.md");
        assert!(parse("!x").is_match(""));
    }

    #[test]
    fn compile_errors_name_the_pattern() {
        let error = Matcher::parse("re:(unclosed").unwrap_err();
        assert!(matches!(&error, MatcherError::Regex { pattern, .. } if pattern == "(unclosed"));
        assert!(
            error.to_string().starts_with("bad regex `(unclosed`: "),
            "{error}"
        );
        let error = Matcher::parse("!glob:src/[a").unwrap_err();
        assert!(matches!(&error, MatcherError::Glob { pattern, .. } if pattern == "src/[a"));
        assert!(
            error.to_string().starts_with("bad glob `src/[a`: "),
            "{error}"
        );
        assert_eq!(Matcher::parse("!").unwrap_err(), MatcherError::EmptyNot);
    }

    #[test]
    fn object_forms_from_yaml_and_json() {
        let yaml: Vec<Matcher> = serde_yaml_ng::from_str(
            "- {exact: write_file}\n- {regex: '^git '}\n- {glob: 'src/**'}\n\
             - not: {glob: '*.md'}\n- not: 're:x'\n- glob:docs/*\n",
        )
        .unwrap();
        let forms: Vec<String> = yaml.iter().map(ToString::to_string).collect();
        assert_eq!(
            forms,
            [
                "write_file",
                "re:^git ",
                "glob:src/**",
                "!glob:*.md",
                "!re:x",
                "glob:docs/*"
            ]
        );
        assert!(yaml[2].is_match("src/a/b.rs"));
        assert!(yaml[3].is_match("docs/a.md"));
        assert!(!yaml[3].is_match("a.md"));

        let json: Matcher =
            serde_json::from_value(serde_json::json!({"not": {"exact": "bash"}})).unwrap();
        assert!(!json.is_match("bash"));
        assert!(json.is_match("read_file"));
    }

    #[test]
    fn bad_object_forms_are_errors_that_say_why() {
        let error = serde_json::from_value::<Matcher>(serde_json::json!({"regex": "(a"}))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("bad regex `(a`"), "{error}");
        let error = serde_json::from_value::<Matcher>(serde_json::json!({"fuzzy": "a"}))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "unknown matcher kind `fuzzy` (expected exact, regex, glob or not)"
        );
        let error =
            serde_json::from_value::<Matcher>(serde_json::json!({"exact": "a", "glob": "b"}))
                .unwrap_err()
                .to_string();
        assert_eq!(
            error,
            "a matcher object has exactly one key, found `exact` and `glob`"
        );
        let error = serde_json::from_value::<Matcher>(serde_json::json!({}))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "a matcher object needs one key: exact, regex, glob or not"
        );
        assert!(serde_json::from_value::<Matcher>(serde_json::json!(3)).is_err());
    }
}
