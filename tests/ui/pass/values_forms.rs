//! Every form of `values(..)` and `ret` builds without warnings.
#![deny(warnings)]

use fgtrace::traced;

#[derive(Debug)]
pub struct E;

#[traced(values(len = input.len(), first = input.first().copied().unwrap_or(0)), ret)]
pub fn parse(input: &[u8]) -> Result<Vec<u8>, E> {
    let v = input.to_vec();
    if v.is_empty() {
        return Err(E);
    }
    Ok(v)
}

#[traced(values(n, neg = n < 0, c = 'c', r = &n))]
pub fn signed(n: i64) -> i64 {
    n
}

#[traced(ret)]
pub fn borrowed(v: &[u32]) -> Option<&u32> {
    v.first()
}

#[traced(values(t = 1u8), ret)]
pub fn generic<T: Clone>(t: T) -> Option<T> {
    Some(t)
}

pub struct Parser {
    pub seen: usize,
}

#[traced]
impl Parser {
    #[traced(values(len = line.len()), ret)]
    pub fn feed(&mut self, line: &str) -> usize {
        self.seen += line.len();
        self.seen
    }

    #[traced(values(depth), ret)]
    pub async fn fetch(&self, depth: u32) -> Result<u32, E> {
        Ok(depth + self.seen as u32)
    }
}

#[traced(values(len = s.len()), ret)]
pub async fn parse_async(s: String) -> Result<u64, String> {
    s.parse::<u64>().map_err(|e| e.to_string())
}

fn main() {
    let _ = parse(b"ab");
    signed(-3);
    borrowed(&[1]);
    generic(String::new());
    let mut p = Parser { seen: 0 };
    p.feed("x");
    drop(p.fetch(1));
    drop(parse_async("1".into()));
}
