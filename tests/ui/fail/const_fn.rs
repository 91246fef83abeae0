use fgtrace::traced;

#[traced]
pub const fn answer() -> u32 {
    42
}

fn main() {}
