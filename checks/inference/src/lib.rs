//! Code that compiles only while no dependency adds impls of std traits to
//! std types: each expression below leaves a type for inference to pick,
//! and one more candidate impl (such as serde_json's `PartialEq<Value> for
//! u8`) makes it ambiguous ("type annotations needed", E0282/E0283).

/// A traced function, so the probe is compiled in.
#[fgtrace::traced]
pub fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| i as u8).collect()
}

/// A traced method, in an impl block.
pub struct Parser;

#[fgtrace::traced]
impl Parser {
    pub fn words(&self, s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }
}

/// Comparisons against literals whose element type is inferred.
pub fn empty(v: &[u8]) -> bool {
    #[allow(clippy::comparison_to_empty)]
    let r = v == [];
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_whose_types_inference_picks() {
        let v = bytes(0);
        assert_eq!(&*v, &[]);
        assert!(empty(&v));
        let w = Parser.words("a b");
        assert_eq!(w, ["a", "b"]);
        let n: Vec<i32> = Vec::new();
        assert_eq!(n, []);
        assert_eq!(bytes(2), [0, 1]);
    }

    #[test]
    fn a_capture_records_the_traced_calls() {
        let cap = fgtrace::testing::capture(|| {
            bytes(3);
        });
        assert_eq!(cap.calls("bytes"), 1);
    }
}
