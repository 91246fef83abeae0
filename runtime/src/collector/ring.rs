//! `ring` at the size budget (`Config::on_full`): the file is written in
//! segments of half the budget. When the next chunk would not fit the
//! segment, the segment (flushed whole, so it reads as a file cut after its
//! last section) moves to `FILE.prev`, replacing the one before, and a new
//! segment starts at `FILE` with the header, the sites, strings and threads
//! again, and per thread the calls before it counted as overwritten, as the
//! flight recorder counts the calls its ring lost. `FILE` is always one
//! complete trace of the run's last calls, readable however the process
//! ends; the two files never take more than the budget.

use super::output::Output;
use super::pool::beside;
use fgtrace_trace::file::RecordingWriter;

impl Output {
    /// Starts a new segment at the file's path, the current one moving to
    /// `FILE.prev`. `before`: each thread's calls before the new segment.
    /// `false` where it cannot (then the budget cuts the file as `stop`).
    pub(super) fn rotate(&mut self, before: Vec<u64>, who: &dyn Fn(u32) -> (u32, String)) -> bool {
        if self.error.is_some() || self.budget.cut.is_some() {
            return false;
        }
        self.mark();
        if self.error.is_some() {
            return false;
        }
        let next = beside(&self.path, ".next");
        let prev = beside(&self.path, ".prev");
        let w = std::fs::File::create(&next).and_then(|f| {
            let mut w =
                RecordingWriter::new(std::io::BufWriter::with_capacity(1 << 16, f), &self.header)?;
            w.flush()?;
            Ok(w)
        });
        let Ok(w) = w else {
            let _ = std::fs::remove_file(&next);
            return false;
        };
        // The ending segment gives back the room reserved past its end.
        super::budget::release(self.w.get_mut().get_ref());
        // Renaming over a file is refused on some systems: the old one goes
        // first.
        let _ = std::fs::remove_file(&prev);
        if std::fs::rename(&self.path, &prev).is_err() {
            let _ = std::fs::remove_file(&next);
            return false;
        }
        if std::fs::rename(&next, &self.path).is_err() {
            let _ = std::fs::rename(&prev, &self.path);
            let _ = std::fs::remove_file(&next);
            return false;
        }
        if self.budget.rotations == 0 {
            eprintln!(
                "fgtrace: {} filled a segment of {}: --on-full ring keeps the run's end; older calls move to {}, then are dropped and counted as overwritten",
                self.path.display(),
                match self.shown_limit() {
                    Some(l) => format!("its size budget of {}", fgtrace_trace::size_text(l)),
                    None => "its size budget".into(),
                },
                prev.display()
            );
        }
        // The old writer was flushed whole at the mark.
        self.w = w;
        self.sites_written = 0;
        self.strings_written = 0;
        self.threads_written = 0;
        self.budget.mark = (self.w.mark(), 0, 0, 0);
        self.budget.pending.clear();
        self.budget.repeated = 0;
        self.budget.rotations += 1;
        let mut r = Ok(());
        if let Some(last) = before.iter().rposition(|&n| n > 0) {
            r = super::gathered::Gathered::announce(self, last, who);
        }
        for (t, &n) in before.iter().enumerate() {
            if n > 0 {
                r = r.and_then(|_| self.w.overwritten(t as u32, n));
            }
        }
        self.budget.ring_dropped = before;
        self.check(r);
        self.dirty = true;
        self.mark();
        self.error.is_none()
    }
}
