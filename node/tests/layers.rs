//! The layers inside `mew-node`, checked from its source: which top-level module may use which.
//!
//! Every file under `src/` is parsed (with `syn`, not with patterns over text) and every path
//! that names a module of the crate (`crate::x`, `super::x` leaving the module, in `use` items,
//! in code and in macro calls) is an arrow from the file's top-level module to `x`. Test code
//! (`#[cfg(test)]` items and the files of `#[cfg(test)] mod` declarations) is left out: a test
//! may drive its module through anything. The modules sit in [`LAYERS`], lowest first; an
//! arrow may only point to a lower layer, so there are no circles and nothing reaches up. A
//! new module has to be given a layer here before the suite passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The top-level modules of `src/`, lowest layer first. A module may use the modules of the
/// layers below its own, never its own layer's or those above.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundations: no domain knowledge",
        &[
            "process",
            "telemetry",
            "user_file",
            "duration",
            "matcher",
            "identity",
            "conversation",
            "tree",
            "metrics",
            "ssrf",
        ],
    ),
    ("tools and the task store", &["tools", "tasks"]),
    (
        "domains that need no configuration of others",
        &["permission", "provider", "roles"],
    ),
    ("skills", &["skills"]),
    ("the configuration, typed at load", &["config"]),
    (
        "extensions and the network around a task",
        &["hooks", "mcp", "peers", "plugins", "push"],
    ),
    ("the agent loop", &["agent"]),
    ("the A2A surface", &["server"]),
    ("the runtime that wires them", &["node"]),
    ("the benchmark `mew bench` runs", &["bench"]),
    ("the command line", &["cli"]),
];

/// Files that are entry points of the crate, not modules of a layer.
const ROOTS: &[&str] = &["lib.rs", "main.rs"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file below `src/`: `agent/engine.rs` is `[agent, engine]`,
/// `agent/mod.rs` is `[agent]`, `lib.rs` is `[]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && !ROOTS.contains(&last.as_str()) {
        parts.push(stem.to_owned());
    }
    parts
}

/// Whether an attribute list holds `#[cfg(test)]` (or a `cfg` that needs `test`, such as
/// `cfg(all(test, unix))`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && matches!(&attr.meta, syn::Meta::List(list) if needs_test(list.tokens.clone()))
    })
}

fn needs_test(tokens: TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    match tokens.as_slice() {
        [TokenTree::Ident(ident)] => ident == "test",
        [TokenTree::Ident(all), TokenTree::Group(group)] if all == "all" => group
            .stream()
            .into_iter()
            .any(|token| matches!(token, TokenTree::Ident(ident) if ident == "test")),
        _ => false,
    }
}

/// The arrows of one file, and the test-only modules it declares.
struct FileUses {
    /// The file's module path.
    here: Vec<String>,
    /// Top-level modules named, each with the first path that names it.
    uses: BTreeMap<String, String>,
    /// `#[cfg(test)] mod name;` declarations: the name, and the `#[path]` if one is given.
    test_modules: Vec<(String, Option<String>)>,
    /// Paths that name `rmcp`.
    rmcp: Vec<String>,
}

impl FileUses {
    /// Records a path given as its segments.
    fn path(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        if first == "rmcp" {
            self.rmcp.push(segments.join("::"));
        }
        let target = match first.as_str() {
            "crate" => segments.get(1),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                // `super` from `[a, b]` is `a`; leaving the top-level module lands in the crate
                // root, where the next segment names a top-level module.
                if ups >= self.here.len() {
                    segments.get(ups)
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(target) = target {
            self.uses
                .entry(target.clone())
                .or_insert_with(|| segments.join("::"));
        }
    }

    /// Paths written as tokens, in macro calls: `crate :: x` and `super :: x`.
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Ident(ident) => {
                    let mut segments = vec![ident.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.path(&segments);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                prefix.push(name.ident.to_string());
                self.path(prefix);
                prefix.pop();
            }
            syn::UseTree::Rename(rename) => {
                prefix.push(rename.ident.to_string());
                self.path(prefix);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => {
                prefix.push("*".to_owned());
                self.path(prefix);
                prefix.pop();
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for FileUses {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            if let syn::Item::Mod(module) = item
                && module.content.is_none()
            {
                let path = module.attrs.iter().find_map(|attr| match &attr.meta {
                    syn::Meta::NameValue(value) if value.path.is_ident("path") => {
                        match &value.value {
                            syn::Expr::Lit(syn::ExprLit {
                                lit: syn::Lit::Str(text),
                                ..
                            }) => Some(text.value()),
                            _ => None,
                        }
                    }
                    _ => None,
                });
                self.test_modules.push((module.ident.to_string(), path));
            }
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if let syn::ImplItem::Fn(function) = item
            && is_test_only(&function.attrs)
        {
            return;
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.path(&segments);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Every file of `src/` that is not test code, with what it uses.
fn scan() -> Vec<(PathBuf, FileUses)> {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut scanned = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&src).expect("below src/").to_owned();
        let text = fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let file = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", relative.display()));
        let mut uses = FileUses {
            here: module_path(&relative),
            uses: BTreeMap::new(),
            test_modules: Vec::new(),
            rmcp: Vec::new(),
        };
        uses.visit_file(&file);
        scanned.push((relative, uses));
    }
    // Leave out the files of `#[cfg(test)] mod x;`: `x.rs` or `x/mod.rs` beside a `mod.rs` or
    // the crate root, else in the directory named after the declaring file.
    let mut test_files = BTreeSet::new();
    for (relative, uses) in &scanned {
        let name = relative.file_name().expect("a file").to_string_lossy();
        let dir = if name == "mod.rs" || ROOTS.contains(&name.as_ref()) {
            relative.parent().expect("a directory").to_owned()
        } else {
            relative.with_extension("")
        };
        for (module, path) in &uses.test_modules {
            match path {
                // `#[path]` is relative to the declaring file's directory.
                Some(path) => {
                    test_files.insert(relative.parent().expect("a directory").join(path));
                }
                None => {
                    test_files.insert(dir.join(format!("{module}.rs")));
                    test_files.insert(dir.join(module).join("mod.rs"));
                }
            }
        }
    }
    scanned.retain(|(relative, _)| {
        !test_files.contains(relative)
            && !relative
                .ancestors()
                .any(|dir| test_files.contains(&dir.join("mod.rs")))
    });
    scanned
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

#[test]
fn modules_use_only_the_layers_below_their_own() {
    let mut wrong = Vec::new();
    let mut unplaced = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (relative, uses) in scan() {
        let Some(module) = uses.here.first() else {
            continue;
        };
        seen.insert(module.clone());
        let Some(layer) = layer_of(module) else {
            unplaced.insert(module.clone());
            continue;
        };
        for (target, path) in &uses.uses {
            if target == module {
                continue;
            }
            match layer_of(target) {
                Some(below) if below < layer => {}
                Some(other) => wrong.push(format!(
                    "{}: {module} ({}) uses {target} ({}): {path}",
                    relative.display(),
                    LAYERS[layer].0,
                    LAYERS[other].0
                )),
                // A name of the crate root that is not a module of a layer.
                None => {
                    unplaced.insert(target.clone());
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules with no layer in LAYERS (give each one): {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "arrows that do not point to a lower layer:\n{}",
        wrong.join("\n")
    );
    // The list names no module that is gone.
    for (_, modules) in LAYERS {
        for module in *modules {
            assert!(
                seen.contains(*module),
                "LAYERS names {module}, which src/ does not have"
            );
        }
    }
}

#[test]
fn only_the_mcp_module_names_rmcp() {
    let mut outside = Vec::new();
    let mut inside = 0;
    for (relative, uses) in scan() {
        if uses.here.first().map(String::as_str) == Some("mcp") {
            inside += uses.rmcp.len();
        } else {
            outside.extend(
                uses.rmcp
                    .iter()
                    .map(|path| format!("{}: {path}", relative.display())),
            );
        }
    }
    // The check sees the MCP client's own use of the SDK, so it would see any other.
    assert!(
        inside > 0,
        "no use of rmcp found in src/mcp/: the scan is broken"
    );
    assert!(
        outside.is_empty(),
        "rmcp is named outside src/mcp/ (wrap what is needed in the mcp module):\n{}",
        outside.join("\n")
    );
}

/// The scan itself: a path from each form reaches the right module.
#[test]
fn the_scan_sees_every_form_of_path() {
    let text = r#"
        use crate::alpha::{One, two::Three};
        use crate::{beta, gamma::*};
        use super::super::delta;
        fn f() { crate::epsilon::call(); let _ = format!("{}", crate::zeta::X); }
        #[cfg(test)] mod tests { use crate::never; }
        #[cfg(test)] mod fixtures;
        #[cfg(test)] #[path = "own_tests.rs"] mod more;
        #[cfg(test)] fn helper() { crate::never2::x(); }
        struct S { v: rmcp::Value }
    "#;
    let mut uses = FileUses {
        here: vec!["own".into(), "inner".into()],
        uses: BTreeMap::new(),
        test_modules: Vec::new(),
        rmcp: Vec::new(),
    };
    uses.visit_file(&syn::parse_file(text).unwrap());
    let named: Vec<&str> = uses.uses.keys().map(String::as_str).collect();
    assert_eq!(
        named,
        ["alpha", "beta", "delta", "epsilon", "gamma", "zeta"]
    );
    assert_eq!(
        uses.test_modules,
        [
            ("fixtures".to_owned(), None),
            ("more".to_owned(), Some("own_tests.rs".to_owned()))
        ]
    );
    assert_eq!(uses.rmcp.len(), 1);
}
