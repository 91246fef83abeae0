//! Edits of a copied `Cargo.toml` (with `toml_edit`, so the rest of the file
//! stays as it was written): relative paths that leave the copied tree made
//! absolute, the `fgtrace` dependency of an instrumented package, and an
//! empty `[workspace]` so that the copy is a workspace of its own.

use std::path::{Component, Path, PathBuf};
use toml_edit::{DocumentMut, Item, Table, Value};

/// What to do to one manifest.
#[derive(Clone, Debug, Default)]
pub struct ManifestEdit {
    /// The original manifest's directory (relative paths are from there).
    pub dir: PathBuf,
    /// The original tree the copy is of: paths that stay inside stay relative.
    pub root: PathBuf,
    /// Add `fgtrace = { path = .. }` to `[dependencies]`.
    pub fgtrace: Option<PathBuf>,
    /// Add an empty `[workspace]` if there is none.
    pub own_workspace: bool,
}

impl ManifestEdit {
    /// What the edit depends on, for the copy's stamp.
    pub fn key(&self) -> String {
        format!(
            "manifest {} {} {:?}",
            self.root.display(),
            self.own_workspace,
            self.fgtrace
        )
    }

    pub fn apply(&self, text: &str) -> Result<String, String> {
        let mut doc: DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
        let root = doc.as_table_mut();
        for key in ["dependencies", "dev-dependencies", "dev_dependencies"] {
            self.fix_deps(root.get_mut(key));
        }
        for key in ["build-dependencies", "build_dependencies"] {
            self.fix_deps(root.get_mut(key));
        }
        if let Some(targets) = root.get_mut("target").and_then(Item::as_table_like_mut) {
            for (_, t) in targets.iter_mut() {
                if let Some(t) = t.as_table_like_mut() {
                    for (_, deps) in t.iter_mut() {
                        self.fix_deps(Some(deps));
                    }
                }
            }
        }
        if let Some(ws) = root.get_mut("workspace").and_then(Item::as_table_like_mut) {
            self.fix_deps(ws.get_mut("dependencies"));
        }
        for key in ["patch", "replace"] {
            if let Some(p) = root.get_mut(key).and_then(Item::as_table_like_mut) {
                if key == "replace" {
                    self.fix_deps_table(p);
                } else {
                    for (_, source) in p.iter_mut() {
                        self.fix_deps(Some(source));
                    }
                }
            }
        }
        if let Some(fgtrace) = &self.fgtrace {
            if !root.contains_key("dependencies") {
                root.insert("dependencies", Item::Table(Table::new()));
            }
            let deps = root
                .get_mut("dependencies")
                .and_then(Item::as_table_like_mut)
                .ok_or("`dependencies` is not a table")?;
            if !deps.contains_key("fgtrace") {
                let mut t = toml_edit::InlineTable::new();
                t.insert("path", Value::from(fgtrace.display().to_string()));
                deps.insert("fgtrace", Item::Value(Value::InlineTable(t)));
            }
        }
        if self.own_workspace && !root.contains_key("workspace") {
            root.insert("workspace", Item::Table(Table::new()));
        }
        Ok(doc.to_string())
    }

    fn fix_deps(&self, deps: Option<&mut Item>) {
        if let Some(deps) = deps.and_then(Item::as_table_like_mut) {
            self.fix_deps_table(deps);
        }
    }

    fn fix_deps_table(&self, deps: &mut dyn toml_edit::TableLike) {
        for (_, dep) in deps.iter_mut() {
            let Some(dep) = dep.as_table_like_mut() else {
                continue;
            };
            let Some(path) = dep.get("path").and_then(|p| p.as_str()) else {
                continue;
            };
            if let Some(abs) = self.outside(Path::new(path)) {
                dep.insert("path", Item::Value(Value::from(abs.display().to_string())));
            }
        }
    }

    /// `path` as an absolute path when it leads out of the tree, else `None`.
    fn outside(&self, path: &Path) -> Option<PathBuf> {
        if path.is_absolute() {
            return None;
        }
        let abs = normalize(&self.dir.join(path));
        (!abs.starts_with(normalize(&self.root))).then_some(abs)
    }
}

/// `a/b/../c` as `a/c`, without touching the file system.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Whether the manifest sets `[profile.NAME] debug`.
pub fn sets_profile_debug(text: &str, profile: &str) -> bool {
    text.parse::<DocumentMut>().is_ok_and(|d| {
        d.get("profile")
            .and_then(|p| p.get(profile))
            .and_then(|p| p.get("debug"))
            .is_some()
    })
}

/// Whether `dir/Cargo.toml` is the package `fgtrace`.
pub fn is_fgtrace_package(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .ok()
        .and_then(|t| t.parse::<DocumentMut>().ok())
        .is_some_and(|d| {
            d.get("package")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                == Some("fgtrace")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_out_of_the_tree_become_absolute_and_fgtrace_is_added() {
        let edit = ManifestEdit {
            dir: "/ws/app".into(),
            root: "/ws".into(),
            fgtrace: Some("/src/fgtrace".into()),
            own_workspace: true,
        };
        let text = "\
[package]
name = \"app\" # kept

[dependencies]
inside = { path = \"../lib\" }
outside = { path = \"../../other\", version = \"1\" }
reg = \"1\"

[target.'cfg(unix)'.dev-dependencies.far]
path = \"../../far\"
";
        let out = edit.apply(text).unwrap();
        assert!(out.contains("name = \"app\" # kept"), "{out}");
        assert!(out.contains("inside = { path = \"../lib\" }"), "{out}");
        assert!(
            out.contains("outside = { path = \"/other\", version = \"1\" }"),
            "{out}"
        );
        assert!(out.contains("path = \"/far\""), "{out}");
        assert!(
            out.contains("fgtrace = { path = \"/src/fgtrace\" }"),
            "{out}"
        );
        assert!(out.contains("\n[workspace]\n"), "{out}");
        // Applied again, nothing more changes.
        assert_eq!(edit.apply(&out).unwrap(), out);
    }
}
