//! `/proc/self/maps`: executable mappings (for symbolizing later and for the
//! handler's "is this a return address" test) and stack-like mappings (to
//! bound the handler's stack reads on threads registered from outside).

use crate::Mapping;

/// One parsed line of `/proc/self/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLine {
    /// Start address of the mapping.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Permissions as the kernel prints them: `r-xp` and so on.
    pub perms: String,
    /// Offset in the file of the byte mapped at `start`.
    pub offset: u64,
    /// The mapped file's path, `[stack]`, `[vdso]` and the like, or empty for
    /// an anonymous mapping.
    pub path: String,
}

/// Parses the text of a maps file; malformed lines are skipped.
pub fn parse(text: &str) -> Vec<MapLine> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (range, perms, offset) = (it.next()?, it.next()?, it.next()?);
            let _dev = it.next()?;
            let _inode = it.next()?;
            let path = it.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            Some(MapLine {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_string(),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// This process's mappings; empty where `/proc/self/maps` cannot be read
/// (not Linux, or no `/proc`).
pub fn read_self() -> Vec<MapLine> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// Executable, file-backed (or vdso) mappings, as stored in a trace.
pub fn executable(lines: &[MapLine]) -> Vec<Mapping> {
    lines
        .iter()
        .filter(|m| m.perms.starts_with("r-x") || m.perms.starts_with("rwx"))
        .filter(|m| !m.path.is_empty())
        .map(|m| Mapping {
            start: m.start,
            end: m.end,
            offset: m.offset,
            path: m.path.clone(),
            build_id: crate::buildid::of_path(&m.path),
        })
        .collect()
}

/// Sorted `[start, end)` of executable mappings (the handler's text test).
pub fn text_ranges(lines: &[MapLine]) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = lines
        .iter()
        .filter(|m| m.perms.as_bytes().get(2) == Some(&b'x'))
        .map(|m| (m.start, m.end))
        .collect();
    v.sort();
    v
}

/// Sorted ranges that can hold a thread stack: private writable mappings
/// without a file (thread stacks) and `[stack]`.
pub fn stack_ranges(lines: &[MapLine]) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = lines
        .iter()
        .filter(|m| m.perms.starts_with("rw") && (m.path.is_empty() || m.path == "[stack]"))
        .map(|m| (m.start, m.end))
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines_and_classifies_them() {
        let t = "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/prog\n\
                 55d0c0001000-55d0c0005000 r-xp 00001000 08:01 123 /usr/bin/prog\n\
                 7f0000000000-7f0000800000 rw-p 00000000 00:00 0 \n\
                 7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n\
                 7ffd000ff000-7ffd00101000 r-xp 00000000 00:00 0                          [vdso]\n\
                 garbage\n";
        let m = parse(t);
        assert_eq!(m.len(), 5);
        let exe = executable(&m);
        assert_eq!(exe.len(), 2);
        assert_eq!(
            (exe[0].start, exe[0].offset, exe[0].path.as_str()),
            (0x55d0c0001000, 0x1000, "/usr/bin/prog")
        );
        assert_eq!(
            text_ranges(&m),
            vec![
                (0x55d0c0001000, 0x55d0c0005000),
                (0x7ffd000ff000, 0x7ffd00101000)
            ]
        );
        assert_eq!(
            stack_ranges(&m),
            vec![
                (0x7f0000000000, 0x7f0000800000),
                (0x7ffd00000000, 0x7ffd00021000)
            ]
        );
        assert!(!read_self().is_empty());
    }
}
