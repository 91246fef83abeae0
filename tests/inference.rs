//! Adding fgtrace changes no type inference in a user's code: the crate in
//! `checks/inference` (`#[traced]` beside `assert_eq!(&*v, &[])` and other
//! comparisons whose types inference picks, and a `fgtrace::testing`
//! capture in its tests) builds and passes its tests on its own, as a
//! user's crate would: its own workspace and lock file, so the features of
//! this workspace's other members (the CLI's JSON output) are not unified
//! into what it sees.

use std::path::Path;
use std::process::Command;

#[test]
fn a_users_crate_with_inference_sensitive_comparisons_builds_and_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO"))
        .args(["test", "--locked", "--manifest-path"])
        .arg(root.join("checks/inference/Cargo.toml"))
        // Its own target directory: the outer build holds this one's lock.
        .env("CARGO_TARGET_DIR", root.join("target/inference-check"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the check crate does not build or its tests fail:\n{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("test result: ok. 2 passed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
