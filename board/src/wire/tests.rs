//! The wire format's tests.

extern crate std;
use super::*;
use std::vec::Vec;

/// A varint written in a u32 or a u64 (a 32-bit hart's two paths) is
/// the same bytes, and reads back.
#[test]
fn varints_in_every_width_read_back() {
    let edges = [
        0u64,
        1,
        127,
        128,
        16_383,
        16_384,
        (1 << 32) - 1,
        1 << 32,
        u64::MAX,
    ];
    for v in edges {
        let mut wide = [0u8; 10];
        // 10 bytes hold any u64's varint.
        let end = leb128!(wide.as_mut_ptr(), v);
        // SAFETY: both in `wide`.
        let n = unsafe { end.offset_from(wide.as_ptr()) } as usize;
        if let Ok(w) = u32::try_from(v) {
            let mut narrow = [0u8; 10];
            let end = leb128!(narrow.as_mut_ptr(), w);
            // SAFETY: both in `narrow`.
            let m = unsafe { end.offset_from(narrow.as_ptr()) } as usize;
            assert_eq!(narrow[..m], wide[..n], "{v}");
        }
        let mut via = [0u8; 10];
        // SAFETY: 10 bytes hold any u64's varint.
        let k = unsafe { varint(via.as_mut_ptr(), v).offset_from(via.as_ptr()) } as usize;
        assert_eq!(via[..k], wide[..n], "{v}");
        assert_eq!(Reader::new(&wide[..n]).varint(), Some(v), "{v}");
    }
}

fn frame(seq: u16, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = std::vec![0u8; HEADER + payload.len() + TRAILER];
    let n = encode(&mut out, seq, kind, 0, payload);
    out.truncate(n);
    out
}

#[test]
fn crc_matches_the_ieee_check_value() {
    assert_eq!(crc32(0, b"123456789"), 0xCBF4_3926);
}

/// Four bytes at a time gives the bitwise CRC for every length and
/// every split of the input into two continued parts.
#[test]
fn crc_by_words_matches_the_bitwise_crc_at_every_length_and_split() {
    fn bitwise(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    let data: Vec<u8> = (0..97u32)
        .map(|i| (i.wrapping_mul(151) ^ (i >> 3)) as u8)
        .collect();
    for n in 0..data.len() {
        let want = bitwise(&data[..n]);
        assert_eq!(crc32(0, &data[..n]), want, "length {n}");
        for cut in 0..=n {
            assert_eq!(
                crc32(crc32(0, &data[..cut]), &data[cut..n]),
                want,
                "{n} split at {cut}"
            );
        }
    }
}

#[test]
fn frames_round_trip_after_garbage() {
    let mut s = std::vec![1u8, 2, 0xA5, 0x5A, 9];
    s.extend(frame(7, TEXT, b"hello"));
    match next_frame(&s) {
        Scan::Frame {
            frame,
            skipped,
            used,
        } => {
            assert_eq!(
                (frame.seq, frame.kind, frame.payload),
                (7, TEXT, &b"hello"[..])
            );
            assert_eq!(skipped, 5);
            assert_eq!(used, s.len());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_flipped_byte_fails_the_crc_and_the_scan_moves_on() {
    let mut s = frame(1, TEXT, b"first");
    let second = frame(2, TEXT, b"second");
    s[12] ^= 0x40;
    s.extend(&second);
    match next_frame(&s) {
        Scan::Frame { frame, .. } => assert_eq!(frame.seq, 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_partial_frame_asks_for_more_and_keeps_its_start() {
    let f = frame(3, TEXT, b"partial");
    for cut in 0..f.len() {
        match next_frame(&f[..cut]) {
            Scan::NeedMore { skipped } => assert_eq!(skipped, 0, "cut {cut}"),
            other => panic!("cut {cut}: {other:?}"),
        }
    }
}

/// Plain calls of every size of field, a counter's extension record
/// and a lost-records mark between them: what goes in comes out, in
/// far fewer bytes for the plain calls.
#[test]
fn packed_calls_round_trip_with_other_records_among_them() {
    use fgtrace_core::record::{ext, kind};
    let mut recs = Vec::new();
    for (i, &(start, depth, dur, site)) in [
        (1_000u64, 0u32, 5u64, 0u32),
        (900, 1, 1, 1),
        (START_MASK, MAX_DEPTH, DUR_MAX, MAX_SITES - 1),
        (0, 0, 0, 0),
        (1 << 40, 3, 1 << 30, 70_000),
        (1 << 40, 3, 128, 127),
    ]
    .iter()
    .enumerate()
    {
        recs.push(RawCall::pack(start, depth, dur, site, false, kind::CALL));
        if i == 1 {
            recs.push(RawCall::ext(ext::COUNTER, 12_345, 0));
            recs.push(RawCall::pack(77, 2, 9, 3, true, kind::POLL));
        }
    }
    let mut out = [0u8; 512];
    let (n, used) = pack_calls(&mut out, &recs);
    assert_eq!(n, recs.len());
    let mut back = Vec::new();
    assert_eq!(unpack_calls(&out[..used], |r| back.push(r)), Ok(recs.len()));
    assert_eq!(back, recs);

    // The probe's usual call: a few bytes.
    let leaf = [
        RawCall::pack(5_000, 2, 16, 11, false, kind::CALL),
        RawCall::pack(5_040, 2, 16, 11, false, kind::CALL),
    ];
    let (_, used) = pack_calls(&mut out, &leaf);
    assert!(used <= 2 + 1 + 8 + 1 + 4, "{used} bytes for two leaf calls");
}

/// A full buffer takes what fits and says how much.
#[test]
fn packing_stops_where_the_frame_is_full() {
    use fgtrace_core::record::kind;
    let recs: Vec<RawCall> = (0..100)
        .map(|i| RawCall::pack(i * 1_000_000, 1, 1 << 35, 5, false, kind::CALL))
        .collect();
    let mut out = [0u8; 100];
    let (n, used) = pack_calls(&mut out, &recs);
    assert!(
        n > 0 && n < recs.len() && used <= out.len(),
        "{n} records, {used} bytes"
    );
    let mut back = Vec::new();
    assert_eq!(unpack_calls(&out[..used], |r| back.push(r)), Ok(n));
    assert_eq!(back[..], recs[..n]);
}

/// The largest plain calls (every field at its widest, starts jumping
/// across the whole range) fill any buffer without writing past it.
#[test]
fn the_widest_records_fit_in_packed_max_bytes() {
    use fgtrace_core::record::kind;
    let recs: Vec<RawCall> = (0..8)
        .map(|i| {
            let start = if i % 2 == 0 { START_MASK } else { 0 };
            RawCall::pack(start, MAX_DEPTH, DUR_MAX, MAX_SITES - 1, false, kind::CALL)
        })
        .collect();
    let mut one = [0u8; PACKED_MAX];
    assert_eq!(pack_calls(&mut one, &recs[..1]), (1, PACKED_MAX));
    for len in PACKED_MAX..PACKED_MAX * 4 {
        let mut out = std::vec![0u8; len];
        let (n, used) = pack_calls(&mut out, &recs);
        assert!(n >= 1 && used <= len, "{len}: {n} records in {used} bytes");
        let mut back = Vec::new();
        assert_eq!(unpack_calls(&out[..used], |r| back.push(r)), Ok(n));
        assert_eq!(back[..], recs[..n]);
    }
}

/// Every cut of a packed payload, and bytes no encoder writes, give an
/// error naming the problem, never a panic or an invented record.
#[test]
fn truncated_or_corrupt_packed_calls_give_a_clear_error() {
    use fgtrace_core::record::{ext, kind};
    let recs = [
        RawCall::pack(1 << 30, 4, 300, 9, false, kind::CALL),
        RawCall::ext(ext::VALUE, 3, 1),
        RawCall::pack(1 << 29, 3, 1 << 20, 8, false, kind::CALL),
    ];
    let mut out = [0u8; 128];
    let (_, used) = pack_calls(&mut out, &recs);
    for cut in 1..used {
        let mut got = 0;
        let r = unpack_calls(&out[..cut], |_| got += 1);
        let whole = [0, 1, 2, 3].into_iter().find(|&k| {
            let mut o = [0u8; 128];
            pack_calls(&mut o, &recs[..k]).1 == cut
        });
        match whole {
            Some(k) => assert_eq!(r, Ok(k), "cut {cut} at a record's end"),
            None => assert!(r.is_err(), "cut {cut}: {r:?}"),
        }
    }
    let bad: [(&[u8], &str); 6] = [
        (&[3], "unknown bits"),
        (&[0x80], "header is cut short"),
        (&[0xff; 11], "header is cut short"),
        (&[0, 0x80, 0x80, 0x80, 0x10, 0, 0], "site id is past"),
        (&[0x80, 0x10, 0, 0, 0], "depth is past"),
        (&[0, 0, 1, 0], "start is past"),
    ];
    for (b, want) in bad {
        let mut got = 0;
        match unpack_calls(b, |_| got += 1) {
            Err(e) => assert!(e.contains(want), "{b:?}: {e}"),
            Ok(n) => panic!("{b:?}: {n} records"),
        }
        assert_eq!(got, 0, "{b:?}");
    }
    let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
    assert_eq!(r.varint(), None, "past 64 bits");
    let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert_eq!(r.varint(), Some(u64::MAX));
}

#[test]
fn readers_never_read_past_the_end() {
    let mut r = Reader::new(&[1, 2, 3]);
    assert_eq!(r.u16(), Some(0x0201));
    assert_eq!(r.u32(), None);
    assert_eq!(r.u8(), Some(3));
    assert_eq!(r.u8(), None);
    let mut r = Reader::new(&[5, 0, b'a']);
    assert_eq!(r.str(), None, "length says 5, 1 byte left");
}

#[test]
fn frame_pointers_round_trip_as_differences() {
    let fps = [
        0,
        0x8006_db20,
        0x8006_de20,
        0,
        0x8006_de60,
        0x1000,
        u64::MAX,
        8,
    ];
    let mut enc = FpCoder::default();
    let mut w_buf = [0u8; 128];
    let mut w = Writer::new(&mut w_buf);
    for &f in &fps {
        w.varint(enc.encode(f));
    }
    let n = w.len;
    // Neighbouring frames' pointers take 2 or 3 bytes, not 8.
    assert!(n < 8 * fps.len() / 2, "{n} bytes");
    let mut r = Reader::new(&w_buf[..n]);
    let mut dec = FpCoder::default();
    let back: Vec<u64> = (0..fps.len())
        .map(|_| dec.decode(r.varint().unwrap()))
        .collect();
    assert_eq!(back, fps);
    assert_eq!(r.remaining(), 0);
}
