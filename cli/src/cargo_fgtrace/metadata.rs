//! What `cargo metadata` says of a workspace and its dependency graph: the
//! packages, where their sources are, their targets.

use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One package of the graph.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub id: String,
    /// `None` for a local (path) package, else cargo's source id
    /// (`registry+https://..`, `sparse+https://..`, `git+https://..#rev`).
    pub source: Option<String>,
    pub manifest: PathBuf,
    pub targets: Vec<Target>,
}

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub kinds: Vec<String>,
    pub src_path: PathBuf,
}

impl Package {
    pub fn dir(&self) -> &Path {
        self.manifest.parent().unwrap_or(Path::new("."))
    }

    /// A proc-macro crate runs inside the compiler: it is never instrumented.
    pub fn is_proc_macro(&self) -> bool {
        self.targets
            .iter()
            .any(|t| t.kinds.iter().any(|k| k == "proc-macro"))
    }

    /// The targets whose code the instrumenting covers: the library and
    /// the binaries (not build scripts, tests, benches or examples).
    pub fn code_targets(&self) -> impl Iterator<Item = &Target> {
        self.targets.iter().filter(|t| {
            t.kinds.iter().any(|k| {
                matches!(
                    k.as_str(),
                    "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "bin"
                )
            })
        })
    }

    /// The crate name module paths start with: the library's, else the
    /// package's (`-` as `_`).
    pub fn crate_name(&self) -> String {
        self.targets
            .iter()
            .find(|t| t.kinds.iter().any(|k| k.ends_with("lib")))
            .map_or_else(|| self.name.clone(), |t| t.name.clone())
            .replace('-', "_")
    }

    pub fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
}

/// A workspace as `cargo metadata` describes it.
#[derive(Debug)]
pub struct Metadata {
    pub root: PathBuf,
    pub target_dir: PathBuf,
    pub members: Vec<String>,
    pub packages: Vec<Package>,
    /// The resolved graph (empty with `--no-deps`): each package's
    /// dependencies that are not dev-dependencies.
    pub deps: HashMap<String, Vec<String>>,
}

impl Metadata {
    /// The packages `id` depends on, directly or not (itself included).
    pub fn closure(&self, id: &str) -> HashSet<String> {
        let mut seen = HashSet::from([id.to_string()]);
        let mut todo = vec![id.to_string()];
        while let Some(id) = todo.pop() {
            for d in self.deps.get(&id).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    }

    pub fn members(&self) -> impl Iterator<Item = &Package> {
        self.packages
            .iter()
            .filter(|p| self.members.contains(&p.id))
    }
}

/// Runs `cargo metadata`; `no_deps` reads only the workspace's manifests
/// (no resolution, so nothing is written, not even a `Cargo.lock`).
pub fn read(
    cargo: &str,
    manifest: Option<&Path>,
    no_deps: bool,
    extra: &[String],
) -> Result<Metadata, String> {
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1"]);
    if no_deps {
        cmd.arg("--no-deps");
    }
    if let Some(m) = manifest {
        cmd.arg("--manifest-path").arg(m);
    }
    cmd.args(extra);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run `{cargo} metadata`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse(&out.stdout)
}

fn parse(json: &[u8]) -> Result<Metadata, String> {
    let v: Value = serde_json::from_slice(json)
        .map_err(|e| format!("`cargo metadata` printed what is not JSON: {e}"))?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(String::from);
    let missing = |k: &str| format!("`cargo metadata`: no `{k}`");
    let packages = v
        .get("packages")
        .and_then(Value::as_array)
        .ok_or_else(|| missing("packages"))?
        .iter()
        .map(|p| {
            Ok(Package {
                name: s(p, "name").ok_or_else(|| missing("name"))?,
                version: s(p, "version").ok_or_else(|| missing("version"))?,
                id: s(p, "id").ok_or_else(|| missing("id"))?,
                source: s(p, "source"),
                manifest: s(p, "manifest_path")
                    .ok_or_else(|| missing("manifest_path"))?
                    .into(),
                targets: p
                    .get("targets")
                    .and_then(Value::as_array)
                    .map(|ts| {
                        ts.iter()
                            .map(|t| Target {
                                name: s(t, "name").unwrap_or_default(),
                                kinds: t
                                    .get("kind")
                                    .and_then(Value::as_array)
                                    .map(|k| {
                                        k.iter()
                                            .filter_map(|x| x.as_str().map(String::from))
                                            .collect()
                                    })
                                    .unwrap_or_default(),
                                src_path: s(t, "src_path").unwrap_or_default().into(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Metadata {
        root: s(&v, "workspace_root")
            .ok_or_else(|| missing("workspace_root"))?
            .into(),
        target_dir: s(&v, "target_directory")
            .ok_or_else(|| missing("target_directory"))?
            .into(),
        members: v
            .get("workspace_members")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        packages,
        deps: v
            .get("resolve")
            .and_then(|r| r.get("nodes"))
            .and_then(Value::as_array)
            .map(|nodes| {
                nodes
                    .iter()
                    .filter_map(|n| {
                        let deps = n
                            .get("deps")
                            .and_then(Value::as_array)?
                            .iter()
                            .filter(|d| {
                                d.get("dep_kinds")
                                    .and_then(Value::as_array)
                                    .is_none_or(|ks| {
                                        ks.iter().any(|k| k["kind"].as_str() != Some("dev"))
                                    })
                            })
                            .filter_map(|d| s(d, "pkg"))
                            .collect();
                        Some((s(n, "id")?, deps))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// `regex-syntax` and `regex_syntax` name the same package.
pub fn same_name(a: &str, b: &str) -> bool {
    a.replace('_', "-") == b.replace('_', "-")
}
