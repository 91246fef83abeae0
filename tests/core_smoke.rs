use fgtrace::__private::{enter, Site};
use fgtrace::{Config, Event, Session};

static FIB: Site = Site::new("fib", module_path!(), file!(), line!(), false);
static LEAF: Site = Site::new("leaf", module_path!(), file!(), line!(), false);

fn fib(n: u32) -> u64 {
    let _g = enter(&FIB);
    if n < 2 {
        let _l = enter(&LEAF);
        return n as u64;
    }
    fib(n - 1) + fib(n - 2)
}

#[test]
fn smoke() {
    let s = Session::start(Config::builtin().batch_calls(64)).unwrap();
    fib(10);
    let h = std::thread::spawn(|| fib(5));
    h.join().unwrap();
    let t = s.stop().unwrap();
    for e in t.events().take(12) {
        if let Event::Call(c) = e {
            println!(
                "{}{} {} {}ns",
                "  ".repeat(c.depth as usize),
                t.meta().site_name(c.site),
                c.start_ns,
                c.dur_ns
            );
        }
    }
    println!("{:?}", t.meta().threads);
    assert_eq!(t.meta().total_calls(), 177 + 89 + 15 + 8);
}
