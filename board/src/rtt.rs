//! SEGGER RTT: the stream in a ring buffer in the board's RAM, which a debug
//! probe reads while the core runs (probe-rs, J-Link, OpenOCD), or any GDB
//! server halting it briefly (`fgtrace board --gdb`).
//!
//! The control block has the layout those tools look for: the id
//! `"SEGGER RTT"` (16 bytes), the numbers of up and down channels (two
//! `i32`), then one descriptor per channel, `{name, buffer, size, write
//! offset, read offset, flags}` (six 32-bit words on a 32-bit target). Here
//! it has one up-channel, which carries the same framed byte stream a UART
//! carries, and one down-channel for host commands (`record 0 999`), so a
//! board needs no wire but the debug probe's.
//!
//! The board is the only writer of the up-channel's write offset and the
//! down-channel's read offset; the host is the only writer of the others.
//! Every write to the up-channel happens with the runtime's output locked
//! (one writer at a time, interrupt handlers included), so a write needs no
//! lock of its own. When the host has not made room, the channel's mode
//! ([`Mode`], in its flags word, which a host may change too) says what
//! happens: wait for it, or take what fits and report the rest refused (the
//! runtime counts refused bytes and sends the count in its statistics).
//!
//! With the feature `rtt` on a bare-metal target the block is the static
//! `_SEGGER_RTT`, found by that symbol or by its id; `init` fills it in (built there only).

use core::cell::UnsafeCell;
use core::sync::atomic::{fence, AtomicU32, Ordering::*};

/// The id at the start of the control block.
pub const ID: [u8; 16] = *b"SEGGER RTT\0\0\0\0\0\0";
/// Bytes of the up-channel's buffer (the stream).
pub const UP_SIZE: usize = 4096;
/// Bytes of the down-channel's buffer (host commands).
pub const DOWN_SIZE: usize = 64;

/// The control block's layout on a 32-bit target, for a host reading it:
/// the up-channel count's offset.
pub const OFF_MAX_UP: u64 = 16;
/// The down-channel count's offset.
pub const OFF_MAX_DOWN: u64 = 20;
/// The first up-channel descriptor's offset (the down-channels' follow the
/// up-channels').
pub const OFF_CHANNELS: u64 = 24;
/// Bytes of one channel descriptor.
pub const CHANNEL_SIZE: u64 = 24;
/// Within a descriptor: the buffer's address.
pub const OFF_BUFFER: u64 = 4;
/// Within a descriptor: the buffer's size.
pub const OFF_SIZE: u64 = 8;
/// Within a descriptor: the write offset.
pub const OFF_WRITE: u64 = 12;
/// Within a descriptor: the read offset.
pub const OFF_READ: u64 = 16;
/// Within a descriptor: the flags (the mode in bits 0-1).
pub const OFF_FLAGS: u64 = 20;

/// What a write does when the host has not read enough to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Mode {
    /// Write a frame whole or not at all; a frame not written is refused
    /// (counted). The firmware never waits.
    Skip = 0,
    /// Write what fits; the rest is refused (counted).
    Trim = 1,
    /// Wait until the host has made room: nothing is lost, and the
    /// firmware stalls while no host reads.
    Block = 2,
}

/// One channel's descriptor, as the host tools read it.
#[repr(C)]
pub struct Channel {
    name: UnsafeCell<*const u8>,
    buffer: UnsafeCell<*mut u8>,
    size: UnsafeCell<u32>,
    write: AtomicU32,
    read: AtomicU32,
    flags: AtomicU32,
}

// SAFETY: `name`, `buffer` and `size` are written once, before the id makes
// the block visible; the offsets are atomics, each with one writer.
unsafe impl Sync for Channel {}

impl Channel {
    /// An empty channel (no buffer: takes nothing, yields nothing).
    pub const fn new() -> Channel {
        Channel {
            name: UnsafeCell::new(core::ptr::null()),
            buffer: UnsafeCell::new(core::ptr::null_mut()),
            size: UnsafeCell::new(0),
            write: AtomicU32::new(0),
            read: AtomicU32::new(0),
            flags: AtomicU32::new(0),
        }
    }

    /// Gives the channel its buffer, name and mode.
    ///
    /// # Safety
    /// `buffer` is valid for `size` bytes for as long as the channel is
    /// used, and nothing else writes it; no write or read runs meanwhile.
    pub unsafe fn set_up(&self, name: &'static [u8], buffer: *mut u8, size: usize, mode: Mode) {
        // SAFETY: no other access meanwhile (the caller's promise).
        unsafe {
            *self.name.get() = name.as_ptr();
            *self.buffer.get() = buffer;
            *self.size.get() = size as u32;
        }
        self.write.store(0, Relaxed);
        self.read.store(0, Relaxed);
        self.flags.store(mode as u32, Relaxed);
    }

    fn size(&self) -> u32 {
        // SAFETY: written in `set_up`, before any use.
        unsafe { *self.size.get() }
    }

    fn mode(&self) -> Mode {
        match self.flags.load(Relaxed) & 3 {
            0 => Mode::Skip,
            1 => Mode::Trim,
            _ => Mode::Block,
        }
    }

    /// Sets the mode (the host may change it too).
    pub fn set_mode(&self, mode: Mode) {
        let f = self.flags.load(Relaxed);
        self.flags.store((f & !3) | mode as u32, Relaxed);
    }

    /// Bytes the host has made room for (a read offset out of range, which
    /// only a broken host writes, makes none).
    fn free(&self, wr: u32) -> u32 {
        let size = self.size();
        let rd = self.read.load(Acquire);
        if rd >= size {
            0
        } else if rd > wr {
            rd - wr - 1
        } else {
            size - 1 - (wr - rd)
        }
    }

    /// Writes `bytes` to the up-channel as its mode says; returns how many
    /// it took (the rest is refused). One writer at a time: the caller
    /// holds the runtime's output.
    pub fn write(&self, bytes: &[u8]) -> usize {
        let size = self.size();
        if size < 2 {
            return 0;
        }
        // SAFETY: written in `set_up`.
        let buf = unsafe { *self.buffer.get() };
        let mut wr = self.write.load(Relaxed);
        if wr >= size {
            return 0;
        }
        let mut done = 0;
        loop {
            let mode = self.mode();
            let free = self.free(wr) as usize;
            let left = bytes.len() - done;
            if mode == Mode::Skip && free < left {
                return done;
            }
            let n = free.min(left);
            let first = n.min((size - wr) as usize);
            // SAFETY: `buffer` holds `size` bytes; the `n` bytes from `wr`
            // (wrapping) are free: the host reads none of them until the
            // write offset below says they are written.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    bytes.as_ptr().add(done),
                    buf.add(wr as usize),
                    first,
                );
                core::ptr::copy_nonoverlapping(bytes.as_ptr().add(done + first), buf, n - first);
            }
            wr = ((wr as usize + n) % size as usize) as u32;
            fence(Release);
            self.write.store(wr, Release);
            done += n;
            if done == bytes.len() || mode != Mode::Block {
                return done;
            }
            core::hint::spin_loop();
        }
    }

    /// Whether the host has read everything written.
    pub fn drained(&self) -> bool {
        self.read.load(Acquire) == self.write.load(Relaxed)
    }

    /// The next byte the host wrote to a down-channel, if any.
    pub fn read_byte(&self) -> Option<u8> {
        let size = self.size();
        let wr = self.write.load(Acquire);
        let rd = self.read.load(Relaxed);
        if wr == rd || wr >= size || rd >= size {
            return None;
        }
        // SAFETY: `rd` is inside the buffer, and the host wrote it before
        // moving its write offset past it.
        let b = unsafe { (*self.buffer.get()).add(rd as usize).read_volatile() };
        self.read.store((rd + 1) % size, Release);
        Some(b)
    }
}

impl Default for Channel {
    fn default() -> Self {
        Channel::new()
    }
}

/// The control block: one up-channel (the stream) and one down-channel
/// (host commands).
#[repr(C)]
pub struct ControlBlock {
    id: UnsafeCell<[u8; 16]>,
    max_up: UnsafeCell<i32>,
    max_down: UnsafeCell<i32>,
    /// The stream.
    pub up: Channel,
    /// Host commands.
    pub down: Channel,
}

// SAFETY: the id and counts are written once, in `set_up`; see `Channel`.
unsafe impl Sync for ControlBlock {}

impl ControlBlock {
    /// A block not yet set up (no id: a host finds nothing).
    pub const fn new() -> ControlBlock {
        ControlBlock {
            id: UnsafeCell::new([0; 16]),
            max_up: UnsafeCell::new(0),
            max_down: UnsafeCell::new(0),
            up: Channel::new(),
            down: Channel::new(),
        }
    }

    /// Sets both channels up, then writes the id, last, so a host that
    /// finds the id finds a whole block.
    ///
    /// # Safety
    /// As [`Channel::set_up`], for both buffers.
    pub unsafe fn set_up(&self, up: (*mut u8, usize), down: (*mut u8, usize), mode: Mode) {
        // SAFETY: the caller's promise.
        unsafe {
            self.up.set_up(b"fgtrace\0", up.0, up.1, mode);
            self.down.set_up(b"fgtrace\0", down.0, down.1, Mode::Skip);
            *self.max_up.get() = 1;
            *self.max_down.get() = 1;
        }
        fence(SeqCst);
        for (i, &b) in ID.iter().enumerate() {
            // SAFETY: the id's bytes; volatile, so they are written here,
            // after the rest.
            unsafe { (self.id.get() as *mut u8).add(i).write_volatile(b) };
        }
        fence(SeqCst);
    }
}

impl Default for ControlBlock {
    fn default() -> Self {
        ControlBlock::new()
    }
}

#[cfg(all(feature = "rtt", target_os = "none"))]
mod on_target {
    use super::*;
    use core::sync::atomic::AtomicBool;

    /// The control block, under the name the host tools look for.
    #[no_mangle]
    #[used]
    pub static _SEGGER_RTT: ControlBlock = ControlBlock::new();

    struct Buf<const N: usize>(UnsafeCell<[u8; N]>);
    // SAFETY: handed to the channels once, in `init`.
    unsafe impl<const N: usize> Sync for Buf<N> {}

    static UP: Buf<UP_SIZE> = Buf(UnsafeCell::new([0; UP_SIZE]));
    static DOWN: Buf<DOWN_SIZE> = Buf(UnsafeCell::new([0; DOWN_SIZE]));
    static TAKEN: AtomicBool = AtomicBool::new(false);

    /// The up-channel as the runtime's sink.
    pub struct RttUp(());
    /// The down-channel as the runtime's command input.
    pub struct RttDown(());

    /// Sets the control block up with the up-channel in `mode` (its buffer
    /// [`UP_SIZE`] bytes) and returns the two channels, once (`None` after).
    pub fn init(mode: Mode) -> Option<(&'static mut RttUp, &'static mut RttDown)> {
        if TAKEN.load(Acquire) {
            return None;
        }
        // SAFETY: the static buffer is used by nothing else, and handed over
        // at most once (`TAKEN`, checked above and again in `init_with`).
        init_with(mode, unsafe { &mut *UP.0.get() })
    }

    /// As [`init`], with the up-channel's buffer the firmware's own (a
    /// larger one makes the firmware wait, or drop, less often).
    pub fn init_with(
        mode: Mode,
        up: &'static mut [u8],
    ) -> Option<(&'static mut RttUp, &'static mut RttDown)> {
        if TAKEN.swap(true, AcqRel) {
            return None;
        }
        static mut HANDLES: (RttUp, RttDown) = (RttUp(()), RttDown(()));
        let len = up.len().min(1 << 24);
        // SAFETY: the buffers are the caller's and this module's, used by
        // nothing else; this runs once (`TAKEN`), before any write or read.
        unsafe {
            _SEGGER_RTT.set_up(
                (up.as_mut_ptr(), len),
                (DOWN.0.get() as *mut u8, DOWN_SIZE),
                mode,
            );
            let h = &mut *core::ptr::addr_of_mut!(HANDLES);
            Some((&mut h.0, &mut h.1))
        }
    }

    impl RttUp {
        /// Waits until the host has read everything written: call it before
        /// the firmware ends (or resets), or the stream's tail is lost.
        pub fn flush(&self) {
            while !_SEGGER_RTT.up.drained() {
                core::hint::spin_loop();
            }
        }
    }

    /// [`RttUp::flush`] without the handle (for an exit path that has none).
    pub fn flush() {
        if TAKEN.load(Acquire) {
            RttUp(()).flush();
        }
    }

    /// The up-channel's mode while a session's last frames go out (see
    /// `closing`), `u32::MAX` otherwise.
    static SAVED_MODE: AtomicU32 = AtomicU32::new(u32::MAX);

    #[cfg(all(feature = "cortex-m", target_arch = "arm"))]
    impl crate::runtime::Sink for RttUp {
        fn write(&mut self, bytes: &[u8]) -> usize {
            _SEGGER_RTT.up.write(bytes)
        }

        /// A session's last frames (statistics, END) wait for the host in
        /// any mode: the host counts what was dropped from them.
        fn closing(&mut self, on: bool) {
            let up = &_SEGGER_RTT.up;
            if on {
                SAVED_MODE.store(up.mode() as u32, Relaxed);
                up.set_mode(Mode::Block);
            } else {
                let m = SAVED_MODE.swap(u32::MAX, Relaxed);
                let mode = match m {
                    0 => Mode::Skip,
                    1 => Mode::Trim,
                    _ => Mode::Block,
                };
                if m != u32::MAX {
                    up.set_mode(mode);
                }
            }
        }
    }

    #[cfg(all(feature = "cortex-m", target_arch = "arm"))]
    impl crate::runtime::CommandInput for RttDown {
        fn read(&mut self) -> Option<u8> {
            _SEGGER_RTT.down.read_byte()
        }
    }
}
#[cfg(all(feature = "rtt", target_os = "none"))]
pub use on_target::*;

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// A channel over `buf`, as the host side sees it: its offsets.
    fn channel(buf: &mut [u8], mode: Mode) -> Channel {
        let c = Channel::new();
        // SAFETY: `buf` outlives the channel in each test.
        unsafe { c.set_up(b"t\0", buf.as_mut_ptr(), buf.len(), mode) };
        c
    }

    /// What a host does: reads the written bytes and moves the read offset.
    fn host_read(c: &Channel, buf: &[u8]) -> Vec<u8> {
        let (wr, mut rd) = (c.write.load(SeqCst), c.read.load(SeqCst));
        let mut out = Vec::new();
        while rd != wr {
            out.push(buf[rd as usize]);
            rd = (rd + 1) % buf.len() as u32;
        }
        c.read.store(rd, SeqCst);
        out
    }

    #[test]
    fn writes_wrap_around_and_the_host_reads_them_in_order() {
        let mut buf = [0u8; 8];
        let p = buf.as_ptr();
        let c = channel(&mut buf, Mode::Skip);
        // SAFETY: the channel writes through its pointer, the test reads.
        let view = || unsafe { core::slice::from_raw_parts(p, 8) }.to_vec();
        assert_eq!(c.write(b"abcde"), 5);
        assert_eq!(host_read(&c, &view()), b"abcde");
        // Wraps: 3 bytes at the end, 3 at the start.
        assert_eq!(c.write(b"fghijk"), 6);
        assert_eq!(host_read(&c, &view()), b"fghijk");
        assert!(c.drained());
    }

    #[test]
    fn skip_refuses_a_frame_that_does_not_fit_whole_and_trim_takes_what_fits() {
        let mut buf = [0u8; 8];
        let c = channel(&mut buf, Mode::Skip);
        // One byte stays free (a full ring would read as empty): 7 fit.
        assert_eq!(c.write(b"abcde"), 5);
        assert_eq!(c.write(b"fgh"), 0, "skip: all or nothing");
        assert_eq!(c.write(b"fg"), 2);
        assert!(!c.drained());
        let mut buf = [0u8; 8];
        let c = channel(&mut buf, Mode::Trim);
        assert_eq!(c.write(b"abcde"), 5);
        assert_eq!(c.write(b"fgh"), 2, "trim: what fits");
        assert_eq!(c.write(b"x"), 0);
    }

    #[test]
    fn block_waits_for_the_host_and_loses_nothing() {
        let mut buf = std::vec![0u8; 16];
        let p = buf.as_mut_ptr() as usize;
        let c = channel(&mut buf, Mode::Block);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let got = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut got = Vec::new();
                while got.len() < 1000 {
                    // SAFETY: the buffer outlives the scope.
                    let view = unsafe { core::slice::from_raw_parts(p as *const u8, 16) };
                    got.extend(host_read(&c, view));
                    std::thread::yield_now();
                }
                got
            });
            for chunk in data.chunks(37) {
                assert_eq!(c.write(chunk), chunk.len());
            }
            reader.join().unwrap()
        });
        assert_eq!(got, data);
        drop(buf);
    }

    #[test]
    fn a_read_offset_out_of_range_makes_no_room() {
        let mut buf = [0u8; 8];
        let c = channel(&mut buf, Mode::Trim);
        c.read.store(99, SeqCst);
        assert_eq!(c.write(b"abc"), 0);
    }

    #[test]
    fn the_down_channel_yields_what_the_host_wrote() {
        let mut buf = [0u8; 4];
        buf[3] = b'r';
        buf[0] = b'\n';
        let c = channel(&mut buf, Mode::Skip);
        c.read.store(3, SeqCst);
        c.write.store(1, SeqCst);
        assert_eq!(c.read_byte(), Some(b'r'));
        assert_eq!(c.read_byte(), Some(b'\n'));
        assert_eq!(c.read_byte(), None);
    }

    #[test]
    fn set_up_writes_the_id_the_tools_look_for() {
        let (mut up, mut down) = ([0u8; 8], [0u8; 4]);
        let b = ControlBlock::new();
        // SAFETY: the buffers outlive the block.
        unsafe { b.set_up((up.as_mut_ptr(), 8), (down.as_mut_ptr(), 4), Mode::Block) };
        // SAFETY: reading the block's own bytes.
        let id = unsafe { *b.id.get() };
        assert_eq!(&id[..11], b"SEGGER RTT\0");
        assert_eq!(b.up.mode(), Mode::Block);
        assert_eq!(b.up.size(), 8);
    }
}
