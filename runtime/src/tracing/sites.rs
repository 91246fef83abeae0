//! One fgtrace [`Site`] per `tracing` span callsite, made once and found
//! again without a lock.
//!
//! A callsite's metadata is a `&'static Metadata<'static>` with a unique
//! address, so the first time a span callsite is seen (`register_callsite`,
//! or a span whose callsite was registered before the layer existed) a
//! [`Callsite`] is leaked for it: the `Site` the probe records under (named by
//! the span's name, its `target` as the module path, its file and line), the
//! metadata, and an index. There is one per callsite in the process, shared
//! by every layer and subscriber, so the memory is bounded by the program's
//! callsites, as for `#[traced]` statics.
//!
//! Two lock-free read paths:
//!
//! * by metadata address (the layer's span entry): open addressing in a
//!   chain of tables, each probed over a short window; a table whose window
//!   is full sends the key to the next, larger table. Slots are only ever
//!   filled, never emptied or moved, so a reader that meets an empty slot
//!   knows the key is not in this table nor any later one.
//! * by index (the standalone subscriber's span ids): segments of 1024
//!   pointers, allocated as needed.
//!
//! Writers (once per callsite) take one mutex; readers take none.

use fgtrace_core::record::MAX_SITES;
use fgtrace_core::site::Site;
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering::*};
use std::sync::{Mutex, PoisonError};
use tracing_core::Metadata;

/// What fgtrace keeps for one span callsite.
pub(crate) struct Callsite {
    /// What the probe records the span's enters under.
    pub(crate) site: Site,
    /// The callsite's metadata (its address is the key).
    pub(crate) meta: &'static Metadata<'static>,
    /// Position in the index table: the standalone subscriber's span id is
    /// `index + 1`.
    pub(crate) index: u32,
    /// The callsite's field index of each value slot (the site's value
    /// names, in order); `NO_FIELD` past the last.
    fields: [u8; SPAN_VALUES],
    /// A span of this callsite was entered again after an exit: its spans
    /// are futures (see the layer).
    future: AtomicBool,
}

/// Values a span or event records at most: the first fields of its
/// callsite, in order (an event's `message` left out), as many as a
/// `#[traced]` call's named values.
pub(crate) const SPAN_VALUES: usize = fgtrace_core::values::MAX_VALUES - 1;
const NO_FIELD: u8 = u8::MAX;

impl Callsite {
    /// The value slot of the callsite's field `index`, if it has one.
    #[inline(always)]
    pub(crate) fn slot(&self, index: usize) -> Option<usize> {
        self.fields.iter().position(|&f| f as usize == index)
    }

    /// The callsite's spans are futures, entered once per poll.
    #[inline(always)]
    pub(crate) fn is_future(&self) -> bool {
        self.future.load(Relaxed)
    }

    /// Its spans are futures from now on.
    #[cold]
    pub(crate) fn learn_future(&self) {
        if !self.future.swap(true, Relaxed) {
            ANY_FUTURE.store(true, Relaxed);
        }
    }

    /// The callsite's spans or events record values (it has fields).
    #[inline(always)]
    pub(crate) fn has_values(&self) -> bool {
        !self.site.values.is_empty()
    }
}

/// Slots of the first hash table (later ones are 4x the one before).
const FIRST_BITS: u32 = 12;
/// Slots probed per table before moving to the next one.
const WINDOW: usize = 16;
/// Pointers per index segment.
const SEG_BITS: u32 = 10;
const SEG: usize = 1 << SEG_BITS;
/// Segments: enough for every site id the records can name.
const SEGS: usize = (MAX_SITES as usize) >> SEG_BITS;

struct Table {
    bits: u32,
    slots: Box<[AtomicPtr<Callsite>]>,
    next: AtomicPtr<Table>,
}

type Segment = [AtomicPtr<Callsite>; SEG];

static FIRST: AtomicPtr<Table> = AtomicPtr::new(ptr::null_mut());
static SEGMENTS: [AtomicPtr<Segment>; SEGS] = [const { AtomicPtr::new(ptr::null_mut()) }; SEGS];
/// Callsites made so far (written under `WRITE`).
static COUNT: AtomicU32 = AtomicU32::new(0);
static WRITE: Mutex<()> = Mutex::new(());
/// Some callsite's spans are futures: until one is, closing a span needs no
/// lookup (no future record to write).
static ANY_FUTURE: AtomicBool = AtomicBool::new(false);

/// Some callsite's spans are futures (see [`Callsite::learn_future`]).
#[inline(always)]
pub(crate) fn any_future() -> bool {
    ANY_FUTURE.load(Relaxed)
}

std::thread_local! {
    /// This thread is making a callsite: a span entered meanwhile (a traced
    /// allocator that emits spans, say) is not recorded rather than waiting
    /// on the mutex this thread holds.
    static MAKING: Cell<bool> = const { Cell::new(false) };
}

#[inline(always)]
fn hash(meta: &'static Metadata<'static>, bits: u32) -> usize {
    let p = meta as *const Metadata<'static> as usize as u64;
    ((p >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
}

/// The callsite of `meta`, if it was made already. No lock, no allocation.
#[inline]
pub(crate) fn lookup(meta: &'static Metadata<'static>) -> Option<&'static Callsite> {
    // SAFETY: tables are leaked once published (Release), never freed.
    let mut t = unsafe { FIRST.load(Acquire).as_ref() };
    while let Some(table) = t {
        let mask = table.slots.len() - 1;
        let mut i = hash(meta, table.bits);
        for _ in 0..WINDOW {
            let c = table.slots[i].load(Acquire);
            if c.is_null() {
                return None;
            }
            // SAFETY: only leaked `Callsite`s are stored.
            let c: &'static Callsite = unsafe { &*c };
            if ptr::eq(c.meta, meta) {
                return Some(c);
            }
            i = (i + 1) & mask;
        }
        // SAFETY: as above.
        t = unsafe { table.next.load(Acquire).as_ref() };
    }
    None
}

/// The callsite of `meta`, made on its first use. `None` only for callsites
/// past what records can name, or while this thread is making one.
#[inline]
pub(crate) fn get(meta: &'static Metadata<'static>) -> Option<&'static Callsite> {
    match lookup(meta) {
        Some(c) => Some(c),
        None => make(meta),
    }
}

/// The callsite with this index (the standalone subscriber's span id - 1).
/// No lock; `None` for an index never handed out.
#[inline]
pub(crate) fn by_index(index: u64) -> Option<&'static Callsite> {
    let seg = (index >> SEG_BITS) as usize;
    if seg >= SEGS {
        return None;
    }
    // SAFETY: segments are leaked once published, never freed.
    let s = unsafe { SEGMENTS[seg].load(Acquire).as_ref()? };
    // SAFETY: only leaked `Callsite`s are stored.
    unsafe { s[index as usize & (SEG - 1)].load(Acquire).as_ref() }
}

#[cold]
#[inline(never)]
fn make(meta: &'static Metadata<'static>) -> Option<&'static Callsite> {
    if MAKING.with(|m| m.replace(true)) {
        return None;
    }
    let made = {
        let _w = WRITE.lock().unwrap_or_else(PoisonError::into_inner);
        lookup(meta).or_else(|| insert(meta))
    };
    MAKING.with(|m| m.set(false));
    made
}

/// Makes and publishes the callsite of `meta` (under `WRITE`): first in the
/// index table, then in the hash table, each pointer stored with Release
/// after what it points to is complete.
fn insert(meta: &'static Metadata<'static>) -> Option<&'static Callsite> {
    let index = COUNT.load(Relaxed);
    if index >= MAX_SITES {
        return None;
    }
    // The value names: the first fields (field names are `'static`), made
    // once per callsite like the site itself.
    let mut fields = [NO_FIELD; SPAN_VALUES];
    let mut names = Vec::new();
    for f in meta.fields().iter() {
        if names.len() == SPAN_VALUES || f.index() >= NO_FIELD as usize {
            break;
        }
        if meta.is_event() && f.name() == "message" {
            continue;
        }
        fields[names.len()] = f.index() as u8;
        names.push(f.name());
    }
    let names: &'static [&'static str] = Box::leak(names.into_boxed_slice());
    let c: &'static Callsite = Box::leak(Box::new(Callsite {
        site: Site::with_values(
            meta.name(),
            meta.target(),
            meta.file().unwrap_or(""),
            meta.line().unwrap_or(0),
            false,
            names,
        ),
        meta,
        index,
        fields,
        future: AtomicBool::new(false),
    }));
    let cp = c as *const Callsite as *mut Callsite;
    let seg = &SEGMENTS[(index >> SEG_BITS) as usize];
    let mut s = seg.load(Acquire);
    if s.is_null() {
        let fresh: Box<Segment> = Box::new([const { AtomicPtr::new(ptr::null_mut()) }; SEG]);
        s = Box::into_raw(fresh);
        seg.store(s, Release);
    }
    // SAFETY: published above or earlier, never freed.
    unsafe { (*s)[index as usize & (SEG - 1)].store(cp, Release) };
    COUNT.store(index + 1, Relaxed);

    let mut link = &FIRST;
    let mut bits = FIRST_BITS;
    loop {
        let mut t = link.load(Acquire);
        if t.is_null() {
            let slots = (0..1usize << bits)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect();
            let fresh = Box::new(Table {
                bits,
                slots,
                next: AtomicPtr::new(ptr::null_mut()),
            });
            t = Box::into_raw(fresh);
            link.store(t, Release);
        }
        // SAFETY: tables are leaked once published.
        let table: &'static Table = unsafe { &*t };
        let mask = table.slots.len() - 1;
        let mut i = hash(meta, table.bits);
        for _ in 0..WINDOW {
            if table.slots[i].load(Relaxed).is_null() {
                table.slots[i].store(cp, Release);
                return Some(c);
            }
            i = (i + 1) & mask;
        }
        link = &table.next;
        bits = table.bits + 2;
    }
}

/// Callsites made so far (for tests and the docs' claim of one per callsite).
#[cfg(test)]
pub(crate) fn count() -> u32 {
    COUNT.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_core::callsite::{Callsite as TracingCallsite, Identifier};
    use tracing_core::field::FieldSet;
    use tracing_core::metadata::Kind;
    use tracing_core::{Interest, Level};

    struct Cs;
    impl TracingCallsite for Cs {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!()
        }
    }
    static CS: Cs = Cs;

    /// Leaks `n` distinct span metadata (tests only).
    fn metas(n: usize) -> Vec<&'static Metadata<'static>> {
        (0..n)
            .map(|i| {
                let name: &'static str = Box::leak(format!("span{i}").into_boxed_str());
                &*Box::leak(Box::new(Metadata::new(
                    name,
                    "fgtrace::tracing::sites::tests",
                    Level::INFO,
                    Some("src/tracing/sites.rs"),
                    Some(i as u32),
                    None,
                    FieldSet::new(&[], Identifier(&CS)),
                    Kind::SPAN,
                )))
            })
            .collect()
    }

    #[test]
    fn every_callsite_is_made_once_and_found_by_address_and_index() {
        // More than the first table's window can hold for colliding keys,
        // and more than one index segment.
        let ms = metas(6000);
        let before = count();
        let made: Vec<_> = ms.iter().map(|m| get(m).unwrap()).collect();
        assert!(count() - before >= 6000);
        for (m, c) in ms.iter().zip(&made) {
            assert!(ptr::eq(lookup(m).unwrap(), *c));
            assert!(ptr::eq(get(m).unwrap(), *c));
            assert!(ptr::eq(by_index(c.index as u64).unwrap(), *c));
            assert_eq!(c.site.name, m.name());
            assert_eq!(c.site.module_path, "fgtrace::tracing::sites::tests");
            assert_eq!(c.site.line, m.line().unwrap());
        }
        assert!(by_index(u64::MAX).is_none());
        assert!(by_index(MAX_SITES as u64 - 1).is_none());
    }

    #[test]
    fn racing_threads_agree_on_one_callsite() {
        let ms = metas(64);
        let seen: Vec<Vec<usize>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        ms.iter()
                            .map(|m| get(m).unwrap() as *const Callsite as usize)
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(seen.iter().all(|v| v == &seen[0]));
    }
}
