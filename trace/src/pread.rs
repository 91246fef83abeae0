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
