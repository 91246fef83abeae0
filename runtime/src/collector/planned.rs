//! The counts of the functions a compile-time plan made count-only
//! (`fgtrace_core::counted`), read into the trace when a session stops or is
//! dumped.

use fgtrace_core::counted;
use fgtrace_core::record::MAX_SITES;
use fgtrace_trace::build;
use fgtrace_trace::recorded::SiteMap;
use fgtrace_trace::PlannedCount;

/// The functions a compile-time plan made count-only that counted while the
/// session recorded, with their calls, on the trace's sites. `take`: the
/// session stops, and the counters start again from zero (a dump of a
/// running session leaves them).
pub(super) fn planned_counts(sites: &mut SiteMap, take: bool) -> Vec<PlannedCount> {
    let mut out: Vec<PlannedCount> = counted::all()
        .filter_map(|c| {
            let calls = if take { c.take() } else { c.calls() };
            if calls == 0 {
                return None;
            }
            let id = c.site.id();
            let site = if id < MAX_SITES {
                sites.map(id, &|_| Some(build::site_info(c.site)))
            } else {
                // More sites than records can name: this one needs no id.
                sites.sites.push(build::site_info(c.site));
                (sites.sites.len() - 1) as u32
            };
            Some(PlannedCount { site, calls })
        })
        .collect();
    out.sort_by_key(|c| c.site);
    out
}
