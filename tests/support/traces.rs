// Small synthetic traces for the view tests: the sites, threads, metadata and
// call events of a made-up program `app`, built through the public API.
//
// Included by the tests that build traces by hand (`#[path = "support/traces.rs"]
// mod traces;`, from cli/tests `#[path = "../../tests/support/traces.rs"]`), and
// by the library's own unit tests (`crate::test_traces`, src/lib.rs).
// Each test still says what its trace holds: these only spell the records.

#![allow(dead_code)]

use fgtrace_trace::{Call, Event, SiteInfo, ThreadInfo, TraceMeta};

/// `app::{name}`, a plain (not async) function at `src/app.rs:10`.
pub fn site(name: &str) -> SiteInfo {
    SiteInfo {
        name: name.into(),
        module_path: "app".into(),
        file: "src/app.rs".into(),
        line: 10,
        is_async: false,
        values: Vec::new(),
    }
}

/// `app::{name}`, an async fn.
pub fn async_site(name: &str) -> SiteInfo {
    SiteInfo {
        is_async: true,
        values: Vec::new(),
        ..site(name)
    }
}

/// A thread of the metadata, with nothing lost.
pub fn thread(tid: u32, name: &str) -> ThreadInfo {
    ThreadInfo {
        tid,
        name: name.into(),
        ..Default::default()
    }
}

/// The program `app` (pid: its first thread's tid) with these plain sites
/// (ids in order) and threads (indices in order); the rest default.
pub fn meta(sites: &[&str], threads: &[(u32, &str)]) -> TraceMeta {
    TraceMeta {
        program: "app".into(),
        pid: threads.first().map_or(1, |t| t.0),
        sites: sites.iter().map(|s| site(s)).collect(),
        threads: threads
            .iter()
            .map(|&(tid, name)| thread(tid, name))
            .collect(),
        ..Default::default()
    }
}

/// A completed call of `site` on thread index `thread` (no flags).
pub fn call(thread: u32, site: u32, depth: u32, start_ns: u64, dur_ns: u64) -> Event {
    flagged_call(thread, site, depth, start_ns, dur_ns, 0)
}

/// The same with `flags` (`trace::flags`).
pub fn flagged_call(
    thread: u32,
    site: u32,
    depth: u32,
    start_ns: u64,
    dur_ns: u64,
    flags: u8,
) -> Event {
    Event::Call(Call {
        thread,
        site,
        depth,
        start_ns,
        dur_ns,
        flags,
    })
}
