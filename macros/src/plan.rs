//! Compile-time plans: `FGTRACE_PLAN` names a file of function paths
//! (`regex_automata::util::search::Input::start`, one a line, `#` starts a
//! comment, anything after the path on a line is ignored). Each function it
//! names gets an exact count instead of the probe (see `fgtrace_core::counted`),
//! or, on an `uncounted PATH` line, neither probe nor count: as if it were not
//! traced. `cargo fgtrace plan` writes such files from traces.
//!
//! The macro knows the crate (`CARGO_CRATE_NAME`, which cargo gives rustc)
//! and the function's display name (`Input::start`), not its module. So a
//! plan line is a candidate when it starts with the crate and ends with the
//! name, and the expansion compares the modules of all candidates with
//! `module_path!()` in a `const` (see `expand::instrument`): a function of
//! the same name in another module keeps its probe.
//!
//! So that cargo rebuilds a crate when the plan or the variable changes, the
//! first expansion in a rustc process (one crate) names both:
//! `option_env!("FGTRACE_PLAN")` puts the variable in the crate's dep-info,
//! and `include_bytes!(PLAN)` the file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::OnceLock;

use proc_macro2::TokenStream;
use quote::quote;

/// The variable naming the plan file.
pub(crate) const VAR: &str = "FGTRACE_PLAN";

/// A parsed plan: its full paths by their last segment.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The file, as the variable names it (absolute).
    pub(crate) path: String,
    /// (full path, uncounted) by the path's last segment.
    by_last: HashMap<String, Vec<(String, bool)>>,
}

/// Where a plan names a function: the modules in which it is counted, and
/// those in which it is left without probe and count (`uncounted` lines).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Planned {
    pub(crate) counted: Vec<String>,
    pub(crate) uncounted: Vec<String>,
}

impl Planned {
    pub(crate) fn is_empty(&self) -> bool {
        self.counted.is_empty() && self.uncounted.is_empty()
    }
}

impl Plan {
    pub(crate) fn parse(path: &str, text: &str) -> Plan {
        let mut by_last: HashMap<String, Vec<(String, bool)>> = HashMap::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            let (full, uncounted) = match words.next() {
                None => continue,
                Some("uncounted") => match words.next() {
                    Some(full) => (full, true),
                    None => continue,
                },
                Some(full) => (full, false),
            };
            let last = full.rsplit("::").next().unwrap_or(full);
            by_last
                .entry(last.to_string())
                .or_default()
                .push((full.to_string(), uncounted));
        }
        Plan {
            path: path.to_string(),
            by_last,
        }
    }

    /// The modules of `krate` in which the plan names a function displayed
    /// as `name` (`Type::method` or `function`): empty when none.
    pub(crate) fn modules(&self, krate: &str, name: &str) -> Planned {
        let last = name.rsplit("::").next().unwrap_or(name);
        let mut out = Planned::default();
        for (full, uncounted) in self.by_last.get(last).into_iter().flatten() {
            let Some(module) = full.strip_suffix(name).and_then(|m| m.strip_suffix("::")) else {
                continue;
            };
            if module == krate || module.starts_with(&format!("{krate}::")) {
                let into = if *uncounted {
                    &mut out.uncounted
                } else {
                    &mut out.counted
                };
                into.push(module.to_string());
            }
        }
        for v in [&mut out.counted, &mut out.uncounted] {
            v.sort();
            v.dedup();
        }
        out
    }
}

/// The plan `FGTRACE_PLAN` names, read once per rustc process: `Ok(None)`
/// without the variable, `Err` with a message when the file cannot be used.
pub(crate) fn current() -> Result<Option<&'static Plan>, &'static str> {
    static PLAN: OnceLock<Result<Option<Plan>, String>> = OnceLock::new();
    let plan = PLAN.get_or_init(|| {
        let Some(path) = std::env::var_os(VAR) else {
            return Ok(None);
        };
        let Some(path) = path.to_str().filter(|p| !p.is_empty()) else {
            return if path.is_empty() {
                Ok(None)
            } else {
                Err(format!("{VAR} is not valid UTF-8: {path:?}"))
            };
        };
        if !std::path::Path::new(path).is_absolute() {
            return Err(format!(
                "{VAR}={path}: give the plan's absolute path (rustc runs in \
                 different directories for different crates)"
            ));
        }
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(Plan::parse(path, &text))),
            Err(e) => Err(format!("{VAR}={path}: cannot read the plan: {e}")),
        }
    });
    match plan {
        Ok(p) => Ok(p.as_ref()),
        Err(e) => Err(e.as_str()),
    }
}

/// The modules of the crate being compiled in which the current plan names
/// `name` (empty without a plan, or outside cargo).
pub(crate) fn planned_modules(name: &str) -> Planned {
    match (current(), std::env::var("CARGO_CRATE_NAME")) {
        (Ok(Some(plan)), Ok(krate)) => plan.modules(&krate, name),
        _ => Planned::default(),
    }
}

/// What the first expansion of a rustc process adds to its fn body: the
/// dependencies on the variable and the plan file, or the plan's error.
/// Empty for every later expansion.
pub(crate) fn first_expansion() -> TokenStream {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Relaxed) {
        return TokenStream::new();
    }
    match current() {
        // `core` by a block-local `extern crate`, which every edition
        // resolves (see `expand::instrument`).
        Ok(None) => quote! {{
            extern crate core as __fgtrace_core;
            const _: __fgtrace_core::option::Option<&str> = __fgtrace_core::option_env!("FGTRACE_PLAN");
        }},
        Ok(Some(plan)) => {
            let path = &plan.path;
            quote! {{
                extern crate core as __fgtrace_core;
                const _: __fgtrace_core::option::Option<&str> = __fgtrace_core::option_env!("FGTRACE_PLAN");
                const _: &[u8] = __fgtrace_core::include_bytes!(#path);
            }}
        }
        Err(e) => quote! {
            compile_error!(#e);
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_its_module_for_the_functions_of_its_crate_and_name() {
        let p = Plan::parse(
            "/p",
            "# fgtrace plan\n\
             regex_automata::util::search::Input::start   # 4 ns\n\
             regex_automata::nfa::Input::start\n\
             uncounted regex_automata::dfa::Input::start\n\
             regex_automata::util::search::Span::start\n\
             regex::tiny\n\
             \n   regex_syntax::Input::start\n",
        );
        let counted = |k: &str, n: &str| p.modules(k, n).counted;
        assert_eq!(
            counted("regex_automata", "Input::start"),
            ["regex_automata::nfa", "regex_automata::util::search"]
        );
        assert_eq!(
            p.modules("regex_automata", "Input::start").uncounted,
            ["regex_automata::dfa"]
        );
        assert_eq!(counted("regex_syntax", "Input::start"), ["regex_syntax"]);
        assert_eq!(counted("regex", "tiny"), ["regex"]);
        assert!(p.modules("regex", "Input::start").is_empty());
        assert!(
            p.modules("regex_automata", "art").is_empty(),
            "a name is matched whole"
        );
        assert!(
            p.modules("regex_auto", "Input::start").is_empty(),
            "a crate is matched whole"
        );
    }
}
