//! The cargo command line after `--`: `[+toolchain] [global flags]
//! SUBCOMMAND [options] [-- args]`, taken apart so that cargo-fgtrace can
//! point it at the copy (`--manifest-path`), add its `--config`s, and derive
//! the build-only command (`run` -> `build`, `test` -> `test --no-run`).

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoArgs {
    pub toolchain: Option<String>,
    /// Flags before the subcommand (`-v`, `--offline`, `--config X`).
    pub globals: Vec<String>,
    pub sub: String,
    /// The subcommand's options, `--manifest-path` and `--message-format` taken out.
    pub opts: Vec<String>,
    /// `--manifest-path`, if given.
    pub manifest: Option<PathBuf>,
    /// What follows `--` (the program's or the test harness's arguments).
    pub trailing: Option<Vec<String>>,
}

/// Global flags of cargo that take a value as the next argument.
const GLOBAL_WITH_VALUE: &[&str] = &["--config", "-Z", "--color", "-C"];

impl CargoArgs {
    pub fn parse(args: &[String]) -> Result<CargoArgs, String> {
        let mut it = args.iter().peekable();
        let toolchain = it.next_if(|a| a.starts_with('+')).cloned();
        let mut globals = Vec::new();
        let sub = loop {
            match it.next() {
                None => {
                    return Err(
                        "name the cargo command after `--`: `-- run --release`, `-- test`, \
                         `-- bench`, `-- build --release`"
                            .into(),
                    )
                }
                Some(a) if a.starts_with('-') => {
                    globals.push(a.clone());
                    if GLOBAL_WITH_VALUE.contains(&a.as_str()) {
                        globals.extend(it.next().cloned());
                    }
                }
                Some(a) => break a.clone(),
            }
        };
        let mut opts = Vec::new();
        let mut manifest = None;
        let mut trailing = None;
        while let Some(a) = it.next() {
            if a == "--" {
                trailing = Some(it.by_ref().cloned().collect());
                break;
            }
            if a == "--manifest-path" {
                manifest = it.next().map(PathBuf::from);
            } else if let Some(m) = a.strip_prefix("--manifest-path=") {
                manifest = Some(PathBuf::from(m));
            } else if a == "--message-format" {
                it.next();
            } else if a.starts_with("--message-format=") {
            } else {
                opts.push(a.clone());
            }
        }
        Ok(CargoArgs {
            toolchain,
            globals,
            sub,
            opts,
            manifest,
            trailing,
        })
    }

    /// `--offline` or `--frozen`: cargo-fgtrace's own `cargo metadata` must
    /// not reach the network either.
    pub fn offline(&self) -> bool {
        self.globals
            .iter()
            .chain(&self.opts)
            .any(|a| a == "--offline" || a == "--frozen")
    }

    /// `--locked` or `--frozen`: the copy's lock must hold fgtrace's
    /// dependencies before the build.
    pub fn locked(&self) -> bool {
        self.globals
            .iter()
            .chain(&self.opts)
            .any(|a| a == "--locked" || a == "--frozen")
    }

    /// The subcommand that builds what this one would run, without running
    /// it, and the options it adds; `None` for a subcommand that runs
    /// nothing cargo-fgtrace knows of.
    pub fn build_only(&self) -> Option<(&'static str, Option<&'static str>)> {
        match self.sub.as_str() {
            "run" | "r" | "build" | "b" => Some(("build", None)),
            "test" | "t" => Some(("test", Some("--no-run"))),
            "bench" => Some(("bench", Some("--no-run"))),
            _ => None,
        }
    }

    /// The command line: `[+toolchain] globals extra_globals SUB
    /// --manifest-path M extra opts [-- trailing]`.
    pub fn line(
        &self,
        extra_globals: &[String],
        sub: &str,
        manifest: &std::path::Path,
        extra: &[&str],
        trailing: bool,
    ) -> Vec<String> {
        let mut v: Vec<String> = self.toolchain.iter().cloned().collect();
        v.extend(self.globals.iter().cloned());
        v.extend(extra_globals.iter().cloned());
        v.push(sub.into());
        v.push("--manifest-path".into());
        v.push(manifest.display().to_string());
        v.extend(extra.iter().map(|s| s.to_string()));
        v.extend(self.opts.iter().cloned());
        if let (true, Some(t)) = (trailing, &self.trailing) {
            v.push("--".into());
            v.extend(t.iter().cloned());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn takes_apart_and_puts_back_a_cargo_command() {
        let a = CargoArgs::parse(&args(
            "+nightly -v --config x=1 run --release --manifest-path a/Cargo.toml \
             --message-format=short --bin b -- in.txt --flag",
        ))
        .unwrap();
        assert_eq!(a.toolchain.as_deref(), Some("+nightly"));
        assert_eq!(a.globals, args("-v --config x=1"));
        assert_eq!(a.sub, "run");
        assert_eq!(a.opts, args("--release --bin b"));
        assert_eq!(a.manifest, Some(PathBuf::from("a/Cargo.toml")));
        assert_eq!(a.trailing, Some(args("in.txt --flag")));
        assert_eq!(a.build_only(), Some(("build", None)));
        assert_eq!(
            a.line(
                &["--config".into(), "y=2".into()],
                "run",
                std::path::Path::new("/c/Cargo.toml"),
                &[],
                true
            ),
            args(
                "+nightly -v --config x=1 --config y=2 run --manifest-path /c/Cargo.toml \
                 --release --bin b -- in.txt --flag"
            )
        );
        let t = CargoArgs::parse(&args("test --release --locked filter")).unwrap();
        assert_eq!(t.build_only(), Some(("test", Some("--no-run"))));
        assert!(t.locked() && !t.offline());
        assert!(CargoArgs::parse(&args("--offline")).is_err());
    }
}
