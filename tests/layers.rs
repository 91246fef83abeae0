//! Layering: what the crate boundaries cannot say by themselves.
//!
//! * The crate graph (`cargo metadata`): each workspace crate depends only on
//!   the workspace crates [`CRATE_DEPS`] allows it (normal and build
//!   dependencies, any target; dev-dependencies aside).
//! * No import cycle between the source files of any library or binary of
//!   the workspace.
//! * Inside the runtime, the [`RULES`]: the recording side never reaches the
//!   session machinery.
//! * The `fgtrace` package users add is a facade: its `src/lib.rs` only
//!   re-exports.
//!
//! The file graph: nodes are the module files, found through `mod`
//! declarations from the crate root (`#[path]` too). An edge A -> B is code
//! in A naming an item of B by a path anchored at `crate::`, `super::` or
//! `self::` (in `use` trees, code and macro arguments), or through a name such
//! a `use` brought in. A path resolves as deep as the module tree goes, then
//! through `use` re-exports to the file that defines the item (`crate::Session`
//! is `runtime/src/collector.rs`, not the `pub use` in `src/lib.rs`). Not edges:
//! `mod child;`, naming a child by its bare name (a facade re-exporting its
//! children), other crates' paths, and anything under `#[cfg(test)]` or
//! `#[test]` (test modules and their files are left out).

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::OnceLock;
use syn::{Attribute, Item, Meta};

/// The workspace crates each crate may depend on (`name?`: only as an
/// optional dependency, behind a feature); `checks/*`: the members under
/// `checks/`. `fgtrace-guide` (`docs/tests`) runs the user guide's examples
/// as doctests, through the facade as a user's crate would.
const CRATE_DEPS: &str = "
    fgtrace-core:
    fgtrace-macros:
    fgtrace-board: fgtrace-core fgtrace-macros
    fgtrace-trace: fgtrace-core
    fgtrace-runtime: fgtrace-core fgtrace-trace
    fgtrace-symbols: fgtrace-trace
    fgtrace-view: fgtrace-trace fgtrace-core fgtrace-symbols?
    fgtrace-import: fgtrace-core fgtrace-trace fgtrace-symbols fgtrace-board? fgtrace-view?
    fgtrace-testing: fgtrace-core fgtrace-macros fgtrace-trace fgtrace-runtime fgtrace-view
    fgtrace: fgtrace-core fgtrace-macros fgtrace-trace fgtrace-runtime fgtrace-symbols? \
             fgtrace-view? fgtrace-import? fgtrace-testing?
    fgtrace-instrument:
    fgtrace-cli: fgtrace fgtrace-trace fgtrace-view fgtrace-symbols fgtrace-import \
                 fgtrace-instrument
    fgtrace-guide: fgtrace
    checks/*: fgtrace";

/// The library whose files [`RULES`] are about.
const RULED: &str = "fgtrace-runtime (lib)";

/// Inside [`RULED`]: no file of `from` reaches, through any chain of edges, a
/// file of `to`. Patterns: a file, a directory (ending in `/`), `!` to leave
/// one out.
const RULES: &[Rule] = &[Rule {
    from: "runtime/src/recorder.rs runtime/src/buffer.rs runtime/src/alloc.rs \
           runtime/src/thread.rs runtime/src/sampler/ runtime/src/offcpu.rs runtime/src/pmu.rs \
           runtime/src/perf_ring.rs",
    to: "runtime/src/collector.rs runtime/src/collector/ runtime/src/control/ runtime/src/dump.rs",
    why: "recording (the hooks the probe calls, buffers, the counting allocator, the \
          sampler, off-CPU and counter readers) stays below sessions, dumps and the \
          control endpoint",
}];

struct Rule {
    from: &'static str,
    to: &'static str,
    why: &'static str,
}

#[test]
fn workspace_crates_depend_only_on_the_crates_below_them() {
    let bad = crate_violations(metadata());
    assert!(bad.is_empty(), "crate dependencies:\n{}", bad.join("\n"));
}

#[test]
fn no_import_cycles_between_source_files() {
    let graphs = workspace_graphs();
    assert!(graphs.iter().any(|g| g.label == RULED));
    let report: Vec<String> = graphs.iter().filter_map(cycles_report).collect();
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn the_root_crate_keeps_its_layers() {
    let graphs = workspace_graphs();
    let g = graphs.iter().find(|g| g.label == RULED).unwrap();
    for p in RULES
        .iter()
        .flat_map(|r| r.from.split_whitespace().chain(r.to.split_whitespace()))
    {
        let p = p.trim_start_matches('!');
        assert!(g.files.iter().any(|f| matches(f, p)), "no file is {p}");
    }
    let bad = rule_violations(g, RULES);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_package_users_add_only_re_exports() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs");
    let file = syn::parse_file(&std::fs::read_to_string(root).unwrap()).unwrap();
    let bad = facade_items_with_code(&file.items);
    assert!(bad.is_empty(), "src/lib.rs has code of its own: {bad:?}");
    let src = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src")).unwrap();
    let names: Vec<_> = src.map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["lib.rs"], "src/ holds the facade alone");
}

/// The items of a facade that are not re-exports (or modules of them).
fn facade_items_with_code(items: &[Item]) -> Vec<String> {
    let mut bad = Vec::new();
    for item in items {
        match item {
            Item::Use(_) => {}
            Item::Mod(m) => match &m.content {
                Some((_, inner)) => bad.extend(facade_items_with_code(inner)),
                None => bad.push(format!("mod {} (a file of its own)", m.ident)),
            },
            other => bad.push(
                other
                    .to_token_stream()
                    .to_string()
                    .chars()
                    .take(60)
                    .collect(),
            ),
        }
    }
    bad
}

fn metadata() -> &'static Value {
    static META: OnceLock<Value> = OnceLock::new();
    META.get_or_init(|| {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let mut cargo = std::process::Command::new(env!("CARGO"));
        cargo.args(["metadata", "--format-version=1", "--no-deps"]);
        let out = cargo.args(["--manifest-path", manifest]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "cargo metadata: {err}");
        serde_json::from_slice(&out.stdout).unwrap()
    })
}

/// One graph per library and binary of every workspace member.
fn workspace_graphs() -> Vec<Graph> {
    let meta = metadata();
    let root = format!("{}/", meta["workspace_root"].as_str().unwrap());
    let read = |rel: &str| std::fs::read_to_string(format!("{root}{rel}")).ok();
    let mut graphs = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let kind = |k: &str| t["kind"].as_array().unwrap().iter().any(|x| x == k);
            let (name, target) = (p["name"].as_str().unwrap(), t["name"].as_str().unwrap());
            let label = if kind("bin") {
                format!("{name} (bin {target})")
            } else if kind("test") || kind("bench") || kind("example") || kind("custom-build") {
                continue;
            } else {
                format!("{name} (lib)")
            };
            let src = t["src_path"].as_str().unwrap();
            graphs.push(load_crate(src.strip_prefix(&root).unwrap_or(src), &read).graph(&label));
        }
    }
    graphs
}

/// Each dependency of a workspace crate on another that [`CRATE_DEPS`] does
/// not allow, and each member it does not list.
fn crate_violations(meta: &Value) -> Vec<String> {
    let table: BTreeMap<&str, Vec<&str>> = CRATE_DEPS
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(name, deps)| (name.trim(), deps.split_whitespace().collect()))
        .collect();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<&str> = packages.iter().flat_map(|p| p["name"].as_str()).collect();
    let mut bad = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap();
        let checks = p["manifest_path"].as_str().unwrap().contains("/checks/");
        let Some(allowed) = table.get(name).or(table.get("checks/*").filter(|_| checks)) else {
            bad.push(format!(
                "{name}: a workspace crate CRATE_DEPS does not list"
            ));
            continue;
        };
        for d in p["dependencies"].as_array().unwrap() {
            let (dep, kind) = (d["name"].as_str().unwrap(), d["kind"].as_str());
            let optional = d["optional"].as_bool().unwrap_or(false);
            let ok = allowed.iter().any(|a| match a.strip_suffix('?') {
                Some(a) => a == dep && optional,
                None => *a == dep,
            });
            if !ok && names.contains(dep) && kind != Some("dev") {
                let how = if optional { "optional " } else { "" };
                let kind = kind.unwrap_or("normal");
                bad.push(format!(
                    "{name} -> {dep} ({how}{kind}): allowed are {allowed:?}"
                ));
            }
        }
    }
    bad
}

// ----------------------------------------------------------------------------
// The modules of one crate: their files, their `use`s, the paths they name.

#[derive(Default)]
struct Module {
    parent: Option<usize>,
    file: usize,
    /// The directory that holds the files of its `mod x;` children.
    dir: String,
    /// The directory a `#[path]` on its `mod x;` is relative to.
    base: String,
    children: BTreeMap<String, usize>,
    /// Names its `use`s bring in, with the path as written.
    binds: BTreeMap<String, Vec<String>>,
    /// The paths it names, with their lines.
    refs: Vec<(Vec<String>, usize)>,
}

impl Module {
    fn new(file: usize, dir: &str, base: &str) -> Module {
        let (dir, base) = (dir.to_string(), base.to_string());
        Module {
            file,
            dir,
            base,
            ..Module::default()
        }
    }
}

#[derive(Default)]
struct Crate {
    files: Vec<String>,
    modules: Vec<Module>,
}

type Read<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the crate whose root file is `root`, following `mod` declarations.
fn load_crate(root: &str, read: Read) -> Crate {
    let mut k = Crate::default();
    assert!(k.load(root, None, true, read), "{root} not found");
    k
}

impl Crate {
    /// Loads the module file `path`, child `name` of `parent`; `modrs`: its
    /// children live beside it (a crate root, a `mod.rs`, a `#[path]` file).
    fn load(&mut self, path: &str, parent: Option<(usize, &str)>, modrs: bool, read: Read) -> bool {
        let Some(src) = read(path) else { return false };
        let file = syn::parse_file(&src).unwrap_or_else(|e| panic!("{path}: {e}"));
        if !test_only(&file.attrs) {
            self.files.push(path.to_string());
            let dir = if modrs {
                parent_dir(path)
            } else {
                &path[..path.len() - 3]
            };
            let m = Module::new(self.files.len() - 1, dir, parent_dir(path));
            self.add(m, parent, &file.items, read);
        }
        true
    }

    /// Adds module `m` with its `items`, child `name` of `parent`.
    fn add(&mut self, mut m: Module, parent: Option<(usize, &str)>, items: &[Item], read: Read) {
        let i = self.modules.len();
        if let Some((p, name)) = parent {
            m.parent = Some(p);
            self.modules[p].children.insert(name.to_string(), i);
        }
        self.modules.push(m);
        self.items(i, items, read);
    }

    fn items(&mut self, m: usize, items: &[Item], read: Read) {
        for item in items.iter().filter(|i| !test_item(*i)) {
            let module = &mut self.modules[m];
            let im = match item {
                Item::Mod(im) => im,
                Item::Use(u) => {
                    for (segs, bind, line) in use_leaves(&u.tree, Vec::new()) {
                        if bind != "_" && bind != "*" {
                            module.binds.entry(bind).or_insert_with(|| segs.clone());
                        }
                        module.refs.push((segs, line));
                    }
                    continue;
                }
                Item::Impl(i) => {
                    let mut i = i.clone();
                    i.items.retain(|ii| !test_item(ii));
                    paths(i.to_token_stream(), &mut module.refs);
                    continue;
                }
                _ => {
                    paths(item.to_token_stream(), &mut module.refs);
                    continue;
                }
            };
            let name = im.ident.to_string();
            let path_attr = im.attrs.iter().find_map(|a| match &a.meta {
                Meta::NameValue(nv) if nv.path.is_ident("path") => {
                    syn::parse2::<syn::LitStr>(nv.value.to_token_stream()).ok()
                }
                _ => None,
            });
            let path_attr = path_attr.map(|p| p.value());
            let (dir, base, file) = (module.dir.clone(), module.base.clone(), module.file);
            if let Some((_, inner)) = &im.content {
                let dir = join(&dir, path_attr.as_deref().unwrap_or(&name));
                self.add(Module::new(file, &dir, &dir), Some((m, &name)), inner, read);
                continue;
            }
            let candidates = match &path_attr {
                Some(p) => vec![(join(&base, p), true)],
                None => vec![
                    (join(&dir, &name) + ".rs", false),
                    (join(&dir, &name) + "/mod.rs", true),
                ],
            };
            let found = candidates
                .iter()
                .any(|(c, modrs)| self.load(c, Some((m, &name)), *modrs, read));
            assert!(
                found,
                "mod {name} in {}: none of {candidates:?}",
                self.files[file]
            );
        }
    }
}

/// The paths of two or more segments in `ts` (code, macro arguments), with
/// their lines.
fn paths(ts: TokenStream, out: &mut Vec<(Vec<String>, usize)>) {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let ident = |i: usize| match toks.get(i) {
        Some(TokenTree::Ident(id)) => Some(id.to_string().trim_start_matches("r#").to_string()),
        _ => None,
    };
    let colons = |i: usize| {
        (i..i + 2).all(|j| matches!(toks.get(j), Some(TokenTree::Punct(p)) if p.as_char() == ':'))
    };
    let mut i = 0;
    while i < toks.len() {
        if let TokenTree::Group(g) = &toks[i] {
            let name = i.checked_sub(2).and_then(ident).unwrap_or_default();
            // Code a proc macro emits: its `crate::` is the user's crate.
            if !name.starts_with("quote") && !name.starts_with("parse_quote") {
                paths(g.stream(), out);
            }
        }
        if let (Some(first), false) = (ident(i), i >= 2 && colons(i - 2)) {
            let line = toks[i].span().start().line;
            let mut segs = vec![first];
            while let (true, Some(next)) = (colons(i + 1), ident(i + 3)) {
                segs.push(next);
                i += 3;
            }
            if segs.len() > 1 {
                out.push((segs, line));
            }
        }
        i += 1;
    }
}

/// The leaves of a `use` tree: each path, the name it binds (`*` for a glob,
/// `_` for none), its line.
fn use_leaves(tree: &syn::UseTree, mut segs: Vec<String>) -> Vec<(Vec<String>, String, usize)> {
    let line = |id: &syn::Ident| id.span().start().line;
    let mut leaf = |id: &syn::Ident, bind: Option<&syn::Ident>| {
        if id != "self" {
            segs.push(id.to_string());
        }
        let bind = bind.map_or(segs.last().cloned().unwrap_or_default(), |b| b.to_string());
        vec![(segs.clone(), bind, line(id))]
    };
    match tree {
        syn::UseTree::Path(p) => {
            segs.push(p.ident.to_string());
            use_leaves(&p.tree, segs)
        }
        syn::UseTree::Name(n) => leaf(&n.ident, None),
        syn::UseTree::Rename(r) => leaf(&r.ident, Some(&r.rename)),
        syn::UseTree::Glob(g) => vec![(segs, "*".into(), g.star_token.span.start().line)],
        syn::UseTree::Group(g) => g
            .items
            .iter()
            .flat_map(|t| use_leaves(t, segs.clone()))
            .collect(),
    }
}

/// Whether an item (or an item of an `impl`) is test code, by its attributes.
fn test_item(item: &impl ToTokens) -> bool {
    let outer = |input: syn::parse::ParseStream| {
        let attrs = input.call(Attribute::parse_outer)?;
        input.parse::<TokenStream>().map(|_| attrs)
    };
    syn::parse::Parser::parse2(outer, item.to_token_stream()).is_ok_and(|a| test_only(&a))
}

/// `#[test]`, or a `cfg` that holds only in test builds.
fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        Meta::Path(p) => p.is_ident("test"),
        Meta::List(l) if l.path.is_ident("cfg") => l.parse_args().is_ok_and(|m| cfg_test(&m)),
        _ => false,
    })
}

/// `test`, or `all(.., test, ..)`.
fn cfg_test(m: &Meta) -> bool {
    type Args = syn::punctuated::Punctuated<Meta, syn::Token![,]>;
    match m {
        Meta::Path(p) => p.is_ident("test"),
        Meta::List(l) if l.path.is_ident("all") => l
            .parse_args_with(Args::parse_terminated)
            .is_ok_and(|a| a.iter().any(cfg_test)),
        _ => false,
    }
}

/// `dir/rel`, normalized (`a/./b/../c` is `a/c`).
fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in dir.split('/').chain(rel.split('/')) {
        match p {
            "" | "." => {}
            ".." if parts.last().is_some_and(|l| *l != "..") => _ = parts.pop(),
            _ => parts.push(p),
        }
    }
    parts.join("/")
}

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

// ----------------------------------------------------------------------------
// Resolution: the file a path names.

const DEPTH: usize = 16;

impl Crate {
    /// The module a path written in module `m` names, as deep as the module
    /// tree goes, then through `use` bindings to where the item is defined.
    /// `None` for other crates' paths and local names, and with `anchored`
    /// for paths not anchored at `crate::`, `super::` or `self::` (by
    /// themselves or through the `use` that bound their first name).
    fn resolve(&self, m: usize, segs: &[String], anchored: bool, depth: usize) -> Option<usize> {
        let module = &self.modules[m];
        match segs.first()?.as_str() {
            _ if depth > DEPTH => None,
            "crate" => self.walk(0, &segs[1..], depth),
            "self" => self.walk(m, &segs[1..], depth),
            "super" => {
                let supers = segs.iter().take_while(|s| *s == "super").count();
                let mut cur = m;
                for _ in 0..supers {
                    cur = self.modules[cur].parent?;
                }
                self.walk(cur, &segs[supers..], depth)
            }
            name if !anchored && module.children.contains_key(name) => self.walk(m, segs, depth),
            name => {
                let bound = module.binds.get(name)?;
                self.resolve(m, &[bound, &segs[1..]].concat(), anchored, depth + 1)
            }
        }
    }

    fn walk(&self, mut cur: usize, rest: &[String], depth: usize) -> Option<usize> {
        for (i, seg) in rest.iter().enumerate() {
            let module = &self.modules[cur];
            if let Some(&child) = module.children.get(seg) {
                cur = child;
            } else if let Some(bound) = module.binds.get(seg) {
                // A `use` brought the name in: the item is where it leads.
                return self.resolve(cur, &[bound, &rest[i + 1..]].concat(), false, depth + 1);
            } else {
                // Defined here, or not found (made by a macro, a glob).
                return Some(cur);
            }
        }
        Some(cur)
    }

    fn graph(&self, label: &str) -> Graph {
        let mut edges: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
        for (m, module) in self.modules.iter().enumerate() {
            for (segs, line) in &module.refs {
                let Some(t) = self.resolve(m, segs, true, 0) else {
                    continue;
                };
                let (a, b) = (module.file, self.modules[t].file);
                let text = format!("{}:{line}: {}", self.files[a], segs.join("::"));
                let why = edges.entry((a, b)).or_default();
                if !why.contains(&text) {
                    why.push(text);
                }
            }
        }
        edges.retain(|(a, b), _| a != b);
        Graph {
            label: label.to_string(),
            files: self.files.clone(),
            edges,
        }
    }
}

// ----------------------------------------------------------------------------
// The file graph of one crate: cycles and what each file reaches.

struct Graph {
    label: String,
    files: Vec<String>,
    /// `(from, to)` -> the lines that make the edge.
    edges: BTreeMap<(usize, usize), Vec<String>>,
}

impl Graph {
    /// The shortest chain of files from `a` to a file `to` accepts.
    fn path(&self, a: usize, to: &dyn Fn(usize) -> bool) -> Option<Vec<usize>> {
        let mut came_from = BTreeMap::from([(a, a)]);
        let mut queue = VecDeque::from([a]);
        while let Some(u) = queue.pop_front() {
            for (&(_, w), _) in self.edges.range((u, 0)..(u + 1, 0)) {
                if to(w) {
                    let mut chain = vec![w, u];
                    while *chain.last().unwrap() != a {
                        chain.push(came_from[chain.last().unwrap()]);
                    }
                    chain.reverse();
                    return Some(chain);
                }
                // The first way to `w` stays: a later one must not rewrite
                // it, or the chain back to `a` can loop.
                if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                    e.insert(u);
                    queue.push_back(w);
                }
            }
        }
        None
    }

    /// A chain of files with the lines that make each step.
    fn chain(&self, chain: &[usize]) -> String {
        let files: Vec<&str> = chain.iter().map(|&i| self.files[i].as_str()).collect();
        let lines = chain.windows(2).flat_map(|w| &self.edges[&(w[0], w[1])]);
        let all: Vec<String> = [files.join(" -> ")]
            .into_iter()
            .chain(lines.cloned())
            .collect();
        all.join("\n    ")
    }
}

/// Each cycle (the shortest through its first file), with its lines.
fn cycles_report(g: &Graph) -> Option<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for v in 0..g.files.len() {
        if let (false, Some(cycle)) = (seen.contains(&v), g.path(v, &|w| w == v)) {
            seen.extend(cycle.iter().copied());
            out.push(g.chain(&cycle));
        }
    }
    let (n, label) = (out.len(), &g.label);
    (n > 0).then(|| {
        format!(
            "{label}: {n} import cycle(s); break each:\n  {}",
            out.join("\n  ")
        )
    })
}

fn matches(file: &str, pattern: &str) -> bool {
    match pattern.strip_suffix('/') {
        Some(dir) => file
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/')),
        None => file == pattern,
    }
}

fn in_set(file: &str, patterns: &str) -> bool {
    let (not, yes): (Vec<&str>, Vec<&str>) = patterns
        .split_whitespace()
        .partition(|p| p.starts_with('!'));
    yes.iter().any(|p| matches(file, p)) && !not.iter().any(|p| matches(file, &p[1..]))
}

fn rule_violations(g: &Graph, rules: &[Rule]) -> Vec<String> {
    let mut bad = Vec::new();
    for rule in rules {
        for a in (0..g.files.len()).filter(|&a| in_set(&g.files[a], rule.from)) {
            if let Some(chain) = g.path(a, &|w| in_set(&g.files[w], rule.to)) {
                bad.push(format!(
                    "{}: {}\n    {}",
                    g.label,
                    rule.why,
                    g.chain(&chain)
                ));
            }
        }
    }
    bad
}

// ----------------------------------------------------------------------------
// Each check fails when it should, on made-up crates.

mod examples {
    use super::*;
    use serde_json::json;

    fn graph(files: &[(&str, &str)]) -> Graph {
        let read = |p: &str| files.iter().find(|f| f.0 == p).map(|f| f.1.to_string());
        // The crate root is the first file given.
        load_crate(files[0].0, &read).graph("demo (lib)")
    }

    fn edges(g: &Graph) -> BTreeSet<String> {
        g.edges
            .keys()
            .map(|&(a, b)| format!("{} -> {}", g.files[a], g.files[b]))
            .collect()
    }

    #[test]
    fn a_cycle_is_reported_with_its_lines() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
            ("src/b.rs", "pub struct B;\npub fn f() { crate::c::g(); }\n"),
            (
                "src/c.rs",
                "pub fn g() { let _ = format!(\"{:?}\", crate::a::A); }\n",
            ),
        ]);
        let report = cycles_report(&g).expect("a cycle");
        let want = "demo (lib): 1 import cycle(s); break each:
  src/a.rs -> src/b.rs -> src/c.rs -> src/a.rs
    src/a.rs:1: crate::b::B
    src/b.rs:2: crate::c::g
    src/c.rs:1: crate::a::A";
        assert_eq!(report, want);
    }

    #[test]
    fn paths_resolve_through_the_tree_and_reexports_and_tests_are_left_out() {
        let g = graph(&[
            (
                "src/lib.rs",
                "mod net;\nmod util;\npub use util::Tool;\nuse std::fmt;\n",
            ),
            (
                "src/util.rs",
                "pub fn x() {}\npub struct Tool;\n#[cfg(test)]\nmod tests;\n",
            ),
            ("src/util/tests.rs", "use crate::net::tcp;\n"),
            (
                "src/net/mod.rs",
                "mod tcp;\npub struct Addr;\nfn f() { tcp::g() }\n",
            ),
            (
                "src/net/tcp.rs",
                "use super::{Addr, super::util};\npub fn g() { util::x() }\n\
                 fn h(_: crate::Tool, _: crate::fmt::Error) {}\n\
                 #[cfg(all(test, unix))]\nfn t() { crate::net::f() }\n\
                 impl S { #[test]\nfn t() { crate::net::f() } }\n",
            ),
        ]);
        let want = [
            "src/net/tcp.rs -> src/net/mod.rs",
            "src/net/tcp.rs -> src/util.rs",
        ];
        assert_eq!(edges(&g), want.map(String::from).into());
        assert!(!g.files.contains(&"src/util/tests.rs".to_string()));
        assert!(cycles_report(&g).is_none());
    }

    #[test]
    fn each_rule_reports_a_forbidden_edge_even_through_other_files() {
        let g = graph(&[
            (
                "runtime/src/lib.rs",
                "mod recorder;\nmod active;\nmod collector;\nmod pmu;\n",
            ),
            ("runtime/src/recorder.rs", "fn f() { crate::active::g() }\n"),
            (
                "runtime/src/active.rs",
                "pub fn g() { crate::collector::Session; }\n",
            ),
            ("runtime/src/collector.rs", "pub struct Session;\n"),
            (
                "runtime/src/pmu.rs",
                "fn h() { crate::collector::Session; }\n",
            ),
        ]);
        let bad = rule_violations(&g, RULES);
        let chain = |i: usize| bad[i].lines().nth(1).unwrap_or_default().trim().to_string();
        let chains: Vec<String> = (0..bad.len()).map(chain).collect();
        let want = [
            "runtime/src/recorder.rs -> runtime/src/active.rs -> runtime/src/collector.rs",
            "runtime/src/pmu.rs -> runtime/src/collector.rs",
        ];
        assert_eq!(chains, want, "{bad:#?}");
        assert!(bad[0].starts_with(&format!("demo (lib): {}", RULES[0].why)));
        assert!(bad[0].ends_with("runtime/src/active.rs:1: crate::collector::Session"));
    }

    #[test]
    fn a_facade_with_a_fn_is_reported() {
        let file: syn::File = syn::parse_str(
            "pub use a::b;\npub mod m { pub use c::d; pub fn f() {} }\nmod x;\nstruct S;",
        )
        .unwrap();
        let bad = facade_items_with_code(&file.items);
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[0].starts_with("pub fn f"), "{bad:?}");
        assert_eq!(bad[1], "mod x (a file of its own)");
    }

    #[test]
    fn a_crate_dependency_outside_the_table_is_reported() {
        let dep = |name: &str, kind: Option<&str>| json!({"name": name, "kind": kind});
        let package = |name: &str, dir: &str, deps: Vec<Value>| {
            let manifest = format!("/w/{dir}/Cargo.toml");
            json!({"name": name, "manifest_path": manifest, "dependencies": deps})
        };
        let meta = json!({"packages": [
            package("fgtrace-core", "core", vec![dep("fgtrace-trace", None)]),
            package("fgtrace-trace", "trace", vec![dep("fgtrace-core", Some("build"))]),
            package("fgtrace", ".", vec![dep("fgtrace-view", None), dep("serde", None)]),
            package("fgtrace-view", "view", vec![dep("fgtrace", Some("dev"))]),
            package("x-check", "checks/x", vec![dep("fgtrace-core", None)]),
            package("stray", "stray", vec![]),
        ]});
        let bad: Vec<String> = crate_violations(&meta)
            .into_iter()
            .map(|b| b.split(':').next().unwrap().to_string())
            .collect();
        // `fgtrace-view` only as an optional dependency (the runtime without the views).
        let want = [
            "fgtrace-core -> fgtrace-trace (normal)",
            "fgtrace -> fgtrace-view (normal)",
            "x-check -> fgtrace-core (normal)",
            "stray",
        ];
        assert_eq!(bad, want);
    }
}
