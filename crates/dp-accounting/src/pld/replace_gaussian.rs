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
    /// in the form without cancellation for either sign of `R − 1`.
    fn x_at_loss(&self, epsilon: f64) -> f64 {
        let (q, s2) = (self.sampling_rate, self.sigma * self.sigma);
        let c = (-1.0 / (2.0 * s2)).exp();
        let r = epsilon.exp();
        let b = epsilon.exp_m1() * (1.0 - q);
        let root = (b * b + 4.0 * r * q * q * c * c).sqrt();
        let t = if b > 0.0 {
            2.0 * q * c / (b + root)
        } else {
            (root - b) / (2.0 * r * q * c)
        };
        s2 * t.ln()
    }
}

impl LossCurve for ReplaceGaussian {
    /// `{L > ε} = {x < x*}`: `δ = P(x < x*) − e^ε Q(x < x*)`.
    fn delta(&self, epsilon: f64) -> f64 {
        let q = self.sampling_rate;
        let x = self.x_at_loss(epsilon);
        let below = |shift: f64| (1.0 - q) * self.cdf(x, 0.0) + q * self.cdf(x, shift);
        (below(-1.0) - epsilon.exp() * below(1.0)).clamp(0.0, 1.0)
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
