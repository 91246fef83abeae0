//! The size budget of a recording to a file (`Config::max_size`,
//! `FGTRACE_MAX_SIZE`, `fgtrace record --max-size`): parsing sizes, and the
//! default a recording gets when none is given.

use std::path::Path;

/// What a recording to a file does when its size budget is reached
/// (`Config::on_full`, `FGTRACE_ON_FULL`, `fgtrace record --on-full`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFull {
    /// The file is completed at the limit and keeps the run's start; the
    /// calls after are counted as lost (the default).
    #[default]
    Stop,
    /// The file keeps the run's end, as the flight recorder does in
    /// memory: it is written in segments of half the budget, and when one
    /// is full it moves to `FILE.prev` (replacing the one before) and a new
    /// one starts at `FILE`. The calls before `FILE`'s segment are counted
    /// in it as overwritten.
    Ring,
}

impl OnFull {
    /// Parses `stop` or `ring`.
    pub fn parse(s: &str) -> Result<OnFull, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "stop" => Ok(OnFull::Stop),
            "ring" => Ok(OnFull::Ring),
            _ => Err(format!(
                "`{s}` is not what to do at the size budget (stop or ring)"
            )),
        }
    }
}

/// The largest default budget: 4 GB.
pub const DEFAULT_MAX_SIZE_CAP: u64 = 4_000_000_000;
/// The default budget's share of the free space where the file is written.
pub const DEFAULT_FREE_SHARE: u64 = 4;

/// Parses a size: `200MB`, `1.5GB`, `512KiB`, `4096` (bytes); decimal units
/// (kB, MB, GB, TB: powers of 1000) and binary ones (KiB, MiB, GiB, TiB).
/// `unlimited` (or `none`, `off`) is `u64::MAX`: no budget.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "unlimited" | "none" | "off"
    ) {
        return Ok(u64::MAX);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{s}` is not a size (try 200MB, 1.5GB, 512MiB or unlimited)");
    let v: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "`{s}`: unknown unit `{u}` (use kB, MB, GB, KiB, MiB or GiB)"
            ))
        }
    };
    let n = v * mult;
    if !(n.is_finite() && n >= 1.0 && n < u64::MAX as f64) {
        return Err(format!(
            "`{s}`: a size budget is at least one byte (or `unlimited`)"
        ));
    }
    Ok(n as u64)
}

/// The budget a recording to a file in `dir` gets when none is given: a
/// quarter of the space free there now, at most [`DEFAULT_MAX_SIZE_CAP`];
/// with the free space it was taken from. `None` where the free space
/// cannot be read (then a recording gets the cap).
pub fn default_max_size(dir: &Path) -> Option<(u64, u64)> {
    let free = free_space(dir)?;
    Some(((free / DEFAULT_FREE_SHARE).min(DEFAULT_MAX_SIZE_CAP), free))
}

/// Bytes an unprivileged process may still write on the file system of `dir`.
#[cfg(unix)]
pub fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct from a NUL-terminated path.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
}

/// Not read on this system: `None` (a recording then gets the cap).
#[cfg(not(unix))]
pub fn free_space(_dir: &Path) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_decimal_and_binary_units_and_bad_ones_are_named() {
        assert_eq!(parse_size("200MB"), Ok(200_000_000));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size(" 512KiB "), Ok(512 * 1024));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("unlimited"), Ok(u64::MAX));
        assert!(parse_size("12 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("MB").unwrap_err().contains("not a size"));
        assert!(parse_size("0").unwrap_err().contains("at least one byte"));
    }

    #[test]
    fn the_default_is_a_quarter_of_the_free_space_capped() {
        let (budget, free) = default_max_size(&std::env::temp_dir()).expect("statvfs");
        assert!(free > 0);
        assert_eq!(budget, (free / 4).min(DEFAULT_MAX_SIZE_CAP));
    }
}
