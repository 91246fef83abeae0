//! `#[traced]` in crates of every edition, built with `rustc` against a mock
//! `fgtrace` runtime: the expansion must resolve in each (a 2015 crate reads
//! `::name` from its own root, where `core` is not unless it is `no_std`),
//! and each site must still carry the fn's own file and line.
//!
//! The proc macro is the one cargo built for this test (the newest
//! `libfgtrace_macros-*` next to the test binary), so `rustc` must be the
//! compiler that built it: `$RUSTC`, else the `rustc` beside `$CARGO`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `fgtrace::__private` with the real signatures; each entry prints the site.
const MOCK_RUNTIME: &str = r#"
pub mod __private {
    pub struct Site {
        pub name: &'static str,
        pub module_path: &'static str,
        pub file: &'static str,
        pub line: u32,
        pub is_async: bool,
    }
    impl Site {
        pub const fn new(name: &'static str, module_path: &'static str, file: &'static str,
                         line: u32, is_async: bool) -> Site {
            Site { name: name, module_path: module_path, file: file, line: line, is_async: is_async }
        }
    }
    pub struct Guard(&'static Site);
    pub fn enter(site: &'static Site) -> Guard {
        println!("{} {} {}:{}", site.name, site.module_path, site.file, site.line);
        Guard(site)
    }
    impl Drop for Guard {
        fn drop(&mut self) {}
    }
}
"#;

/// A program using `#[traced]` on free fns, an impl block and in a module,
/// valid in every edition. No `extern crate fgtrace`: like a real crate, it
/// only has `fgtrace` as a dependency.
const PROGRAM: &str = r#"extern crate fgtrace_macros;

use fgtrace_macros::traced;

#[traced]
fn free() -> u32 {
    1
}

struct S;

#[traced]
impl S {
    fn method(&self) -> u32 {
        free() + 1
    }

    const fn constant() -> u32 {
        3
    }
}

mod inner {
    #[::fgtrace_macros::traced]
    pub fn nested() {}
}

// Fns written by a macro: the name from the call, or from the macro itself.
macro_rules! traced_fns {
    ($name:ident) => {
        #[traced]
        fn $name() {}
        #[traced]
        fn made() {}
    };
}

traced_fns!(named);

fn main() {
    assert_eq!(S.method() + S::constant(), 5);
    inner::nested();
    named();
    made();
}
"#;

/// A `no_std` library (its root has `core` and no `std`).
const NO_STD_LIB: &str = r#"#![no_std]
extern crate fgtrace_macros;

#[fgtrace_macros::traced]
pub fn f() -> u32 {
    1
}

pub struct S;

#[fgtrace_macros::traced]
impl S {
    pub fn m(&self) {}
}
"#;

fn rustc() -> PathBuf {
    if let Some(rustc) = std::env::var_os("RUSTC") {
        return rustc.into();
    }
    if let Some(cargo) = std::env::var_os("CARGO") {
        let beside = Path::new(&cargo).with_file_name("rustc");
        if beside.exists() {
            return beside;
        }
    }
    "rustc".into()
}

/// The proc macro library cargo built for this test run.
fn proc_macro_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    std::fs::read_dir(deps)
        .expect("read deps directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("libfgtrace_macros-")
                && [".so", ".dylib", ".dll"]
                    .iter()
                    .any(|ext| name.ends_with(ext))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("libfgtrace_macros-*.so next to the test binary")
}

/// A fresh directory for one edition's build.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fgtrace-macros-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// Runs `rustc` in `dir`; panics with its output if it fails.
fn compile(dir: &Path, args: &[&str]) {
    let out = Command::new(rustc())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run rustc");
    assert!(
        out.status.success(),
        "rustc {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The 1-based line of the first line of `src` containing `what`.
fn line_of(src: &str, what: &str) -> usize {
    1 + src.lines().position(|l| l.contains(what)).expect(what)
}

#[test]
fn traced_resolves_in_every_edition_and_sites_keep_the_fns_lines() {
    let macro_lib = proc_macro_lib();
    let macros = format!("fgtrace_macros={}", macro_lib.display());
    for edition in ["2015", "2018", "2021", "2024"] {
        let dir = scratch(edition);
        std::fs::write(dir.join("mock.rs"), MOCK_RUNTIME).unwrap();
        std::fs::write(dir.join("main.rs"), PROGRAM).unwrap();
        std::fs::write(dir.join("no_std.rs"), NO_STD_LIB).unwrap();
        compile(
            &dir,
            &[
                "--edition",
                "2021",
                "--crate-type",
                "rlib",
                "--crate-name",
                "fgtrace",
                "mock.rs",
            ],
        );
        let runtime = "fgtrace=libfgtrace.rlib";
        compile(
            &dir,
            &[
                "--edition",
                edition,
                "--extern",
                runtime,
                "--extern",
                &macros,
                "-o",
                "main",
                "main.rs",
            ],
        );
        compile(
            &dir,
            &[
                "--edition",
                edition,
                "--crate-type",
                "rlib",
                "--emit",
                "metadata",
                "--extern",
                runtime,
                "--extern",
                &macros,
                "no_std.rs",
            ],
        );
        let run = Command::new(dir.join("main"))
            .output()
            .expect("run the program");
        assert!(run.status.success(), "edition {edition}: {run:?}");
        // `free` is entered inside `method`, after it. A fn a macro wrote is
        // at the macro's call, as `line!()` there would say.
        let expected = format!(
            "S::method main main.rs:{}\nfree main main.rs:{}\nnested main::inner main.rs:{}\n\
             named main main.rs:{call}\nmade main main.rs:{call}\n",
            line_of(PROGRAM, "fn method"),
            line_of(PROGRAM, "fn free"),
            line_of(PROGRAM, "fn nested"),
            call = line_of(PROGRAM, "traced_fns!(named)"),
        );
        assert_eq!(
            String::from_utf8_lossy(&run.stdout),
            expected,
            "edition {edition}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
