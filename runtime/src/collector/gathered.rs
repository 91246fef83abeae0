//! What the collector keeps: each thread's calls encoded as raw chunks, in
//! memory or appended to the session's output file as they arrive (with the
//! off-CPU time closed meanwhile), and the trace head both say about
//! themselves.

pub(super) use super::output::Output;
use crate::buffer::{Batch, RawCall, Storage};
use crate::config::Config;
use fgtrace_trace::build;
use fgtrace_trace::clock::Calibration;
use fgtrace_trace::encoding::ChunkEncoder;
use fgtrace_trace::file::RecordingWriter;
use fgtrace_trace::recorded::{RawChunk, RawEncoder, RawSample, SiteMap};
use fgtrace_trace::{Event, RecordMode, Sample, ThreadInfo, TraceMeta};
#[cfg(target_os = "linux")]
use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::time::Duration;

/// What the collector keeps: each thread's calls encoded as raw chunks, one
/// per batch, as they arrive (or appended to the output file).
pub(super) struct Gathered {
    pub(super) origin: u64,
    pub(super) sites: SiteMap,
    pub(super) threads: Vec<Gathering>,
    pub(super) out: Option<Output>,
    /// Automatic exclusion of tiny functions (`Config::auto_exclude`).
    pub(super) auto: Option<super::auto::AutoExclude>,
    /// Off-CPU time going to the file while recording.
    #[cfg(target_os = "linux")]
    pub(super) off_cpu: Option<OffCpuOut>,
}

/// The collector's side of off-CPU time in a file: every few ms
/// the intervals the recorder closed since are written in off-CPU
/// sections, so a process killed while recording keeps them.
#[cfg(target_os = "linux")]
pub(super) struct OffCpuOut {
    pub(super) rec: Arc<crate::offcpu::Recorder>,
    pub(super) cal: Calibration,
    /// Per thread index: the end of its last interval written.
    pub(super) written_end: Vec<u64>,
    pub(super) last: std::time::Instant,
}

/// How often off-CPU sections are written (a killed process loses this
/// much, plus the reader's 5 ms, of its off-CPU time).
#[cfg(target_os = "linux")]
const OFF_CPU_EVERY: Duration = Duration::from_millis(10);

#[derive(Default)]
pub(super) struct Gathering {
    pub(super) enc: RawEncoder,
    pub(super) raw: Vec<RawChunk>,
    /// Batches received (a dump waits for those handed before it).
    pub(super) batches: u64,
}

impl Gathered {
    pub(super) fn new(origin: u64, out: Option<Output>) -> Gathered {
        Gathered {
            origin,
            // SAFETY: the collector encodes only the batches of this
            // process's probes.
            sites: SiteMap::with_text(unsafe { build::registered_text() }),
            threads: Vec::new(),
            out,
            auto: None,
            #[cfg(target_os = "linux")]
            off_cpu: None,
        }
    }

    /// Announces threads up to index `i` in the file.
    pub(super) fn announce(
        o: &mut Output,
        i: usize,
        who: &dyn Fn(u32) -> (u32, String),
    ) -> std::io::Result<()> {
        while o.threads_written <= i {
            let (tid, name) = who(o.threads_written as u32);
            o.w.thread(o.threads_written as u32, tid, &name)?;
            o.threads_written += 1;
        }
        Ok(())
    }

    /// Writes the off-CPU intervals closed since the last time (every
    /// [`OFF_CPU_EVERY`] at most), announcing their threads first.
    /// `tids()`: the session's threads' tids, by index.
    #[cfg(target_os = "linux")]
    pub(super) fn write_off_cpu(
        &mut self,
        who: &dyn Fn(u32) -> (u32, String),
        tids: &dyn Fn() -> Vec<u32>,
    ) {
        let (Some(o), Some(oc)) = (&mut self.out, &mut self.off_cpu) else {
            return;
        };
        // After a cut the final metadata still carries every thread's
        // off-CPU time.
        if o.error.is_some() || o.budget.cut.is_some() || oc.last.elapsed() < OFF_CPU_EVERY {
            return;
        }
        oc.last = std::time::Instant::now();
        let (rec, cal, written_end) = (&oc.rec, &oc.cal, &mut oc.written_end);
        // Taken under the recorder's lock, written after it (the reader
        // thread and joining threads wait for that lock).
        let mut news = Vec::new();
        let tids = tids();
        rec.publish(|tid, ivs, lost| {
            // A thread not registered yet (or gone from the list): next time.
            let Some(i) = tids.iter().position(|&t| t == tid) else {
                return false;
            };
            if written_end.len() <= i {
                written_end.resize(i + 1, 0);
            }
            let ivs = crate::offcpu::to_trace_after(cal, written_end[i], u64::MAX, ivs);
            if let Some(l) = ivs.last() {
                written_end[i] = l.end_ns();
            }
            news.push((i, lost, ivs));
            true
        });
        let mut r = Ok(());
        let before = o.w.written;
        for (i, lost, ivs) in news {
            // Their time is in the final metadata all the same.
            if !o.room_for(64 + ivs.len() as u64 * 12) {
                break;
            }
            r = r
                .and_then(|_| Self::announce(o, i, who))
                .and_then(|_| o.w.off_cpu(i as u32, lost, &ivs));
            o.dirty = true;
        }
        // The final metadata repeats them in JSON, a few times larger.
        o.budget.repeated += (o.w.written - before) * 2;
        o.check(r);
    }

    /// Encodes one thread's records; `who` names thread `i` (tid, name) for
    /// the file.
    pub(super) fn add_records(
        &mut self,
        thread: u32,
        recs: &[RawCall],
        who: &dyn Fn(u32) -> (u32, String),
    ) {
        let i = thread as usize;
        if self.threads.len() <= i {
            // Chunks kept in memory go into arenas; chunks written to the
            // file are encoded in a scratch buffer and dropped.
            let retain = self.out.is_none();
            self.threads.resize_with(i + 1, || {
                let mut g = Gathering::default();
                g.enc.retain = retain;
                g
            });
        }
        if recs.is_empty() {
            return;
        }
        if let Some(a) = &mut self.auto {
            a.observe(thread, recs);
        }
        // Past a cut, calls are counted, not kept.
        if let Some(o) = &mut self.out {
            if o.error.is_none() && o.budget.cut.is_some() {
                o.budget.lose(thread, super::budget::calls_in(recs));
                return;
            }
        }
        let c = self.threads[i].enc.encode(
            thread,
            recs,
            self.origin,
            &mut self.sites,
            &build::registered_site,
        );
        match &mut self.out {
            None => self.threads[i].raw.push(c),
            Some(o) if o.error.is_some() => self.threads[i].raw.push(c),
            Some(o) => {
                let calls = super::budget::calls_in(recs);
                // Sites, strings and the thread's announcement come first.
                let sites = &self.sites;
                let head = |o: &Output| {
                    (sites.sites.len() - o.sites_written) as u64 * 256
                        + (sites.strings.len() - o.strings_written) as u64 * 64
                        + 64
                };
                let mut fits = o.room_for(c.payload.len() as u64 + head(o));
                // A ring starts a new segment, where the current one holds
                // calls (these are not in it yet).
                if !fits && o.budget.ring {
                    let before: Vec<u64> = self
                        .threads
                        .iter()
                        .enumerate()
                        .map(|(t, g)| g.enc.calls.saturating_sub(if t == i { calls } else { 0 }))
                        .collect();
                    let segment: u64 = before
                        .iter()
                        .enumerate()
                        .map(|(t, &n)| n.saturating_sub(o.budget.dropped(t)))
                        .sum();
                    if segment > 0 && o.rotate(before, who) {
                        fits = o.room_for(c.payload.len() as u64 + head(o));
                    }
                }
                if !fits {
                    let at = recs.first().map_or(self.origin, |r| {
                        fgtrace_trace::recorded::full_ticks(r.start_low(), self.origin)
                    });
                    o.cut(fgtrace_trace::CutReason::Budget, at);
                    o.budget.lose_encoded(thread, calls);
                    return;
                }
                let before = o.w.written;
                let mut r = Ok(());
                while r.is_ok() && o.sites_written < self.sites.sites.len() {
                    r =
                        o.w.site(o.sites_written as u32, &self.sites.sites[o.sites_written]);
                    o.sites_written += 1;
                }
                while r.is_ok() && o.strings_written < self.sites.strings.len() {
                    r = o.w.string(
                        o.strings_written as u32,
                        &self.sites.strings[o.strings_written],
                    );
                    o.strings_written += 1;
                }
                let r = r.and_then(|_| Self::announce(o, i, who));
                o.budget.repeated += o.w.written - before;
                let r = r.and_then(|_| o.w.raw(&c));
                let failed = r.is_err();
                o.check(r);
                o.dirty = true;
                if !failed {
                    o.wrote_calls(thread, calls);
                } else if o.budget.cut.is_some() {
                    // The file system is full: the file ends at its last
                    // mark, and these calls are lost with those since.
                    o.budget.lose_encoded(thread, calls);
                } else {
                    // Kept in memory instead; `stop` reports the error.
                    self.threads[i].raw.push(c);
                }
            }
        }
    }

    pub(super) fn add(&mut self, b: Batch, who: &dyn Fn(u32) -> (u32, String)) -> Storage {
        // SAFETY: the first `len` slots of a handed-off batch were written.
        let recs = unsafe {
            std::slice::from_raw_parts(
                b.storage.as_ptr() as *const RawCall,
                b.len.min(b.storage.len()),
            )
        };
        self.add_records(b.thread, recs, who);
        if let Some(t) = self.threads.get_mut(b.thread as usize) {
            t.batches += 1;
        }
        b.storage
    }

    pub(super) fn batches(&self, thread: u32) -> u64 {
        self.threads.get(thread as usize).map_or(0, |t| t.batches)
    }

    /// Flushes the file while the collector idles, so a crash loses little.
    pub(super) fn idle(&mut self) {
        if let Some(o) = &mut self.out {
            if o.dirty && o.error.is_none() {
                o.mark();
            }
        }
    }
}

/// What every trace of this session says about itself, before threads and sites.
pub(super) fn base_meta(cal: &Calibration, end_ticks: u64, config: &Config) -> TraceMeta {
    meta_of(
        cal,
        end_ticks,
        config.mode,
        config.describe(),
        config.counters.iter().map(|c| c.name()),
    )
}

pub(super) fn meta_of<'a>(
    cal: &Calibration,
    end_ticks: u64,
    mode: RecordMode,
    filters: String,
    counters: impl Iterator<Item = &'a str>,
) -> TraceMeta {
    // Per-call figures beside each call (extension records): allocations
    // when the counting allocator is installed, then the session's counter.
    crate::process::base(
        *cal,
        end_ticks,
        mode,
        filters,
        counters.map(String::from).collect(),
    )
    .meta(fgtrace_core::alloc::installed())
}

/// Creates the output file and writes its provisional header (with
/// `off_cpu`: whether off-CPU time is recorded, or why not).
pub(super) fn open_output(
    path: &std::path::Path,
    cal: &Calibration,
    config: &Config,
    off_cpu: Option<fgtrace_trace::OffCpu>,
) -> Result<Output, String> {
    let f = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    // A ring's older segment left beside an earlier recording of the same
    // name goes with the file this one replaces: views would read it as
    // this recording's.
    let _ = std::fs::remove_file(super::pool::beside(path, ".prev"));
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let mut limit = config.max_size_for(dir);
    let ring = config.on_full == crate::config::OnFull::Ring;
    let meta = TraceMeta {
        off_cpu,
        ring: match limit {
            Some(l) if ring => Some(l),
            _ => None,
        },
        ..base_meta(cal, cal.origin.ticks, config)
    };
    // The header reaches the file at once: a process killed before its
    // first batch leaves a file that reads (no calls, and what the header
    // says, such as why off-CPU time is missing).
    let w = RecordingWriter::new(std::io::BufWriter::with_capacity(1 << 16, f), &meta)
        .and_then(|mut w| w.flush().map(|()| w))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let start = w.mark();
    // Recordings into one directory share its budget.
    let pool = match limit {
        Some(total) if config.shared_budget => super::pool::Pool::join(path, total).ok(),
        _ => None,
    };
    if let Some(p) = &pool {
        limit = Some(p.claimed);
    }
    let mut o = Output {
        w,
        path: path.to_path_buf(),
        sites_written: 0,
        strings_written: 0,
        threads_written: 0,
        error: None,
        dirty: false,
        budget: super::budget::Budget::new(limit, start),
        header: meta,
    };
    o.budget.ring = ring && limit.is_some();
    o.budget.pool = pool;
    if o.budget.pool.is_some() {
        // The first grant: room for the header, the completion and more.
        o.room_for(start.written + (1 << 20));
    }
    o.mark();
    Ok(o)
}

impl Gathered {
    /// At stop, once every record is in: the file flushed whole (a full
    /// file system found there cuts it back and counts the calls since as
    /// lost, before the threads' losses are taken).
    pub(super) fn flush_output(&mut self) {
        if let Some(o) = &mut self.out {
            if o.error.is_none() {
                o.mark();
            }
        }
    }

    /// At stop, with every thread's figures in `infos` (by index): the
    /// threads the file has room to list, and, where calls stopped being
    /// kept, one loss marker per listed thread that lost some.
    ///
    /// A budget that has no room for every thread's entry (hundreds of
    /// test threads begun after the cut, say) lists those it has room for
    /// and folds the rest into one entry, `N threads not listed`, which
    /// carries their losses: the file never passes its budget, and no loss
    /// goes uncounted. Their samples are not kept (counted as lost).
    /// `samples` and `overwritten` follow `infos`.
    pub(super) fn close_output(
        &mut self,
        infos: &mut Vec<ThreadInfo>,
        samples: &mut Vec<Vec<RawSample>>,
        overwritten: &mut Vec<u64>,
        end_ticks: u64,
    ) {
        let Gathered {
            out: Some(o),
            threads,
            sites,
            origin,
            ..
        } = self
        else {
            return;
        };
        if o.error.is_some() {
            return;
        }
        if o.budget.limit.is_some() && infos.len() > o.threads_written {
            let mut listed = o.threads_written;
            let mut room = 0;
            while listed < infos.len() {
                room += super::budget::thread_room(&infos[listed].name);
                if !o.room_for(room) {
                    break;
                }
                listed += 1;
            }
            if listed < infos.len() {
                fold_threads(o, listed, infos, samples, overwritten, end_ticks);
            }
        }
        if o.budget.cut.is_none() {
            return;
        }
        let who = |i: u32| {
            infos
                .get(i as usize)
                .map(|t| (t.tid, t.name.clone()))
                .unwrap_or_default()
        };
        if let Some(last) = o.budget.lost_after.iter().rposition(|&n| n > 0) {
            let r = Self::announce(o, last, &who);
            o.check(r);
        }
        if o.error.is_none() {
            if threads.len() < infos.len() {
                threads.resize_with(infos.len(), Default::default);
            }
            let encoders = threads.iter_mut().map(|t| &mut t.enc).collect();
            o.write_loss_markers(encoders, *origin, sites);
        }
        o.mark();
    }
}

/// Folds the threads from index `listed` on into one entry at `listed`,
/// which stands for them all: their losses (after the cut, overwritten,
/// dropped), overruns and samples (not kept: the file has no room to say
/// whose they were) are its own.
fn fold_threads(
    o: &mut Output,
    listed: usize,
    infos: &mut Vec<ThreadInfo>,
    samples: &mut Vec<Vec<RawSample>>,
    overwritten: &mut Vec<u64>,
    end_ticks: u64,
) {
    let folded = infos.split_off(listed);
    let mut all = ThreadInfo {
        tid: 0,
        name: format!(
            "{} threads not listed (no room in the size budget)",
            folded.len()
        ),
        ..ThreadInfo::default()
    };
    for t in &folded {
        all.calls += t.calls;
        all.lost += t.lost;
        all.overruns += t.overruns;
        all.samples_lost += t.samples + t.samples_lost;
    }
    let unkept: u64 = folded.iter().map(|t| t.samples).sum();
    if unkept > 0 {
        o.cut(fgtrace_trace::CutReason::Budget, end_ticks);
        o.budget.samples_after += unkept;
    }
    infos.push(all);
    samples.truncate(listed);
    samples.push(Vec::new());
    let over: u64 = overwritten.iter().skip(listed).sum();
    overwritten.truncate(listed);
    overwritten.push(over);
    let after: u64 = o.budget.lost_after.iter().skip(listed).sum();
    if o.budget.lost_after.len() > listed {
        o.budget.lost_after.truncate(listed);
        o.budget.lost_after.push(after);
    }
}

/// Writes what the file still lacks at stop: sites and threads not yet
/// announced, the chunks kept in memory, the samples (those the budget
/// has room for; the others are counted in `meta` as lost).
pub(super) fn finish_output(
    o: &mut Output,
    meta: &mut TraceMeta,
    threads: &[Gathering],
    samples: Vec<Vec<RawSample>>,
    overwritten: &[u64],
    end_ticks: u64,
) {
    if o.error.is_some() {
        return;
    }
    let mark = o.w.mark();
    let mut r = Ok(());
    while r.is_ok() && o.sites_written < meta.sites.len() {
        r =
            o.w.site(o.sites_written as u32, &meta.sites[o.sites_written]);
        o.sites_written += 1;
    }
    while r.is_ok() && o.strings_written < meta.strings.len() {
        r =
            o.w.string(o.strings_written as u32, &meta.strings[o.strings_written]);
        o.strings_written += 1;
    }
    while r.is_ok() && o.threads_written < meta.threads.len() {
        let t = &meta.threads[o.threads_written];
        r = o.w.thread(o.threads_written as u32, t.tid, &t.name);
        o.threads_written += 1;
    }
    for th in threads {
        for c in &th.raw {
            r = r.and_then(|_| o.w.raw(c));
        }
    }
    for (t, s) in samples.into_iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let mut enc = ChunkEncoder::new(t as u32);
        for (ts, shadow_depth, cut, frames) in s {
            enc.push(&Event::Sample(Sample {
                thread: t as u32,
                ts_ns: ts,
                shadow_depth,
                cut,
                frames,
            }));
        }
        for c in enc.finish() {
            if o.budget.cut.is_some() || !o.room_for(c.payload.len() as u64 + 32) {
                o.cut(fgtrace_trace::CutReason::Budget, end_ticks);
                if let Some(th) = meta.threads.get_mut(t) {
                    th.samples = th.samples.saturating_sub(c.count as u64);
                    th.samples_lost = th.samples_lost.saturating_add(c.count as u64);
                }
                o.budget.samples_after += c.count as u64;
                continue;
            }
            r = r.and_then(|_| o.w.samples(&c));
        }
    }
    for (t, &n) in overwritten.iter().enumerate() {
        if n > 0 {
            r = r.and_then(|_| o.w.overwritten(t as u32, n));
        }
    }
    o.check(r);
    // A full file system cut the file back to before these sections: the
    // final metadata would not match what the file holds, so it is left
    // out (the file reads up to its last complete section).
    if o.error.is_none() && o.w.written < mark.written {
        o.error = Some(format!(
            "the file system filled up while {} was being completed",
            o.path.display()
        ));
    }
}
