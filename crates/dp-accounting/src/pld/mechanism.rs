//! Exact hockey-stick curves of (Poisson-subsampled) additive-noise mechanisms, and their
//! pessimistic connect-the-dots discretisation.

// libm's erfc (FreeBSD msun port) is accurate to ~1 ulp; statrs' is off by up to ~4e-11
// relative in the moderate tail, which shows in the 10th digit of ε.
use libm::erfc;

use super::pmf::{LossPmf, MAX_GRID_POINTS};
use crate::error::{Error, Result};
use crate::logspace::log_ndtr;

/// Which of the two neighbouring pairs of a subsampled mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// (M(D), M(D′)) with D′ = D minus one record: P is the mixture
    /// `(1−q)·μ(x) + q·μ(x−Δ)`, Q is `μ(x)`.
    Remove,
    /// D′ = D plus one record: P is `μ(x)`, Q the mixture.
    Add,
}

/// A pair of output distributions (P, Q) whose privacy loss is monotone in the output:
/// its exact hockey-stick curve and the loss range that holds all but a tail of the noise.
pub(crate) trait LossCurve: std::fmt::Debug {
    /// `δ(ε) = sup_S P(S) − e^ε Q(S)`.
    fn delta(&self, epsilon: f64) -> f64;
    /// The losses outside which the noise puts at most `e^{log_tail}` mass on either side.
    fn loss_bounds(&self, log_tail: f64) -> (f64, f64);
}

/// The noise of an additive mechanism with sensitivity 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Noise {
    Gaussian { sigma: f64 },
    Laplace { scale: f64 },
}

/// An additive-noise mechanism on a Poisson sample with rate q (q = 1: no sampling).
///
/// In both directions the privacy loss is monotone in the output x, so
/// `δ(ε) = P(L > ε) − e^ε Q(L > ε)` with `{L > ε}` a half-line `{x > x*}` (remove) or
/// `{x < x*}` (add), where the likelihood ratio `r(x) = 1 − q + q·μ(x−1)/μ(x)` crosses
/// `e^{±ε}`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SubsampledMechanism {
    pub noise: Noise,
    pub sampling_rate: f64,
    pub direction: Direction,
}

impl SubsampledMechanism {
    /// Survival function `P_{μ(·−shift)}(X > x)`.
    fn survival(&self, x: f64, shift: f64) -> f64 {
        match self.noise {
            Noise::Gaussian { sigma } => {
                0.5 * erfc((x - shift) / (sigma * std::f64::consts::SQRT_2))
            }
            Noise::Laplace { scale } => {
                let z = (x - shift) / scale;
                if z >= 0.0 {
                    0.5 * (-z).exp()
                } else {
                    1.0 - 0.5 * z.exp()
                }
            }
        }
    }

    fn cdf(&self, x: f64, shift: f64) -> f64 {
        match self.noise {
            Noise::Gaussian { sigma } => {
                0.5 * erfc(-(x - shift) / (sigma * std::f64::consts::SQRT_2))
            }
            Noise::Laplace { .. } => 1.0 - self.survival(x, shift),
        }
    }

    /// `ln(μ(x−1)/μ(x))`, the unsampled log-likelihood ratio, and its range.
    fn log_ratio_range(&self) -> (f64, f64) {
        match self.noise {
            Noise::Gaussian { .. } => (f64::NEG_INFINITY, f64::INFINITY),
            Noise::Laplace { scale } => (-1.0 / scale, 1.0 / scale),
        }
    }

    /// The x where the unsampled log ratio equals `log_ratio` (inverse of the ratio).
    fn x_at_log_ratio(&self, log_ratio: f64) -> f64 {
        match self.noise {
            // (2x − 1)/(2σ²) = v  ⇒  x = σ² v + 1/2.
            Noise::Gaussian { sigma } => sigma * sigma * log_ratio + 0.5,
            // (|x| − |x − 1|)/b = v on [0, 1]  ⇒  x = (b v + 1)/2.
            Noise::Laplace { scale } => ((scale * log_ratio + 1.0) / 2.0).clamp(0.0, 1.0),
        }
    }

    /// `ln((y − 1 + q)/q)`: the unsampled log ratio at which the sampled ratio equals y.
    fn unsampled_log_ratio(&self, y_minus_one: f64) -> f64 {
        let q = self.sampling_rate;
        ((y_minus_one + q) / q).ln()
    }

    /// The exact hockey-stick divergence `δ(ε) = sup_S P(S) − e^ε Q(S)`.
    fn hockey_stick(&self, epsilon: f64) -> f64 {
        let q = self.sampling_rate;
        let (lo, hi) = self.log_ratio_range();
        let value = match self.direction {
            Direction::Remove => {
                // L(x) = ln r(x), increasing; L > ε ⇔ x > x*.
                let em1 = epsilon.exp_m1();
                if em1.is_infinite() {
                    // e^ε overflows (ε > 709): v = ε − ln q + ln(1 − (1−q)e^{−ε}) ≈ ε − ln q,
                    // and δ ≤ P(L > ε), the pessimistic value when e^ε Q(L > ε) is out
                    // of range.
                    let v = epsilon - q.ln();
                    if v >= hi {
                        return 0.0;
                    }
                    let x = self.x_at_log_ratio(v);
                    let above = (1.0 - q) * self.survival(x, 0.0) + q * self.survival(x, 1.0);
                    return above.clamp(0.0, 1.0);
                }
                if em1 + q <= 0.0 || self.unsampled_log_ratio(em1) < lo {
                    return -em1; // every x has L > ε: δ = 1 − e^ε
                }
                let v = self.unsampled_log_ratio(em1);
                if v >= hi {
                    return 0.0;
                }
                let x = self.x_at_log_ratio(v);
                // (1−q)S₀ + qS₁ − e^ε S₀ = q S₁ − (e^ε − 1 + q) S₀.
                q * self.survival(x, 1.0) - (em1 + q) * self.survival(x, 0.0)
            }
            Direction::Add => {
                // L(x) = −ln r(x), decreasing; L > ε ⇔ r(x) < e^{−ε} ⇔ x < x*.
                let em1 = (-epsilon).exp_m1();
                if em1 + q <= 0.0 {
                    return 0.0;
                }
                let v = self.unsampled_log_ratio(em1);
                if v <= lo {
                    return 0.0;
                }
                if v > hi {
                    return -epsilon.exp_m1();
                }
                let x = self.x_at_log_ratio(v);
                let f0 = self.cdf(x, 0.0);
                let f1 = self.cdf(x, 1.0);
                f0 - epsilon.exp() * ((1.0 - q) * f0 + q * f1)
            }
        };
        value.clamp(0.0, 1.0)
    }

    /// The privacy loss at output x.
    fn loss_at(&self, x: f64) -> f64 {
        let q = self.sampling_rate;
        let v = match self.noise {
            Noise::Gaussian { sigma } => (2.0 * x - 1.0) / (2.0 * sigma * sigma),
            Noise::Laplace { scale } => (x.abs() - (x - 1.0).abs()) / scale,
        };
        // ln(1 − q + q e^v), stably.
        let log_r = if q == 1.0 {
            v
        } else if v > 0.0 {
            v + (q.ln() + ((1.0 - q) * (-v).exp() / q).ln_1p())
        } else {
            (q * v.exp_m1()).ln_1p()
        };
        match self.direction {
            Direction::Remove => log_r,
            Direction::Add => -log_r,
        }
    }

    /// The range of losses outside which the noise puts at most `e^{log_tail}` mass on
    /// either side.
    fn loss_range(&self, log_tail: f64) -> (f64, f64) {
        let (x_lo, x_hi) = match self.noise {
            Noise::Gaussian { sigma } => {
                let z = standard_normal_quantile_of_log(log_tail);
                (z * sigma, 1.0 - z * sigma)
            }
            // The Laplace loss is constant outside [0, 1].
            Noise::Laplace { .. } => (0.0, 1.0),
        };
        let (a, b) = (self.loss_at(x_lo), self.loss_at(x_hi));
        (a.min(b), a.max(b))
    }
}

impl LossCurve for SubsampledMechanism {
    fn delta(&self, epsilon: f64) -> f64 {
        self.hockey_stick(epsilon)
    }

    fn loss_bounds(&self, log_tail: f64) -> (f64, f64) {
        self.loss_range(log_tail)
    }
}

/// Pessimistic connect-the-dots discretisation on the grid `interval·ℤ`.
///
/// # Privacy
/// Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022 (PETS, arXiv 2207.04380),
/// Thm 4.2: the discrete PLD supported on grid points ε₀ < … < εₙ whose δ(ε) equals
/// the mechanism's at every grid point is piecewise linear in e^ε between them, and
/// therefore dominates the true curve (δ(ε) is convex in e^ε). Below ε₀ the line to
/// (e^ε = 0, δ = 1) and above εₙ the constant δ(εₙ), moved to +∞, are also
/// pessimistic, so truncation never reduces δ.
pub(crate) fn connect_the_dots(
    curve: &impl LossCurve,
    interval: f64,
    log_tail: f64,
) -> Result<LossPmf> {
    let (lo_loss, hi_loss) = curve.loss_bounds(log_tail);
    let points = (hi_loss - lo_loss) / interval;
    if !(points.is_finite() && points < MAX_GRID_POINTS as f64) {
        return Err(Error::Numerical(format!(
            "the privacy loss of {curve:?} spans [{lo_loss}, {hi_loss}], more than {MAX_GRID_POINTS} \
             grid points at interval {interval}; use a coarser value_discretization_interval"
        )));
    }
    let lower = (lo_loss / interval).floor() as i64;
    let upper = ((hi_loss / interval).ceil() as i64).max(lower + 1);
    let n = (upper - lower + 1) as usize;
    let eps: Vec<f64> = (0..n)
        .map(|i| (lower + i as i64) as f64 * interval)
        .collect();
    let deltas: Vec<f64> = eps.iter().map(|&e| curve.delta(e)).collect();
    // B_j = (δ_j − δ_{j+1})/(e^{ε_{j+1}} − e^{ε_j}) is Σ_{i>j} p_i e^{−ε_i};
    // p_j = e^{ε_j}(B_{j−1} − B_j), with B_{−1} = (1 − δ₀)e^{−ε₀} and B_n = 0.
    let mut slopes = Vec::with_capacity(n + 1);
    slopes.push((1.0 - deltas[0]) * (-eps[0]).exp());
    for j in 0..n - 1 {
        let de = eps[j + 1].exp() - eps[j].exp();
        slopes.push(((deltas[j] - deltas[j + 1]) / de).max(0.0));
    }
    slopes.push(0.0);
    let probs: Vec<f64> = (0..n)
        .map(|j| (eps[j].exp() * (slopes[j] - slopes[j + 1])).max(0.0))
        .collect();
    Ok(LossPmf {
        interval,
        lower,
        probs,
        infinity_mass: deltas[n - 1],
    })
}

/// z with `ln Φ(z) = log_p` (z < 0), by bisection on the accurate `ln Φ`.
pub(crate) fn standard_normal_quantile_of_log(log_p: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0, 0.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if log_ndtr(mid) < log_p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The worst-case discretised PLD of an (ε, δ)-DP mechanism: randomized response, whose
/// loss is ±ε (rounded up to the grid) with masses (1−δ)e^ε/(1+e^ε) and (1−δ)/(1+e^ε),
/// plus δ at +∞.
///
/// # Privacy
/// Kairouz, Oh, Viswanath 2015 (ICML, arXiv 1311.0776) Thm 2.1: every (ε, δ)-DP
/// mechanism is a post-processing of this randomized response, so its PLD dominates.
pub(crate) fn epsilon_delta_pmf(epsilon: f64, delta: f64, interval: f64) -> Result<LossPmf> {
    if 2.0 * epsilon / interval >= MAX_GRID_POINTS as f64 {
        return Err(Error::Numerical(format!(
            "epsilon {epsilon} spans more than {MAX_GRID_POINTS} grid points at interval {interval}"
        )));
    }
    let up = |x: f64| (x / interval).ceil() as i64;
    let (lo_idx, hi_idx) = (up(-epsilon), up(epsilon));
    let n = (hi_idx - lo_idx + 1) as usize;
    let mut probs = vec![0.0; n];
    let e = epsilon.exp();
    probs[0] += (1.0 - delta) / (1.0 + e);
    probs[n - 1] += (1.0 - delta) * e / (1.0 + e);
    Ok(LossPmf {
        interval,
        lower: lo_idx,
        probs,
        infinity_mass: delta,
    })
}
