//! How deep a YAML or JSON text nests, checked before it is parsed.
//!
//! libyaml (behind `serde_yaml_ng`) takes time that grows with the square of the nesting of
//! flow collections (`[[[...]]]`): it parses the whole text before serde's own recursion limit
//! can refuse it, so a 1 MiB file of brackets takes minutes. [`check_nesting`] walks the text
//! with a streaming parser (`saphyr-parser`) and stops as soon as the nesting passes the
//! limit, which costs microseconds whatever the file holds. JSON is YAML's flow syntax, so
//! the same check serves JSON files.

use saphyr_parser::{Event, Parser};

/// The deepest a file Mew reads may nest its collections (mappings and sequences, block or
/// flow). Real role, skill, hook and configuration files nest a handful of levels.
pub const MAX_NESTING: usize = 64;

/// A text that nests deeper than the limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("collections nested deeper than {limit} levels at line {line}, column {column}")]
pub struct TooDeep {
    /// The limit that was passed.
    pub limit: usize,
    /// Where (1-based line and column) the nesting passed it.
    pub line: usize,
    /// The column, 1-based.
    pub column: usize,
}

/// Refuses a YAML or JSON `text` whose collections nest deeper than `limit`; anything else,
/// syntax errors included, is left to the real parser to judge.
pub fn check_nesting(text: &str, limit: usize) -> Result<(), TooDeep> {
    let mut depth = 0usize;
    for event in Parser::new_from_str(text) {
        match event {
            Ok((Event::SequenceStart(..) | Event::MappingStart(..), span)) => {
                depth += 1;
                if depth > limit {
                    return Err(TooDeep {
                        limit,
                        line: span.start.line(),
                        column: span.start.col() + 1,
                    });
                }
            }
            Ok((Event::SequenceEnd | Event::MappingEnd, _)) => depth = depth.saturating_sub(1),
            Ok(_) => {}
            Err(error) => {
                // The streaming parser stopped (a syntax error, or its own depth limit). What
                // follows can nest at most one level deeper per `[` or `{` it holds: refuse
                // the text if that could pass the limit.
                let marker = error.marker();
                let rest = text
                    .char_indices()
                    .nth(marker.index())
                    .map_or("", |(at, _)| &text[at..]);
                let opens = rest.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
                if depth + opens > limit {
                    return Err(TooDeep {
                        limit,
                        line: marker.line(),
                        column: marker.col() + 1,
                    });
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_files_pass() {
        let yaml = "name: x\ntools: [a, b]\nhooks:\n  - {event: A, if: {all_of: [{field: p}]}}\n";
        assert_eq!(check_nesting(yaml, MAX_NESTING), Ok(()));
        assert_eq!(
            check_nesting(r#"{"a": [[1], {"b": []}]}"#, MAX_NESTING),
            Ok(())
        );
        assert_eq!(check_nesting("", MAX_NESTING), Ok(()));
        // Brackets in strings and comments are text.
        let quoted = format!(
            "a: \"{}\"\nb: '{}' # {}\n",
            "[".repeat(500),
            "{".repeat(500),
            "[".repeat(500)
        );
        assert_eq!(check_nesting(&quoted, MAX_NESTING), Ok(()));
    }

    #[test]
    fn deep_nesting_is_refused_quickly_in_every_form() {
        let n = 200_000;
        for text in [
            format!("a: {}{}", "[".repeat(n), "]".repeat(n)),
            format!("a: {}", "{a: ".repeat(n)),
            format!("{}x", "- ".repeat(n)),
            format!("{}{}", "[".repeat(n), "]".repeat(n)),
        ] {
            let refused = check_nesting(&text, MAX_NESTING).unwrap_err();
            assert_eq!(refused.limit, MAX_NESTING);
            assert_eq!(refused.line, 1);
        }
        let block: String = (0..70)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        let refused = check_nesting(&block, MAX_NESTING).unwrap_err();
        assert_eq!(refused.line, 65, "{refused}");
        assert!(
            refused
                .to_string()
                .contains("deeper than 64 levels at line 65")
        );
    }

    #[test]
    fn the_limit_itself_is_allowed() {
        let text = format!("{}{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert_eq!(check_nesting(&text, MAX_NESTING), Ok(()));
        let text = format!(
            "{}{}",
            "[".repeat(MAX_NESTING + 1),
            "]".repeat(MAX_NESTING + 1)
        );
        assert!(check_nesting(&text, MAX_NESTING).is_err());
    }

    #[test]
    fn a_syntax_error_before_deep_brackets_does_not_hide_them() {
        // The streaming parser stops at the bad indentation; the brackets after it still count.
        let text = format!("a: b\n c: d\n  e: {}{}\n", "[".repeat(100), "]".repeat(100));
        assert!(check_nesting(&text, MAX_NESTING).is_err());
        // A syntax error with little after it is the real parser's to report.
        assert_eq!(check_nesting("a: b\n c: [d]\n", MAX_NESTING), Ok(()));
    }
}
