//! The user guide's Rust examples (`docs/src`), compiled and run as doctests.
//!
//! Each module's documentation is one page of the guide, included as it is,
//! so `cargo test -p fgtrace-guide` (and `cargo test --workspace`) runs every
//! Rust code block of the book against the workspace's crates. Blocks that
//! are not Rust say so (`text`, `sh`, `toml`); blocks that must not run are
//! `no_run` or `ignore`, with a comment saying why.
//!
//! Never published: it exists for its tests.

#![warn(missing_docs)]
// The pages are Markdown for mdBook: links between pages and to images are
// relative file paths, which rustdoc leaves as they are.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]

#[doc = include_str!("../../src/introduction.md")]
pub mod introduction {}

#[doc = include_str!("../../src/getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("../../src/instrumenting.md")]
pub mod instrumenting {}

#[doc = include_str!("../../src/recording/README.md")]
pub mod recording {}

#[doc = include_str!("../../src/recording/in-process.md")]
pub mod recording_in_process {}

#[doc = include_str!("../../src/recording/whole-program.md")]
pub mod recording_whole_program {}

#[doc = include_str!("../../src/recording/cargo-fgtrace.md")]
pub mod recording_cargo_fgtrace {}

#[doc = include_str!("../../src/recording/running-process.md")]
pub mod recording_running_process {}

#[doc = include_str!("../../src/recording/losses.md")]
pub mod recording_losses {}

#[doc = include_str!("../../src/recording/auto-exclude.md")]
pub mod recording_auto_exclude {}

#[doc = include_str!("../../src/recording/plans.md")]
pub mod recording_plans {}

#[doc = include_str!("../../src/recording/sampling.md")]
pub mod recording_sampling {}

#[doc = include_str!("../../src/recording/off-cpu.md")]
pub mod recording_off_cpu {}

#[doc = include_str!("../../src/views/README.md")]
pub mod views {}

#[doc = include_str!("../../src/views/graph.md")]
pub mod views_graph {}

#[doc = include_str!("../../src/views/report.md")]
pub mod views_report {}

#[doc = include_str!("../../src/views/flamegraphs.md")]
pub mod views_flamegraphs {}

#[doc = include_str!("../../src/views/flame-chart.md")]
pub mod views_flame_chart {}

#[doc = include_str!("../../src/views/perfetto.md")]
pub mod views_perfetto {}

#[doc = include_str!("../../src/views/firefox.md")]
pub mod views_firefox {}

#[doc = include_str!("../../src/views/pprof.md")]
pub mod views_pprof {}

#[doc = include_str!("../../src/views/html.md")]
pub mod views_html {}

#[doc = include_str!("../../src/views/plots.md")]
pub mod views_plots {}

#[doc = include_str!("../../src/views/diff.md")]
pub mod views_diff {}

#[doc = include_str!("../../src/testing/README.md")]
pub mod testing {}

#[doc = include_str!("../../src/testing/captures.md")]
pub mod testing_captures {}

#[doc = include_str!("../../src/testing/budget.md")]
pub mod testing_budget {}

#[doc = include_str!("../../src/testing/ci.md")]
pub mod testing_ci {}

#[doc = include_str!("../../src/tracing.md")]
pub mod tracing {}

#[doc = include_str!("../../src/bridges.md")]
pub mod bridges {}

#[doc = include_str!("../../src/boards.md")]
pub mod boards {}

#[doc = include_str!("../../src/file-format.md")]
pub mod file_format {}

#[doc = include_str!("../../src/platforms.md")]
pub mod platforms {}

#[doc = include_str!("../../src/performance.md")]
pub mod performance {}

#[doc = include_str!("../../src/architecture.md")]
pub mod architecture {}

#[doc = include_str!("../../src/dependencies.md")]
pub mod dependencies {}

#[doc = include_str!("../../src/contributing.md")]
pub mod contributing {}
