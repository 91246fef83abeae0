//! Thread selection for the views' thread filters: which threads a list of
//! [`ThreadSel`] picks out of a trace, and whether an event's thread passes.

use fgtrace_trace::TraceMeta;
use std::str::FromStr;

/// Selects threads by OS thread id or by name, for the views' thread filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreadSel {
    /// OS thread id (`ThreadInfo::tid`).
    Tid(u32),
    /// A glob (`*`, `?`) matched against the thread name or its `name-tid` label.
    Name(String),
}

impl FromStr for ThreadSel {
    type Err = std::convert::Infallible;
    /// All digits is a tid; anything else is a name glob.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.parse::<u32>() {
            Ok(tid) => ThreadSel::Tid(tid),
            Err(_) => ThreadSel::Name(s.to_string()),
        })
    }
}

/// Which threads (by index into `meta.threads`) pass `sels`; empty `sels` means all.
pub(crate) fn thread_mask(meta: &TraceMeta, sels: &[ThreadSel]) -> Vec<bool> {
    meta.threads
        .iter()
        .enumerate()
        .map(|(i, t)| {
            sels.is_empty()
                || sels.iter().any(|s| match s {
                    ThreadSel::Tid(tid) => t.tid == *tid,
                    ThreadSel::Name(glob) => {
                        let m = wildmatch::WildMatch::new(glob);
                        m.matches(&t.name) || m.matches(&meta.thread_label(i as u32))
                    }
                })
        })
        .collect()
}

/// Whether thread `t` passes the mask; threads the metadata does not list pass
/// only when there is no filter (so a damaged index never hides data silently).
pub(crate) fn shown(mask: &[bool], filtered: bool, t: u32) -> bool {
    mask.get(t as usize).copied().unwrap_or(!filtered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgtrace_trace::ThreadInfo;

    #[test]
    fn thread_selectors() {
        let mut meta = TraceMeta::default();
        for (tid, name) in [(10, "main"), (11, "worker-1"), (12, "worker-2")] {
            meta.threads.push(ThreadInfo {
                tid,
                name: name.into(),
                ..Default::default()
            });
        }
        let sel = |s: &[&str]| {
            thread_mask(
                &meta,
                &s.iter().map(|s| s.parse().unwrap()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(sel(&[]), [true, true, true]);
        assert_eq!(sel(&["11"]), [false, true, false]);
        assert_eq!(sel(&["main"]), [true, false, false]);
        assert_eq!(sel(&["worker-*"]), [false, true, true]);
        assert_eq!(sel(&["worker-2-12", "10"]), [true, false, true]);
        assert_eq!(sel(&["nope"]), [false, false, false]);
    }
}
