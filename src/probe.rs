//! The hot path: per-site descriptors, entry/exit guards and the per-thread
//! shadow stack. (Stub: being written.)

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A static descriptor of one instrumented function, made by `#[traced]`.
pub struct Site {
    pub name: &'static str,
    pub module_path: &'static str,
    pub file: &'static str,
    pub line: u32,
    pub is_async: bool,
}

impl Site {
    pub const fn new(name: &'static str, module_path: &'static str, file: &'static str, line: u32, is_async: bool) -> Site {
        Site { name, module_path, file, line, is_async }
    }
}

/// Records the exit of a call when dropped.
pub struct Guard {
    _not_send: PhantomData<*const ()>,
}

impl Drop for Guard {
    fn drop(&mut self) {}
}

/// Entry probe.
#[inline(always)]
pub fn enter(_site: &'static Site) -> Guard {
    Guard { _not_send: PhantomData }
}

/// Wraps an `async fn`'s body.
pub struct TracedFuture<F> {
    site: &'static Site,
    inner: F,
}

impl<F> TracedFuture<F> {
    pub fn new(site: &'static Site, inner: F) -> Self {
        TracedFuture { site, inner }
    }
}

impl<F: Future> Future for TracedFuture<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: structural pinning of `inner`; it is never moved.
        let this = unsafe { self.get_unchecked_mut() };
        let _g = enter(this.site);
        unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx)
    }
}
