//! The report as text: uftrace's table (with the counters' columns, the
//! futures' section and the losses) or ftrace's function profiler's, and
//! as JSON.

use super::*;

/// s² as ftrace's profiler prints it: ns² / 1000 through the duration printer,
/// which makes the number us² (labelled `us^2` here; ftrace says `us`).
fn push_variance(out: &mut String, ns2: f64) {
    push_ftrace_duration(out, (ns2 / 1000.0) as u64);
}

fn variance_text(ns2: f64) -> String {
    let mut s = String::new();
    push_variance(&mut s, ns2);
    format!("{}^2", s.trim_end())
}

/// Right-aligned columns, two spaces apart, the name last and left-aligned (uftrace's look).
fn write_table(
    out: &mut String,
    headers: &[&str],
    rows: &[(Vec<String>, String)],
    name_header: &str,
) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for (cells, _) in rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.len());
        }
    }
    let name_width = rows
        .iter()
        .map(|(_, n)| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(name_header.len());
    for (h, w) in headers.iter().zip(&widths) {
        let _ = write!(out, "  {h:>w$}");
    }
    let _ = writeln!(out, "  {name_header}");
    for w in &widths {
        let _ = write!(out, "  {}", "=".repeat(*w));
    }
    let _ = writeln!(out, "  {}", "=".repeat(name_width));
    for (cells, name) in rows {
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "  {c:>w$}");
        }
        let _ = writeln!(out, "  {name}");
    }
}

/// What a counter column of the table shows.
#[derive(Clone, Copy)]
enum Col {
    /// The counter at this index.
    Counter(usize),
    /// Instructions (index) per cycle: the `cycles` counter's index, or
    /// `None` for the duration in cycles (a cycle clock).
    Ipc(usize, Option<usize>),
}

impl Report {
    /// The counter columns of the table: (title, counter index, self figure).
    /// Allocations show inclusive and self counts and bytes; frees are left
    /// to the JSON output.
    fn counter_columns(&self) -> Vec<(String, Col, bool)> {
        let mut cols = Vec::new();
        let cycles = self.counter_names.iter().position(|n| n == "cycles");
        for (i, n) in self.counter_names.iter().enumerate() {
            match n.as_str() {
                "allocs" => {
                    cols.push(("Allocs".to_string(), Col::Counter(i), false));
                    cols.push(("Self allocs".to_string(), Col::Counter(i), true));
                }
                "alloc_bytes" => cols.push(("Alloc bytes".to_string(), Col::Counter(i), false)),
                "reallocs" => cols.push(("Reallocs".to_string(), Col::Counter(i), false)),
                "frees" | "freed_bytes" => {}
                "instructions" => {
                    cols.push(("Instr".to_string(), Col::Counter(i), false));
                    cols.push(("Self instr".to_string(), Col::Counter(i), true));
                    let ipc = match (cycles, self.cycles_per_ns) {
                        (Some(c), _) => Some(Col::Ipc(i, Some(c))),
                        (None, Some(_)) => Some(Col::Ipc(i, None)),
                        (None, None) => None,
                    };
                    if let Some(ipc) = ipc {
                        cols.push(("IPC".to_string(), ipc, false));
                        cols.push(("Self IPC".to_string(), ipc, true));
                    }
                }
                other => cols.push((other.to_string(), Col::Counter(i), false)),
            }
        }
        cols
    }

    /// The table's note on count-only functions, if any.
    fn count_only_line(&self) -> Option<String> {
        let n = self.functions.iter().filter(|f| f.count_only > 0).count();
        (n > 0).then(|| {
            format!(
                "{} calls of {n} function{} marked [count only] were counted, not recorded \
                 (auto-exclude): their times are of the calls recorded before the switch",
                self.count_only,
                if n == 1 { "" } else { "s" }
            )
        })
    }

    /// The table's note on the functions a compile-time plan counted, if any.
    fn counted_line(&self) -> Option<String> {
        let n = self.functions.iter().filter(|f| f.counted > 0).count();
        (n > 0).then(|| {
            format!(
                "{} calls of {n} function{} marked [counted] were counted exactly, not timed: \
                 the build's plan left them without a probe (`cargo fgtrace plan`)",
                self.counted,
                if n == 1 { "" } else { "s" }
            )
        })
    }

    /// The report as JSON, for machine consumers (`fgtrace report --format
    /// json`): every field of [`Report`], durations in nanoseconds.
    pub fn write_json(&self, mut w: impl Write) -> io::Result<()> {
        crate::human::write_pretty_json(&mut w, self)?;
        w.write_all(b"\n")?;
        w.flush()
    }

    /// Writes the report as text in `style`.
    pub fn write(&self, style: ReportStyle, mut w: impl Write) -> io::Result<()> {
        let mut out = String::new();
        match style {
            ReportStyle::Table => self.table(&mut out),
            ReportStyle::Ftrace => self.ftrace(&mut out),
            ReportStyle::Json => return self.write_json(w),
        }
        w.write_all(out.as_bytes())?;
        w.flush()
    }

    fn table(&self, out: &mut String) {
        // A merged report (pid 0) names each process's pid in `program`.
        if self.pid == 0 {
            let _ = writeln!(out, "# fgtrace report: {}", self.program);
        } else {
            let _ = writeln!(out, "# fgtrace report: {} (pid {})", self.program, self.pid);
        }
        let _ = writeln!(
            out,
            "# {} calls on {} thread{}, session {}",
            self.calls,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            human_duration(self.duration_ns)
        );
        for l in &self.loss_lines {
            let _ = writeln!(out, "# {l}");
        }
        if let Some(l) = self.count_only_line() {
            let _ = writeln!(out, "# {l}");
        }
        if let Some(l) = self.counted_line() {
            let _ = writeln!(out, "# {l}");
        }
        let has_off = self.off_cpu == Some(Ok(()));
        match &self.off_cpu {
            Some(Ok(())) => {
                let _ = writeln!(
                    out,
                    "# off-CPU: time switched out (blocked: voluntarily; the rest preempted); on-CPU = time - off-CPU"
                );
            }
            Some(Err(why)) => {
                let _ = writeln!(out, "# off-CPU unavailable: {why}");
            }
            None => {}
        }
        let _ = writeln!(out, "#");
        let mut headers = vec![
            "Calls".to_string(),
            "Total time".into(),
            "Self time".into(),
            "Avg time".into(),
            "Min time".into(),
            "Max time".into(),
            "p50".into(),
            "p99".into(),
            "s^2".into(),
        ];
        // Counter columns: (index, self?) per column shown.
        let ccols = self.counter_columns();
        headers.extend(ccols.iter().map(|c| c.0.clone()));
        if has_off {
            headers.extend(
                [
                    "On-CPU total",
                    "On-CPU self",
                    "Off-CPU total",
                    "Off-CPU self",
                    "Blocked",
                ]
                .map(String::from),
            );
        }
        let rows: Vec<_> = self
            .functions
            .iter()
            .map(|f| {
                if f.counted > 0 && f.calls == f.counted {
                    // Counted by the plan, never timed: nothing else to show.
                    let mut cells = vec!["-".to_string(); headers.len()];
                    cells[0] = f.calls.to_string();
                    return (cells, format!("{} [counted]", f.name));
                }
                let mut cells = vec![
                    f.calls.to_string(),
                    uftrace_time(f.total_ns),
                    uftrace_time(f.self_ns),
                    uftrace_time(f.avg_ns),
                    uftrace_time(f.min_ns),
                    uftrace_time(f.max_ns),
                    uftrace_time(f.p50_ns),
                    uftrace_time(f.p99_ns),
                    variance_text(f.variance_ns2),
                ];
                for (_, col, own) in &ccols {
                    let v = if *own { &f.self_counters } else { &f.counters };
                    let get = |i: usize| v.get(i).copied().unwrap_or(0);
                    cells.push(match *col {
                        Col::Counter(i) => get(i).to_string(),
                        Col::Ipc(instr, cycles) => {
                            let cycles = match cycles {
                                Some(c) => get(c) as f64,
                                None => {
                                    let ns = if *own { f.self_ns } else { f.total_ns };
                                    ns as f64 * self.cycles_per_ns.unwrap_or(0.0)
                                }
                            };
                            if cycles > 0.0 {
                                format!("{:.2}", get(instr) as f64 / cycles)
                            } else {
                                "-".to_string()
                            }
                        }
                    });
                }
                if has_off {
                    // A function that also ran on a thread without off-CPU
                    // data shows `-`, not a zero that looks measured.
                    let t = |v: Option<u64>| v.map_or("-".to_string(), uftrace_time);
                    cells.extend([
                        t(f.on_cpu_ns()),
                        t(f.self_on_cpu_ns()),
                        t(f.off_cpu.map(|o| o.total.total_ns())),
                        t(f.off_cpu.map(|o| o.self_.total_ns())),
                        t(f.off_cpu.map(|o| o.total.blocked_ns)),
                    ]);
                }
                let name = if f.count_only > 0 {
                    format!("{} [count only]", f.name)
                } else {
                    f.name.clone()
                };
                (cells, name)
            })
            .collect();
        let headers: Vec<&str> = headers.iter().map(|h| h.as_str()).collect();
        write_table(out, &headers, &rows, "Function");
        if !self.futures.is_empty() {
            let _ = writeln!(out, "\n# async futures, first poll to completion");
            let headers = [
                "Futures",
                "Polls",
                "Cancelled",
                "Total time",
                "Avg time",
                "Min time",
                "Max time",
                "p50",
                "p99",
                "s^2",
                "Longest poll",
            ];
            let rows: Vec<_> = self
                .futures
                .iter()
                .map(|f| {
                    let cells = vec![
                        f.futures.to_string(),
                        f.polls.to_string(),
                        f.cancelled.to_string(),
                        uftrace_time(f.total_ns),
                        uftrace_time(f.avg_ns),
                        uftrace_time(f.min_ns),
                        uftrace_time(f.max_ns),
                        uftrace_time(f.p50_ns),
                        uftrace_time(f.p99_ns),
                        variance_text(f.variance_ns2),
                        f.longest_poll.as_ref().map_or("-".into(), |p| {
                            format!("{} on {}", uftrace_time(p.dur_ns), p.thread_label)
                        }),
                    ];
                    (cells, format!("{} [future]", f.name))
                })
                .collect();
            write_table(out, &headers, &rows, "Future");
            self.future_times(out);
        }
        self.pending_futures(out);
        self.long_polls_text(out);
    }

    /// The futures pending when the recording ended, stalled ones first.
    fn pending_futures(&self, out: &mut String) {
        let p = &self.pending;
        if p.futures == 0 {
            return;
        }
        let _ = writeln!(
            out,
            "\n# async futures pending at the end: {}, {} stalled (woken after their last poll, \
             never polled again)",
            p.futures, p.stalled
        );
        for f in &p.listed {
            let woken = match f.woken_ns {
                Some(w) => format!("woken at {}, not polled since (stalled)", human_duration(w)),
                None => "not woken since".to_string(),
            };
            let _ = writeln!(
                out,
                "  {} [future] {:#x}: last polled at {} on {}; {woken}",
                f.name,
                f.id,
                human_duration(f.last_poll_ns),
                f.thread_label
            );
        }
        if p.futures > p.listed.len() as u64 {
            let _ = writeln!(out, "  ... and {} more", p.futures - p.listed.len() as u64);
        }
    }

    /// Per future: polls, busy time in them, and scheduled time from a
    /// wake to the poll after it, for the async fns whose futures measured
    /// them.
    fn future_times(&self, out: &mut String) {
        let timed: Vec<&FutureStats> = self.futures.iter().filter(|f| f.busy.is_some()).collect();
        if timed.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\n# async futures, per future: busy = in polls, scheduled = woken, waiting for a poll"
        );
        let headers = [
            "Polls/fut",
            "Busy p50",
            "Busy p99",
            "Sched p50",
            "Sched p99",
            "Sched max",
            "Wakes/fut",
        ];
        let spread = |s: Option<&Spread>, f: fn(&Spread) -> u64| {
            s.map_or("-".to_string(), |s| uftrace_time(f(s)))
        };
        let rows: Vec<_> = timed
            .iter()
            .map(|f| {
                let per = |n: u64| format!("{:.1}", n as f64 / f.futures.max(1) as f64);
                let (b, s) = (f.busy.as_ref(), f.scheduled.as_ref());
                let cells = vec![
                    per(f.polls),
                    spread(b, |s| s.p50_ns),
                    spread(b, |s| s.p99_ns),
                    spread(s, |s| s.p50_ns),
                    spread(s, |s| s.p99_ns),
                    spread(s, |s| s.max_ns),
                    f.wakes.map_or("-".to_string(), per),
                ];
                (cells, format!("{} [future]", f.name))
            })
            .collect();
        write_table(out, &headers, &rows, "Future");
    }

    /// ftrace's `function_stat_headers` / `function_stat_show`, byte for byte
    /// (trailing spaces included); loss lines, if any, as `#` lines above.
    fn ftrace(&self, out: &mut String) {
        for l in &self.loss_lines {
            let _ = writeln!(out, "# {l}");
        }
        // The layout has no room for a mark: count-only rows are named here.
        for f in self.functions.iter().filter(|f| f.counted > 0) {
            let _ = writeln!(
                out,
                "# counted: {}: Hit has {} calls counted by the build's plan, not timed",
                f.name, f.counted
            );
        }
        for f in self.functions.iter().filter(|f| f.count_only > 0) {
            let _ = writeln!(
                out,
                "# count only: {}: Hit has {} calls counted, not timed; Time and Avg are of its {} recorded calls",
                f.name,
                f.count_only,
                f.calls - f.count_only
            );
        }
        out.push_str(
            "  Function                               Hit    Time            Avg             s^2\n",
        );
        out.push_str(
            "  --------                               ---    ----            ---             ---\n",
        );
        let rows = self.functions.iter().map(|f| {
            (
                f.name.clone(),
                f.calls,
                f.total_ns,
                f.avg_ns,
                f.variance_ns2,
            )
        });
        let futures = self.futures.iter().map(|f| {
            (
                format!("{} [future]", f.name),
                f.futures,
                f.total_ns,
                f.avg_ns,
                f.variance_ns2,
            )
        });
        for (name, hits, total, avg, var) in rows.chain(futures) {
            let name: String = name.chars().take(30).collect();
            let _ = write!(out, "  {name:<30}  {hits:>10}    ");
            push_ftrace_duration(out, total);
            out.push_str("    ");
            push_ftrace_duration(out, avg);
            out.push_str("    ");
            push_variance(out, var);
            out.push('\n');
        }
    }
}
