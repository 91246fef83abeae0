use fgtrace::traced;

// A value of a type that cannot be recorded: the error names the expression.
#[traced(values(n = input.to_vec()))]
fn parse(input: &[u8]) -> usize {
    input.len()
}

// A return type that cannot be recorded.
#[traced(ret)]
fn name() -> String {
    String::new()
}

fn main() {}
