//! GNU build ids read straight from an ELF file, so a trace records which
//! build of each mapped binary it sampled (a symbolizer can then refuse a
//! rebuilt one). Hand-parsed, a few hundred bytes read per file: the runtime
//! must not depend on `object`, and this runs at every session stop.

use std::fs::File;
use std::path::Path;

const PT_NOTE: u32 = 4;
const SHT_NOTE: u32 = 7;
const NT_GNU_BUILD_ID: u32 = 3;
/// Bounds on what a damaged or hostile header can make us read.
const MAX_HEADERS: usize = 4096;
const MAX_NOTES: u64 = 1 << 16;

/// The GNU build id of the ELF file at `path`, lowercase hex; `None` for
/// pseudo-paths (`[vdso]`), unreadable or non-ELF files, and files without one.
pub fn of_path(path: &str) -> Option<String> {
    // Pseudo-paths (`[vdso]`, `[heap]`) are not absolute.
    if !Path::new(path).is_absolute() {
        return None;
    }
    let f = File::open(Path::new(path)).ok()?;
    of_file(&f)
}

/// Byte order and word size of one ELF file.
#[derive(Clone, Copy)]
struct Elf {
    is64: bool,
    le: bool,
}

impl Elf {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let a = [b[at], b[at + 1]];
        if self.le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let a = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }
    fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        if self.le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
    /// An address-sized field (`Elf64_Off` / `Elf32_Off`).
    fn word(self, b: &[u8], at64: usize, at32: usize) -> u64 {
        if self.is64 {
            self.u64(b, at64)
        } else {
            u64::from(self.u32(b, at32))
        }
    }
}

fn read_at(f: &File, off: u64, len: usize) -> Option<Vec<u8>> {
    let mut v = vec![0u8; len];
    crate::pread::read_exact_at(f, &mut v, off).ok()?;
    Some(v)
}

/// Looks in the `PT_NOTE` segments first (always there in linked binaries),
/// then in `SHT_NOTE` sections (objects and oddly linked files).
fn of_file(f: &File) -> Option<String> {
    let h = read_at(f, 0, 64).or_else(|| read_at(f, 0, 52))?;
    if &h[..4] != b"\x7fELF" {
        return None;
    }
    let elf = match (h[4], h[5]) {
        (1, 1) => Elf {
            is64: false,
            le: true,
        },
        (1, 2) => Elf {
            is64: false,
            le: false,
        },
        (2, 1) => Elf {
            is64: true,
            le: true,
        },
        (2, 2) => Elf {
            is64: true,
            le: false,
        },
        _ => return None,
    };
    if elf.is64 && h.len() < 64 {
        return None;
    }
    let (phoff, shoff) = (elf.word(&h, 0x20, 0x1c), elf.word(&h, 0x28, 0x20));
    let (phentsize, phnum) = if elf.is64 {
        (elf.u16(&h, 0x36), elf.u16(&h, 0x38))
    } else {
        (elf.u16(&h, 0x2a), elf.u16(&h, 0x2c))
    };
    let (shentsize, shnum) = if elf.is64 {
        (elf.u16(&h, 0x3a), elf.u16(&h, 0x3c))
    } else {
        (elf.u16(&h, 0x2e), elf.u16(&h, 0x30))
    };

    // (offset, size, alignment) of every note area.
    let mut areas = Vec::new();
    let ph_min = if elf.is64 { 56 } else { 32 };
    if phoff != 0 && usize::from(phentsize) >= ph_min && usize::from(phnum) <= MAX_HEADERS {
        if let Some(t) = read_at(f, phoff, usize::from(phentsize) * usize::from(phnum)) {
            for p in t.chunks_exact(usize::from(phentsize)) {
                if elf.u32(p, 0) == PT_NOTE {
                    let (off, size) = (elf.word(p, 8, 4), elf.word(p, 32, 16));
                    let align = elf.word(p, 48, 28);
                    areas.push((off, size, align));
                }
            }
        }
    }
    let sh_min = if elf.is64 { 64 } else { 40 };
    if shoff != 0 && usize::from(shentsize) >= sh_min && usize::from(shnum) <= MAX_HEADERS {
        if let Some(t) = read_at(f, shoff, usize::from(shentsize) * usize::from(shnum)) {
            for s in t.chunks_exact(usize::from(shentsize)) {
                if elf.u32(s, 4) == SHT_NOTE {
                    let (off, size) = (elf.word(s, 24, 16), elf.word(s, 32, 20));
                    let align = elf.word(s, 48, 32);
                    areas.push((off, size, align));
                }
            }
        }
    }
    areas.into_iter().find_map(|(off, size, align)| {
        if size > MAX_NOTES {
            return None;
        }
        let notes = read_at(f, off, size as usize)?;
        find_build_id(elf, &notes, if align == 8 { 8 } else { 4 })
    })
}

/// Walks one area of notes (`namesz descsz type name desc`, name and desc
/// padded to `align`) for `NT_GNU_BUILD_ID` owned by "GNU".
fn find_build_id(elf: Elf, notes: &[u8], align: usize) -> Option<String> {
    let pad = |n: usize| n.checked_add(align - 1).map(|n| n & !(align - 1));
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = elf.u32(notes, at) as usize;
        let descsz = elf.u32(notes, at + 4) as usize;
        let kind = elf.u32(notes, at + 8);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let end = desc_at.checked_add(pad(descsz)?)?;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc.iter().map(|b| format!("{b:02x}")).collect());
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A minimal ELF: header, one `PT_NOTE` program header, then the notes.
    fn elf(is64: bool, le: bool, notes: &[u8]) -> Vec<u8> {
        let (ehsize, phsize) = if is64 { (64usize, 56usize) } else { (52, 32) };
        let mut b = vec![0u8; ehsize + phsize];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = if is64 { 2 } else { 1 };
        b[5] = if le { 1 } else { 2 };
        let put = |b: &mut Vec<u8>, at: usize, v: u64, n: usize| {
            let bytes = if le { v.to_le_bytes() } else { v.to_be_bytes() };
            let s = if le { &bytes[..n] } else { &bytes[8 - n..] };
            b[at..at + n].copy_from_slice(s);
        };
        let notes_at = (ehsize + phsize) as u64;
        if is64 {
            put(&mut b, 0x20, ehsize as u64, 8);
            put(&mut b, 0x36, phsize as u64, 2);
            put(&mut b, 0x38, 1, 2);
            put(&mut b, ehsize, u64::from(PT_NOTE), 4);
            put(&mut b, ehsize + 8, notes_at, 8);
            put(&mut b, ehsize + 32, notes.len() as u64, 8);
            put(&mut b, ehsize + 48, 4, 8);
        } else {
            put(&mut b, 0x1c, ehsize as u64, 4);
            put(&mut b, 0x2a, phsize as u64, 2);
            put(&mut b, 0x2c, 1, 2);
            put(&mut b, ehsize, u64::from(PT_NOTE), 4);
            put(&mut b, ehsize + 4, notes_at, 4);
            put(&mut b, ehsize + 16, notes.len() as u64, 4);
            put(&mut b, ehsize + 28, 4, 4);
        }
        b.extend_from_slice(notes);
        b
    }

    fn note(le: bool, name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let w = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut n = Vec::new();
        n.extend_from_slice(&w(name.len() as u32));
        n.extend_from_slice(&w(desc.len() as u32));
        n.extend_from_slice(&w(kind));
        n.extend_from_slice(name);
        n.resize(n.len().next_multiple_of(4), 0);
        n.extend_from_slice(desc);
        n.resize(n.len().next_multiple_of(4), 0);
        n
    }

    fn id_of(bytes: &[u8]) -> Option<String> {
        let dir = std::env::temp_dir().join(format!("fgtrace-buildid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}", crc32fast::hash(bytes)));
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let id = of_path(path.to_str().unwrap());
        let _ = std::fs::remove_file(&path);
        id
    }

    #[test]
    fn finds_the_gnu_build_id_after_other_notes_in_all_four_layouts() {
        for is64 in [true, false] {
            for le in [true, false] {
                let mut notes = note(le, b"GNU\0", 5, &[1, 2, 3, 4, 5, 6, 7, 8]); // a property note
                notes.extend(note(le, b"Go\0\0", NT_GNU_BUILD_ID, b"not this"));
                notes.extend(note(
                    le,
                    b"GNU\0",
                    NT_GNU_BUILD_ID,
                    &[0xde, 0xad, 0xbe, 0xef, 0x01],
                ));
                assert_eq!(
                    id_of(&elf(is64, le, &notes)).as_deref(),
                    Some("deadbeef01"),
                    "64-bit {is64}, LE {le}"
                );
            }
        }
    }

    #[test]
    fn damaged_or_foreign_files_give_none() {
        assert_eq!(of_path("[vdso]"), None);
        assert_eq!(of_path("/nonexistent/fgtrace/file"), None);
        assert_eq!(id_of(b"#!/bin/sh\necho not an elf\n"), None);
        assert_eq!(id_of(b"\x7fELF"), None);
        // A note whose sizes run past the end of the segment.
        let mut bad = note(true, b"GNU\0", NT_GNU_BUILD_ID, &[1, 2, 3, 4]);
        bad[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert_eq!(id_of(&elf(true, true, &bad)), None);
        let none = note(true, b"GNU\0", 1, &[0, 0, 0, 0]); // NT_GNU_ABI_TAG
        assert_eq!(id_of(&elf(true, true, &none)), None);
    }
}
