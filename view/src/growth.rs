//! Cost against size: a power-law fit of a measure (duration, allocations,
//! instructions) against a recorded value, `y ~ c * x^k`, by least squares
//! on `ln y = ln c + k ln x`.
//!
//! The fit is taken over the smallest measure of each distinct `x` (the
//! fastest call of each size): preemption and cache misses only ever add
//! time, so the minimum is the run closest to the code's own cost, and the
//! sizes count equally however many calls each has. Points with `x <= 0` or
//! `y <= 0` have no logarithm and are left out (counted in [`Fit::left_out`]).

/// `y ~ coef * x^exponent`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// The fitted exponent `k`.
    pub exponent: f64,
    /// The fitted coefficient `c`.
    pub coef: f64,
    /// Coefficient of determination of the log-log line (1 = exact).
    pub r2: f64,
    /// Distinct `x` values the fit used.
    pub sizes: usize,
    /// Points without a logarithm (`x <= 0` or `y <= 0`).
    pub left_out: usize,
}

impl Fit {
    /// What the fit predicts at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.coef * x.powf(self.exponent)
    }

    /// `duration ~ len^1.02 (r² 0.99)`.
    pub fn describe(&self, measure: &str, value: &str) -> String {
        format!(
            "{measure} ~ {value}^{:.2} (r\u{b2} {:.2}, {} sizes)",
            self.exponent, self.r2, self.sizes
        )
    }
}

/// Fits `points` (`(x, y)`); `None` with fewer than two distinct usable `x`.
pub fn fit_power(points: &[(f64, f64)]) -> Option<Fit> {
    let mut usable: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(x, y)| x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
        .collect();
    let left_out = points.len() - usable.len();
    usable.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    usable.dedup_by(|b, a| a.0 == b.0); // keeps the first (smallest y) of each x
    if usable.len() < 2 {
        return None;
    }
    let n = usable.len() as f64;
    let lx: Vec<f64> = usable.iter().map(|p| p.0.ln()).collect();
    let ly: Vec<f64> = usable.iter().map(|p| p.1.ln()).collect();
    let mx = lx.iter().sum::<f64>() / n;
    let my = ly.iter().sum::<f64>() / n;
    let sxx: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
    let syy: f64 = ly.iter().map(|y| (y - my) * (y - my)).sum();
    if sxx == 0.0 {
        return None;
    }
    let k = sxy / sxx;
    let b = my - k * mx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        (sxy * sxy) / (sxx * syy)
    };
    Some(Fit {
        exponent: k,
        coef: b.exp(),
        r2,
        sizes: usable.len(),
        left_out,
    })
}

/// Indexes of the `n` points furthest above the fit (by `y / predicted`),
/// furthest first, with that ratio.
pub fn furthest_above(points: &[(f64, f64)], fit: &Fit, n: usize) -> Vec<(usize, f64)> {
    let mut r: Vec<(usize, f64)> = points
        .iter()
        .enumerate()
        .filter(|(_, p)| p.0 > 0.0 && p.1 > 0.0)
        .map(|(i, p)| (i, p.1 / fit.at(p.0)))
        .filter(|&(_, ratio)| ratio > 1.0)
        .collect();
    r.sort_by(|a, b| b.1.total_cmp(&a.1));
    r.truncate(n);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_power_laws_are_found() {
        let lin: Vec<(f64, f64)> = (1..=10).map(|x| (x as f64, 3.0 * x as f64)).collect();
        let f = fit_power(&lin).unwrap();
        assert!(
            (f.exponent - 1.0).abs() < 1e-9 && (f.coef - 3.0).abs() < 1e-9,
            "{f:?}"
        );
        let quad: Vec<(f64, f64)> = (1..=10).map(|x| (x as f64, (x * x) as f64)).collect();
        assert!((fit_power(&quad).unwrap().exponent - 2.0).abs() < 1e-9);
    }

    #[test]
    fn slow_repeats_of_a_size_do_not_move_the_fit_and_are_the_outliers() {
        let mut pts: Vec<(f64, f64)> = (1..=10).map(|x| (x as f64, 2.0 * x as f64)).collect();
        pts.push((5.0, 1000.0)); // a preempted call
        pts.push((0.0, 5.0)); // no logarithm
        let f = fit_power(&pts).unwrap();
        assert!((f.exponent - 1.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.left_out, 1);
        assert_eq!(furthest_above(&pts, &f, 3)[0].0, 10);
        assert!(fit_power(&[(3.0, 1.0), (3.0, 2.0)]).is_none());
    }
}
