//! The Poisson-subsampled Gaussian under replace-one neighbours: P = (1 − q)·μ + q·μ(· + 1)
//! against Q = (1 − q)·μ + q·μ(· − 1), μ = N(0, σ²) — the record drawn with probability
//! q contributes +1 under one dataset and −1 under the other (dp_accounting's `REPLACE`
//! adjacency; the pair is symmetric, so its two directions have one privacy loss
//! distribution).

use libm::erfc;

use super::mechanism::{standard_normal_quantile_of_log, LossCurve};

/// The pair above with noise multiplier `sigma` and rate `sampling_rate` (q > 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ReplaceGaussian {
    pub sigma: f64,
    pub sampling_rate: f64,
}

impl ReplaceGaussian {
    /// `P(X < x)` for X ~ μ(· − shift).
    fn cdf(&self, x: f64, shift: f64) -> f64 {
        0.5 * erfc(-(x - shift) / (self.sigma * std::f64::consts::SQRT_2))
    }

    /// The privacy loss `ln P(x)/Q(x)` at output x: decreasing in x.
    fn loss_at(&self, x: f64) -> f64 {
        let (q, s2) = (self.sampling_rate, self.sigma * self.sigma);
        // ln μ(x+1)/μ(x) = −(2x+1)/(2σ²) and ln μ(x−1)/μ(x) = (2x−1)/(2σ²).
        let log_mix = |v: f64| {
            if q == 1.0 {
                v
            } else if v > 0.0 {
                v + (q.ln() + ((1.0 - q) * (-v).exp() / q).ln_1p())
            } else {
                (q * v.exp_m1()).ln_1p()
            }
        };
        log_mix(-(2.0 * x + 1.0) / (2.0 * s2)) - log_mix((2.0 * x - 1.0) / (2.0 * s2))
    }

    /// The output x* where the loss equals ε. With `t = e^{x/σ²}`, `c = e^{−1/(2σ²)}` and
    /// `R = e^ε`, `P/Q = R` is `R q c t² + (R − 1)(1 − q) t − q c = 0`; its positive root,
    /// in the form without cancellation for either sign of `R − 1`, and in logarithms, so
    /// that neither `c` (small σ) nor `R` (large ε) leaves the range of a double.
    fn x_at_loss(&self, epsilon: f64) -> f64 {
        let (q, s2) = (self.sampling_rate, self.sigma * self.sigma);
        let log_c = -1.0 / (2.0 * s2);
        // b = (R − 1)(1 − q) and the discriminant's root, both scaled by e^{−m}.
        // |e^ε − 1| = e^{max(ε, 0)}·(1 − e^{−|ε|}).
        let log_b_abs = epsilon.max(0.0) + (-(-epsilon.abs()).exp()).ln_1p() + (1.0 - q).ln();
        let log_4rq2c2 = (4.0f64).ln() + epsilon + 2.0 * q.ln() + 2.0 * log_c;
        let m = log_b_abs.max(log_4rq2c2 / 2.0);
        let b = epsilon.signum() * (log_b_abs - m).exp();
        let root = ((2.0 * (log_b_abs - m)).exp() + (log_4rq2c2 - 2.0 * m).exp()).sqrt();
        let log_t = if b > 0.0 {
            (2.0 * q).ln() + log_c - m - (b + root).ln()
        } else {
            m + (root - b).ln() - (2.0 * q).ln() - epsilon - log_c
        };
        s2 * log_t
    }
}

impl LossCurve for ReplaceGaussian {
    /// `{L > ε} = {x < x*}`: `δ = P(x < x*) − e^ε Q(x < x*)`.
    fn delta(&self, epsilon: f64) -> f64 {
        let q = self.sampling_rate;
        let x = self.x_at_loss(epsilon);
        let below = |shift: f64| (1.0 - q) * self.cdf(x, 0.0) + q * self.cdf(x, shift);
        let r = epsilon.exp();
        // Where e^ε overflows, P(L > ε) bounds δ from above (pessimistic).
        let value = if r.is_finite() {
            below(-1.0) - r * below(1.0)
        } else {
            below(-1.0)
        };
        value.clamp(0.0, 1.0)
    }

    fn loss_bounds(&self, log_tail: f64) -> (f64, f64) {
        let z = standard_normal_quantile_of_log(log_tail);
        // Both components of both distributions: [z·σ − 1, −z·σ + 1].
        let (a, b) = (
            self.loss_at(z * self.sigma - 1.0),
            self.loss_at(1.0 - z * self.sigma),
        );
        (a.min(b), a.max(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x* inverts the loss, on both sides of ε = 0 and for q = 1; the loss falls in x.
    #[test]
    fn the_crossing_point_inverts_the_loss() {
        for &(sigma, q) in &[(0.5, 0.01), (1.0, 0.3), (0.8, 1.0), (2.0, 0.001)] {
            let pair = ReplaceGaussian {
                sigma,
                sampling_rate: q,
            };
            for eps in [-2.0, -0.1, 0.0, 0.05, 1.0, 4.0] {
                let x = pair.x_at_loss(eps);
                assert!(
                    (pair.loss_at(x) - eps).abs() < 1e-9,
                    "σ {sigma} q {q} ε {eps}"
                );
            }
            assert!(
                pair.loss_at(-1.0) > pair.loss_at(0.0) && pair.loss_at(0.0) > pair.loss_at(1.0)
            );
        }
    }

    /// Small noise and large losses stay in range: x* still inverts the loss where a
    /// direct evaluation of `c = e^{−1/(2σ²)}` or `e^ε` would underflow or overflow, and
    /// δ at a loss far beyond the sampled component's reach is about q (the
    /// distinguishable draw), never 0.
    #[test]
    fn small_noise_and_large_losses_stay_in_range() {
        let pair = ReplaceGaussian {
            sigma: 0.03,
            sampling_rate: 0.01,
        };
        for eps in [0.5, 50.0, 400.0] {
            let x = pair.x_at_loss(eps);
            let got = pair.loss_at(x);
            assert!((got - eps).abs() < 1e-6 * eps.max(1.0), "ε {eps}: {got}");
        }
        let d = pair.delta(1.0);
        assert!(d > 0.009 && d <= 0.01, "{d}");
    }

    /// Without sampling the pair is two Gaussians two apart: δ(ε) of the Gaussian with
    /// sensitivity 2, `Φ(1/σ − εσ/2) − e^ε Φ(−1/σ − εσ/2)`.
    #[test]
    fn without_sampling_it_is_the_gaussian_at_sensitivity_two() {
        let phi = |z: f64| 0.5 * erfc(-z / std::f64::consts::SQRT_2);
        let sigma = 1.3;
        let pair = ReplaceGaussian {
            sigma,
            sampling_rate: 1.0,
        };
        for eps in [0.0, 0.5, 1.0, 3.0] {
            let want = phi(1.0 / sigma - eps * sigma / 2.0)
                - eps.exp() * phi(-1.0 / sigma - eps * sigma / 2.0);
            assert!((pair.delta(eps) - want).abs() < 1e-14, "{eps}");
        }
    }
}
