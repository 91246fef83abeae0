use fgtrace::traced;

// A string value must be `'static`: the collector reads it after the call.
#[traced(values(name))]
fn greet(name: &str) -> usize {
    name.len()
}

fn main() {}
