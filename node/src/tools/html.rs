//! HTML as readable text for `web_fetch`: headings, paragraphs, lists, table rows and links as
//! numbered footnotes, in one pass over html5ever's tokens.
//!
//! Written here rather than taken from an HTML-to-text crate: those build the document's tree
//! first (html5ever's tree builder, as html2text does), and both the tree construction and
//! their rendering take time superlinear in the nesting depth (twenty thousand nested elements
//! took twenty seconds of CPU in a test build). A page is anyone's input, and work on a
//! blocking thread cannot be stopped by the tool's timeout. This renderer keeps no tree: its
//! time is linear in the page's size and its state is a few counters and the text it writes,
//! which is bounded too. The tokenizer, html5ever's, does what must match browsers: character
//! references, and the raw text of scripts and styles.

use std::cell::RefCell;
use std::collections::HashMap;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use reqwest::Url;

/// The most bytes of text rendered; the rest of the page is dropped.
const MAX_TEXT_BYTES: usize = 2 * 1024 * 1024;

/// The most links listed as footnotes.
const MAX_LINKS: usize = 500;

/// How deep list items are indented at most.
const MAX_INDENT: usize = 8;

/// Elements whose content is not text to read.
const HIDDEN: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas",
    "select", "button",
];

/// `html` (the page at `base`) as text, its title first and its links numbered at the end.
pub(crate) fn to_text(html: &str, base: &Url) -> String {
    let tokenizer = Tokenizer::new(
        Renderer {
            state: RefCell::new(State::new(base.clone())),
        },
        TokenizerOpts::default(),
    );
    let input = BufferQueue::default();
    input.push_back(StrTendril::from(html));
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    tokenizer.sink.state.into_inner().finish()
}

/// Receives the tokens.
struct Renderer {
    state: RefCell<State>,
}

impl TokenSink for Renderer {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let mut state = self.state.borrow_mut();
        match token {
            Token::CharacterTokens(text) => state.text(&text),
            Token::TagToken(tag) => return state.tag(&tag),
            Token::DoctypeToken(_)
            | Token::CommentToken(_)
            | Token::NullCharacterToken
            | Token::EOFToken
            | Token::ParseError(_) => {}
        }
        TokenSinkResult::Continue
    }
}

/// One list being rendered: its next number when it is ordered.
#[derive(Debug, Clone, Copy)]
enum List {
    Bullets,
    Numbered(u32),
}

/// What the renderer knows at a point of the page.
struct State {
    base: Url,
    out: String,
    /// True once the text reached [`MAX_TEXT_BYTES`]: everything after is dropped.
    full: bool,
    /// The text of the page's first `title` element.
    title: Option<String>,
    /// Inside a `title` element.
    in_title: bool,
    /// The first `title` element has ended: later ones are dropped.
    titled: bool,
    /// Open hidden elements ([`HIDDEN`]); their content is dropped.
    hidden: usize,
    /// Open `pre` elements: whitespace is kept.
    pre: usize,
    /// Open lists, innermost last (only the innermost [`MAX_INDENT`] are kept).
    lists: Vec<List>,
    /// Newlines owed before the next text: 1 ends a line, 2 leaves a blank one.
    breaks: usize,
    /// A space owed before the next text.
    space: bool,
    /// The link being read: its footnote number, and the length of the text when it started.
    link: Option<(usize, usize)>,
    links: Vec<String>,
    numbers: HashMap<String, usize>,
    /// Cells written in the current table row.
    cells: usize,
}

impl State {
    fn new(base: Url) -> Self {
        Self {
            base,
            out: String::new(),
            full: false,
            title: None,
            in_title: false,
            titled: false,
            hidden: 0,
            pre: 0,
            lists: Vec::new(),
            breaks: 0,
            space: false,
            link: None,
            links: Vec::new(),
            numbers: HashMap::new(),
            cells: 0,
        }
    }

    /// Owes at least `n` newlines before the next text.
    fn block(&mut self, n: usize) {
        self.breaks = self.breaks.max(n);
        self.space = false;
    }

    /// Writes what is owed, then `text` as it is.
    fn write(&mut self, text: &str) {
        if self.full {
            return;
        }
        if !self.out.is_empty() {
            for _ in 0..self.breaks {
                self.out.push('\n');
            }
            if self.breaks == 0 && self.space && !self.out.ends_with([' ', '\n']) {
                self.out.push(' ');
            }
        }
        self.breaks = 0;
        self.space = false;
        self.out.push_str(text);
        if self.out.len() >= MAX_TEXT_BYTES {
            self.full = true;
        }
    }

    fn text(&mut self, text: &str) {
        if self.in_title {
            let title = self.title.get_or_insert_with(String::new);
            if !self.titled && title.len() < 1000 {
                title.push_str(text);
            }
            return;
        }
        if self.hidden > 0 {
            return;
        }
        if self.pre > 0 {
            self.write(text);
            return;
        }
        let mut words = text.split_whitespace().peekable();
        if text.starts_with(char::is_whitespace) {
            self.space = true;
        }
        while let Some(word) = words.next() {
            self.write(word);
            if words.peek().is_some() {
                self.space = true;
            }
        }
        if text.ends_with(char::is_whitespace) && !text.trim().is_empty() {
            self.space = true;
        }
    }

    fn tag(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let name: &str = &tag.name;
        let start = tag.kind == TagKind::StartTag;
        if !start && name == "title" && self.in_title {
            self.in_title = false;
            self.titled = true;
            return TokenSinkResult::Continue;
        }
        if HIDDEN.contains(&name) {
            if start && !tag.self_closing {
                self.hidden += 1;
            } else if !start {
                self.hidden = self.hidden.saturating_sub(1);
            }
            // The tokenizer reads these as browsers do: their content is not markup.
            return match (start, name) {
                (true, "script") => TokenSinkResult::RawData(RawKind::ScriptData),
                (true, "style" | "noscript" | "iframe") => {
                    TokenSinkResult::RawData(RawKind::Rawtext)
                }
                _ => TokenSinkResult::Continue,
            };
        }
        if self.hidden > 0 {
            // Inside an SVG, say: its `title` is not the page's.
            return TokenSinkResult::Continue;
        }
        match (start, name) {
            (true, "title") => {
                self.in_title = true;
                return TokenSinkResult::RawData(RawKind::Rcdata);
            }
            (true, "textarea") => return TokenSinkResult::RawData(RawKind::Rcdata),
            (true, "xmp" | "noembed" | "noframes") => {
                return TokenSinkResult::RawData(RawKind::Rawtext);
            }
            (_, "br") => {
                self.breaks = (self.breaks + 1).min(2);
                self.space = false;
            }
            (true, "hr") => {
                self.block(2);
                self.write("---");
                self.block(2);
            }
            (true, "h1" | "h2" | "h3" | "h4" | "h5" | "h6") => {
                self.block(2);
                let level = name[1..].parse::<usize>().unwrap_or(1);
                self.write(&format!("{} ", "#".repeat(level)));
            }
            (_, "p" | "pre" | "blockquote" | "table" | "figure" | "dl" | "form" | "address")
            | (false, "h1" | "h2" | "h3" | "h4" | "h5" | "h6") => self.block(2),
            (true, "ul" | "ol") => {
                self.block(if self.lists.is_empty() { 2 } else { 1 });
                self.lists.push(if name == "ol" {
                    List::Numbered(1)
                } else {
                    List::Bullets
                });
                if self.lists.len() > MAX_INDENT {
                    self.lists.remove(0);
                }
            }
            (false, "ul" | "ol") => {
                self.lists.pop();
                self.block(if self.lists.is_empty() { 2 } else { 1 });
            }
            (true, "li") => {
                self.block(1);
                let indent = "  ".repeat(self.lists.len().saturating_sub(1));
                let marker = match self.lists.last_mut() {
                    Some(List::Numbered(n)) => {
                        let marker = format!("{n}. ");
                        *n = n.saturating_add(1);
                        marker
                    }
                    Some(List::Bullets) | None => "- ".to_owned(),
                };
                self.write(&format!("{indent}{marker}"));
            }
            (true, "tr") => {
                self.block(1);
                self.cells = 0;
            }
            (true, "td" | "th") => {
                if self.cells > 0 {
                    self.write(" |");
                    self.space = true;
                }
                self.cells += 1;
            }
            (
                _,
                "div" | "section" | "article" | "header" | "footer" | "main" | "nav" | "aside"
                | "li" | "dt" | "dd" | "figcaption" | "details" | "summary" | "caption",
            )
            | (false, "tr") => self.block(1),
            (true, "a") => {
                self.link = self.link_number(tag).map(|n| (n, self.out.len()));
            }
            (false, "a") => {
                if let Some((n, at)) = self.link.take()
                    && self.out.len() > at
                {
                    self.write(&format!("[{n}]"));
                }
            }
            (true, "img") => {
                if let Some(alt) = attribute(tag, "alt").filter(|alt| !alt.trim().is_empty()) {
                    self.space = self.breaks == 0;
                    self.write(&format!("[image: {}]", alt.trim()));
                }
            }
            (_, "code") if self.pre == 0 => self.write("`"),
            _ => {}
        }
        match (start, name) {
            (true, "pre") => self.pre += 1,
            (false, "pre") => self.pre = self.pre.saturating_sub(1),
            _ => {}
        }
        TokenSinkResult::Continue
    }

    /// The footnote number of the link `tag` starts, when it goes somewhere readable.
    fn link_number(&mut self, tag: &Tag) -> Option<usize> {
        let href = attribute(tag, "href")?;
        let href = href.trim();
        if href.is_empty() || href.starts_with('#') {
            return None;
        }
        let url = self.base.join(href).ok()?;
        if !matches!(url.scheme(), "http" | "https" | "mailto") {
            return None;
        }
        let url = url.to_string();
        if let Some(n) = self.numbers.get(&url) {
            return Some(*n);
        }
        if self.links.len() >= MAX_LINKS {
            return None;
        }
        self.links.push(url.clone());
        let n = self.links.len();
        self.numbers.insert(url, n);
        Some(n)
    }

    /// The text, titled, with its footnotes.
    fn finish(self) -> String {
        let mut text = String::new();
        if let Some(title) = self
            .title
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            && !title.is_empty()
        {
            text.push_str(&format!("Title: {title}\n\n"));
        }
        // Lines that hold only spaces (left by markers and separators) are dropped; runs of
        // blank lines are one.
        let mut blank = false;
        for line in self.out.lines() {
            let line = line.trim_end();
            if line.trim().is_empty() {
                blank = !text.is_empty();
                continue;
            }
            if blank {
                text.push('\n');
                blank = false;
            }
            text.push_str(line);
            text.push('\n');
        }
        if self.full {
            text.push_str("[the rest of the page was not rendered]\n");
        }
        if !self.links.is_empty() {
            text.push_str("\nLinks:\n");
            for (n, url) in self.links.iter().enumerate() {
                text.push_str(&format!("[{}]: {url}\n", n + 1));
            }
        }
        text
    }
}

/// The value of `tag`'s attribute `name`.
fn attribute<'a>(tag: &'a Tag, name: &str) -> Option<&'a str> {
    tag.attrs
        .iter()
        .find(|attr| &*attr.name.local == name)
        .map(|attr| &*attr.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(html: &str) -> String {
        to_text(
            html,
            &Url::parse("https://example.com/docs/page.html").unwrap(),
        )
    }

    #[test]
    fn a_page_reads_as_text_with_numbered_links() {
        let html = "<!doctype html><html><head><title> Release  notes </title>\
            <style>p { color: red }</style><script>var x = '</p>';</script></head>\
            <body><nav><a href='/'>Home</a></nav><h1>Version 2.0</h1>\
            <p>Adds <b>async</b>   streams and <a href=\"guide.html#s\">a guide</a>. \
            Fixes &amp; cleans&nbsp;up.</p>\
            <ul><li>one</li><li>two<ol><li>sub</li><li>sub two</li></ol></li></ul>\
            <pre>fn main() {\n    x();\n}</pre>\
            <table><tr><th>Name</th><th>Size</th></tr><tr><td>a</td><td>1</td></tr></table>\
            <p>Call <code>run()</code><br>then wait.<img src=x alt='a chart'></p>\
            <a href='javascript:void(0)'>js</a> <a href='/'>Home again</a>\
            </body></html>";
        assert_eq!(
            render(html),
            "Title: Release notes\n\
             \n\
             Home[1]\n\
             \n\
             # Version 2.0\n\
             \n\
             Adds async streams and a guide[2]. Fixes & cleans up.\n\
             \n\
             - one\n\
             - two\n\
             \x20 1. sub\n\
             \x20 2. sub two\n\
             \n\
             fn main() {\n\
             \x20   x();\n\
             }\n\
             \n\
             Name | Size\n\
             a | 1\n\
             \n\
             Call `run()`\n\
             then wait. [image: a chart]\n\
             \n\
             js Home again[1]\n\
             \n\
             Links:\n\
             [1]: https://example.com/\n\
             [2]: https://example.com/docs/guide.html#s\n"
        );
    }

    #[test]
    fn hidden_content_and_broken_markup_are_handled() {
        assert_eq!(
            render("<div>shown<svg><text>drawn</text></svg> <p>still<template>t</template>"),
            "shown\n\nstill\n"
        );
        assert_eq!(render("<p>unclosed <b>bold <i>and"), "unclosed bold and\n");
        assert_eq!(
            render("<title>Page</title><svg><title>icon</title></svg><title>late</title>x"),
            "Title: Page\n\nx\n"
        );
        assert_eq!(render(""), "");
        assert_eq!(render("just text"), "just text\n");
    }

    #[test]
    fn deep_nesting_costs_no_more_than_its_size() {
        let depth = 200_000;
        let html = format!(
            "{}<ul><li>deep{}",
            "<div><span>".repeat(depth),
            "</span></div>".repeat(depth)
        );
        let text = render(&html);
        assert_eq!(text, "- deep\n");
        let lists = "<ul><li>x".repeat(1000);
        let text = render(&lists);
        let widest = text.lines().map(str::len).max().unwrap();
        assert!(widest <= 2 * MAX_INDENT + 3, "{widest}");
    }

    #[test]
    fn the_text_and_the_links_are_bounded() {
        let many = "<a href='/p'>x</a>".to_owned()
            + &(0..MAX_LINKS + 10)
                .map(|n| format!("<a href='/{n}'>l</a>"))
                .collect::<String>();
        let text = render(&many);
        assert!(text.contains(&format!("[{MAX_LINKS}]: https://example.com/")));
        assert!(!text.contains(&format!("[{}]:", MAX_LINKS + 1)));
        let huge = "<p>word ".repeat(MAX_TEXT_BYTES / 4);
        let text = render(&huge);
        assert!(text.len() < MAX_TEXT_BYTES + 1000, "{}", text.len());
        assert!(text.ends_with("[the rest of the page was not rendered]\n"));
    }
}
