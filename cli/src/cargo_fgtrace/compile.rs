//! The build: cargo with `--message-format=json` (the compiler's
//! diagnostics as JSON on stdout, cargo's own lines on stderr), its
//! messages read as they come. The user's own crates' diagnostics are shown
//! as cargo shows them; those of an instrumented crate go to the log, and an
//! error there becomes one message that names the item (found by line in the
//! file) and the `--skip` that leaves it out.

use crate::prepare::{Instrumented, Prepared};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What a build gave.
pub struct Built {
    /// Executables built (test binaries, bins, examples), in cargo's order.
    pub executables: Vec<PathBuf>,
}

/// An error in an instrumented crate, at an item.
struct Broken {
    /// The item's path, when the line is inside one.
    item: Option<String>,
    /// `file:line`.
    at: String,
    /// The compiler's message, first line.
    message: String,
}

/// Runs the build-only cargo command; `Err` carries the exit status and
/// what to print.
pub fn build(prep: &Prepared, line: &[String]) -> Result<Built, (i32, String)> {
    let log_path = prep.dir.join("build.log");
    let fail = |m: String| (1, m);
    std::fs::create_dir_all(&prep.dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", prep.dir.display())))?;
    let mut log = std::fs::File::create(&log_path)
        .map_err(|e| fail(format!("cannot write {}: {e}", log_path.display())))?;
    let _ = writeln!(log, "$ {} {}", prep.cargo, line.join(" "));
    let mut cmd = Command::new(&prep.cargo);
    cmd.args(line)
        .envs(prep.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot run `{}`: {e}", prep.cargo)))?;
    // cargo's own lines (Compiling .., Finished ..) are passed on as they come.
    let stderr = child.stderr.take().expect("piped");
    // Except what it says of an instrumented crate: its verdict (the
    // message below says more) and its count of warnings (they are in the
    // log; cargo would not show a registry crate's at all).
    let quiet: Vec<String> = prep
        .instrumented
        .iter()
        .flat_map(|i| {
            [
                format!("error: could not compile `{}`", i.name),
                format!("warning: `{}` (", i.name),
            ]
        })
        .collect();
    let err_lines = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !quiet.iter().any(|q| l.starts_with(q.as_str())) {
                eprintln!("{l}");
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let by_manifest: BTreeMap<PathBuf, &Instrumented> = prep
        .instrumented
        .iter()
        .map(|i| (i.copy_dir.join("Cargo.toml"), i))
        .collect();
    let mut executables = Vec::new();
    let mut broken: BTreeMap<String, Vec<Broken>> = BTreeMap::new();
    let stdout = child.stdout.take().expect("piped");
    for l in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<Value>(&l) else {
            // Whatever a build script prints on stdout is not JSON.
            let _ = writeln!(log, "{l}");
            continue;
        };
        match v.get("reason").and_then(Value::as_str) {
            Some("compiler-artifact") => {
                if let Some(exe) = v.get("executable").and_then(Value::as_str) {
                    executables.push(PathBuf::from(exe));
                }
            }
            Some("compiler-message") => {
                let msg = &v["message"];
                let rendered = msg["rendered"].as_str().unwrap_or_default();
                let _ = write!(log, "{rendered}");
                let manifest = PathBuf::from(v["manifest_path"].as_str().unwrap_or_default());
                match by_manifest.get(&manifest) {
                    None => eprint!("{rendered}"),
                    Some(inst) => {
                        if msg["level"].as_str() == Some("error") {
                            if let Some(b) = locate(prep, inst, msg) {
                                broken.entry(inst.label.clone()).or_default().push(b);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let status = child
        .wait()
        .map_err(|e| fail(format!("waiting for cargo: {e}")))?;
    let err_text = err_lines.join().unwrap_or_default();
    let _ = write!(log, "{err_text}");
    if status.success() {
        return Ok(Built { executables });
    }
    let code = status.code().unwrap_or(101);
    if broken.is_empty() {
        return Err((
            code,
            format!("the build failed (its log: {})", log_path.display()),
        ));
    }
    let mut text = String::new();
    let mut globs = Vec::new();
    for (label, errors) in &broken {
        text += &format!("{label} does not compile instrumented:\n");
        let mut seen = Vec::new();
        for b in errors {
            let key = b.item.clone().unwrap_or_else(|| b.at.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            match &b.item {
                Some(item) => {
                    text += &format!("  {item} ({}): {}\n", b.at, b.message);
                    globs.push(format!("--skip '{item}'"));
                }
                None => text += &format!("  {}: {}\n", b.at, b.message),
            }
        }
    }
    if globs.is_empty() {
        text +=
            "no traced item holds the error: leave the crate out (name the others with --crate)";
    } else {
        text += &format!(
            "leave {} out with {} (as #[notrace] would), or the crate (name the others with --crate)",
            if globs.len() == 1 { "it" } else { "them" },
            globs.join(" ")
        );
    }
    text += &format!("; the compiler's messages: {}", log_path.display());
    Err((code, text))
}

/// Where an instrumented crate's error is, and in which item.
fn locate(prep: &Prepared, inst: &Instrumented, msg: &Value) -> Option<Broken> {
    let message = msg["rendered"]
        .as_str()
        .and_then(|r| r.lines().next())
        .unwrap_or_default()
        .to_string();
    let spans = msg["spans"].as_array()?;
    let span = spans
        .iter()
        .find(|s| s["is_primary"].as_bool() == Some(true))
        .or_else(|| spans.first());
    let Some(span) = span else {
        // "aborting due to ..": the errors before it say where.
        return None;
    };
    let file = Path::new(span["file_name"].as_str().unwrap_or_default());
    let line = span["line_start"].as_u64().unwrap_or(0) as usize;
    let abs = if file.is_absolute() {
        file.to_path_buf()
    } else {
        prep.ws_copy.join(file)
    };
    let rel = abs
        .strip_prefix(&inst.copy_dir)
        .or_else(|_| abs.strip_prefix(&inst.orig_dir))
        .ok()
        .map(Path::to_path_buf);
    let at = format!(
        "{}:{line}",
        rel.as_ref()
            .map_or_else(|| file.display().to_string(), |r| r.display().to_string())
    );
    let item = rel.and_then(|rel| {
        let src = inst.src_dirs.iter().find(|d| rel.starts_with(d))?;
        let text = std::fs::read_to_string(inst.copy_dir.join(&rel)).ok()?;
        let module = fgtrace_instrument::module_path(&inst.krate, rel.strip_prefix(src).ok()?);
        fgtrace_instrument::item_at(&text, &module, line).map(|i| i.path)
    });
    Some(Broken { item, at, message })
}
