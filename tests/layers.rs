//! Layering: no import cycles between the source files of a crate.
//!
//! Cargo already refuses cycles between crates. Inside each crate of the
//! workspace (every member's library and binaries, `src/bin/*` included) this
//! test builds a graph whose nodes are the module files (`foo.rs`,
//! `foo/mod.rs`) and fails on any cycle in it, naming the chains of files and
//! the lines that make each edge.
//!
//! An edge A -> B is code in A naming an item of B by a path anchored at
//! `crate::`, `super::` or `self::` (in `use` trees too, nested braces and all,
//! and through a name such a `use` brought in: `use crate::testing;` then
//! `testing::counters::read`). A path resolves as deep as the module tree goes
//! (`crate::sampler::signal::x` is `src/sampler/signal.rs`,
//! `crate::sampler::Sampling` is `src/sampler/mod.rs`) and through `use`
//! re-exports to the file that defines the item (`crate::Trace` is
//! `src/trace/mod.rs`, not the `pub use` in `src/lib.rs`). Not edges:
//! declaring `mod child;`, a bare `child::x` (no `self::`), comments and string
//! literals, code under `#[cfg(test)]` or `#[test]` (tests may reach anywhere),
//! and paths into other crates.
//!
//! `cargo test --test layers -- --nocapture` prints each crate's layers: a
//! topological order of the files (cycles collapsed), lowest first.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

// ----------------------------------------------------------------------------
// The workspace itself.

#[test]
fn no_import_cycles() {
    let graphs = workspace_graphs();
    for g in &graphs {
        println!("{}", layers(g));
    }
    if let Some(report) = cycles_report(&graphs) {
        panic!("{report}");
    }
}

/// Always runs: the graph of the real tree builds, and `--nocapture` shows
/// its layers (cycles included, without failing on them).
#[test]
fn module_layers() {
    let graphs = workspace_graphs();
    assert!(
        !graphs.is_empty(),
        "no crates found in {}",
        workspace_root().display()
    );
    for g in &graphs {
        assert!(
            !g.nodes.is_empty(),
            "{}: crate root not read: {:?}",
            g.label,
            g.notes
        );
        println!("{}", layers(g));
    }
}

/// The nearest directory at or above this package whose `Cargo.toml` has a
/// `[workspace]`.
fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| {
            fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|t| toml_sections(&t).iter().any(|s| s.name == "workspace"))
        })
        .unwrap_or(here)
        .to_path_buf()
}

/// One graph per crate of every workspace member.
fn workspace_graphs() -> Vec<Graph> {
    let root = workspace_root();
    let read = |rel: &str| fs::read_to_string(root.join(rel)).ok();
    let manifest = read("Cargo.toml").expect("workspace Cargo.toml");
    let subdirs = |rel: &str| -> Vec<String> {
        let mut out: Vec<String> = fs::read_dir(root.join(rel))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| join(rel, &e.file_name().to_string_lossy()))
            .collect();
        out.sort();
        out
    };
    let mut graphs = Vec::new();
    for member in members(&manifest, &subdirs) {
        let Some(text) = read(&join(&member, "Cargo.toml")) else {
            continue;
        };
        let src = join(&member, "src");
        let mut files = Vec::new();
        rs_files(&root, &src, &mut files);
        let first = graphs.len();
        for (label, root_file) in crate_roots(&member, &text, &files) {
            graphs.push(build_graph(&label, &root_file, &read));
        }
        // Files no crate of this member reaches are compiled nowhere: say so.
        let reached: BTreeSet<&String> = graphs[first..]
            .iter()
            .flat_map(|g| g.nodes.iter().chain(&g.test_files))
            .collect();
        let orphans: Vec<&String> = files.iter().filter(|f| !reached.contains(f)).collect();
        if let (Some(g), false) = (graphs.get_mut(first), orphans.is_empty()) {
            g.notes.push(format!(
                "not a module of any crate (not checked): {orphans:?}"
            ));
        }
    }
    graphs
}

/// The `.rs` files under `dir` (workspace-relative), recursively.
fn rs_files(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let rel = join(dir, &name);
        if root.join(&rel).is_dir() {
            rs_files(root, &rel, out);
        } else if name.ends_with(".rs") {
            out.push(rel);
        }
    }
}

// ----------------------------------------------------------------------------
// Manifests: just enough TOML for `members`, `[package] name`, `[lib]` and
// `[[bin]]` paths.

struct Section {
    name: String,
    keys: Vec<(String, String)>,
}

impl Section {
    fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Sections in order (`[a]` and `[[a]]` both named `a`), each with its
/// `key = value` pairs; a value is the raw text, arrays across lines joined.
fn toml_sections(text: &str) -> Vec<Section> {
    let mut out = vec![Section {
        name: String::new(),
        keys: Vec::new(),
    }];
    let mut pending: Option<(String, String)> = None;
    for raw in text.lines() {
        let line = strip_toml_comment(raw).trim().to_string();
        if let Some((key, mut value)) = pending.take() {
            value.push(' ');
            value.push_str(&line);
            if brackets_balanced(&value) {
                out.last_mut().unwrap().keys.push((key, value));
            } else {
                pending = Some((key, value));
            }
            continue;
        }
        if line.starts_with('[') {
            let name = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            out.push(Section {
                name,
                keys: Vec::new(),
            });
        } else if let Some((key, value)) = line.split_once('=') {
            let (key, value) = (key.trim().to_string(), value.trim().to_string());
            if brackets_balanced(&value) {
                out.last_mut().unwrap().keys.push((key, value));
            } else {
                pending = Some((key, value));
            }
        }
    }
    out
}

fn strip_toml_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

fn brackets_balanced(value: &str) -> bool {
    value.matches('[').count() <= value.matches(']').count()
}

/// The quoted strings in a TOML value.
fn toml_strings(value: &str) -> Vec<String> {
    value
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Workspace members as directories relative to the workspace root (`""` for
/// the root package). `dir/*` globs expand through `subdirs`.
fn members(manifest: &str, subdirs: &dyn Fn(&str) -> Vec<String>) -> Vec<String> {
    let sections = toml_sections(manifest);
    let ws = sections.iter().find(|s| s.name == "workspace");
    let list = |key: &str| {
        ws.and_then(|s| s.get(key))
            .map(toml_strings)
            .unwrap_or_default()
    };
    let exclude: Vec<String> = list("exclude").iter().map(|e| normalize(e)).collect();
    let mut out = Vec::new();
    if sections.iter().any(|s| s.name == "package") {
        out.push(String::new());
    }
    for m in list("members") {
        let expanded = match m.strip_suffix("/*") {
            Some(dir) => subdirs(&normalize(dir)),
            None => vec![normalize(&m)],
        };
        for d in expanded {
            if !out.contains(&d) && !exclude.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// The crates of one member: `(label, root file)`, library first. `files` are
/// the member's `.rs` files (workspace-relative), for Cargo's auto-discovery.
fn crate_roots(member: &str, manifest: &str, files: &[String]) -> Vec<(String, String)> {
    let sections = toml_sections(manifest);
    let string = |s: &Section, key: &str| s.get(key).and_then(|v| toml_strings(v).pop());
    let package = sections
        .iter()
        .find(|s| s.name == "package")
        .and_then(|s| string(s, "name"))
        .unwrap_or_else(|| member.to_string());
    let has = |rel: &str| files.contains(&join(member, rel));
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |label: String, rel: &str| {
        let path = join(member, rel);
        if !out.iter().any(|(_, p)| *p == path) {
            out.push((label, path));
        }
    };
    let lib = sections
        .iter()
        .find(|s| s.name == "lib")
        .and_then(|s| string(s, "path"));
    match lib {
        Some(p) => add(format!("{package} (lib)"), &p),
        None if has("src/lib.rs") => add(format!("{package} (lib)"), "src/lib.rs"),
        None => {}
    }
    for bin in sections.iter().filter(|s| s.name == "bin") {
        let name = string(bin, "name").unwrap_or_else(|| package.clone());
        let path = string(bin, "path").or_else(|| {
            [
                format!("src/bin/{name}.rs"),
                format!("src/bin/{name}/main.rs"),
                "src/main.rs".into(),
            ]
            .into_iter()
            .find(|p| has(p))
        });
        if let Some(p) = path {
            add(format!("{package} (bin {name})"), &p);
        }
    }
    if has("src/main.rs") {
        add(format!("{package} (bin {package})"), "src/main.rs");
    }
    let bin_dir = format!("{}/", join(member, "src/bin"));
    for f in files {
        let Some(rest) = f.strip_prefix(&bin_dir) else {
            continue;
        };
        let name = match rest.split('/').collect::<Vec<_>>()[..] {
            [file] => file.strip_suffix(".rs"),
            [dir, "main.rs"] => Some(dir),
            _ => None,
        };
        if let Some(name) = name {
            add(format!("{package} (bin {name})"), &rest_of(f, member));
        }
    }
    out
}

/// `path` relative to `member`.
fn rest_of(path: &str, member: &str) -> String {
    if member.is_empty() {
        path.to_string()
    } else {
        path.strip_prefix(&format!("{member}/"))
            .unwrap_or(path)
            .to_string()
    }
}

/// `dir/rel`, normalized (`a/./b/../c` is `a/c`); `dir` may be `""`.
fn join(dir: &str, rel: &str) -> String {
    normalize(&format!("{dir}/{rel}"))
}

fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." if parts.last().is_some_and(|l| *l != "..") => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    parts.join("/")
}

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

// ----------------------------------------------------------------------------
// Tokens: identifiers, punctuation (`::` is one), literals and lifetimes.
// Comments (doc comments too) are dropped, so are the insides of literals.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Ident,
    Punct,
    Literal,
    Lifetime,
}

#[derive(Clone, Debug)]
struct Tok {
    kind: Kind,
    text: String,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

fn tokenize(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Moves `i` past `to`, counting newlines.
    let advance = |i: &mut usize, line: &mut usize, to: usize| {
        *line += c[*i..to.min(c.len())]
            .iter()
            .filter(|&&ch| ch == '\n')
            .count();
        *i = to;
    };
    while i < c.len() {
        let ch = c[i];
        let start = (i, line);
        if ch.is_whitespace() {
            let to = i + 1;
            advance(&mut i, &mut line, to);
            continue;
        }
        if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if ch == '/' && at(i + 1) == '*' {
            let (mut j, mut depth) = (i + 2, 1);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && at(j + 1) == '*' {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && at(j + 1) == '/' {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            advance(&mut i, &mut line, j);
            continue;
        }
        let (kind, end) = if ch == '"' {
            (Kind::Literal, string_end(&c, i + 1))
        } else if ch == '\'' {
            char_or_lifetime(&c, i)
        } else if ch.is_ascii_digit() {
            let mut j = i + 1;
            while is_ident_char(at(j)) || (at(j) == '.' && at(j + 1).is_ascii_digit()) {
                j += 1;
            }
            (Kind::Literal, j)
        } else if is_ident_start(ch) {
            let mut j = i + 1;
            while is_ident_char(at(j)) {
                j += 1;
            }
            let word: String = c[i..j].iter().collect();
            let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
            match word.as_str() {
                "r" if hashes == 1 && is_ident_start(at(j + 1)) => {
                    // A raw identifier: `r#type` is `type`.
                    let mut k = j + 1;
                    while is_ident_char(at(k)) {
                        k += 1;
                    }
                    out.push(Tok {
                        kind: Kind::Ident,
                        text: c[j + 1..k].iter().collect(),
                        line,
                    });
                    i = k;
                    continue;
                }
                "r" | "br" | "cr" if at(j + hashes) == '"' => {
                    (Kind::Literal, raw_string_end(&c, j + hashes + 1, hashes))
                }
                "b" | "c" if at(j) == '"' => (Kind::Literal, string_end(&c, j + 1)),
                "b" if at(j) == '\'' => char_or_lifetime(&c, j),
                _ => (Kind::Ident, j),
            }
        } else if ch == ':' && at(i + 1) == ':' {
            (Kind::Punct, i + 2)
        } else {
            (Kind::Punct, i + 1)
        };
        let end = end.min(c.len());
        advance(&mut i, &mut line, end);
        out.push(Tok {
            kind,
            text: c[start.0..end].iter().collect(),
            line: start.1,
        });
    }
    out
}

/// The index past the closing `"` of a string whose body starts at `i`.
fn string_end(c: &[char], mut i: usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index past the `"###` closing a raw string whose body starts at `i`.
fn raw_string_end(c: &[char], mut i: usize, hashes: usize) -> usize {
    while i < c.len() {
        if c[i] == '"'
            && c[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == '#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// At a `'`: a char literal (`'a'`, `'\n'`, `'"'`) or a lifetime / label.
fn char_or_lifetime(c: &[char], i: usize) -> (Kind, usize) {
    let at = |j: usize| c.get(j).copied().unwrap_or('\0');
    if at(i + 1) == '\\' {
        let mut j = i + 3;
        while j < c.len() && c[j] != '\'' {
            j += 1;
        }
        (Kind::Literal, j + 1)
    } else if at(i + 2) == '\'' {
        (Kind::Literal, i + 3)
    } else {
        let mut j = i + 1;
        while is_ident_char(at(j)) {
            j += 1;
        }
        (Kind::Lifetime, j)
    }
}

// ----------------------------------------------------------------------------
// Modules of one crate: which file each is in, what it defines, what its `use`s
// bind, and the paths it names.

#[derive(Default)]
struct Module {
    parent: Option<usize>,
    file: usize,
    /// The directory that holds the files of its `mod x;` children.
    dir: String,
    /// Declared inline (`mod x { .. }`): `#[path]` is relative to `dir` then.
    inline: bool,
    children: BTreeMap<String, usize>,
    /// Items defined at its top level (fn, struct, const, ...).
    defs: BTreeSet<String>,
    /// Names its `use`s bring in, with the path as written.
    binds: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    refs: Vec<Ref>,
}

/// A path as written in a module, with the source line for the report.
struct Ref {
    segs: Vec<String>,
    line: usize,
    text: String,
}

#[derive(Default)]
struct Crate {
    files: Vec<String>,
    modules: Vec<Module>,
    /// Files of `#[cfg(test)]` modules: not part of the graph.
    test_files: Vec<String>,
    notes: Vec<String>,
}

/// A `use` leaf: the path, the name it binds (none for `as _` and globs),
/// whether it is a glob.
type Leaf = (Vec<String>, Option<String>, bool);

/// A `mod name;` found while parsing.
struct Decl {
    module: usize,
    name: String,
    path: Option<String>,
    test_only: bool,
}

/// A file to load: its candidate paths (`x.rs` then `x/mod.rs`; a candidate is
/// "mod-rs like" when its own children live beside it), and the module that
/// declared it.
struct Pending {
    candidates: Vec<(String, bool)>,
    parent: Option<(usize, String)>,
}

type Read<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the crate whose root file is `root`, following `mod` declarations.
fn load_crate(root: &str, read: Read) -> Crate {
    let mut k = Crate::default();
    let mut queue = VecDeque::from([Pending {
        candidates: vec![(root.to_string(), true)],
        parent: None,
    }]);
    while let Some(p) = queue.pop_front() {
        let found = p
            .candidates
            .iter()
            .find_map(|(path, modrs)| Some((path, *modrs, read(path)?)));
        let Some((path, modrs, src)) = found else {
            let (decl, name) = p
                .parent
                .map_or((String::new(), root.to_string()), |(m, n)| {
                    (format!(" (declared in {})", k.files[k.modules[m].file]), n)
                });
            let tried: Vec<&String> = p.candidates.iter().map(|(c, _)| c).collect();
            k.notes
                .push(format!("module {name}{decl}: none of {tried:?} found"));
            continue;
        };
        let toks = tokenize(&src);
        if file_is_test_only(&toks) {
            k.test_files.push(path.clone());
            continue;
        }
        // A file `#[path]`ed in twice is two modules, one node.
        let file = k.files.iter().position(|f| f == path).unwrap_or_else(|| {
            k.files.push(path.clone());
            k.files.len() - 1
        });
        let dir = if modrs {
            parent_dir(path).to_string()
        } else {
            path.strip_suffix(".rs").unwrap_or(path).to_string()
        };
        let m = k.modules.len();
        k.modules.push(Module {
            parent: p.parent.as_ref().map(|(pm, _)| *pm),
            file,
            dir,
            ..Module::default()
        });
        if let Some((pm, name)) = &p.parent {
            k.modules[*pm].children.insert(name.clone(), m);
        }
        let lines: Vec<&str> = src.lines().collect();
        let mut parser = Parser {
            toks: &toks,
            pos: 0,
            lines: &lines,
        };
        let mut decls = Vec::new();
        parser.items(&mut k, m, false, &mut decls);
        for d in decls {
            let module = &k.modules[d.module];
            let candidates = match &d.path {
                Some(rel) => {
                    let base = if module.inline {
                        &module.dir
                    } else {
                        parent_dir(path)
                    };
                    vec![(join(base, rel), true)]
                }
                None => vec![
                    (join(&module.dir, &format!("{}.rs", d.name)), false),
                    (join(&module.dir, &format!("{}/mod.rs", d.name)), true),
                ],
            };
            if d.test_only {
                let found = candidates.into_iter().find(|(c, _)| read(c).is_some());
                k.test_files.extend(found.map(|(c, _)| c));
            } else {
                queue.push_back(Pending {
                    candidates,
                    parent: Some((d.module, d.name)),
                });
            }
        }
    }
    k
}

/// `#![cfg(test)]` (or another test-only inner attribute) opens the file.
fn file_is_test_only(toks: &[Tok]) -> bool {
    let mut p = Parser {
        toks,
        pos: 0,
        lines: &[],
    };
    while p.peek(0) == "#" && p.peek(1) == "!" {
        match p.attribute() {
            Some(a) if a.test => return true,
            Some(_) => {}
            None => break,
        }
    }
    false
}

struct Attr {
    test: bool,
    path: Option<String>,
}

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    lines: &'a [&'a str],
}

impl Parser<'_> {
    fn peek(&self, k: usize) -> &str {
        self.toks.get(self.pos + k).map_or("", |t| t.text.as_str())
    }

    fn kind(&self, k: usize) -> Option<Kind> {
        self.toks.get(self.pos + k).map(|t| t.kind)
    }

    /// The items of module `m`, until the `}` that closes it when `inline`
    /// (consumed), else to the end of the file. `mod x;` declarations go to
    /// `decls`; inline modules become modules of their own.
    fn items(&mut self, k: &mut Crate, m: usize, inline: bool, decls: &mut Vec<Decl>) {
        // Blocks opened inside this module: `true` for struct/enum/union bodies.
        let mut blocks: Vec<bool> = Vec::new();
        let mut fields_next = false;
        let mut test_only = false;
        let mut path_attr: Option<String> = None;
        while self.pos < self.toks.len() {
            if self.peek(0) == "#" {
                if let Some(a) = self.attribute() {
                    test_only |= a.test;
                    path_attr = a.path.or(path_attr);
                    continue;
                }
            }
            if test_only {
                if let Some(name) = self.mod_decl_ahead() {
                    let path = path_attr.take();
                    decls.push(Decl {
                        module: m,
                        name,
                        path,
                        test_only: true,
                    });
                }
                self.skip_item(blocks.last() == Some(&true));
                (test_only, path_attr) = (false, None);
                continue;
            }
            let is_ident = self.kind(0) == Some(Kind::Ident);
            match self.peek(0) {
                "mod" if is_ident && self.kind(1) == Some(Kind::Ident) => {
                    let name = self.peek(1).to_string();
                    match self.peek(2) {
                        ";" => {
                            let path = path_attr.take();
                            decls.push(Decl {
                                module: m,
                                name,
                                path,
                                test_only: false,
                            });
                            self.pos += 3;
                        }
                        "{" => {
                            self.pos += 3;
                            let child = k.modules.len();
                            let parent = &k.modules[m];
                            k.modules.push(Module {
                                parent: Some(m),
                                file: parent.file,
                                dir: join(&parent.dir, &name),
                                inline: true,
                                ..Module::default()
                            });
                            k.modules[m].children.insert(name, child);
                            self.items(k, child, true, decls);
                        }
                        _ => self.pos += 1,
                    }
                    path_attr = None;
                    continue;
                }
                "use" if is_ident && self.peek(1) != "<" => {
                    self.use_item(&mut k.modules[m]);
                    continue;
                }
                kw @ ("fn" | "struct" | "enum" | "union" | "trait" | "type" | "const"
                | "static" | "macro_rules")
                    if is_ident =>
                {
                    fields_next = matches!(kw, "struct" | "enum" | "union");
                    let skip = usize::from(matches!(self.peek(1), "mut" | "!"));
                    let name = self.peek(1 + skip);
                    let keyword = matches!(name, "fn" | "unsafe" | "async" | "extern" | "_");
                    if blocks.is_empty() && self.kind(1 + skip) == Some(Kind::Ident) && !keyword {
                        k.modules[m].defs.insert(name.to_string());
                    }
                }
                "{" => {
                    blocks.push(fields_next);
                    fields_next = false;
                }
                "}" => {
                    fields_next = false;
                    if blocks.pop().is_none() && inline {
                        self.pos += 1;
                        return;
                    }
                }
                ";" => fields_next = false,
                "!" if self.quoting() => {
                    // Code a proc macro emits: its `crate::` is the user's crate.
                    self.pos = self
                        .matching(self.pos + 1)
                        .map_or(self.toks.len(), |c| c + 1);
                    continue;
                }
                _ if is_ident || self.peek(0) == "$" => {
                    if let Some(r) = self.path_ref() {
                        k.modules[m].refs.push(r);
                        continue;
                    }
                }
                _ => {}
            }
            if matches!(self.peek(0), "{" | "}" | ";") {
                // `#[path]` is for the next `mod`, past visibility only.
                path_attr = None;
            }
            self.pos += 1;
        }
    }

    /// At `!`: `quote!{..}` and the like (`syn::parse_quote!` too)?
    fn quoting(&self) -> bool {
        let name = self.pos.checked_sub(1).map(|i| self.toks[i].text.as_str());
        matches!(
            name,
            Some("quote" | "quote_spanned" | "parse_quote" | "parse_quote_spanned")
        ) && matches!(self.peek(1), "(" | "[" | "{")
    }

    /// At `#`: an outer or inner attribute, consumed.
    fn attribute(&mut self) -> Option<Attr> {
        let open = if self.peek(1) == "!" { 2 } else { 1 };
        if self.peek(open) != "[" {
            return None;
        }
        let close = self.matching(self.pos + open)?;
        let body = &self.toks[self.pos + open + 1..close];
        self.pos = close + 1;
        let text = |i: usize| body.get(i).map_or("", |t| t.text.as_str());
        let test = match text(0) {
            "test" => body.len() == 1,
            "cfg" if text(1) == "(" && text(body.len() - 1) == ")" => {
                cfg_test_only(&body[2..body.len() - 1])
            }
            _ => false,
        };
        let path = (text(0) == "path" && text(1) == "=" && body.len() == 3)
            .then(|| text(2).trim_matches('"').to_string());
        Some(Attr { test, path })
    }

    /// The index of the bracket closing the one at `open`.
    fn matching(&self, open: usize) -> Option<usize> {
        let mut depth = 0usize;
        for (i, t) in self.toks.iter().enumerate().skip(open) {
            if t.kind != Kind::Punct {
                continue;
            }
            match t.text.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// After a test-only attribute: `[pub[(..)]] mod name;` ahead (more
    /// attributes may come first)?
    fn mod_decl_ahead(&self) -> Option<String> {
        let mut i = self.pos;
        let text = |i: usize| self.toks.get(i).map_or("", |t| t.text.as_str());
        loop {
            match text(i) {
                "#" if text(i + 1) == "[" => i = self.matching(i + 1)? + 1,
                "pub" if text(i + 1) == "(" => i = self.matching(i + 1)? + 1,
                "pub" => i += 1,
                "mod" if text(i + 2) == ";" => return Some(text(i + 1).to_string()),
                _ => return None,
            }
        }
    }

    /// Skips one item (or field, or statement): to a `;` (or a `,` in a
    /// struct or enum body) outside brackets, or past the `}` of its body.
    fn skip_item(&mut self, comma_ends: bool) {
        let mut depth = 0usize;
        while let Some(t) = self.toks.get(self.pos) {
            if t.kind == Kind::Punct {
                match t.text.as_str() {
                    "(" | "[" | "{" => depth += 1,
                    ")" | "]" | "}" if depth == 0 => return,
                    ")" | "]" | "}" => {
                        depth -= 1;
                        if depth == 0 && t.text == "}" {
                            self.pos += 1;
                            return;
                        }
                    }
                    ";" if depth == 0 => {
                        self.pos += 1;
                        return;
                    }
                    "," if depth == 0 && comma_ends => {
                        self.pos += 1;
                        return;
                    }
                    _ => {}
                }
            }
            self.pos += 1;
        }
    }

    /// At an identifier or `$`: a path of two or more segments starting here
    /// (not in the middle of one), consumed.
    fn path_ref(&mut self) -> Option<Ref> {
        let before = |k: usize| {
            let i = self.pos.checked_sub(k)?;
            Some(self.toks[i].text.as_str())
        };
        if before(1) == Some("::") {
            return None;
        }
        if (before(3), before(2), before(1)) == (Some("pub"), Some("("), Some("in")) {
            return None; // `pub(in crate::a)` names an ancestor, no item of it
        }
        let mut i = self.pos;
        let mut segs = Vec::new();
        if self.peek(0) == "$" {
            if self.peek(1) != "crate" {
                return None;
            }
            i += 1;
        }
        segs.push(self.toks[i].text.clone());
        while self.toks.get(i + 1).is_some_and(|t| t.text == "::")
            && self.toks.get(i + 2).is_some_and(|t| t.kind == Kind::Ident)
        {
            segs.push(self.toks[i + 2].text.clone());
            i += 2;
        }
        if segs.len() < 2 {
            return None;
        }
        let line = self.toks[self.pos].line;
        self.pos = i + 1;
        Some(Ref {
            segs,
            line,
            text: self.line_text(line, line),
        })
    }

    /// At `use`: the whole `use` item, its names bound in `m`.
    fn use_item(&mut self, m: &mut Module) {
        let first = self.toks[self.pos].line;
        self.pos += 1;
        let mut leaves = Vec::new();
        let parsed = self.use_tree(Vec::new(), &mut leaves);
        // To the `;` (at once, unless the tree was not understood).
        let mut depth = 0usize;
        while let Some(t) = self.toks.get(self.pos) {
            self.pos += 1;
            match t.text.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth = depth.saturating_sub(1),
                ";" if depth == 0 => break,
                _ => {}
            }
        }
        if !parsed {
            return;
        }
        let last = self.toks[self.pos - 1].line;
        let text = self.line_text(first, last);
        for (segs, bind, glob) in leaves {
            if glob {
                m.globs.push(segs.clone());
            }
            if let Some(name) = bind {
                m.binds.entry(name).or_insert_with(|| segs.clone());
            }
            m.refs.push(Ref {
                segs,
                line: first,
                text: text.clone(),
            });
        }
    }

    /// One use tree under the path `segs` (a group's prefix), its leaves
    /// pushed; `false` if it is not understood.
    fn use_tree(&mut self, mut segs: Vec<String>, leaves: &mut Vec<Leaf>) -> bool {
        if self.peek(0) == "::" {
            // `::name`: another crate.
            segs.push("::".into());
            self.pos += 1;
        }
        loop {
            match (self.kind(0), self.peek(0)) {
                (Some(Kind::Punct), "{") => {
                    self.pos += 1;
                    loop {
                        if self.peek(0) == "}" {
                            self.pos += 1;
                            return true;
                        }
                        if !self.use_tree(segs.clone(), leaves) {
                            return false;
                        }
                        match self.peek(0) {
                            "," => self.pos += 1,
                            "}" => {}
                            _ => return false,
                        }
                    }
                }
                (Some(Kind::Punct), "*") => {
                    self.pos += 1;
                    leaves.push((segs, None, true));
                    return true;
                }
                (Some(Kind::Punct), "$") if self.peek(1) == "crate" => {
                    segs.push("crate".into());
                    self.pos += 2;
                }
                (Some(Kind::Ident), _) => {
                    segs.push(self.peek(0).to_string());
                    self.pos += 1;
                }
                _ => return false,
            }
            if self.peek(0) == "::" {
                self.pos += 1;
                continue;
            }
            if segs.last().is_some_and(|s| s == "self") {
                segs.pop();
            }
            let mut bind = segs.last().cloned();
            if self.peek(0) == "as" {
                bind = Some(self.peek(1).to_string()).filter(|b| b != "_");
                self.pos += 2;
            }
            leaves.push((segs, bind, false));
            return true;
        }
    }

    /// Source lines `first..=last`, whitespace collapsed, shortened.
    fn line_text(&self, first: usize, last: usize) -> String {
        let lines = self
            .lines
            .get(first - 1..last.min(self.lines.len()))
            .unwrap_or_default();
        // A `use` group over several lines as one: `use a::{b, c};`.
        let mut text = String::new();
        for line in lines.iter().map(|l| l.trim()) {
            if !(text.is_empty() || text.ends_with('{') || line.starts_with('}')) {
                text.push(' ');
            }
            text.push_str(line);
        }
        if first != last {
            text = text.replace(",}", "}");
        }
        match text.char_indices().nth(150) {
            Some((cut, _)) => format!("{} ...", &text[..cut]),
            None => text,
        }
    }
}

/// A `cfg` predicate that only holds in test builds: `test`,
/// `all(test, ..)`, `any(test, all(test, ..))`.
fn cfg_test_only(pred: &[Tok]) -> bool {
    let Some(first) = pred.first() else {
        return false;
    };
    if pred.len() == 1 {
        return first.text == "test";
    }
    if pred.get(1).is_none_or(|t| t.text != "(") || pred.last().is_none_or(|t| t.text != ")") {
        return false;
    }
    let args = split_args(&pred[2..pred.len() - 1]);
    match first.text.as_str() {
        "all" => args.iter().any(|a| cfg_test_only(a)),
        "any" => !args.is_empty() && args.iter().all(|a| cfg_test_only(a)),
        _ => false,
    }
}

/// Comma-separated arguments, split at the top level.
fn split_args(toks: &[Tok]) -> Vec<&[Tok]> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, t) in toks.iter().enumerate() {
        match t.text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth = depth.saturating_sub(1),
            "," if depth == 0 => {
                out.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < toks.len() {
        out.push(&toks[start..]);
    }
    out
}

const DEPTH: usize = 16;

impl Crate {
    /// The module a path written in module `m` names: as deep as the module
    /// tree goes, then through `use` bindings to where the item is defined.
    /// `None` for paths into other crates (and local names).
    fn resolve(&self, m: usize, segs: &[String], depth: usize) -> Option<usize> {
        let first = segs.first()?;
        if depth > DEPTH {
            return None;
        }
        match first.as_str() {
            "crate" => self.walk(0, &segs[1..], depth),
            "self" => self.walk(m, &segs[1..], depth),
            "super" => {
                let mut cur = m;
                let supers = segs.iter().take_while(|s| *s == "super").count();
                for _ in 0..supers {
                    cur = self.modules[cur].parent?;
                }
                self.walk(cur, &segs[supers..], depth)
            }
            name => {
                let module = &self.modules[m];
                if module.children.contains_key(name) {
                    self.walk(m, segs, depth)
                } else {
                    let bound = module.binds.get(name)?;
                    self.resolve(m, &[bound, &segs[1..]].concat(), depth + 1)
                }
            }
        }
    }

    fn walk(&self, mut cur: usize, rest: &[String], depth: usize) -> Option<usize> {
        for (i, seg) in rest.iter().enumerate() {
            let module = &self.modules[cur];
            if let Some(&child) = module.children.get(seg) {
                cur = child;
                continue;
            }
            if module.defs.contains(seg) {
                return Some(cur);
            }
            if let Some(bound) = module.binds.get(seg) {
                // A `use` brought the name in: the item lives where that leads,
                // or in another crate.
                return self.resolve(cur, &[bound, &rest[i + 1..]].concat(), depth + 1);
            }
            for glob in &module.globs {
                let Some(g) = self.resolve(cur, glob, depth + 1).filter(|&g| g != cur) else {
                    continue;
                };
                let target = &self.modules[g];
                if target.children.contains_key(seg)
                    || target.defs.contains(seg)
                    || target.binds.contains_key(seg)
                {
                    return self.walk(g, &rest[i..], depth + 1);
                }
            }
            // Not found (generated by a macro, say): the module it is named in.
            return Some(cur);
        }
        Some(cur)
    }

    /// Whether the path is anchored at `crate::`, `super::` or `self::`, by
    /// itself or through the `use` that bound its first name.
    fn anchored(&self, m: usize, segs: &[String], depth: usize) -> bool {
        match segs.first().map(String::as_str) {
            Some("crate" | "self" | "super") => true,
            Some(name) if depth < DEPTH => self.modules[m]
                .binds
                .get(name)
                .is_some_and(|b| self.anchored(m, b, depth + 1)),
            _ => false,
        }
    }

    fn graph(&self, label: &str) -> Graph {
        let mut order: Vec<usize> = (0..self.files.len()).collect();
        order.sort_by(|&a, &b| self.files[a].cmp(&self.files[b]));
        let mut index = vec![0; self.files.len()];
        for (new, &old) in order.iter().enumerate() {
            index[old] = new;
        }
        let mut edges: Edges = BTreeMap::new();
        for (m, module) in self.modules.iter().enumerate() {
            for r in &module.refs {
                if !self.anchored(m, &r.segs, 0) {
                    continue;
                }
                let Some(t) = self.resolve(m, &r.segs, 0) else {
                    continue;
                };
                let through_use = !matches!(r.segs[0].as_str(), "crate" | "self" | "super");
                if through_use && self.resolve(m, &r.segs[..1], 0) == Some(t) {
                    continue; // the `use` that bound the name is the evidence
                }
                let (a, b) = (index[module.file], index[self.modules[t].file]);
                if a != b {
                    let why = edges.entry((a, b)).or_default();
                    if !why.iter().any(|(l, _)| *l == r.line) {
                        why.push((r.line, r.text.clone()));
                    }
                }
            }
        }
        for why in edges.values_mut() {
            why.sort();
        }
        Graph {
            label: label.to_string(),
            nodes: order.iter().map(|&i| self.files[i].clone()).collect(),
            edges,
            test_files: self.test_files.clone(),
            notes: self.notes.clone(),
        }
    }
}

// ----------------------------------------------------------------------------
// The file graph of one crate, its cycles and its layers.

/// `(from, to)` -> the lines that make the edge: `(line in from, text)`.
type Edges = BTreeMap<(usize, usize), Vec<(usize, String)>>;

struct Graph {
    label: String,
    /// Workspace-relative file paths, sorted.
    nodes: Vec<String>,
    edges: Edges,
    test_files: Vec<String>,
    notes: Vec<String>,
}

fn build_graph(label: &str, root: &str, read: Read) -> Graph {
    load_crate(root, read).graph(label)
}

impl Graph {
    fn successors(&self) -> Vec<Vec<usize>> {
        let mut succ = vec![Vec::new(); self.nodes.len()];
        for &(a, b) in self.edges.keys() {
            succ[a].push(b);
        }
        succ
    }

    /// Strongly connected components (Tarjan), each sorted, in reverse
    /// topological order: a component comes after every one it reaches.
    fn components(&self) -> Vec<Vec<usize>> {
        struct Tarjan {
            succ: Vec<Vec<usize>>,
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            out: Vec<Vec<usize>>,
        }
        impl Tarjan {
            fn visit(&mut self, v: usize) {
                self.index[v] = Some(self.next);
                self.low[v] = self.next;
                self.next += 1;
                self.stack.push(v);
                self.on_stack[v] = true;
                for i in 0..self.succ[v].len() {
                    let w = self.succ[v][i];
                    match self.index[w] {
                        None => {
                            self.visit(w);
                            self.low[v] = self.low[v].min(self.low[w]);
                        }
                        Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                        Some(_) => {}
                    }
                }
                if Some(self.low[v]) == self.index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
        let n = self.nodes.len();
        let mut t = Tarjan {
            succ: self.successors(),
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..n {
            if t.index[v].is_none() {
                t.visit(v);
            }
        }
        t.out
    }

    /// Components of more than one file (a file is never its own neighbour).
    fn cycles(&self) -> Vec<Vec<usize>> {
        self.components()
            .into_iter()
            .filter(|c| c.len() > 1)
            .collect()
    }

    /// The shortest cycle through `v` inside `comp`, as `[v, .., v]`.
    fn shortest_cycle(&self, comp: &[usize], v: usize) -> Vec<usize> {
        let succ = self.successors();
        let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([v]);
        while let Some(u) = queue.pop_front() {
            for &w in &succ[u] {
                if w == v {
                    let mut path = vec![v, u];
                    let mut x = u;
                    while x != v {
                        x = came_from[&x];
                        path.push(x);
                    }
                    path.reverse();
                    return path;
                }
                if comp.contains(&w) && !came_from.contains_key(&w) {
                    came_from.insert(w, u);
                    queue.push_back(w);
                }
            }
        }
        vec![v]
    }

    fn chain(&self, path: &[usize]) -> String {
        path.iter()
            .map(|&i| self.nodes[i].as_str())
            .collect::<Vec<_>>()
            .join(" -> ")
    }
}

/// What a developer needs to break each cycle, or `None` without cycles.
fn cycles_report(graphs: &[Graph]) -> Option<String> {
    let mut out = String::new();
    let mut count = 0;
    for g in graphs {
        for comp in g.cycles() {
            count += 1;
            out += &format!("\n{count}. {}: {} files in a cycle\n", g.label, comp.len());
            // The shortest cycle through each file, each chain once.
            let mut chains: Vec<Vec<usize>> = Vec::new();
            for &v in &comp {
                let mut c = g.shortest_cycle(&comp, v);
                c.pop();
                let start = (0..c.len()).min_by_key(|&i| c[i]).unwrap_or(0);
                c.rotate_left(start);
                c.push(c[0]);
                if !chains.contains(&c) {
                    chains.push(c);
                }
            }
            chains.sort_by_key(|c| (c.len(), c.clone()));
            for c in &chains {
                out += &format!("   {}\n", g.chain(c));
            }
            out += "   made by:\n";
            for (&(a, b), why) in g.edges.range((comp[0], 0)..) {
                if !comp.contains(&a) || !comp.contains(&b) {
                    continue;
                }
                out += &format!("     {} -> {}\n", g.nodes[a], g.nodes[b]);
                for (line, text) in why {
                    out += &format!("       {}:{line}: {text}\n", g.nodes[a]);
                }
            }
        }
    }
    (count > 0).then(|| {
        format!(
            "{count} import cycle(s) between source files. For each: the shortest chain \
             through each of its files, then every edge between its files with the lines \
             that make it; remove edges until this test passes.\n{out}"
        )
    })
}

/// The layers of a crate, lowest first: a file uses only files of lower
/// layers, or of its own cycle.
fn layers(g: &Graph) -> String {
    let comps = g.components();
    let mut comp_of = vec![0; g.nodes.len()];
    for (c, members) in comps.iter().enumerate() {
        for &v in members {
            comp_of[v] = c;
        }
    }
    let mut layer = vec![0usize; comps.len()];
    for (c, members) in comps.iter().enumerate() {
        // Tarjan's order: every component this one uses came before it.
        layer[c] = g
            .edges
            .keys()
            .filter(|(a, b)| members.contains(a) && comp_of[*b] != c)
            .map(|&(_, b)| layer[comp_of[b]] + 1)
            .max()
            .unwrap_or(0);
    }
    let mut by_layer: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (c, members) in comps.iter().enumerate() {
        let names: Vec<&str> = members.iter().map(|&v| g.nodes[v].as_str()).collect();
        let entry = match names[..] {
            [one] => one.to_string(),
            _ => format!("cycle: {}", names.join(", ")),
        };
        by_layer.entry(layer[c]).or_default().push(entry);
    }
    let mut out = format!(
        "{}: {} files in {} layers (a file uses only files of lower layers)\n",
        g.label,
        g.nodes.len(),
        by_layer.len()
    );
    for (l, mut entries) in by_layer {
        entries.sort();
        for (i, e) in entries.iter().enumerate() {
            let tag = if i == 0 {
                format!("{l:>3}")
            } else {
                String::new()
            };
            out += &format!("  {tag:>3}  {e}\n");
        }
    }
    for note in &g.notes {
        out += &format!("  note: {note}\n");
    }
    out
}

// ----------------------------------------------------------------------------
// The parser and the graph on small examples.

mod examples {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(p, s)| (p.to_string(), s.to_string()))
            .collect();
        build_graph("demo (lib)", "src/lib.rs", &|p| files.get(p).cloned())
    }

    fn edges(g: &Graph) -> Vec<String> {
        g.edges
            .keys()
            .map(|&(a, b)| format!("{} -> {}", g.nodes[a], g.nodes[b]))
            .collect()
    }

    #[test]
    fn two_file_cycle_is_found_with_its_lines() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\n"),
            ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
            ("src/b.rs", "pub struct B;\npub fn f(_: crate::a::A) {}\n"),
        ]);
        assert_eq!(edges(&g), ["src/a.rs -> src/b.rs", "src/b.rs -> src/a.rs"]);
        let report = cycles_report(&[g]).expect("a cycle");
        assert!(
            report.contains("1. demo (lib): 2 files in a cycle"),
            "{report}"
        );
        assert!(
            report.contains("   src/a.rs -> src/b.rs -> src/a.rs\n"),
            "{report}"
        );
        assert!(
            report.contains("       src/a.rs:1: use crate::b::B;\n"),
            "{report}"
        );
        assert!(
            report.contains("       src/b.rs:2: pub fn f(_: crate::a::A) {}\n"),
            "{report}"
        );
    }

    #[test]
    fn chain_without_cycle_passes_and_is_layered() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("src/a.rs", "fn f() { crate::b::g() }\n"),
            ("src/b.rs", "pub fn g() { crate::c::h() }\n"),
            ("src/c.rs", "pub fn h() {}\n"),
        ]);
        assert_eq!(edges(&g), ["src/a.rs -> src/b.rs", "src/b.rs -> src/c.rs"]);
        assert!(g.cycles().is_empty());
        let text = layers(&g);
        let order: Vec<&str> = text.lines().skip(1).map(|l| l.trim()).collect();
        assert_eq!(
            order,
            ["0  src/c.rs", "src/lib.rs", "1  src/b.rs", "2  src/a.rs"],
            "{text}"
        );
        assert!(cycles_report(&[g]).is_none());
    }

    #[test]
    fn use_group_gives_an_edge_per_leaf() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod d;\nmod x;\nmod y;\n"),
            ("src/a.rs", "pub mod b;\npub fn c() {}\n"),
            ("src/a/b.rs", ""),
            ("src/d.rs", ""),
            ("src/y.rs", ""),
            (
                "src/x.rs",
                "use crate::{a::{b, c}, d};\nuse crate::{\n    y::{self as why},\n};\n",
            ),
        ]);
        assert_eq!(
            edges(&g),
            [
                "src/x.rs -> src/a.rs",
                "src/x.rs -> src/a/b.rs",
                "src/x.rs -> src/d.rs",
                "src/x.rs -> src/y.rs"
            ]
        );
        let x = g.nodes.iter().position(|n| n == "src/x.rs").unwrap();
        let y = g.nodes.iter().position(|n| n == "src/y.rs").unwrap();
        assert_eq!(
            g.edges[&(x, y)],
            [(2, "use crate::{y::{self as why}};".to_string())]
        );
    }

    #[test]
    fn super_and_self_follow_the_module_tree() {
        let g = graph(&[
            ("src/lib.rs", "mod net;\nmod util;\n"),
            ("src/util.rs", "pub fn x() {}\n"),
            (
                "src/net/mod.rs",
                "mod tcp;\nmod udp;\npub struct Addr;\nmod inner {\n    use super::udp::Sock;\n}\n",
            ),
            (
                "src/net/tcp.rs",
                "use super::Addr;\nfn f() { super::super::util::x(); }\n",
            ),
            (
                "src/net/udp.rs",
                "pub struct Sock;\nfn g() { self::helper(); }\nfn helper() {}\npub(in crate::net) fn k() {}\n",
            ),
        ]);
        // `super` in the inline `mod inner` is `net`, not the crate root; `self::`
        // in a file is that file.
        assert_eq!(
            edges(&g),
            [
                "src/net/mod.rs -> src/net/udp.rs",
                "src/net/tcp.rs -> src/net/mod.rs",
                "src/net/tcp.rs -> src/util.rs"
            ]
        );
    }

    #[test]
    fn directory_modules_resolve_as_deep_as_the_path_goes() {
        let g = graph(&[
            ("src/lib.rs", "mod config;\nmod sampler;\n"),
            ("src/sampler/mod.rs", "mod signal;\npub struct Sampling;\n"),
            ("src/sampler/signal.rs", "pub fn x() {}\n"),
            ("src/config.rs", "fn f() { crate::sampler::signal::x(); }\nstatic S: crate::sampler::Sampling = crate::sampler::Sampling;\n"),
        ]);
        assert_eq!(
            edges(&g),
            [
                "src/config.rs -> src/sampler/mod.rs",
                "src/config.rs -> src/sampler/signal.rs"
            ]
        );
    }

    #[test]
    fn children_are_edges_when_used_not_when_declared() {
        let declared = graph(&[
            ("src/lib.rs", "mod a;\n"),
            ("src/a.rs", "mod b;\npub struct A;\n"),
            ("src/a/b.rs", "use super::A;\n"),
        ]);
        assert_eq!(edges(&declared), ["src/a/b.rs -> src/a.rs"]);
        let used = graph(&[
            ("src/lib.rs", "mod a;\n"),
            (
                "src/a/mod.rs",
                "mod b;\npub struct A;\nfn f() { self::b::g() }\n",
            ),
            ("src/a/b.rs", "use super::A;\npub fn g() {}\n"),
        ]);
        assert_eq!(
            edges(&used),
            ["src/a/b.rs -> src/a/mod.rs", "src/a/mod.rs -> src/a/b.rs"]
        );
        assert_eq!(used.cycles().len(), 1);
    }

    #[test]
    fn names_resolve_through_reexports_and_imported_modules() {
        let g = graph(&[
            ("src/lib.rs", "mod trace;\nmod testing;\nmod x;\npub use trace::Trace;\npub use fmt::Debug;\nuse std::fmt;\n"),
            ("src/trace.rs", "pub struct Trace;\n"),
            ("src/testing/mod.rs", "pub mod counters;\npub use self::counters::*;\n"),
            ("src/testing/counters.rs", "pub fn read() {}\n"),
            (
                "src/x.rs",
                "use crate::testing;\nfn f(_: crate::Trace) { testing::counters::read(); crate::testing::read(); }\nfn g(_: &dyn crate::Debug) {}\n",
            ),
        ]);
        // Not `src/lib.rs` for `crate::Trace`; `crate::Debug` is another crate's.
        assert_eq!(
            edges(&g),
            [
                "src/testing/mod.rs -> src/testing/counters.rs",
                "src/x.rs -> src/testing/counters.rs",
                "src/x.rs -> src/testing/mod.rs",
                "src/x.rs -> src/trace.rs"
            ]
        );
    }

    #[test]
    fn test_code_is_not_an_edge() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("src/b.rs", "pub fn f() {}\n"),
            ("src/c.rs", "pub struct C;\n"),
            (
                "src/a.rs",
                "pub fn a() {}\n\
                 #[cfg(test)]\nmod tests {\n    use crate::b::f;\n    fn t() { crate::b::f(); }\n}\n\
                 #[cfg(all(test, unix))]\nfn helper() { crate::b::f() }\n\
                 #[test]\nfn t() { crate::b::f() }\n\
                 #[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod more;\n\
                 struct S {\n    #[cfg(test)]\n    x: crate::b::X,\n    y: crate::c::C,\n}\n\
                 #[cfg(not(test))]\nuse crate::c::C;\n",
            ),
            ("src/a_tests.rs", "use crate::b::f;\n"),
        ]);
        assert_eq!(edges(&g), ["src/a.rs -> src/c.rs"]);
        let a = g.nodes.iter().position(|n| n == "src/a.rs").unwrap();
        let c = g.nodes.iter().position(|n| n == "src/c.rs").unwrap();
        let lines: Vec<usize> = g.edges[&(a, c)].iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [17, 20]);
        assert_eq!(g.test_files, ["src/a_tests.rs"]);
    }

    #[test]
    fn comments_and_strings_are_not_paths() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\n"),
            ("src/b.rs", "pub struct B;\n"),
            (
                "src/a.rs",
                "//! See [`crate::b::B`].\n\
                 // use crate::b::B;\n\
                 /* crate::b::B /* nested */ crate::b::B */\n\
                 /// Like [crate::b].\n\
                 const S: &str = \"crate::b::B\";\n\
                 const R: &str = r#\"use crate::b::B; \"quoted\" \"#;\n\
                 const Q: char = '\"';\n\
                 const E: &str = \"\\\"crate::b\\\"\";\n\
                 fn f<'a>(x: &'a str) -> &'a str { x }\n\
                 fn g() -> TokenStream { quote::quote! { crate::b::B } }\n\
                 fn h() -> Expr { parse_quote!(crate::b::B) }\n",
            ),
        ]);
        assert!(edges(&g).is_empty(), "{:?}", edges(&g));
        // ... and the tokenizer got back in step after each.
        let toks = tokenize("'\"' \"a\\\"b\" r##\"x\"#\"## '\\'' b'x' 'l: loop {} c\"z\" r#type");
        let kinds: Vec<(Kind, &str)> = toks.iter().map(|t| (t.kind, t.text.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (Kind::Literal, "'\"'"),
                (Kind::Literal, "\"a\\\"b\""),
                (Kind::Literal, "r##\"x\"#\"##"),
                (Kind::Literal, "'\\''"),
                (Kind::Literal, "b'x'"),
                (Kind::Lifetime, "'l"),
                (Kind::Punct, ":"),
                (Kind::Ident, "loop"),
                (Kind::Punct, "{"),
                (Kind::Punct, "}"),
                (Kind::Literal, "c\"z\""),
                (Kind::Ident, "type"),
            ]
        );
    }

    #[test]
    fn binaries_and_path_attributes_find_their_files() {
        let files: BTreeMap<String, String> = [
            (
                "src/bin/tool/main.rs",
                "mod cmd;\n#[doc(hidden)]\n#[path = \"impl_linux.rs\"]\npub(crate) mod imp;\n#[path = \"cmd.rs\"]\nmod cmd_again;\n",
            ),
            ("src/bin/tool/cmd.rs", "use crate::imp::X;\n"),
            ("src/bin/tool/impl_linux.rs", "pub struct X;\nmod deep;\n"),
            ("src/bin/tool/deep.rs", "use super::super::cmd;\n"),
        ]
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
        let g = build_graph("tool", "src/bin/tool/main.rs", &|p| files.get(p).cloned());
        assert!(g.notes.is_empty(), "{:?}", g.notes);
        assert_eq!(g.nodes.len(), 4, "{:?}", g.nodes); // `cmd.rs` once
        let e: Vec<String> = g
            .edges
            .keys()
            .map(|&(a, b)| format!("{} -> {}", g.nodes[a], g.nodes[b]))
            .collect();
        assert_eq!(
            e,
            [
                "src/bin/tool/cmd.rs -> src/bin/tool/impl_linux.rs",
                "src/bin/tool/deep.rs -> src/bin/tool/cmd.rs"
            ]
        );
    }

    #[test]
    fn manifests_name_members_and_crate_roots() {
        let ws = "[workspace]\nmembers = [\n  \".\", # the root\n  \"macros\",\n  \"crates/*\",\n]\nexclude = [\"crates/old\"]\n\n[package]\nname = \"fgtrace\"\n";
        let subdirs = |d: &str| vec![format!("{d}/core"), format!("{d}/old")];
        assert_eq!(members(ws, &subdirs), ["", "macros", "crates/core"]);

        let pkg =
            "[package]\nname = \"tool\"\n\n[[bin]]\nname = \"extra\"\npath = \"tools/extra.rs\"\n";
        let files: Vec<String> = [
            "cli/src/lib.rs",
            "cli/src/main.rs",
            "cli/src/bin/a.rs",
            "cli/src/bin/b/main.rs",
            "cli/src/bin/b/x.rs",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            crate_roots("cli", pkg, &files),
            [
                ("tool (lib)".to_string(), "cli/src/lib.rs".to_string()),
                (
                    "tool (bin extra)".to_string(),
                    "cli/tools/extra.rs".to_string()
                ),
                ("tool (bin tool)".to_string(), "cli/src/main.rs".to_string()),
                ("tool (bin a)".to_string(), "cli/src/bin/a.rs".to_string()),
                (
                    "tool (bin b)".to_string(),
                    "cli/src/bin/b/main.rs".to_string()
                ),
            ]
        );
    }
}
