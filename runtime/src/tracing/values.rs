//! A span's (or an event's) fields as the values of its call: the integer
//! and bool fields among the first [`SPAN_VALUES`] of its callsite, as
//! `fgtrace_core` values, visited without allocating.
//!
//! `tracing` gives a field's value through one of the [`Visit`] methods by
//! its type. Integers that fit 64 bits and bools are kept; strings, floats,
//! byte slices, errors and `Debug` values are not (a recorded value is 64
//! bits and a tag: an integer, a bool or a char; `tracing` has no char
//! fields), and leave their slot absent.

use super::sites::{Callsite, SPAN_VALUES};
use fgtrace_core::values::{tag, RawValue};
use std::fmt;
use tracing_core::field::{Field, Visit};

/// The values of one span or event, by slot.
pub(crate) type Values = [RawValue; SPAN_VALUES];

/// No value in any slot.
pub(crate) const NONE: Values = [RawValue::ABSENT; SPAN_VALUES];

/// Puts the fields it visits into their slots of `values`.
pub(crate) struct Collect<'a> {
    pub(crate) callsite: &'static Callsite,
    pub(crate) values: &'a mut Values,
}

impl Collect<'_> {
    #[inline]
    fn set(&mut self, field: &Field, bits: u64, tag: u8) {
        if let Some(slot) = self.callsite.slot(field.index()) {
            self.values[slot] = RawValue::new(bits, tag);
        }
    }
}

impl Visit for Collect<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, value, tag::UNSIGNED);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, value as u64, tag::SIGNED);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        if let Ok(v) = u64::try_from(value) {
            self.set(field, v, tag::UNSIGNED);
        }
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        if let Ok(v) = i64::try_from(value) {
            self.set(field, v as u64, tag::SIGNED);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, value as u64, tag::BOOL);
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
}

/// Records `event` as an instant marker of its callsite, with its values.
#[inline]
pub(crate) fn marker(callsite: &'static Callsite, event: &tracing_core::Event<'_>) {
    let mut values = NONE;
    if callsite.has_values() {
        event.record(&mut Collect {
            callsite,
            values: &mut values,
        });
    }
    fgtrace_core::probe::marker(&callsite.site, &values);
}
