//! One recorded value of a call (`#[traced(values(..))]`), and how it is shown.

/// One value a call recorded: its slot (an index into the site's
/// [`SiteInfo::values`](crate::SiteInfo::values)), tag and bits (see `fgtrace_core::values`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value {
    /// Index into the site's [`SiteInfo::values`](crate::SiteInfo::values).
    pub slot: u8,
    /// Type and variant bits (`fgtrace_core::values::tag`): integer, bool,
    /// char, string; plain, `Ok`, `Err`, `Some`, `None`.
    pub tag: u8,
    /// The value itself: the integer (signed ones as two's complement), the
    /// bool or `char` as a number, or a string's index into
    /// [`TraceMeta::strings`](crate::TraceMeta::strings).
    pub bits: u64,
}

impl Value {
    /// The value as a number (an integer, a `bool` as 0/1, a `char`'s scalar
    /// value); `None` for a variant without an inner value.
    pub fn number(&self) -> Option<f64> {
        use fgtrace_core::values::tag;
        match self.tag & tag::TYPE {
            tag::SIGNED => Some(self.bits as i64 as f64),
            tag::UNSIGNED | tag::BOOL | tag::CHAR => Some(self.bits as f64),
            _ => None,
        }
    }

    /// The value as an integer (as [`Value::number`]).
    pub fn integer(&self) -> Option<i128> {
        use fgtrace_core::values::tag;
        match self.tag & tag::TYPE {
            tag::SIGNED => Some(self.bits as i64 as i128),
            tag::UNSIGNED | tag::BOOL | tag::CHAR => Some(self.bits as i128),
            _ => None,
        }
    }
}

impl Value {
    /// A string value's text, from the trace's string table
    /// ([`TraceMeta::strings`](crate::TraceMeta::strings)); `None` for other values (and an index the
    /// table does not have).
    pub fn text<'a>(&self, strings: &'a [String]) -> Option<&'a str> {
        use fgtrace_core::values::tag;
        if self.tag & tag::TYPE != tag::STR {
            return None;
        }
        strings.get(self.bits as usize).map(String::as_str)
    }

    /// The value with the trace's string table, to print it: a string as
    /// Rust spells it (`"bad digit"`, `Err("bad digit")`).
    pub fn shown(self, strings: &[String]) -> Shown<'_> {
        Shown {
            value: self,
            strings,
        }
    }

    fn fmt_in(&self, f: &mut std::fmt::Formatter<'_>, strings: &[String]) -> std::fmt::Result {
        use fgtrace_core::values::tag;
        let inner = |f: &mut std::fmt::Formatter<'_>| -> std::fmt::Result {
            match self.tag & tag::TYPE {
                tag::STR => match self.text(strings) {
                    Some(t) => write!(f, "{t:?}"),
                    None => write!(f, "<str #{}>", self.bits),
                },
                tag::SIGNED => write!(f, "{}", self.bits as i64),
                tag::UNSIGNED => write!(f, "{}", self.bits),
                tag::BOOL => write!(f, "{}", self.bits != 0),
                tag::CHAR => match char::from_u32(self.bits as u32) {
                    Some(c) => write!(f, "{c:?}"),
                    None => write!(f, "{}", self.bits),
                },
                _ => write!(f, "?"),
            }
        };
        let variant = match self.tag & tag::VARIANT {
            tag::OK => "Ok",
            tag::ERR => "Err",
            tag::SOME => "Some",
            tag::NONE => return write!(f, "None"),
            _ => return inner(f),
        };
        f.write_str(variant)?;
        if self.tag & tag::TYPE != tag::ABSENT {
            f.write_str("(")?;
            inner(f)?;
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Value {
    /// As Rust spells it: `83`, `-5`, `true`, `'x'`, `Ok(3)`, `Err`, `None`;
    /// a string, which needs the trace's string table ([`Value::shown`]),
    /// as `<str #index>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fmt_in(f, &[])
    }
}

/// A [`Value`] with the trace's string table: prints strings as their text.
#[derive(Clone, Copy, Debug)]
pub struct Shown<'a> {
    /// The value printed (a string one is an index into `strings`).
    pub value: Value,
    strings: &'a [String],
}

impl Shown<'_> {
    /// A string value's text (see [`Value::text`]).
    pub fn text(&self) -> Option<&str> {
        self.value.text(self.strings)
    }
}

impl std::ops::Deref for Shown<'_> {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

impl std::fmt::Display for Shown<'_> {
    /// As [`Value`]'s, with strings as Rust spells them: `"ident"`, `Err("bad digit")`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value.fmt_in(f, self.strings)
    }
}
