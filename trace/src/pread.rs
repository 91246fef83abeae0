//! Reads at an offset without moving a shared cursor: `pread` on Unix,
//! `ReadFile` with an offset on Windows. Files here are read from several
//! threads at once (a view's workers rebuild threads from one `File`), so a
//! seek followed by a read would race.

use std::fs::File;
use std::io;

/// Fills `buf` from `file` at byte offset `at`; `UnexpectedEof` if the file
/// ends first.
pub fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
    }
    #[cfg(windows)]
    {
        // `seek_read` may return fewer bytes than asked: loop as
        // `read_exact_at` does. It moves the file's cursor, which no reader
        // of a shared file relies on.
        use std::os::windows::fs::FileExt;
        let (mut buf, mut at) = (buf, at);
        while !buf.is_empty() {
            match file.seek_read(buf, at) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    at += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = (file, buf, at);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "positional reads are not supported on this system",
        ))
    }
}

/// Reads into `buf` from `file` at byte offset `at`, as `read` does: the
/// number of bytes read, 0 at the end of the file.
pub fn read_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, at)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, at)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = (file, buf, at);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "positional reads are not supported on this system",
        ))
    }
}

/// A [`Read`](io::Read) over a shared file from an offset on, with
/// positional reads: several of them read one file at once, each at its own
/// place.
pub struct ReadAt<'f> {
    pub file: &'f File,
    pub at: u64,
}

impl io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = read_at(self.file, buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}
