//! One trace file, or several read as one (`fgtrace_trace::merge`): a
//! whole test suite's binaries reported per function.

use crate::progress;
use fgtrace_trace::merge::Merge;
use fgtrace_trace::{Event, TraceError, TraceMeta};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A trace's events, from one file or several.
pub type Events = Box<dyn Iterator<Item = Result<Event, TraceError>>>;

/// Where the events come from: one file's reader (which a view may read
/// thread by thread), or several files merged into one stream.
pub enum InputEvents {
    One(Box<crate::progress::Reader>),
    Merged(Events),
}

impl InputEvents {
    /// The events in trace order.
    pub fn events(self) -> Events {
        match self {
            InputEvents::One(r) => Box::new(r.events()),
            InputEvents::Merged(e) => e,
        }
    }
}

/// What the files hold: their (merged) metadata and events, and how to
/// name them in messages.
pub struct Inputs {
    pub meta: TraceMeta,
    pub source: InputEvents,
    /// The file, or `N files`.
    pub label: PathBuf,
    /// Several files were merged (samples left out).
    pub merged: bool,
}

/// Opens `files`; several are merged per function.
pub fn open_inputs(files: &[PathBuf]) -> Result<Inputs, String> {
    // A ring's `FILE.prev` given beside its `FILE` (`traces/*`) is read
    // with it, not as a trace of its own: its calls would count twice.
    let with_file = |f: &PathBuf| {
        files
            .iter()
            .any(|g| fgtrace_trace::file::segment_before(g).as_ref() == Some(f))
    };
    let kept: Vec<PathBuf> = files.iter().filter(|f| !with_file(f)).cloned().collect();
    for f in files.iter().filter(|f| with_file(f)) {
        eprintln!(
            "fgtrace: {} is read with the ring's file beside it, not on its own",
            f.display()
        );
    }
    let files = &kept[..];
    let open_one =
        |p: &Path| progress::open_with_bar(p, None).map_err(|e| format!("{}: {e}", p.display()));
    if let [file] = files {
        let r = open_one(file)?;
        return Ok(Inputs {
            meta: r.meta().clone(),
            source: InputEvents::One(Box::new(r)),
            label: file.clone(),
            merged: false,
        });
    }
    let readers = files
        .iter()
        .map(|f| open_one(f))
        .collect::<Result<Vec<_>, _>>()?;
    let metas: Vec<TraceMeta> = readers.iter().map(|r| r.meta().clone()).collect();
    let merge = Arc::new(Merge::new(&metas));
    let meta = merge.meta().clone();
    // Each file's own warnings were shown as it opened; then the merge's.
    for w in &meta.warnings {
        if !metas
            .iter()
            .any(|m| m.warnings.iter().any(|x| w.ends_with(x.as_str())))
        {
            eprintln!("fgtrace: warning: {w}");
        }
    }
    let streams: Vec<_> = readers.into_iter().map(|r| r.events()).collect();
    Ok(Inputs {
        meta,
        source: InputEvents::Merged(Box::new(merge.events(streams))),
        label: PathBuf::from(format!("{} files", files.len())),
        merged: true,
    })
}
