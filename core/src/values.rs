//! Values a call records beside its duration: what `#[traced(values(..))]`
//! accepts, and how one value is encoded.
//!
//! A value is 64 bits and a tag ([`RawValue`]). It travels as an extension
//! record ([`crate::record::ext::VALUE`]) written right after the call's own
//! record, only for calls whose site has values, so a call without values
//! costs what it always did. The names of a site's values are in
//! [`crate::site::Site::values`]; a value record says its slot there.
//!
//! The accepted types are the ones [`Value`] is implemented for: integers up
//! to 64 bits, `bool`, `char` and `&'static str` (and references to them). A
//! string is recorded as its address and length, never copied: the host
//! reads the text later (the collector in the process, from the string
//! itself; a board's host, from the firmware's ELF). A return value
//! (`ret`) may also be a `Result` or an `Option` ([`Ret`]): its variant, with
//! the inner value when that is one of the accepted types. Anything else is a
//! compile error at the expression, naming the accepted types.

/// Most values one call records (names given to `values(..)`, plus `ret`).
pub const MAX_VALUES: usize = 5;

/// The tag of a value: its type in the low 4 bits, the variant of a returned
/// `Result` or `Option` in the high 4 bits.
pub mod tag {
    /// No value (a `ret` of a call that unwound, or a variant without one).
    pub const ABSENT: u8 = 0;
    /// An unsigned integer (the 64 bits as they are).
    pub const UNSIGNED: u8 = 1;
    /// A signed integer (the 64 bits are an `i64`).
    pub const SIGNED: u8 = 2;
    /// A `bool` (0 or 1).
    pub const BOOL: u8 = 3;
    /// A `char` (its scalar value).
    pub const CHAR: u8 = 4;
    /// A `&'static str`: in a [`RawValue`](super::RawValue), its address
    /// (the length beside it); in a trace, an index into the trace's string
    /// table.
    pub const STR: u8 = 5;
    /// Mask of the type bits.
    pub const TYPE: u8 = 0x0f;
    /// Variant `Ok(..)` of a returned `Result`.
    pub const OK: u8 = 0x10;
    /// Variant `Err(..)` of a returned `Result`.
    pub const ERR: u8 = 0x20;
    /// Variant `Some(..)` of a returned `Option`.
    pub const SOME: u8 = 0x30;
    /// Variant `None` of a returned `Option`.
    pub const NONE: u8 = 0x40;
    /// Mask of the variant bits.
    pub const VARIANT: u8 = 0xf0;
}

/// The longest string value a host keeps, in bytes: a longer one is cut (at
/// a character boundary) and marked with `…`.
pub const MAX_STR: usize = 256;

/// One recorded value: 64 bits and a [`tag`] (a string's length beside).
///
/// The fields are private: a string value's address is read by the host as
/// a `&'static str`, so only [`Value`]'s impl for `&'static str` may make one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawValue {
    bits: u64,
    len: u32,
    tag: u8,
}

impl RawValue {
    /// No value.
    pub const ABSENT: RawValue = RawValue {
        bits: 0,
        len: 0,
        tag: 0,
    };

    /// A value of `bits` and `tag` (any tag but [`tag::STR`], which gives
    /// [`RawValue::ABSENT`]: a string value is made from a `&'static str`).
    #[inline(always)]
    pub const fn new(bits: u64, tag: u8) -> RawValue {
        if tag & tag::TYPE == tag::STR {
            return RawValue::ABSENT;
        }
        RawValue { bits, len: 0, tag }
    }

    /// The value's bits (see [`tag`]; a string's address).
    #[inline(always)]
    pub const fn bits(self) -> u64 {
        self.bits
    }

    /// What the bits are (see [`tag`]).
    #[inline(always)]
    pub const fn tag(self) -> u8 {
        self.tag
    }

    /// A string value's length in bytes (saturating at `u32::MAX`); 0 otherwise.
    #[inline(always)]
    pub const fn str_len(self) -> u32 {
        self.len
    }

    /// The same value under a `Result`/`Option` variant (one of [`tag`]'s
    /// variant constants; only its variant bits count, so the value's type
    /// stays what it was).
    #[inline(always)]
    pub const fn in_variant(self, variant: u8) -> RawValue {
        RawValue {
            bits: self.bits,
            len: self.len,
            tag: self.tag & tag::TYPE | variant & tag::VARIANT,
        }
    }

    /// Nothing was recorded.
    pub const fn is_absent(self) -> bool {
        self.tag == tag::ABSENT
    }
}

/// A type `#[traced(values(..))]` can record.
#[diagnostic::on_unimplemented(
    message = "`#[traced(values(..))]` cannot record a value of type `{Self}`",
    label = "this expression is a `{Self}`",
    note = "a recorded value is an integer (i8, i16, i32, i64, isize, u8, u16, u32, u64, usize), \
            a `bool`, a `char` or a `&'static str` (or a reference to one); record what matters \
            of it instead, e.g. `len = input.len()`"
)]
pub trait Value {
    /// The value's bits and tag.
    fn raw(&self) -> RawValue;
}

macro_rules! values {
    ($tag:expr, $conv:ty; $($t:ty),*) => {$(
        impl Value for $t {
            #[inline(always)]
            fn raw(&self) -> RawValue {
                RawValue { bits: *self as $conv as u64, len: 0, tag: $tag }
            }
        }
        impl Plain for $t {}
        impl Ret for $t {
            type Ok = ();
            type Err = ();
            #[inline(always)]
            fn shape(&self) -> Shape<'_, (), ()> {
                Shape::Plain(self.raw())
            }
        }
    )*};
}

values!(tag::UNSIGNED, u64; u8, u16, u32, u64, usize);
values!(tag::BOOL, u64; bool);
values!(tag::CHAR, u64; char);
values!(tag::SIGNED, i64; i8, i16, i32, i64, isize);

impl<T: Value + ?Sized> Value for &T {
    #[inline(always)]
    fn raw(&self) -> RawValue {
        (**self).raw()
    }
}

/// A string: its address and length (saturating at `u32::MAX`; the host
/// keeps at most [`MAX_STR`] bytes anyway). `'static` because the host reads
/// it after the call, possibly after the thread ended.
impl Value for &'static str {
    #[inline(always)]
    fn raw(&self) -> RawValue {
        let len = self.len();
        RawValue {
            bits: self.as_ptr() as usize as u64,
            len: if len > u32::MAX as usize {
                u32::MAX
            } else {
                len as u32
            },
            tag: tag::STR,
        }
    }
}

impl Ret for &'static str {
    type Ok = ();
    type Err = ();
    #[inline(always)]
    fn shape(&self) -> Shape<'_, (), ()> {
        Shape::Plain(self.raw())
    }
}

/// The [`Value`] types but `&'static str`: the inner values of a
/// `Result`/`Option` that [`Inner`] picks by type. A string inside one is
/// recorded only where the return type spells it `&'static str` (the
/// expansion then calls [`value`]): picking it by type would also pick a
/// `&'a str`, and turn a fn that returns one into a borrow error.
pub trait Plain: Value {}

impl<T: Plain + ?Sized> Plain for &T {}

/// What a returned value is: a plain value, or a variant with maybe an inner one.
pub enum Shape<'a, O, E> {
    /// One of the [`Value`] types.
    Plain(RawValue),
    /// `Ok(o)`.
    Ok(&'a O),
    /// `Err(e)`.
    Err(&'a E),
    /// `Some(o)`.
    Some(&'a O),
    /// `None`.
    None,
}

/// A return type `#[traced(ret)]` can record: a [`Value`] type, or a
/// `Result` or `Option` of anything (its variant; the inner value too when
/// it is a [`Value`] type).
#[diagnostic::on_unimplemented(
    message = "`#[traced(ret)]` cannot record a return value of type `{Self}`",
    label = "this fn returns a `{Self}`",
    note = "a recorded return value is an integer (i8, i16, i32, i64, isize, u8, u16, u32, u64, \
            usize), a `bool`, a `char`, a `&'static str`, or a `Result`/`Option` (recorded as its \
            variant, with the inner value when it is one of those)"
)]
pub trait Ret {
    /// The `Ok`/`Some` type (`()` otherwise).
    type Ok;
    /// The `Err` type (`()` otherwise).
    type Err;
    /// What the value is.
    fn shape(&self) -> Shape<'_, Self::Ok, Self::Err>;
}

impl<T, E> Ret for Result<T, E> {
    type Ok = T;
    type Err = E;
    #[inline(always)]
    fn shape(&self) -> Shape<'_, T, E> {
        match self {
            Ok(o) => Shape::Ok(o),
            Err(e) => Shape::Err(e),
        }
    }
}

impl<T> Ret for Option<T> {
    type Ok = T;
    type Err = ();
    #[inline(always)]
    fn shape(&self) -> Shape<'_, T, ()> {
        match self {
            Some(o) => Shape::Some(o),
            None => Shape::None,
        }
    }
}

impl<T: Ret + ?Sized> Ret for &T {
    type Ok = T::Ok;
    type Err = T::Err;
    #[inline(always)]
    fn shape(&self) -> Shape<'_, T::Ok, T::Err> {
        (**self).shape()
    }
}

/// The value of `v` (what the expansion calls, at the expression's span, so
/// that a type that is not accepted is reported there).
#[inline(always)]
pub fn value<T: Value + ?Sized>(v: &T) -> RawValue {
    v.raw()
}

/// The shape of a return value (at the return type's span, as [`value`]).
#[inline(always)]
pub fn shape<T: Ret + ?Sized>(v: &T) -> Shape<'_, T::Ok, T::Err> {
    v.shape()
}

/// Runs `f`: how a `ret` fn runs its body. Taking `FnOnce` makes the closure
/// one, so the body may return borrows of what it captured (`&mut self`'s
/// data), as the fn itself could.
#[inline(always)]
pub fn call_once<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Inner values of a `Result`/`Option`: `(&&Inner(x)).inner()` is the value
/// of `x` when its type is a [`Plain`] type ([`InnerValue`]), and
/// [`RawValue::ABSENT`] for any other type ([`InnerOther`]), chosen by
/// method resolution (auto-ref) where the expansion names the concrete type.
pub struct Inner<'a, T>(pub &'a T);

/// See [`Inner`]: the inner value is one of the accepted types.
pub trait InnerValue {
    /// The inner value.
    fn inner(&self) -> RawValue;
}

impl<T: Plain> InnerValue for &Inner<'_, T> {
    #[inline(always)]
    fn inner(&self) -> RawValue {
        self.0.raw()
    }
}

/// See [`Inner`]: the inner value is of another type (only the variant is recorded).
pub trait InnerOther {
    /// [`RawValue::ABSENT`].
    fn inner(&self) -> RawValue;
}

impl<T> InnerOther for Inner<'_, T> {
    #[inline(always)]
    fn inner(&self) -> RawValue {
        RawValue::ABSENT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_keep_their_sign_and_bits() {
        assert_eq!(
            value(&-3i32),
            RawValue {
                bits: -3i64 as u64,
                len: 0,
                tag: tag::SIGNED
            }
        );
        assert_eq!(value(&u64::MAX).bits, u64::MAX);
        assert_eq!(value(&&7usize).tag, tag::UNSIGNED);
        assert_eq!(
            value(&true),
            RawValue {
                bits: 1,
                len: 0,
                tag: tag::BOOL
            }
        );
        assert_eq!(value(&'é').bits, 'é' as u64);
    }

    #[test]
    #[allow(clippy::needless_borrow)] // the auto-ref that picks the impl is the point
    fn inner_values_are_recorded_only_for_accepted_types() {
        #[allow(unused_imports)]
        use super::{InnerOther as _, InnerValue as _};
        let r: Result<u32, &str> = Ok(5);
        let v = match shape(&r) {
            Shape::Ok(o) => (&&Inner(o)).inner().in_variant(tag::OK),
            _ => unreachable!(),
        };
        assert_eq!(v.bits, 5);
        assert_eq!(v.tag, tag::OK | tag::UNSIGNED);
        let r: Result<u32, &str> = Err("no");
        let v = match shape(&r) {
            Shape::Err(e) => (&&Inner(e)).inner().in_variant(tag::ERR),
            _ => unreachable!(),
        };
        assert_eq!(
            v.tag,
            tag::ERR,
            "an &str inner value is not picked by type (only where the type spells `&'static str`)"
        );
    }

    #[test]
    fn a_static_str_is_its_address_and_length_and_cannot_be_forged() {
        static TEXT: &str = "bad digit";
        let v = value(&TEXT);
        assert_eq!(v.tag(), tag::STR);
        assert_eq!(v.bits(), TEXT.as_ptr() as usize as u64);
        assert_eq!(v.str_len(), 9);
        assert_eq!(value(&&TEXT), v);
        assert_eq!(v.in_variant(tag::ERR).str_len(), 9);
        assert_eq!(v.in_variant(tag::ERR).tag(), tag::ERR | tag::STR);
        assert!(RawValue::new(0x1000, tag::STR).is_absent());
        assert!(RawValue::new(0x1000, tag::SOME | tag::STR).is_absent());
        assert_eq!(RawValue::new(7, tag::UNSIGNED).bits(), 7);
        // Nor through a variant: it cannot change a value's type.
        let forged = RawValue::new(0x1000, tag::UNSIGNED).in_variant(tag::STR);
        assert_eq!(forged.tag(), tag::UNSIGNED);
    }
}
