//! What runs before `main`: the one constructor of the runtime, an entry in
//! `.init_array` (`__mod_init_func` on macOS, `.CRT$XCU` on Windows; a few
//! lines, rather than the `ctor` crate, which would add a proc macro to what
//! every `#[traced]` user compiles). It reads the
//! variables that act without code in the program, in this order:
//!
//! 1. `FGTRACE_RECORD` ([`crate::launch`]): a whole-program recording;
//! 2. `FGTRACE_CONTROL` ([`crate::control`]): the control endpoint, which
//!    only listens when a whole-program recording is the session.
//!
//! Neither calls `std::thread::current` on this thread, so the main
//! thread's handle is still std's own.

fn init() {
    crate::launch::init_from_env();
    crate::control::init_from_env();
}

// The constructor's section: `.init_array` on ELF systems, `__mod_init_func`
// on macOS, `.CRT$XCU` (the C runtime's initializers) on Windows.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    windows
))]
#[used]
#[cfg_attr(
    any(target_os = "linux", target_os = "android"),
    link_section = ".init_array"
)]
#[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
#[cfg_attr(windows, link_section = ".CRT$XCU")]
static INIT: extern "C" fn() = {
    extern "C" fn run() {
        // A panic must not unwind out of a constructor.
        let _ = std::panic::catch_unwind(init);
    }
    run
};
