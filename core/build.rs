//! Sets `fgtrace_lean` where the board probe records lean calls: a board
//! (`irq-mask` without `std`) whose clock never reads the same value twice,
//! `mcycle` on RISC-V or the TSC on x86_64. There a call's nesting can be
//! told from its times, so the first hart's plain call keeps no frame.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fgtrace_lean)");
    let on = |f: &str| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let cycle_clock = arch == "x86_64" || (arch.starts_with("riscv") && on("MCYCLE"));
    if on("IRQ_MASK") && !on("STD") && cycle_clock {
        println!("cargo::rustc-cfg=fgtrace_lean");
    }
}
