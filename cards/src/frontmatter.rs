//! Reading a Markdown file's YAML frontmatter as Claude Code does.
//!
//! Claude Code agent and skill files are written by hand, and many are not valid YAML: an
//! unquoted `description: Use this agent when: the user asks...` holds a second `: `, and
//! `description: "Expert" in Rust` starts a quoted scalar that does not end the value. Claude
//! Code loads them, reading such a top-level value as plain text. [`parse_yaml`] does the same:
//! it parses strictly, and only when that fails, once more with each top-level `key: value`
//! line that is not valid YAML by itself quoted (its indented continuation lines joined to it,
//! as YAML folds a plain scalar). A frontmatter that still fails is the strict error: what was
//! written is reported, not what the second reading made of it.

use serde_yaml_ng::Value;

/// What [`parse_yaml`] read.
#[derive(Debug, Clone, PartialEq)]
pub struct Frontmatter {
    /// The YAML value (merge keys applied).
    pub value: Value,
    /// The top-level keys whose values were read as plain text, in file order; empty when the
    /// YAML was valid as written.
    pub quoted: Vec<String>,
}

/// Parses frontmatter YAML (see the module docs). The error is the strict parser's.
pub fn parse_yaml(yaml: &str) -> Result<Frontmatter, serde_yaml_ng::Error> {
    let strict = parse(yaml);
    match strict {
        Ok(value) => Ok(Frontmatter {
            value,
            quoted: Vec::new(),
        }),
        Err(err) => match quote_plain_values(yaml) {
            Some((text, quoted)) => match parse(&text) {
                Ok(value) => Ok(Frontmatter { value, quoted }),
                Err(_) => Err(err),
            },
            None => Err(err),
        },
    }
}

fn parse(yaml: &str) -> Result<Value, serde_yaml_ng::Error> {
    serde_yaml_ng::from_str::<Value>(yaml).and_then(|mut value| value.apply_merge().map(|()| value))
}

/// The key of a top-level `key: value` line, and the value (trimmed, not empty).
fn top_level_entry(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = line.split_once(':')?;
    let is_key = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !is_key || !rest.starts_with([' ', '\t']) {
        return None;
    }
    let value = rest.trim();
    (!value.is_empty()).then_some((key, value))
}

/// `yaml` with each top-level value that is not valid YAML by itself single-quoted, line count
/// kept (joined continuation lines become empty lines), and the keys quoted; `None` when no
/// line needed it.
fn quote_plain_values(yaml: &str) -> Option<(String, Vec<String>)> {
    let lines: Vec<&str> = yaml.split('\n').collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut quoted = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end_matches('\r');
        i += 1;
        let Some((key, value)) = top_level_entry(line) else {
            out.push(line.to_owned());
            continue;
        };
        // A value that is YAML by itself stays as written, and so does one that opens a
        // structure (a flow list or mapping, a block scalar, an anchor, alias or tag): a
        // broken one is the author's to fix, not text. A flow list or mapping closed on its
        // line and followed by more is text, as Claude Code's own example
        // `argument-hint: [pr-number] [priority]` is.
        let valid = serde_yaml_ng::from_str::<Value>(line).is_ok_and(|v| v.is_mapping());
        let flow_then_text = value.starts_with(['[', '{']) && brackets_balance(value);
        if valid || (value.starts_with(['[', '{', '|', '>', '&', '*', '!']) && !flow_then_text) {
            out.push(line.to_owned());
            continue;
        }
        let mut text = value.to_owned();
        let mut joined = 0;
        while let Some(next) = lines.get(i) {
            let next = next.trim_end_matches('\r');
            if next.trim().is_empty() || !next.starts_with([' ', '\t']) {
                break;
            }
            text.push(' ');
            text.push_str(next.trim());
            i += 1;
            joined += 1;
        }
        out.push(format!("{key}: '{}'", text.replace('\'', "''")));
        out.extend(std::iter::repeat_n(String::new(), joined));
        quoted.push(key.to_owned());
    }
    (!quoted.is_empty()).then(|| (out.join("\n"), quoted))
}

/// True when every `[` and `{` of `value` is closed, in order, and nothing closes what was not
/// opened.
fn brackets_balance(value: &str) -> bool {
    let mut open = Vec::new();
    for c in value.chars() {
        match c {
            '[' | '{' => open.push(c),
            ']' if open.pop() != Some('[') => return false,
            '}' if open.pop() != Some('{') => return false,
            _ => {}
        }
    }
    open.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(value: &Value, key: &str) -> String {
        value[key].as_str().unwrap_or_default().to_owned()
    }

    #[test]
    fn valid_yaml_is_read_as_written() {
        let read = parse_yaml("name: a\ndescription: \"x: y\"\ntools: [Read, Grep]\n").unwrap();
        assert!(read.quoted.is_empty());
        assert_eq!(string(&read.value, "description"), "x: y");
        assert_eq!(read.value["tools"][1].as_str(), Some("Grep"));
    }

    #[test]
    fn a_value_with_a_colon_or_a_leading_quote_is_plain_text() {
        let read = parse_yaml(
            "name: reviewer\ndescription: Use this agent when: the user asks. Examples: <example>it's here</example>\ntools: Read, Grep\n",
        )
        .unwrap();
        assert_eq!(read.quoted, ["description"]);
        assert_eq!(
            string(&read.value, "description"),
            "Use this agent when: the user asks. Examples: <example>it's here</example>"
        );
        assert_eq!(string(&read.value, "tools"), "Read, Grep");

        let read = parse_yaml("name: x\ndescription: \"Expert\" in Rust\n").unwrap();
        assert_eq!(read.quoted, ["description"]);
        assert_eq!(string(&read.value, "description"), "\"Expert\" in Rust");
    }

    #[test]
    fn continuation_lines_are_folded_and_lines_keep_their_numbers() {
        let yaml = "description: Use when: a\n  and b\n\ttoo\nmodel: sonnet\n";
        let (text, quoted) = quote_plain_values(yaml).unwrap();
        assert_eq!(quoted, ["description"]);
        assert_eq!(text.split('\n').count(), yaml.split('\n').count());
        let read = parse_yaml(yaml).unwrap();
        assert_eq!(string(&read.value, "description"), "Use when: a and b too");
        assert_eq!(string(&read.value, "model"), "sonnet");
    }

    #[test]
    fn a_closed_flow_list_followed_by_text_is_plain_text() {
        let read = parse_yaml(
            "description: d\nargument-hint: [pr-number] [priority] [assignee]\n\
             other-hint: add [tagId] | remove [tagId]\nlist: [a, b]\n",
        )
        .unwrap();
        assert_eq!(read.quoted, ["argument-hint"]);
        assert_eq!(
            string(&read.value, "argument-hint"),
            "[pr-number] [priority] [assignee]"
        );
        assert_eq!(
            string(&read.value, "other-hint"),
            "add [tagId] | remove [tagId]"
        );
        assert_eq!(read.value["list"][1].as_str(), Some("b"));
        assert!(
            brackets_balance("[a] {b: [c]}") && !brackets_balance("[a}") && !brackets_balance("][")
        );
    }

    #[test]
    fn yaml_broken_in_another_way_is_the_strict_error() {
        for yaml in [
            "name: [a\n",
            "name: [a] [b\n",
            "  - x\n- y: [\n",
            "name: a\n bad: indent: x\n",
        ] {
            let strict = serde_yaml_ng::from_str::<Value>(yaml).unwrap_err();
            let err = parse_yaml(yaml).unwrap_err();
            assert_eq!(err.to_string(), strict.to_string(), "{yaml:?}");
        }
    }
}
