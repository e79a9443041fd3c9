//! What each source file of a crate takes from the crate's other modules,
//! read with a Rust parser: `use` items (paths, `{…}` groups, globs,
//! renames), every path in code and types, and the `crate::…` paths inside
//! macro calls and attributes, whose tokens the parser leaves unread.
//! `super::` and `self::` are resolved against the module they are written
//! in, inline `mod` blocks included; comments and strings are never read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// A module of the crate by its path from the root (`["faults", "target"]`);
/// the root (`lib.rs`, `main.rs`) is the empty path.
pub type Module = Vec<String>;

/// One module named by another: where, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The file's module, named by its path.
    pub from: Module,
    pub file: PathBuf,
    pub line: usize,
    pub to: Module,
}

/// Every `.rs` file under `src`, sorted, with its module.
pub fn files(src: &Path) -> Vec<(PathBuf, Module)> {
    let mut found = Vec::new();
    walk(src, &mut found);
    found.sort();
    found
        .into_iter()
        .map(|file| {
            let module = module_of(src, &file);
            (file, module)
        })
        .collect()
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            walk(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut module: Module = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if module.last().is_some_and(|last| last == "mod")
        || (module.len() == 1 && matches!(module[0].as_str(), "lib" | "main"))
    {
        module.pop();
    }
    module
}

/// What `source`, the file of `module`, takes from the `known` modules of
/// its crate: each the longest known module its path starts with, itself
/// and its inline modules left out.
pub fn taken(
    file: &Path,
    module: &Module,
    source: &str,
    known: &BTreeSet<Module>,
) -> syn::Result<Vec<Taken>> {
    let parsed = syn::parse_file(source)?;
    let mut reader = Reader {
        known,
        within: module.clone(),
        paths: Vec::new(),
    };
    reader.visit_file(&parsed);
    let mut taken = Vec::new();
    for (path, line) in reader.paths {
        let Some(to) = longest_known(&path, known) else {
            continue;
        };
        if to != *module && !to.starts_with(module) {
            taken.push(Taken {
                from: module.clone(),
                file: file.to_path_buf(),
                line,
                to,
            });
        }
    }
    Ok(taken)
}

fn longest_known(path: &[String], known: &BTreeSet<Module>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|len| path[..len].to_vec())
        .find(|prefix| known.contains(prefix))
}

/// Walks one file, gathering every path that names the crate's items, made
/// absolute, with its line.
struct Reader<'a> {
    known: &'a BTreeSet<Module>,
    /// The module the walk is in: the file's, then its inline modules'.
    within: Module,
    paths: Vec<(Vec<String>, usize)>,
}

impl Reader<'_> {
    /// `segments` as written inside `self.within`, from the crate's root;
    /// `None` for a path outside the crate (another crate, a local name).
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let (mut path, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (self.within.clone(), &segments[1..]),
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let mut path = self.within.clone();
                path.truncate(path.len().saturating_sub(supers));
                (path, &segments[supers..])
            }
            // A child module named without `self::` (2018 paths); any
            // other first name is another crate's or a local item's.
            child => {
                let mut path = self.within.clone();
                path.push(child.to_string());
                if !self.known.contains(&path) {
                    return None;
                }
                (path, &segments[1..])
            }
        };
        path.extend(rest.iter().cloned());
        Some(path)
    }

    fn note(&mut self, segments: &[String], line: usize) {
        if let Some(path) = self.absolute(segments) {
            self.paths.push((path, line));
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
                self.note(prefix, name.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Rename(rename) => {
                prefix.push(rename.ident.to_string());
                self.note(prefix, rename.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Glob(glob) => self.note(prefix, glob.star_token.span.start().line),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// The `crate::`, `self::` and `super::` paths among unparsed tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut at = 0;
        while at < tokens.len() {
            match &tokens[at] {
                TokenTree::Group(group) => {
                    self.tokens(group.stream());
                    at += 1;
                }
                TokenTree::Ident(ident)
                    if matches!(ident.to_string().as_str(), "crate" | "self" | "super") =>
                {
                    let line = ident.span().start().line;
                    let mut segments = vec![ident.to_string()];
                    let mut next = at + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(name)),
                    ) = (tokens.get(next), tokens.get(next + 1), tokens.get(next + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(name.to_string());
                        next += 3;
                    }
                    if segments.len() > 1 {
                        self.note(&segments, line);
                    }
                    at = next;
                }
                _ => at += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        self.use_tree(&mut prefix, &item.tree);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.within.push(item.ident.to_string());
        visit::visit_item_mod(self, item);
        self.within.pop();
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        if segments.len() > 1 {
            let line = path.segments[0].ident.span().start().line;
            self.note(&segments, line);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attribute: &'ast syn::Attribute) {
        if let syn::Meta::List(list) = &attribute.meta {
            self.tokens(list.tokens.clone());
        }
        visit::visit_attribute(self, attribute);
    }
}
