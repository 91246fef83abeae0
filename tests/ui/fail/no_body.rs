use fgtrace::traced;

trait Visit {
    #[traced]
    fn visit(&self, depth: u32) -> bool;
}

fn main() {}
