//! Naming sampled addresses: the interface every view that shows sampled
//! frames takes from its caller ([`Resolve`]), and the resolvers that need no
//! binary (bare addresses, a closure). The symbolizer that reads the traced
//! program's ELF and DWARF (`fgtrace-symbols`, feature `symbolize`)
//! implements it too, here; no view imports it.

/// Address to names: innermost first, inlined frames expanded (the first name
/// is the innermost inlined function at `addr`, the last the function the
/// code belongs to). `is_return_address` asks for the call site (`addr - 1`)
/// rather than the instruction at `addr`: every frame but a sample's first.
pub trait Resolve {
    /// The names of the code at `addr`, innermost inlined function first (see
    /// the trait's documentation); a sample whose frames all give no name is
    /// counted as `[unknown]`.
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String>;

    /// What the binary says about the frame at `addr` beyond its names (see
    /// [`FrameInfo`]); nothing by default.
    fn frame_info(&mut self, _addr: u64, _is_return_address: bool) -> FrameInfo {
        FrameInfo::default()
    }
}

impl<R: Resolve + ?Sized> Resolve for &mut R {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        (**self).frames(addr, is_return_address)
    }
    fn frame_info(&mut self, addr: u64, is_return_address: bool) -> FrameInfo {
        (**self).frame_info(addr, is_return_address)
    }
}

impl<R: Resolve + ?Sized> Resolve for Box<R> {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        (**self).frames(addr, is_return_address)
    }
    fn frame_info(&mut self, addr: u64, is_return_address: bool) -> FrameInfo {
        (**self).frame_info(addr, is_return_address)
    }
}

/// One sampled frame as the binary describes it: what
/// [`ChainCut`](crate::join::ChainCut) needs to tell a frame the frame-pointer
/// walk skipped from one that is not there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameInfo {
    /// Whether the function had its frame record (saved frame pointer and
    /// return address, the frame pointer pointing at them) set up at this
    /// address, from the binary's call-frame information (`.eh_frame`): `Some(false)`
    /// for code without frame pointers (libc's `malloc`, `memchr`; a shim
    /// that jumps on) and for a function's first and last instructions
    /// (before `push rbp; mov rbp, rsp`, after `pop rbp`). A frame-pointer
    /// walk from such a leaf skips its caller. `None`: not known.
    pub frame_record: Option<bool>,
    /// The address is in fgtrace's own probe (inlined into a traced function
    /// or called from it): the traced call there is being entered or left.
    pub in_probe: bool,
}

/// A resolver shared by builders on several cores: each lookup locks it, so
/// the work behind a name (a symbolizer's reads of DWARF, and its cache) is
/// done once for all of them, by whichever asks first. The builders keep
/// the names they got, so each locks it once per distinct address.
#[derive(Debug)]
pub struct Shared<'r, R>(pub &'r std::sync::Mutex<R>);

impl<R: Resolve> Resolve for Shared<'_, R> {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        r.frames(addr, is_return_address)
    }
    fn frame_info(&mut self, addr: u64, is_return_address: bool) -> FrameInfo {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        r.frame_info(addr, is_return_address)
    }
}

/// No symbols: every address as `0x...` (until a symbolizer is plugged in).
#[derive(Clone, Copy, Debug, Default)]
pub struct HexResolve;

impl Resolve for HexResolve {
    fn frames(&mut self, addr: u64, _is_return_address: bool) -> Vec<String> {
        vec![format!("{addr:#x}")]
    }
}

/// A closure as a resolver (tests, ad-hoc symbol tables).
pub struct FnResolve<F>(pub F);

impl<F: FnMut(u64, bool) -> Vec<String>> Resolve for FnResolve<F> {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        (self.0)(addr, is_return_address)
    }
}

#[cfg(feature = "symbolize")]
impl Resolve for fgtrace_symbols::symbolize::Symbolizer {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        fgtrace_symbols::symbolize::Symbolizer::frames(self, addr, is_return_address)
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    fn frame_info(&mut self, addr: u64, is_return_address: bool) -> FrameInfo {
        FrameInfo {
            frame_record: self.frame_record(addr, is_return_address),
            in_probe: self.in_probe(addr, is_return_address),
        }
    }
}
