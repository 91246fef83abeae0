//! JSON for the file's metadata and the control protocol, through
//! `serde-json-core`.
//!
//! Not `serde_json`: that crate implements `PartialEq<Value>` for `u8`,
//! `i32`, `str` and other std types, and such impls are seen by type
//! inference in every crate that links it. A user's `assert_eq!(&*v, &[])`
//! that compiled before would fail with "type annotations needed" the
//! moment fgtrace became a dependency. `serde-json-core` adds no impls to
//! foreign types.
//!
//! The wrappers add what the crate leaves to its caller: an output buffer
//! that grows, a scratch buffer for escaped strings, a nesting limit (its
//! parser recurses, and a file's bytes are not to be trusted), and errors
//! that name the problem.

use serde::{de::DeserializeOwned, Serialize};
use std::io;

/// Arrays and objects nested deeper than this are refused before parsing.
pub const MAX_DEPTH: usize = 64;

/// `v` as compact JSON.
pub fn to_vec(v: &impl Serialize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 1024];
    loop {
        match serde_json_core::to_slice(v, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(serde_json_core::ser::Error::BufferFull) if buf.len() < 1 << 31 => {
                let grown = buf.len() * 2;
                buf.resize(grown, 0);
            }
            Err(e) => return Err(io::Error::other(format!("cannot write JSON: {e}"))),
        }
    }
}

/// `v` as a JSON string.
pub fn to_string(v: &impl Serialize) -> io::Result<String> {
    to_vec(v).map(|b| String::from_utf8(b).expect("the serializer writes UTF-8"))
}

/// How deeply `json` nests arrays and objects (strings skipped).
fn depth(json: &[u8]) -> usize {
    let (mut depth, mut max, mut in_str, mut escaped) = (0usize, 0usize, false, false);
    for &b in json {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Reads a `T` from the whole of `json`. The error says what is wrong.
pub fn from_slice<T: DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    let d = depth(json);
    if d > MAX_DEPTH {
        return Err(format!(
            "JSON nested {d} levels deep (at most {MAX_DEPTH} are read)"
        ));
    }
    // An unescaped string is never longer than the text it came from.
    let mut scratch = vec![0u8; json.len()];
    match serde_json_core::from_slice_escaped::<T>(json, &mut scratch) {
        Ok((v, n)) if json[n..].iter().all(u8::is_ascii_whitespace) => Ok(v),
        Ok((_, n)) => Err(format!("unexpected bytes after the JSON value at byte {n}")),
        // Serde's own message (an unknown field, a missing one) is not
        // kept by the reader: say what it can be.
        Err(serde_json_core::de::Error::CustomError) => Err(
            "the JSON does not have the expected shape (an unknown or missing field, \
             or a value of the wrong type)"
                .into(),
        ),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Default)]
    #[serde(default)]
    struct T {
        name: String,
        rate: f64,
        big: u64,
        list: Vec<(u64, u64, u8)>,
        opt: Option<String>,
    }

    #[test]
    fn values_round_trip_with_escapes_floats_and_large_integers() {
        let t = T {
            name: "a \"quoted\" \\ name\n\u{1}é".into(),
            rate: 2.596_108_312_5,
            big: u64::MAX,
            list: vec![(1, 2, 3)],
            opt: None,
        };
        let json = to_vec(&t).unwrap();
        assert_eq!(from_slice::<T>(&json).unwrap(), t);
        // What serde_json wrote before reads the same.
        let old = br#"{"name":"x","rate":1.5,"big":7,"list":[[1,2,3]],"opt":"y","extra":{"a":[1,{"b":null}]}}"#;
        let t: T = from_slice(old).unwrap();
        assert_eq!(
            (t.name.as_str(), t.rate, t.opt.as_deref()),
            ("x", 1.5, Some("y"))
        );
    }

    #[test]
    fn a_large_value_grows_the_buffer() {
        let t = T {
            name: "x".repeat(100_000),
            ..T::default()
        };
        assert_eq!(from_slice::<T>(&to_vec(&t).unwrap()).unwrap(), t);
    }

    #[test]
    fn bad_json_is_an_error_naming_the_problem() {
        assert!(from_slice::<T>(b"{\"name\":").is_err());
        assert!(from_slice::<T>(b"{} x").unwrap_err().contains("trailing"));
        let deep = format!("{{\"extra\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(from_slice::<T>(deep.as_bytes())
            .unwrap_err()
            .contains("nested"));
        assert!(from_slice::<T>(b"{\"name\":\"\\ud800\"}").is_err());
    }
}
