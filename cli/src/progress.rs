//! A progress bar on stderr while a trace file is read, by bytes read.
//!
//! Only on a terminal, and only once reading has taken a moment: small
//! traces never flash a bar, piped or redirected stderr never gets escape
//! codes. Bars are cleared when their reader is dropped (the stream ends,
//! fails or is abandoned), so the output that follows starts on a clean line.

use fgtrace_trace::{TraceError, TraceReader};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Reading shorter than this shows nothing.
const DELAY: Duration = Duration::from_millis(400);

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Commands that stream their output to the terminal while reading turn the
/// bar off: it would be drawn between their lines.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// One shared area, so two files read at once (`diff`) get two lines, not
/// two bars overwriting each other.
fn multi() -> &'static MultiProgress {
    static MULTI: OnceLock<MultiProgress> = OnceLock::new();
    MULTI.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// A bar for `len` bytes labelled `what`; hidden until [`CountingReader`] reveals it.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{msg} [{bar:40.cyan/blue}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .expect("valid template")
    .progress_chars("=> ");
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden())
        .with_style(style)
        .with_message(what.to_string())
}

/// A reader that advances a bar by the bytes it reads.
pub struct CountingReader<R> {
    inner: R,
    bar: ProgressBar,
    /// Clear the bar on drop (false when several readers share one bar).
    owns_bar: bool,
    revealed: bool,
}

impl<R> CountingReader<R> {
    pub fn new(inner: R, bar: ProgressBar, owns_bar: bool) -> Self {
        CountingReader {
            inner,
            bar,
            owns_bar,
            revealed: false,
        }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        if !self.revealed && self.bar.is_hidden() && self.bar.elapsed() >= DELAY {
            self.revealed = true;
            if ENABLED.load(Ordering::Relaxed) && io::stderr().is_terminal() {
                multi().add(self.bar.clone());
            }
        }
        Ok(n)
    }
}

impl<R> Drop for CountingReader<R> {
    fn drop(&mut self) {
        if self.owns_bar {
            self.bar.finish_and_clear();
            multi().remove(&self.bar);
        }
    }
}

/// What [`open_with_bar`] returns: a trace reader over a counting file reader.
pub type Reader = TraceReader<io::BufReader<CountingReader<File>>>;

/// Opens a trace file with a bar of its own (`bar: None`) or advancing a
/// shared one (which the caller then finishes); a ring's file with the
/// segment before it, `FILE.prev`, where it is there.
pub fn open_with_bar(path: &Path, bar: Option<&ProgressBar>) -> Result<Reader, TraceError> {
    let f = File::open(path)?;
    let (bar, owns) = match bar {
        Some(b) => (b.clone(), false),
        None => {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let name = path
                .file_name()
                .unwrap_or(path.as_os_str())
                .to_string_lossy();
            (self::bar(len, &format!("reading {name}")), true)
        }
    };
    let again = f.try_clone()?;
    // A ring's file is read with the segment before it (`FILE.prev`).
    let r = TraceReader::with_file_and_before(
        io::BufReader::with_capacity(1 << 16, CountingReader::new(f, bar, owns)),
        again,
        fgtrace_trace::file::segment_before(path).as_deref(),
    )?;
    for w in &r.meta().warnings {
        eprintln!("fgtrace: warning: {}: {w}", path.display());
    }
    Ok(r)
}

/// Length of a file, for a bar over several passes.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Finishes a shared bar (see [`open_with_bar`]).
pub fn finish(bar: &ProgressBar) {
    bar.finish_and_clear();
    multi().remove(bar);
}
