//! The statistics of one series of durations in bounded memory: count,
//! total, min, max, an exact variance and percentiles from a log-linear
//! histogram.

use std::collections::BTreeMap;

/// Unsigned 256-bit numbers as (high, low) halves: just what an exact
/// variance needs.
mod wide {
    pub type U256 = (u128, u128);

    /// `a * b`, exactly.
    pub fn mul(a: u128, b: u128) -> U256 {
        let (a1, a0) = (a >> 64, a & u128::from(u64::MAX));
        let (b1, b0) = (b >> 64, b & u128::from(u64::MAX));
        let (mid, carry_mid) = (a0 * b1).overflowing_add(a1 * b0);
        let (lo, carry_lo) = (a0 * b0).overflowing_add(mid << 64);
        let hi = a1 * b1 + (mid >> 64) + (u128::from(carry_mid) << 64) + u128::from(carry_lo);
        (hi, lo)
    }

    /// `a - b`, or 0 when `b` is larger.
    pub fn sub(a: U256, b: U256) -> U256 {
        if a < b {
            return (0, 0);
        }
        let (lo, borrow) = a.1.overflowing_sub(b.1);
        (a.0 - b.0 - u128::from(borrow), lo)
    }

    pub fn to_f64(a: U256) -> f64 {
        a.0 as f64 * 2f64.powi(128) + a.1 as f64
    }
}

/// Log-linear histogram for percentiles in bounded memory: values below 128 ns
/// are exact; above, each power of two is split in 64 buckets, so a bucket is
/// at most 1/64 of its lower bound wide and its midpoint is within 1/128
/// (0.8%) of any value in it. The midpoint is then clamped to the smallest and
/// largest value the bucket saw, which only brings it closer (and makes it
/// exact when the bucket holds one distinct value). Buckets are stored
/// sparsely: memory grows with the spread of a function's durations, not
/// with its number of calls.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Counts of the exact values below [`Histogram::EXACT`], by value,
    /// grown to the largest seen (most calls of small functions land
    /// here: no tree walk for them).
    exact: Vec<u64>,
    /// The buckets above.
    buckets: BTreeMap<u16, Bucket>,
    n: u64,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    count: u64,
    min: u64,
    max: u64,
}

impl Histogram {
    const EXACT: u64 = 128;
    const SUB_BITS: u32 = 6;

    /// Counts one duration `v` (nanoseconds).
    pub fn add(&mut self, v: u64) {
        if v < Self::EXACT {
            let i = v as usize;
            if self.exact.len() <= i {
                self.exact.resize(i + 1, 0);
            }
            self.exact[i] += 1;
            self.n += 1;
            return;
        }
        let b = self.buckets.entry(Self::index(v)).or_insert(Bucket {
            count: 0,
            min: v,
            max: v,
        });
        b.count += 1;
        b.min = b.min.min(v);
        b.max = b.max.max(v);
        self.n += 1;
    }

    /// Adds every value of `o`.
    pub fn merge(&mut self, o: &Histogram) {
        if self.exact.len() < o.exact.len() {
            self.exact.resize(o.exact.len(), 0);
        }
        for (a, b) in self.exact.iter_mut().zip(&o.exact) {
            *a += b;
        }
        for (&i, b) in &o.buckets {
            match self.buckets.entry(i) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(*b);
                }
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    let m = e.get_mut();
                    m.count += b.count;
                    m.min = m.min.min(b.min);
                    m.max = m.max.max(b.max);
                }
            }
        }
        self.n += o.n;
    }

    pub(super) fn index(v: u64) -> u16 {
        if v < Self::EXACT {
            return v as u16;
        }
        let e = 63 - v.leading_zeros(); // >= 7
        let sub = (v >> (e - Self::SUB_BITS)) & ((1 << Self::SUB_BITS) - 1);
        (Self::EXACT + (e as u64 - 7) * (1 << Self::SUB_BITS) + sub) as u16
    }

    /// The midpoint of bucket `i`.
    pub(super) fn midpoint(i: u16) -> u64 {
        let i = i as u64;
        if i < Self::EXACT {
            return i;
        }
        let e = (i - Self::EXACT) / (1 << Self::SUB_BITS) + 7;
        let sub = (i - Self::EXACT) % (1 << Self::SUB_BITS);
        let shift = e as u32 - Self::SUB_BITS;
        let lo = ((1 << Self::SUB_BITS) + sub) << shift;
        lo + ((1u64 << shift) >> 1)
    }

    /// How many values were added.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether no value was added.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Every occupied bucket in increasing order as (a value standing for
    /// the bucket, within 1% of each of its values, and its count): exact
    /// values below 128 ns, above them the bucket's midpoint clamped to the
    /// smallest and largest value it saw.
    pub fn counts(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let exact = self
            .exact
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c > 0)
            .map(|(v, &c)| (v as u64, c));
        let buckets = self
            .buckets
            .iter()
            .map(|(&i, b)| (Self::midpoint(i).clamp(b.min, b.max), b.count));
        exact.chain(buckets)
    }

    /// Nearest-rank quantile (`q` in 0..=1): the value of rank ceil(q n), within 1%.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (v, &count) in self.exact.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return v as u64;
            }
        }
        for (&i, b) in &self.buckets {
            seen += b.count;
            if seen >= rank {
                return Self::midpoint(i).clamp(b.min, b.max);
            }
        }
        0
    }
}

/// Streaming accumulator of one duration series.
///
/// The variance comes from exact integer sums (of the durations and of
/// their squares), so it does not depend on the order the durations came
/// in: a series accumulated in parts on several cores and merged gives the
/// same figure, to the bit, as one accumulated in order.
#[derive(Clone, Debug, Default)]
pub(super) struct Durations {
    pub(super) n: u64,
    pub(super) total: u64,
    pub(super) min: u64,
    pub(super) max: u64,
    /// Σx and Σx² (the latter saturates past 2^128 ns², a sum no real
    /// series reaches: 2^28 calls of 12 days each).
    sum: u128,
    sum_sq: u128,
    hist: Histogram,
}

impl Durations {
    pub(super) fn add(&mut self, ns: u64) {
        self.min = if self.n == 0 { ns } else { self.min.min(ns) };
        self.max = self.max.max(ns);
        self.n += 1;
        self.total = self.total.saturating_add(ns);
        let x = u128::from(ns);
        self.sum += x;
        self.sum_sq = self.sum_sq.saturating_add(x * x);
        self.hist.add(ns);
    }

    /// Adds another series of the same function.
    pub(super) fn merge(&mut self, o: &Durations) {
        if o.n == 0 {
            return;
        }
        self.min = if self.n == 0 {
            o.min
        } else {
            self.min.min(o.min)
        };
        self.max = self.max.max(o.max);
        self.n += o.n;
        self.total = self.total.saturating_add(o.total);
        self.sum += o.sum;
        self.sum_sq = self.sum_sq.saturating_add(o.sum_sq);
        self.hist.merge(&o.hist);
    }

    /// The sample variance, (nΣx² − (Σx)²) / (n(n − 1)), its numerator
    /// computed exactly in 256 bits.
    pub(super) fn variance(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = u128::from(self.n);
        let num = wide::sub(wide::mul(n, self.sum_sq), wide::mul(self.sum, self.sum));
        wide::to_f64(num) / (self.n as f64 * (self.n - 1) as f64)
    }

    pub(super) fn quantile(&self, q: f64) -> u64 {
        self.hist.quantile(q)
    }
}
